#if PostgreSQL
import FlowBusClient
import FlowBusConfiguration
import FlowBusCoordinator
import FlowBusPostgres
import FlowBusProtocol
import FlowBusTesting
import FlowBusWire
import Foundation
import Logging
import Synchronization
import Testing

/// The journal backends, each opened empty.
enum Backend: String, CaseIterable, CustomTestStringConvertible {
    case sqlite, postgres

    var testDescription: String { rawValue }

    /// An empty journal, and what stops its server.
    func open() async throws -> (any Journal, stop: @Sendable () -> Void) {
        switch self {
        case .sqlite:
            let path = NSTemporaryDirectory() + "journal-\(UUID().uuidString).sqlite"
            return (try StepJournal.open(path: path, synchronous: .normal), {})
        case .postgres:
            let server = try PostgresServer()
            let journal = try await PostgresJournal.connect(url: server.url, logger: Logger(label: "test"))
            try await journal.acquireLease(instance: "test#1") { _ in }
            return (journal, { server.stop() })
        }
    }
}

func tick(_ n: Int64, source: String = "s#1") throws -> StepJournal.Record {
    .init(
        kind: .step, target: "load", name: "tick", params: Data(try FBV.encode(.map(["n": .int(n)]))), source: source,
        sequence: UInt64(n))
}

/// Both backends pass the same tests: flowd relies on nothing one has and the other lacks.
@Suite("Journal backends behave alike", .serialized)
struct JournalBackendTests {
    @Test(
        "Entries keep their order, kinds and params; a source's last sequence never goes back",
        arguments: Backend.allCases)
    func entriesAndSources(_ backend: Backend) async throws {
        let (journal, stop) = try await backend.open()
        defer {
            journal.close()
            stop()
        }
        let (last, _) = try journal.append(
            [
                try tick(1),
                .init(kind: .deepLink, target: "", name: "home", params: Data(), source: "s#1", sequence: 2),
                .init(kind: .report, target: "home", name: "appeared", params: Data(), source: "r#1", sequence: 1),
            ], lastSequences: ["s#1": 3, "r#1": 1], compaction: nil)
        _ = try journal.append([], lastSequences: ["s#1": 2], compaction: nil)
        let entries = try journal.entries(after: 0, limit: 10)
        #expect(entries.map(\.kind) == [.step, .deepLink, .report])
        #expect(entries.last?.id == last)
        #expect(try entries[0].decodeParams() == ["n": 1])
        #expect(try journal.entries(after: entries[0].id, limit: 1).map(\.name) == ["home"])
        #expect(try journal.lastSequence(of: "s#1") == 3, "a last sequence never goes back")
        #expect(try journal.lastSequence(of: "r#1") == 1)
        #expect(try journal.lastSequence(of: "nobody") == nil)
        #expect(try journal.count(after: 0) == 3)
        #expect(try journal.entryRange() == entries[0].id...last)

        // Ids are any UTF-8 the wire accepts (not NUL: PROTOCOL.md §3.4).
        let odd = "odd id/é/🚀"
        _ = try journal.append(
            [.init(kind: .step, target: odd, name: "tick", params: Data(), source: odd, sequence: 1)],
            lastSequences: [odd: 1], compaction: nil)
        #expect(try journal.entries(after: last, limit: 10).map(\.target) == [odd])
        #expect(try journal.lastSequence(of: odd) == 1)
    }

    @Test(
        "Checkpoints: only the newest is kept; compaction is bounded per call and keeps ids growing",
        arguments: Backend.allCases)
    func checkpointsAndCompaction(_ backend: Backend) async throws {
        let (journal, stop) = try await backend.open()
        defer {
            journal.close()
            stop()
        }
        #expect(try journal.latestCheckpoint() == nil)
        // Ten commits of 100: PostgreSQL compacts a commit's entries together.
        var last: Int64 = 0
        for commit in Int64(0)..<10 {
            last = try journal.append(
                try (1...100).map { try tick(commit * 100 + $0) }, lastSequences: ["s#1": UInt64(commit * 100 + 100)],
                compaction: nil
            ).last
        }
        let first = try #require(try journal.entryRange()).lowerBound
        #expect(last == first + 999)
        try journal.store(.init(entry: last, created: Date(), state: Data("{}".utf8)))
        try journal.store(.init(entry: last, created: Date(), state: Data("[]".utf8)))
        #expect(try journal.latestCheckpoint()?.state == Data("[]".utf8))
        let compaction = StepJournal.Compaction(checkpointOf: last, keepEntries: 99, limit: 600)
        #expect(try journal.compact(compaction) == 600)
        #expect(try journal.compact(compaction) == 300)
        #expect(try journal.compact(compaction) == 0)
        #expect(try journal.entryRange() == (first + 900)...last)
        #expect(try journal.count(after: 0) == 100)
        let (next, compacted) = try journal.append(
            [try tick(1001)], lastSequences: [:], compaction: .init(below: last + 1, limit: 1000))
        #expect(compacted == 100 && next > last)
        #expect(try journal.count(after: last) == 1)
        #expect(try journal.entries(after: 0, limit: 10).map(\.id) == [next])
    }

    @Test(
        "Events trimmed by age keep the newest batch, whatever its age: the next instance numbers its events after it",
        arguments: Backend.allCases)
    func eventsTrimmedByAgeKeepTheNewest(_ backend: Backend) async throws {
        let (journal, stop) = try await backend.open()
        defer {
            journal.close()
            stop()
        }
        func events(_ first: UInt64, _ last: UInt64, created: Double) -> JournalEvents {
            var packed = PackedEvents()
            for sequence in first...last {
                packed.append(sequence: sequence, frames: FrameBuffer(frames: [Array("hb/x".utf8)]))
            }
            return JournalEvents(
                batch: EventBatch(first: first, last: last, created: created, events: packed), keepFrom: 0)
        }
        _ = try journal.append(
            StepJournal.Batch([try tick(1)]), events: events(1, 3, created: 100), lastSequences: [:], compaction: nil)
        _ = try journal.append(
            StepJournal.Batch([try tick(2)]), events: events(4, 5, created: 200), lastSequences: [:], compaction: nil)
        #expect(try journal.trimEvents(committedBefore: 150) == 1)
        #expect(try journal.eventRange() == 4...5)
        #expect(try journal.trimEvents(committedBefore: 1_000) == 0, "the newest batch stays")
        #expect(try journal.eventRange() == 4...5)
    }

    @Test("Compaction keeps every entry from its bound on", arguments: Backend.allCases)
    func compactionKeepsWhatItMust(_ backend: Backend) async throws {
        let (journal, stop) = try await backend.open()
        defer {
            journal.close()
            stop()
        }
        let last = try journal.append(try (1...10).map { try tick($0) }, lastSequences: [:]).last
        _ = try journal.append(try (11...20).map { try tick($0) }, lastSequences: [:])
        // A bound inside the first commit: the commit stays whole, with every entry from the bound on.
        let deleted = try journal.compact(.init(below: last - 4, limit: 100))
        #expect(deleted == 0)
        let kept = try journal.entries(after: 0, limit: 100).map(\.sequence)
        #expect(Array(kept.suffix(15)) == Array(6...20))
    }
}

/// How PostgreSQL keeps entries: a row per commit, after any a row each of earlier versions.
@Suite("PostgreSQL journal storage", .serialized)
struct PostgresJournalStorageTests {
    /// Runs `body` with a journal holding its lease on a server of its own, which `body` may
    /// also change behind the journal's back.
    private func withJournal(_ body: (PostgresServer, PostgresJournal) throws -> Void) async throws {
        let server = try PostgresServer()
        defer { server.stop() }
        let journal = try await PostgresJournal.connect(url: server.url, logger: Logger(label: "test"))
        defer { journal.close() }
        try await journal.acquireLease(instance: "test#1") { _ in }
        try body(server, journal)
    }

    @Test("Entries of earlier versions, a row each, are read and compacted; new commits follow them")
    func earlierRows() async throws {
        try await withJournal { server, journal in
            try server.execute(
                """
                INSERT INTO flowbus_entry (kind, target, name, params, source, sequence) VALUES
                    (1, 'load'::bytea, 'tick'::bytea, ''::bytea, 's#1'::bytea, 1),
                    (2, ''::bytea, 'home'::bytea, ''::bytea, 's#1'::bytea, 2),
                    (15, 'home'::bytea, 'appeared'::bytea, ''::bytea, 'r#1'::bytea, 1)
                """)
            let (last, _) = try journal.append(try [tick(3), tick(4)], lastSequences: ["s#1": 4])
            #expect(last == 5)
            let entries = try journal.entries(after: 0, limit: 10)
            #expect(entries.map(\.id) == [1, 2, 3, 4, 5])
            #expect(entries.map(\.kind) == [.step, .deepLink, .report, .step, .step])
            #expect(entries.map(\.name) == ["tick", "home", "appeared", "tick", "tick"])
            #expect(try entries[3].decodeParams() == ["n": 3])
            #expect(try journal.entries(after: 0, limit: 2).map(\.id) == [1, 2])
            #expect(try journal.entries(after: 2, limit: 2).map(\.id) == [3, 4])
            #expect(try journal.entries(after: 4, limit: 2).map(\.id) == [5])
            #expect(try journal.count(after: 2) == 3)
            #expect(try journal.count(after: 4) == 1)
            #expect(try journal.entryRange() == 1...5)
            #expect(try journal.compact(.init(below: 5, limit: 10)) == 3)
            #expect(try journal.entryRange() == 4...5)
        }
    }

    @Test("Commits and their events are stored uncompressed, also in a database an earlier version made")
    func uncompressed() async throws {
        let server = try PostgresServer()
        defer { server.stop() }
        // The events table as earlier versions made it: PostgreSQL compresses a large value by default.
        try server.execute(
            """
            CREATE TABLE flowbus_event (
                first BIGINT PRIMARY KEY, last BIGINT NOT NULL, created DOUBLE PRECISION NOT NULL, events BYTEA NOT NULL)
            """)
        let storage = """
            DO $$ BEGIN
                IF (SELECT attstorage FROM pg_attribute
                    WHERE attrelid = 'flowbus_event'::regclass AND attname = 'events') <> 'e' THEN
                    RAISE EXCEPTION 'flowbus_event.events is compressed';
                END IF;
            END $$
            """
        #expect(throws: (any Error).self, "the check fails on a compressed column") { try server.execute(storage) }
        let journal = try await PostgresJournal.connect(url: server.url, logger: Logger(label: "test"))
        defer { journal.close() }
        try server.execute(storage)
        try server.execute(
            storage.replacingOccurrences(of: "flowbus_event", with: "flowbus_batch")
                .replacingOccurrences(of: "'events'", with: "'entries'"))
    }

    @Test("A damaged commit row is refused with the ids it holds and what is wrong")
    func damagedRow() async throws {
        try await withJournal { server, journal in
            _ = try journal.append(try [tick(1), tick(2)], lastSequences: ["s#1": 2])
            _ = try journal.append(try [tick(3)], lastSequences: ["s#1": 3])
            try server.execute("UPDATE flowbus_batch SET entries = '\\x0200000002'::bytea WHERE first = 1")
            #expect(try journal.entries(after: 2, limit: 10).map(\.sequence) == [3], "the damaged row is not read")
            #expect {
                try journal.entries(after: 0, limit: 10)
            } throws: { error in
                let error = error as? PostgresJournalError
                return error?.code == .damaged && error?.description.contains("entries 1...2") == true
                    && error?.description.contains("format 2") == true
            }
        }
    }
}

@Suite("PostgreSQL journal lease", .serialized)
struct PostgresLeaseTests {
    @Test("Only one instance holds the lease; the other takes it once the holder's session ends")
    func lease() async throws {
        let server = try PostgresServer()
        defer { server.stop() }
        let url = server.url
        let first = try await PostgresJournal.connect(url: url, logger: Logger(label: "a"))
        try await first.acquireLease(instance: "a#1") { _ in }
        let second = try await PostgresJournal.connect(url: url, logger: Logger(label: "b"))
        let waited = Mutex<String?>(nil)
        let taking = Task {
            try await second.acquireLease(instance: "b#1") { holder in waited.withLock { $0 = holder } }
        }
        try await Task.sleep(for: .milliseconds(500))
        #expect(waited.withLock { $0 }?.contains("a#1") == true, "the standby names the holder")
        first.close()
        try await taking.value
        #expect(try second.leaseHistory(limit: 10).map(\.instance) == ["b#1", "a#1"])
        #expect(throws: Never.self) { try second.verifyLease() }
        #expect(throws: (any Error).self) { try first.verifyLease() }
        second.close()
    }

    @Test("A holder whose session stops answering is told at once, and its lease checks fail from then on")
    func leaseLost() async throws {
        let server = try PostgresServer()
        defer { server.stop() }
        let holder = try await PostgresJournal.connect(
            url: server.url, lease: LeaseTimings(keepAliveMs: 50, timeoutMs: 300), logger: Logger(label: "a"))
        defer { holder.close() }
        try await holder.acquireLease(instance: "a#1") { _ in }
        let (lost, told) = AsyncStream.makeStream(of: String.self)
        holder.whenLeaseLost { reason in told.yield(reason) }
        try await Task.sleep(for: .milliseconds(300))
        #expect(throws: Never.self) { try holder.checkLease() }
        server.stop()
        // Told by the keep-alive itself, with no statement of flowd's to fail first.
        var reasons = lost.makeAsyncIterator()
        let reason = await reasons.next()
        #expect(reason?.contains("keep-alive failed") == true, "\(reason ?? "none")")
        #expect {
            try holder.checkLease()
        } throws: { error in
            (error as? PostgresJournalError)?.code == .connectionLost
        }
    }
}
#endif
