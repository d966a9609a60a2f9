#if PostgreSQL
import FlowBusConfiguration
import FlowBusDaemon
import FlowBusPostgres
import FlowBusTesting
import FlowBusWire
import Foundation
import Logging
import Synchronization
import Testing

@Suite("PostgreSQL reactor state store", .serialized)
struct ReactorStoreTests {
    static func record(_ reactorID: String, _ sequence: UInt64, _ state: WireValue) throws -> ReactorStateRecord {
        ReactorStateRecord(reactorID: reactorID, sequence: sequence, bytes: try FBV.encode(state))
    }

    @Test("States and sources are saved together, per host, and read back; a source's sequence only rises")
    func roundTrip() async throws {
        let server = try PostgresServer()
        defer { server.stop() }
        let bank = try await PostgresReactorStore.connect(url: server.url, hostName: "bank", logger: Logger(label: "a"))
        defer { bank.close() }
        let other = try await PostgresReactorStore.connect(
            url: server.url, hostName: "other", logger: Logger(label: "b"))
        defer { other.close() }
        try bank.save(states: [try Self.record("account/1", 3, ["balance": 10])], sources: ["view#1": 2])
        try bank.save(
            states: [
                try Self.record("account/1", 6, ["balance": 25]), try Self.record("account/2", 1, ["balance": 0]),
            ],
            sources: ["view#1": 4, "view#2": 1])
        try bank.save(states: [], sources: ["view#1": 3])
        try other.save(states: [try Self.record("account/1", 9, ["balance": -1])], sources: ["view#1": 40])
        let loaded = try bank.load()
        #expect(loaded.states["account/1"]?.sequence == 6)
        #expect(loaded.states["account/1"]?.state == ["balance": 25])
        #expect(loaded.states["account/2"]?.sequence == 1)
        #expect(loaded.sources == 2)
        #expect(try bank.lastSequences(of: ["view#1", "view#2", "view#3"]) == ["view#1": 4, "view#2": 1])
        #expect(try other.load().states["account/1"]?.sequence == 9, "another host's states are its own")
    }

    @Test("Each reactor host has its own lease, apart from flowd's and the other hosts'")
    func leasesPerHost() async throws {
        let server = try PostgresServer()
        defer { server.stop() }
        let journal = try await PostgresJournal.connect(url: server.url, logger: Logger(label: "flowd"))
        defer { journal.close() }
        try await journal.acquireLease(instance: "flowd#1") { _ in }
        let bank = try await PostgresReactorStore.connect(url: server.url, hostName: "bank", logger: Logger(label: "a"))
        try await bank.acquireLease(instance: "bank#1") { _ in }
        let other = try await PostgresReactorStore.connect(
            url: server.url, hostName: "other", logger: Logger(label: "b"))
        defer { other.close() }
        try await other.acquireLease(instance: "other#1") { _ in }
        let standby = try await PostgresReactorStore.connect(
            url: server.url, hostName: "bank", logger: Logger(label: "c"))
        defer { standby.close() }
        let waited = Mutex<String?>(nil)
        let taking = Task {
            try await standby.acquireLease(instance: "bank#2") { holder in waited.withLock { $0 = holder } }
        }
        try await Task.sleep(for: .milliseconds(500))
        #expect(waited.withLock { $0 }?.contains("bank#1") == true, "the standby names its own host's holder")
        bank.close()
        try await taking.value
        #expect(try standby.leaseHistory(limit: 10).map(\.instance) == ["bank#2", "bank#1"])
        #expect(try journal.leaseHistory(limit: 10).map(\.instance) == ["flowd#1"])
        #expect(throws: Never.self) { try journal.verifyLease() }
    }
}
#endif
