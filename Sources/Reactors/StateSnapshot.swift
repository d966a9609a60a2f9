/// A state together with its emission sequence number.
///
/// The initial state has sequence 0; each later emission (every reduced mutation, every stub
/// state) has the previous sequence plus one. A host publishes each state with its sequence so
/// that a late joiner can merge a snapshot with live states, without gap or duplicate.
public struct StateSnapshot<State> {
    /// The emission's sequence number, strictly increasing from 0.
    public let sequence: UInt64
    /// The state after ``Reactor/transform(state:)``.
    public let state: State

    /// Pairs a sequence number with a state.
    public init(sequence: UInt64, state: State) {
        self.sequence = sequence
        self.state = state
    }
}

extension StateSnapshot: Sendable where State: Sendable {}

extension StateSnapshot: Equatable where State: Equatable {}

extension StateSnapshot: Hashable where State: Hashable {}
