import Dispatch
import Foundation
import Reactors
import Testing

@Suite("A host thread's blocking send", .timeLimit(.minutes(1)))
struct BlockingSendTests {
    /// Reduces the mutation of `slow` slowly, on the thread of its mutation stream.
    final class SlowDrainReactor: Reactor {
        enum Action: Sendable { case slow, bump }
        enum Mutation: Sendable { case slow, bump }
        struct State: Sendable, Equatable {
            var slow = 0
            var bumps = 0
        }

        let initialState = State()
        let reducingSlow: DispatchSemaphore

        init(reducingSlow: DispatchSemaphore) { self.reducingSlow = reducingSlow }

        func mutate(action: Action) -> Mutations<Mutation> {
            switch action {
            case .slow: .run { send in send(.slow) }
            case .bump: .just(.bump)
            }
        }

        func reduce(state: State, mutation: Mutation) -> State {
            var state = state
            switch mutation {
            case .slow:
                reducingSlow.signal()
                Thread.sleep(forTimeInterval: 0.2)
                state.slow += 1
            case .bump:
                state.bumps += 1
            }
            return state
        }
    }

    @Test("it returns once the action was processed, even while a mutation stream's thread drains the store")
    func waitsForAnotherThreadsDrain() async {
        let reducingSlow = DispatchSemaphore(value: 0)
        let store = ReactorStore(SlowDrainReactor(reducingSlow: reducingSlow))
        store.send(.slow)
        // On a thread of its own, as a reactor host's I/O thread.
        let onReturn = await withCheckedContinuation { (done: CheckedContinuation<SlowDrainReactor.State, Never>) in
            Thread.detachNewThread {
                reducingSlow.wait()
                store.send(.bump, blockingOn: DispatchSemaphore(value: 0))
                done.resume(returning: store.currentSnapshot.state)
            }
        }
        #expect(
            onReturn == .init(slow: 1, bumps: 1), "queued behind the slow mutation, and processed before it returned")
        store.shutdown()
    }

    @Test("after shutdown it returns at once")
    func returnsAfterShutdown() {
        let store = ReactorStore(SlowDrainReactor(reducingSlow: DispatchSemaphore(value: 0)))
        store.shutdown()
        store.send(.bump, blockingOn: DispatchSemaphore(value: 0))
        #expect(store.currentSnapshot.state.bumps == 0)
    }
}
