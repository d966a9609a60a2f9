import Dispatch
import FlowBusWire
import Foundation
import Logging
import Reactors
import Testing

@testable import FlowBusReactorHost

@Suite("A hosted reactor", .timeLimit(.minutes(1)))
struct HostedReactorTests {
    /// Reduces the mutation of `slow` slowly, on the thread of its mutation stream.
    final class SlowReactor: Reactor {
        enum Action: String, Sendable, Codable { case slow, bump }
        enum Mutation: Sendable { case slow, bump }
        struct State: Sendable, Codable, Equatable {
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

    @Test(
        "an action sent while a mutation stream's task drains the reactor has emitted its state when send returns: the host saves it with the batch"
    )
    func sendWaitsForTheDrain() async throws {
        let outlet = ReactorHostOutlet(metrics: ReactorHostMetrics(host: "test"))
        let reducingSlow = DispatchSemaphore(value: 0)
        let hosted = HostedReactor(
            SlowReactor(reducingSlow: reducingSlow),
            context: ReactorContext(
                reactorID: "slow", familyPrefix: nil, logger: Logger(label: "test"), outlet: outlet),
            restoring: nil)
        defer { hosted.shutdown() }
        try hosted.send(name: "slow", params: [:])
        // On a thread of its own, as the host's I/O thread.
        let sequences = await withCheckedContinuation { (done: CheckedContinuation<[UInt64], Never>) in
            Thread.detachNewThread {
                reducingSlow.wait()
                try? hosted.send(name: "bump", params: [:])
                var items: [ReactorHostOutboxItem] = []
                outlet.take(into: &items)
                done.resume(
                    returning: items.compactMap {
                        if case .state(_, let sequence, _, _) = $0 { sequence } else { nil }
                    })
            }
        }
        #expect(sequences == [0, 1, 2], "the first state, the slow mutation's, then the action's")
    }
}
