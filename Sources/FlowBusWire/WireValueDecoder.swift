/// Decodes `Decodable` values from ``WireValue``s.
///
/// Accepts what ``WireValueEncoder`` produces, and is lenient where other languages differ: an
/// integer type accepts a `.double` with an exact integral value in range (`3.0`), `Float` and
/// `Double` accept an `.int`. A missing key or a `.null` decodes as `nil` for optionals.
public struct WireValueDecoder: Sendable {
    /// Values handed to `Decoder.userInfo`.
    public var userInfo: [CodingUserInfoKey: any Sendable]

    /// Creates a decoder.
    public init(userInfo: [CodingUserInfoKey: any Sendable] = [:]) {
        self.userInfo = userInfo
    }

    /// Decodes a `T` from `value`.
    /// - Throws: `DecodingError` when the value does not match `T`.
    public func decode<T: Decodable>(_ type: T.Type, from value: WireValue) throws -> T {
        if T.self == WireValue.self { return value as! T }
        return try T(from: _WireDecoder(value: value, codingPath: [], userInfo: userInfo))
    }

    /// Decodes a `T` from params (a map).
    public func decode<T: Decodable>(_ type: T.Type, from params: WireParams) throws -> T {
        try decode(type, from: .map(params))
    }

    /// Rebuilds an enum value from its canonical step/action form.
    ///
    /// Decodes `{name: params}` (Swift's synthesized enum form); if that fails and `params` is
    /// empty, tries the bare string `name` (enums with `String` raw values).
    /// - Throws: the `DecodingError` of the first attempt.
    public func decodeCanonical<T: Decodable>(_ type: T.Type, name: String, params: WireParams) throws -> T {
        do {
            return try decode(type, from: .map([name: .map(params)]))
        } catch {
            if params.isEmpty, let value = try? decode(type, from: .string(name)) { return value }
            throw error
        }
    }
}

/// Rebuilds an enum value from its canonical form with a default ``WireValueDecoder``.
/// See ``WireValueDecoder/decodeCanonical(_:name:params:)``.
public func decodeCanonical<T: Decodable>(_ type: T.Type, name: String, params: WireParams) throws -> T {
    try WireValueDecoder().decodeCanonical(type, name: name, params: params)
}

// MARK: - Implementation

func kindName(_ value: WireValue) -> String {
    switch value {
    case .null: return "null"
    case .bool: return "a bool"
    case .int: return "an int"
    case .double: return "a double"
    case .string: return "a string"
    case .list: return "a list"
    case .map: return "a map"
    }
}

func mismatch(_ type: Any.Type, _ value: WireValue, _ path: [any CodingKey]) -> DecodingError {
    // Names the key and the value sent: `expected String for zip, got int 75001`.
    let key = path.last.map { $0.intValue.map { " for [\($0)]" } ?? " for \($0.stringValue)" } ?? ""
    return .typeMismatch(
        type, .init(codingPath: path, debugDescription: "expected \(type)\(key), got \(sentValue(value))"))
}

/// A value as a mismatch names it: its kind, then the value when short.
func sentValue(_ value: WireValue) -> String {
    switch value {
    case .null: return "null"
    case .bool(let flag): return "bool \(flag)"
    case .int(let number): return "int \(number)"
    case .double(let number): return "double \(number)"
    case .string(let text): return text.count <= 40 ? "string \"\(text)\"" : "a string of \(text.count) characters"
    case .list(let values): return "a list of \(values.count)"
    case .map(let entries): return "a map of \(entries.count) key(s)"
    }
}

/// Why a canonical step or action did not decode, for a diagnostic: `nil` when the enum has no
/// case by that name (the error is at the top level), else what is wrong with the params, e.g.
/// `expected String for zip, got int 75001` or `missing param 'zip'`.
public func canonicalDecodingFailure(_ error: any Error, name: String) -> String? {
    guard let decoding = error as? DecodingError else { return "\(error)" }
    switch decoding {
    case .keyNotFound(let key, let context):
        if context.codingPath.isEmpty { return nil }
        return "missing param '\(key.stringValue)'"
    case .typeMismatch(_, let context), .valueNotFound(_, let context), .dataCorrupted(let context):
        if context.codingPath.isEmpty { return nil }
        return context.debugDescription
    @unknown default:
        return "\(error)"
    }
}

func unboxBool(_ value: WireValue, _ path: [any CodingKey]) throws -> Bool {
    guard case .bool(let flag) = value else { throw mismatch(Bool.self, value, path) }
    return flag
}

func unboxString(_ value: WireValue, _ path: [any CodingKey]) throws -> String {
    guard case .string(let text) = value else { throw mismatch(String.self, value, path) }
    return text
}

func unboxInteger<T: FixedWidthInteger>(_ type: T.Type, _ value: WireValue, _ path: [any CodingKey]) throws -> T {
    switch value {
    case .int(let number):
        guard let result = T(exactly: number) else {
            throw DecodingError.dataCorrupted(
                .init(codingPath: path, debugDescription: "\(number) does not fit \(T.self)"))
        }
        return result
    case .double(let number):
        guard let result = T(exactly: number) else {
            throw DecodingError.dataCorrupted(.init(codingPath: path, debugDescription: "\(number) is not a \(T.self)"))
        }
        return result
    default:
        throw mismatch(T.self, value, path)
    }
}

func unboxFloat<T: BinaryFloatingPoint>(_ type: T.Type, _ value: WireValue, _ path: [any CodingKey]) throws -> T {
    switch value {
    case .double(let number): return T(number)
    case .int(let number): return T(number)
    default: throw mismatch(T.self, value, path)
    }
}

final class _WireDecoder: Decoder {
    let value: WireValue
    let codingPath: [any CodingKey]
    let userInfoStorage: [CodingUserInfoKey: any Sendable]
    var userInfo: [CodingUserInfoKey: Any] { userInfoStorage }

    init(value: WireValue, codingPath: [any CodingKey], userInfo: [CodingUserInfoKey: any Sendable]) {
        self.value = value
        self.codingPath = codingPath
        self.userInfoStorage = userInfo
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        guard case .map(let entries) = value else { throw mismatch([String: WireValue].self, value, codingPath) }
        return KeyedDecodingContainer(_KeyedDecoding<Key>(decoder: self, entries: entries, codingPath: codingPath))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        guard case .list(let elements) = value else { throw mismatch([WireValue].self, value, codingPath) }
        return _UnkeyedDecoding(decoder: self, elements: elements, codingPath: codingPath)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer {
        _SingleDecoding(decoder: self)
    }

    func unbox<T: Decodable>(_ type: T.Type, _ value: WireValue, at path: [any CodingKey]) throws -> T {
        if T.self == WireValue.self { return value as! T }
        return try T(from: _WireDecoder(value: value, codingPath: path, userInfo: userInfoStorage))
    }
}

struct _KeyedDecoding<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let decoder: _WireDecoder
    let entries: [String: WireValue]
    let codingPath: [any CodingKey]

    var allKeys: [Key] { entries.keys.compactMap { Key(stringValue: $0) } }
    func contains(_ key: Key) -> Bool { entries[key.stringValue] != nil }

    private func path(_ key: Key) -> [any CodingKey] { codingPath + [key] }

    private func value(_ key: Key) throws -> WireValue {
        guard let value = entries[key.stringValue] else {
            throw DecodingError.keyNotFound(
                key, .init(codingPath: codingPath, debugDescription: "no value for key \"\(key.stringValue)\""))
        }
        return value
    }

    func decodeNil(forKey key: Key) throws -> Bool { try value(key) == .null }
    func decode(_ type: Bool.Type, forKey key: Key) throws -> Bool { try unboxBool(value(key), path(key)) }
    func decode(_ type: String.Type, forKey key: Key) throws -> String { try unboxString(value(key), path(key)) }
    func decode(_ type: Double.Type, forKey key: Key) throws -> Double { try unboxFloat(type, value(key), path(key)) }
    func decode(_ type: Float.Type, forKey key: Key) throws -> Float { try unboxFloat(type, value(key), path(key)) }
    func decode(_ type: Int.Type, forKey key: Key) throws -> Int { try unboxInteger(type, value(key), path(key)) }
    func decode(_ type: Int8.Type, forKey key: Key) throws -> Int8 { try unboxInteger(type, value(key), path(key)) }
    func decode(_ type: Int16.Type, forKey key: Key) throws -> Int16 { try unboxInteger(type, value(key), path(key)) }
    func decode(_ type: Int32.Type, forKey key: Key) throws -> Int32 { try unboxInteger(type, value(key), path(key)) }
    func decode(_ type: Int64.Type, forKey key: Key) throws -> Int64 { try unboxInteger(type, value(key), path(key)) }
    func decode(_ type: UInt.Type, forKey key: Key) throws -> UInt { try unboxInteger(type, value(key), path(key)) }
    func decode(_ type: UInt8.Type, forKey key: Key) throws -> UInt8 { try unboxInteger(type, value(key), path(key)) }
    func decode(_ type: UInt16.Type, forKey key: Key) throws -> UInt16 { try unboxInteger(type, value(key), path(key)) }
    func decode(_ type: UInt32.Type, forKey key: Key) throws -> UInt32 { try unboxInteger(type, value(key), path(key)) }
    func decode(_ type: UInt64.Type, forKey key: Key) throws -> UInt64 { try unboxInteger(type, value(key), path(key)) }
    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
        try decoder.unbox(type, value(key), at: path(key))
    }

    func nestedContainer<NestedKey: CodingKey>(
        keyedBy type: NestedKey.Type, forKey key: Key
    ) throws -> KeyedDecodingContainer<NestedKey> {
        let inner = try value(key)
        guard case .map(let nested) = inner else { throw mismatch([String: WireValue].self, inner, path(key)) }
        return KeyedDecodingContainer(
            _KeyedDecoding<NestedKey>(decoder: decoder, entries: nested, codingPath: path(key)))
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        let inner = try value(key)
        guard case .list(let elements) = inner else { throw mismatch([WireValue].self, inner, path(key)) }
        return _UnkeyedDecoding(decoder: decoder, elements: elements, codingPath: path(key))
    }

    func superDecoder() throws -> any Decoder {
        _WireDecoder(
            value: entries["super"] ?? .null, codingPath: codingPath + [_AnyKey(stringValue: "super")],
            userInfo: decoder.userInfoStorage)
    }

    func superDecoder(forKey key: Key) throws -> any Decoder {
        _WireDecoder(value: entries[key.stringValue] ?? .null, codingPath: path(key), userInfo: decoder.userInfoStorage)
    }
}

struct _UnkeyedDecoding: UnkeyedDecodingContainer {
    let decoder: _WireDecoder
    let elements: [WireValue]
    let codingPath: [any CodingKey]
    var currentIndex = 0

    init(decoder: _WireDecoder, elements: [WireValue], codingPath: [any CodingKey]) {
        self.decoder = decoder
        self.elements = elements
        self.codingPath = codingPath
    }

    var count: Int? { elements.count }
    var isAtEnd: Bool { currentIndex >= elements.count }
    private var path: [any CodingKey] { codingPath + [_IndexKey(currentIndex)] }

    private mutating func next(_ type: Any.Type) throws -> WireValue {
        guard !isAtEnd else {
            throw DecodingError.valueNotFound(
                type,
                .init(
                    codingPath: path, debugDescription: "unkeyed container is at its end (\(elements.count) elements)"))
        }
        defer { currentIndex += 1 }
        return elements[currentIndex]
    }

    mutating func decodeNil() throws -> Bool {
        guard !isAtEnd else { return false }
        if elements[currentIndex] == .null {
            currentIndex += 1
            return true
        }
        return false
    }

    mutating func decode(_ type: Bool.Type) throws -> Bool {
        let p = path
        return try unboxBool(next(type), p)
    }
    mutating func decode(_ type: String.Type) throws -> String {
        let p = path
        return try unboxString(next(type), p)
    }
    mutating func decode(_ type: Double.Type) throws -> Double {
        let p = path
        return try unboxFloat(type, next(type), p)
    }
    mutating func decode(_ type: Float.Type) throws -> Float {
        let p = path
        return try unboxFloat(type, next(type), p)
    }
    mutating func decode(_ type: Int.Type) throws -> Int {
        let p = path
        return try unboxInteger(type, next(type), p)
    }
    mutating func decode(_ type: Int8.Type) throws -> Int8 {
        let p = path
        return try unboxInteger(type, next(type), p)
    }
    mutating func decode(_ type: Int16.Type) throws -> Int16 {
        let p = path
        return try unboxInteger(type, next(type), p)
    }
    mutating func decode(_ type: Int32.Type) throws -> Int32 {
        let p = path
        return try unboxInteger(type, next(type), p)
    }
    mutating func decode(_ type: Int64.Type) throws -> Int64 {
        let p = path
        return try unboxInteger(type, next(type), p)
    }
    mutating func decode(_ type: UInt.Type) throws -> UInt {
        let p = path
        return try unboxInteger(type, next(type), p)
    }
    mutating func decode(_ type: UInt8.Type) throws -> UInt8 {
        let p = path
        return try unboxInteger(type, next(type), p)
    }
    mutating func decode(_ type: UInt16.Type) throws -> UInt16 {
        let p = path
        return try unboxInteger(type, next(type), p)
    }
    mutating func decode(_ type: UInt32.Type) throws -> UInt32 {
        let p = path
        return try unboxInteger(type, next(type), p)
    }
    mutating func decode(_ type: UInt64.Type) throws -> UInt64 {
        let p = path
        return try unboxInteger(type, next(type), p)
    }
    mutating func decode<T: Decodable>(_ type: T.Type) throws -> T {
        let p = path
        return try decoder.unbox(type, next(type), at: p)
    }

    mutating func nestedContainer<NestedKey: CodingKey>(
        keyedBy type: NestedKey.Type
    ) throws -> KeyedDecodingContainer<NestedKey> {
        let p = path
        let inner = try next([String: WireValue].self)
        guard case .map(let nested) = inner else { throw mismatch([String: WireValue].self, inner, p) }
        return KeyedDecodingContainer(_KeyedDecoding<NestedKey>(decoder: decoder, entries: nested, codingPath: p))
    }

    mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer {
        let p = path
        let inner = try next([WireValue].self)
        guard case .list(let nested) = inner else { throw mismatch([WireValue].self, inner, p) }
        return _UnkeyedDecoding(decoder: decoder, elements: nested, codingPath: p)
    }

    mutating func superDecoder() throws -> any Decoder {
        let p = path
        return _WireDecoder(value: try next(WireValue.self), codingPath: p, userInfo: decoder.userInfoStorage)
    }
}

struct _SingleDecoding: SingleValueDecodingContainer {
    let decoder: _WireDecoder
    var codingPath: [any CodingKey] { decoder.codingPath }
    private var value: WireValue { decoder.value }

    func decodeNil() -> Bool { value == .null }
    func decode(_ type: Bool.Type) throws -> Bool { try unboxBool(value, codingPath) }
    func decode(_ type: String.Type) throws -> String { try unboxString(value, codingPath) }
    func decode(_ type: Double.Type) throws -> Double { try unboxFloat(type, value, codingPath) }
    func decode(_ type: Float.Type) throws -> Float { try unboxFloat(type, value, codingPath) }
    func decode(_ type: Int.Type) throws -> Int { try unboxInteger(type, value, codingPath) }
    func decode(_ type: Int8.Type) throws -> Int8 { try unboxInteger(type, value, codingPath) }
    func decode(_ type: Int16.Type) throws -> Int16 { try unboxInteger(type, value, codingPath) }
    func decode(_ type: Int32.Type) throws -> Int32 { try unboxInteger(type, value, codingPath) }
    func decode(_ type: Int64.Type) throws -> Int64 { try unboxInteger(type, value, codingPath) }
    func decode(_ type: UInt.Type) throws -> UInt { try unboxInteger(type, value, codingPath) }
    func decode(_ type: UInt8.Type) throws -> UInt8 { try unboxInteger(type, value, codingPath) }
    func decode(_ type: UInt16.Type) throws -> UInt16 { try unboxInteger(type, value, codingPath) }
    func decode(_ type: UInt32.Type) throws -> UInt32 { try unboxInteger(type, value, codingPath) }
    func decode(_ type: UInt64.Type) throws -> UInt64 { try unboxInteger(type, value, codingPath) }
    func decode<T: Decodable>(_ type: T.Type) throws -> T { try decoder.unbox(type, value, at: codingPath) }
}

// MARK: - WireValue: Codable

extension WireValue: Codable {
    /// Decodes any value: null, bool, integer, floating point, string, list or map.
    public init(from decoder: any Decoder) throws {
        if let wire = decoder as? _WireDecoder {
            self = wire.value
            return
        }
        if var list = try? decoder.unkeyedContainer() {
            var elements: [WireValue] = []
            while !list.isAtEnd { elements.append(try list.decode(WireValue.self)) }
            self = .list(elements)
            return
        }
        if let map = try? decoder.container(keyedBy: _AnyKey.self) {
            var entries: [String: WireValue] = [:]
            for key in map.allKeys { entries[key.stringValue] = try map.decode(WireValue.self, forKey: key) }
            self = .map(entries)
            return
        }
        let single = try decoder.singleValueContainer()
        if single.decodeNil() {
            self = .null
        } else if let flag = try? single.decode(Bool.self) {
            self = .bool(flag)
        } else if let number = try? single.decode(Int64.self) {
            self = .int(number)
        } else if let number = try? single.decode(Double.self) {
            self = .double(number)
        } else {
            self = .string(try single.decode(String.self))
        }
    }

    /// Encodes the value with the matching container.
    public func encode(to encoder: any Encoder) throws {
        if let wire = encoder as? _WireEncoder {
            wire.slot = .value(self)
            return
        }
        switch self {
        case .null:
            var single = encoder.singleValueContainer()
            try single.encodeNil()
        case .bool(let flag):
            var single = encoder.singleValueContainer()
            try single.encode(flag)
        case .int(let number):
            var single = encoder.singleValueContainer()
            try single.encode(number)
        case .double(let number):
            var single = encoder.singleValueContainer()
            try single.encode(number)
        case .string(let text):
            var single = encoder.singleValueContainer()
            try single.encode(text)
        case .list(let elements):
            var list = encoder.unkeyedContainer()
            for element in elements { try list.encode(element) }
        case .map(let entries):
            var map = encoder.container(keyedBy: _AnyKey.self)
            for (key, value) in entries { try map.encode(value, forKey: _AnyKey(stringValue: key)) }
        }
    }
}

struct _AnyKey: CodingKey {
    let stringValue: String
    let intValue: Int?
    init(stringValue: String) {
        self.stringValue = stringValue
        intValue = nil
    }
    init?(intValue: Int) {
        stringValue = String(intValue)
        self.intValue = intValue
    }
}
