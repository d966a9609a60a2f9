/// A value that reads itself from its canonical wire form (a name and params) without Codable.
///
/// Reactor hosts decode every action; Codable's generic machinery costs more than the rest of
/// an action's path. An `Action` that conforms is decoded through this initialiser instead
/// (its `Decodable` conformance is then unused by the host).
public protocol WireFormDecodable {
    /// Reads the case `name` with `params`.
    /// - Throws: a ``WireError`` with reason `bad-action` for an unknown name, `bad-params` for
    ///   params that do not fit; its detail is what the sender is told.
    init(wireName name: String, params: WireParams) throws(WireError)
}

/// A value that gives its wire form without Codable: what a reactor host publishes for a
/// `State` that conforms, instead of running its `Encodable` conformance for every state.
public protocol WireFormEncodable {
    /// The state as a wire value (typically a map).
    var wireValue: WireValue { get }
}

extension WireParams {
    /// The integer param `key`, or a `bad-params` error naming it.
    public func integer(_ key: String) throws(WireError) -> Int64 {
        guard let value = self[key] else { throw WireError(.badParams, "param \(key) is missing") }
        guard case .int(let number) = value else { throw WireError(.badParams, "param \(key) is not an integer") }
        return number
    }

    /// The string param `key`, or a `bad-params` error naming it.
    public func string(_ key: String) throws(WireError) -> String {
        guard let value = self[key] else { throw WireError(.badParams, "param \(key) is missing") }
        guard case .string(let text) = value else { throw WireError(.badParams, "param \(key) is not a string") }
        return text
    }
}
