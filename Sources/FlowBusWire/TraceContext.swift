/// W3C Trace Context (https://www.w3.org/TR/trace-context/) as a message carries it: the optional
/// last frame of a step, deep link, action, state, willNavigate, didNavigate or navigation command
/// (PROTOCOL.md §4.5) holds the `traceparent` header value, then optionally a line feed and the
/// `tracestate` header value.
public struct TraceContext: Sendable, Hashable, CustomStringConvertible {
    /// The `traceparent` value, e.g. `00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01`.
    public let traceparent: String
    /// The `tracestate` value (vendor entries), empty for none.
    public let tracestate: String

    /// The largest trace frame accepted (a traceparent, a line feed and a 512-character tracestate
    /// fit with room to spare).
    public static let maxFrameBytes = 1024

    /// Validates a `traceparent` (and `tracestate`) by W3C's rules, or nil when they are not valid.
    public init?(traceparent: String, tracestate: String = "") {
        guard Self.isValidTraceparent(Array(traceparent.utf8)[...]), Self.isValidTracestate(tracestate.utf8) else {
            return nil
        }
        self.traceparent = traceparent
        self.tracestate = tracestate
    }

    /// A context made of its parts: the 16-byte trace id and the 8-byte span id, as raw bytes.
    public init?(
        traceID: some Collection<UInt8>, spanID: some Collection<UInt8>, sampled: Bool, tracestate: String = ""
    ) {
        guard traceID.count == 16, spanID.count == 8 else { return nil }
        self.init(
            traceparent:
                "00-\(WireHex.string(Array(traceID)))-\(WireHex.string(Array(spanID)))-\(sampled ? "01" : "00")",
            tracestate: tracestate)
    }

    /// Reads a trace frame.
    /// - Throws: `oversize` over ``maxFrameBytes``, `malformed` when it is not a valid traceparent,
    ///   optionally followed by a line feed and a tracestate.
    public init(frame bytes: some Collection<UInt8>) throws(WireError) {
        if bytes.count > Self.maxFrameBytes {
            throw WireError(.oversize, "trace context is \(bytes.count) bytes, at most \(Self.maxFrameBytes) allowed")
        }
        let all = Array(bytes)
        let newline = all.firstIndex(of: 0x0A)
        let parent = all[..<(newline ?? all.endIndex)]
        let state = newline.map { all[($0 + 1)...] } ?? []
        guard Self.isValidTraceparent(parent) else {
            throw .malformed(
                "trace context \(quoted(String(decoding: parent.prefix(64), as: UTF8.self))) is not a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>)"
            )
        }
        guard Self.isValidTracestate(state) else {
            throw .malformed("trace context's tracestate is not printable ASCII of at most 512 bytes")
        }
        traceparent = String(decoding: parent, as: UTF8.self)
        tracestate = String(decoding: state, as: UTF8.self)
    }

    /// The frame that carries this context.
    public var frame: [UInt8] {
        var bytes = Array(traceparent.utf8)
        if !tracestate.isEmpty {
            bytes.append(0x0A)
            bytes.append(contentsOf: tracestate.utf8)
        }
        return bytes
    }

    /// The trace id, 32 lowercase hex digits.
    public var traceID: Substring { traceparent.dropFirst(3).prefix(32) }
    /// The id of the span that sent the message, 16 lowercase hex digits.
    public var spanID: Substring { traceparent.dropFirst(36).prefix(16) }
    /// Whether the sender sampled (recorded) its span.
    public var sampled: Bool {
        let flags = traceparent.utf8.dropFirst(53).prefix(2)
        return flags.count == 2 && (hexValue(flags.last!) ?? 0) & 1 == 1
    }

    public var description: String { traceparent }

    /// W3C §3.2: version 00 is exactly 55 characters; a later version may append `-…` fields.
    /// Version `ff`, an all-zero trace id or span id, and upper-case hex are invalid.
    static func isValidTraceparent(_ bytes: ArraySlice<UInt8>) -> Bool {
        guard bytes.count >= 55 else { return false }
        let start = bytes.startIndex
        func at(_ offset: Int) -> UInt8 { bytes[start + offset] }
        guard let v0 = hexValue(at(0)), let v1 = hexValue(at(1)) else { return false }
        let version = v0 << 4 | v1
        if version == 0xFF { return false }
        if version == 0, bytes.count != 55 { return false }
        if bytes.count > 55, at(55) != UInt8(ascii: "-") { return false }
        let dashes = [2, 35, 52]
        for offset in dashes where at(offset) != UInt8(ascii: "-") { return false }
        var traceZero = true
        var spanZero = true
        for offset in 0..<55 where !dashes.contains(offset) {
            guard let digit = hexValue(at(offset)) else { return false }
            if digit != 0 {
                if (3..<35).contains(offset) { traceZero = false }
                if (36..<52).contains(offset) { spanZero = false }
            }
        }
        return !traceZero && !spanZero
    }

    static func isValidTracestate(_ bytes: some Collection<UInt8>) -> Bool {
        bytes.count <= 512 && bytes.allSatisfy { $0 >= 0x20 && $0 < 0x7F }
    }
}

/// A lowercase hex digit's value (W3C trace context uses lowercase only).
private func hexValue(_ byte: UInt8) -> UInt8? {
    switch byte {
    case UInt8(ascii: "0")...UInt8(ascii: "9"): return byte - UInt8(ascii: "0")
    case UInt8(ascii: "a")...UInt8(ascii: "f"): return byte - UInt8(ascii: "a") + 10
    default: return nil
    }
}
