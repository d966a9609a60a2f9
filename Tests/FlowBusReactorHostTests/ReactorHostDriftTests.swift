import FlowBusClient
import FlowBusConfiguration
import FlowBusReactorHost
import FlowBusWire
import Foundation
import GRDB
import Testing
import ZeroMQ

/// What the reactor host carries out through the daemon core, as flowd does: the liveness of
/// views, and a commit before anything is published or acknowledged.
@Suite("Reactor host: dead views, failed saves")
struct ReactorHostDriftTests {
    @Test("A view that sent heartbeats and went silent is reported peer-dead after the configured liveness")
    func deadViewsAreReported() async throws {
        let outcome = try await withReactorHost(testRegistry(), serves: ["tally"], liveness: 2) { config, _ in
            let host = config.reactors["test"]!
            let diagnostics = try BusSubscriber(
                endpoint: host.states, topics: ["diag/peer-dead"], includeHeartbeats: true)
            guard try diagnostics.waitUntilConnected(timeout: .seconds(5)) else { return "no heartbeat from the host" }
            let context = try Context(defaultLinger: 0)
            let view = try context.socket(.dealer)
            try view.connect(host.actions)
            let heartbeat = try Heartbeat(envelope: Envelope(kind: .heartbeat, sequence: 0, source: "view#silent"))
                .encoded()
            try view.send(message: heartbeat)
            let sentAt = ContinuousClock.now
            // Then silence: 2 intervals of 20 ms are the limit.
            while ContinuousClock.now - sentAt < .seconds(5) {
                guard case .message(.diagnostic(let dead))? = try diagnostics.next(timeout: .seconds(5)) else {
                    continue
                }
                let silent = ContinuousClock.now - sentAt
                view.close()
                return dead.details["source"] == "view#silent" && dead.details["role"] == "view"
                    && silent >= .milliseconds(40) ? "dead" : "wrong report: \(dead.details) after \(silent)"
            }
            return "no peer-dead report"
        }
        #expect(outcome == "dead")
    }

    @Test("A save that fails publishes and acknowledges nothing, and reads no action, until a save succeeds")
    func failedSaveHoldsEverything() async throws {
        let outcome = try await withReactorHost(testRegistry(), serves: ["tally"], persists: ["tally"]) { config, _ in
            let host = config.reactors["test"]!
            let view = try ReactorView(reactorID: "tally", config: config)
            guard let snapshot = try view.next(timeout: .seconds(5)) else { return ["no snapshot"] }
            let diagnostics = try BusSubscriber(endpoint: host.states, topics: ["diag/persistence-failed"])
            // Subscribed from its first heartbeat on: the report is not missed.
            guard try diagnostics.waitUntilConnected(timeout: .seconds(5)) else {
                return ["no heartbeat from the host"]
            }
            var notes: [String] = ["snapshot \(snapshot.sequence)"]
            // Another connection holds the database's write lock: the host's saves fail at once.
            var locking = Configuration()
            locking.allowsUnsafeTransactions = true
            let database = try DatabaseQueue(path: host.persistence!.database!, configuration: locking)
            try database.writeWithoutTransaction { db in try db.execute(sql: "BEGIN EXCLUSIVE") }
            try view.send(TallyReactor.Action.add(n: 5))
            if let state = try view.next(timeout: .milliseconds(500)) { notes.append("published \(state.sequence)") }
            if try view.waitForAcknowledgement(timeout: .milliseconds(300)) { notes.append("acknowledged") }
            if case .message(.diagnostic(let failed))? = try diagnostics.next(timeout: .seconds(2)) {
                notes.append("reported \(failed.reason)")
            }
            try database.writeWithoutTransaction { db in try db.execute(sql: "ROLLBACK") }
            if let state = try view.next(TallyReactor.State.self, timeout: .seconds(5)) {
                notes.append("then published \(state.sequence): \(state.state.value)")
            }
            if try view.waitForAcknowledgement(timeout: .seconds(5)) { notes.append("then acknowledged") }
            return notes
        }
        #expect(
            outcome == [
                "snapshot 0", "reported persistence-failed", "then published 1: 5", "then acknowledged",
            ])
    }
}
