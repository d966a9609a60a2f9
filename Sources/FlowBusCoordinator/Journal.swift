import FlowBusClient
import FlowBusConfiguration
import FlowBusDaemon
import FlowBusProtocol
import FlowBusWire
import Flows
import Foundation
import ZeroMQ

/// Where flowd keeps what it applied, so that a restarted (or another) flowd goes on from there:
/// the SQLite ``StepJournal`` on the machine's disk (the default) or the `PostgresJournal`
/// that several flowd instances share. Both keep the same tables and obey the same rules:
/// one transaction per batch, the sources' last sequences in the same transaction, checkpoints
/// and compaction (see ``StepJournal``).
///
/// Calls block the calling thread until the store answered: flowd makes them on its loop's own
/// thread or the checkpoint writer's, never on the cooperative pool.
public protocol Journal: AnyObject, Sendable {
    /// Where it is, for messages: a file path or a PostgreSQL address without its password.
    var location: String { get }
    /// The number of entries after the one with id `after`.
    func count(after: Int64) throws -> Int
    /// The ids of the first and the last entry, nil when there is none.
    func entryRange() throws -> ClosedRange<Int64>?
    /// Whether entries may have been deleted by compaction, so that the journal can no longer be
    /// replayed from its beginning without its checkpoint.
    func mayHaveCompacted() throws -> Bool
    /// Up to `limit` entries after the one with id `after`, in order.
    func entries(after: Int64, limit: Int) throws -> [StepJournal.Entry]
    /// The newest checkpoint, nil if none was written.
    func latestCheckpoint() throws -> StepJournal.Checkpoint?
    /// The entry the newest checkpoint covers up to, without reading its state.
    func latestCheckpointEntry() throws -> Int64?
    /// Stores a checkpoint and removes older ones.
    func store(_ checkpoint: StepJournal.Checkpoint) throws
    /// Appends `batch` and the events it caused, raises the sources' last sequences, deletes
    /// entries as `compaction` says and events before `events.keepFrom`, in one transaction;
    /// returns the id of the last entry (0 if none) and how many were compacted.
    func append(
        _ batch: StepJournal.Batch, events: JournalEvents?, lastSequences: [String: UInt64],
        compaction: StepJournal.Compaction?
    ) throws -> (last: Int64, compacted: Int)
    /// The sequences of the oldest and the newest event kept (PROTOCOL.md §4.6), nil when none is.
    func eventRange() throws -> ClosedRange<UInt64>?
    /// Up to `limit` batches of events holding events after `since`, oldest first.
    func eventBatches(after since: UInt64, limit: Int) throws -> [EventBatch]
    /// Deletes the batches of events committed before `before` (seconds since the Unix epoch),
    /// as the retention's age says, but for the newest, whose last event the numbering goes on
    /// from; returns how many went.
    func trimEvents(committedBefore before: Double) throws -> Int
    /// Deletes entries as `compaction` says, in a transaction of its own.
    func compact(_ compaction: StepJournal.Compaction) throws -> Int
    /// The last sequence dealt with of one source, nil if the journal has none.
    func lastSequence(of source: String) throws -> UInt64?
    /// The last sequence dealt with of each of `sources` the journal has, in one read: flowd looks
    /// up the sources a batch does not hold this way, off its loop's thread.
    func lastSequences(of sources: [String]) throws -> [String: UInt64]
    /// Tidies up at a clean shutdown (SQLite folds its write-ahead log into the file).
    func flush()
    /// Closes it.
    func close()
}

/// The events a batch caused, kept with it for replays, and the retention by count: batches
/// whose events all come before `keepFrom` go in the same transaction.
public struct JournalEvents: Sendable {
    public var batch: EventBatch
    public var keepFrom: UInt64

    package init(batch: EventBatch, keepFrom: UInt64) {
        self.batch = batch
        self.keepFrom = keepFrom
    }
}

extension Journal {
    /// Appends `batch` without events.
    @discardableResult
    public func append(
        _ batch: StepJournal.Batch, lastSequences: [String: UInt64], compaction: StepJournal.Compaction? = nil
    ) throws -> (last: Int64, compacted: Int) {
        try append(batch, events: nil, lastSequences: lastSequences, compaction: compaction)
    }

    /// Appends `records`, as ``append(_:events:lastSequences:compaction:)`` appends a batch.
    @discardableResult
    public func append(
        _ records: [StepJournal.Record], lastSequences: [String: UInt64], compaction: StepJournal.Compaction? = nil
    ) throws -> (last: Int64, compacted: Int) {
        try append(StepJournal.Batch(records), events: nil, lastSequences: lastSequences, compaction: compaction)
    }
}

/// A journal several flowd instances share, one of them active: only the instance holding the
/// journal's lease writes to it or serves (see `LeasedStore`).
public protocol SharedJournal: Journal, LeasedStore {}
