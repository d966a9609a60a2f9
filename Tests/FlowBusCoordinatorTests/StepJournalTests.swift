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
        "Compaction deletes what a checkpoint covers but the newest `keepEntries`, a bounded number per commit; ids keep growing"
    )
    func compaction() throws {
        try Self.withJournal { _, journal in
            let (last, _) = try journal.append(try (1...1000).map(Self.tick), lastSequences: ["s#1": 1000])
            #expect(last == 1000)
            try journal.store(.init(entry: 1000, created: Date(), state: Data("{}".utf8)))
            #expect(try journal.latestCheckpoint()?.entry == 1000)
            let keeping = StepJournal.Compaction(checkpointOf: 1000, keepEntries: 100, limit: 600)
            #expect(try journal.compact(keeping) == 600)
            #expect(try journal.compact(keeping) == 299, "fewer than the limit: done")
            #expect(try journal.entryRange() == 900...1000, "the 100 entries before the covered one, and that one")

            try journal.store(.init(entry: 1000, created: Date(), state: Data("[]".utf8)))
            #expect(try journal.latestCheckpoint()?.state == Data("[]".utf8), "only the newest checkpoint is kept")
            let all = StepJournal.Compaction(checkpointOf: 1000, keepEntries: 0, limit: 10_000)
            let (next, compacted) = try journal.append([try Self.tick(1001)], lastSequences: [:], compaction: all)
            #expect(compacted == 100, "deleted in the same commit as the append")
            #expect(try journal.entryRange() == 1000...1001, "the last covered entry stays: SQLite numbers after it")
            #expect(next == 1001)
            #expect(try journal.count(after: 1000) == 1)
            #expect(try journal.lastSequence(of: "s#1") == 1000, "the sources survive compaction")
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
