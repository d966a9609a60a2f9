#if PostgreSQL
import FlowBusClient
import FlowBusConfiguration
import FlowBusCoordinator
import FlowBusPostgres
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
        let (last, _) = try journal.append(
            try (1...1000).map { try tick($0) }, lastSequences: ["s#1": 1000], compaction: nil)
        let first = try #require(try journal.entryRange()).lowerBound
        try journal.store(.init(entry: last, created: Date(), state: Data("{}".utf8)))
        try journal.store(.init(entry: last, created: Date(), state: Data("[]".utf8)))
        #expect(try journal.latestCheckpoint()?.state == Data("[]".utf8))
        let compaction = StepJournal.Compaction(checkpointOf: last, keepEntries: 100, limit: 600)
        #expect(try journal.compact(compaction) == 600)
        #expect(try journal.compact(compaction) == 299)
        #expect(try journal.entryRange() == (first + 899)...last)
        let (next, compacted) = try journal.append(
            [try tick(1001)], lastSequences: [:], compaction: .init(checkpointOf: last, keepEntries: 0, limit: 1000))
        #expect(compacted == 100 && next > last)
        #expect(try journal.count(after: last) == 1)
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
