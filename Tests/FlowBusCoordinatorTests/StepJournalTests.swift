import FlowBusConfiguration
import Foundation
import TestFixtures
import Testing

@testable import FlowBusCoordinator
@testable import FlowBusWire

@Suite("flowd's journal")
struct StepJournalTests {
    @Test("The journal keeps entries in order with their params, and the last sequence per source")
    func journalRoundTrip() throws {
        let path = NSTemporaryDirectory() + "journal-\(UUID().uuidString).sqlite"
        defer {
            for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) }
        }
        let journal = try StepJournal.open(path: path, synchronous: .normal)
        try journal.append(
            [
                .init(
                    kind: .step, target: "load", name: "tick", params: Data(try FBV.encode(.map(["n": 1]))),
                    source: "s#1", sequence: 1),
                .init(kind: .deepLink, target: "", name: "home", params: Data(), source: "s#1", sequence: 2),
                .init(kind: .report, target: "home", name: "appeared", params: Data(), source: "r#1", sequence: 1),
            ], lastSequences: ["s#1": 3, "r#1": 1])
        try journal.append([], lastSequences: ["s#1": 2])
        journal.close()

        let reader = try StepJournal.open(readingAt: path)
        defer { reader.close() }
        let entries = try reader.entries()
        #expect(entries.map(\.kind) == [.step, .deepLink, .report])
        #expect(try entries[0].decodeParams() == ["n": 1])
        #expect(try entries[1].decodeParams().isEmpty)
        #expect(try reader.entries(after: entries[0].id, limit: 1).map(\.name) == ["home"])
        #expect(try reader.lastSequence(of: "s#1") == 3, "a last sequence never goes back")
        #expect(try reader.lastSequence(of: "r#1") == 1)
        #expect(try reader.lastSequence(of: "nobody") == nil)
    }

    @Test("persistence.journal is relative to the config file's directory")
    func journalPathInConfig() throws {
        let yaml = """
            endpoints: { ingress: "ipc:///tmp/i", events: "ipc:///tmp/e", control: "ipc:///tmp/c" }
            persistence: { journal: state/flowd.sqlite }
            """
        let config = try FlowBusConfig.parse(yaml: yaml, source: "/etc/flowbus/topology.yaml")
        #expect(config.persistence == .init(journal: "/etc/flowbus/state/flowd.sqlite", synchronous: .full))
        let none = try FlowBusConfig.parse(
            yaml: "endpoints: { ingress: \"ipc:///tmp/i\", events: \"ipc:///tmp/e\", control: \"ipc:///tmp/c\" }")
        #expect(none.persistence == nil)
    }
}

@Suite("flowd's journal: checkpoints and compaction")
struct JournalCompactionTests {
    static func tick(_ n: Int64) throws -> StepJournal.Record { try JournalFixture.tick(n) }

    static func withJournal(_ body: (String, StepJournal) throws -> Void) throws {
        try JournalFixture.withJournal(body)
    }

    @Test(
        "Compaction deletes the commits a checkpoint covers but for the newest `keepEntries`, a bounded number per commit; ids keep growing"
    )
    func compaction() throws {
        try Self.withJournal { _, journal in
            var last: Int64 = 0
            for commit in 0..<10 {
                let ticks = try (1...100).map { try Self.tick(Int64(commit * 100) + $0) }
                last = try journal.append(ticks, lastSequences: ["s#1": UInt64(commit * 100 + 100)]).last
            }
            #expect(last == 1000)
            try journal.store(.init(entry: 1000, created: Date(), state: Data("{}".utf8)))
            #expect(try journal.latestCheckpoint()?.entry == 1000)
            let keeping = StepJournal.Compaction(checkpointOf: 1000, keepEntries: 100, limit: 600)
            #expect(try journal.compact(keeping) == 600)
            #expect(try journal.compact(keeping) == 200, "fewer than the limit: done")
            #expect(
                try journal.entryRange() == 801...1000,
                "a commit holding one of the 100 entries before the covered one stays whole")

            try journal.store(.init(entry: 1000, created: Date(), state: Data("[]".utf8)))
            #expect(try journal.latestCheckpoint()?.state == Data("[]".utf8), "only the newest checkpoint is kept")
            let all = StepJournal.Compaction(checkpointOf: 1000, keepEntries: 0, limit: 10_000)
            let (next, compacted) = try journal.append([try Self.tick(1001)], lastSequences: [:], compaction: all)
            #expect(compacted == 100, "deleted in the same commit as the append")
            #expect(try journal.entryRange() == 901...1001, "the commit of the covered entry stays: ids go on after it")
            #expect(next == 1001)
            #expect(try journal.count(after: 1000) == 1)
            #expect(try journal.count(after: 950) == 51)
            #expect(try journal.lastSequence(of: "s#1") == 1000, "the sources survive compaction")
        }
    }

    @Test(
        "Entries a row each (earlier versions, salvaged ids, reserved ids) are read in order with commits, and compacted first"
    )
    func singleRowsAndCommits() throws {
        try Self.withJournal { _, journal in
            // A row each under given ids, as an earlier version or a salvage wrote them.
            try journal.append(StepJournal.Batch(try (1...3).map(Self.tick)), ids: [1, 2, 5], lastSequences: [:])
            let (last, _) = try journal.append(try (6...8).map(Self.tick), lastSequences: [:])
            #expect(last == 8, "a commit is numbered after the last row")
            try journal.reserveIDs(through: 20)
            let (next, _) = try journal.append([try Self.tick(9)], lastSequences: [:])
            #expect(next == 21, "numbered after a reserved id")
            #expect(try journal.entries().map(\.id) == [1, 2, 5, 6, 7, 8, 21], "a reserved id is not an entry")
            #expect(try journal.entries().map(\.sequence) == [1, 2, 3, 6, 7, 8, 9])
            #expect(try journal.entries(after: 2, limit: 3).map(\.id) == [5, 6, 7])
            #expect(try journal.count(after: 5) == 4, "6, 7, 8 and 21: a reserved id is not an entry")
            #expect(try journal.entryRange() == 1...21)
            #expect(try journal.compact(.init(below: 21, limit: 2)) == 2, "rows first")
            #expect(
                try journal.compact(.init(below: 21, limit: 10)) == 5,
                "the last row, the reserved one, and the commit 6...8")
            #expect(try journal.entries().map(\.id) == [21])
        }
    }

    @Test("synchronous: full syncs every commit (GRDB would leave WAL mode at NORMAL); normal is normal")
    func synchronousLevel() throws {
        for (synchronous, level) in [(StepJournal.Synchronous.full, 2), (.normal, 1)] {
            let path = NSTemporaryDirectory() + "journal-\(UUID().uuidString).sqlite"
            defer {
                for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) }
            }
            let journal = try StepJournal.open(path: path, synchronous: synchronous)
            defer { journal.close() }
            #expect(try journal.synchronousLevel() == level, "\(synchronous)")
        }
    }

    @Test("A new journal has 16 KB pages; an existing one keeps its own")
    func pageSize() throws {
        try Self.withJournal { path, journal in
            try journal.append(try (1...3).map(Self.tick), lastSequences: [:])
            #expect(try JournalFixture.pageSize(of: path) == 16384)
        }
        let path = NSTemporaryDirectory() + "journal-\(UUID().uuidString).sqlite"
        defer {
            for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) }
        }
        try JournalFixture.createSmallPaged(at: path)
        let journal = try StepJournal.open(path: path, synchronous: .normal)
        defer { journal.close() }
        try journal.append(try (1...3).map(Self.tick), lastSequences: [:])
        #expect(try journal.entries().map(\.sequence) == [1, 2, 3])
        #expect(try JournalFixture.pageSize(of: path) == 4096)
    }

    @Test("A journal of an earlier version is read as it is, read-only too; new commits follow its rows")
    func earlierJournal() throws {
        let path = NSTemporaryDirectory() + "journal-\(UUID().uuidString).sqlite"
        defer {
            for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) }
        }
        try JournalFixture.createEarlierJournal(at: path, ticks: 5)
        do {
            let reader = try StepJournal.open(readingAt: path)
            defer { reader.close() }
            #expect(try reader.entries().map(\.sequence) == [1, 2, 3, 4, 5])
            #expect(try reader.count() == 5)
            #expect(try reader.entryRange() == 1...5)
        }
        let journal = try StepJournal.open(path: path, synchronous: .normal)
        defer { journal.close() }
        let (last, _) = try journal.append(try (6...7).map(Self.tick), lastSequences: [:])
        #expect(last == 7)
        #expect(try journal.entries(after: 3, limit: 3).map(\.id) == [4, 5, 6])
        #expect(try journal.count(after: 4) == 3)
    }

    @Test("Reading and counting start at the commit holding the id asked for, not at the first commit")
    func readingFromTheMiddle() throws {
        try Self.withJournal { _, journal in
            for commit in Int64(0)..<50 {
                try journal.append(try (1...10).map { try Self.tick(commit * 10 + $0) }, lastSequences: [:])
            }
            #expect(try journal.entries(after: 245, limit: 7).map(\.id) == Array(246...252))
            #expect(try journal.entries(after: 250, limit: 1).map(\.id) == [251])
            #expect(try journal.entries(after: 500, limit: 10).isEmpty)
            #expect(try journal.count(after: 245) == 255)
            #expect(try journal.count(after: 250) == 250)
            #expect(try journal.count(after: 0) == 500)
            #expect(try journal.entryRange() == 1...500)
        }
    }

    @Test("A commit whose packed entries are damaged is refused with the file and the ids it holds")
    func damagedCommit() throws {
        try Self.withJournal { path, journal in
            try journal.append(try (1...3).map(Self.tick), lastSequences: [:])
            try JournalFixture.overwriteCommit(first: 1, with: Data([1, 0, 0]), in: path)
            #expect {
                try journal.entries()
            } throws: { error in
                guard case JournalError.damaged(let where_, let cause) = error else { return false }
                return where_ == path && cause.contains("1...3")
            }
        }
    }
}

@Suite("flowd's journal: a batch's entries packed in one value")
struct PackedEntriesTests {
    private static let batch = StepJournal.Batch([
        .init(kind: .step, target: "load", name: "tick", params: Data([1, 2, 3]), source: "s#1", sequence: 1 << 40),
        .init(kind: .deepLink, target: "", name: "home", params: Data(), source: "s#1", sequence: 2),
        .init(kind: .report, target: "é/🚀", name: "appeared", params: Data([0]), source: "r#1", sequence: 7),
    ])

    private static func packed() -> [UInt8] {
        StepJournal.PackedEntries.packed(batch)
    }

    private static func unpack(
        _ bytes: [UInt8], first: Int64 = 10, count: Int = 3, after: Int64 = 0
    ) throws
        -> [StepJournal.Entry]
    {
        var entries: [StepJournal.Entry] = []
        try bytes.withUnsafeBytes { raw in
            try StepJournal.PackedEntries.unpack(raw, first: first, count: count, after: after, into: &entries)
        }
        return entries
    }

    @Test("Entries come back whole, numbered from the row's first id, after the id asked for only")
    func roundTrip() throws {
        let entries = try Self.unpack(Self.packed())
        #expect(entries.map(\.id) == [10, 11, 12])
        #expect(entries.map(\.kind) == [.step, .deepLink, .report])
        #expect(entries.map(\.target) == ["load", "", "é/🚀"])
        #expect(entries.map(\.name) == ["tick", "home", "appeared"])
        #expect(entries.map(\.params) == [[1, 2, 3], [], [0]])
        #expect(entries.map(\.source) == ["s#1", "s#1", "r#1"])
        #expect(entries.map(\.sequence) == [1 << 40, 2, 7])
        #expect(try Self.unpack(Self.packed(), after: 11).map(\.id) == [12])
        #expect(try Self.unpack(Self.packed(), after: 12).isEmpty)
        #expect(Self.packed().first == 1, "the format's version comes first")
    }

    @Test("Damaged bytes are refused with what is wrong")
    func damaged() {
        let packed = Self.packed()
        let damages: [(bytes: [UInt8], reason: String)] = [
            (Array(packed.dropLast(3)), "ends in the middle of an entry"),
            ([2] + packed.dropFirst(), "it is of format 2; this flowd reads format 1"),
            (packed + [0, 0], "2 bytes follow its last entry"),
            ([], "ends in the middle of an entry"),
        ]
        for (bytes, reason) in damages {
            #expect {
                try Self.unpack(bytes)
            } throws: { error in
                "\(error)".contains(reason)
            }
        }
    }

    @Test("A row whose ids do not match its entries, or whose text is not UTF-8, is damaged")
    func mismatches() throws {
        #expect {
            try Self.unpack(Self.packed(), count: 4)
        } throws: { error in
            "\(error)" == "it holds 3 entries where its ids say 4"
        }
        var bytes = Self.packed()
        // The first entry's target ("load") starts after version, count, kind, sequence and its length.
        bytes[1 + 4 + 1 + 8 + 4] = 0xFF
        #expect {
            try Self.unpack(bytes)
        } throws: { error in
            "\(error)".contains("is not valid UTF-8")
        }
    }
}
