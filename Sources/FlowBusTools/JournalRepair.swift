import FlowBusClient
import FlowBusConfiguration
import FlowBusCoordinator
import FlowBusDaemon
import FlowBusWire
import Foundation
import GRDB
import ZeroMQ

/// Checks a flowd journal and copies what can still be read of a damaged one into a new file:
/// what `flowctl journal check` and `flowctl journal salvage` run.
public enum JournalRepair {
    /// What a check found.
    public struct Report: Sendable, Equatable {
        /// SQLite's `integrity_check` said `ok`.
        public var isIntact: Bool
        /// SQLite's own words when it is not.
        public var problems: [String]
        /// Entries and sources that could be read.
        public var entries: Int
        public var sources: Int
        /// The id of the last entry the stored checkpoint covers (entries up to it may be compacted away).
        public var checkpointEntry: Int64?
    }

    /// What a salvage copied and what it could not.
    public struct Salvage: Sendable, Equatable {
        public var entries: Int
        public var sources: Int
        /// Whether the checkpoint could be copied (nil: there was none).
        public var checkpoint: Bool?
        /// Ranges of entry ids that could not be read (lost).
        public var unreadable: [ClosedRange<Int64>]
    }

    /// Reads the whole journal at `path` without changing it.
    public static func check(path: String) throws -> Report {
        guard FileManager.default.fileExists(atPath: path) else { throw JournalError.missing(path) }
        var configuration = Configuration()
        configuration.readonly = true
        let database = try DatabaseQueue(path: path, configuration: configuration)
        defer { try? database.close() }
        let messages: [String]
        do {
            messages = try database.read { db in try String.fetchAll(db, sql: "PRAGMA integrity_check") }
        } catch {
            // Damage where SQLite keeps its schema makes the check itself fail.
            messages = ["\(error)"]
        }
        let intact = messages == ["ok"]
        let entries = (try? database.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM entry") }) ?? nil
        let sources = (try? database.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM source") }) ?? nil
        let checkpoint =
            (try? database.read { db in
                try Int64.fetchOne(db, sql: "SELECT entry FROM checkpoint ORDER BY id DESC LIMIT 1")
            }) ?? nil
        return Report(
            isIntact: intact, problems: intact ? [] : messages, entries: entries ?? 0, sources: sources ?? 0,
            checkpointEntry: checkpoint)
    }

    /// Copies every entry and source that can be read from the journal at `path` into a new
    /// journal at `newPath` (which must not exist), in order and under the same ids, with the
    /// newest checkpoint. Pages that cannot be read are skipped and reported, a narrowing search
    /// isolating each unreadable id.
    public static func salvage(path: String, to newPath: String) throws -> Salvage {
        guard !FileManager.default.fileExists(atPath: newPath) else { throw JournalError.exists(newPath) }
        var configuration = Configuration()
        configuration.readonly = true
        let damaged = try DatabaseQueue(path: path, configuration: configuration)
        defer { try? damaged.close() }
        let target = try StepJournal.open(path: newPath, synchronous: .normal)
        defer { target.close() }
        let maxID: Int64?
        let minID: Int64?
        do {
            (minID, maxID) = try damaged.read { db in
                (
                    try Int64.fetchOne(db, sql: "SELECT min(id) FROM entry"),
                    try Int64.fetchOne(db, sql: "SELECT max(id) FROM entry")
                )
            }
        } catch {
            throw JournalError.damaged(
                path: path, cause: "its entries cannot even be counted (\(error)); nothing can be salvaged")
        }
        var result = Salvage(entries: 0, sources: 0, checkpoint: nil, unreadable: [])
        // Ranges still to read, narrowed where a read fails, down to single ids.
        var pending: [ClosedRange<Int64>] = []
        if let minID, let maxID, minID <= maxID { pending = [max(1, minID)...maxID] }
        while let range = pending.first {
            pending.removeFirst()
            let upper = min(range.upperBound, range.lowerBound + 4095)
            let chunk = range.lowerBound...upper
            if upper < range.upperBound { pending.insert((upper + 1)...range.upperBound, at: 0) }
            do {
                let entries = try damaged.read { db in
                    try Row.fetchAll(
                        db,
                        sql: """
                            SELECT kind, target, name, params, source, sequence, id FROM entry WHERE id BETWEEN ? AND ? ORDER BY id
                            """, arguments: [chunk.lowerBound, chunk.upperBound])
                }
                var ids: [Int64] = []
                let records = entries.compactMap { row -> StepJournal.Record? in
                    guard let kind = StepJournal.Kind(rawValue: row[0]) else { return nil }
                    ids.append(row[6])
                    return StepJournal.Record(
                        kind: kind, target: row[1], name: row[2], params: row[3], source: row[4],
                        sequence: UInt64(bitPattern: row[5]))
                }
                try target.append(StepJournal.Batch(records), ids: ids, lastSequences: [:])
                result.entries += records.count
            } catch {
                if chunk.count == 1 {
                    result.unreadable.append(chunk)
                } else {
                    let middle = chunk.lowerBound + Int64(chunk.count / 2) - 1
                    pending.insert(contentsOf: [chunk.lowerBound...middle, (middle + 1)...chunk.upperBound], at: 0)
                }
            }
        }
        let sources =
            (try? damaged.read { db in
                try Row.fetchAll(db, sql: "SELECT id, lastSequence FROM source").map { row -> (String, UInt64) in
                    (row[0], UInt64(bitPattern: row[1]))
                }
            }) ?? []
        try target.append([], lastSequences: Dictionary(sources, uniquingKeysWith: max))
        result.sources = sources.count
        let hasCheckpoint =
            (try? damaged.read { db in try Bool.fetchOne(db, sql: "SELECT count(*) > 0 FROM checkpoint") }) ?? nil
        if hasCheckpoint == true {
            do {
                let checkpoint = try damaged.read { db in
                    try Row.fetchOne(db, sql: "SELECT entry, created, state FROM checkpoint ORDER BY id DESC LIMIT 1")
                        .map { row in
                            StepJournal.Checkpoint(
                                entry: row[0], created: Date(timeIntervalSince1970: row[1]), state: row[2])
                        }
                }
                if let checkpoint {
                    try target.store(checkpoint)
                    // New entries must be numbered after the checkpoint's, even if its own entry was lost.
                    try target.reserveIDs(through: checkpoint.entry)
                }
                result.checkpoint = checkpoint != nil
            } catch {
                result.checkpoint = false
            }
        }
        result.unreadable = merge(result.unreadable)
        return result
    }

    private static func merge(_ ranges: [ClosedRange<Int64>]) -> [ClosedRange<Int64>] {
        var merged: [ClosedRange<Int64>] = []
        for range in ranges.sorted(by: { $0.lowerBound < $1.lowerBound }) {
            if let last = merged.last, last.upperBound + 1 >= range.lowerBound {
                merged[merged.count - 1] = last.lowerBound...max(last.upperBound, range.upperBound)
            } else {
                merged.append(range)
            }
        }
        return merged
    }
}
