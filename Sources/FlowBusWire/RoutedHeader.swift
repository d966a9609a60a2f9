/// The routing part of a received message: its topic and envelope, decoded without touching
/// the body frames.
///
/// This is what a router needs to dispatch a message (kind, topic id, source, sequence); the
/// body is decoded later, only if needed, with ``WireMessage/decode(from:limits:)`` or
/// ``NamedMessageView/decode(from:limits:)``.
public struct RoutedHeader: Sendable, Hashable {
    /// Frame 0, the whole topic.
    public var topic: String
    /// The topic's prefix, which matches ``kind``.
    public var topicPrefix: Topic.Prefix
    /// The topic's id (after `<prefix>/`); empty for `status`.
    public var topicID: Substring
    /// Frame 1.
    public var envelope: Envelope

    /// The message kind (from the envelope).
    public var kind: MessageKind { envelope.kind }

    /// Decodes frames 0 and 1 and checks the message's outline.
    ///
    /// Checks: at least 2 and at most `limits.maxFrames` frames, no frame over
    /// `limits.maxFrameBytes` (`oversize`); a UTF-8 topic of 1...`maxTopicBytes` bytes with a known
    /// prefix and a non-empty id; a valid envelope; the topic prefix matching the kind
    /// (`malformed`). The number of body frames is checked by the full decoders.
    /// - Parameter texts: Where topics and sources seen before are kept, so that decoding allocates no new text.
    public static func decode(
        from buffer: FrameBuffer, limits: WireLimits = .default, texts: TextInterner? = nil
    ) throws(WireError) -> RoutedHeader {
        if buffer.count < 2 {
            throw .malformed("message has \(buffer.count) frame(s), at least 2 (topic, envelope) expected")
        }
        if buffer.count > limits.maxFrames {
            throw WireError(.oversize, "message has \(buffer.count) frames, at most \(limits.maxFrames) allowed")
        }
        for index in 0..<buffer.count where buffer.frameSize(index) > limits.maxFrameBytes {
            throw WireError(
                .oversize, "frame \(index) is \(buffer.frameSize(index)) bytes, at most \(limits.maxFrameBytes) allowed"
            )
        }
        let topic = try buffer.withFrame(0) { (raw) throws(WireError) in
            try decodeText(raw, field: "topic", min: 1, max: limits.maxTopicBytes, texts: texts)
        }
        let envelope = try buffer.withFrame(1) { (raw) throws(WireError) in
            try Envelope.decode(raw, limits: limits, texts: texts)
        }
        guard let (prefix, idStart) = Topic.parsePrefix(topic.utf8) else {
            throw .malformed("topic \(quoted(topic)) has no known prefix with an id")
        }
        let expected = envelope.kind.topicPrefix
        if prefix != expected {
            throw .malformed(
                "topic \(quoted(topic)) does not match kind \(envelope.kind) (\(expected.hasID ? expected.rawValue + "/<id>" : expected.rawValue) expected)"
            )
        }
        return RoutedHeader(topic: topic, topicPrefix: prefix, topicID: topic[idStart...], envelope: envelope)
    }

    /// Checks that the message has exactly the frame count of its kind, or one more for a kind
    /// that may carry a trace frame.
    func requireFrameCount(_ buffer: FrameBuffer) throws(WireError) {
        let expected = kind.frameCount
        // A status request may carry a params frame (PROTOCOL.md §4.3).
        if kind == .statusRequest, buffer.count == expected + 1 { return }
        if kind.carriesTraceContext, buffer.count == expected + 1 { return }
        if buffer.count != expected {
            let allowed =
                kind.carriesTraceContext ? "\(expected) (or \(expected + 1) with a trace frame)" : "\(expected)"
            throw .malformed("\(kind) message has \(buffer.count) frames, \(allowed) expected")
        }
    }

    /// The message's trace context: its trace frame, when it has a non-empty one.
    /// - Throws: `malformed` or `oversize` for a trace frame that is not W3C Trace Context.
    public func traceContext(in buffer: FrameBuffer) throws(WireError) -> TraceContext? {
        let index = kind.frameCount
        guard kind.carriesTraceContext, buffer.count == index + 1, buffer.frameSize(index) > 0 else { return nil }
        return try buffer.withFrame(index) { (raw) throws(WireError) in try TraceContext(frame: raw) }
    }
}

/// A body value kept as raw bytes with its content type, decoded on demand.
///
/// The bytes share the received ``FrameBuffer``'s storage. Keeping a payload while the buffer is
/// reused makes the buffer copy its storage once (copy on write); decode or copy what you keep.
public struct WirePayload: Sendable, Hashable {
    /// How ``bytes`` are encoded.
    public var contentType: ContentType
    /// The raw frame.
    public var bytes: ArraySlice<UInt8>

    /// Wraps raw bytes.
    public init(contentType: ContentType, bytes: ArraySlice<UInt8>) {
        self.contentType = contentType
        self.bytes = bytes
    }

    /// Whether the frame is empty (for params: no params).
    public var isEmpty: Bool { bytes.isEmpty }

    /// Decodes the value.
    /// - Throws: `malformed` for an empty frame, a frame with content type none, or a value
    ///   that does not decode.
    public func decodeValue(limits: WireLimits = .default) throws(WireError) -> WireValue {
        try decodeBodyValue(bytes, contentType: contentType, maxDepth: limits.maxDepth)
    }

    /// Decodes params: an empty frame is no params, anything else must be a map.
    /// - Throws: `bad-params` when the frame does not decode or is not a map.
    public func decodeParams(limits: WireLimits = .default) throws(WireError) -> WireParams {
        if bytes.isEmpty { return [:] }
        let value: WireValue
        do {
            value = try decodeBodyValue(bytes, contentType: contentType, maxDepth: limits.maxDepth)
        } catch {
            throw error.withReason(.badParams)
        }
        guard case .map(let params) = value else {
            throw WireError(.badParams, "params are \(kindName(value)), a map expected")
        }
        return params
    }

    /// Decodes the params (or value) into a `Decodable` type with ``WireValueDecoder``.
    public func decode<T: Decodable>(_ type: T.Type, limits: WireLimits = .default) throws -> T {
        let value: WireValue = bytes.isEmpty ? .map([:]) : try decodeValue(limits: limits)
        return try WireValueDecoder().decode(type, from: value)
    }
}

func decodeBodyValue(_ bytes: ArraySlice<UInt8>, contentType: ContentType, maxDepth: Int) throws(WireError) -> WireValue
{
    switch contentType {
    case .none:
        throw .malformed("a \(bytes.count)-byte value frame with content type none")
    case .json:
        return try WireJSON.decode(bytes, maxDepth: maxDepth)
    case .fbv:
        if bytes.isEmpty { throw .malformed("FBV value is empty") }
        return try FBV.decode(bytes, maxDepth: maxDepth)
    }
}

/// A step, deep link or action with its name decoded and its params left raw: the fast path
/// for routers and reactors that look at the name first.
public struct NamedMessageView: Sendable, Hashable {
    /// Topic and envelope.
    public var header: RoutedHeader
    /// The step or action name (frame 2), validated.
    public var name: String
    /// The params frame (frame 3), not decoded.
    public var params: WirePayload
    /// The trace frame (frame 4), when the message has one.
    public var traceContext: TraceContext?

    /// Decodes a step, deep link or action without decoding its params.
    /// - Throws: `malformed` if the message is of another kind, has the wrong number of frames
    ///   or an invalid name; see ``RoutedHeader/decode(from:limits:texts:)``.
    public static func decode(
        from buffer: FrameBuffer, limits: WireLimits = .default
    ) throws(WireError) -> NamedMessageView {
        let header = try RoutedHeader.decode(from: buffer, limits: limits)
        return try decode(from: buffer, header: header, limits: limits)
    }

    /// Decodes the name of a step, deep link or action whose header is already decoded.
    /// - Parameter texts: Where names seen before are kept, so that decoding allocates no new text.
    public static func decode(
        from buffer: FrameBuffer, header: RoutedHeader, limits: WireLimits = .default, texts: TextInterner? = nil
    ) throws(WireError) -> NamedMessageView {
        switch header.kind {
        case .step, .deepLink, .action: break
        default: throw .malformed("\(header.kind) message is not a step, deep link or action")
        }
        try header.requireFrameCount(buffer)
        let name = try buffer.name(2, field: "\(header.kind) name", limits: limits, texts: texts)
        if header.kind == .deepLink, header.topicID != name {
            throw .malformed("deep link topic \(quoted(header.topic)) does not match its name \(quoted(name))")
        }
        return NamedMessageView(
            header: header, name: name,
            params: WirePayload(contentType: header.envelope.contentType, bytes: buffer.frameBytes(3)),
            traceContext: try header.traceContext(in: buffer))
    }
}

// MARK: - Frame reading helpers

extension FrameBuffer {
    func text(_ index: Int, field: @autoclosure () -> String, min: Int, max: Int) throws(WireError) -> String {
        try withFrame(index) { (raw) throws(WireError) in
            try decodeText(raw, field: "\(field()) (frame \(index))", min: min, max: max)
        }
    }

    func name(
        _ index: Int, field: @autoclosure () -> String, limits: WireLimits, texts: TextInterner? = nil
    ) throws(WireError) -> String {
        try withFrame(index) { (raw) throws(WireError) in
            // Built only for an error: this runs for every step and action.
            func label() -> String { "\(field()) (frame \(index))" }
            if raw.isEmpty { throw .malformed("\(label()) is empty") }
            if raw.count > limits.maxNameBytes {
                throw WireError(.oversize, "\(label()) is \(raw.count) bytes, at most \(limits.maxNameBytes) allowed")
            }
            for (offset, byte) in raw.enumerated() where !isNameByte(byte) {
                throw .malformed(
                    "\(label()) has byte 0x\(WireHex.string([byte])) at offset \(offset), only [A-Za-z0-9_.:-] allowed")
            }
            return texts?.text(raw) ?? String(decoding: raw, as: UTF8.self)
        }
    }

    func value(_ index: Int, contentType: ContentType, limits: WireLimits) throws(WireError) -> WireValue {
        do {
            return try decodeBodyValue(frameBytes(index), contentType: contentType, maxDepth: limits.maxDepth)
        } catch {
            throw error.prefixed("frame \(index): ")
        }
    }

    func params(_ index: Int, contentType: ContentType, limits: WireLimits) throws(WireError) -> WireParams {
        do {
            return try WirePayload(contentType: contentType, bytes: frameBytes(index)).decodeParams(limits: limits)
        } catch {
            throw error.prefixed("frame \(index): ")
        }
    }
}

/// What can be read of a message that failed ``RoutedHeader/decode(from:limits:texts:)``: its source
/// and sequence when frame 1 is a version-1 envelope whose layout and source are sound, and its
/// topic when frame 0 is text. A receiver judges such a message by the sequence ledger and
/// acknowledges its refusal (PROTOCOL.md §4.4); without them it cannot.
public struct ReadableEnvelope: Sendable, Hashable {
    public var source: String
    public var sequence: UInt64
    public var topic: String?

    /// Frame 0 as text, when it is UTF-8 of a sane size (for a refusal's details), whatever the
    /// rest of the message is.
    public static func topic(of buffer: FrameBuffer) -> String? {
        guard buffer.count >= 1 else { return nil }
        return buffer.withFrame(0) { bytes in bytes.count <= 1024 ? validUTF8(bytes) : nil }
    }

    /// Reads what can be trusted, or nil.
    public init?(salvaging buffer: FrameBuffer, limits: WireLimits = .default) {
        guard buffer.count >= 2 else { return nil }
        let read: (source: String, sequence: UInt64)? = buffer.withFrame(1) { bytes in
            guard bytes.count >= Envelope.minimumSize, bytes[0] == Envelope.currentVersion else { return nil }
            let sourceCount = Int(bytes[Envelope.fixedSize - 1])
            guard sourceCount > 0, sourceCount <= limits.maxSourceBytes,
                bytes.count == Envelope.fixedSize + sourceCount,
                !containsNUL(UnsafeRawBufferPointer(rebasing: bytes[Envelope.fixedSize...])),
                let source = validUTF8(UnsafeRawBufferPointer(rebasing: bytes[Envelope.fixedSize...]))
            else { return nil }
            var sequence: UInt64 = 0
            for byte in bytes[4..<12] { sequence = sequence << 8 | UInt64(byte) }
            return (source, sequence)
        }
        guard let read else { return nil }
        source = read.source
        sequence = read.sequence
        topic = Self.topic(of: buffer)
    }
}
