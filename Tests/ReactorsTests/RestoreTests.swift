import Reactors
import Testing

@Suite("Restoring a store from a saved state", .timeLimit(.minutes(1)))
struct RestoreTests {
    typealias State = CounterReactor.State

    @Test("a restored store starts at the saved state and sequence, and continues with sequence N+1")
    func continuesSequence() async throws {
        let gate = Gate()
        let store = ReactorStore(
            CounterReactor(delay: { try await gate.wait() }),
            restoring: StateSnapshot(sequence: 41, state: State(value: 7, isLoading: false)))
        #expect(store.currentSnapshot == StateSnapshot(sequence: 41, state: State(value: 7, isLoading: false)))
        var states = store.snapshots().makeAsyncIterator()

        store.send(.increase)
        gate.open()
        let emitted = try await take(4, from: &states)
        #expect(
            emitted == [
                StateSnapshot(sequence: 41, state: State(value: 7, isLoading: false)),
                StateSnapshot(sequence: 42, state: State(value: 7, isLoading: true)),
                StateSnapshot(sequence: 43, state: State(value: 8, isLoading: true)),
                StateSnapshot(sequence: 44, state: State(value: 8, isLoading: false)),
            ])
    }

    @Test("the observer hook replays the restored snapshot first")
    func observerReplaysRestored() async throws {
        let store = ReactorStore(
            CounterReactor(delay: {}), restoring: StateSnapshot(sequence: 5, state: State(value: -2, isLoading: false)))
        let published = Log<StateSnapshot<State>>()
        store.observe { published.append($0) }
        #expect(published.all == [StateSnapshot(sequence: 5, state: State(value: -2, isLoading: false))])
    }

    @Test("hasWorkInFlight is true while an action's asynchronous mutations run, false once they are reduced")
    func workInFlight() async throws {
        let gate = Gate()
        let store = ReactorStore(CounterReactor(delay: { try await gate.wait() }))
        var states = store.snapshots().makeAsyncIterator()
        #expect(!store.hasWorkInFlight)
        store.send(.increase)
        #expect(store.hasWorkInFlight)
        gate.open()
        _ = try await take(4, from: &states)
        var waited = 0
        while store.hasWorkInFlight, waited < 1000 {
            try await Task.sleep(for: .milliseconds(1))
            waited += 1
        }
        #expect(!store.hasWorkInFlight)
        #expect(store.currentSnapshot == StateSnapshot(sequence: 3, state: State(value: 1, isLoading: false)))
    }
}
