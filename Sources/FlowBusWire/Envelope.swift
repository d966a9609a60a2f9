#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Frame 1 of every FlowBus message: version, kind, content type, sequence, time, id, source.
///
/// Layout (big-endian):
///
/// | offset | size | field |
/// |---|---|---|
/// | 0 | 1 | version (1) |
/// | 1 | 1 | kind (``MessageKind``) |
/// | 2 | 1 | content type (``ContentType``) |
/// | 3 | 1 | flags, 0 on send, ignored on receive |
/// | 4 | 8 | sequence, u64 |
/// | 12 | 8 | timestamp, i64 µs since the Unix epoch |
/// | 20 | 16 | message id |
/// | 36 | 1 | source length n (1...255) |
/// | 37 | n | source, UTF-8 |
public struct Envelope: Sendable, Hashable {
    /// The protocol version this module writes and reads.
    public static let currentVersion: UInt8 = 1
    /// The size of the fixed part, before the source bytes.
    public static let fixedSize = 37
    /// The smallest valid envelope (a one-byte source).
    public static let minimumSize = 38

    /// Protocol version; always ``currentVersion`` when encoded by this module.
    public var version: UInt8
    /// Message kind.
    public var kind: MessageKind
    /// Encoding of the body frames.
    public var contentType: ContentType
    /// Per-source sequence number, strictly increasing from 1 (for states and snapshots: the
    /// reactor's state sequence).
    public var sequence: UInt64
    /// Microseconds since the Unix epoch, on the sender's clock.
    public var timestamp: Int64
    /// Random message id, or ``MessageID/none``.
    public var messageID: MessageID
    /// The sending process instance, e.g. `movie-list#5f3a` (1...255 bytes of UTF-8).
    public var source: String

    /// Creates an envelope.
    /// - Parameters:
    ///   - kind: The message kind. Message encoders overwrite it with their own kind.
    ///   - contentType: How the body values are encoded.
    ///   - sequence: The source's sequence number for this message.
    ///   - timestamp: Microseconds since the Unix epoch; defaults to now.
    ///   - messageID: Defaults to a fresh random id.
    ///   - source: The sending process instance.
    public init(
        kind: MessageKind, contentType: ContentType = .none, sequence: UInt64,
        timestamp: Int64 = Envelope.now(), messageID: MessageID = .random(), source: String
    ) {
        self.version = Envelope.currentVersion
        self.kind = kind
        self.contentType = contentType
        self.sequence = sequence
        self.timestamp = timestamp
        self.messageID = messageID
        self.source = source
    }

    /// The current time in microseconds since the Unix epoch.
    public static func now() -> Int64 {
        var spec = timespec()
        clock_gettime(CLOCK_REALTIME, &spec)
        return Int64(spec.tv_sec) * 1_000_000 + Int64(spec.tv_nsec) / 1_000
    }

    /// The number of bytes ``encode(into:)`` appends.
    public var encodedSize: Int { Envelope.fixedSize + source.utf8.count }

    /// Appends the envelope's bytes.
    /// - Throws: `malformed` for an empty source, `oversize` for a source over 255 bytes.
    public func encode(into bytes: inout [UInt8]) throws(WireError) {
        try encode(into: &bytes, kind: kind)
    }

    /// The envelope's bytes.
    public func encoded() throws(WireError) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(encodedSize)
        try encode(into: &bytes)
        return bytes
    }

    func encode(into bytes: inout [UInt8], kind: MessageKind) throws(WireError) {
        let sourceCount = source.utf8.count
        if sourceCount == 0 { throw .malformed("envelope source is empty") }
        if sourceCount > 255 {
            throw WireError(.oversize, "envelope source is \(sourceCount) bytes, at most 255 allowed")
        }
        // The fixed part is written on the stack and appended at once: an envelope goes with every
        // message flowd publishes, and byte-by-byte appends check the array's storage each time.
        withUnsafeTemporaryAllocation(byteCount: Self.fixedSize, alignment: 8) { fixed in
            fixed.storeBytes(of: version, toByteOffset: 0, as: UInt8.self)
            fixed.storeBytes(of: kind.rawValue, toByteOffset: 1, as: UInt8.self)
            fixed.storeBytes(of: contentType.rawValue, toByteOffset: 2, as: UInt8.self)
            fixed.storeBytes(of: 0, toByteOffset: 3, as: UInt8.self)
            fixed.storeBytes(of: sequence.bigEndian, toByteOffset: 4, as: UInt64.self)
            fixed.storeBytes(of: UInt64(bitPattern: timestamp).bigEndian, toByteOffset: 12, as: UInt64.self)
            fixed.storeBytes(of: messageID.high.bigEndian, toByteOffset: 20, as: UInt64.self)
            fixed.storeBytes(of: messageID.low.bigEndian, toByteOffset: 28, as: UInt64.self)
            fixed.storeBytes(of: UInt8(sourceCount), toByteOffset: 36, as: UInt8.self)
            bytes.append(contentsOf: UnsafeRawBufferPointer(fixed))
        }
        bytes.appendUTF8(source)
    }

    /// Decodes and validates an envelope frame.
    /// - Parameters:
    ///   - bytes: Exactly the envelope frame.
    ///   - limits: Decoding limits (the source length).
    /// - Throws: `unsupported-version` for a version other than 1, `unknown-kind`, `malformed`
    ///   for a wrong length, an unknown content type or a source that is not UTF-8,
    ///   `oversize` for a source over the limit.
    ///   - texts: Where sources seen before are kept, so that decoding allocates no new text.
    public static func decode(
        _ bytes: UnsafeRawBufferPointer, limits: WireLimits = .default, texts: TextInterner? = nil
    ) throws(WireError) -> Envelope {
        if bytes.count < minimumSize {
            throw .malformed("envelope is \(bytes.count) bytes, at least \(minimumSize) expected")
        }
        let version = bytes[0]
        if version != currentVersion {
            throw WireError(.unsupportedVersion, "envelope version is \(version), only \(currentVersion) is supported")
        }
        guard let kind = MessageKind(rawValue: bytes[1]) else {
            throw WireError(.unknownKind, "envelope kind \(bytes[1]) is not a known message kind (1...15)")
        }
        guard let contentType = ContentType(rawValue: bytes[2]) else {
            throw .malformed("envelope content type \(bytes[2]) is unknown (0 none, 1 JSON, 2 FBV)")
        }
        // bytes[3]: flags, ignored on receive.
        var reader = ByteReader(bytes, what: "envelope")
        reader.offset = 4
        let sequence = try reader.u64("sequence")
        let timestamp = Int64(bitPattern: try reader.u64("timestamp"))
        let high = try reader.u64("message id")
        let low = try reader.u64("message id")
        let sourceCount = Int(try reader.u8("source length"))
        if sourceCount == 0 { throw .malformed("envelope source length is 0, at least 1 expected") }
        if sourceCount > limits.maxSourceBytes {
            throw WireError(
                .oversize, "envelope source is \(sourceCount) bytes, at most \(limits.maxSourceBytes) allowed")
        }
        if bytes.count != fixedSize + sourceCount {
            throw .malformed(
                "envelope is \(bytes.count) bytes, \(fixedSize + sourceCount) expected for a \(sourceCount)-byte source"
            )
        }
        let sourceBytes = try reader.slice(sourceCount, "source")
        guard let source = texts?.text(sourceBytes) ?? validUTF8(sourceBytes) else {
            throw .malformed("envelope source is not valid UTF-8")
        }
        if containsNUL(sourceBytes) { throw .malformed("envelope source contains a NUL byte (U+0000)") }
        var envelope = Envelope(
            kind: kind, contentType: contentType, sequence: sequence, timestamp: timestamp,
            messageID: MessageID(high: high, low: low), source: source)
        envelope.version = version
        return envelope
    }

    /// Decodes and validates an envelope frame held in an array.
    public static func decode(_ bytes: [UInt8], limits: WireLimits = .default) throws(WireError) -> Envelope {
        try withRawBytes(bytes) { (raw) throws(WireError) in try decode(raw, limits: limits) }
    }

    /// Decodes and validates an envelope frame held in an array slice.
    public static func decode(_ bytes: ArraySlice<UInt8>, limits: WireLimits = .default) throws(WireError) -> Envelope {
        try withRawBytes(bytes) { (raw) throws(WireError) in try decode(raw, limits: limits) }
    }
}

extension Envelope {
    /// A new source id for a process instance named `name` (PROTOCOL.md §4.2): ``sourceID(_:suffix:)``
    /// with 64 random bits in hex. A receiver that remembers sources takes a reused id's first
    /// messages for duplicates: 32 bits would collide about once in 10,000 runs of one name.
    public static func newSourceID(for name: String) -> String {
        let random = String(UInt64.random(in: .min ... .max), radix: 16)
        return sourceID(name, suffix: String(repeating: "0", count: 16 - random.utf8.count) + random)
    }

    /// `name#suffix`, the name cut at a character so that the id stays within 255 bytes.
    public static func sourceID(_ name: String, suffix: String) -> String {
        var kept = Substring(name)
        while !kept.isEmpty, kept.utf8.count + 1 + suffix.utf8.count > 255 { kept.removeLast() }
        return "\(kept)#\(suffix)"
    }
}
