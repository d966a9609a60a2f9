/// The kind of a FlowBus message: byte 1 of the envelope.
public enum MessageKind: UInt8, Sendable, Hashable, CaseIterable, CustomStringConvertible {
    /// A step published by a stepper (topic `step/<stepperId>`).
    case step = 1
    /// A deep link: a step broadcast to every active flow (topic `deeplink/<stepName>`).
    case deepLink = 2
    /// An action sent to a reactor (topic `action/<reactorId>`).
    case action = 3
    /// A state published by a reactor (topic `state/<reactorId>`).
    case state = 4
    /// A request for a reactor's current state (topic `snapshot/<reactorId>`).
    case snapshotRequest = 5
    /// The reply to a snapshot request (topic `state/<reactorId>`).
    case snapshot = 6
    /// The coordinator is about to navigate (topic `nav/will/<flowName>`).
    case willNavigate = 7
    /// The coordinator has navigated (topic `nav/did/<flowName>`).
    case didNavigate = 8
    /// A navigation command for renderers (topic `cmd/<flowName>`).
    case navigationCommand = 9
    /// A refused message or a problem, with a reason code (topic `diag/<reasonCode>`).
    case diagnostic = 10
    /// A cumulative acknowledgement of a source's sequence (topic `ack/<sourceId>`).
    case ack = 11
    /// A liveness signal (topic `hb/<sourceId>`).
    case heartbeat = 12
    /// A request for the live status (topic `status`).
    case statusRequest = 13
    /// The reply to a status request (topic `status`).
    case statusReply = 14
    /// A renderer's report about a presentable (topic `present/<presentableId>`).
    case presentableReport = 15
    /// A request for the events flowd kept after a sequence (topic `replay`).
    case replayRequest = 16
    /// The reply to a replay request: kept events, packed (topic `replay`).
    case replay = 17

    /// The topic prefix messages of this kind are published under.
    public var topicPrefix: Topic.Prefix {
        switch self {
        case .step: return .step
        case .deepLink: return .deepLink
        case .action: return .action
        case .state, .snapshot: return .state
        case .snapshotRequest: return .snapshot
        case .willNavigate: return .navWill
        case .didNavigate: return .navDid
        case .navigationCommand: return .command
        case .diagnostic: return .diagnostic
        case .ack: return .ack
        case .heartbeat: return .heartbeat
        case .statusRequest, .statusReply: return .status
        case .presentableReport: return .present
        case .replayRequest, .replay: return .replay
        }
    }

    /// The exact number of frames (topic and envelope included) a message of this kind has; a
    /// status request may have one more, its params.
    public var frameCount: Int {
        switch self {
        case .snapshotRequest, .heartbeat, .statusRequest: return 2
        case .state, .snapshot, .ack, .statusReply, .presentableReport, .replayRequest: return 3
        case .step, .deepLink, .action, .diagnostic, .replay: return 4
        case .willNavigate, .didNavigate, .navigationCommand: return 6
        }
    }

    /// Whether a message of this kind may end with a trace frame (W3C Trace Context, PROTOCOL.md
    /// §4.5), one frame past ``frameCount``.
    public var carriesTraceContext: Bool {
        switch self {
        case .step, .deepLink, .action, .state, .willNavigate, .didNavigate, .navigationCommand: return true
        default: return false
        }
    }

    public var description: String {
        switch self {
        case .step: return "step"
        case .deepLink: return "deepLink"
        case .action: return "action"
        case .state: return "state"
        case .snapshotRequest: return "snapshotRequest"
        case .snapshot: return "snapshot"
        case .willNavigate: return "willNavigate"
        case .didNavigate: return "didNavigate"
        case .navigationCommand: return "navigationCommand"
        case .diagnostic: return "diagnostic"
        case .ack: return "ack"
        case .heartbeat: return "heartbeat"
        case .statusRequest: return "statusRequest"
        case .statusReply: return "statusReply"
        case .presentableReport: return "presentableReport"
        case .replayRequest: return "replayRequest"
        case .replay: return "replay"
        }
    }
}

/// How the body frames of a message are encoded: byte 2 of the envelope.
public enum ContentType: UInt8, Sendable, Hashable, CaseIterable, CustomStringConvertible {
    /// No body value (messages without value frames, or a step without params).
    case none = 0
    /// JSON, RFC 8259, UTF-8. See ``WireJSON``.
    case json = 1
    /// FlowBus binary values. See ``FBV``.
    case fbv = 2

    public var description: String {
        switch self {
        case .none: return "none"
        case .json: return "json"
        case .fbv: return "fbv"
        }
    }
}

/// A 16-byte message id: random per message (UUID v4 layout), all zero meaning "none".
///
/// Receivers de-duplicate by (source, sequence); the id is for logs and tracing.
public struct MessageID: Sendable, Hashable, CustomStringConvertible {
    /// The first 8 bytes, big-endian.
    public var high: UInt64
    /// The last 8 bytes, big-endian.
    public var low: UInt64

    /// Creates an id from its two big-endian halves.
    public init(high: UInt64, low: UInt64) {
        self.high = high
        self.low = low
    }

    /// Creates an id from exactly 16 bytes, or returns `nil` for any other count.
    public init?(bytes: some Collection<UInt8>) {
        guard bytes.count == 16 else { return nil }
        var high: UInt64 = 0
        var low: UInt64 = 0
        for (index, byte) in bytes.enumerated() {
            if index < 8 { high = high << 8 | UInt64(byte) } else { low = low << 8 | UInt64(byte) }
        }
        self.init(high: high, low: low)
    }

    /// Parses 32 hexadecimal digits (dashes allowed anywhere, as in a UUID string).
    public init?(hex: String) {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(16)
        var pending: UInt8? = nil
        for char in hex.utf8 where char != UInt8(ascii: "-") {
            guard let nibble = hexNibble(char) else { return nil }
            if let high = pending {
                bytes.append(high << 4 | nibble)
                pending = nil
            } else {
                pending = nibble
            }
        }
        guard pending == nil else { return nil }
        self.init(bytes: bytes)
    }

    /// The all-zero id: "no id".
    public static let none = MessageID(high: 0, low: 0)

    /// Whether this is the all-zero id.
    public var isNone: Bool { high == 0 && low == 0 }

    /// A fresh random id with the UUID v4 version and variant bits.
    public static func random() -> MessageID {
        var generator = SystemRandomNumberGenerator()
        return random(using: &generator)
    }

    /// A random id drawn from `generator`, with the UUID v4 version and variant bits.
    public static func random(using generator: inout some RandomNumberGenerator) -> MessageID {
        let high = (generator.next() & 0xFFFF_FFFF_FFFF_0FFF) | 0x0000_0000_0000_4000
        let low = (generator.next() & 0x3FFF_FFFF_FFFF_FFFF) | 0x8000_0000_0000_0000
        return MessageID(high: high, low: low)
    }

    /// The 16 bytes, in wire order.
    public var bytes: [UInt8] {
        var result: [UInt8] = []
        result.reserveCapacity(16)
        appendBytes(to: &result)
        return result
    }

    /// Appends the 16 bytes, in wire order.
    public func appendBytes(to bytes: inout [UInt8]) {
        bytes.appendBigEndian(high)
        bytes.appendBigEndian(low)
    }

    /// 32 lowercase hexadecimal digits, no dashes.
    public var description: String { WireHex.string(bytes) }
}

@inline(__always)
func hexNibble(_ char: UInt8) -> UInt8? {
    switch char {
    case UInt8(ascii: "0")...UInt8(ascii: "9"): return char - UInt8(ascii: "0")
    case UInt8(ascii: "a")...UInt8(ascii: "f"): return char - UInt8(ascii: "a") + 10
    case UInt8(ascii: "A")...UInt8(ascii: "F"): return char - UInt8(ascii: "A") + 10
    default: return nil
    }
}

/// Hexadecimal helpers, as used by the golden vector files and by logs.
public enum WireHex {
    /// Lowercase hexadecimal digits of `bytes`, two per byte.
    public static func string(_ bytes: some Sequence<UInt8>) -> String {
        let digits: [UInt8] = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(bytes.underestimatedCount * 2)
        for byte in bytes {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The bytes spelled by hexadecimal digits (upper or lower case), or `nil` for an odd count or a
    /// non-hex character. Whitespace is not allowed.
    public static func bytes(_ hex: some StringProtocol) -> [UInt8]? {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(hex.utf8.count / 2)
        var pending: UInt8? = nil
        for char in hex.utf8 {
            guard let nibble = hexNibble(char) else { return nil }
            if let high = pending {
                bytes.append(high << 4 | nibble)
                pending = nil
            } else {
                pending = nibble
            }
        }
        return pending == nil ? bytes : nil
    }
}
