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

    struct Figures: Decodable {
        struct Path: Decodable {
            var allocsPerMsg: Double?
            var lost: Int
        }
        struct FlowBus: Decodable {
            var steps: Path
            var reactor: Path
        }
        struct Raw: Decodable {
            var twoHop: Path
        }
        var flowbus: FlowBus
        var raw: Raw
    }

    @Test("a routed step and a reactor's action stay within their allocation budget")
    func steadyStateAllocations() throws {
        let directory = try TemporaryDirectory()
        let bench = try ManagedProcess(
            name: "flowbench", executable: try BuiltProducts.executable("flowbench"),
            arguments: [
                "--only", "steps", "reactor", "--messages", "20000", "--latency-samples", "100",
                "--latency-warmup", "20", "--no-single-frame", "--no-codec", "--json",
            ],
            environment: ["TMPDIR": directory.url.path], in: directory.url, mayExit: true)
        defer { bench.stop() }
        try #require(bench.exitStatus(within: .seconds(300)) == 0, "\(bench.transcript)")

        let decoder = JSONDecoder()
        decoder.keyDecodingStrategy = .convertFromSnakeCase
        let figures = try decoder.decode(Figures.self, from: Data(bench.stdout.utf8))
        #expect(figures.flowbus.steps.lost == 0 && figures.flowbus.reactor.lost == 0)

        let steps = try #require(
            figures.flowbus.steps.allocsPerMsg, "flowd was not counted (no C compiler?): \(bench.transcript)")
        let reactor = try #require(figures.flowbus.reactor.allocsPerMsg, "\(bench.transcript)")
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
