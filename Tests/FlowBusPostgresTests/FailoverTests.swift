#if PostgreSQL
import FlowBusClient
import FlowBusConfiguration
import FlowBusCoordinator
import FlowBusPostgres
import FlowBusTesting
import FlowBusWire
import Foundation
import Logging
import TestFixtures
import Testing

/// flowd instances sharing one PostgreSQL journal: one active, the others standing by.
@Suite("flowd failover on a shared PostgreSQL journal", .serialized)
struct FailoverTests {
    static func yaml(postgres url: String, compacting: Bool) -> String {
        """
        endpoints:
          ingress: ipc://${FLOWBUS_RUN_DIR}/ingress.sock
          events: ipc://${FLOWBUS_RUN_DIR}/events.sock
          control: ipc://${FLOWBUS_RUN_DIR}/control.sock
        persistence:
          postgres: "\(url)"
          checkpoint: \(compacting ? "{ everyEntries: 2000 }" : "{ everyEntries: 5000, keepEntries: 100000000 }")
        \(LoadFlow.sections)
        """
    }

    /// Starts a flowd that waits for the lease: it serves nothing until it holds it.
    static func standby(_ topology: TestTopology) throws -> ManagedProcess {
        let process = try topology.start("flowd", arguments: ["--config", topology.configPath, "--log-level", "info"])
        #expect(
            try process.waitForOutput(matching: "standby: .* holds the lease", timeout: .seconds(30)),
            "\(process.output)")
        return process
    }

    /// The `n` of every `tick` in the journal, in journal order.
    static func journaledTicks(_ url: String) async throws -> [Int64] {
        let journal = try await PostgresJournal.connect(url: url, logger: Logger(label: "reader"))
        defer { journal.close() }
        var ticks: [Int64] = []
        var after: Int64 = 0
        while true {
            let page = try journal.entries(after: after, limit: 10_000)
            guard let last = page.last else { break }
            for entry in page where entry.kind == .step && entry.target == "load" && entry.name == "tick" {
                ticks.append(try entry.decodeParams()["n"]?.intValue ?? -1)
            }
            after = last.id
        }
        return ticks
    }

    /// Holds flowd's lease in a session of its own, then sends the first message of a statement
    /// (Parse) and nothing more: the server waits for the rest, as it does for a holder whose
    /// link was cut between two packets of a commit.
    static let holderHalfwayThroughAStatement = #"""
        import socket, struct, sys, time
        host, port, database, key = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
        s = socket.create_connection((host, port))
        def message(kind, body): s.sendall(kind + struct.pack("!i", len(body) + 4) + body)
        def until_ready():
            while True:
                kind, length = s.recv(1), struct.unpack("!i", s.recv(4, socket.MSG_WAITALL))[0]
                body = s.recv(length - 4, socket.MSG_WAITALL) if length > 4 else b""
                if kind == b"E": sys.exit("refused: %r" % body)
                if kind == b"Z": return
        startup = b"user\0postgres\0database\0" + database.encode() + b"\0\0"
        s.sendall(struct.pack("!ii", len(startup) + 8, 196608) + startup)
        until_ready()
        message(b"Q", b"SELECT pg_advisory_lock(%d)\0" % key)
        until_ready()
        message(b"P", b"\0SELECT 1\0" + struct.pack("!h", 0))
        print("holding the lease, halfway through a statement", flush=True)
        time.sleep(120)
        """#

    @Test(
        "A lease holder whose server waits for the rest of a statement past the lease timeout is ended: the standby takes over"
    )
    func holderCutOffInTheMiddleOfAStatement() throws {
        if let reason = PostgresServer.unavailableReason {
            Issue.record("PostgreSQL is needed: \(reason)")
            return
        }
        let server = try PostgresServer()
        defer { server.stop() }
        let topology = try TestTopology(configYAML: Self.yaml(postgres: server.url, compacting: false))
        let url = try #require(URLComponents(string: server.url))
        let log = FileManager.default.temporaryDirectory.appendingPathComponent("holder-\(UUID().uuidString).log")
        let holder = try ManagedProcess(
            name: "holder", executable: URL(fileURLWithPath: "/usr/bin/env"),
            arguments: [
                "python3", "-c", Self.holderHalfwayThroughAStatement, url.host ?? "127.0.0.1", "\(server.port)",
                String(url.path.dropFirst()), "\(PostgresJournal.leaseKey)",
            ],
            outputURL: log)
        defer {
            _ = holder.terminate()
            try? FileManager.default.removeItem(at: log)
        }
        #expect(try holder.waitForOutput(matching: "holding the lease", timeout: .seconds(20)), "\(holder.output)")
        let flowd = try Self.standby(topology)
        // Its session answers TCP keep-alives: only the standby's judgement ends it.
        #expect(
            try flowd.waitForOutput(matching: "in the middle of a statement: ending it", timeout: .seconds(10)),
            "\(flowd.output)")
        #expect(try flowd.waitForOutput(matching: "holding the lease", timeout: .seconds(10)), "\(flowd.output)")
        #expect(flowd.terminate() == 0, "\(flowd.outputTail())")
    }

    /// A TCP relay to PostgreSQL that prints its port: SIGSTOP freezes every connection through
    /// it, as a cut link does (the server hears nothing more, the client no answer).
    static let relay = #"""
        import socket, sys, threading
        upstream = (sys.argv[1], int(sys.argv[2]))
        listener = socket.create_server(("127.0.0.1", 0))
        print("relaying on", listener.getsockname()[1], flush=True)
        def pump(source, target):
            try:
                while data := source.recv(65536):
                    target.sendall(data)
            except OSError:
                pass
            for end in (source, target):
                try: end.shutdown(socket.SHUT_RDWR)
                except OSError: pass
        while True:
            client, _ = listener.accept()
            server = socket.create_connection(upstream)
            for pair in ((client, server), (server, client)):
                threading.Thread(target=pump, args=pair, daemon=True).start()
        """#

    @Test(
        "An active flowd cut off from PostgreSQL while it commits batch after batch gives the lease up at its keep-alive, within the lease timeout, not at a commit's own 5 s timeout"
    )
    func holderCutOffDuringACommitStops() throws {
        if let reason = PostgresServer.unavailableReason {
            Issue.record("PostgreSQL is needed: \(reason)")
            return
        }
        let server = try PostgresServer()
        defer { server.stop() }
        let url = try #require(URLComponents(string: server.url))
        let log = FileManager.default.temporaryDirectory.appendingPathComponent("relay-\(UUID().uuidString).log")
        let relay = try ManagedProcess(
            name: "relay", executable: URL(fileURLWithPath: "/usr/bin/env"),
            arguments: ["python3", "-c", Self.relay, url.host ?? "127.0.0.1", "\(server.port)"], outputURL: log)
        defer {
            kill(relay.processIdentifier, SIGCONT)
            _ = relay.terminate()
            try? FileManager.default.removeItem(at: log)
        }
        #expect(try relay.waitForOutput(matching: "relaying on [0-9]+", timeout: .seconds(20)), "\(relay.output)")
        let port = try #require(
            relay.output.split(separator: "\n").first { $0.hasPrefix("relaying on") }?.split(separator: " ").last)
        var relayed = url
        relayed.port = Int(port)
        let topology = try TestTopology(
            configYAML: Self.yaml(postgres: try #require(relayed.string), compacting: false))
        let flowd = try topology.startFlowd(arguments: ["--log-level", "info"])
        let opener = try topology.stepper("load")
        try opener.publish("open", ["id": 7])
        #expect(try opener.waitForAcknowledgement(timeout: .seconds(10)))
        let stepper = try topology.start(
            "stepper-load",
            arguments: [
                "--config", topology.configPath, "--as", "load", "--count", "10000000", "--progress", "0",
                "--timeout", "300",
            ])
        defer { stepper.kill() }
        var accepted: Int64 = 0
        let deadline = ContinuousClock.now + .seconds(60)
        while accepted < 2_000, ContinuousClock.now < deadline {
            accepted = (try? topology.status()["totals"]?.mapValue?["accepted"]?.intValue) ?? accepted
            Thread.sleep(forTimeInterval: 0.02)
        }
        #expect(accepted >= 2_000, "steps stream through flowd:\n\(flowd.outputTail())")
        // Batches are committed back to back: the link goes silent with a commit under way, or between two.
        flowd.allowExit()
        let cut = ContinuousClock.now
        kill(relay.processIdentifier, SIGSTOP)
        #expect(flowd.waitForExit(timeout: .seconds(30)) == 1, "flowd stopped:\n\(flowd.outputTail(lines: 200))")
        print("flowd cut off from PostgreSQL mid-commit stopped \(cut.duration(to: .now)) after the cut")
        // A commit under way (judged on the watch connection) or the session idle between two (its
        // keep-alive unanswered): either way the keep-alive gave the lease up.
        #expect(
            flowd.output.contains("the lease's session does not answer"),
            "the keep-alive gave the lease up:\n\(flowd.outputTail())")
        #expect(
            !flowd.output.contains("no answer within 5"), "not a commit's own timeout:\n\(flowd.outputTail())")
    }

    /// Runs simple queries one after the other in a session of its own, saying when each is done.
    static let simpleQueries = #"""
        import socket, struct, sys
        host, port, database, queries = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
        s = socket.create_connection((host, port))
        def until_ready():
            while True:
                kind, length = s.recv(1), struct.unpack("!i", s.recv(4, socket.MSG_WAITALL))[0]
                body = s.recv(length - 4, socket.MSG_WAITALL) if length > 4 else b""
                if kind == b"E": sys.exit("refused: %r" % body)
                if kind == b"Z": return
        startup = b"user\0postgres\0database\0" + database.encode() + b"\0\0"
        s.sendall(struct.pack("!ii", len(startup) + 8, 196608) + startup)
        until_ready()
        for number, sql in enumerate(queries, 1):
            body = sql.encode() + b"\0"
            s.sendall(b"Q" + struct.pack("!i", len(body) + 4) + body)
            until_ready()
            print("query", number, "done", flush=True)
        """#

    @Test(
        "A commit that waits on another session's lock past the lease timeout is no silence: the active flowd keeps the lease and goes on"
    )
    func commitWaitingOnALockKeepsTheLease() throws {
        if let reason = PostgresServer.unavailableReason {
            Issue.record("PostgreSQL is needed: \(reason)")
            return
        }
        let server = try PostgresServer()
        defer { server.stop() }
        let url = try #require(URLComponents(string: server.url))
        let topology = try TestTopology(configYAML: Self.yaml(postgres: server.url, compacting: false))
        let flowd = try topology.startFlowd(arguments: ["--log-level", "info"])
        let stepper = try topology.stepper("load")
        try stepper.publish("open", ["id": 7])
        #expect(try stepper.waitForAcknowledgement(timeout: .seconds(10)))
        let log = FileManager.default.temporaryDirectory.appendingPathComponent("lock-\(UUID().uuidString).log")
        let locker = try ManagedProcess(
            name: "locker", executable: URL(fileURLWithPath: "/usr/bin/env"),
            arguments: [
                "python3", "-c", Self.simpleQueries, url.host ?? "127.0.0.1", "\(server.port)",
                String(url.path.dropFirst()), "BEGIN; LOCK TABLE flowbus_batch IN ACCESS EXCLUSIVE MODE",
                "SELECT pg_sleep(3); COMMIT",
            ],
            outputURL: log)
        defer {
            _ = locker.terminate()
            try? FileManager.default.removeItem(at: log)
        }
        #expect(try locker.waitForOutput(matching: "query 1 done", timeout: .seconds(20)), "\(locker.output)")
        // The lock is held for 3 s more, three lease timeouts: the commit of this step waits for it.
        let waited = ContinuousClock.now
        try stepper.publish("tick", ["n": 1])
        #expect(try stepper.waitForAcknowledgement(timeout: .seconds(20)), "\(flowd.outputTail())")
        let waitedFor = waited.duration(to: .now)
        print("a commit waiting on a lock was acknowledged \(waitedFor) after its step was sent")
        #expect(waitedFor >= .seconds(2), "the commit waited on the lock, past the lease timeout")
        #expect(try locker.waitForOutput(matching: "query 2 done", timeout: .seconds(20)), "\(locker.output)")
        try stepper.publish("tick", ["n": 2])
        #expect(try stepper.waitForAcknowledgement(timeout: .seconds(10)), "\(flowd.outputTail())")
        #expect(flowd.isRunning, "\(flowd.outputTail())")
        #expect(!flowd.output.contains("lease's session does not answer"), "\(flowd.outputTail())")
        #expect(flowd.terminate() == 0, "\(flowd.outputTail())")
    }

    @Test(
        "Three SIGKILLs of the active flowd while a stepper streams: the standby takes over, every step applied once, in order",
        arguments: [false, true])
    func killTheActiveThreeTimes(compacting: Bool) async throws {
        if let reason = PostgresServer.unavailableReason {
            Issue.record("PostgreSQL is needed: \(reason)")
            return
        }
        let count = ProcessInfo.processInfo.environment["FLOWBUS_FAILOVER_STEPS"].flatMap(Int.init) ?? 30_000
        let server = try PostgresServer()
        defer { server.stop() }
        let topology = try TestTopology(configYAML: Self.yaml(postgres: server.url, compacting: compacting))
        var active = try topology.startFlowd(arguments: ["--log-level", "info"])
        var standby = try Self.standby(topology)
        // A subscriber that resumes (PROTOCOL.md §4.6): every step flowd passes on, across the takeovers.
        let resumer = try BusSubscriber(
            endpoints: topology.config.eventsEndpoints, topics: ["step/load"],
            resuming: EventResumption(control: topology.config.controlEndpoints, since: 0))
        var ticks: [Int64] = []
        func drainResumer(for duration: Duration = .zero) throws {
            let deadline = ContinuousClock.now + duration
            repeat {
                guard let received = try resumer.next(timeout: .milliseconds(duration == .zero ? 0 : 50)) else {
                    continue
                }
                if case .message(.step(let step)) = received, step.name == "tick" {
                    ticks.append(step.params["n"]?.intValue ?? -1)
                }
            } while ContinuousClock.now < deadline && ticks.count < count
        }
        let opener = try topology.stepper("load")
        try opener.publish("open", ["id": 7])
        #expect(try opener.waitForAcknowledgement(timeout: .seconds(10)))

        let stepper = try topology.start(
            "stepper-load",
            arguments: [
                "--config", topology.configPath, "--as", "load", "--count", "\(count)", "--progress", "0", "--timeout",
                "300",
            ])
        var failovers: [Duration] = []
        for round in 1...3 {
            // Kill at a different point each time: once a quarter, a half, three quarters are committed.
            let target = Int64(count * round / 4)
            var appended: Int64 = 0
            let deadline = ContinuousClock.now + .seconds(300)
            while appended < target, stepper.isRunning, ContinuousClock.now < deadline {
                appended = (try? topology.status()["totals"]?.mapValue?["accepted"]?.intValue) ?? appended
                try drainResumer(for: .milliseconds(20))
            }
            let killed = ContinuousClock.now
            active.kill()
            // The standby holds the lease once the dead session is gone, then restores and binds.
            var answered = false
            while !answered, ContinuousClock.now < killed + .seconds(60) {
                answered = (try? topology.status(timeout: .milliseconds(200))) != nil
            }
            #expect(answered, "the standby took over:\n\(standby.output)")
            failovers.append(killed.duration(to: .now))
            active = standby
            standby = try Self.standby(topology)
            try drainResumer()
        }
        while stepper.isRunning { try drainResumer(for: .milliseconds(100)) }
        #expect(stepper.waitForExit(timeout: .seconds(600)) == 0, "every step acknowledged:\n\(stepper.output)")
        try drainResumer(for: .seconds(30))
        #expect(
            ticks == (1...Int64(count)).map { $0 },
            "the resuming subscriber got every step once, in order, across three takeovers: \(ticks.count) of \(count), \(resumer.replayCount) replays, first difference at \(Array(zip(ticks, 1...Int64(count))).firstIndex { $0 != $1 } ?? -1)"
        )
        if compacting {
            // Checkpoints every 2,000 entries, and the entries they cover deleted: the standbys
            // followed across them. What reached the flow is counted in the checkpoints.
            let accepted = try topology.status()["steppers"]?.mapValue?["load"]?.mapValue?["accepted"]?.intValue
            #expect(
                accepted == Int64(count + 1),
                "the open step and every tick reached the flow once: \(String(describing: accepted))")
            #expect(
                try topology.status()["bindings"]?.listValue?.contains {
                    $0.mapValue?["stepper"]?.stringValue == "detail/7"
                } == true)
        } else {
            let ticks = try await Self.journaledTicks(server.url)
            #expect(ticks.count == count, "every step journaled once")
            #expect(ticks == (1...Int64(count)).map { $0 }, "every n from 1 to \(count) applied exactly once, in order")
        }
        let lease = try topology.status()["journal"]?.mapValue?["lease"]?.mapValue
        #expect(lease?["history"]?.listValue?.count == 4, "four takings of the lease: \(String(describing: lease))")
        let sorted = failovers.sorted()
        print(
            "failover: \(count) steps, 3 SIGKILLs of the active flowd; kill → the new active answers: \(failovers), max \(sorted.last ?? .zero); the resuming subscriber got \(ticks.count) of \(count), each once, in order: \(ticks == (1...Int64(count)).map { $0 })"
        )
        _ = active.terminate()
        _ = standby.terminate()
    }
}
#endif
