import FlowBusClient
import FlowBusConfiguration
import FlowBusWire
import Foundation
import Testing

@testable import FlowBusReactorHost

@Suite("Reactor host persistence: config, database, de-duplication ledger")
struct ReactorPersistenceTests {
    @Test(
        "persistence: is read from the config; a relative database path is resolved against the config file's directory"
    )
    func configParses() throws {
        let yaml = """
            endpoints: { ingress: "ipc:///tmp/i", events: "ipc:///tmp/e", control: "ipc:///tmp/c" }
            reactors:
              demo:
                actions: ipc:///tmp/a
                states: ipc:///tmp/s
                serves: [counter, movie/]
                persistence:
                  database: state/reactors.sqlite
                  reactors: [counter, movie/]
              other:
                actions: ipc:///tmp/a2
                states: ipc:///tmp/s2
                serves: [login]
            """
        let config = try FlowBusConfig.parse(yaml: yaml, source: "/etc/flowbus/topology.yaml")
        let persistence = try #require(config.reactors["demo"]?.persistence)
        #expect(persistence.database == "/etc/flowbus/state/reactors.sqlite")
        #expect(persistence.synchronous == .full)
        #expect(persistence.persists("counter") && persistence.persists("movie/42"))
        #expect(!persistence.persists("movie/") && !persistence.persists("login") && !persistence.persists("counter2"))
        #expect(config.reactors["other"]?.persistence == nil)
    }

    @Test("the database syncs every commit when persistence.synchronous is full, and is normal when asked")
    func synchronousLevel() throws {
        let directory = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent(
            "fbrp-\(UUID().uuidString.prefix(8))")
        defer { try? FileManager.default.removeItem(at: directory) }
        let full = try ReactorStateDatabase(
            spec: ReactorPersistenceSpec(database: directory.appendingPathComponent("full.sqlite").path, reactors: []))
        #expect(try full.synchronousLevel() == 2, "FULL, the default, even though GRDB asks for NORMAL in WAL mode")
        let normal = try ReactorStateDatabase(
            spec: ReactorPersistenceSpec(
                database: directory.appendingPathComponent("normal.sqlite").path, reactors: [], synchronous: .normal))
        #expect(try normal.synchronousLevel() == 1)
    }

    @Test("the database saves states and sources in one transaction and reads them back")
    func databaseRoundTrip() throws {
        let directory = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent(
            "fbrp-\(UUID().uuidString.prefix(8))")
        defer { try? FileManager.default.removeItem(at: directory) }
        let spec = ReactorPersistenceSpec(
            database: directory.appendingPathComponent("r.sqlite").path, reactors: ["counter"], synchronous: .normal)
        do {
            let database = try ReactorStateDatabase(spec: spec)
            try database.save(
                states: [try record("counter", 3, ["value": 1, "isLoading": false])], sources: ["view:counter#1": 2])
            try database.save(
                states: [try record("counter", 6, ["value": 2, "isLoading": false])],
                sources: ["view:counter#1": 4, "view:counter#2": 1])
        }
        let reopened = try ReactorStateDatabase(spec: spec)
        let loaded = try reopened.load()
        #expect(loaded.states["counter"]?.sequence == 6)
        #expect(loaded.states["counter"]?.state == ["value": 2, "isLoading": false])
        #expect(loaded.sources == 2)
        #expect(try reopened.lastSequence(of: "view:counter#1") == 4)
        #expect(try reopened.lastSequence(of: "view:counter#2") == 1)
    }
}

extension ReactorPersistenceTests {
    @Test("the database keeps the steps saved with the states until flowd acknowledges them, and each stepper's source")
    func stepsKeptUntilAcknowledged() throws {
        let directory = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent(
            "fbrp-\(UUID().uuidString.prefix(8))")
        defer { try? FileManager.default.removeItem(at: directory) }
        let spec = ReactorPersistenceSpec(
            database: directory.appendingPathComponent("r.sqlite").path, reactors: ["ticker"], synchronous: .normal)
        let trace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        do {
            let database = try ReactorStateDatabase(spec: spec)
            #expect(database.keepsSteps)
            #expect(try database.loadSteppers().isEmpty)
            try database.save(
                states: [try record("ticker", 1, ["n": 1])], sources: ["view#1": 1],
                steps: [
                    try step("ticker", "ticker#a", 1, n: 1, traceparent: trace),
                    try step("ticker", "ticker#a", 2, n: 2),
                ],
                acknowledged: [:])
            try database.save(
                states: [], sources: [:], steps: [try step("ticker", "ticker#a", 3, n: 3)],
                acknowledged: ["ticker#a": 1])
        }
        let reopened = try ReactorStateDatabase(spec: spec)
        let kept = try #require(try reopened.loadSteppers()["ticker"])
        #expect(kept.source == "ticker#a")
        #expect(kept.lastSequence == 3)
        #expect(kept.unacknowledged.map(\.sequence) == [2, 3], "1 was acknowledged")
        #expect(try kept.unacknowledged.map { try FBV.decode($0.params) } == [["n": 2], ["n": 3]])
        #expect(kept.unacknowledged.first?.traceparent == nil)
        try reopened.save(states: [], sources: [:], steps: [], acknowledged: ["ticker#a": 3])
        let acknowledged = try #require(try reopened.loadSteppers()["ticker"])
        #expect(acknowledged.unacknowledged.isEmpty)
        #expect(acknowledged.lastSequence == 3, "the sequence goes on after the steps are forgotten")
        #expect(try reopened.load().states["ticker"]?.sequence == 1, "the states saved with the steps")
    }
}

/// A step to keep, as a host saves it.
func step(
    _ stepperID: String, _ source: String, _ sequence: UInt64, n: Int64, traceparent: String? = nil
) throws -> SavedStep {
    SavedStep(
        stepperID: stepperID, source: source, sequence: sequence, name: "tick", params: try FBV.encode(["n": .int(n)]),
        traceparent: traceparent)
}

/// A state to save, encoded as a host saves it.
func record(_ reactorID: String, _ sequence: UInt64, _ state: WireValue) throws -> ReactorStateRecord {
    ReactorStateRecord(reactorID: reactorID, sequence: sequence, bytes: try FBV.encode(state))
}
