import FlowBusConfiguration
import FlowBusCoordinator
import FlowBusWire
import Foundation
import TestFixtures
import Testing

@testable import FlowBusTools

@Suite("Journal repair: check and salvage")
struct JournalRepairTests {
    static func tick(_ n: Int64) throws -> StepJournal.Record { try JournalFixture.tick(n) }

    static func withJournal(_ body: (String, StepJournal) throws -> Void) throws {
        try JournalFixture.withJournal(body)
    }

    @Test("Salvage copies the entries under their ids, and the checkpoint")
    func salvageKeepsCheckpoint() throws {
        try Self.withJournal { path, journal in
            for commit in 0..<5 {
                try journal.append(try (1...100).map { try Self.tick(Int64(commit * 100) + $0) }, lastSequences: [:])
            }
            try journal.append([], lastSequences: ["s#1": 500])
            try journal.store(.init(entry: 400, created: Date(), state: Data("{\"x\":1}".utf8)))
            // The commits before the one holding entry 400.
            #expect(try journal.compact(.init(checkpointOf: 400, keepEntries: 0, limit: 1000)) == 300)
            journal.close()
            let copy = NSTemporaryDirectory() + "salvaged-\(UUID().uuidString).sqlite"
            defer {
                for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: copy + suffix) }
            }
            let result = try JournalRepair.salvage(path: path, to: copy)
            #expect(result.entries == 200 && result.checkpoint == true && result.unreadable.isEmpty)
            #expect(result.sources == 1)
            let reader = try StepJournal.open(readingAt: copy)
            defer { reader.close() }
            #expect(try reader.entryRange() == 301...500)
            #expect(try reader.entries().map(\.sequence) == Array(301...500))
            #expect(try reader.latestCheckpoint()?.state == Data("{\"x\":1}".utf8))
            #expect(try JournalRepair.check(path: copy).checkpointEntry == 400)
        }
    }

    @Test("Check counts every entry; salvage copies the commits it can read and reports the ids of one it cannot")
    func salvageSkipsDamagedCommit() throws {
        try Self.withJournal { path, journal in
            for commit in 0..<3 {
                try journal.append(try (1...10).map { try Self.tick(Int64(commit * 10) + $0) }, lastSequences: [:])
            }
            #expect(try JournalRepair.check(path: path).entries == 30)
            try JournalFixture.overwriteCommit(first: 11, with: Data([1, 0, 0, 0, 10, 9]), in: path)
            journal.close()
            let check = try JournalRepair.check(path: path)
            #expect(!check.isIntact, "SQLite's own check does not read inside the packed value")
            #expect(check.problems.count == 1 && check.problems[0].contains("11...20"), "\(check.problems)")
            #expect(check.entries == 20, "the entries that can be read")
            let copy = NSTemporaryDirectory() + "salvaged-\(UUID().uuidString).sqlite"
            defer {
                for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: copy + suffix) }
            }
            let result = try JournalRepair.salvage(path: path, to: copy)
            #expect(result.entries == 20)
            #expect(result.unreadable == [11...20])
            let reader = try StepJournal.open(readingAt: copy)
            defer { reader.close() }
            #expect(try reader.entries().map(\.id) == Array(1...10) + Array(21...30), "under their ids")
            #expect(try reader.entries().map(\.sequence) == Array(1...10) + Array(21...30))
        }
    }

    @Test("Salvage numbers new entries after the checkpoint even when the entries it covers were all lost")
    func salvageReservesIDs() throws {
        try Self.withJournal { path, journal in
            try journal.append(try (1...500).map(Self.tick), lastSequences: ["s#1": 500])
            // A checkpoint beyond every readable entry (those after 500 unreadable, say).
            try journal.store(.init(entry: 700, created: Date(), state: Data("{}".utf8)))
            journal.close()
            let copy = NSTemporaryDirectory() + "salvaged-\(UUID().uuidString).sqlite"
            defer {
                for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: copy + suffix) }
            }
            _ = try JournalRepair.salvage(path: path, to: copy)
            let salvaged = try StepJournal.open(path: copy, synchronous: .normal)
            defer { salvaged.close() }
            let (next, _) = try salvaged.append([try Self.tick(501)], lastSequences: [:], compaction: nil)
            #expect(next == 701, "numbered after the checkpoint's entry, so a restart replays it")
            #expect(try salvaged.entries(after: 0, limit: 1000).count == 501, "the placeholder is not an entry")
        }
    }

    /// A journal of `commits` commits of one entry each, sources and a checkpoint at entry 100,
    /// the leaves of whose table of commits at `positions` are then damaged; salvaged.
    /// - Returns: what salvage said, the ids it copied, and the ids of the commits damaged.
    static func salvage(
        commits: Int64 = 1200, damagingLeaves positions: [Int], records: [Int64] = [], gapProbes: Int = 4096
    ) throws -> (result: JournalRepair.Salvage, ids: [Int64], damaged: [ClosedRange<Int64>]) {
        var outcome: (JournalRepair.Salvage, [Int64], [ClosedRange<Int64>])?
        try withJournal { path, journal in
            for n in 1...commits { try journal.append([try tick(n)], lastSequences: [:]) }
            try journal.append([], lastSequences: ["s#1": UInt64(commits)])
            try journal.store(.init(entry: 100, created: Date(), state: Data("{\"x\":1}".utf8)))
            journal.close()
            // Records first: a damaged leaf would stop the fixture's own reads.
            for first in records { try JournalFixture.damageCommitRecord(first: first, in: path) }
            let damaged = try JournalFixture.damageCommitLeaves(positions, in: path)
            let (result, ids) = try salvaged(path, gapProbes: gapProbes) { (reader: StepJournal) throws in
                #expect(try reader.latestCheckpoint()?.entry == 100)
            }
            #expect(result.sources == 1 && result.checkpoint == true)
            outcome = (result, ids, damaged)
        }
        return try #require(outcome)
    }

    /// Salvages the damaged journal at `path` into a new file, removed after; `inspect` reads it.
    /// - Returns: what salvage said and the ids it copied.
    static func salvaged(
        _ path: String, gapProbes: Int = 4096, inspect: (StepJournal) throws -> Void = { _ in }
    ) throws -> (result: JournalRepair.Salvage, ids: [Int64]) {
        #expect(try JournalRepair.check(path: path).isIntact == false)
        // Damage here spans a few thousand ids: searched id by id within 4096 reads.
        return try withSalvagedCopy(of: path, gapProbes: gapProbes) { result, salvaged in
            try inspect(salvaged)
            let ids = try salvaged.entries().map(\.id)
            #expect(ids.count == result.entries)
            return (result, ids)
        }
    }

    /// Salvages the journal at `path` into a new file, opened for `body` and removed after.
    static func withSalvagedCopy<Result>(
        of path: String, gapProbes: Int = 4096, _ body: (JournalRepair.Salvage, StepJournal) throws -> Result
    ) throws -> Result {
        let copy = NSTemporaryDirectory() + "salvaged-\(UUID().uuidString).sqlite"
        defer {
            for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: copy + suffix) }
        }
        let result = try JournalRepair.salvage(path: path, to: copy, gapProbes: gapProbes)
        let salvaged = try StepJournal.open(path: copy, synchronous: .normal)
        defer { salvaged.close() }
        return try body(result, salvaged)
    }

    @Test("The commits' last page damaged: salvage copies every commit before it and reports every id after lost")
    func salvageWithDamagedLastPage() throws {
        let (result, ids, damaged) = try Self.salvage(damagingLeaves: [-1])
        #expect(damaged[0].upperBound == 1200)
        #expect(ids == Array(1..<damaged[0].lowerBound))
        #expect(result.unreadable == [damaged[0].lowerBound...Int64.max])
    }

    @Test(
        "The commits' end lost: the salvaged journal numbers new entries past every id the damaged file could hold, and past its checkpoint's",
        arguments: [nil, 1_000_000_000] as [Int64?])
    func salvageNumbersPastLostEnd(checkpoint: Int64?) throws {
        try Self.withJournal { path, journal in
            for n in Int64(1)...1200 { try journal.append([try Self.tick(n)], lastSequences: [:]) }
            if let checkpoint {
                try journal.store(.init(entry: checkpoint, created: Date(), state: Data("{\"x\":1}".utf8)))
            }
            journal.close()
            let damaged = try JournalFixture.damageCommitLeaves([-1], in: path)
            try Self.withSalvagedCopy(of: path) { result, salvaged in
                #expect(result.unreadable == [damaged[0].lowerBound...Int64.max])
                let numberedAfter = try #require(result.numberedAfter)
                #expect(numberedAfter >= max(1200, checkpoint ?? 0), "past the last id the damaged file held")
                if let checkpoint {
                    #expect(numberedAfter == checkpoint, "the checkpoint's reservation reaches farther")
                }
                let (next, _) = try salvaged.append([try Self.tick(1201)], lastSequences: [:], compaction: nil)
                #expect(next == numberedAfter + 1)
                #expect(
                    try salvaged.entries(after: 0, limit: 2000).map(\.id) == Array(1..<damaged[0].lowerBound) + [next])
            }
        }
    }

    @Test(
        "A journal salvaged before, numbered past a lost end and damaged again in the middle: salvage keeps that numbering, noted by a version before the table of reservations too",
        arguments: [false, true])
    func salvageKeepsEarlierReservation(onlyAsRow: Bool) throws {
        try Self.withJournal { path, journal in
            try journal.append(
                StepJournal.Batch(try (1...3000).map(Self.tick)), ids: Array(1...3000), lastSequences: [:])
            try journal.reserveIDs(through: 1_000_000)
            journal.close()
            if onlyAsRow { try JournalFixture.removeReservations(in: path) }
            let damaged = try JournalFixture.damageEntryRowLeaves([2], in: path)
            let (result, ids) = try Self.salvaged(path) { (reader: StepJournal) throws in
                #expect(try reader.reservations() == [1_000_000])
                #expect(try reader.entryRange()?.upperBound == 1_000_000, "new entries numbered past it")
            }
            let lost = Set(damaged.flatMap { Array($0) })
            #expect(ids == (1...3000).filter { !lost.contains($0) })
            #expect(result.unreadable == damaged && result.numberedAfter == nil)
        }
    }

    @Test("A journal of a version before the table of reservations gets its reserved ids' rows there when opened")
    func reservationsFromEarlierVersionRows() throws {
        try Self.withJournal { path, journal in
            try journal.append([try Self.tick(1)], lastSequences: [:])
            try journal.reserveIDs(through: 1_000)
            journal.close()
            try JournalFixture.removeReservations(in: path)
            let reopened = try StepJournal.open(path: path, synchronous: .normal)
            defer { reopened.close() }
            #expect(try reopened.reservations() == [1_000])
        }
    }

    @Test(
        "Both tables lost in a journal salvaged before: new entries are numbered past the ids after the earlier salvage's reservation, or past half the ids when it cannot be read",
        arguments: [false, true])
    func salvageNumbersPastEarlierReservation(damagingReservations: Bool) throws {
        try Self.withJournal { path, journal in
            // Salvaged before: rows, then numbering past a lost end at 1,000,000, then commits.
            try journal.append(
                StepJournal.Batch(try (1...20).map(Self.tick)), ids: Array(1...20), lastSequences: [:])
            try journal.reserveIDs(through: 1_000_000)
            for n in Int64(1_000_001)...1_000_100 { try journal.append([try Self.tick(n)], lastSequences: [:]) }
            #expect(try journal.reservations() == [1_000_000])
            journal.close()
            // Each table one page: the rows with the reservation's, and every commit after it.
            #expect(try JournalFixture.damageEntryRowLeaves([0], in: path) == [1...1_000_000])
            #expect(try JournalFixture.damageCommitLeaves([0], in: path) == [1_000_001...1_000_100])
            if damagingReservations { try JournalFixture.damageReservationLeaves([0], in: path) }
            try Self.withSalvagedCopy(of: path) { result, salvaged in
                #expect(result.entries == 0 && result.unreadable == [1...Int64.max])
                let numberedAfter = try #require(result.numberedAfter)
                if damagingReservations {
                    #expect(numberedAfter == .max / 2)
                } else {
                    #expect(numberedAfter >= 1_000_100, "past every id numbered after the reservation")
                    #expect(numberedAfter < 2_000_000, "counted from the reservation, not from half the ids")
                }
                #expect(try salvaged.reservations() == (damagingReservations ? [] : [1_000_000]) + [numberedAfter])
                let (next, _) = try salvaged.append([try Self.tick(1)], lastSequences: [:], compaction: nil)
                #expect(next == numberedAfter + 1)
            }
        }
    }

    @Test("The commits' first page damaged: salvage copies every commit after it and reports the ids before it")
    func salvageWithDamagedFirstPage() throws {
        let (result, ids, damaged) = try Self.salvage(damagingLeaves: [0])
        #expect(damaged[0].lowerBound == 1 && damaged[0].upperBound > 100)
        #expect(ids == Array((damaged[0].upperBound + 1)...1200))
        #expect(result.unreadable == [101...damaged[0].upperBound], "from after the checkpoint's entry")
    }

    @Test("A damaged page in the middle and the last: salvage reads past the first and reports both")
    func salvageWithDamagedMiddleAndLastPages() throws {
        let (result, ids, damaged) = try Self.salvage(damagingLeaves: [2, -1])
        let (middle, last) = (damaged[0], damaged[1])
        #expect(middle.lowerBound > 1 && middle.upperBound + 1 < last.lowerBound)
        #expect(ids == Array(1..<middle.lowerBound) + Array((middle.upperBound + 1)..<last.lowerBound))
        #expect(result.unreadable == [middle, last.lowerBound...Int64.max])
    }

    /// Damaged stretches of leaves with readable leaves between them, one or two wide, so that
    /// probes ever farther past the first stretch can land beyond the readable leaves.
    static let damagedStretches: [[Int]] = [
        [2, 3, 5, 6, 7, 8, 9], [2, 4, 5, 6, 7, 8], [2, 3, 4, 6, 7, 8, 9, 10], [2, 3, 5, 6, 8, 9, 10, 11],
    ]

    @Test(
        "Several damaged stretches and the last page: salvage copies every commit it can read between them",
        arguments: damagedStretches)
    func salvageBetweenDamagedStretchesGoingUp(_ stretches: [Int]) throws {
        let (result, ids, damaged) = try Self.salvage(commits: 3000, damagingLeaves: stretches + [-1])
        let last = damaged[damaged.count - 1]
        let lost = damaged.dropLast().map { Set($0) }.reduce(Set<Int64>()) { $0.union($1) }
        #expect(ids == (1..<last.lowerBound).filter { !lost.contains($0) })
        #expect(result.unreadable == Self.merged(damaged.dropLast() + [last.lowerBound...Int64.max]))
    }

    @Test("Few reads to search past damage: every gap between probes gets some, the far ones too")
    func salvageWithFewGapProbes() throws {
        let (result, ids, damaged) = try Self.salvage(
            commits: 3000, damagingLeaves: [2, 3, 4, 6, 7, 8, 9, 10, -1], gapProbes: 500)
        let last = damaged[damaged.count - 1]
        let lost = Set(damaged.dropLast().flatMap { Array($0) })
        #expect(ids == (1..<last.lowerBound).filter { !lost.contains($0) }, "the readable leaves 700 and 2,100 ids in")
        #expect(result.unreadable == Self.merged(damaged.dropLast() + [last.lowerBound...Int64.max]))
    }

    @Test("The oldest commit's row damaged and the last page: salvage walks up from past it and reports it lost")
    func salvageWithDamagedFirstRecord() throws {
        let (result, ids, damaged) = try Self.salvage(damagingLeaves: [-1], records: [1])
        #expect(ids == Array(2..<damaged[0].lowerBound))
        #expect(result.unreadable == [1...1, damaged[0].lowerBound...Int64.max])
    }

    @Test("The newest commit's row damaged and the first page: salvage walks down from past it and reports it lost")
    func salvageWithDamagedLastRecord() throws {
        let (result, ids, damaged) = try Self.salvage(damagingLeaves: [0], records: [1200])
        #expect(ids == Array((damaged[0].upperBound + 1)..<1200))
        #expect(result.unreadable == [101...damaged[0].upperBound, 1200...Int64.max], "where its ids end is not known")
    }

    @Test(
        "The first page and several damaged stretches: salvage walks down and copies every commit it can read between them",
        arguments: damagedStretches)
    func salvageBetweenDamagedStretchesGoingDown(_ stretches: [Int]) throws {
        let (result, ids, damaged) = try Self.salvage(commits: 3000, damagingLeaves: [0] + stretches.map { -1 - $0 })
        let first = damaged[0]
        let lost = damaged.dropFirst().map { Set($0) }.reduce(Set<Int64>()) { $0.union($1) }
        #expect(ids == ((first.upperBound + 1)...3000).filter { !lost.contains($0) })
        #expect(result.unreadable == Self.merged([101...first.upperBound] + damaged.dropFirst()))
    }

    /// A journal salvaged before (a row per entry: `rows` of them) with `commits` commits of one
    /// entry after, the leaves of whose table of rows at `positions` are then damaged; salvaged.
    /// - Returns: what salvage said, the ids it copied, and the ids of the rows damaged.
    static func salvage(
        rows: Int64, commits: Int64, damagingRowLeaves positions: [Int]
    ) throws -> (result: JournalRepair.Salvage, ids: [Int64], damaged: [ClosedRange<Int64>]) {
        var outcome: (JournalRepair.Salvage, [Int64], [ClosedRange<Int64>])?
        try withJournal { path, journal in
            try journal.append(
                StepJournal.Batch(try (1...rows).map(Self.tick)), ids: Array(1...rows), lastSequences: [:])
            for n in (rows + 1)..<(rows + 1 + commits) { try journal.append([try tick(n)], lastSequences: [:]) }
            journal.close()
            let damaged = try JournalFixture.damageEntryRowLeaves(positions, in: path)
            let (result, ids) = try salvaged(path)
            outcome = (result, ids, damaged)
        }
        return try #require(outcome)
    }

    @Test("Rows of a journal salvaged before, damaged in the middle: salvage copies the others and reports those")
    func salvageRowsWithDamagedMiddlePages() throws {
        let (result, ids, damaged) = try Self.salvage(rows: 3000, commits: 100, damagingRowLeaves: [2, 5])
        let lost = Set(damaged.flatMap { Array($0) })
        #expect(ids == (1...3100).filter { !lost.contains($0) })
        #expect(result.unreadable == damaged)
        #expect(result.numberedAfter == nil)
    }

    @Test(
        "Rows of a journal salvaged before, their last page damaged: salvage walks them from the first, copies the commits after, and reports only the rows it could not read"
    )
    func salvageRowsWithDamagedLastPage() throws {
        let (result, ids, damaged) = try Self.salvage(rows: 3000, commits: 100, damagingRowLeaves: [3, -1])
        let (middle, last) = (damaged[0], damaged[1])
        #expect(last.upperBound == 3000)
        let lost = Set(Array(middle) + Array(last))
        #expect(ids == (1...3100).filter { !lost.contains($0) })
        #expect(result.unreadable == [middle, last], "not past the rows: the commits follow them")
        #expect(result.numberedAfter == nil)
    }

    @Test(
        "Rows of a journal salvaged before, their first page damaged: salvage walks them from the last and reports the first"
    )
    func salvageRowsWithDamagedFirstPage() throws {
        let (result, ids, damaged) = try Self.salvage(rows: 3000, commits: 100, damagingRowLeaves: [0, 4, 5])
        #expect(damaged[0].lowerBound == 1)
        let lost = Set(damaged.flatMap { Array($0) })
        #expect(ids == (1...3100).filter { !lost.contains($0) })
        #expect(result.unreadable == Self.merged(damaged))
    }

    @Test("Rows of a journal salvaged before that can be read at neither end: salvage copies the commits after them")
    func salvageUnreadableRows() throws {
        // Few rows: one page holds them all.
        let (result, ids, damaged) = try Self.salvage(rows: 20, commits: 100, damagingRowLeaves: [0])
        #expect(damaged == [1...20])
        #expect(ids == Array(21...120))
        #expect(result.unreadable == [1...20], "up to the first commit")
        #expect(result.numberedAfter == nil)
    }

    @Test("Ids lost are those unreadable that were not copied from the other table")
    func lostIDsLeaveOutThoseCopied() {
        let subtracting = JournalSalvager.subtracting
        #expect(subtracting([1...10, 21...30], [11...20]) == [11...20])
        #expect(subtracting([10...20, 50...60], [1...100]) == [1...9, 21...49, 61...100])
        #expect(subtracting([1...10, 20...30], [5...Int64.max]) == [11...19, 31...Int64.max])
        #expect(subtracting([1...7, 6...9], [5...15]) == [10...15], "overlapping copies")
        #expect(subtracting([1...10], [1...10]).isEmpty)
        #expect(subtracting([], [3...4, 4...8]) == [3...8])
        #expect(subtracting([0...Int64.max], [1...5]).isEmpty)
    }

    /// Ranges of ids sorted, those that touch joined.
    static func merged(_ ranges: some Collection<ClosedRange<Int64>>) -> [ClosedRange<Int64>] {
        var merged: [ClosedRange<Int64>] = []
        for range in ranges.sorted(by: { $0.lowerBound < $1.lowerBound }) {
            if let last = merged.last, last.upperBound >= range.lowerBound - 1 {
                merged[merged.count - 1] = last.lowerBound...max(last.upperBound, range.upperBound)
            } else {
                merged.append(range)
            }
        }
        return merged
    }

    @Test("A table of commits that can be read at neither end: salvage still keeps the sources and the checkpoint")
    func salvageWithUnreadableCommits() throws {
        // Few commits: one page holds all their ids, the first and the last.
        let (result, ids, damaged) = try Self.salvage(commits: 20, damagingLeaves: [0])
        #expect(damaged == [1...20])
        #expect(result.entries == 0 && ids.isEmpty)
        #expect(result.unreadable == [101...Int64.max])
        #expect(result.numberedAfter.map { $0 >= 20 } == true)
    }
}
