import FlowBusClient
import FlowBusConfiguration
import FlowBusCoordinator
import FlowBusReactorHost
import FlowBusTesting
import FlowBusTools
import FlowBusWire
import Foundation
import TestFixtures
import Testing
import ZeroMQ

/// A flow whose `load` stepper's `tick` steps change nothing (`none`), on a screen that may
/// step while covered (`allowStepWhenNotPresented`), with a journal beside the config. It writes
/// checkpoints but keeps every entry, so that tests can read the whole history.
let durableFlowYAML = """
    endpoints:
      ingress: ipc://${FLOWBUS_RUN_DIR}/ingress.sock
      events: ipc://${FLOWBUS_RUN_DIR}/events.sock
      control: ipc://${FLOWBUS_RUN_DIR}/control.sock
    heartbeatMilliseconds: 50
    persistence:
      journal: journal.sqlite
      synchronous: full
      checkpoint: { everyEntries: 10000, keepEntries: 100000000 }
    \(LoadFlow.sections)
    """

/// How many steps the long test publishes: `$FLOWBUS_DURABILITY_STEPS`, else 100,000.
let durabilityStepCount = ProcessInfo.processInfo.environment["FLOWBUS_DURABILITY_STEPS"].flatMap(Int.init) ?? 100_000

/// The `n` of every `tick` the journal holds from `stepper`, in journal order.
func journaledTicks(_ topology: TestTopology, stepper: String = "load") throws -> [Int64] {
    let journal = try StepJournal.open(readingAt: topology.directory.appendingPathComponent("journal.sqlite").path)
    defer { journal.close() }
    var ticks: [Int64] = []
    var after: Int64 = 0
    while true {
        let page = try journal.entries(after: after, limit: 10_000)
        guard let last = page.last else { break }
        for entry in page where entry.kind == .step && entry.target == stepper && entry.name == "tick" {
            ticks.append(try entry.decodeParams()["n"]?.intValue ?? -1)
        }
        after = last.id
    }
    return ticks
}

/// The tree and the bindings `flowctl status --json` shows (not its counters or uptime). The root flow's
/// in-process stepper is named by its object address, which differs from one process to the
/// next: it is masked.
func treeAndBindings(_ topology: TestTopology) throws -> String {
    let result = try topology.run("flowctl", ["status", "--json", "--config", topology.configPath])
    guard result.status == 0, case .map(let status) = try WireJSON.decode(Array(result.output.utf8)) else {
        throw HarnessError(.commandFailed, "flowctl status --json failed: \(result.output)")
    }
    let text = "\(try WireJSON.string(status["flows"] ?? .null))\n\(try WireJSON.string(status["bindings"] ?? .null))"
    return text.replacingOccurrences(of: #"@0x[0-9a-f]+"#, with: "@…", options: .regularExpression)
}

/// Polls until `condition` holds or `timeout` passes.
func eventually(timeout: Duration, _ condition: () throws -> Bool) rethrows -> Bool {
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline {
        if try condition() { return true }
        Thread.sleep(forTimeInterval: 0.05)
    }
    return try condition()
}

/// The number of journal entries flowd committed, from its status.
func committedEntries(_ topology: TestTopology) -> Int {
    guard let journal = (try? topology.status())?["journal"]?.mapValue else { return 0 }
    return Int((journal["restored"]?.intValue ?? 0) + (journal["appended"]?.intValue ?? 0))
}

@Suite("flowd loses no step and applies none twice across crashes and restarts", .serialized)
struct DurabilityTests {
    @Test(
        "100,000 steps with a SIGKILL of flowd in the middle: each applied exactly once, in order; same tree and bindings"
    )
    func sigkillInTheMiddle() throws {
        let count = durabilityStepCount
        let topology = try TestTopology(configYAML: durableFlowYAML)
        var flowd = try topology.startFlowd(arguments: ["--log-level", "warning"])
        try tap(topology, "load", "open", ["id": 7])
        let before = try treeAndBindings(topology)
        #expect(before.contains("detail/7"))

        let clock = ContinuousClock()
        let began = clock.now
        let stepper = try topology.start(
            "stepper-load",
            arguments: [
                "--config", topology.configPath, "--as", "load", "--count", "\(count)", "--progress", "10000",
                "--timeout", "300",
            ])
        // Kill flowd once a good part of the steps are committed (and so acknowledged).
        let killAt = count * 2 / 5
        #expect(
            eventually(timeout: .seconds(300)) { committedEntries(topology) >= killAt || !stepper.isRunning },
            "\(killAt) entries committed")
        let committedBeforeKill = committedEntries(topology)
        flowd.kill()
        Thread.sleep(forTimeInterval: 0.3)
        flowd = try topology.startFlowd(arguments: ["--log-level", "info"])
        #expect(flowd.output.contains("restored"), "\(flowd.output)")
        let restored = try treeAndBindings(topology)
        #expect(
            restored == before,
            "the restarted flowd has the tree and bindings it had before the kill:\n\(before)\n\(restored)")

        let status = stepper.waitForExit(timeout: .seconds(600))
        let elapsed = began.duration(to: clock.now)
        #expect(status == 0, "stepper-load exits 0 once all \(count) steps are acknowledged:\n\(stepper.output)")
        #expect(try treeAndBindings(topology) == before)
        #expect(flowd.terminate() == 0)

        let ticks = try journaledTicks(topology)
        #expect(ticks.count == count, "every step journaled once")
        #expect(ticks == (1...Int64(count)).map { $0 }, "every n from 1 to \(count) applied exactly once, in order")
        let restoredLine = flowd.output.split(separator: "\n").first { $0.contains("restored") } ?? ""
        print(
            "durability: \(count) steps, SIGKILL after \(committedBeforeKill) committed, all acknowledged after \(elapsed); \(stepper.output.split(separator: "\n").last ?? ""); \(restoredLine)"
        )
    }

    @Test(
        "Sources beyond limits.maxSources are forgotten; one that returns is judged by the journal: applied once, not stuck"
    )
    func forgottenSourceReturns() throws {
        let sources = 400
        let topology = try TestTopology(configYAML: durableFlowYAML + "\nlimits: { maxSources: 50 }\n")
        try topology.startFlowd()
        let context = try ZeroMQ.Context(defaultLinger: 500)
        let dealer = try context.socket(.dealer)
        defer { dealer.close() }
        try dealer.connect(topology.config.endpoints.ingress)
        func tick(_ n: Int64, as source: String, sequence: UInt64) throws {
            try dealer.send(
                message: try StepMessage(
                    stepperID: "load",
                    envelope: Envelope(kind: .step, contentType: .fbv, sequence: sequence, source: source),
                    name: "tick", params: ["n": .int(n)]
                ).frames())
        }
        // Acks come in order on one connection: the last one covers everything before it.
        func awaitAck(of source: String, _ sequence: UInt64) throws {
            while true {
                guard
                    case .ack(let ack) = try receiveDecoded(dealer, within: .seconds(10), what: "the ack of \(source)")
                else { continue }
                if ack.acknowledgedSource == source && ack.acknowledgedSequence == sequence { return }
            }
        }
        for index in 0..<sources { try tick(Int64(index), as: "invented#\(index)", sequence: 1) }
        try awaitAck(of: "invented#\(sources - 1)", 1)
        // Liveness checks (every heartbeat) forget the least recently heard beyond 50.
        Thread.sleep(forTimeInterval: 0.3)
        try tick(1_000, as: "invented#0", sequence: 1)
        try awaitAck(of: "invented#0", 1)
        try tick(1_001, as: "invented#0", sequence: 2)
        try awaitAck(of: "invented#0", 2)
        let ticks = try journaledTicks(topology)
        #expect(ticks.count == sources + 1, "the resend of sequence 1 was not applied again")
        #expect(ticks.last == 1_001, "sequence 2 was applied, not refused as out-of-order")
        let peers = try topology.status()["peers"]?.mapValue?.count ?? -1
        #expect(peers <= 50, "flowd holds \(peers) sources")
    }

    @Test("A damaged journal stops flowd with the file, the cause and the fix; salvage keeps every readable entry")
    func damagedJournal() throws {
        let topology = try TestTopology(configYAML: durableFlowYAML)
        let journal = topology.directory.appendingPathComponent("journal.sqlite").path
        let flowd = try topology.startFlowd()
        let stepper = try topology.start(
            "stepper-load",
            arguments: [
                "--config", topology.configPath, "--as", "load", "--count", "3000", "--progress", "0", "--timeout",
                "60",
            ])
        #expect(stepper.waitForExit(timeout: .seconds(120)) == 0, "\(stepper.output)")
        #expect(flowd.terminate() == 0, "a clean stop folds the write-ahead log into the file")
        // Overwrite one page in the middle of the entries.
        let page = try JournalFixture.pageOfEntries(in: journal)
        let handle = try #require(FileHandle(forWritingAtPath: journal))
        try handle.seek(toOffset: page.offset)
        try handle.write(contentsOf: Data(repeating: 0xDE, count: page.size))
        try handle.close()

        let refused = try topology.run("flowd", ["--config", topology.configPath])
        #expect(refused.status == 1)
        #expect(refused.output.contains("the journal \(journal) is damaged"), "\(refused.output)")
        #expect(refused.output.contains("flowctl journal salvage \(journal) --to NEW"), "\(refused.output)")
        #expect(!refused.output.contains("flowd listening"), "it never served")
        #expect(try topology.run("flowctl", ["journal", "check", journal]).status == 1)

        let salvaged = topology.directory.appendingPathComponent("salvaged.sqlite").path
        let salvage = try topology.run("flowctl", ["journal", "salvage", journal, "--to", salvaged])
        #expect(salvage.status == 0, "\(salvage.output)")
        let reader = try StepJournal.open(readingAt: salvaged)
        let copied = try reader.count()
        reader.close()
        print("damaged journal: \(copied) entries salvaged; \(salvage.output)")
        // A commit's entries are one row: the commits with a part on that page are lost whole.
        #expect(copied >= 1000 && copied < 3000, "the other commits kept: \(copied)")
        #expect(salvage.output.contains("unreadable entry ids (lost): "), "\(salvage.output)")
        #expect(try topology.run("flowctl", ["journal", "check", salvaged]).status == 0)

        try FileManager.default.removeItem(atPath: journal)
        try FileManager.default.moveItem(atPath: salvaged, toPath: journal)
        try topology.startFlowd()
        #expect(committedEntries(topology) == copied, "flowd restores what was salvaged")
    }

    @Test("A journal that cannot be opened stops flowd with the file, the cause in words and the fix")
    func unopenableJournal() throws {
        let topology = try TestTopology(configYAML: durableFlowYAML)
        let journal = topology.directory.appendingPathComponent("journal.sqlite").path
        try FileManager.default.createDirectory(atPath: journal, withIntermediateDirectories: true)
        let refused = try topology.run("flowd", ["--config", topology.configPath])
        #expect(refused.status == 1)
        #expect(refused.output.contains("cannot open the journal \(journal): it is a directory"), "\(refused.output)")
        #expect(refused.output.contains("Set persistence.journal to a file in a directory"), "\(refused.output)")
        #expect(!refused.output.contains("flowd listening"), "it never served")
    }

    @Test("A stepper that starts before flowd loses nothing: its steps queue until flowd is there")
    func stepperBeforeFlowd() throws {
        let count = 2000
        let topology = try TestTopology(configYAML: durableFlowYAML)
        let stepper = try topology.start(
            "stepper-load",
            arguments: [
                "--config", topology.configPath, "--as", "load", "--count", "\(count)", "--progress", "0", "--timeout",
                "60",
            ])
        Thread.sleep(forTimeInterval: 0.5)
        #expect(stepper.isRunning, "the stepper waits for flowd:\n\(stepper.output)")
        let flowd = try topology.startFlowd()
        #expect(stepper.waitForExit(timeout: .seconds(120)) == 0, "\(stepper.output)")
        #expect(flowd.terminate() == 0)
        #expect(try journaledTicks(topology) == (1...Int64(count)).map { $0 })
    }

    @Test("SIGTERM drains: what flowd acknowledged is exactly what it committed; a restart gets the rest, once each")
    func sigtermDrains() throws {
        let count = 20_000
        let topology = try TestTopology(configYAML: durableFlowYAML)
        var flowd = try topology.startFlowd(arguments: ["--log-level", "warning"])
        let publisher = try topology.stepper("load")
        for n in 1...count { try publisher.publish("tick", ["n": .int(Int64(n))]) }
        // Stop flowd while thousands of steps are in flight.
        let exit = flowd.terminate(timeout: .seconds(10))
        #expect(exit == 0, "flowd exits 0 on SIGTERM within its bounded linger:\n\(flowd.output)")
        // Read the last acks flowd sent before it went.
        for _ in 0..<10 { try publisher.poll(timeout: .milliseconds(50)) }
        let acknowledged = publisher.lastAcknowledged
        let committed = try journaledTicks(topology)
        print(
            "durability: SIGTERM with \(count - Int(acknowledged)) of \(count) steps unacknowledged; \(committed.count) committed"
        )
        #expect(acknowledged > 0)
        #expect(committed == (1...Int64(max(1, committed.count))).map { $0 }, "a prefix, in order")
        #expect(
            UInt64(committed.count) == acknowledged,
            "every committed batch was acknowledged before exiting, nothing more")

        flowd = try topology.startFlowd()
        #expect(
            try publisher.waitForAcknowledgement(timeout: .seconds(120)),
            "the rest is resent to the new flowd and acknowledged")
        #expect(flowd.terminate() == 0)
        #expect(try journaledTicks(topology) == (1...Int64(count)).map { $0 })
    }
}
