/// A request for the events flowd kept after a sequence (PROTOCOL.md §4.6), on `control`.
///
/// Frames: 0 `replay`, 1 envelope, 2 params: `since` (int ≥ 0: the last event sequence the
/// requester has; 0 for all that is kept), `until` (the last event wanted; none: up to the
/// newest), `topics` (topic prefixes to include; all by default), `limit` (events in one reply,
/// 1 to ``maxLimit``).
public struct ReplayRequest: WireMessageEncodable, Hashable {
    /// The most events one reply carries.
    public static let maxLimit = 10_000
    /// Events in one reply when the request does not say.
    public static let defaultLimit = 1_000
    /// Topic prefixes one request may list.
    public static let maxTopics = 64

    /// The envelope (kind forced to `.replayRequest`; content type JSON when it says none).
    public var envelope: Envelope
    /// The last event sequence the requester has: events after it are replayed.
    public var since: UInt64
    /// The last event wanted (events a drop report named); nil: up to the newest.
    public var until: UInt64?
    /// Topic prefixes to include; empty: every event.
    public var topics: [String]
    /// Events in one reply, at most.
    public var limit: Int

    public init(
        envelope: Envelope, since: UInt64, until: UInt64? = nil, topics: [String] = [],
        limit: Int = ReplayRequest.defaultLimit
    ) {
        self.envelope = envelope
        self.since = since
        self.until = until
        self.topics = topics
        self.limit = limit
    }

    /// Reads a request's params.
    /// - Throws: `bad-params` for a missing or negative `since`, a `topics` that is not a list of
    ///   strings, a `limit` out of range.
    public init(envelope: Envelope, params: WireParams) throws(WireError) {
        guard case .int(let since) = params["since"], since >= 0 else {
            throw WireError(.badParams, "a replay request needs \"since\", an int ≥ 0 (0: every event kept)")
        }
        var until: UInt64?
        switch params["until"] {
        case nil, .null?:
            break
        case .int(let value)? where value > since:
            until = UInt64(value)
        default:
            throw WireError(.badParams, "replay \"until\" must be an int above \"since\"")
        }
        var topics: [String] = []
        switch params["topics"] {
        case nil, .null?:
            break
        case .list(let list)? where list.count > Self.maxTopics:
            // Each kept event is matched against every prefix: a long list would stall the daemon.
            throw WireError(.badParams, "replay \"topics\" lists \(list.count) prefixes, at most \(Self.maxTopics)")
        case .list(let list)?:
            for item in list {
                guard case .string(let topic) = item else {
                    throw WireError(.badParams, "replay \"topics\" must be a list of topic prefixes (strings)")
                }
                topics.append(topic)
            }
        default:
            throw WireError(.badParams, "replay \"topics\" must be a list of topic prefixes (strings)")
        }
        var limit = Self.defaultLimit
        switch params["limit"] {
        case nil, .null?:
            break
        case .int(let value)? where value >= 1 && value <= Int64(Self.maxLimit):
            limit = Int(value)
        default:
            throw WireError(.badParams, "replay \"limit\" must be an int from 1 to \(Self.maxLimit)")
        }
        self.init(envelope: envelope, since: UInt64(since), until: until, topics: topics, limit: limit)
    }

    public var kind: MessageKind { .replayRequest }
    public var topic: String { Topic.replay }

    /// The params frame's map.
    public var params: WireParams {
        var params: WireParams = ["since": .int(Int64(clamping: since)), "limit": .int(Int64(limit))]
        if !topics.isEmpty { params["topics"] = .list(topics.map { .string($0) }) }
        if let until { params["until"] = .int(Int64(clamping: until)) }
        return params
    }

    /// Whether an event of `topic` is asked for.
    public func includes(topic: UnsafeRawBufferPointer) -> Bool {
        if topics.isEmpty { return true }
        for prefix in topics {
            var prefix = prefix
            let matches = prefix.withUTF8 { prefix in
                prefix.count <= topic.count && zip(prefix, topic).allSatisfy { $0 == $1 }
            }
            if matches { return true }
        }
        return false
    }

    public func encode(into buffer: inout FrameBuffer) throws(WireError) {
        let contentType: ContentType = envelope.contentType == .none ? .json : envelope.contentType
        try buffer.writeMessage { (out) throws(WireError) in
            try out.writeTopic(.replay, id: "")
            try out.writeEnvelope(envelope, kind: kind, contentType: contentType)
            try out.writeValue(.map(params), contentType: contentType)
        }
    }
}

/// flowd's reply to a ``ReplayRequest`` (PROTOCOL.md §4.6).
///
/// Frames: 0 `replay`, 1 envelope, 2 a map (`since`, `until` when asked, `last`, `head`,
/// `oldest`, `count`, `more`), 3 the events, packed (``PackedEvents``).
public struct ReplayReply: WireMessageEncodable, Hashable {
    /// The envelope (kind forced to `.replay`; content type JSON when it says none).
    public var envelope: Envelope
    /// The request's `since`, and its `until` if it had one.
    public var since: UInt64
    public var until: UInt64?
    /// Where the requester goes on from: the last event this reply looked at (included or not).
    public var last: UInt64
    /// The newest event flowd has published.
    public var head: UInt64
    /// The oldest event kept (0: none kept).
    public var oldest: UInt64
    /// Whether events after ``last`` are kept: ask again with `since` = ``last``.
    public var more: Bool
    /// The events, in order.
    public var events: PackedEvents

    public init(
        envelope: Envelope, since: UInt64, until: UInt64? = nil, last: UInt64, head: UInt64, oldest: UInt64,
        more: Bool, events: PackedEvents
    ) {
        self.envelope = envelope
        self.since = since
        self.until = until
        self.last = last
        self.head = head
        self.oldest = oldest
        self.more = more
        self.events = events
    }

    /// Reads frame 2's map.
    init(envelope: Envelope, header: WireParams, events: PackedEvents) throws(WireError) {
        func number(_ key: String) throws(WireError) -> UInt64 {
            guard case .int(let value) = header[key], value >= 0 else {
                throw .malformed("replay reply (frame 2) has no int \"\(key)\" ≥ 0")
            }
            return UInt64(value)
        }
        guard case .bool(let more) = header["more"] else {
            throw .malformed("replay reply (frame 2) has no bool \"more\"")
        }
        let count = try number("count")
        guard count == UInt64(events.count) else {
            throw .malformed("replay reply says \(count) events, its frame 3 holds \(events.count)")
        }
        var until: UInt64?
        if header["until"] != nil { until = try number("until") }
        self.init(
            envelope: envelope, since: try number("since"), until: until, last: try number("last"),
            head: try number("head"), oldest: try number("oldest"), more: more, events: events)
    }

    public var kind: MessageKind { .replay }
    public var topic: String { Topic.replay }

    /// Frame 2's map.
    public var header: WireParams {
        var header: WireParams = [
            "since": .int(Int64(clamping: since)), "last": .int(Int64(clamping: last)),
            "head": .int(Int64(clamping: head)), "oldest": .int(Int64(clamping: oldest)),
            "count": .int(Int64(events.count)), "more": .bool(more),
        ]
        if let until { header["until"] = .int(Int64(clamping: until)) }
        return header
    }

    public func encode(into buffer: inout FrameBuffer) throws(WireError) {
        let contentType: ContentType = envelope.contentType == .none ? .json : envelope.contentType
        try buffer.writeMessage { (out) throws(WireError) in
            try out.writeTopic(.replay, id: "")
            try out.writeEnvelope(envelope, kind: kind, contentType: contentType)
            try out.writeValue(.map(header), contentType: contentType)
            out.append(frame: events.bytes)
        }
    }
}

/// Events as a replay reply carries them in one frame (PROTOCOL.md §4.6): for each, its event
/// sequence (u64, big-endian), its frame count (u8), then each frame as its length (u32,
/// big-endian) and its bytes — the message exactly as flowd published it.
public struct PackedEvents: Sendable, Hashable {
    public private(set) var bytes: [UInt8] = []
    public private(set) var count = 0

    public init() {}

    /// Reads a packed frame, checking that it is whole.
    public init(bytes: some Collection<UInt8>) throws(WireError) {
        self.bytes = Array(bytes)
        count = try self.bytes.withUnsafeBytes { raw -> Result<Int, WireError> in
            var count = 0
            var offset = 0
            while offset < raw.count {
                guard let event = Self.event(in: raw, at: offset) else {
                    return .failure(
                        .malformed("replayed events end in the middle of one (byte \(offset) of \(raw.count))"))
                }
                if event.frameCount < 2 {
                    return .failure(.malformed("a replayed event has \(event.frameCount) frames, at least 2 expected"))
                }
                offset = event.end
                count += 1
            }
            return .success(count)
        }.get()
    }

    /// One packed event: its sequence, its topic (frame 0), where its frames start and where it ends.
    public struct Located {
        public var sequence: UInt64
        public var frameCount: Int
        public var topic: UnsafeRawBufferPointer
        public var framesStart: Int
        public var end: Int
    }

    /// The event packed at `offset` of `raw`, nil if it is not whole.
    public static func event(in raw: UnsafeRawBufferPointer, at offset: Int) -> Located? {
        var position = offset
        func read(_ count: Int) -> Int? {
            guard position + count <= raw.count else { return nil }
            var value = 0
            for index in 0..<count { value = value << 8 | Int(raw[position + index]) }
            position += count
            return value
        }
        guard position + 9 <= raw.count else { return nil }
        var sequence: UInt64 = 0
        for index in 0..<8 { sequence = sequence << 8 | UInt64(raw[position + index]) }
        position += 8
        guard let frames = read(1) else { return nil }
        let framesStart = position
        var topic = UnsafeRawBufferPointer(start: nil, count: 0)
        for frame in 0..<frames {
            guard let length = read(4), position + length <= raw.count else { return nil }
            if frame == 0 { topic = UnsafeRawBufferPointer(rebasing: raw[position..<position + length]) }
            position += length
        }
        return Located(sequence: sequence, frameCount: frames, topic: topic, framesStart: framesStart, end: position)
    }

    public var isEmpty: Bool { count == 0 }
    /// Bytes taken so far, to keep a reply under a size.
    public var byteCount: Int { bytes.count }

    /// Adds an event: `frameCount` frames, frame `i` handed by `frame(i)`.
    public mutating func append(
        sequence: UInt64, frameCount: Int, frame: (Int, (UnsafeRawBufferPointer) -> Void) -> Void
    ) {
        bytes.appendBigEndian(sequence)
        bytes.append(UInt8(clamping: frameCount))
        for index in 0..<min(frameCount, 255) {
            frame(index) { raw in
                bytes.appendBigEndian(UInt32(clamping: raw.count))
                bytes.append(contentsOf: raw)
            }
        }
        count += 1
    }

    /// Makes room for `byteCount` bytes in all.
    public mutating func reserveCapacity(_ byteCount: Int) {
        bytes.reserveCapacity(byteCount)
    }

    /// Adds `count` events already packed, copied as they are.
    public mutating func appendPacked(_ events: UnsafeRawBufferPointer, count: Int = 1) {
        bytes.append(contentsOf: events)
        self.count += count
    }

    /// Adds the event `frames`.
    public mutating func append(sequence: UInt64, frames: FrameBuffer) {
        append(sequence: sequence, frameCount: frames.count) { index, body in frames.withFrame(index) { body($0) } }
    }

    /// The events, in order: each one's sequence and frames.
    public func decoded() -> [(sequence: UInt64, frames: FrameBuffer)] {
        bytes.withUnsafeBytes { raw in
            var result: [(sequence: UInt64, frames: FrameBuffer)] = []
            result.reserveCapacity(count)
            var offset = 0
            // Checked whole when read.
            while let event = Self.event(in: raw, at: offset) {
                var buffer = FrameBuffer()
                var position = event.framesStart
                for _ in 0..<event.frameCount {
                    let length = raw[position..<position + 4].reduce(0) { $0 << 8 | Int($1) }
                    buffer.append(frame: UnsafeRawBufferPointer(rebasing: raw[position + 4..<position + 4 + length]))
                    position += 4 + length
                }
                result.append((event.sequence, buffer))
                offset = event.end
            }
            return result
        }
    }
}
