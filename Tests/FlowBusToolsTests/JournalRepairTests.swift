import FlowBusConfiguration
import FlowBusCoordinator
import FlowBusTools
import FlowBusWire
import Foundation
import TestFixtures
import Testing

@Suite("Journal repair: check and salvage")
struct JournalRepairTests {
    static func tick(_ n: Int64) throws -> StepJournal.Record { try JournalFixture.tick(n) }

    static func withJournal(_ body: (String, StepJournal) throws -> Void) throws {
        try JournalFixture.withJournal(body)
    }

    @Test("Salvage copies the entries under their ids, and the checkpoint")
    func salvageKeepsCheckpoint() throws {
        try Self.withJournal { path, journal in
            try journal.append(try (1...500).map(Self.tick), lastSequences: ["s#1": 500])
            try journal.store(.init(entry: 400, created: Date(), state: Data("{\"x\":1}".utf8)))
            _ = try journal.compact(.init(checkpointOf: 400, keepEntries: 0, limit: 1000))
            journal.close()
            let copy = NSTemporaryDirectory() + "salvaged-\(UUID().uuidString).sqlite"
            defer {
                for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: copy + suffix) }
            }
            let result = try JournalRepair.salvage(path: path, to: copy)
            #expect(result.entries == 101 && result.checkpoint == true && result.unreadable.isEmpty)
            let reader = try StepJournal.open(readingAt: copy)
            defer { reader.close() }
            #expect(try reader.entryRange() == 400...500)
            #expect(try reader.latestCheckpoint()?.state == Data("{\"x\":1}".utf8))
            #expect(try JournalRepair.check(path: copy).checkpointEntry == 400)
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
}
