/// The JSON codec for ``WireValue`` (content type 1): a small strict RFC 8259 parser and a
/// deterministic writer. It does not use Foundation.
///
/// Writing: map keys sorted by their UTF-8 bytes, no whitespace, strings escaped minimally
/// (`\"`, `\\`, `\b`, `\f`, `\n`, `\r`, `\t`, other controls as `\u00XX`; everything else as
/// raw UTF-8), ints as decimal, doubles in the shortest form that round-trips and always with a
/// `.` or an exponent (`1.0`, `0.1`, `1e+300`, `-0.0`) so they decode as doubles again. NaN and
/// infinities are not representable and throw.
///
/// Reading: a number without fraction or exponent that fits an Int64 is an int, any other
/// number a double (a number beyond the double range throws). Rejected with reason `malformed`:
/// invalid UTF-8, a byte-order mark, control characters in strings, lone surrogates in `\u`
/// escapes, duplicate keys, nesting deeper than the limit, anything after the value but
/// whitespace.
public enum WireJSON {
    // MARK: Writing

    /// Appends the JSON text of `value`.
    public static func encode(
        _ value: WireValue, into bytes: inout [UInt8], maxDepth: Int = WireLimits.default.maxDepth
    ) throws(WireError) {
        try write(value, into: &bytes, depth: 0, maxDepth: maxDepth)
    }

    /// The JSON text of `value`, as bytes.
    public static func encode(
        _ value: WireValue, maxDepth: Int = WireLimits.default.maxDepth
    ) throws(WireError) -> [UInt8] {
        var bytes: [UInt8] = []
        try encode(value, into: &bytes, maxDepth: maxDepth)
        return bytes
    }

    /// The JSON text of `value`, as a string.
    public static func string(
        _ value: WireValue, maxDepth: Int = WireLimits.default.maxDepth
    ) throws(WireError) -> String {
        String(decoding: try encode(value, maxDepth: maxDepth), as: UTF8.self)
    }

    /// Appends the JSON object of `params`.
    public static func encode(
        params: WireParams, into bytes: inout [UInt8], maxDepth: Int = WireLimits.default.maxDepth
    ) throws(WireError) {
        try writeMap(params, into: &bytes, depth: 1, maxDepth: maxDepth)
    }

    private static func write(
        _ value: WireValue, into bytes: inout [UInt8], depth: Int, maxDepth: Int
    ) throws(WireError) {
        switch value {
        case .null: bytes.append(contentsOf: "null".utf8)
        case .bool(let flag): bytes.append(contentsOf: flag ? "true".utf8 : "false".utf8)
        case .int(let number): writeInt(number, into: &bytes)
        case .double(let number):
            guard number.isFinite else { throw .malformed("\(number) is not representable in JSON") }
            let text = number.description
            bytes.append(contentsOf: text.utf8)
            // Swift's description is the shortest round-trip form and keeps ".0" on integral
            // values below 2^53; larger ones use an exponent. Guard anyway.
            if !text.utf8.contains(where: { $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: "e") }) {
                bytes.append(contentsOf: ".0".utf8)
            }
        case .string(let text): writeString(text, into: &bytes)
        case .list(let elements):
            if depth + 1 > maxDepth { throw .malformed("value nests deeper than \(maxDepth) levels") }
            bytes.append(UInt8(ascii: "["))
            var first = true
            for element in elements {
                if !first { bytes.append(UInt8(ascii: ",")) }
                first = false
                try write(element, into: &bytes, depth: depth + 1, maxDepth: maxDepth)
            }
            bytes.append(UInt8(ascii: "]"))
        case .map(let entries):
            try writeMap(entries, into: &bytes, depth: depth + 1, maxDepth: maxDepth)
        }
    }

    private static func writeMap(
        _ entries: [String: WireValue], into bytes: inout [UInt8], depth: Int, maxDepth: Int
    ) throws(WireError) {
        if depth > maxDepth { throw .malformed("value nests deeper than \(maxDepth) levels") }
        bytes.append(UInt8(ascii: "{"))
        if entries.count == 1, let (key, value) = entries.first {
            writeString(key, into: &bytes)
            bytes.append(UInt8(ascii: ":"))
            try write(value, into: &bytes, depth: depth, maxDepth: maxDepth)
        } else {
            var first = true
            for key in sortedKeys(entries) {
                if !first { bytes.append(UInt8(ascii: ",")) }
                first = false
                writeString(key, into: &bytes)
                bytes.append(UInt8(ascii: ":"))
                try write(entries[key].unsafelyUnwrapped, into: &bytes, depth: depth, maxDepth: maxDepth)
            }
        }
        bytes.append(UInt8(ascii: "}"))
    }

    private static func writeInt(_ number: Int64, into bytes: inout [UInt8]) {
        if number == 0 {
            bytes.append(UInt8(ascii: "0"))
            return
        }
        var magnitude = number.magnitude
        if number < 0 { bytes.append(UInt8(ascii: "-")) }
        let start = bytes.count
        while magnitude > 0 {
            bytes.append(UInt8(ascii: "0") + UInt8(magnitude % 10))
            magnitude /= 10
        }
        bytes[start...].reverse()
    }

    private static let hexDigits: [UInt8] = Array("0123456789abcdef".utf8)

    private static func writeString(_ text: String, into bytes: inout [UInt8]) {
        bytes.append(UInt8(ascii: "\""))
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "\""):
                bytes.append(UInt8(ascii: "\\"))
                bytes.append(byte)
            case UInt8(ascii: "\\"):
                bytes.append(UInt8(ascii: "\\"))
                bytes.append(byte)
            case 0x08:
                bytes.append(UInt8(ascii: "\\"))
                bytes.append(UInt8(ascii: "b"))
            case 0x0C:
                bytes.append(UInt8(ascii: "\\"))
                bytes.append(UInt8(ascii: "f"))
            case 0x0A:
                bytes.append(UInt8(ascii: "\\"))
                bytes.append(UInt8(ascii: "n"))
            case 0x0D:
                bytes.append(UInt8(ascii: "\\"))
                bytes.append(UInt8(ascii: "r"))
            case 0x09:
                bytes.append(UInt8(ascii: "\\"))
                bytes.append(UInt8(ascii: "t"))
            case 0x00..<0x20:
                bytes.append(contentsOf: "\\u00".utf8)
                bytes.append(hexDigits[Int(byte >> 4)])
                bytes.append(hexDigits[Int(byte & 0x0F)])
            default: bytes.append(byte)
            }
        }
        bytes.append(UInt8(ascii: "\""))
    }

    // MARK: Reading

    /// Decodes exactly one JSON value filling `bytes` (surrounding whitespace allowed).
    /// - Throws: `malformed` with the offset and what is wrong.
    public static func decode(
        _ bytes: UnsafeRawBufferPointer, maxDepth: Int = WireLimits.default.maxDepth
    ) throws(WireError) -> WireValue {
        var parser = Parser(bytes: bytes, maxDepth: maxDepth)
        parser.skipWhitespace()
        let value = try parser.parseValue(depth: 0)
        parser.skipWhitespace()
        if parser.offset != bytes.count {
            throw parser.error("unexpected \(parser.describeCurrent()) after the value")
        }
        return value
    }

    /// Decodes exactly one JSON value filling `bytes`.
    public static func decode(
        _ bytes: [UInt8], maxDepth: Int = WireLimits.default.maxDepth
    ) throws(WireError) -> WireValue {
        try withRawBytes(bytes) { (raw) throws(WireError) in try decode(raw, maxDepth: maxDepth) }
    }

    /// Decodes exactly one JSON value filling `bytes`.
    public static func decode(
        _ bytes: ArraySlice<UInt8>, maxDepth: Int = WireLimits.default.maxDepth
    ) throws(WireError) -> WireValue {
        try withRawBytes(bytes) { (raw) throws(WireError) in try decode(raw, maxDepth: maxDepth) }
    }

    /// Decodes exactly one JSON value from a string.
    public static func decode(
        _ text: String, maxDepth: Int = WireLimits.default.maxDepth
    ) throws(WireError) -> WireValue {
        try decode(Array(text.utf8), maxDepth: maxDepth)
    }

    private struct Parser {
        let bytes: UnsafeRawBufferPointer
        let maxDepth: Int
        var offset = 0
        var scratch: [UInt8] = []

        init(bytes: UnsafeRawBufferPointer, maxDepth: Int) {
            self.bytes = bytes
            self.maxDepth = maxDepth
        }

        func error(_ detail: String) -> WireError {
            .malformed("JSON: \(detail) at offset \(offset)")
        }

        func describeCurrent() -> String {
            guard offset < bytes.count else { return "end of input" }
            let byte = bytes[offset]
            if byte >= 0x21 && byte < 0x7F { return "'\(Character(Unicode.Scalar(byte)))'" }
            return "byte 0x\(WireHex.string([byte]))"
        }

        @inline(__always)
        mutating func skipWhitespace() {
            while offset < bytes.count {
                switch bytes[offset] {
                case 0x20, 0x09, 0x0A, 0x0D: offset += 1
                default: return
                }
            }
        }

        mutating func expectLiteral(_ literal: StaticString, _ value: WireValue) throws(WireError) -> WireValue {
            let count = literal.utf8CodeUnitCount
            let start = literal.utf8Start
            guard offset + count <= bytes.count else { throw error("truncated literal") }
            for index in 0..<count where bytes[offset + index] != start[index] {
                throw error("invalid literal")
            }
            offset += count
            return value
        }

        mutating func parseValue(depth: Int) throws(WireError) -> WireValue {
            guard offset < bytes.count else { throw error("unexpected end of input, a value expected") }
            switch bytes[offset] {
            case UInt8(ascii: "{"): return try parseObject(depth: depth + 1)
            case UInt8(ascii: "["): return try parseArray(depth: depth + 1)
            case UInt8(ascii: "\""): return .string(try parseString())
            case UInt8(ascii: "t"): return try expectLiteral("true", .bool(true))
            case UInt8(ascii: "f"): return try expectLiteral("false", .bool(false))
            case UInt8(ascii: "n"): return try expectLiteral("null", .null)
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try parseNumber()
            default: throw error("unexpected \(describeCurrent()), a value expected")
            }
        }

        mutating func parseObject(depth: Int) throws(WireError) -> WireValue {
            if depth > maxDepth { throw error("nesting deeper than \(maxDepth) levels") }
            offset += 1  // {
            var entries: [String: WireValue] = [:]
            skipWhitespace()
            if offset < bytes.count, bytes[offset] == UInt8(ascii: "}") {
                offset += 1
                return .map(entries)
            }
            while true {
                skipWhitespace()
                guard offset < bytes.count, bytes[offset] == UInt8(ascii: "\"") else {
                    throw error("unexpected \(describeCurrent()), a string key expected")
                }
                let keyOffset = offset
                let key = try parseString()
                skipWhitespace()
                guard offset < bytes.count, bytes[offset] == UInt8(ascii: ":") else {
                    throw error("unexpected \(describeCurrent()), ':' expected")
                }
                offset += 1
                skipWhitespace()
                let value = try parseValue(depth: depth)
                if entries.updateValue(value, forKey: key) != nil {
                    throw .malformed("JSON: duplicate key \(quoted(key)) at offset \(keyOffset)")
                }
                skipWhitespace()
                guard offset < bytes.count else { throw error("unexpected end of input in an object") }
                if bytes[offset] == UInt8(ascii: ",") {
                    offset += 1
                    continue
                }
                if bytes[offset] == UInt8(ascii: "}") {
                    offset += 1
                    return .map(entries)
                }
                throw error("unexpected \(describeCurrent()), ',' or '}' expected")
            }
        }

        mutating func parseArray(depth: Int) throws(WireError) -> WireValue {
            if depth > maxDepth { throw error("nesting deeper than \(maxDepth) levels") }
            offset += 1  // [
            var elements: [WireValue] = []
            skipWhitespace()
            if offset < bytes.count, bytes[offset] == UInt8(ascii: "]") {
                offset += 1
                return .list(elements)
            }
            while true {
                skipWhitespace()
                elements.append(try parseValue(depth: depth))
                skipWhitespace()
                guard offset < bytes.count else { throw error("unexpected end of input in an array") }
                if bytes[offset] == UInt8(ascii: ",") {
                    offset += 1
                    continue
                }
                if bytes[offset] == UInt8(ascii: "]") {
                    offset += 1
                    return .list(elements)
                }
                throw error("unexpected \(describeCurrent()), ',' or ']' expected")
            }
        }

        mutating func parseHex4() throws(WireError) -> UInt16 {
            guard offset + 4 <= bytes.count else { throw error("truncated \\u escape") }
            var value: UInt16 = 0
            for index in offset..<offset + 4 {
                guard let nibble = hexNibble(bytes[index]) else { throw error("invalid hex digit in \\u escape") }
                value = value << 4 | UInt16(nibble)
            }
            offset += 4
            return value
        }

        mutating func parseString() throws(WireError) -> String {
            let start = offset
            offset += 1  // opening quote
            let contentStart = offset
            // Fast path: no escapes.
            while offset < bytes.count {
                let byte = bytes[offset]
                if byte == UInt8(ascii: "\"") {
                    let raw = UnsafeRawBufferPointer(rebasing: bytes[contentStart..<offset])
                    guard let text = validUTF8(raw) else {
                        throw .malformed("JSON: string at offset \(start) is not valid UTF-8")
                    }
                    offset += 1
                    return text
                }
                if byte == UInt8(ascii: "\\") { break }
                if byte < 0x20 { throw error("unescaped control character 0x\(WireHex.string([byte])) in a string") }
                offset += 1
            }
            guard offset < bytes.count else { throw .malformed("JSON: unterminated string at offset \(start)") }
            // Slow path: build the bytes, decoding escapes.
            scratch.removeAll(keepingCapacity: true)
            scratch.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[contentStart..<offset]))
            while offset < bytes.count {
                let byte = bytes[offset]
                if byte == UInt8(ascii: "\"") {
                    offset += 1
                    guard let text = String(validating: scratch, as: UTF8.self) else {
                        throw .malformed("JSON: string at offset \(start) is not valid UTF-8")
                    }
                    return text
                }
                if byte < 0x20 { throw error("unescaped control character 0x\(WireHex.string([byte])) in a string") }
                if byte != UInt8(ascii: "\\") {
                    scratch.append(byte)
                    offset += 1
                    continue
                }
                offset += 1
                guard offset < bytes.count else { break }
                let escape = bytes[offset]
                offset += 1
                switch escape {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): scratch.append(escape)
                case UInt8(ascii: "b"): scratch.append(0x08)
                case UInt8(ascii: "f"): scratch.append(0x0C)
                case UInt8(ascii: "n"): scratch.append(0x0A)
                case UInt8(ascii: "r"): scratch.append(0x0D)
                case UInt8(ascii: "t"): scratch.append(0x09)
                case UInt8(ascii: "u"):
                    let unit = try parseHex4()
                    var scalarValue = UInt32(unit)
                    if (0xD800...0xDBFF).contains(unit) {
                        guard offset + 2 <= bytes.count, bytes[offset] == UInt8(ascii: "\\"),
                            bytes[offset + 1] == UInt8(ascii: "u")
                        else {
                            throw error(
                                "lone high surrogate \\u\(WireHex.string([UInt8(unit >> 8), UInt8(unit & 0xFF)]))")
                        }
                        offset += 2
                        let low = try parseHex4()
                        guard (0xDC00...0xDFFF).contains(low) else {
                            throw error("high surrogate not followed by a low surrogate")
                        }
                        scalarValue = 0x10000 + ((UInt32(unit) - 0xD800) << 10) + (UInt32(low) - 0xDC00)
                    } else if (0xDC00...0xDFFF).contains(unit) {
                        throw error("lone low surrogate \\u\(WireHex.string([UInt8(unit >> 8), UInt8(unit & 0xFF)]))")
                    }
                    guard let scalar = Unicode.Scalar(scalarValue) else { throw error("invalid \\u escape") }
                    scratch.append(contentsOf: UTF8.encode(scalar).unsafelyUnwrapped)
                default:
                    offset -= 1
                    throw error("invalid escape \\\(describeCurrent())")
                }
            }
            throw .malformed("JSON: unterminated string at offset \(start)")
        }

        mutating func parseNumber() throws(WireError) -> WireValue {
            let start = offset
            var negative = false
            if bytes[offset] == UInt8(ascii: "-") {
                negative = true
                offset += 1
            }
            func isDigit(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }
            guard offset < bytes.count, isDigit(bytes[offset]) else { throw error("a digit expected in a number") }
            var magnitude: UInt64 = 0
            var overflow = false
            if bytes[offset] == UInt8(ascii: "0") {
                offset += 1
                if offset < bytes.count, isDigit(bytes[offset]) { throw error("leading zero in a number") }
            } else {
                while offset < bytes.count, isDigit(bytes[offset]) {
                    let digit = UInt64(bytes[offset] - UInt8(ascii: "0"))
                    let (times10, o1) = magnitude.multipliedReportingOverflow(by: 10)
                    let (sum, o2) = times10.addingReportingOverflow(digit)
                    if o1 || o2 { overflow = true } else { magnitude = sum }
                    offset += 1
                }
            }
            var isInteger = true
            if offset < bytes.count, bytes[offset] == UInt8(ascii: ".") {
                isInteger = false
                offset += 1
                guard offset < bytes.count, isDigit(bytes[offset]) else { throw error("a digit expected after '.'") }
                while offset < bytes.count, isDigit(bytes[offset]) { offset += 1 }
            }
            if offset < bytes.count, bytes[offset] == UInt8(ascii: "e") || bytes[offset] == UInt8(ascii: "E") {
                isInteger = false
                offset += 1
                if offset < bytes.count, bytes[offset] == UInt8(ascii: "+") || bytes[offset] == UInt8(ascii: "-") {
                    offset += 1
                }
                guard offset < bytes.count, isDigit(bytes[offset]) else {
                    throw error("a digit expected in an exponent")
                }
                while offset < bytes.count, isDigit(bytes[offset]) { offset += 1 }
            }
            if isInteger && !overflow {
                if negative {
                    if magnitude <= UInt64(Int64.max) { return .int(-Int64(magnitude)) }
                    if magnitude == UInt64(Int64.max) + 1 { return .int(Int64.min) }
                } else if magnitude <= UInt64(Int64.max) {
                    return .int(Int64(magnitude))
                }
            }
            let text = String(decoding: UnsafeRawBufferPointer(rebasing: bytes[start..<offset]), as: UTF8.self)
            guard let number = Double(text), number.isFinite else {
                offset = start
                throw error("number \(text) is out of the double range")
            }
            return .double(number)
        }
    }
}
