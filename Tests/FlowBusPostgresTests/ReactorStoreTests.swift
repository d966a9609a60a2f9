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

    @Test("The steps saved with the states are kept per host until flowd acknowledges them, with each stepper's source")
    func stepsKeptUntilAcknowledged() async throws {
        let server = try PostgresServer()
        defer { server.stop() }
        let bank = try await PostgresReactorStore.connect(url: server.url, hostName: "bank", logger: Logger(label: "a"))
        defer { bank.close() }
        let other = try await PostgresReactorStore.connect(
            url: server.url, hostName: "other", logger: Logger(label: "b"))
        defer { other.close() }
        #expect(bank.keepsSteps)
        let trace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        func step(_ source: String, _ sequence: UInt64, traceparent: String? = nil) throws -> SavedStep {
            SavedStep(
                stepperID: "payments", source: source, sequence: sequence, name: "paid",
                params: try FBV.encode(["n": .int(Int64(sequence))]), traceparent: traceparent,
                tracestate: traceparent.map { _ in "congo=t61rcWkgMzE" })
        }
        try bank.save(
            states: [try Self.record("account/1", 1, ["balance": 10])], sources: ["view#1": 1],
            steps: [try step("payments#a", 1, traceparent: trace), try step("payments#a", 2)], acknowledged: [:])
        try bank.save(states: [], sources: [:], steps: [try step("payments#a", 3)], acknowledged: ["payments#a": 1])
        try other.save(states: [], sources: [:], steps: [try step("payments#o", 1)], acknowledged: [:])
        let kept = try #require(try bank.loadSteppers()["payments"])
        #expect(kept.source == "payments#a")
        #expect(kept.lastSequence == 3)
        #expect(kept.unacknowledged.map(\.sequence) == [2, 3], "1 was acknowledged")
        #expect(try kept.unacknowledged.map { try FBV.decode($0.params) } == [["n": 2], ["n": 3]])
        #expect(try bank.load().states["account/1"]?.sequence == 1, "the states saved with the steps")
        try bank.save(
            states: [], sources: [:], steps: [try step("payments#a", 4, traceparent: trace)],
            acknowledged: ["payments#a": 3])
        let later = try #require(try bank.loadSteppers()["payments"])
        #expect(later.unacknowledged.map(\.sequence) == [4])
        #expect(later.unacknowledged.first?.traceparent == trace)
        #expect(later.unacknowledged.first?.tracestate == "congo=t61rcWkgMzE")
        #expect(try other.loadSteppers()["payments"]?.unacknowledged.map(\.sequence) == [1], "another host's own")
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
