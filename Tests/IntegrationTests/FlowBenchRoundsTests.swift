import FlowBusTesting
import Foundation
import Testing

/// `flowbench --rounds N`: every scenario measured N times, one round of all after another; a
/// path shows its median round, and its ratios are the medians of each round's ratio to the same
/// round's baseline, which is measured again at the end of each round (the faster counts).
@Suite("flowbench rounds", .serialized)
struct FlowBenchRoundsTests {
    @Test("Three rounds: each path shows its median round; the ratio is the median of the rounds' ratios")
    func medianOfRounds() throws {
        let (report, progress) = try FlowBenchReport.run([
            "--only", "steps", "--rounds", "3", "--messages", "5000", "--latency-samples", "50",
            "--latency-warmup", "10", "--no-single-frame", "--no-codec",
        ])
        #expect(progress.contains("(round 3 of 3)"), "\(progress)")
        #expect(report.config.rounds == 3)
        let raw = try #require(report.raw.twoHop.roundThroughputsPerS?.compactMap { $0 })
        let stepsPath = try #require(report.flowbus.steps, "no steps scenario: \(progress)")
        let steps = try #require(stepsPath.roundThroughputsPerS?.compactMap { $0 })
        try #require(raw.count == 3 && steps.count == 3, "three rounds of each: \(raw), \(steps)")
        #expect(report.raw.twoHop.throughputPerS == raw.sorted()[1], "the median round: \(raw)")
        #expect(stepsPath.throughputPerS == steps.sorted()[1], "the median round: \(steps)")
        // Each round's ratio to that round's raw path, then their median (rounded as the report is).
        let ratios = zip(steps, raw).map { $0 / $1 }.sorted()
        let ratio = try #require(stepsPath.throughputRatio)
        #expect(abs(ratio - ratios[1]) < 0.002, "median of \(ratios), reported \(ratio)")
        // The baseline measured again at the end of each round: the faster of the two counts.
        #expect(progress.contains("raw.two_hop (round 3 of 3), again:"), "\(progress)")
        let pairs = try #require(report.raw.twoHop.remeasuredThroughputsPerS)
        try #require(pairs.count == 3 && pairs.allSatisfy { $0.count == 2 }, "\(pairs)")
        #expect(raw == pairs.map { $0.compactMap { $0 }.max() ?? 0 }, "each round's faster: \(pairs), \(raw)")
        #expect(stepsPath.remeasuredThroughputsPerS == nil, "only a baseline is measured again")
    }

    @Test("--rounds outside 1…21 is refused with the range")
    func roundsOutOfRange() throws {
        let directory = try TemporaryDirectory()
        let bench = try ManagedProcess(
            name: "flowbench", executable: try BuiltProducts.executable("flowbench"), arguments: ["--rounds", "0"],
            in: directory.url, mayExit: true)
        defer { bench.stop() }
        #expect(bench.exitStatus(within: .seconds(30)) != 0)
        #expect(bench.stderr.contains("--rounds must be in 1...21"), "\(bench.transcript)")
    }
}
