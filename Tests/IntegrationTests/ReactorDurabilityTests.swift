import FlowBusClient
import FlowBusConfiguration
import FlowBusCoordinator
import FlowBusReactorHost
import FlowBusTesting
import FlowBusTools
import FlowBusWire
import Foundation
import Testing

/// The demo config with a fast heartbeat and the `demo` host persisting `counter` and `movie/`
/// in `reactors.sqlite` beside the config (a relative path).
private func durableTopology() throws -> TestTopology {
    let yaml = try String(contentsOf: packageRoot.appendingPathComponent("config/demo.yaml"), encoding: .utf8)
    return try TestTopology(
        configYAML: yaml + """

                persistence:
                  database: reactors.sqlite
                  reactors: [counter, movie/]
            heartbeatMilliseconds: 50

            """)
}

/// Starts `reactor-host` on the `demo` host and waits for a heartbeat from it (a new one: the
/// probe is connected after the start).
@discardableResult
private func startHost(_ topology: TestTopology, _ arguments: [String] = []) throws -> ManagedProcess {
    let host = try topology.start(
        "reactor-host", arguments: ["--config", topology.configPath, "--host", "demo"] + arguments)
    let spec = try #require(topology.config.reactors["demo"])
    let probe = try BusSubscriber(endpoint: spec.states, topics: ["hb/"])
    let deadline = ContinuousClock.now + .seconds(20)
    while ContinuousClock.now < deadline {
        guard host.isRunning else {
            throw HarnessError(.exited, "reactor-host exited during start-up:\n\(host.output)")
        }
        if try probe.waitUntilConnected(timeout: .milliseconds(200)) { return host }
    }
    throw HarnessError(.timedOut, "reactor-host sent no heartbeat within 20 s:\n\(host.output)")
}

private struct Counter: Decodable, Equatable {
    var value: Int
    var isLoading: Bool
}

/// Reads states until one with sequence `last` (or any one, for nil), or `timeout` passes.
private func read(
    _ view: ReactorView, through last: UInt64?, timeout: Duration = .seconds(15)
) throws -> [(sequence: UInt64, state: Counter, isSnapshot: Bool)] {
    var seen: [(UInt64, Counter, Bool)] = []
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline, let next = try view.next(timeout: ContinuousClock.now.duration(to: deadline))
    {
        seen.append((next.sequence, try next.decode(Counter.self), next.isSnapshot))
        if last.map({ next.sequence >= $0 }) ?? true { break }
    }
    return seen
}

/// Waits (bounded) until process `pid` is in the stopped state.
func waitUntilStopped(_ pid: Int32) -> Bool {
    let deadline = ContinuousClock.now + .seconds(5)
    while ContinuousClock.now < deadline {
        // /proc/<pid>/stat: "pid (name) S ...", the state after the closing parenthesis.
        if let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let close = stat.lastIndex(of: ")"),
            stat[stat.index(after: close)...].trimmingCharacters(in: .whitespaces).hasPrefix("T")
        {
            return true
        }
        Thread.sleep(forTimeInterval: 0.005)
    }
    return false
}

/// The snapshot a new view gets.
private func snapshot(_ topology: TestTopology) throws -> (sequence: UInt64, state: Counter)? {
    let view = try ReactorView(reactorID: "counter", config: topology.config)
    return try view.next(Counter.self, timeout: .seconds(10))
}

@Suite("Reactor state survives a killed or stopped host", .serialized)
struct ReactorDurabilityTests {
    @Test(
        "SIGKILL: the restarted host resumes from the saved state and sequence; a view across the kill sees every sequence once"
    )
    func killAndRestart() throws {
        let topology = try durableTopology()
        let host = try startHost(topology, ["--counter-delay-ms", "1"])
        let watcher = try ReactorView(reactorID: "counter", config: topology.config)
        var seen = try read(watcher, through: nil)
        #expect(seen.first?.sequence == 0)

        let sender = try ReactorView(reactorID: "counter", config: topology.config)
        let first = 20
        for _ in 1...first { try sender.send("increase") }
        #expect(try sender.waitForAcknowledgement(timeout: .seconds(10)))
        seen += try read(watcher, through: UInt64(3 * first))
        #expect(seen.last?.state == Counter(value: first, isLoading: false))

        host.kill()
        #expect(!host.isRunning)
        try startHost(topology, ["--counter-delay-ms", "1"])

        let restored = try snapshot(topology)
        #expect(restored?.sequence == UInt64(3 * first), "the sequence continues from the saved one")
        #expect(restored?.state == Counter(value: first, isLoading: false))

        // The watcher notices the new host (its heartbeats) and resynchronises by snapshot: the
        // snapshot is the state it already has, so nothing is delivered.
        let resync = ContinuousClock.now + .seconds(10)
        while ContinuousClock.now < resync, watcher.hostRestarts == 0 || !watcher.isSynchronised {
            if let unexpected = try watcher.next(timeout: .milliseconds(20)) {
                seen.append((unexpected.sequence, try unexpected.decode(Counter.self), unexpected.isSnapshot))
            }
        }
        #expect(watcher.isSynchronised)

        let more = 5
        for _ in 1...more { try sender.send("increase") }
        #expect(try sender.waitForAcknowledgement(timeout: .seconds(10)))
        let last = UInt64(3 * (first + more))
        seen += try read(watcher, through: last)
        #expect(seen.map(\.sequence) == Array(0...last), "no gap, no duplicate across the kill")
        #expect(seen.last?.state == Counter(value: first + more, isLoading: false))
        #expect(
            seen.dropFirst().allSatisfy { !$0.isSnapshot },
            "the restarted host's snapshot was the state already seen: dropped")
        #expect(watcher.hostRestarts == 1)
        #expect(try snapshot(topology)?.sequence == last)
    }

    @Test("SIGKILL with actions not yet acknowledged: the view resends them to the restarted host, each applied once")
    func unacknowledgedActionsAreResent() throws {
        let topology = try durableTopology()
        let host = try startHost(topology, ["--counter-delay-ms", "1"])
        let sender = try ReactorView(reactorID: "counter", config: topology.config)
        sender.retransmitInterval = .milliseconds(300)
        for _ in 1...10 { try sender.send("increase") }
        #expect(try sender.waitForAcknowledgement(timeout: .seconds(10)))
        // Let their delayed changes finish (an acknowledged action's asynchronous rest dies with a
        // killed host: see docs/RELIABILITY.md).
        let early = try ReactorView(reactorID: "counter", config: topology.config)
        #expect(try read(early, through: 30).last?.state == Counter(value: 10, isLoading: false))

        // Frozen, the host does not read: these reach its socket and die with it, unacknowledged.
        kill(host.processIdentifier, SIGSTOP)
        // kill() returns before the target has stopped: wait until /proc says it has.
        #expect(waitUntilStopped(host.processIdentifier), "reactor-host stopped")
        for _ in 1...7 { try sender.send("increase") }
        #expect(try !sender.waitForAcknowledgement(timeout: .milliseconds(300)))
        host.kill()
        try startHost(topology, ["--counter-delay-ms", "1"])

        #expect(try sender.waitForAcknowledgement(timeout: .seconds(15)), "resent and acknowledged by the new host")
        #expect(sender.retransmissions > 0)
        let watcher = try ReactorView(reactorID: "counter", config: topology.config)
        let seen = try read(watcher, through: 51)
        #expect(seen.last?.sequence == 51)
        #expect(seen.last?.state == Counter(value: 17, isLoading: false), "every action applied exactly once")
        // Nothing more arrives: no action was applied twice.
        #expect(try watcher.next(timeout: .milliseconds(500)) == nil)
    }

    @Test(
        "SIGTERM with actions in flight: the host lets them finish, saves the state and exits 0; nothing acknowledged is lost"
    )
    func terminateDrains() throws {
        let topology = try durableTopology()
        let host = try startHost(topology, ["--counter-delay-ms", "400"])
        let sender = try ReactorView(reactorID: "counter", config: topology.config)
        for _ in 1...5 { try sender.send("increase") }
        // Acknowledged once accepted: their delayed changes are still in flight.
        #expect(try sender.waitForAcknowledgement(timeout: .seconds(5)))
        #expect(host.terminate(timeout: .seconds(10)) == 0, "exits 0 on SIGTERM")
        #expect(host.output.contains("stopping with work in flight") == false, "the drain bound was enough")

        try startHost(topology)
        let restored = try snapshot(topology)
        #expect(restored?.state == Counter(value: 5, isLoading: false), "every acknowledged action is reflected")
        #expect(restored?.sequence == 15)
    }
}
