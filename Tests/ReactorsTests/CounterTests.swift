import Reactors
import Testing

@Suite("Counter (seed 001)", .timeLimit(.minutes(1)))
struct CounterTests {
    typealias State = CounterReactor.State

    @Test("increase emits initial, loading, value+1 while loading, not loading")
    func increaseSequence() async throws {
        let gate = Gate()
        let store = ReactorStore(CounterReactor(delay: { try await gate.wait() }))
        var states = store.snapshots().makeAsyncIterator()

        store.send(.increase)
        // The synchronous prefix (setLoading(true)) is reduced within send.
        #expect(store.currentState == State(value: 0, isLoading: true))
        gate.open()

        let emitted = try await take(4, from: &states)
        #expect(
            emitted == [
                StateSnapshot(sequence: 0, state: State(value: 0, isLoading: false)),
                StateSnapshot(sequence: 1, state: State(value: 0, isLoading: true)),
                StateSnapshot(sequence: 2, state: State(value: 1, isLoading: true)),
                StateSnapshot(sequence: 3, state: State(value: 1, isLoading: false)),
            ])
        #expect(store.currentState == State(value: 1, isLoading: false))
    }

    @Test("the observer hook gets (sequence, state) for every state, in order, from 0")
    func observerHookSequence() async throws {
        let gate = Gate()
        let store = ReactorStore(CounterReactor(delay: { try await gate.wait() }))
        let published = Log<StateSnapshot<State>>()
        store.observe { published.append($0) }
        var states = store.states().makeAsyncIterator()

        store.send(.decrease)
        gate.open()
        _ = try await take(4, from: &states)
        #expect(published.all.map(\.sequence) == [0, 1, 2, 3])
        #expect(published.all.last?.state == State(value: -1, isLoading: false))
    }

    @Test("the mutation hook gets each mutation once reduced, in order, before its state is emitted")
    func mutationHook() async throws {
        let gate = Gate()
        let seen = Log<String>()
        let store = ReactorStore(
            CounterReactor(delay: { try await gate.wait() }),
            onMutation: { seen.append("mutation \($0)") })
        store.observe { seen.append("state \($0.sequence)") }
        var states = store.states().makeAsyncIterator()

        store.send(.increase)
        gate.open()
        _ = try await take(4, from: &states)
        #expect(
            seen.all == [
                "state 0", "mutation setLoading(true)", "state 1", "mutation increaseValue", "state 2",
                "mutation setLoading(false)", "state 3",
            ])
    }

    @Test("many subscribers each get every state, in order")
    func manySubscribers() async throws {
        let store = ReactorStore(CounterReactor(delay: {}))
        let subscriptions = (0..<8).map { _ in store.snapshots() }
        for _ in 0..<5 { store.send(.increase) }

        try await withThrowingTaskGroup(of: [UInt64].self) { group in
            for subscription in subscriptions {
                group.addTask {
                    var iterator = subscription.makeAsyncIterator()
                    let snapshots = try await take(16, from: &iterator)
                    #expect(snapshots.last?.state == State(value: 5, isLoading: false))
                    return snapshots.map(\.sequence)
                }
            }
            for try await sequences in group {
                #expect(sequences == Array(0...15))
            }
        }
    }
}
