/// One state of a reactor as a view receives it: the snapshot first, then live states.
public struct ReactorViewState: Sendable, Hashable {
    /// The reactor.
    public var reactorID: String
    /// The envelope as the host sent it; its sequence is the reactor's state sequence.
    public var envelope: Envelope
    /// The state, as a wire value (decode it with ``decode(_:)``).
    public var state: WireValue
    /// True for a snapshot (the first state a view gets, or the one it resynchronised from).
    public var isSnapshot: Bool

    /// Creates a state as received.
    public init(reactorID: String, envelope: Envelope, state: WireValue, isSnapshot: Bool) {
        self.reactorID = reactorID
        self.envelope = envelope
        self.state = state
        self.isSnapshot = isSnapshot
    }

    /// The reactor's state sequence.
    public var sequence: UInt64 { envelope.sequence }

    /// Decodes the state into the reactor's `State` type (or any `Decodable` mirror of it).
    public func decode<State: Decodable>(_ type: State.Type) throws -> State {
        try WireValueDecoder().decode(type, from: state)
    }

    /// The state as the wire message it came in (for `MessageFormatter`).
    public var message: WireMessage {
        isSnapshot
            ? .snapshot(SnapshotMessage(reactorID: reactorID, envelope: envelope, state: state))
            : .state(StateMessage(reactorID: reactorID, envelope: envelope, state: state))
    }
}
