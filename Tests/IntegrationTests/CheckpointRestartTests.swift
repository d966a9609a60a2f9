import FlowBusClient
import FlowBusConfiguration
import FlowBusReactorHost
import FlowBusTesting
import FlowBusTools
import FlowBusWire
import Foundation
import Testing

@testable import FlowBusCoordinator

/// `durableFlowYAML` with checkpoints every `every` entries that keep no history.
func compactingFlowYAML(every: Int) -> String {
    durableFlowYAML.replacingOccurrences(
        of: "checkpoint: { everyEntries: 10000, keepEntries: 100000000 }",
        with: "checkpoint: { everyEntries: \(every) }")
}

/// How many steps reached a flow, from flowd's status.
func acceptedSteps(_ topology: TestTopology) throws -> Int64 {
    try topology.status()["totals"]?.mapValue?["accepted"]?.intValue ?? -1
}

func journalStatus(_ topology: TestTopology) throws -> WireParams {
    try topology.status()["journal"]?.mapValue ?? [:]
}

@Suite("flowd restores from checkpoints and compacts its journal", .serialized)
struct CheckpointRestartTests {
    @Test(
        "20,000 steps, checkpoints every 1,000, a SIGKILL in the middle: every step applied once, the journal stays small"
    )
    func compactionAcrossKill() throws {
        let count = 20_000
        let topology = try TestTopology(configYAML: compactingFlowYAML(every: 1000))
        var flowd = try topology.startFlowd(arguments: ["--log-level", "info"])
        try tap(topology, "load", "open", ["id": 7])
        let before = try treeAndBindings(topology)
        let acceptedBefore = try acceptedSteps(topology)

        let stepper = try topology.start(
            "stepper-load",
            arguments: [
                "--config", topology.configPath, "--as", "load", "--count", "\(count)", "--progress", "0", "--timeout",
                "300",
            ])
        #expect(
            eventually(timeout: .seconds(300)) {
                (try? journalStatus(topology)["checkpoint"]?.mapValue?["entry"]?.intValue ?? 0) ?? 0 >= 8000
                    || !stepper.isRunning
            }, "checkpoints are written while steps stream in")
        flowd.kill()
        Thread.sleep(forTimeInterval: 0.3)
        flowd = try topology.startFlowd(arguments: ["--log-level", "info"])
        #expect(flowd.output.contains("from its checkpoint of entry"), "\(flowd.output)")
        #expect(
            try treeAndBindings(topology) == before,
            "the checkpoint and the entries after it rebuild the tree and bindings")
        #expect(stepper.waitForExit(timeout: .seconds(600)) == 0, "every step acknowledged:\n\(stepper.output)")

        #expect(try acceptedSteps(topology) == acceptedBefore + Int64(count), "each step reached the flow exactly once")
        // Compaction runs while flowd is idle: on a busy machine, only once the stream ended.
        #expect(
            eventually(timeout: .seconds(60)) {
                let journal = (try? journalStatus(topology)) ?? [:]
                return journal["compacting"]?.boolValue == false
                    && (journal["checkpoint"]?.mapValue?["entry"]?.intValue ?? 0) >= Int64(count - 1000)
            }, "the newest checkpoint covers all but the last thousand entries, and compaction is done")
        let journal = try journalStatus(topology)
        #expect(flowd.terminate() == 0)
        let reader = try StepJournal.open(readingAt: topology.directory.appendingPathComponent("journal.sqlite").path)
        defer { reader.close() }
        let kept = try reader.count()
        // The last thousand, and the commit holding the covered entry (up to 4,096 under load).
        #expect(kept < 6000, "only the entries after the newest checkpoint stay: \(kept) of \(count + 1); \(journal)")
    }

    @Test(
        "A 1,000,000-step journal is replayed once, checkpointed and compacted; the next start restores the checkpoint")
    func millionStepJournal() throws {
        let count: Int64 = 1_000_000
        let topology = try TestTopology(configYAML: compactingFlowYAML(every: 100_000))
        let path = topology.directory.appendingPathComponent("journal.sqlite").path
        do {
            // A history written by a flowd that never compacted: one stepper's ticks.
            let journal = try StepJournal.open(path: path, synchronous: .normal)
            defer { journal.close() }
            let tick = try FBV.encode(.map(["n": 1]))
            for first in stride(from: Int64(1), through: count, by: 50_000) {
                let records = (first..<first + 50_000).map { n in
                    StepJournal.Record(
                        kind: .step, target: "load", name: "tick", params: Data(tick), source: "gen#1",
                        sequence: UInt64(n))
                }
                try journal.append(records, lastSequences: ["gen#1": UInt64(first + 49_999)])
            }
        }
        var flowd = try topology.startFlowd(arguments: ["--log-level", "info"], timeout: .seconds(300))
        #expect(flowd.output.contains("from \(count) entries"), "\(flowd.output)")
        #expect(try acceptedSteps(topology) == count + 1, "the start step and every tick")
        #expect(
            eventually(timeout: .seconds(60)) {
                (try? journalStatus(topology)["checkpoint"]?.mapValue?["entry"]?.intValue) == count
            }, "a checkpoint covering the whole history is written at once")
        #expect(
            eventually(timeout: .seconds(300)) { (try? journalStatus(topology)["compacting"]) == .bool(false) },
            "the entries it covers are deleted meanwhile, a bounded number at a time")
        #expect(flowd.terminate() == 0)

        let reader = try StepJournal.open(readingAt: path)
        #expect(
            try reader.count() == 50_000,
            "compacted down to the commit holding the last covered entry (commits go whole)")
        #expect(try reader.lastSequence(of: "gen#1") == UInt64(count), "the de-duplication state stays")
        reader.close()

        flowd = try topology.startFlowd(arguments: ["--log-level", "info"])
        #expect(
            flowd.output.contains("from its checkpoint of entry \(count) and 0 entries after it"), "\(flowd.output)")
        #expect(try acceptedSteps(topology) == count + 1, "the counters come back with the checkpoint")
        let restoredLine = flowd.output.split(separator: "\n").first { $0.contains("restored") } ?? ""
        print("million-step journal: \(restoredLine)")
    }
}
