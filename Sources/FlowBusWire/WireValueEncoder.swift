/// Encodes `Encodable` values into ``WireValue``s.
///
/// Mapping: every integer type → `.int` (a `UInt`/`UInt64` above `Int64.max` throws),
/// `Float`/`Double` → `.double`, `String` → `.string`, `Bool` → `.bool`, keyed containers →
/// `.map`, unkeyed containers → `.list`, `encodeNil` → `.null`. Synthesized conformances omit
/// `nil` optionals (`encodeIfPresent`). A ``WireValue`` nested in the value is kept as is.
///
/// Swift enums with associated values encode the way Swift synthesizes them:
/// `case moviePicked(withId: Int)` → `{"moviePicked": {"withId": 23452}}`, `case settings` →
/// `{"settings": {}}`, unlabeled values under `_0`, `_1`, … — the canonical step form (see
/// ``canonicalForm(_:)``).
public struct WireValueEncoder: Sendable {
    /// Values handed to `Encoder.userInfo`.
    public var userInfo: [CodingUserInfoKey: any Sendable]

    /// Creates an encoder.
    public init(userInfo: [CodingUserInfoKey: any Sendable] = [:]) {
        self.userInfo = userInfo
    }

    /// Encodes `value` into a wire value.
    /// - Throws: `EncodingError` when the value cannot be represented.
    public func encode<T: Encodable>(_ value: T) throws -> WireValue {
        if let wire = value as? WireValue { return wire }
        let encoder = _WireEncoder(codingPath: [], userInfo: userInfo)
        try value.encode(to: encoder)
        return encoder.slot?.resolve() ?? .map([:])
    }

    /// The canonical step/action form of an enum value: its case name and its associated values.
    ///
    /// `case moviePicked(withId: 23452)` → `("moviePicked", ["withId": 23452])`; a case
    /// without values gives empty params. A value encoding as a single string (an enum with
    /// `String` raw values) gives that string as the name and empty params.
    /// - Throws: `EncodingError`, or a ``WireError`` (`malformed`) when the value does not encode
    ///   as one case or the case name is not a valid step name (`[A-Za-z0-9_.:-]`, 1...255 bytes).
    public func canonicalForm<T: Encodable>(_ value: T) throws -> (name: String, params: WireParams) {
        let wire = try encode(value)
        let name: String
        let params: WireParams
        switch wire {
        case .string(let text):
            name = text
            params = [:]
        case .map(let entries) where entries.count == 1:
            let (key, inner) = entries.first.unsafelyUnwrapped
            guard case .map(let values) = inner else {
                throw WireError.malformed("\(T.self) case \(quoted(key)) does not encode its values as a map")
            }
            name = key
            params = values
        default:
            throw WireError.malformed(
                "\(T.self) does not encode as one enum case ({\"case\": {…}}) but as \(wire.displayText)")
        }
        try validateName(name, field: "step name", max: 255)
        return (name, params)
    }
}

/// The canonical step/action form of an enum value, with a default ``WireValueEncoder``.
/// See ``WireValueEncoder/canonicalForm(_:)``.
public func canonicalForm<T: Encodable>(_ value: T) throws -> (name: String, params: WireParams) {
    try WireValueEncoder().canonicalForm(value)
}

// MARK: - Implementation

/// A value under construction: containers are references so nested containers can be filled
/// after they are handed out.
enum _Slot {
    case value(WireValue)
    case map(_MapRef)
    case list(_ListRef)
    case deferred(_WireEncoder)

    func resolve() -> WireValue {
        switch self {
        case .value(let value): return value
        case .map(let ref):
            var result: [String: WireValue] = [:]
            result.reserveCapacity(ref.entries.count)
            for (key, slot) in ref.entries { result[key] = slot.resolve() }
            return .map(result)
        case .list(let ref): return .list(ref.items.map { $0.resolve() })
        case .deferred(let encoder): return encoder.slot?.resolve() ?? .map([:])
        }
    }
}

final class _MapRef {
    var entries: [String: _Slot] = [:]
}

final class _ListRef {
    var items: [_Slot] = []
}

final class _WireEncoder: Encoder {
    let codingPath: [any CodingKey]
    let userInfoStorage: [CodingUserInfoKey: any Sendable]
    var userInfo: [CodingUserInfoKey: Any] { userInfoStorage }
    var slot: _Slot?

    init(codingPath: [any CodingKey], userInfo: [CodingUserInfoKey: any Sendable]) {
        self.codingPath = codingPath
        self.userInfoStorage = userInfo
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        let ref: _MapRef
        if case .map(let existing) = slot {
            ref = existing
        } else {
            ref = _MapRef()
            slot = .map(ref)
        }
        return KeyedEncodingContainer(_KeyedEncoding<Key>(encoder: self, ref: ref, codingPath: codingPath))
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        let ref: _ListRef
        if case .list(let existing) = slot {
            ref = existing
        } else {
            ref = _ListRef()
            slot = .list(ref)
        }
        return _UnkeyedEncoding(encoder: self, ref: ref, codingPath: codingPath)
    }

    func singleValueContainer() -> any SingleValueEncodingContainer {
        _SingleEncoding(encoder: self)
    }

    /// Encodes a nested value: primitives and wire values directly, others through a child
    /// encoder.
    func box<T: Encodable>(_ value: T, at path: [any CodingKey]) throws -> _Slot {
        if let wire = value as? WireValue { return .value(wire) }
        let child = _WireEncoder(codingPath: path, userInfo: userInfoStorage)
        try value.encode(to: child)
        return child.slot ?? .map(_MapRef())
    }
}

func wireInt<T: BinaryInteger>(_ value: T, _ path: [any CodingKey]) throws -> WireValue {
    guard let number = Int64(exactly: value) else {
        throw EncodingError.invalidValue(
            value, .init(codingPath: path, debugDescription: "\(value) does not fit a 64-bit signed wire int"))
    }
    return .int(number)
}

struct _KeyedEncoding<Key: CodingKey>: KeyedEncodingContainerProtocol {
    let encoder: _WireEncoder
    let ref: _MapRef
    let codingPath: [any CodingKey]

    private func put(_ value: WireValue, _ key: Key) { ref.entries[key.stringValue] = .value(value) }
    private func path(_ key: Key) -> [any CodingKey] { codingPath + [key] }

    mutating func encodeNil(forKey key: Key) throws { put(.null, key) }
    mutating func encode(_ value: Bool, forKey key: Key) throws { put(.bool(value), key) }
    mutating func encode(_ value: String, forKey key: Key) throws { put(.string(value), key) }
    mutating func encode(_ value: Double, forKey key: Key) throws { put(.double(value), key) }
    mutating func encode(_ value: Float, forKey key: Key) throws { put(.double(Double(value)), key) }
    mutating func encode(_ value: Int, forKey key: Key) throws { put(.int(Int64(value)), key) }
    mutating func encode(_ value: Int8, forKey key: Key) throws { put(.int(Int64(value)), key) }
    mutating func encode(_ value: Int16, forKey key: Key) throws { put(.int(Int64(value)), key) }
    mutating func encode(_ value: Int32, forKey key: Key) throws { put(.int(Int64(value)), key) }
    mutating func encode(_ value: Int64, forKey key: Key) throws { put(.int(value), key) }
    mutating func encode(_ value: UInt, forKey key: Key) throws { put(try wireInt(value, path(key)), key) }
    mutating func encode(_ value: UInt8, forKey key: Key) throws { put(.int(Int64(value)), key) }
    mutating func encode(_ value: UInt16, forKey key: Key) throws { put(.int(Int64(value)), key) }
    mutating func encode(_ value: UInt32, forKey key: Key) throws { put(.int(Int64(value)), key) }
    mutating func encode(_ value: UInt64, forKey key: Key) throws { put(try wireInt(value, path(key)), key) }
    mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
        ref.entries[key.stringValue] = try encoder.box(value, at: path(key))
    }

    mutating func nestedContainer<NestedKey: CodingKey>(
        keyedBy keyType: NestedKey.Type, forKey key: Key
    ) -> KeyedEncodingContainer<NestedKey> {
        let nested: _MapRef
        if case .map(let existing) = ref.entries[key.stringValue] {
            nested = existing
        } else {
            nested = _MapRef()
            ref.entries[key.stringValue] = .map(nested)
        }
        return KeyedEncodingContainer(_KeyedEncoding<NestedKey>(encoder: encoder, ref: nested, codingPath: path(key)))
    }

    mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
        let nested: _ListRef
        if case .list(let existing) = ref.entries[key.stringValue] {
            nested = existing
        } else {
            nested = _ListRef()
            ref.entries[key.stringValue] = .list(nested)
        }
        return _UnkeyedEncoding(encoder: encoder, ref: nested, codingPath: path(key))
    }

    mutating func superEncoder() -> any Encoder {
        superEncoder(name: "super", key: _AnyKey(stringValue: "super"))
    }

    mutating func superEncoder(forKey key: Key) -> any Encoder {
        superEncoder(name: key.stringValue, key: key)
    }

    private func superEncoder(name: String, key: any CodingKey) -> any Encoder {
        let child = _WireEncoder(codingPath: codingPath + [key], userInfo: encoder.userInfoStorage)
        ref.entries[name] = .deferred(child)
        return child
    }
}

struct _IndexKey: CodingKey {
    let intValue: Int?
    let stringValue: String
    init(_ index: Int) {
        intValue = index
        stringValue = "Index \(index)"
    }
    init?(intValue: Int) { self.init(intValue) }
    init?(stringValue: String) { return nil }
}

struct _UnkeyedEncoding: UnkeyedEncodingContainer {
    let encoder: _WireEncoder
    let ref: _ListRef
    let codingPath: [any CodingKey]
    var count: Int { ref.items.count }

    private func put(_ value: WireValue) { ref.items.append(.value(value)) }
    private var nextPath: [any CodingKey] { codingPath + [_IndexKey(ref.items.count)] }

    mutating func encodeNil() throws { put(.null) }
    mutating func encode(_ value: Bool) throws { put(.bool(value)) }
    mutating func encode(_ value: String) throws { put(.string(value)) }
    mutating func encode(_ value: Double) throws { put(.double(value)) }
    mutating func encode(_ value: Float) throws { put(.double(Double(value))) }
    mutating func encode(_ value: Int) throws { put(.int(Int64(value))) }
    mutating func encode(_ value: Int8) throws { put(.int(Int64(value))) }
    mutating func encode(_ value: Int16) throws { put(.int(Int64(value))) }
    mutating func encode(_ value: Int32) throws { put(.int(Int64(value))) }
    mutating func encode(_ value: Int64) throws { put(.int(value)) }
    mutating func encode(_ value: UInt) throws { put(try wireInt(value, nextPath)) }
    mutating func encode(_ value: UInt8) throws { put(.int(Int64(value))) }
    mutating func encode(_ value: UInt16) throws { put(.int(Int64(value))) }
    mutating func encode(_ value: UInt32) throws { put(.int(Int64(value))) }
    mutating func encode(_ value: UInt64) throws { put(try wireInt(value, nextPath)) }
    mutating func encode<T: Encodable>(_ value: T) throws {
        let slot = try encoder.box(value, at: nextPath)
        ref.items.append(slot)
    }

    mutating func nestedContainer<NestedKey: CodingKey>(
        keyedBy keyType: NestedKey.Type
    ) -> KeyedEncodingContainer<NestedKey> {
        let path = nextPath
        let nested = _MapRef()
        ref.items.append(.map(nested))
        return KeyedEncodingContainer(_KeyedEncoding<NestedKey>(encoder: encoder, ref: nested, codingPath: path))
    }

    mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
        let path = nextPath
        let nested = _ListRef()
        ref.items.append(.list(nested))
        return _UnkeyedEncoding(encoder: encoder, ref: nested, codingPath: path)
    }

    mutating func superEncoder() -> any Encoder {
        let child = _WireEncoder(codingPath: nextPath, userInfo: encoder.userInfoStorage)
        ref.items.append(.deferred(child))
        return child
    }
}

struct _SingleEncoding: SingleValueEncodingContainer {
    let encoder: _WireEncoder
    var codingPath: [any CodingKey] { encoder.codingPath }

    private func put(_ value: WireValue) { encoder.slot = .value(value) }

    mutating func encodeNil() throws { put(.null) }
    mutating func encode(_ value: Bool) throws { put(.bool(value)) }
    mutating func encode(_ value: String) throws { put(.string(value)) }
    mutating func encode(_ value: Double) throws { put(.double(value)) }
    mutating func encode(_ value: Float) throws { put(.double(Double(value))) }
    mutating func encode(_ value: Int) throws { put(.int(Int64(value))) }
    mutating func encode(_ value: Int8) throws { put(.int(Int64(value))) }
    mutating func encode(_ value: Int16) throws { put(.int(Int64(value))) }
    mutating func encode(_ value: Int32) throws { put(.int(Int64(value))) }
    mutating func encode(_ value: Int64) throws { put(.int(value)) }
    mutating func encode(_ value: UInt) throws { put(try wireInt(value, codingPath)) }
    mutating func encode(_ value: UInt8) throws { put(.int(Int64(value))) }
    mutating func encode(_ value: UInt16) throws { put(.int(Int64(value))) }
    mutating func encode(_ value: UInt32) throws { put(.int(Int64(value))) }
    mutating func encode(_ value: UInt64) throws { put(try wireInt(value, codingPath)) }
    mutating func encode<T: Encodable>(_ value: T) throws {
        encoder.slot = try encoder.box(value, at: codingPath)
    }
}
