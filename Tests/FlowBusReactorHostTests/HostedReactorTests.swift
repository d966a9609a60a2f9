import Dispatch
import FlowBusWire
import Foundation
import Logging
import ReactorFixtures
import Reactors
import Testing

@testable import FlowBusReactorHost

@Suite("A hosted reactor", .timeLimit(.minutes(1)))
struct HostedReactorTests {
    @Test(
        "an action sent while a mutation stream's task drains the reactor has emitted its state when send returns: the host saves it with the batch"
    )
    func sendWaitsForTheDrain() async throws {
        let outlet = ReactorHostOutlet(metrics: ReactorHostMetrics(host: "test"))
        let reactor = SlowDrainReactor()
        let hosted = HostedReactor(
            reactor,
            context: ReactorContext(
                reactorID: "slow", familyPrefix: nil, logger: Logger(label: "test"), outlet: outlet),
            restoring: nil)
        defer { hosted.shutdown() }
        try hosted.send(name: "slow", params: [:])
        // On a thread of its own, as the host's I/O thread.
        let sequences = await withCheckedContinuation { (done: CheckedContinuation<[UInt64], Never>) in
            Thread.detachNewThread {
                reactor.reducingSlow.wait()
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
