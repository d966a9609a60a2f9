/// A state field whose every assignment is an event, even of an equal value (ReactorKit's
/// `@Pulse`).
///
/// ```swift
/// struct State: Sendable {
///     @Pulse var alertMessage: String?
/// }
/// // in reduce:  state.alertMessage = "Saved"     (each assignment counts)
/// // in a view:  for await message in store.pulse(\.$alertMessage) { … }
/// ```
///
/// The wrapper counts assignments; ``ReactorStore/pulse(_:)`` emits when the count changes,
/// so unrelated mutations do not re-emit the value, and a late subscriber gets the current
/// value once (rule 6).
@propertyWrapper
public struct Pulse<Value> {
    /// The current value.
    public var value: Value {
        didSet { updateCount &+= 1 }
    }

    /// How many times ``value`` was assigned since the wrapper was created (wraps around).
    public private(set) var updateCount: UInt64

    /// Wraps an initial value; the update count starts at 0.
    public init(wrappedValue: Value) {
        value = wrappedValue
        updateCount = 0
    }

    /// Restores a pulse with a known update count (e.g. decoded from another process).
    public init(value: Value, updateCount: UInt64) {
        self.value = value
        self.updateCount = updateCount
    }

    public var wrappedValue: Value {
        get { value }
        set { value = newValue }
    }

    /// The pulse itself, for ``ReactorStore/pulse(_:)``: `\.$alertMessage`.
    public var projectedValue: Pulse<Value> {
        get { self }
        set { self = newValue }
    }
}

extension Pulse: Sendable where Value: Sendable {}

extension Pulse: Equatable where Value: Equatable {}

extension Pulse: Hashable where Value: Hashable {}

/// Encoded as `{"value": …, "updateCount": n}` so that a process receiving the state can tell a
/// new assignment of an equal value from a repeat of the same state.
extension Pulse: Codable where Value: Codable {}
