/// A typed value carried on the wire: the parameters of a step or an action, the body of a state.
///
/// It is the canonical, language-neutral form of FlowBus data. Both payload encodings
/// (JSON and the compact binary form) map onto it one to one, so a Python client sending
/// JSON and a Swift client sending binary describe the same value.
public enum WireValue: Hashable, Sendable {
    case null
    case bool(Bool)
    case int(Int64)
    case double(Double)
    case string(String)
    case list([WireValue])
    case map([String: WireValue])
}

extension WireValue {
    /// The string inside a `.string`, or `nil`.
    public var stringValue: String? {
        if case .string(let value) = self { return value }
        return nil
    }

    /// The integer inside an `.int`, or `nil`.
    public var intValue: Int64? {
        if case .int(let value) = self { return value }
        return nil
    }

    /// The number inside an `.int` or a `.double`, as a `Double`, or `nil`.
    public var doubleValue: Double? {
        switch self {
        case .double(let value): return value
        case .int(let value): return Double(value)
        default: return nil
        }
    }

    /// The flag inside a `.bool`, or `nil`.
    public var boolValue: Bool? {
        if case .bool(let value) = self { return value }
        return nil
    }

    /// The entries inside a `.map`, or `nil`.
    public var mapValue: [String: WireValue]? {
        if case .map(let value) = self { return value }
        return nil
    }

    /// The elements inside a `.list`, or `nil`.
    public var listValue: [WireValue]? {
        if case .list(let value) = self { return value }
        return nil
    }

    /// The value's type as params declare it: `null`, `bool`, `int`, `double`, `string`, `list`, `map`.
    public var typeName: String {
        switch self {
        case .null: "null"
        case .bool: "bool"
        case .int: "int"
        case .double: "double"
        case .string: "string"
        case .list: "list"
        case .map: "map"
        }
    }

    /// The value as a person would write it in a log line or on a command line:
    /// strings bare, numbers and flags as literals, lists and maps in brackets.
    public var displayText: String {
        switch self {
        case .null: return "null"
        case .bool(let value): return value ? "true" : "false"
        case .int(let value): return String(value)
        case .double(let value): return String(value)
        case .string(let value): return value
        case .list(let values): return "[" + values.map(\.displayText).joined(separator: ", ") + "]"
        case .map(let entries):
            return "{"
                + entries.sorted { $0.key < $1.key }
                .map { "\($0.key): \($0.value.displayText)" }.joined(separator: ", ") + "}"
        }
    }
}

extension WireValue: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByFloatLiteral,
    ExpressibleByBooleanLiteral, ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral, ExpressibleByNilLiteral
{
    public init(stringLiteral value: String) { self = .string(value) }
    public init(integerLiteral value: Int64) { self = .int(value) }
    public init(floatLiteral value: Double) { self = .double(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(arrayLiteral elements: WireValue...) { self = .list(elements) }
    public init(dictionaryLiteral elements: (String, WireValue)...) {
        self = .map(Dictionary(elements, uniquingKeysWith: { _, last in last }))
    }
    public init(nilLiteral: ()) { self = .null }
}

/// The parameters of a step or an action: named, typed values.
public typealias WireParams = [String: WireValue]
