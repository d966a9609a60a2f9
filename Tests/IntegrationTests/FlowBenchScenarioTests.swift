import FlowBusTesting
import Foundation
import Testing

/// flowbench's scenarios that vary a daemon's setup, run for real with few messages.
@Suite("flowbench scenarios", .serialized)
struct FlowBenchScenarioTests {
    @Test(
        "reactor_saved: the host runs with the bench reactor's state saved (synchronous: full), compared with reactor")
    func reactorSaved() throws {
        let (report, progress) = try FlowBenchReport.run([
            "--only", "reactor_saved", "--messages", "5000", "--latency-samples", "50", "--latency-warmup", "10",
            "--no-single-frame", "--no-codec",
        ])
        let saved = try #require(report.flowbus.reactorSaved, "no reactor_saved path: \(progress)")
        let unsaved = try #require(report.flowbus.reactor, "its reference ran too: \(progress)")
        #expect(saved.lost == 0 && (saved.throughputPerS ?? 0) > 0)
        let database = try #require(saved.journal, "the state database is reported")
        #expect(database.holdsStates == true && database.synchronous == "full")
        #expect(database.path.hasSuffix("-reactors.sqlite"), "\(database.path)")
        #expect(saved.reference == "flowbus.reactor")
        let ratio = try #require(saved.referenceThroughputRatio)
        let expected = try #require(saved.throughputPerS) / (try #require(unsaved.throughputPerS))
        #expect(abs(ratio - expected) < 0.002, "reactor_saved ÷ reactor: \(expected), reported \(ratio)")
    }
}
