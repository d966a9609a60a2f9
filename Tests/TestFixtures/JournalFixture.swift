import FlowBusConfiguration
import FlowBusCoordinator
import FlowBusWire
import Foundation

/// A journal in a temporary file for the journal's tests, and the entries they append.
public enum JournalFixture {
    /// Step `tick(n:)` of stepper `load` from source `s#1`, with sequence `n`.
    public static func tick(_ n: Int64) throws -> StepJournal.Record {
        .init(
            kind: .step, target: "load", name: "tick", params: Data(try FBV.encode(.map(["n": .int(n)]))),
            source: "s#1", sequence: UInt64(n))
    }

    /// Runs `body` with a new journal and its path; removes its files afterwards.
    public static func withJournal(_ body: (String, StepJournal) throws -> Void) throws {
        let path = NSTemporaryDirectory() + "journal-\(UUID().uuidString).sqlite"
        defer {
            for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) }
        }
        let journal = try StepJournal.open(path: path, synchronous: .normal)
        defer { journal.close() }
        try body(path, journal)
    }
}
