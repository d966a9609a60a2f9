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

/// A state to save, encoded as a host saves it.
func record(_ reactorID: String, _ sequence: UInt64, _ state: WireValue) throws -> ReactorStateRecord {
    ReactorStateRecord(reactorID: reactorID, sequence: sequence, bytes: try FBV.encode(state))
}
