import FlowBusClient
import FlowBusConfiguration
import FlowBusCoordinator
import FlowBusReactorHost
import FlowBusTesting
import FlowBusTools
import FlowBusWire
import Foundation
import Testing
import ZeroMQ

/// The demo config (flows and the `demo` reactor host) with a fast heartbeat.
private func reactorTopology() throws -> TestTopology {
    let yaml = try String(contentsOf: packageRoot.appendingPathComponent("config/demo.yaml"), encoding: .utf8)
    return try TestTopology(configYAML: yaml + "\nheartbeatMilliseconds: 50\n")
}

/// Starts the `reactor-host` example on the topology's `demo` host and waits for its first
/// heartbeat on the states endpoint (bounded).
@discardableResult
private func startReactorHost(_ topology: TestTopology, _ arguments: [String] = []) throws -> ManagedProcess {
    let host = try topology.start(
        "reactor-host", arguments: ["--config", topology.configPath, "--host", "demo"] + arguments)
    guard let spec = topology.config.reactors["demo"] else {
        throw HarnessError(.notDeclared, "config/demo.yaml has no reactors.demo")
    }
    let probe = try BusSubscriber(endpoint: spec.states, topics: ["hb/"])
    let deadline = ContinuousClock.now + .seconds(20)
    while ContinuousClock.now < deadline {
        guard host.isRunning else {
            throw HarnessError(.exited, "reactor-host exited during start-up:\n\(host.output)")
        }
        if try probe.waitUntilConnected(timeout: .milliseconds(200)) { return host }
    }
    throw HarnessError(.timedOut, "reactor-host sent no heartbeat on \(spec.states) within 20 s:\n\(host.output)")
}

private struct CounterState: Decodable, Equatable {
    var value: Int
    var isLoading: Bool
}

private struct LoginState: Decodable, Equatable {
    var isSubmitting: Bool
    var error: String?
}

private enum LoginAction: Encodable {
    case submit(apiKey: String)
}

/// Reads decoded states until `done` holds for one or `timeout` passes.
private func states<State: Decodable>(
    _ view: ReactorView, as type: State.Type, timeout: Duration = .seconds(10), until done: (State) -> Bool
) throws -> [(sequence: UInt64, state: State)] {
    var seen: [(UInt64, State)] = []
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline,
        let next = try view.next(type, timeout: ContinuousClock.now.duration(to: deadline))
    {
        seen.append(next)
        if done(next.state) { break }
    }
    return seen
}

/// Whether the flowctl under test has the reactor subcommands registered.
private let flowctlHasReactorCommands: Bool = {
    guard let topology = try? reactorTopology(), let help = try? topology.run("flowctl", ["--help"]) else {
        return false
    }
    return help.output.contains("echo-state")
}()

@Suite("reactor-host with real processes", .serialized)
struct ReactorHostTests {
    @Test("The Counter of seed 001: increase gives (0,false) → (0,true) → (1,true) → (1,false) with sequences 0...3")
    func counterIncrease() throws {
        let topology = try reactorTopology()
        let host = try startReactorHost(topology)
        let view = try ReactorView(reactorID: "counter", config: topology.config)
        var seen = try states(view, as: CounterState.self) { _ in true }
        try view.send("increase")
        #expect(try view.waitForAcknowledgement())
        seen += try states(view, as: CounterState.self) { $0 == CounterState(value: 1, isLoading: false) }
        #expect(seen.map(\.sequence) == [0, 1, 2, 3])
        #expect(
            seen.map(\.state) == [
                CounterState(value: 0, isLoading: false), CounterState(value: 0, isLoading: true),
                CounterState(value: 1, isLoading: true), CounterState(value: 1, isLoading: false),
            ])
        #expect(host.terminate() == 0, "reactor-host exits 0 on SIGTERM")
    }

    @Test("Late-joining views get the snapshot, then live states with no gap and no duplicate, while actions stream in")
    func lateJoiners() throws {
        let topology = try reactorTopology()
        try startReactorHost(topology, ["--counter-delay-ms", "1"])
        let sender = try ReactorView(reactorID: "counter", config: topology.config)
        let total = 300
        var joiners: [(view: ReactorView, seen: [(sequence: UInt64, state: CounterState)])] = []
        for index in 1...total {
            try sender.send("increase")
            if [30, 150, 270].contains(index) {
                joiners.append((try ReactorView(reactorID: "counter", config: topology.config), []))
            }
            // Let every joiner read what is there, so joining happens while states stream.
            for slot in joiners.indices {
                while let next = try joiners[slot].view.next(CounterState.self, timeout: .milliseconds(1)) {
                    joiners[slot].seen.append(next)
                }
            }
        }
        #expect(try sender.waitForAcknowledgement(timeout: .seconds(20)))
        // Each action makes 3 states: the last one has sequence 3 × total.
        let last = UInt64(3 * total)
        for slot in joiners.indices {
            let deadline = ContinuousClock.now + .seconds(20)
            while joiners[slot].seen.last?.sequence != last, ContinuousClock.now < deadline,
                let next = try joiners[slot].view.next(
                    CounterState.self, timeout: ContinuousClock.now.duration(to: deadline))
            {
                joiners[slot].seen.append(next)
            }
            let sequences = joiners[slot].seen.map(\.sequence)
            guard let first = sequences.first else {
                Issue.record("joiner \(slot) received nothing")
                continue
            }
            #expect(
                sequences == Array(first...last),
                "joiner \(slot): snapshot \(first), then every sequence once up to \(last)")
            #expect(joiners[slot].seen.last?.state == CounterState(value: total, isLoading: false))
            #expect(joiners[slot].view.resynchronisations == 0)
        }
    }

    @Test("Bad actions are refused with diagnostics and the host keeps serving")
    func refusals() throws {
        let topology = try reactorTopology()
        try startReactorHost(topology)
        let spec = try #require(topology.config.reactors["demo"])
        let diagnostics = try BusSubscriber(endpoint: spec.states, topics: ["diag/"])
        #expect(try diagnostics.waitUntilConnected())

        let nobody = try ReactorView(reactorID: "nobody", actionsEndpoint: spec.actions, statesEndpoint: spec.states)
        let unknownReactor = try nobody.send("increase")
        let counter = try ReactorView(reactorID: "counter", config: topology.config)
        let unknownName = try counter.send("explode")
        let login = try ReactorView(reactorID: "login", config: topology.config)
        let wrongType = try login.send("submit", ["apiKey": 5])
        #expect(
            try nobody.waitForAcknowledgement() && counter.waitForAcknowledgement() && login.waitForAcknowledgement())
        #expect(nobody.refusal(for: unknownReactor)?.reason == .unknownReactor)
        #expect(counter.refusal(for: unknownName)?.reason == .badAction)
        #expect(counter.refusal(for: unknownName)?.message.contains("no action named 'explode'") == true)
        #expect(login.refusal(for: wrongType)?.reason == .badAction)
        #expect(login.refusal(for: wrongType)?.message.contains("apiKey") == true)

        let context = try Context(defaultLinger: 500)
        let raw = try context.socket(.dealer)
        try raw.connect(spec.actions)
        try raw.send(message: [Array("action/counter".utf8), [0x01, 0x03]])

        let published = try diagnostics.collect(4).compactMap { message -> String? in
            guard case .diagnostic(let diagnostic) = message else { return nil }
            return diagnostic.reason.rawValue
        }
        #expect(published.prefix(3).sorted() == ["bad-action", "bad-action", "unknown-reactor"])
        #expect(published.last == "malformed")

        // Still serving: the counter counts.
        #expect(
            try states(counter, as: CounterState.self) { _ in true }.first?.state
                == CounterState(value: 0, isLoading: false))
        try counter.send("decrease")
        let after = try states(counter, as: CounterState.self) { $0 == CounterState(value: -1, isLoading: false) }
        #expect(after.last?.state == CounterState(value: -1, isLoading: false))
    }

    @Test("A movie detail (movie/ family) loads its title")
    func movieFamily() throws {
        let topology = try reactorTopology()
        try startReactorHost(topology, ["--movie-delay-ms", "10"])
        let view = try ReactorView(reactorID: "movie/23452", config: topology.config)
        #expect(try view.next(timeout: .seconds(10))?.state == ["id": 23452, "title": .null, "isLoading": false])
        try view.send("load")
        var last: WireValue?
        let deadline = ContinuousClock.now + .seconds(10)
        while ContinuousClock.now < deadline, let next = try view.next(timeout: .seconds(5)) {
            last = next.state
            if next.sequence == 3 { break }
        }
        #expect(last == ["id": 23452, "title": "The Grand Budapest Hotel", "isLoading": false])
    }

    @Test("The login reactor's success is a step that makes flowd navigate (didNavigate MainFlow apiKeyIsComplete)")
    func loginDrivesNavigation() throws {
        let topology = try reactorTopology()
        try topology.startFlowd()
        try startReactorHost(topology)
        let events = try topology.subscribe(["nav/did/"])
        let login = try ReactorView(reactorID: "login", config: topology.config)
        #expect(
            try states(login, as: LoginState.self) { _ in true }.map(\.state) == [
                LoginState(isSubmitting: false, error: nil)
            ])

        try login.send(LoginAction.submit(apiKey: ""))
        #expect(
            try states(login, as: LoginState.self) { _ in true }.map(\.state) == [
                LoginState(isSubmitting: false, error: "the api key is empty")
            ])

        try login.send(LoginAction.submit(apiKey: "secret"))
        let submitted = try states(login, as: LoginState.self) { !$0.isSubmitting }.map(\.state)
        #expect(submitted == [LoginState(isSubmitting: true, error: nil), LoginState(isSubmitting: false, error: nil)])
        let navigation = try events.collect(1).map(MessageFormatter.line)
        #expect(navigation == ["did navigate flow=MainFlow step=apiKeyIsComplete presentable=apikey"])
    }

    @Test(
        "flowctl action, state and echo-state",
        .enabled(
            if: flowctlHasReactorCommands,
            "needs ReactorActionCommand, ReactorStateCommand and ReactorEchoStateCommand registered in Flowctl.swift"))
    func flowctlCommands() throws {
        let topology = try reactorTopology()
        try startReactorHost(topology, ["--counter-delay-ms", "10"])
        let config = ["--config", topology.configPath]
        let action = try topology.run("flowctl", ["action", "counter", "increase"] + config)
        #expect(action.status == 0, "\(action.output)")
        #expect(action.output.contains("action increase sent to counter, acknowledged"))

        let view = try ReactorView(reactorID: "counter", config: topology.config)
        _ = try states(view, as: CounterState.self) { $0 == CounterState(value: 1, isLoading: false) }

        let state = try topology.run("flowctl", ["state", "counter", "--json"] + config)
        #expect(state.status == 0, "\(state.output)")
        let json = try WireJSON.decode(state.output.trimmingCharacters(in: .whitespacesAndNewlines))
        #expect(json.mapValue?["state"] == ["value": 1, "isLoading": false])
        #expect(json.mapValue?["seq"] == 3)

        let refused = try topology.run("flowctl", ["action", "counter", "explode"] + config)
        #expect(refused.status != 0)
        #expect(refused.output.contains("bad-action"))

        let unknown = try topology.run("flowctl", ["state", "nobody"] + config)
        #expect(unknown.status != 0)
        #expect(unknown.output.contains("no reactor host of the config serves nobody"))

        let echo = try topology.start("flowctl", arguments: ["echo-state", "counter", "--count", "4"] + config)
        // The snapshot comes first; then the three states of one increase.
        let deadline = ContinuousClock.now + .seconds(10)
        while ContinuousClock.now < deadline, !echo.output.contains("snapshot reactor=counter") {
            _ = echo.waitForExit(timeout: .milliseconds(20))
        }
        let second = try topology.run("flowctl", ["action", "counter", "increase"] + config)
        #expect(second.status == 0)
        #expect(echo.waitForExit(timeout: .seconds(10)) == 0)
        let lines = echo.output.split(separator: "\n").filter { $0.hasPrefix("snapshot") || $0.hasPrefix("state") }
        #expect(lines.count == 4)
        #expect(lines.first?.hasPrefix("snapshot reactor=counter seq=3") == true)
        #expect(lines.last?.hasPrefix("state reactor=counter seq=6") == true)
    }
}

@Suite("reactor-host security", .serialized)
struct ReactorHostSecurityTests {
    @Test("Over tcp with CURVE a known client key gets actions and states through; an unknown one gets nothing in")
    func curveAllowsOnlyKnownKeys() throws {
        let keys = try TestKeys(["daemon", "client", "intruder"])
        defer { keys.remove() }
        let (actionsEndpoint, statesEndpoint) = (try freeTCPEndpoint(), try freeTCPEndpoint())
        func topologyYAML(clientKey: String) -> String {
            """
            endpoints:
              ingress: ipc://${FLOWBUS_RUN_DIR}/ingress.sock
              events: ipc://${FLOWBUS_RUN_DIR}/events.sock
              control: ipc://${FLOWBUS_RUN_DIR}/control.sock
            heartbeatMilliseconds: 50
            reactors:
              demo:
                actions: \(actionsEndpoint)
                states: \(statesEndpoint)
                serves: [counter, login, movie/]
            security:
              serverKey: \(keys.path)/daemon.key
              serverPublicKey: \(keys.path)/daemon.pub
              clientKey: \(keys.path)/\(clientKey).key
              allowedClients: [\(keys.path)/client.pub]
            """
        }
        let topology = try TestTopology(configYAML: topologyYAML(clientKey: "client"))
        let host = try topology.start("reactor-host", arguments: ["--config", topology.configPath, "--host", "demo"])
        let diagnostics = try BusSubscriber(endpoint: statesEndpoint, topics: ["diag/"], curve: topology.config.curve)
        #expect(
            try diagnostics.waitUntilConnected(timeout: .seconds(20)), "reactor-host did not start:\n\(host.output)")

        let view = try ReactorView(reactorID: "counter", config: topology.config)
        try view.send("increase")
        #expect(try view.waitForAcknowledgement(timeout: .seconds(10)))
        let seen = try states(view, as: CounterState.self) { $0 == CounterState(value: 1, isLoading: false) }
        #expect(seen.last?.state == CounterState(value: 1, isLoading: false))

        let intruder = try TestTopology(configYAML: topologyYAML(clientKey: "intruder"))
        let intruderView = try ReactorView(reactorID: "counter", config: intruder.config)
        try intruderView.send("increase")
        #expect(try intruderView.waitForAcknowledgement(timeout: .milliseconds(1500)) == false)
        #expect(
            try intruderView.next(timeout: .milliseconds(500)) == nil, "no snapshot or state reaches an unknown key")
        let eavesdropper = try BusSubscriber(endpoint: statesEndpoint, topics: [""], curve: intruder.config.curve)
        #expect(try eavesdropper.waitUntilConnected(timeout: .milliseconds(500)) == false)

        // The refusal is published; nothing of the intruder's was applied; no secret was logged.
        let refusal = try diagnostics.next(timeout: .seconds(5))
        guard case .message(.diagnostic(let diagnostic)) = refusal else {
            Issue.record("expected diag/unauthorized, got \(String(describing: refusal))")
            return
        }
        #expect(diagnostic.reason == .unauthorized)
        let again = try ReactorView(reactorID: "counter", config: topology.config)
        let current = try again.next(CounterState.self, timeout: .seconds(10))
        #expect(current?.state == CounterState(value: 1, isLoading: false), "the intruder's increase was not applied")
        #expect(host.terminate() == 0)
        for secret in keys.secrets { #expect(!host.output.contains(secret)) }
    }
}
