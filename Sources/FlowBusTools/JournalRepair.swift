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
        /// Ranges of entry ids that could not be read (lost). One whose upper bound is `Int64.max`
        /// loses every id from its lower bound on: a table could not be read to its end.
        public var unreadable: [ClosedRange<Int64>]
        /// When the end was lost: the new journal numbers its entries after this id, past every id
        /// the damaged file could hold (counted from the last id an earlier salvage numbered past,
        /// when that is later than the first lost), so that no lost id is given to another entry.
        public var numberedAfter: Int64? = nil
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
        let rows =
            (try? database.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM entry WHERE kind != 0") })
            ?? nil
        // Packed commits (a journal of an earlier version has none): SQLite's check does not read
        // inside their values, so each is unpacked.
        var packed = 0
        var damagedCommits: [String] = []
        if (try? database.read({ db in try db.tableExists("batch") })) == true {
            do {
                try database.read { db in
                    let commits = try Row.fetchCursor(db, sql: "SELECT first, last, entries FROM batch ORDER BY first")
                    while let row = try commits.next() {
                        do {
                            packed += try JournalSalvager.unpackedCommit(row).entries.count
                        } catch {
                            damagedCommits.append("\(error)")
                        }
                    }
                }
            } catch {
                damagedCommits.append("the commits cannot be read through: \(error)")
            }
        }
        let problems = (messages == ["ok"] ? [] : messages) + damagedCommits
        let entries: Int? = rows == nil && packed == 0 ? nil : (rows ?? 0) + packed
        let sources = (try? database.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM source") }) ?? nil
        let checkpoint =
            (try? database.read { db in
                try Int64.fetchOne(db, sql: "SELECT entry FROM checkpoint ORDER BY id DESC LIMIT 1")
            }) ?? nil
        return Report(
            isIntact: problems.isEmpty, problems: problems, entries: entries ?? 0, sources: sources ?? 0,
            checkpointEntry: checkpoint)
    }

    /// How many reads a salvage spends searching between damaged pages for pages that can be
    /// read: each gap between probes past damage gets a read at its middle before any is halved,
    /// so that far gaps are searched too, more coarsely than near ones.
    public static let gapProbes = 1 << 16

    /// Copies every entry and source that can be read from the journal at `path` into a new
    /// journal at `newPath` (which must not exist), in order and under the same ids, with the
    /// newest checkpoint. Pages that cannot be read are skipped and reported, a narrowing search
    /// isolating each unreadable id; where a table's bounds cannot be read, it is walked from the
    /// end that can, and up to `gapProbes` reads search between damaged pages for pages that can.
    public static func salvage(path: String, to newPath: String, gapProbes: Int = gapProbes) throws -> Salvage {
        guard !FileManager.default.fileExists(atPath: newPath) else { throw JournalError.exists(newPath) }
        var configuration = Configuration()
        configuration.readonly = true
        let damaged = try DatabaseQueue(path: path, configuration: configuration)
        defer { try? damaged.close() }
        let target = try StepJournal.open(path: newPath, synchronous: .normal)
        defer { target.close() }
        var salvager = JournalSalvager(damaged: damaged, target: target, probes: gapProbes)
        // Ids the checkpoint covers are not lost when missing: compaction deletes them on purpose.
        let checkpointEntry =
            (try? damaged.read { db in
                try Int64.fetchOne(db, sql: "SELECT entry FROM checkpoint ORDER BY id DESC LIMIT 1")
            }) ?? nil
        // The entries' rows (of earlier versions, or of a journal salvaged before) come before the
        // commits, but for reserved ids, which hold no entry: the rows' losses end where the
        // commits begin, and the commits' start after the rows.
        let rows = try salvager.salvage(.entryRows, floor: (checkpointEntry ?? 0) + 1)
        let rowLosses = 0..<salvager.result.unreadable.count
        let hasCommits = (try? damaged.read { db in try db.tableExists("batch") }) ?? true
        if hasCommits,
            let commits = try salvager.salvage(.commits, floor: max(rows?.upperBound ?? 0, checkpointEntry ?? 0) + 1)
        {
            salvager.endLosses(at: rowLosses, before: commits.lowerBound)
        }
        var result = salvager.result
        // The ids earlier salvages numbered past (nil: noted, but they cannot be read).
        let reservations: [Int64]? =
            (try? damaged.read { db in
                guard try db.tableExists("reservation") else { return [] }
                return try Int64.fetchAll(db, sql: "SELECT through FROM reservation")
            }).map { Array(Set($0 + salvager.reservedRows)).sorted() }
        // Numbering goes on past them as it did: their ids may have named lost entries.
        try target.noteReservations(reservations ?? salvager.reservedRows)
        if let highest = (reservations ?? salvager.reservedRows).last { try target.reserveIDs(through: highest) }
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
        result.unreadable = salvager.lost
        if let end = result.unreadable.last, end.upperBound == .max {
            // The lost ids follow one another from the first lost or from the last reservation,
            // whichever is later: the file held no more entries than its size allows past that.
            // Reservations that cannot be read leave it unknown: half the ids, as for an overflow.
            let from = reservations.map { max(end.lowerBound - 1, $0.last ?? 0) }
            let (past, overflow) = from?.addingReportingOverflow(idsHeld(byFileAt: path)) ?? (.max, true)
            // Half the ids at most: numbering goes on from there. The checkpoint's reservation may
            // already reach farther.
            let last = max(overflow ? .max / 2 : min(past, .max / 2), checkpointEntry ?? 0)
            try target.reserveIDs(through: last)
            result.numberedAfter = last
        }
        return result
    }

    /// How many entry ids the journal at `path` can hold at most, with its write-ahead log: an
    /// entry takes at least ``StepJournal/PackedEntries/minimumEntryBytes`` of the file.
    private static func idsHeld(byFileAt path: String) -> Int64 {
        let bytes = ["", "-wal"].reduce(Int64(0)) { total, suffix in
            let size = (try? FileManager.default.attributesOfItem(atPath: path + suffix)[.size] as? NSNumber) ?? nil
            return total + (size?.int64Value ?? 0)
        }
        return max(1, bytes / Int64(StepJournal.PackedEntries.minimumEntryBytes))
    }
}
