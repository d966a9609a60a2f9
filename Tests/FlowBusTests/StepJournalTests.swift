import Foundation
import Testing

@testable import FlowBus
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
        try journal.append([
            .init(kind: .step, target: "load", name: "tick", params: Data(try FBV.encode(.map(["n": 1]))), source: "s#1", sequence: 1),
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
        let none = try FlowBusConfig.parse(yaml: "endpoints: { ingress: \"ipc:///tmp/i\", events: \"ipc:///tmp/e\", control: \"ipc:///tmp/c\" }")
        #expect(none.persistence == nil)
    }
}
