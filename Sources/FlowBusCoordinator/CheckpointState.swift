import FlowBusConfiguration
import Foundation

/// Where the journal's checkpoints stand.
package struct CheckpointState {
    /// The id of the last journaled entry.
    package var lastEntry: Int64 = 0
    /// Entries journaled since the last checkpoint (or, at start, not covered by one).
    package var sinceLast = 0
    package var lastWritten = ContinuousClock.now
    package var notBefore = ContinuousClock.now
    package var lastCost: Duration?
    /// Taking the engine's state for the last checkpoint (on the loop's thread).
    package var taking: Duration = .zero
    /// Why the last attempt was put off, while it still is.
    package var obstacle: String?
    /// The newest stored checkpoint.
    package var entry: Int64 = 0
    package var created: Date?
    package var bytes = 0
    /// Entries below this id are covered by the checkpoint and still to delete; nil when none are.
    package var compactBelow: Int64?

    /// What to delete in the next commit: a few times what it adds, so compaction catches up
    /// with the flow of steps while no commit is much slower than it would be without.
    package func compaction(alongside appended: Int) -> StepJournal.Compaction? {
        compactBelow.map { StepJournal.Compaction(below: $0, limit: 4 * appended + 2048) }
    }

    package mutating func compacted(_ count: Int, of compaction: StepJournal.Compaction) {
        if count < compaction.limit { compactBelow = nil }
    }

    package mutating func stored(_ checkpoint: StepJournal.Checkpoint, bytes: Int) {
        entry = checkpoint.entry
        created = checkpoint.created
        self.bytes = bytes
    }

    /// The checkpoint `stored` covers its entries: those below what `policy` keeps may go.
    package mutating func covered(by stored: StepJournal.Checkpoint, keeping policy: FlowBusConfig.CheckpointPolicy) {
        compactBelow =
            StepJournal.Compaction(checkpointOf: stored.entry, keepEntries: policy.keepEntries, limit: 0).below
    }
}
