/// A command-line parameter that cannot be read, with what is wrong.
///
/// ``code`` says what is wrong, so that a caller can match it (`error.code == .duplicateKey`);
/// ``description`` says it for a person, quoting the argument. New codes do not break callers.
public struct ParamSyntaxError: Error, CustomStringConvertible, Sendable, Hashable {
    /// What is wrong with the argument.
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        private enum Value: String {
            case malformed
            case duplicateKey = "duplicate-key"
            case invalidJSON = "invalid-json"
            case outOfRange = "out-of-range"
        }

        private let value: Value

        private init(_ value: Value) {
            self.value = value
        }

        /// The argument is not `key=value` or `key:=JSON`, or its key is empty.
        public static let malformed = Code(.malformed)
        /// The same key is given twice.
        public static let duplicateKey = Code(.duplicateKey)
        /// The value after `:=` is not JSON.
        public static let invalidJSON = Code(.invalidJSON)
        /// A number that does not fit: an integer beyond 64 bits, or a double beyond its range.
        public static let outOfRange = Code(.outOfRange)

        public var description: String { value.rawValue }
    }

    /// What is wrong, to match.
    public var code: Code
    /// What is wrong, quoting the argument, in words.
    public var description: String

    init(_ code: Code, _ description: String) {
        self.code = code
        self.description = description
    }
}

/// Step and action params written on a command line: `key=value` or `key:=JSON`.
///
/// `true`/`false` become bools, an integer an int (64-bit; a bigger one is refused), a JSON
/// number with a fraction or exponent a double, anything else a string; `key:=JSON` takes any
/// JSON value (`id:='"23"'` for the string "23"). The same rules as docs/examples/publish_step.py.
public enum CommandLineParams {
    /// Reads `key=value` / `key:=JSON` arguments; a key given twice is refused.
    public static func parse(_ arguments: [String]) throws(ParamSyntaxError) -> WireParams {
        var params: WireParams = [:]
        for argument in arguments {
            let (key, value) = try parseParam(argument)
            if params[key] != nil { throw ParamSyntaxError(.duplicateKey, "parameter \(quoted(key)) is given twice") }
            params[key] = value
        }
        return params
    }

    static func parseParam(_ argument: String) throws(ParamSyntaxError) -> (String, WireValue) {
        guard let equals = argument.firstIndex(of: "=") else {
            throw ParamSyntaxError(.malformed, "\(quoted(argument)) is not key=value (or key:=JSON)")
        }
        var key = String(argument[..<equals])
        let raw = String(argument[argument.index(after: equals)...])
        let value: WireValue
        if key.hasSuffix(":"), !key.dropLast().contains(":") {
            key.removeLast()
            do {
                value = try WireJSON.decode(raw)
            } catch {
                throw ParamSyntaxError(
                    .invalidJSON, "\(quoted(argument)): the value after ':=' is not JSON (\(error.detail))")
            }
        } else {
            value = try parseValue(raw)
        }
        if key.isEmpty { throw ParamSyntaxError(.malformed, "\(quoted(argument)) has an empty key") }
        return (key, value)
    }

    /// `true`/`false` → bool, an integer → int, a JSON number → double, anything else → string.
    static func parseValue(_ text: String) throws(ParamSyntaxError) -> WireValue {
        if text == "true" { return .bool(true) }
        if text == "false" { return .bool(false) }
        let bytes = Array(text.utf8)
        guard let isInteger = jsonNumberShape(bytes) else { return .string(text) }
        if isInteger {
            guard let value = Int64(text) else {
                throw ParamSyntaxError(
                    .outOfRange,
                    "\(quoted(text)) (\(text.utf8.count) digits) does not fit a signed 64-bit int; end it with .0 to send a double"
                )
            }
            return .int(value)
        }
        guard let value = Double(text), value.isFinite else {
            throw ParamSyntaxError(.outOfRange, "\(quoted(text)) is out of the double range")
        }
        return .double(value)
    }

    /// Whether `bytes` is an RFC 8259 number: `true` for an integer, `false` for one with a fraction
    /// or exponent, `nil` for anything else.
    static func jsonNumberShape(_ bytes: [UInt8]) -> Bool? {
        var index = 0
        func digits() -> Int {
            let start = index
            while index < bytes.count, bytes[index] >= UInt8(ascii: "0"), bytes[index] <= UInt8(ascii: "9") {
                index += 1
            }
            return index - start
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: "-") { index += 1 }
        let start = index
        let intDigits = digits()
        if intDigits == 0 || (intDigits > 1 && bytes[start] == UInt8(ascii: "0")) { return nil }
        var isInteger = true
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            index += 1
            if digits() == 0 { return nil }
            isInteger = false
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
            index += 1
            if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") {
                index += 1
            }
            if digits() == 0 { return nil }
            isInteger = false
        }
        return index == bytes.count ? isInteger : nil
    }
}
