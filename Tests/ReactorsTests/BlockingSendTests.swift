import Dispatch
import Foundation
import ReactorFixtures
import Reactors
import Testing

@Suite("A host thread's blocking send", .timeLimit(.minutes(1)))
struct BlockingSendTests {
    @Test("it returns once the action was processed, even while a mutation stream's thread drains the store")
    func waitsForAnotherThreadsDrain() async {
        let reactor = SlowDrainReactor()
        let store = ReactorStore(reactor)
        store.send(.slow)
        // On a thread of its own, as a reactor host's I/O thread.
        let onReturn = await withCheckedContinuation { (done: CheckedContinuation<SlowDrainReactor.State, Never>) in
            Thread.detachNewThread {
                reactor.reducingSlow.wait()
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
        let store = ReactorStore(SlowDrainReactor())
        store.shutdown()
        store.send(.bump, blockingOn: DispatchSemaphore(value: 0))
        #expect(store.currentSnapshot.state.bumps == 0)
    }
}
