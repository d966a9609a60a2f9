import FlowBusClient
import FlowBusConfiguration
import FlowBusCoordinator
import FlowBusReactorHost
import FlowBusTesting
import FlowBusTools
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// flowd, a reactor host and a client machine (stepper, view, recorder) on three network
/// namespaces joined by a bridge, over tcp with CURVE: the deployment of docs/DEPLOYMENT.md.
@Suite(
    "Several hosts: flowd, a reactor host and a client in separate network namespaces", .serialized,
    .enabled(if: NetworkNamespaces.usable, Comment(rawValue: NetworkNamespaces.skipComment)))
struct MultiHostTests {
    @Test("A stepper's step, an action and the reactor's step cross the network")
    func stepsAndActionsCrossHosts() throws {
        let site = try MultiHostSite()
        defer { site.tearDown() }
        try site.startDaemons()

        // flowd is a CURVE client of the reactor host too: it watches its heartbeats.
        try site.waitUntil("flowd hears the reactor host's heartbeats") {
            let status = try site.run(.client, ["status", "--json", "--timeout", "5"])
            let peers = (jsonObject(status.output)?["peers"] as? [String: Any] ?? [:]).values.compactMap {
                $0 as? [String: Any]
            }
            return peers.contains { $0["role"] as? String == "reactor-host demo" && $0["alive"] as? Bool == true }
        }

        // Recording from the client host: it starts once heartbeats from both daemons arrived,
        // so nothing published afterwards is missed.
        let recording = site.client.directory.appendingPathComponent("journey.fbrec").path
        let recorder = try site.start(
            .client, "flowctl",
            ["record", recording, "--topics", "step/", "nav/did/", "--count", "4", "--config", site.client.config],
            name: "recorder", mayExit: true)
        try site.waitForOutput(of: recorder, matching: "^recording to .*flowd events.*reactor host demo states")

        // A view on the client host: the login reactor's snapshot, then its live states.
        let view = try site.start(
            .client, "flowctl",
            [
                "echo", "state", "login", "--count", "3", "--json", "--idle-timeout", "60", "--config",
                site.client.config,
            ],
            name: "view", mayExit: true)
        try site.waitForOutput(of: view, matching: "\"kind\":\"snapshot\"")

        // The action crosses to the reactor host; the reactor publishes apiKeyIsComplete to flowd.
        let action = try site.run(.client, ["action", "login", "submit", "apiKey=k-23452", "--timeout", "30"])
        #expect(action.status == 0, "the action was not acknowledged\n\(action.transcript)")
        view.expectExit(0, within: .seconds(60))
        let states = view.stdoutLines.compactMap(jsonObject).compactMap { $0["state"] as? [String: Any] }
        #expect(states.count == 3, "snapshot and two states expected\n\(view.transcript)")
        #expect(
            states.contains { $0["isSubmitting"] as? Bool == true },
            "the login reactor never reported submitting\n\(view.transcript)")
        #expect(states.last?["isSubmitting"] as? Bool == false && states.last?["error"] is NSNull, "\(view.transcript)")

        // flowd bound the dashboard's stepper: the reactor's step reached it and was applied.
        try site.waitUntil("flowd binds stepper dashboard (the login reactor's step applied)") {
            let status = try site.run(.client, ["status", "--timeout", "5"])
            return status.status == 0 && status.output.contains("dashboard -> ")
        }

        // A stepper on the client host.
        let step = try site.run(.client, ["step", "settings", "--as", "dashboard", "--timeout", "30"])
        #expect(step.status == 0, "flowd did not acknowledge the stepper's step\n\(step.transcript)")

        recorder.expectExit(0, within: .seconds(60))
        let info = try site.run(.client, ["info", recording, "--json", "--messages"], config: false)
        try #require(info.status == 0, "\(info.transcript)")
        let trace = info.output.split(separator: "\n").compactMap {
            jsonObject(String($0))?["message"] as? [String: Any]
        }.map { message in
            "\(message["topic"] as? String ?? "?") \(message["name"] as? String ?? message["step"] as? String ?? "?")"
        }
        #expect(
            trace == [
                "step/apikey apiKeyIsComplete", "nav/did/MainFlow apiKeyIsComplete", "step/dashboard settings",
                "nav/did/MainFlow settings",
            ], "\(info.output)")

        try site.stopDaemons()
    }

    @Test("A client whose key is not allowed gets nothing in, over the same network")
    func unknownKeyGetsNothingIn() throws {
        let site = try MultiHostSite()
        defer { site.tearDown() }
        try site.startDaemons()
        let intruder = site.client.directory.appendingPathComponent("intruder.yaml").path

        // Each would succeed with an allowed key: a step flowd applies, an action, a status
        // request, a subscription. The handshake is refused at once, so a second is plenty.
        func asIntruder(_ arguments: [String]) throws -> MultiHostSite.Outcome {
            try site.run(.client, arguments + ["--timeout", "1", "--config", intruder], config: false)
        }
        let step = try asIntruder(["step", "apiKeyIsComplete", "--as", "apikey"])
        #expect(
            step.status == OutcomeExit.noAnswer.rawValue && step.errorOutput.contains("is it running?"),
            "\(step.transcript)")
        let action = try asIntruder(["action", "counter", "increase"])
        #expect(action.status != 0 && action.errorOutput.contains("did not acknowledge"), "\(action.transcript)")
        let status = try asIntruder(["status"])
        #expect(status.status != 0, "\(status.transcript)")
        let record = try asIntruder(["record", site.client.directory.appendingPathComponent("intruder.fbrec").path])
        #expect(record.status != 0 && record.errorOutput.contains("no publisher answered"), "\(record.transcript)")

        // The daemons refused the client host's address, in the same words, and applied nothing.
        #expect(
            site.flowd.stderr.contains("connection from \(site.address(.client)) refused"), "\(site.flowd.transcript)")
        #expect(
            site.reactorHost.stderr.contains("connection from \(site.address(.client)) refused"),
            "\(site.reactorHost.transcript)")
        let after = try site.run(.client, ["status", "--json", "--timeout", "10"])
        try #require(after.status == 0, "\(after.transcript)")
        let flowdStatus = try #require(jsonObject(after.output), "\(after.output)")
        // Steppers of other processes: the root flow's own stepper is bound in flowd.
        let bindings = flowdStatus["bindings"] as? [[String: Any]] ?? []
        let remote = bindings.filter { $0["remote"] as? Bool == true }.compactMap { $0["stepper"] as? String }
        #expect(remote == ["apikey"], "the intruder's step was applied")
        let ingress = flowdStatus["ingress"] as? [String: Any]
        let refused = (ingress?["refused"] as? [String: Any])?["unauthorized"] as? Int ?? 0
        #expect(
            refused >= 1 && ingress?["received"] as? Int == 0,
            "flowd did not count the refusal, or received something: \(String(describing: ingress))")
        let counter = try site.run(.client, ["state", "counter", "--json", "--timeout", "10"])
        #expect(
            (jsonObject(counter.output)?["state"] as? [String: Any])?["value"] as? Int == 0, "\(counter.transcript)")

        // The same step with the allowed key, from the same host, is applied.
        let allowed = try site.run(.client, ["step", "apiKeyIsComplete", "--as", "apikey", "--timeout", "30"])
        #expect(allowed.status == 0, "\(allowed.transcript)")
        try site.waitUntil("flowd binds stepper dashboard (the allowed step applied)") {
            try site.run(.client, ["status", "--timeout", "5"]).output.contains("dashboard -> ")
        }

        try site.stopDaemons()
    }
}

/// The machines of the test, their files (each host its own directory: its config and only the
/// keys it should hold), and the daemons running on them.
final class MultiHostSite {
    enum Host: String, CaseIterable {
        case flowd, reactors, client
    }

    struct Machine {
        var directory: URL
        var config: String
    }

    /// A finished one-shot command.
    struct Outcome {
        var status: Int32?
        var output: String
        var errorOutput: String
        var transcript: String
    }

    let network: Network
    let ip: URL
    private let root: TemporaryDirectory
    private(set) var processes: [ManagedProcess] = []
    private(set) var flowd: ManagedProcess!
    private(set) var reactorHost: ManagedProcess!
    let timeout = Duration.seconds(90)

    var client: Machine { machine(.client) }

    init() throws {
        network = try Network(hosts: Host.allCases.map(\.rawValue))
        ip = network.ip
        root = try TemporaryDirectory()
        try writeKeysAndConfigs()
    }

    func machine(_ host: Host) -> Machine {
        let directory = root.url.appendingPathComponent(host.rawValue)
        return Machine(directory: directory, config: directory.appendingPathComponent("topology.yaml").path)
    }

    func address(_ host: Host) -> String { network.address(of: host.rawValue) }

    /// Keys from `flowctl keygen`, distributed as docs/DEPLOYMENT.md says: the daemons' secret
    /// on the daemon hosts, each host's client secret on that host only, public keys where needed.
    private func writeKeysAndConfigs() throws {
        let generated = root.url.appendingPathComponent("keygen")
        for name in ["daemons", "flowd", "reactors", "client", "intruder"] {
            let keygen = try ManagedProcess(
                name: "keygen \(name)", executable: BuiltProducts.executable("flowctl"),
                arguments: ["keygen", name, "--dir", generated.path],
                in: root.url, mayExit: true)
            keygen.expectExit(0)
        }
        let holdings: [Host: [String]] = [
            .flowd: ["daemons.key", "daemons.pub", "flowd.key", "client.pub", "reactors.pub"],
            .reactors: ["daemons.key", "daemons.pub", "reactors.key", "client.pub", "flowd.pub"],
            .client: ["daemons.pub", "client.key", "intruder.key"],
        ]
        for (host, files) in holdings {
            let keys = machine(host).directory.appendingPathComponent("keys")
            try FileManager.default.createDirectory(at: keys, withIntermediateDirectories: true)
            for file in files {
                let target = keys.appendingPathComponent(file)
                try FileManager.default.copyItem(at: generated.appendingPathComponent(file), to: target)
                if file.hasSuffix(".key") {
                    try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: target.path)
                }
            }
        }
        let security: [Host: String] = [
            .flowd: Self.security(key: "flowd", allowing: ["client", "reactors"]),
            .reactors: Self.security(key: "reactors", allowing: ["client", "flowd"]),
            .client: Self.security(key: "client"),
        ]
        for host in Host.allCases {
            try topology(security: security[host] ?? "").write(
                toFile: machine(host).config, atomically: true, encoding: .utf8)
        }
        let intruder = topology(security: Self.security(key: "intruder"))
        try intruder.write(
            to: client.directory.appendingPathComponent("intruder.yaml"), atomically: true, encoding: .utf8)
    }

    /// A `security:` section: the daemons' key pair and the clients admitted, for a daemon
    /// (`allowing` not nil); the daemons' public key and the host's own client key for all.
    private static func security(key: String, allowing allowed: [String]? = nil) -> String {
        var lines = ["serverPublicKey: keys/daemons.pub", "clientKey: keys/\(key).key"]
        if let allowed {
            lines += [
                "serverKey: keys/daemons.key",
                "allowedClients: [\(allowed.map { "keys/\($0).pub" }.joined(separator: ", "))]",
            ]
        }
        return lines.joined(separator: "\n  ")
    }

    /// The topology every host shares; only `security:` differs between them.
    private func topology(security: String) -> String {
        """
        endpoints:
          ingress: tcp://\(address(.flowd)):5560
          events: tcp://\(address(.flowd)):5561
          control: tcp://\(address(.flowd)):5562
        heartbeatMilliseconds: 100
        coordinator: { flow: MainFlow, step: apiKey }
        flows:
          MainFlow:
            steps:
              apiKey:
                - setRoot: { screen: apikey, stepper: apikey }
              apiKeyIsComplete:
                - push: { screen: dashboard, stepper: dashboard }
              settings:
                - push: { screen: settings }
        reactors:
          demo:
            actions: tcp://\(address(.reactors)):5570
            states: tcp://\(address(.reactors)):5571
            serves: [counter, login, movie/]
        security:
          \(security)

        """
    }

    /// Starts a built product inside `host`'s namespace (`ip netns exec`).
    func start(
        _ host: Host, _ product: String, _ arguments: [String], name: String, mayExit: Bool = false
    ) throws -> ManagedProcess {
        let process = try ManagedProcess(
            name: "\(name)@\(host.rawValue)", executable: ip,
            arguments: [
                "netns", "exec", network.namespace(of: host.rawValue), try BuiltProducts.executable(product).path,
            ] + arguments,
            in: machine(host).directory, mayExit: mayExit)
        processes.append(process)
        return process
    }

    /// Runs `flowctl ARGUMENTS` on `host` (with its config unless `config` is false) to its end.
    func run(_ host: Host, _ arguments: [String], config: Bool = true) throws -> Outcome {
        let configArguments = config ? ["--config", machine(host).config] : []
        let process = try start(
            host, "flowctl", arguments + configArguments, name: "flowctl \(arguments[0])", mayExit: true)
        let status = process.exitStatus(within: timeout)
        return Outcome(
            status: status, output: process.stdout, errorOutput: process.stderr, transcript: process.transcript)
    }

    /// flowd and the reactor host on their hosts, ready once `flowctl doctor` on the client host
    /// reaches both through CURVE.
    func startDaemons() throws {
        flowd = try start(.flowd, "flowd", ["--config", machine(.flowd).config], name: "flowd")
        reactorHost = try start(
            .reactors, "reactor-host", ["--config", machine(.reactors).config, "--host", "demo"], name: "reactor-host")
        var doctor: Outcome?
        try waitUntil("flowctl doctor on the client host passes") {
            doctor = try run(.client, ["doctor"])
            return doctor?.status == 0
        }
        #expect(doctor?.output.contains("all checks passed") == true, "\(doctor?.transcript ?? "")")
    }

    /// SIGTERM to both daemons: each stops cleanly.
    func stopDaemons() throws {
        #expect(reactorHost.terminate() == 0, "\(reactorHost.transcript)")
        #expect(flowd.terminate() == 0, "\(flowd.transcript)")
    }

    /// Polls `condition` until it holds; fails early when a daemon died, with its output.
    func waitUntil(_ what: String, _ condition: () throws -> Bool) throws {
        let deadline = ContinuousClock.now + timeout
        while try !condition() {
            for daemon in [flowd, reactorHost].compactMap({ $0 }) where !daemon.isRunning {
                throw HarnessError(.exited, "\(daemon.name) exited while waiting until \(what)\n\(daemon.transcript)")
            }
            guard ContinuousClock.now < deadline else {
                let outputs = [flowd, reactorHost].compactMap { $0?.transcript }.joined(separator: "\n")
                throw HarnessError(.timedOut, "not within \(timeout): \(what)\n\(outputs)")
            }
            Thread.sleep(forTimeInterval: 0.2)
        }
    }

    func waitForOutput(of process: ManagedProcess, matching pattern: String) throws {
        guard try process.waitForOutput(matching: pattern, timeout: timeout) else {
            throw HarnessError(
                .timedOut, "\(process.name) did not print /\(pattern)/ within \(timeout)\n\(process.transcript)")
        }
    }

    /// Stops every process, then deletes the namespaces and the files.
    func tearDown() {
        for process in processes.reversed() { process.stop() }
        network.tearDown()
    }
}

/// A line of `--json` output as a dictionary.
private func jsonObject(_ line: String) -> [String: Any]? {
    (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any]
}
