import Testing

@testable import FlowBusWire

/// Values covering every case, edge numbers, unicode and nesting.
let sampleValues: [WireValue] = [
    .null, .bool(true), .bool(false),
    .int(0), .int(1), .int(-1), .int(23452), .int(.max), .int(.min),
    .double(0.1), .double(1e300), .double(-1e-300), .double(1.0), .double(-2.5), .double(.leastNonzeroMagnitude),
    .double(.greatestFiniteMagnitude), .double(9007199254740993.0), .double(1e16),
    .string(""), .string("hello"), .string("é ü ß 日本語 🎬"), .string("quote \" backslash \\ slash / nl \n tab \t"),
    .string("\u{0}\u{1}\u{1F}\u{7F}"), .string("\u{2028}\u{2029}"),
    .list([]), .list([.int(1), .string("a"), .null, .list([.bool(true)])]),
    .map([:]), .map(["withMovieId": .int(23452)]),
    .map([
        "b": .list([.map(["x": .double(0.5)]), .string("")]), "a": .null, "é": .int(-7), "": .string("empty key"),
        "nested": .map(["deeper": .map(["deepest": .list([.int(1), .int(2)])])]),
    ]),
]

func nested(_ depth: Int, map: Bool = false) -> WireValue {
    var value: WireValue = .int(1)
    for _ in 0..<depth { value = map ? .map(["k": value]) : .list([value]) }
    return value
}

func expectWireError(
    _ reason: DiagnosticReason, _ containing: String? = nil, sourceLocation: SourceLocation = #_sourceLocation,
    _ body: () throws(WireError) -> Void
) {
    do {
        try body()
        Issue.record("expected a \(reason) error, nothing thrown", sourceLocation: sourceLocation)
    } catch {
        #expect(error.reason == reason, "\(error)", sourceLocation: sourceLocation)
        if let containing {
            #expect(error.detail.contains(containing), "\(error.detail)", sourceLocation: sourceLocation)
        }
    }
}

@Suite struct FBVTests {
    @Test(arguments: sampleValues)
    func roundTrip(_ value: WireValue) throws {
        let bytes = try FBV.encode(value)
        #expect(try FBV.decode(bytes) == value)
    }

    @Test func negativeZeroAndNaNKeepTheirBits() throws {
        let zero = try FBV.decode(try FBV.encode(.double(-0.0)))
        #expect(zero.doubleValue?.sign == .minus)
        let nan = Double(nan: 0x1234, signaling: false)
        let decoded = try FBV.decode(try FBV.encode(.double(nan)))
        #expect(decoded.doubleValue?.bitPattern == nan.bitPattern)
    }

    @Test func exactBytes() throws {
        #expect(try FBV.encode(.null) == [0x00])
        #expect(try FBV.encode(.bool(false)) == [0x01])
        #expect(try FBV.encode(.bool(true)) == [0x02])
        #expect(try FBV.encode(.int(-2)) == [0x03, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFE])
        #expect(try FBV.encode(.double(1.0)) == [0x04, 0x3F, 0xF0, 0, 0, 0, 0, 0, 0])
        #expect(try FBV.encode(.string("hé")) == [0x05, 0, 0, 0, 3, 0x68, 0xC3, 0xA9])
        #expect(try FBV.encode(.list([.null, .bool(true)])) == [0x06, 0, 0, 0, 2, 0x00, 0x02])
        // Keys sorted by UTF-8 bytes: "B" (0x42) < "a" (0x61) < "é" (0xC3 0xA9).
        #expect(
            try FBV.encode(.map(["é": .null, "a": .null, "B": .null]))
                == [0x07, 0, 0, 0, 3, 0, 1, 0x42, 0x00, 0, 1, 0x61, 0x00, 0, 2, 0xC3, 0xA9, 0x00])
    }

    @Test func encodingIsDeterministic() throws {
        var entries: WireParams = [:]
        for index in 0..<50 { entries["key\(index)"] = .int(Int64(index)) }
        let first = try FBV.encode(.map(entries))
        let rebuilt = WireParams(uniqueKeysWithValues: entries.shuffled())
        #expect(try FBV.encode(.map(rebuilt)) == first)
    }

    @Test func depthLimit() throws {
        #expect(try FBV.decode(try FBV.encode(nested(32))) == nested(32))
        #expect(try FBV.decode(try FBV.encode(nested(32, map: true))) == nested(32, map: true))
        expectWireError(.malformed, "deeper") { () throws(WireError) in _ = try FBV.encode(nested(33)) }
        // Hand-built 33 nested lists.
        var bytes: [UInt8] = []
        for _ in 0..<33 { bytes += [0x06, 0, 0, 0, 1] }
        bytes.append(0x00)
        expectWireError(.malformed, "deeper than 32") { () throws(WireError) in _ = try FBV.decode(bytes) }
        expectWireError(.malformed, "deeper than 31") { () throws(WireError) in
            _ = try FBV.decode(Array(bytes[5...]), maxDepth: 31)
        }
    }

    @Test func decodeErrors() {
        let cases: [([UInt8], String)] = [
            ([], "tag"),
            ([0x08], "tag 0x08"),
            ([0xFF], "tag 0xff"),
            ([0x03, 0, 0, 0], "int needs 8"),
            ([0x04, 0, 0], "double needs 8"),
            ([0x05, 0, 0, 0, 5, 0x61], "string needs 5"),
            ([0x05, 0, 0], "string length"),
            ([0x05, 0, 0, 0, 2, 0xC3, 0x28], "not valid UTF-8"),
            ([0x05, 0, 0, 0, 3, 0xED, 0xA0, 0x80], "not valid UTF-8"),  // encoded surrogate
            ([0x05, 0, 0, 0, 2, 0xC0, 0x80], "not valid UTF-8"),  // overlong NUL
            ([0x06, 0, 0, 0, 2, 0x00], "list of 2 element(s) needs 2"),
            ([0x06, 0, 0, 0, 2, 0x00, 0x03], "int needs 8"),
            ([0x06, 0xFF, 0xFF, 0xFF, 0xFF], "list of 4294967295"),
            ([0x07, 0, 0, 0, 1, 0, 1, 0x61], "tag"),
            ([0x07, 0, 0, 0, 1, 0, 5, 0x61], "key needs 5"),
            ([0x07, 0, 0, 0, 1, 0, 1, 0xFF, 0x00], "key at offset 7 is not valid UTF-8"),
            ([0x07, 0, 0, 0, 2, 0, 1, 0x61, 0x00, 0, 1, 0x61, 0x02], "duplicate key \"a\""),
            ([0x07, 0x10, 0, 0, 0], "map of"),
            ([0x00, 0x00], "1 trailing byte"),
            ([0x02, 0x01, 0x02], "2 trailing byte"),
        ]
        for (bytes, detail) in cases {
            expectWireError(.malformed, detail) { () throws(WireError) in _ = try FBV.decode(bytes) }
        }
    }

    @Test func mapKeysInAnyOrderDecode() throws {
        let unsorted: [UInt8] = [0x07, 0, 0, 0, 2, 0, 1, 0x62, 0x00, 0, 1, 0x61, 0x02]
        #expect(try FBV.decode(unsorted) == .map(["a": .bool(true), "b": .null]))
    }
}

@Suite struct JSONTests {
    @Test(arguments: sampleValues)
    func roundTrip(_ value: WireValue) throws {
        let text = try WireJSON.encode(value)
        #expect(try WireJSON.decode(text) == value, "\(String(decoding: text, as: UTF8.self))")
    }

    @Test func writerIsDeterministicAndCompact() throws {
        #expect(try WireJSON.string(.map(["withMovieId": 23452])) == #"{"withMovieId":23452}"#)
        #expect(
            try WireJSON.string(.map(["b": 1, "a": [true, nil, "x"], "é": 0.1, "B": -0.0]))
                == #"{"B":-0.0,"a":[true,null,"x"],"b":1,"é":0.1}"#)
        #expect(try WireJSON.string(.double(1.0)) == "1.0")
        #expect(try WireJSON.string(.double(1e300)) == "1e+300")
        #expect(try WireJSON.string(.double(100)) == "100.0")
        #expect(try WireJSON.string(.int(.min)) == "-9223372036854775808")
        #expect(try WireJSON.string(.int(.max)) == "9223372036854775807")
        #expect(try WireJSON.string(.string("a\"b\\c/\n\u{1}\u{7F}é")) == "\"a\\\"b\\\\c/\\n\\u0001\u{7F}é\"")
        #expect(try WireJSON.string(.list([])) == "[]")
        #expect(try WireJSON.string(.map([:])) == "{}")
    }

    @Test func doublesStayDoubles() throws {
        for number in [0.0, -0.0, 1.0, 2.0, 1e16, 1e300, -1e-300, 0.1, 123456789.0, 9007199254740992.0] {
            let decoded = try WireJSON.decode(try WireJSON.encode(.double(number)))
            #expect(decoded == .double(number))
            #expect(decoded.doubleValue?.sign == number.sign)
        }
    }

    @Test func nonFiniteDoublesDoNotEncode() {
        for number in [Double.nan, .infinity, -.infinity] {
            expectWireError(.malformed, "not representable") { () throws(WireError) in
                _ = try WireJSON.encode(.double(number))
            }
        }
    }

    @Test func parsesNumbers() throws {
        #expect(try WireJSON.decode("0") == .int(0))
        #expect(try WireJSON.decode("-0") == .int(0))
        #expect(try WireJSON.decode("-9223372036854775808") == .int(.min))
        #expect(try WireJSON.decode("9223372036854775807") == .int(.max))
        #expect(try WireJSON.decode("9223372036854775808") == .double(9223372036854775808.0))
        #expect(try WireJSON.decode("-9223372036854775809") == .double(-9223372036854775809.0))
        #expect(try WireJSON.decode("1E2") == .double(100))
        #expect(try WireJSON.decode("1e-2") == .double(0.01))
        #expect(try WireJSON.decode("2.50") == .double(2.5))
        #expect(try WireJSON.decode("1e-400") == .double(0))
    }

    @Test func parsesEscapesAndWhitespace() throws {
        #expect(try WireJSON.decode(" \t\r\n{ \"a\" : [ 1 , 2 ] } \n") == .map(["a": [1, 2]]))
        #expect(try WireJSON.decode(#""\u00e9\u65E5\/\b\f\n\r\t\"\\""#) == .string("é日/\u{8}\u{C}\n\r\t\"\\"))
        #expect(try WireJSON.decode(#""\ud83c\udfac""#) == .string("🎬"))
        #expect(try WireJSON.decode(#""x\u0000y""#) == .string("x\u{0}y"))
        #expect(try WireJSON.decode("\"🎬 raw\"") == .string("🎬 raw"))
    }

    @Test func depthLimit() throws {
        let ok = String(repeating: "[", count: 32) + String(repeating: "]", count: 32)
        #expect(
            try WireJSON.decode(ok)
                == {
                    var value: WireValue = .list([])
                    for _ in 0..<31 { value = .list([value]) }
                    return value
                }())
        let tooDeep = String(repeating: "[", count: 33) + String(repeating: "]", count: 33)
        expectWireError(.malformed, "deeper than 32") { () throws(WireError) in _ = try WireJSON.decode(tooDeep) }
        let objects = String(repeating: "{\"k\":", count: 33) + "1" + String(repeating: "}", count: 33)
        expectWireError(.malformed, "deeper than 32") { () throws(WireError) in _ = try WireJSON.decode(objects) }
        expectWireError(.malformed, "deeper") { () throws(WireError) in _ = try WireJSON.encode(nested(33, map: true)) }
    }

    @Test(arguments: [
        ("", "end of input"), ("   ", "end of input"), ("{", "a string key expected"), ("{\"a\":1", "end of input"),
        ("{\"a\" 1}", "':' expected"), ("{\"a\":1,}", "a string key expected"), ("[1,]", "a value expected"),
        ("[1 2]", "',' or ']' expected"), ("{a:1}", "a string key expected"), ("tru", "truncated literal"),
        ("nul", "truncated literal"), ("trUe", "invalid literal"), ("01", "leading zero"), ("-", "digit expected"),
        ("1.", "digit expected after '.'"), (".5", "a value expected"), ("1e", "exponent"), ("+1", "a value expected"),
        ("1e999", "out of the double range"), ("\"abc", "unterminated string"), ("\"a\nb\"", "control character"),
        ("\"\\x\"", "invalid escape"), ("\"\\u12\"", "truncated \\u escape"), ("\"\\u12zz\"", "invalid hex digit"),
        ("\"\\u12", "truncated \\u escape"),
        ("\"\\ud800\"", "lone high surrogate"), ("\"\\udc00\"", "lone low surrogate"),
        ("\"\\ud800\\u0041\"", "not followed by a low surrogate"), ("{\"a\":1,\"a\":2}", "duplicate key \"a\""),
        ("1 2", "after the value"), ("{} x", "after the value"), ("nullx", "after the value"),
        ("NaN", "a value expected"),
        ("Infinity", "a value expected"), ("'a'", "a value expected"),
    ])
    func syntaxErrors(_ text: String, _ detail: String) {
        expectWireError(.malformed, detail) { () throws(WireError) in _ = try WireJSON.decode(text) }
    }

    @Test func invalidUTF8() {
        expectWireError(.malformed, "not valid UTF-8") { () throws(WireError) in
            _ = try WireJSON.decode([0x22, 0xC3, 0x28, 0x22])
        }
        expectWireError(.malformed, "not valid UTF-8") { () throws(WireError) in
            _ = try WireJSON.decode([0x22, 0x5C, 0x6E, 0xFF, 0x22])
        }
        expectWireError(.malformed, "byte 0xef") { () throws(WireError) in
            _ = try WireJSON.decode([0xEF, 0xBB, 0xBF, 0x31])
        }
        expectWireError(.malformed, "byte 0xff") { () throws(WireError) in _ = try WireJSON.decode([0x31, 0xFF]) }
    }
}

@Suite("UTF-8 text of wire fields")
struct WireTextTests {
    private func decoded(_ bytes: [UInt8]) -> String? {
        bytes.withUnsafeBytes { validUTF8($0) }
    }

    @Test("ASCII of every length around the eight-byte words decodes as it is")
    func ascii() {
        for count in 0...25 {
            let text = String((0..<count).map { Character(UnicodeScalar(UInt8(0x41 + $0))) })
            #expect(decoded(Array(text.utf8)) == text)
        }
    }

    @Test("Valid UTF-8 beyond ASCII decodes; a bad byte anywhere, in a word or in the tail, is refused")
    func beyondASCII() {
        #expect(decoded(Array("moviePicked — 영화 🎬".utf8)) == "moviePicked — 영화 🎬")
        for count in 1...20 {
            for position in 0..<count {
                var bytes = [UInt8](repeating: 0x61, count: count)
                bytes[position] = 0xFF
                #expect(decoded(bytes) == nil, "0xFF at \(position) of \(count)")
                bytes[position] = 0xC3  // a lead byte cut short, or followed by ASCII
                #expect(decoded(bytes) == nil, "a lone lead byte at \(position) of \(count)")
            }
        }
        #expect(decoded([0xC0, 0xAF]) == nil, "overlong")
        #expect(decoded([0xED, 0xA0, 0x80]) == nil, "surrogate")
    }
}
