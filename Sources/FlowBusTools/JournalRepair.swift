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
        /// loses every id from its lower bound on: the commits' table could not be read to its end.
        public var unreadable: [ClosedRange<Int64>]
        /// When the end was lost: the new journal numbers its entries after this id, past every id
        /// the damaged file could hold, so that no lost id is given to another entry.
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
                            packed += try unpackedCommit(row).entries.count
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

    /// Copies every entry and source that can be read from the journal at `path` into a new
    /// journal at `newPath` (which must not exist), in order and under the same ids, with the
    /// newest checkpoint. Pages that cannot be read are skipped and reported, a narrowing search
    /// isolating each unreadable id; where the commits' bounds cannot be read, up to `gapProbes`
    /// reads search between damaged pages for pages that can.
    public static func salvage(path: String, to newPath: String, gapProbes: Int = gapProbes) throws -> Salvage {
        guard !FileManager.default.fileExists(atPath: newPath) else { throw JournalError.exists(newPath) }
        var configuration = Configuration()
        configuration.readonly = true
        let damaged = try DatabaseQueue(path: path, configuration: configuration)
        defer { try? damaged.close() }
        let target = try StepJournal.open(path: newPath, synchronous: .normal)
        defer { target.close() }
        // The entries' bounds before anything is copied: a journal that cannot tell them is refused
        // whole. The commits' bounds are read apart: a damaged end of that table loses the commits
        // past what can be read, not the rest of the journal.
        let rows: ClosedRange<Int64>?
        do {
            rows = try damaged.read { db in
                try Self.bounds(of: "id", in: "entry", db).map { max(1, $0.lowerBound)...$0.upperBound }
            }
        } catch {
            throw JournalError.damaged(
                path: path, cause: "its entries cannot even be counted (\(error)); nothing can be salvaged")
        }
        var result = Salvage(entries: 0, sources: 0, checkpoint: nil, unreadable: [])
        if let rows {
            // Only reads are narrowed: a failure to write the new journal stops the salvage.
            result.unreadable += try readNarrowing(rows, chunk: 4096) { chunk in
                try damaged.read { db in
                    try Row.fetchAll(
                        db,
                        sql: """
                            SELECT kind, target, name, params, source, sequence, id FROM entry WHERE id BETWEEN ? AND ? ORDER BY id
                            """, arguments: [chunk.lowerBound, chunk.upperBound])
                }
            } copy: { entries in
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
            }
        }
        let hasCommits = (try? damaged.read { db in try db.tableExists("batch") }) ?? true
        if hasCommits {
            // min and max each in a query of its own: together they would read the whole table.
            let low = Result { try damaged.read { db in try Int64.fetchOne(db, sql: "SELECT min(first) FROM batch") } }
            let high = Result { try damaged.read { db in try Int64.fetchOne(db, sql: "SELECT max(first) FROM batch") } }
            // Where losses can start when the first commits cannot be read: after the entries' rows
            // and after what the checkpoint covers (compaction deletes those commits on purpose).
            let checkpointEntry =
                (try? damaged.read { db in
                    try Int64.fetchOne(db, sql: "SELECT entry FROM checkpoint ORDER BY id DESC LIMIT 1")
                }) ?? nil
            let floor = max(rows?.upperBound ?? 0, checkpointEntry ?? 0) + 1
            switch (low, high) {
            case (.success(let low?), .success(let high?)) where low <= high:
                try salvageCommits(low...high, from: damaged, to: target, into: &result)
            case (.success, .success):
                break
            case (.success(let low), .failure):
                try salvageCommitsWalking(
                    from: low ?? 1, ascending: true, floor: floor, probes: gapProbes, from: damaged, to: target,
                    into: &result)
            case (.failure, .success(let high?)):
                try salvageCommitsWalking(
                    from: high, ascending: false, floor: floor, probes: gapProbes, from: damaged, to: target,
                    into: &result)
            case (.failure, .failure), (.failure, .success(nil)):
                // Neither end can be read: no commit can be told apart; the checkpoint and the
                // sources are still worth keeping.
                result.unreadable.append(floor...Int64.max)
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
        if let end = result.unreadable.last, end.upperBound == .max {
            let bound = idsHeld(byFileAt: path)
            let (last, overflow) = (end.lowerBound - 1).addingReportingOverflow(bound)
            result.numberedAfter = overflow ? .max : last
            try target.reserveIDs(through: result.numberedAfter ?? last)
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

    /// Copies the commits stored packed (a row each, `first...last`) whose first ids are in
    /// `firsts`, narrowing over those ids where a read fails. A commit whose row cannot be read
    /// loses its entries: through its `last` when that can still be read, else up to the next
    /// commit copied.
    private static func salvageCommits(
        _ firsts: ClosedRange<Int64>, from damaged: DatabaseQueue, to target: StepJournal, into result: inout Salvage
    ) throws {
        var lost: [ClosedRange<Int64>] = []
        var copied: [ClosedRange<Int64>] = []
        let unreadable = try readNarrowing(firsts, chunk: 1 << 16) { chunk in
            try damaged.read { db in
                // One commit by its id: a range's scan steps past its last row, onto the next page,
                // which may be the damaged one.
                chunk.lowerBound == chunk.upperBound
                    ? try Row.fetchAll(
                        db, sql: "SELECT first, last, entries FROM batch WHERE first = ?", arguments: [chunk.lowerBound]
                    )
                    : try Row.fetchAll(
                        db, sql: "SELECT first, last, entries FROM batch WHERE first BETWEEN ? AND ? ORDER BY first",
                        arguments: [chunk.lowerBound, chunk.upperBound])
            }
        } copy: { rows in
            for row in rows {
                guard let (first, last, entries) = try? unpackedCommit(row) else {
                    let first: Int64 = row[0]
                    lost.append(first...max(first, (row[1] as Int64?) ?? first))
                    continue
                }
                try copy(entries, to: target, into: &result)
                copied.append(first...last)
            }
        }
        // Ids whose reads failed: an id inside a commit copied is not lost; a commit's first id
        // loses that commit, through its last if that still reads, else up to the next copied.
        for range in unreadable {
            let before = copied.last { $0.lowerBound < range.lowerBound }
            let start = max(range.lowerBound, (before?.upperBound ?? 0) + 1)
            guard start <= range.upperBound else { continue }
            let last =
                (try? damaged.read { db in
                    try Int64.fetchOne(db, sql: "SELECT last FROM batch WHERE first = ?", arguments: [range.lowerBound])
                }) ?? nil
            let next = copied.first { $0.lowerBound > range.upperBound }?.lowerBound
            let end = max(range.upperBound, last ?? next.map { $0 - 1 } ?? range.upperBound)
            lost.append(start...end)
        }
        result.unreadable += lost
    }

    /// Copies the commits of a table one of whose ends cannot be read, so that its bounds are not
    /// known: they are walked from `start` at the other end, over damaged pages on the way. Lost:
    /// what lies between the runs read, and beyond the last run (past it going up; from `floor`
    /// to the first going down) when the walk could not read to the table's far end.
    private static func salvageCommitsWalking(
        from start: Int64, ascending: Bool, floor: Int64, probes: Int, from damaged: DatabaseQueue,
        to target: StepJournal, into result: inout Salvage
    ) throws {
        let (runs, readToEnd) = readableCommitRuns(from: start, ascending: ascending, probes: probes, in: damaged)
        for run in runs { try salvageCommits(run.firsts, from: damaged, to: target, into: &result) }
        guard let first = runs.first, let last = runs.last else {
            if !readToEnd { result.unreadable.append((ascending ? start : floor)...Int64.max) }
            return
        }
        if !ascending, !readToEnd, floor < first.firsts.lowerBound {
            result.unreadable.append(floor...(first.firsts.lowerBound - 1))
        }
        for (before, after) in zip(runs, runs.dropFirst()) where before.lastID < after.firsts.lowerBound - 1 {
            result.unreadable.append((before.lastID + 1)...(after.firsts.lowerBound - 1))
        }
        if ascending, !readToEnd, last.lastID < .max { result.unreadable.append((last.lastID + 1)...Int64.max) }
    }

    /// A run of commits that can be read: the first ids of its commits, and the last id of its
    /// highest commit.
    private struct CommitRun {
        var firsts: ClosedRange<Int64>
        var lastID: Int64

        init(first: Int64, last: Int64) {
            firsts = first...first
            lastID = last
        }

        mutating func add(first: Int64, last: Int64) {
            firsts = min(firsts.lowerBound, first)...max(firsts.upperBound, first)
            lastID = max(lastID, last)
        }
    }

    /// How many reads a salvage spends searching between damaged pages for pages that can be
    /// read: damage up to this many ids wide is searched id by id, wider damage more coarsely.
    public static let gapProbes = 1 << 16

    /// The runs of commits that can be read, walking from the one numbered `start` one way, for a
    /// table one of whose ends cannot be read (its bounds unknown); lowest first. A walk ends where
    /// a read fails; ids ever farther are probed until one reads again, and the ids between two
    /// probes are searched for pages that can be read (several damaged stretches may hide some
    /// between them), with up to `probes` reads in all. Reads ids only.
    /// - Returns: the runs, and whether the walk read to the table's far end (else the last run
    ///   ends at damage no read could get past).
    private static func readableCommitRuns(
        from start: Int64, ascending: Bool, probes: Int, in damaged: DatabaseQueue
    ) -> (runs: [CommitRun], readToEnd: Bool) {
        var runs: [CommitRun] = []
        var probes = probes
        var next: Int64? = start
        while let from = next {
            let walk = walkCommits(from: from, ascending: ascending, before: nil, in: damaged)
            if let run = walk.run { runs.append(run) }
            guard let stop = walk.stop else {
                return (runs.sorted { $0.firsts.lowerBound < $1.firsts.lowerBound }, true)
            }
            next = commitPast(stop, ascending: ascending, probes: &probes, runs: &runs, in: damaged)
        }
        return (runs.sorted { $0.firsts.lowerBound < $1.firsts.lowerBound }, false)
    }

    /// Probes ids ever farther past `damage` (an id whose read fails), one way, until a read
    /// succeeds; the ids between two probes are searched (``searchGap(_:probes:in:)``) and what
    /// can be read there added to `runs`.
    /// - Returns: the first id of the commit read at the probe that succeeded; nil when none did,
    ///   or the table ends before it.
    private static func commitPast(
        _ damage: Int64, ascending: Bool, probes: inout Int, runs: inout [CommitRun], in damaged: DatabaseQueue
    ) -> Int64? {
        // Ids start at 1: below it there is nothing to find.
        guard ascending || damage > 1 else { return nil }
        var previous = damage
        for power in 0..<63 {
            let step = Int64(1) << power
            let (farther, overflow) =
                ascending ? damage.addingReportingOverflow(step) : damage.subtractingReportingOverflow(step)
            // The last probe is the end of the ids (1, or the largest), once.
            let candidate = ascending ? (overflow ? .max : farther) : (overflow || farther < 1 ? 1 : farther)
            guard candidate != previous else { return nil }
            let read = readCommitIDs(from: candidate, ascending: ascending, limit: 1, in: damaged)
            let found = (try? read.get())?.first?.first
            // Up to the commit found, or to the probe.
            let far = found ?? candidate
            runs += searchGap(ascending ? (previous, far) : (far, previous), probes: &probes, in: damaged)
            if case .success = read { return found }
            previous = candidate
        }
        return nil
    }

    /// The runs of commits that can be read whose first ids lie strictly between the ids of
    /// `gap`, where reads fail or were made already: its middle is probed, then each half, widest
    /// first, while `probes` last; from a commit read, walks go both ways to the damage (or the
    /// gap's ends), and the ids beyond them are searched in turn.
    private static func searchGap(
        _ gap: (low: Int64, high: Int64), probes: inout Int, in damaged: DatabaseQueue
    ) -> [CommitRun] {
        var runs: [CommitRun] = []
        // Widest first: the halves of every gap before the halves of those.
        var pending = [gap]
        var index = 0
        while index < pending.count, probes > 0 {
            let (low, high) = pending[index]
            index += 1
            guard high - low > 1 else { continue }
            let middle = low + (high - low) / 2
            probes -= 1
            guard case .success(let rows) = readCommitIDs(from: middle, ascending: true, limit: 1, in: damaged) else {
                pending += [(low, middle), (middle, high)]
                continue
            }
            guard let found = rows.first?.first, found < high else {
                // Nothing can be read from the middle to the gap's end.
                pending.append((low, middle))
                continue
            }
            let up = walkCommits(from: found, ascending: true, before: high, in: damaged)
            let down = walkCommits(from: found - 1, ascending: false, before: low, in: damaged)
            guard var run = up.run ?? down.run else { continue }
            if let below = down.run, up.run != nil {
                run.add(first: below.firsts.lowerBound, last: below.lastID)
            }
            runs.append(run)
            // Where a read fails, the commit of that id (if any) is on a damaged page.
            if let stop = down.stop { pending.append((low, stop)) }
            if let stop = up.stop { pending.append((stop, high)) }
        }
        return runs
    }

    /// Reads the ids of commits from the one numbered `start`, one way, as far as reads succeed
    /// and, with `bound`, short of it.
    /// - Returns: what was read, and the id from which reads fail (nil: the walk reached `bound`
    ///   or the table's end).
    private static func walkCommits(
        from start: Int64, ascending: Bool, before bound: Int64?, in damaged: DatabaseQueue
    ) -> (run: CommitRun?, stop: Int64?) {
        var run: CommitRun?
        var next = start
        // A read that meets a damaged page fails whole: it is tried again over fewer commits, down
        // to one, so that the walk ends right before that page.
        let widest = 4096
        var limit = widest
        while true {
            if let bound, ascending ? next >= bound : next <= bound { return (run, nil) }
            guard case .success(let rows) = readCommitIDs(from: next, ascending: ascending, limit: limit, in: damaged)
            else {
                guard limit == 1 else {
                    limit /= 2
                    continue
                }
                return (run, next)
            }
            for (first, last) in rows {
                if let bound, ascending ? first >= bound : first <= bound { return (run, nil) }
                if run == nil { run = CommitRun(first: first, last: last) } else { run?.add(first: first, last: last) }
            }
            guard rows.count == limit, let edge = rows.last?.first, ascending ? edge < .max : edge > 1 else {
                return (run, nil)
            }
            next = ascending ? edge + 1 : edge - 1
            limit = min(limit * 2, widest)
        }
    }

    /// The first ids and last ids of up to `limit` commits from the one numbered `from`, one way.
    private static func readCommitIDs(
        from: Int64, ascending: Bool, limit: Int, in damaged: DatabaseQueue
    ) -> Result<[(first: Int64, last: Int64)], any Error> {
        Result {
            try damaged.read { db in
                try Row.fetchAll(
                    db,
                    sql: ascending
                        ? "SELECT first, last FROM batch WHERE first >= ? ORDER BY first LIMIT ?"
                        : "SELECT first, last FROM batch WHERE first <= ? ORDER BY first DESC LIMIT ?",
                    arguments: [from, limit]
                ).map { row in
                    let first: Int64 = row[0]
                    return (first, max(first, (row[1] as Int64?) ?? first))
                }
            }
        }
    }

    /// Appends a commit's entries to the new journal under their ids.
    private static func copy(_ entries: [StepJournal.Entry], to target: StepJournal, into result: inout Salvage) throws
    {
        let records = entries.map {
            StepJournal.Record(
                kind: $0.kind, target: $0.target, name: $0.name, params: Data($0.params), source: $0.source,
                sequence: $0.sequence)
        }
        try target.append(StepJournal.Batch(records), ids: entries.map(\.id), lastSequences: [:])
        result.entries += records.count
    }

    /// `column`'s lowest and highest values in `table`; nil when it is empty.
    private static func bounds(of column: String, in table: String, _ db: Database) throws -> ClosedRange<Int64>? {
        // min and max each in a query of its own: together they would read the whole table.
        guard let low = try Int64.fetchOne(db, sql: "SELECT min(\(column)) FROM \(table)"),
            let high = try Int64.fetchOne(db, sql: "SELECT max(\(column)) FROM \(table)"), low <= high
        else { return nil }
        return low...high
    }

    /// What is damaged in a packed commit, to report it.
    private struct DamagedCommit: Error, CustomStringConvertible {
        var description: String
    }

    /// A packed commit's row (`first, last, entries`), unpacked.
    /// - Throws: ``DamagedCommit``, naming the commit, when its ids or its entries cannot be read.
    private static func unpackedCommit(_ row: Row) throws -> (first: Int64, last: Int64, entries: [StepJournal.Entry]) {
        let first: Int64? = row[0]
        let last: Int64? = row[1]
        let bytes: Data? = row[2]
        guard let first, let last, let bytes, last >= first else {
            throw DamagedCommit(description: "a commit of entries has no ids or no entries (from \(first ?? 0))")
        }
        var entries: [StepJournal.Entry] = []
        do {
            try bytes.withUnsafeBytes { raw in
                try StepJournal.PackedEntries.unpack(
                    raw, first: first, count: Int(last - first + 1), after: 0, into: &entries)
            }
        } catch {
            throw DamagedCommit(description: "the commit of entries \(first)...\(last): \(error)")
        }
        return (first, last, entries)
    }

    /// Reads `range` in chunks, in order, halving a chunk whose read fails down to single ids,
    /// and hands each chunk read to `copy` (whose errors end it). Returns the ids no read could take.
    private static func readNarrowing<Rows>(
        _ range: ClosedRange<Int64>, chunk size: Int64, read: (ClosedRange<Int64>) throws -> Rows,
        copy: (Rows) throws -> Void
    ) throws -> [ClosedRange<Int64>] {
        var unreadable: [ClosedRange<Int64>] = []
        var pending = [range]
        while let range = pending.first {
            pending.removeFirst()
            let upper = min(range.upperBound, range.lowerBound + size - 1)
            let chunk = range.lowerBound...upper
            if upper < range.upperBound { pending.insert((upper + 1)...range.upperBound, at: 0) }
            let rows: Rows
            do {
                rows = try read(chunk)
            } catch {
                if chunk.count == 1 {
                    unreadable.append(chunk)
                } else {
                    let middle = chunk.lowerBound + Int64(chunk.count / 2) - 1
                    pending.insert(contentsOf: [chunk.lowerBound...middle, (middle + 1)...chunk.upperBound], at: 0)
                }
                continue
            }
            try copy(rows)
        }
        return unreadable
    }

    private static func merge(_ ranges: [ClosedRange<Int64>]) -> [ClosedRange<Int64>] {
        var merged: [ClosedRange<Int64>] = []
        for range in ranges.sorted(by: { $0.lowerBound < $1.lowerBound }) {
            // An upper bound of `Int64.max` stands for "and every id after".
            if let last = merged.last, last.upperBound == .max || last.upperBound + 1 >= range.lowerBound {
                merged[merged.count - 1] = last.lowerBound...max(last.upperBound, range.upperBound)
            } else {
                merged.append(range)
            }
        }
        return merged
    }
}
