/// FBV, the FlowBus binary value encoding (content type 2).
///
/// Big-endian; a tag byte, then a payload:
///
/// | tag | value | payload |
/// |---|---|---|
/// | 0x00 | null | none |
/// | 0x01 | false | none |
/// | 0x02 | true | none |
/// | 0x03 | int | 8 bytes, two's complement i64 |
/// | 0x04 | double | 8 bytes, IEEE-754 binary64 |
/// | 0x05 | string | u32 byte length, UTF-8 bytes |
/// | 0x06 | list | u32 count, values |
/// | 0x07 | map | u32 count, entries: u16 key length, UTF-8 key, value |
///
/// Map keys are unique; the encoder writes them sorted by their UTF-8 bytes so the encoding of a
/// value is deterministic. Lists and maps nest at most ``WireLimits/maxDepth`` (32) deep; the
/// top-level value counts as depth 1 if it is a list or a map.
///
/// The decoder is strict: truncation, an unknown tag, excess depth, a duplicate key, invalid
/// UTF-8 or bytes after the value all throw a ``WireError`` with reason `malformed`.
public enum FBV {
    /// Tag bytes.
    public enum Tag: UInt8, Sendable {
        /// Null, no payload.
        case null = 0x00
        /// False, no payload.
        case `false` = 0x01
        /// True, no payload.
        case `true` = 0x02
        /// 8-byte signed integer.
        case int = 0x03
        /// 8-byte IEEE-754 binary64.
        case double = 0x04
        /// u32 length and UTF-8 bytes.
        case string = 0x05
        /// u32 count and values.
        case list = 0x06
        /// u32 count and entries (u16 key length, key, value).
        case map = 0x07
    }

    // MARK: Encoding

    /// Appends the encoding of `value`.
    /// - Throws: `malformed` if the value nests deeper than `maxDepth`, a string is longer than
    ///   4 GiB - 1 or a key longer than 65535 bytes.
    public static func encode(
        _ value: WireValue, into bytes: inout [UInt8], maxDepth: Int = WireLimits.default.maxDepth
    ) throws(WireError) {
        try write(value, into: &bytes, depth: 0, maxDepth: maxDepth)
    }

    /// The encoding of `value`.
    public static func encode(
        _ value: WireValue, maxDepth: Int = WireLimits.default.maxDepth
    ) throws(WireError) -> [UInt8] {
        var bytes: [UInt8] = []
        try encode(value, into: &bytes, maxDepth: maxDepth)
        return bytes
    }

    /// Appends the encoding of `params` as one map value.
    public static func encode(
        params: WireParams, into bytes: inout [UInt8], maxDepth: Int = WireLimits.default.maxDepth
    ) throws(WireError) {
        try writeMap(params, into: &bytes, depth: 1, maxDepth: maxDepth)
    }

    private static func write(
        _ value: WireValue, into bytes: inout [UInt8], depth: Int, maxDepth: Int
    ) throws(WireError) {
        switch value {
        case .null: bytes.append(Tag.null.rawValue)
        case .bool(let flag): bytes.append(flag ? Tag.true.rawValue : Tag.false.rawValue)
        case .int(let number):
            bytes.append(Tag.int.rawValue)
            bytes.appendBigEndian(UInt64(bitPattern: number))
        case .double(let number):
            bytes.append(Tag.double.rawValue)
            bytes.appendBigEndian(number.bitPattern)
        case .string(let text):
            let count = text.utf8.count
            guard count <= Int(UInt32.max) else { throw .malformed("string of \(count) bytes exceeds the FBV maximum") }
            bytes.append(Tag.string.rawValue)
            bytes.appendBigEndian(UInt32(count))
            bytes.appendUTF8(text)
        case .list(let elements):
            if depth + 1 > maxDepth { throw .malformed("value nests deeper than \(maxDepth) levels") }
            bytes.append(Tag.list.rawValue)
            bytes.appendBigEndian(UInt32(elements.count))
            for element in elements { try write(element, into: &bytes, depth: depth + 1, maxDepth: maxDepth) }
        case .map(let entries):
            try writeMap(entries, into: &bytes, depth: depth + 1, maxDepth: maxDepth)
        }
    }

    private static func writeMap(
        _ entries: [String: WireValue], into bytes: inout [UInt8], depth: Int, maxDepth: Int
    ) throws(WireError) {
        if depth > maxDepth { throw .malformed("value nests deeper than \(maxDepth) levels") }
        bytes.append(Tag.map.rawValue)
        bytes.appendBigEndian(UInt32(entries.count))
        if entries.count == 1, let (key, value) = entries.first {
            try writeEntry(key, value, into: &bytes, depth: depth, maxDepth: maxDepth)
            return
        }
        for key in sortedKeys(entries) {
            try writeEntry(key, entries[key].unsafelyUnwrapped, into: &bytes, depth: depth, maxDepth: maxDepth)
        }
    }

    @inline(__always)
    private static func writeEntry(
        _ key: String, _ value: WireValue, into bytes: inout [UInt8], depth: Int, maxDepth: Int
    ) throws(WireError) {
        let count = key.utf8.count
        guard count <= Int(UInt16.max) else { throw .malformed("map key of \(count) bytes exceeds 65535") }
        bytes.appendBigEndian(UInt16(count))
        bytes.appendUTF8(key)
        try write(value, into: &bytes, depth: depth, maxDepth: maxDepth)
    }

    // MARK: Decoding

    /// Decodes exactly one value filling `bytes`.
    /// - Throws: `malformed` with the offset and what is wrong.
    public static func decode(
        _ bytes: UnsafeRawBufferPointer, maxDepth: Int = WireLimits.default.maxDepth
    ) throws(WireError) -> WireValue {
        var reader = ByteReader(bytes, what: "FBV value")
        let value = try read(&reader, depth: 0, maxDepth: maxDepth)
        if !reader.isAtEnd {
            throw .malformed("FBV value ends at offset \(reader.offset), \(reader.remaining) trailing byte(s)")
        }
        return value
    }

    /// Decodes exactly one value filling `bytes`.
    public static func decode(
        _ bytes: [UInt8], maxDepth: Int = WireLimits.default.maxDepth
    ) throws(WireError) -> WireValue {
        try withRawBytes(bytes) { (raw) throws(WireError) in try decode(raw, maxDepth: maxDepth) }
    }

    /// Decodes exactly one value filling `bytes`.
    public static func decode(
        _ bytes: ArraySlice<UInt8>, maxDepth: Int = WireLimits.default.maxDepth
    ) throws(WireError) -> WireValue {
        try withRawBytes(bytes) { (raw) throws(WireError) in try decode(raw, maxDepth: maxDepth) }
    }

    private static func read(_ reader: inout ByteReader, depth: Int, maxDepth: Int) throws(WireError) -> WireValue {
        let tagOffset = reader.offset
        let tag = try reader.u8("tag")
        switch tag {
        case Tag.null.rawValue: return .null
        case Tag.false.rawValue: return .bool(false)
        case Tag.true.rawValue: return .bool(true)
        case Tag.int.rawValue: return .int(Int64(bitPattern: try reader.u64("int")))
        case Tag.double.rawValue: return .double(Double(bitPattern: try reader.u64("double")))
        case Tag.string.rawValue:
            let count = Int(try reader.u32("string length"))
            let start = reader.offset
            let raw = try reader.slice(count, "string")
            guard let text = validUTF8(raw) else {
                throw .malformed("FBV string at offset \(start) is not valid UTF-8")
            }
            return .string(text)
        case Tag.list.rawValue:
            if depth + 1 > maxDepth {
                throw .malformed("FBV value nests deeper than \(maxDepth) levels at offset \(tagOffset)")
            }
            let count = Int(try reader.u32("list count"))
            // Every element takes at least one byte: refuse impossible counts before allocating.
            try reader.need(count, for: "list of \(count) element(s)")
            var elements: [WireValue] = []
            elements.reserveCapacity(count)
            for _ in 0..<count { elements.append(try read(&reader, depth: depth + 1, maxDepth: maxDepth)) }
            return .list(elements)
        case Tag.map.rawValue:
            if depth + 1 > maxDepth {
                throw .malformed("FBV value nests deeper than \(maxDepth) levels at offset \(tagOffset)")
            }
            let count = Int(try reader.u32("map count"))
            // Every entry takes at least three bytes (key length and a tag).
            try reader.need(count * 3, for: "map of \(count) entr(ies)")
            var entries = [String: WireValue](minimumCapacity: count)
            for _ in 0..<count {
                let keyCount = Int(try reader.u16("key length"))
                let keyOffset = reader.offset
                let rawKey = try reader.slice(keyCount, "key")
                guard let key = validUTF8(rawKey) else {
                    throw .malformed("FBV map key at offset \(keyOffset) is not valid UTF-8")
                }
                let value = try read(&reader, depth: depth + 1, maxDepth: maxDepth)
                if entries.updateValue(value, forKey: key) != nil {
                    throw .malformed("FBV map has duplicate key \(quoted(key)) at offset \(keyOffset)")
                }
            }
            return .map(entries)
        default:
            throw .malformed("FBV tag 0x\(WireHex.string([tag])) at offset \(tagOffset) is unknown")
        }
    }
}

/// The keys of `entries` sorted by their UTF-8 bytes (the same order as by code points).
func sortedKeys(_ entries: [String: WireValue]) -> [String] {
    entries.keys.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
}
