import FlowBusTesting
import Foundation
import Testing

/// The heap allocations of a routed step (flowd) and of an action turned into a state (the
/// reactor host), in steady state, counted by flowbench's preloaded counter over a real run: a
/// change that adds an allocation per message to either path fails here.
///
/// The counts are the processes', libzmq's included (about one per message: the raw forwarder's
/// figure in the same run). They do not depend on the machine's speed, but on the build: an
/// unoptimized build runs generic code unspecialized and allocates more, so each configuration has
/// its own budget, half an allocation above what it measures today.
@Suite("allocation budget", .serialized)
struct AllocationBudgetTests {
    struct Budget {
        var steps: Double
        var reactor: Double
    }

    #if DEBUG
    static let budget = Budget(steps: 13.6, reactor: 12.6)
    #else
    static let budget = Budget(steps: 2.6, reactor: 3.6)
    #endif

    @Test("a routed step and a reactor's action stay within their allocation budget")
    func steadyStateAllocations() throws {
        let (figures, progress) = try FlowBenchReport.run([
            "--only", "steps", "reactor", "--messages", "20000", "--latency-samples", "100",
            "--latency-warmup", "20", "--no-single-frame", "--no-codec",
        ])
        let stepsPath = try #require(figures.flowbus.steps, "no steps scenario: \(progress)")
        let reactorPath = try #require(figures.flowbus.reactor, "no reactor scenario: \(progress)")
        #expect(stepsPath.lost == 0 && reactorPath.lost == 0)

        let steps = try #require(stepsPath.allocsPerMsg, "flowd was not counted (no C compiler?): \(progress)")
        let reactor = try #require(reactorPath.allocsPerMsg, "\(progress)")
        let libzmq = try #require(figures.raw.twoHop.allocsPerMsg)
        #expect(
            steps <= Self.budget.steps,
            "a routed step allocates \(steps) times in flowd (budget \(Self.budget.steps), libzmq's forwarder \(libzmq))"
        )
        #expect(
            reactor <= Self.budget.reactor,
            "an action allocates \(reactor) times in the reactor host (budget \(Self.budget.reactor), libzmq's forwarder \(libzmq))"
        )
    }
}
