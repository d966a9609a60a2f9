import FlowBusCoordinator
import Foundation
import GRDB

/// A salvage under way (``JournalRepair/salvage(path:to:gapProbes:)``): copies what can be read of
/// a damaged journal's tables keyed by entry id into the new journal, in order and under the same
/// ids, and keeps what it copied and what it could not.
struct JournalSalvager {
    /// A table keyed by entry id: the commits (a row each, its entries `first...last` packed) or
    /// the entries' rows (of earlier versions, of salvaged journals, and reserved ids).
    enum KeyedTable {
        case commits, entryRows

        var name: String { self == .commits ? "batch" : "entry" }
        var key: String { self == .commits ? "first" : "id" }
        var last: String { self == .commits ? "last" : "id" }
    }

    /// A run of rows that can be read: their keys, and the last id of the highest.
    struct Run {
        var keys: ClosedRange<Int64>
        var lastID: Int64

        init(key: Int64, last: Int64) {
            keys = key...key
            lastID = last
        }

        mutating func add(key: Int64, last: Int64) {
            keys = min(keys.lowerBound, key)...max(keys.upperBound, key)
            lastID = max(lastID, last)
        }
    }

    let damaged: DatabaseQueue
    let target: StepJournal
    var result = JournalRepair.Salvage(entries: 0, sources: 0, checkpoint: nil, unreadable: [])
    /// Reads left to search between damaged pages.
    var probes: Int
    /// Ids copied, in the order copied: no loss reported covers them.
    private var copied: [ClosedRange<Int64>] = []
    /// The ids of reserved-id rows read (numbering jumped past each; a salvage before the table of
    /// reservations noted them only there).
    private(set) var reservedRows: [Int64] = []

    init(damaged: DatabaseQueue, target: StepJournal, probes: Int) {
        self.damaged = damaged
        self.target = target
        self.probes = probes
    }

    /// What was lost: the ids noted unreadable, but for those copied (a damaged page of one table
    /// hides ids that the other one holds).
    var lost: [ClosedRange<Int64>] { Self.subtracting(copied, from: result.unreadable) }

    /// The ids of `ranges` that are in none of `removed`, as merged ranges.
    static func subtracting(
        _ removed: [ClosedRange<Int64>], from ranges: [ClosedRange<Int64>]
    ) -> [ClosedRange<Int64>] {
        let removed = merge(removed)
        var kept: [ClosedRange<Int64>] = []
        var index = 0
        for range in merge(ranges) {
            var start = range.lowerBound
            while index < removed.count, removed[index].upperBound < start { index += 1 }
            var next = index
            while true {
                guard next < removed.count, removed[next].lowerBound <= range.upperBound else {
                    kept.append(start...range.upperBound)
                    break
                }
                let gone = removed[next]
                if gone.lowerBound > start { kept.append(start...(gone.lowerBound - 1)) }
                guard gone.upperBound < range.upperBound else { break }
                start = gone.upperBound + 1
                next += 1
            }
        }
        return kept
    }

    // MARK: Tables

    /// Copies what can be read of `table`: its rows between its bounds when it can tell them, else
    /// walked from the end it can tell, over damaged pages on the way.
    /// - Parameter floor: Where a loss can start when the table's first rows cannot be read (ids
    ///   before it are not lost: compaction deletes them on purpose).
    /// - Returns: the lowest and highest keys read (nil: none).
    mutating func salvage(_ table: KeyedTable, floor: Int64) throws -> ClosedRange<Int64>? {
        // min and max each in a query of its own: together they would read the whole table.
        let low = Result {
            try damaged.read { db in try Int64.fetchOne(db, sql: "SELECT min(\(table.key)) FROM \(table.name)") }
        }
        let high = Result {
            try damaged.read { db in try Int64.fetchOne(db, sql: "SELECT max(\(table.key)) FROM \(table.name)") }
        }
        switch (low, high) {
        case (.success(let low?), .success(let high?)) where low <= high:
            try copy(table, keys: max(1, low)...high)
            return max(1, low)...high
        case (.success, .success):
            return nil
        case (.success(let low), .failure):
            return try salvageWalking(table, from: low ?? 1, ascending: true, floor: floor)
        case (.failure, .success(let high?)):
            return try salvageWalking(table, from: high, ascending: false, floor: floor)
        case (.failure, .failure), (.failure, .success(nil)):
            // Neither end can be read: no row can be told apart.
            result.unreadable.append(floor...Int64.max)
            return nil
        }
    }

    /// Copies the rows of `table` whose keys are in `keys`, narrowing where a read fails.
    private mutating func copy(_ table: KeyedTable, keys: ClosedRange<Int64>) throws {
        switch table {
        case .commits: try copyCommits(keys)
        case .entryRows: try copyEntryRows(keys)
        }
    }

    /// Copies the rows of a table one of whose ends cannot be read, so that its bounds are not
    /// known: walked from `start` at the other end. Lost: what lies between the runs read, and
    /// beyond the last run (past it going up; from `floor` to the first going down) when the walk
    /// could not read to the table's far end.
    /// - Returns: the lowest and highest keys read (nil: none).
    private mutating func salvageWalking(
        _ table: KeyedTable, from start: Int64, ascending: Bool, floor: Int64
    ) throws -> ClosedRange<Int64>? {
        let (runs, readToEnd) = readableRuns(of: table, from: start, ascending: ascending)
        for run in runs { try copy(table, keys: run.keys) }
        guard let first = runs.first, let last = runs.last else {
            if !readToEnd { result.unreadable.append((ascending ? start : floor)...Int64.max) }
            return nil
        }
        if !ascending, !readToEnd, floor < first.keys.lowerBound {
            result.unreadable.append(floor...(first.keys.lowerBound - 1))
        }
        // The row the walk started from (the end it could tell) could not be read itself: going
        // down, where its ids end is not known.
        if ascending, start < first.keys.lowerBound {
            result.unreadable.append(start...(first.keys.lowerBound - 1))
        }
        if !ascending, start > last.keys.upperBound, last.lastID < .max {
            result.unreadable.append((last.lastID + 1)...Int64.max)
        }
        for (before, after) in zip(runs, runs.dropFirst()) where before.lastID < after.keys.lowerBound - 1 {
            result.unreadable.append((before.lastID + 1)...(after.keys.lowerBound - 1))
        }
        if ascending, !readToEnd, last.lastID < .max { result.unreadable.append((last.lastID + 1)...Int64.max) }
        return first.keys.lowerBound...last.keys.upperBound
    }

    /// Ends the losses noted at `indices` before `key`: what follows it is not theirs.
    mutating func endLosses(at indices: Range<Int>, before key: Int64) {
        let losses = result.unreadable[indices].compactMap {
            $0.lowerBound < key ? $0.clamped(to: 1...(key - 1)) : nil
        }
        result.unreadable.replaceSubrange(indices, with: losses)
    }

    // MARK: Copying

    /// Copies the commits whose first ids are in `firsts`, narrowing over those ids where a read
    /// fails. A commit whose row cannot be read loses its entries: through its `last` when that can
    /// still be read, else up to the next commit copied.
    private mutating func copyCommits(_ firsts: ClosedRange<Int64>) throws {
        var copiedHere: [ClosedRange<Int64>] = []
        let damaged = damaged
        let unreadable = try Self.readNarrowing(firsts, chunk: 1 << 16) { chunk in
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
                guard let (first, last, entries) = try? Self.unpackedCommit(row) else {
                    let first: Int64 = row[0]
                    result.unreadable.append(first...max(first, (row[1] as Int64?) ?? first))
                    continue
                }
                try append(entries.map(Self.record(of:)), ids: entries.map(\.id))
                copiedHere.append(first...last)
            }
        }
        // Ids whose reads failed: an id inside a commit copied is not lost; a commit's first id
        // loses that commit, through its last if that still reads, else up to the next copied.
        for range in unreadable {
            let before = copiedHere.last { $0.lowerBound < range.lowerBound }
            let start = max(range.lowerBound, (before?.upperBound ?? 0) + 1)
            guard start <= range.upperBound else { continue }
            let last =
                (try? damaged.read { db in
                    try Int64.fetchOne(db, sql: "SELECT last FROM batch WHERE first = ?", arguments: [range.lowerBound])
                }) ?? nil
            let next = copiedHere.first { $0.lowerBound > range.upperBound }?.lowerBound
            let end = max(range.upperBound, last ?? next.map { $0 - 1 } ?? range.upperBound)
            result.unreadable.append(start...end)
        }
    }

    /// Copies the entries' rows whose ids are in `ids`, narrowing where a read fails.
    private mutating func copyEntryRows(_ ids: ClosedRange<Int64>) throws {
        let damaged = damaged
        // Only reads are narrowed: a failure to write the new journal stops the salvage.
        result.unreadable += try Self.readNarrowing(ids, chunk: 4096) { chunk in
            try damaged.read { db in
                // One row by its id: a range's scan steps past its last row, onto the next page,
                // which may be the damaged one.
                try Row.fetchAll(
                    db,
                    sql: chunk.lowerBound == chunk.upperBound
                        ? "SELECT kind, target, name, params, source, sequence, id FROM entry WHERE id = ?"
                        : """
                        SELECT kind, target, name, params, source, sequence, id FROM entry WHERE id BETWEEN ? AND ? ORDER BY id
                        """,
                    arguments: chunk.lowerBound == chunk.upperBound
                        ? [chunk.lowerBound] : [chunk.lowerBound, chunk.upperBound])
            }
        } copy: { rows in
            var ids: [Int64] = []
            // A reserved id's row (kind 0) holds no entry.
            let records = rows.compactMap { row -> StepJournal.Record? in
                guard let kind = StepJournal.Kind(rawValue: row[0]) else {
                    if row[0] as Int64? == 0 { reservedRows.append(row[6]) }
                    return nil
                }
                ids.append(row[6])
                return StepJournal.Record(
                    kind: kind, target: row[1], name: row[2], params: row[3], source: row[4],
                    sequence: UInt64(bitPattern: row[5]))
            }
            try append(records, ids: ids)
        }
    }

    /// Appends entries to the new journal under their ids.
    private mutating func append(_ records: [StepJournal.Record], ids: [Int64]) throws {
        guard !records.isEmpty else { return }
        try target.append(StepJournal.Batch(records), ids: ids, lastSequences: [:])
        result.entries += records.count
        for id in ids {
            if let last = copied.last, last.upperBound &+ 1 == id {
                copied[copied.count - 1] = last.lowerBound...id
            } else {
                copied.append(id...id)
            }
        }
    }

    private static func record(of entry: StepJournal.Entry) -> StepJournal.Record {
        StepJournal.Record(
            kind: entry.kind, target: entry.target, name: entry.name, params: Data(entry.params),
            source: entry.source, sequence: entry.sequence)
    }

    /// What is damaged in a packed commit, to report it.
    struct DamagedCommit: Error, CustomStringConvertible {
        var description: String
    }

    /// A packed commit's row (`first, last, entries`), unpacked.
    /// - Throws: ``DamagedCommit``, naming the commit, when its ids or its entries cannot be read.
    static func unpackedCommit(_ row: Row) throws -> (first: Int64, last: Int64, entries: [StepJournal.Entry]) {
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

    /// Ranges sorted, those that touch or overlap joined; an upper bound of `Int64.max` stands for
    /// "and every id after".
    static func merge(_ ranges: [ClosedRange<Int64>]) -> [ClosedRange<Int64>] {
        var merged: [ClosedRange<Int64>] = []
        for range in ranges.sorted(by: { $0.lowerBound < $1.lowerBound }) {
            if let last = merged.last, last.upperBound == .max || last.upperBound + 1 >= range.lowerBound {
                merged[merged.count - 1] = last.lowerBound...max(last.upperBound, range.upperBound)
            } else {
                merged.append(range)
            }
        }
        return merged
    }

    // MARK: Walking past damage

    /// The runs of rows of `table` that can be read, walking from the key `start` one way, for a
    /// table one of whose ends cannot be read (its bounds unknown); lowest first. A walk ends where
    /// a read fails; keys ever farther are probed until one reads again, and the keys between two
    /// probes are searched for pages that can be read (several damaged stretches may hide some
    /// between them), with up to ``probes`` reads in all. Reads keys only.
    /// - Returns: the runs, and whether the walk read to the table's far end (else the last run
    ///   ends at damage no read could get past).
    private mutating func readableRuns(
        of table: KeyedTable, from start: Int64, ascending: Bool
    ) -> (runs: [Run], readToEnd: Bool) {
        var runs: [Run] = []
        var next: Int64? = start
        while let from = next {
            let walk = walk(table, from: from, ascending: ascending, before: nil)
            if let run = walk.run { runs.append(run) }
            guard let stop = walk.stop else {
                return (runs.sorted { $0.keys.lowerBound < $1.keys.lowerBound }, true)
            }
            next = keyPast(stop, of: table, ascending: ascending, runs: &runs)
        }
        return (runs.sorted { $0.keys.lowerBound < $1.keys.lowerBound }, false)
    }

    /// Reads the keys of `table` from `start`, one way, as far as reads succeed and, with `bound`,
    /// short of it.
    /// - Returns: what was read, and the key from which reads fail (nil: the walk reached `bound`
    ///   or the table's end).
    private func walk(
        _ table: KeyedTable, from start: Int64, ascending: Bool, before bound: Int64?
    ) -> (run: Run?, stop: Int64?) {
        var run: Run?
        var next = start
        // A read that meets a damaged page fails whole: it is tried again over fewer rows, down to
        // one, so that the walk ends right before that page.
        let widest = 4096
        var limit = widest
        while true {
            if let bound, ascending ? next >= bound : next <= bound { return (run, nil) }
            guard case .success(let rows) = readKeys(of: table, from: next, ascending: ascending, limit: limit) else {
                guard limit == 1 else {
                    limit /= 2
                    continue
                }
                return (run, next)
            }
            for (key, last) in rows {
                if let bound, ascending ? key >= bound : key <= bound { return (run, nil) }
                if run == nil { run = Run(key: key, last: last) } else { run?.add(key: key, last: last) }
            }
            guard rows.count == limit, let edge = rows.last?.key, ascending ? edge < .max : edge > 1 else {
                return (run, nil)
            }
            next = ascending ? edge + 1 : edge - 1
            limit = min(limit * 2, widest)
        }
    }

    /// Probes keys ever farther past `damage` (a key whose read fails), one way, until a read
    /// succeeds; the keys between the probes are then searched (``searchGaps(_:of:)``) and what
    /// can be read there added to `runs`.
    /// - Returns: the key read at the probe that succeeded; nil when none did, or the table ends
    ///   before it.
    private mutating func keyPast(_ damage: Int64, of table: KeyedTable, ascending: Bool, runs: inout [Run]) -> Int64? {
        // Ids start at 1: below it there is nothing to find.
        guard ascending || damage > 1 else { return nil }
        var gaps: [(low: Int64, high: Int64)] = []
        var previous = damage
        var found: Int64?
        for power in 0...63 {
            // The last probe is the end of the ids (1, or the largest).
            var candidate: Int64 = ascending ? .max : 1
            if power < 63 {
                let step = Int64(1) << power
                let (farther, overflow) =
                    ascending ? damage.addingReportingOverflow(step) : damage.subtractingReportingOverflow(step)
                if !overflow && farther >= 1 { candidate = farther }
            }
            guard candidate != previous else { break }
            let read = readKeys(of: table, from: candidate, ascending: ascending, limit: 1)
            let key = (try? read.get())?.first?.key
            // Up to the row found, or to the probe.
            let far = key ?? candidate
            gaps.append(ascending ? (previous, far) : (far, previous))
            if case .success = read {
                found = key
                break
            }
            previous = candidate
        }
        runs += searchGaps(gaps, of: table)
        return found
    }

    /// The runs of rows of `table` that can be read whose keys lie strictly between those of one
    /// of `gaps`, where reads fail or were made already: the middle of each is probed, then the
    /// middle of each half, widest first, while ``probes`` last (so that a far, wide gap is
    /// searched too, more coarsely than a near one); from a row read, walks go both ways to the
    /// damage (or the gap's ends), and the keys beyond them are searched in turn.
    private mutating func searchGaps(_ gaps: [(low: Int64, high: Int64)], of table: KeyedTable) -> [Run] {
        var runs: [Run] = []
        // Widest first: the halves of every gap before the halves of those.
        var pending = gaps
        var index = 0
        while index < pending.count, probes > 0 {
            let (low, high) = pending[index]
            index += 1
            guard high - low > 1 else { continue }
            let middle = low + (high - low) / 2
            probes -= 1
            guard case .success(let rows) = readKeys(of: table, from: middle, ascending: true, limit: 1) else {
                pending += [(low, middle), (middle, high)]
                continue
            }
            guard let found = rows.first?.key, found < high else {
                // Nothing can be read from the middle to the gap's end.
                pending.append((low, middle))
                continue
            }
            let up = walk(table, from: found, ascending: true, before: high)
            let down = walk(table, from: found - 1, ascending: false, before: low)
            guard var run = up.run ?? down.run else { continue }
            if let below = down.run, up.run != nil { run.add(key: below.keys.lowerBound, last: below.lastID) }
            runs.append(run)
            // Where a read fails, the row of that key (if any) is on a damaged page.
            if let stop = down.stop { pending.append((low, stop)) }
            if let stop = up.stop { pending.append((stop, high)) }
        }
        return runs
    }

    /// The keys and last ids of up to `limit` rows of `table` from the key `from`, one way.
    private func readKeys(
        of table: KeyedTable, from: Int64, ascending: Bool, limit: Int
    ) -> Result<[(key: Int64, last: Int64)], any Error> {
        let (key, last, name) = (table.key, table.last, table.name)
        return Result {
            try damaged.read { db in
                try Row.fetchAll(
                    db,
                    sql: ascending
                        ? "SELECT \(key), \(last) FROM \(name) WHERE \(key) >= ? ORDER BY \(key) LIMIT ?"
                        : "SELECT \(key), \(last) FROM \(name) WHERE \(key) <= ? ORDER BY \(key) DESC LIMIT ?",
                    arguments: [from, limit]
                ).map { row in
                    let key: Int64 = row[0]
                    return (key, max(key, (row[1] as Int64?) ?? key))
                }
            }
        }
    }
}
