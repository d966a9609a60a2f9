#if canImport(Glibc)
import Glibc
#endif
// Byte-level helpers shared by the codecs (and the journal's packed entries): a bounds-checked
// big-endian reader over raw bytes, big-endian writers on [UInt8], UTF-8 and name validation.

extension Array where Element == UInt8 {
    @inline(__always)
    package mutating func appendBigEndian(_ value: UInt64) {
        append(UInt8(truncatingIfNeeded: value >> 56))
        append(UInt8(truncatingIfNeeded: value >> 48))
        append(UInt8(truncatingIfNeeded: value >> 40))
        append(UInt8(truncatingIfNeeded: value >> 32))
        append(UInt8(truncatingIfNeeded: value >> 24))
        append(UInt8(truncatingIfNeeded: value >> 16))
        append(UInt8(truncatingIfNeeded: value >> 8))
        append(UInt8(truncatingIfNeeded: value))
    }

    @inline(__always)
    package mutating func appendBigEndian(_ value: UInt32) {
        append(UInt8(truncatingIfNeeded: value >> 24))
        append(UInt8(truncatingIfNeeded: value >> 16))
        append(UInt8(truncatingIfNeeded: value >> 8))
        append(UInt8(truncatingIfNeeded: value))
    }

    @inline(__always)
    mutating func appendBigEndian(_ value: UInt16) {
        append(UInt8(truncatingIfNeeded: value >> 8))
        append(UInt8(truncatingIfNeeded: value))
    }

    @inline(__always)
    mutating func appendUTF8(_ string: String) {
        append(contentsOf: string.utf8)
    }
}

/// A forward reader over raw bytes; every read checks the remaining length first.
package struct ByteReader {
    package let bytes: UnsafeRawBufferPointer
    package var offset: Int = 0
    /// Names the thing being read in error details, e.g. "envelope" or "FBV value".
    let what: String

    package init(_ bytes: UnsafeRawBufferPointer, what: String) {
        self.bytes = bytes
        self.what = what
    }

    package var remaining: Int { bytes.count - offset }
    package var isAtEnd: Bool { offset == bytes.count }

    @inline(__always)
    // An autoclosure: callers describe the field with an interpolation, built only for the error.
    func need(_ count: Int, for field: @autoclosure () -> String) throws(WireError) {
        if count > remaining {
            throw .malformed(
                "\(what) truncated: \(field()) needs \(count) byte(s) at offset \(offset), \(remaining) left")
        }
    }

    @inline(__always)
    package mutating func u8(_ field: String) throws(WireError) -> UInt8 {
        try need(1, for: field)
        defer { offset += 1 }
        return bytes[offset]
    }

    @inline(__always)
    mutating func u16(_ field: String) throws(WireError) -> UInt16 {
        try need(2, for: field)
        defer { offset += 2 }
        return UInt16(bytes[offset]) << 8 | UInt16(bytes[offset + 1])
    }

    @inline(__always)
    package mutating func u32(_ field: String) throws(WireError) -> UInt32 {
        try need(4, for: field)
        var value: UInt32 = 0
        for index in offset..<offset + 4 { value = value << 8 | UInt32(bytes[index]) }
        offset += 4
        return value
    }

    @inline(__always)
    package mutating func u64(_ field: String) throws(WireError) -> UInt64 {
        try need(8, for: field)
        var value: UInt64 = 0
        for index in offset..<offset + 8 { value = value << 8 | UInt64(bytes[index]) }
        offset += 8
        return value
    }

    @inline(__always)
    package mutating func slice(_ count: Int, _ field: String) throws(WireError) -> UnsafeRawBufferPointer {
        try need(count, for: field)
        defer { offset += count }
        return UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + count])
    }
}

/// Decodes strictly valid UTF-8 (no overlongs, no surrogates), or `nil`.
@inline(__always)
package func validUTF8(_ bytes: UnsafeRawBufferPointer) -> String? {
    // ASCII, what ids, names and keys nearly always are, is valid as it is: `String(validating:)`
    // goes through an unspecialized generic that looks its metadata up on every call.
    if isASCII(bytes) { return String(decoding: bytes, as: UTF8.self) }
    return String(validating: bytes, as: UTF8.self)
}

/// Whether no byte has its high bit set, eight at a time.
@inline(__always)
func isASCII(_ bytes: UnsafeRawBufferPointer) -> Bool {
    guard let base = bytes.baseAddress else { return true }
    let count = bytes.count
    var index = 0
    var high: UInt64 = 0
    while index + 8 <= count {
        high |= base.loadUnaligned(fromByteOffset: index, as: UInt64.self)
        index += 8
    }
    while index < count {
        high |= UInt64(base.load(fromByteOffset: index, as: UInt8.self))
        index += 1
    }
    return high & 0x8080_8080_8080_8080 == 0
}

/// Decodes a UTF-8 field of `min...max` bytes or throws with reason `malformed`/`oversize`.
func decodeText(
    _ bytes: UnsafeRawBufferPointer, field: @autoclosure () -> String, min: Int, max: Int, texts: TextInterner? = nil
) throws(WireError) -> String {
    if bytes.count < min {
        throw .malformed("\(field()) is \(bytes.count) bytes, at least \(min) expected")
    }
    if bytes.count > max {
        throw WireError(.oversize, "\(field()) is \(bytes.count) bytes, at most \(max) allowed")
    }
    guard let text = texts?.text(bytes) ?? validUTF8(bytes) else {
        throw .malformed("\(field()) is not valid UTF-8")
    }
    if containsNUL(bytes) { throw .malformed("\(field()) contains a NUL byte (U+0000)") }
    return text
}

/// Whether `bytes` hold a 0 byte: ids and sources are stored as text, which ends at NUL.
@inline(__always)
func containsNUL(_ bytes: UnsafeRawBufferPointer) -> Bool {
    guard let base = bytes.baseAddress, bytes.count > 0 else { return false }
    return memchr(base, 0, bytes.count) != nil
}

/// Whether `byte` may appear in a step, action or deep link name: `[A-Za-z0-9_.:-]`.
@inline(__always)
func isNameByte(_ byte: UInt8) -> Bool {
    switch byte {
    case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
        UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "_"), UInt8(ascii: "."),
        UInt8(ascii: ":"), UInt8(ascii: "-"):
        return true
    default:
        return false
    }
}

/// Checks the shape of a name (1...max bytes of `[A-Za-z0-9_.:-]`).
func validateName(_ name: String, field: String, max: Int) throws(WireError) {
    let count = name.utf8.count
    if count == 0 { throw .malformed("\(field) is empty") }
    if count > max { throw WireError(.oversize, "\(field) is \(count) bytes, at most \(max) allowed") }
    // Checked in place when the string's bytes are (a native string): the view's iterator costs
    // more than the check, and every event a daemon publishes names a step.
    if name.utf8.withContiguousStorageIfAvailable({ $0.allSatisfy(isNameByte) }) == true { return }
    for byte in name.utf8 where !isNameByte(byte) {
        throw .malformed(
            "\(field) \(quoted(name)) contains byte 0x\(WireHex.string([byte])), only [A-Za-z0-9_.:-] allowed")
    }
}

/// Checks the length of a free text field (0 or 1...max bytes).
func validateText(_ text: String, field: String, min: Int, max: Int) throws(WireError) {
    let count = text.utf8.count
    if count < min { throw .malformed("\(field) is \(count) bytes, at least \(min) expected") }
    if count > max { throw WireError(.oversize, "\(field) is \(count) bytes, at most \(max) allowed") }
}

/// A string quoted for an error detail, cut at 64 characters.
func quoted(_ text: String) -> String {
    let cut = text.count > 64 ? String(text.prefix(64)) + "…" : text
    return "\"" + cut + "\""
}

/// Runs `body` over the contiguous bytes of `bytes`, keeping the typed error.
@inline(__always)
func withRawBytes<R>(
    _ bytes: ArraySlice<UInt8>, _ body: (UnsafeRawBufferPointer) throws(WireError) -> R
) throws(WireError) -> R {
    let result: Result<R, WireError> = bytes.withUnsafeBytes { raw in
        Result { () throws(WireError) -> R in try body(raw) }
    }
    return try result.get()
}

/// Runs `body` over the contiguous bytes of `bytes`, keeping the typed error.
@inline(__always)
func withRawBytes<R>(
    _ bytes: [UInt8], _ body: (UnsafeRawBufferPointer) throws(WireError) -> R
) throws(WireError) -> R {
    let result: Result<R, WireError> = bytes.withUnsafeBytes { raw in
        Result { () throws(WireError) -> R in try body(raw) }
    }
    return try result.get()
}
