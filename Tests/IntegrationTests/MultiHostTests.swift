import FlowBus
import FlowBusTesting
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
    .enabled(if: NetworkNamespaces.usable, NetworkNamespaces.skipComment))
struct MultiHostTests {
    @Test("A stepper's step, an action and the reactor's step cross the network")
    func stepsAndActionsCrossHosts() throws {
        let site = try MultiHostSite()
        defer { site.tearDown() }
        try site.startDaemons()

        // flowd is a CURVE client of the reactor host too: it watches its heartbeats.
        try site.waitUntil("flowd hears the reactor host's heartbeats") {
            let status = try site.run(.client, ["status", "--json", "--timeout", "5"])
            let peers = (jsonObject(status.output)?["peers"] as? [String: Any] ?? [:]).values.compactMap { $0 as? [String: Any] }
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
            ["echo", "state", "login", "--count", "3", "--json", "--idle-timeout", "60", "--config", site.client.config],
            name: "view", mayExit: true)
        try site.waitForOutput(of: view, matching: "\"kind\":\"snapshot\"")

        // The action crosses to the reactor host; the reactor publishes apiKeyIsComplete to flowd.
        let action = try site.run(.client, ["action", "login", "submit", "apiKey=k-23452", "--timeout", "30"])
        #expect(action.status == 0, "the action was not acknowledged\n\(action.transcript)")
        view.expectExit(0, within: .seconds(60))
        let states = view.stdoutLines.compactMap(jsonObject).compactMap { $0["state"] as? [String: Any] }
        #expect(states.count == 3, "snapshot and two states expected\n\(view.transcript)")
        #expect(states.contains { $0["isSubmitting"] as? Bool == true }, "the login reactor never reported submitting\n\(view.transcript)")
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
        let trace = info.output.split(separator: "\n").compactMap { jsonObject(String($0))?["message"] as? [String: Any] }.map { message in
            "\(message["topic"] as? String ?? "?") \(message["name"] as? String ?? message["step"] as? String ?? "?")"
        }
        #expect(
            trace == [
                "step/apikey apiKeyIsComplete", "nav/did/MainFlow apiKeyIsComplete", "step/dashboard settings", "nav/did/MainFlow settings",
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
        // request, a subscription.
        func asIntruder(_ arguments: [String]) throws -> MultiHostSite.Outcome {
            try site.run(.client, arguments + ["--timeout", "3", "--config", intruder], config: false)
        }
        let step = try asIntruder(["step", "apiKeyIsComplete", "--as", "apikey"])
        #expect(step.status == OutcomeExit.noAnswer.rawValue && step.errorOutput.contains("is it running?"), "\(step.transcript)")
        let action = try asIntruder(["action", "counter", "increase"])
        #expect(action.status != 0 && action.errorOutput.contains("did not acknowledge"), "\(action.transcript)")
        let status = try asIntruder(["status"])
        #expect(status.status != 0, "\(status.transcript)")
        let record = try asIntruder(["record", site.client.directory.appendingPathComponent("intruder.fbrec").path])
        #expect(record.status != 0 && record.errorOutput.contains("no publisher answered"), "\(record.transcript)")

        // The daemons refused the client host's address and applied nothing.
        #expect(site.flowd.stderr.contains("refused a connection from \(site.address(.client))"), "\(site.flowd.transcript)")
        #expect(site.reactorHost.stderr.contains("connection from \(site.address(.client)) refused"), "\(site.reactorHost.transcript)")
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
        #expect((jsonObject(counter.output)?["state"] as? [String: Any])?["value"] as? Int == 0, "\(counter.transcript)")

        // The same step with the allowed key, from the same host, is applied.
        let allowed = try site.run(.client, ["step", "apiKeyIsComplete", "--as", "apikey", "--timeout", "30"])
        #expect(allowed.status == 0, "\(allowed.transcript)")
        try site.waitUntil("flowd binds stepper dashboard (the allowed step applied)") {
            try site.run(.client, ["status", "--timeout", "5"]).output.contains("dashboard -> ")
        }

        try site.stopDaemons()
    }
}

/// Whether this machine lets the test build its own network: iproute2's `ip` is there and may
/// create a namespace, a bridge and a veth pair, and run a program inside (root, or
/// CAP_SYS_ADMIN with CAP_NET_ADMIN).
enum NetworkNamespaces {
    static let skipComment: Comment = """
        needs iproute2's `ip` and permission to create network namespaces, veth pairs and a bridge \
        (root, or CAP_SYS_ADMIN and CAP_NET_ADMIN); the reason is on standard error
        """

    /// The `ip` executable: the first in PATH, else in /usr/sbin or /sbin (not always in a user's PATH).
    static let ip: URL? = {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
        let directories = path.split(separator: ":").map(String.init) + ["/usr/sbin", "/sbin"]
        return directories.map { URL(fileURLWithPath: $0).appendingPathComponent("ip") }
            .first { FileManager.default.isExecutableFile(atPath: $0.path) }
    }()

    /// Why namespaces cannot be used here; nil when they can.
    static let problem: String? = {
        guard let ip else { return "`ip` (iproute2) is not installed: apt-get install iproute2" }
        let probe = "\(Network.prefix)-\(getpid())-probe"
        defer { _ = try? IP.run(ip, ["netns", "delete", probe]) }
        for command in [
            ["netns", "add", probe], ["-n", probe, "link", "add", "br0", "type", "bridge"],
            ["-n", probe, "link", "add", "v0", "type", "veth", "peer", "name", "v1"], ["netns", "exec", probe, "true"],
        ] {
            do {
                try IP.run(ip, command)
            } catch {
                return "\(error)"
            }
        }
        return nil
    }()

    /// Says why on standard error, once, when not.
    static let usable: Bool = {
        guard let problem else { return true }
        FileHandle.standardError.write(Data("MultiHostTests skipped: \(problem)\n".utf8))
        return false
    }()
}

/// Runs `ip` and waits for it (setup commands, not the topology's processes).
enum IP {
    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    @discardableResult
    static func run(_ ip: URL, _ arguments: [String]) throws -> String {
        let process = Process()
        process.executableURL = ip
        process.arguments = arguments
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        process.standardInput = FileHandle.nullDevice
        do {
            try process.run()
        } catch {
            throw Failure(description: "cannot run \(ip.path): \(error.localizedDescription)")
        }
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        guard process.terminationReason == .exit, process.terminationStatus == 0 else {
            let said = text.trimmingCharacters(in: .whitespacesAndNewlines)
            throw Failure(description: "`ip \(arguments.joined(separator: " "))` failed (status \(process.terminationStatus)): \(said)")
        }
        return text
    }
}

/// Network namespaces made for one test: a switch namespace holding a bridge, and one namespace
/// per host with its `eth0` (a veth pair to the bridge) on a private /24. Nothing is added to
/// the machine's own namespace; deleting the namespaces deletes the links.
final class Network {
    /// Names start with it, then the pid of the test process that made them.
    static let prefix = "fbmh"

    let ip: URL
    let id: String
    let subnet: String
    let hosts: [String]
    private var created: [String] = []

    /// Namespace `<prefix>-<pid>-<random>-<host>` for each host, addresses `<subnet>.1`, `.2`, ….
    init(hosts: [String]) throws {
        guard let ip = NetworkNamespaces.ip else { throw HarnessError("`ip` is not installed") }
        self.ip = ip
        self.hosts = hosts
        id = "\(Self.prefix)-\(getpid())-\(String(UInt16.random(in: 0 ... .max), radix: 16))"
        subnet = "10.213.\(Int.random(in: 1...254))"
        Self.removeLeftovers(ip: ip)
        do {
            let lan = try add("lan")
            try IP.run(ip, ["-n", lan, "link", "set", "lo", "up"])
            try IP.run(ip, ["-n", lan, "link", "add", "br0", "type", "bridge"])
            try IP.run(ip, ["-n", lan, "link", "set", "br0", "up"])
            for (index, host) in hosts.enumerated() {
                let namespace = try add(host)
                let port = "p\(index)"
                try IP.run(ip, ["-n", lan, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", namespace])
                try IP.run(ip, ["-n", lan, "link", "set", port, "master", "br0", "up"])
                try IP.run(ip, ["-n", namespace, "link", "set", "lo", "up"])
                try IP.run(ip, ["-n", namespace, "address", "add", "\(address(of: host))/24", "dev", "eth0"])
                try IP.run(ip, ["-n", namespace, "link", "set", "eth0", "up"])
            }
        } catch {
            tearDown()
            throw HarnessError("cannot build the test network: \(error)")
        }
    }

    deinit { tearDown() }

    func namespace(of host: String) -> String { "\(id)-\(host)" }

    func address(of host: String) -> String {
        guard let index = hosts.firstIndex(of: host) else { preconditionFailure("no host \(host)") }
        return "\(subnet).\(index + 1)"
    }

    /// Kills what still runs inside the namespaces and deletes them.
    func tearDown() {
        for namespace in created.reversed() { Self.delete(namespace, ip: ip) }
        created.removeAll()
    }

    private func add(_ host: String) throws -> String {
        let name = namespace(of: host)
        try IP.run(ip, ["netns", "add", name])
        created.append(name)
        return name
    }

    private static func delete(_ namespace: String, ip: URL) {
        let pids = (try? IP.run(ip, ["netns", "pids", namespace])) ?? ""
        for pid in pids.split(whereSeparator: \.isWhitespace).compactMap({ pid_t($0) }) { kill(pid, SIGKILL) }
        _ = try? IP.run(ip, ["netns", "delete", namespace])
    }

    /// Namespaces of this prefix whose test process is gone (it crashed or was killed).
    private static func removeLeftovers(ip: URL) {
        let listed = (try? IP.run(ip, ["netns", "list"])) ?? ""
        for line in listed.split(separator: "\n") {
            guard let name = line.split(separator: " ").first.map(String.init), name.hasPrefix("\(prefix)-") else { continue }
            let parts = name.split(separator: "-")
            guard parts.count >= 3, let pid = pid_t(parts[1]), pid != getpid() else { continue }
            if kill(pid, 0) != 0 && errno == ESRCH { delete(name, ip: ip) }
        }
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
                name: "keygen \(name)", executable: BuiltProducts.executable("flowctl"), arguments: ["keygen", name, "--dir", generated.path],
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
                if file.hasSuffix(".key") { try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: target.path) }
            }
        }
        let security: [Host: String] = [
            .flowd: Self.security(key: "flowd", allowing: ["client", "reactors"]),
            .reactors: Self.security(key: "reactors", allowing: ["client", "flowd"]),
            .client: Self.security(key: "client"),
        ]
        for host in Host.allCases {
            try topology(security: security[host] ?? "").write(toFile: machine(host).config, atomically: true, encoding: .utf8)
        }
        let intruder = topology(security: Self.security(key: "intruder"))
        try intruder.write(to: client.directory.appendingPathComponent("intruder.yaml"), atomically: true, encoding: .utf8)
    }

    /// A `security:` section: the daemons' key pair and the clients admitted, for a daemon
    /// (`allowing` not nil); the daemons' public key and the host's own client key for all.
    private static func security(key: String, allowing allowed: [String]? = nil) -> String {
        var lines = ["serverPublicKey: keys/daemons.pub", "clientKey: keys/\(key).key"]
        if let allowed {
            lines += ["serverKey: keys/daemons.key", "allowedClients: [\(allowed.map { "keys/\($0).pub" }.joined(separator: ", "))]"]
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
    func start(_ host: Host, _ product: String, _ arguments: [String], name: String, mayExit: Bool = false) throws -> ManagedProcess {
        let process = try ManagedProcess(
            name: "\(name)@\(host.rawValue)", executable: ip,
            arguments: ["netns", "exec", network.namespace(of: host.rawValue), try BuiltProducts.executable(product).path] + arguments,
            in: machine(host).directory, mayExit: mayExit)
        processes.append(process)
        return process
    }

    /// Runs `flowctl ARGUMENTS` on `host` (with its config unless `config` is false) to its end.
    func run(_ host: Host, _ arguments: [String], config: Bool = true) throws -> Outcome {
        let configArguments = config ? ["--config", machine(host).config] : []
        let process = try start(host, "flowctl", arguments + configArguments, name: "flowctl \(arguments[0])", mayExit: true)
        let status = process.exitStatus(within: timeout)
        return Outcome(status: status, output: process.stdout, errorOutput: process.stderr, transcript: process.transcript)
    }

    /// flowd and the reactor host on their hosts, ready once `flowctl doctor` on the client host
    /// reaches both through CURVE.
    func startDaemons() throws {
        flowd = try start(.flowd, "flowd", ["--config", machine(.flowd).config], name: "flowd")
        reactorHost = try start(.reactors, "reactor-host", ["--config", machine(.reactors).config, "--host", "demo"], name: "reactor-host")
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
                throw HarnessError("\(daemon.name) exited while waiting until \(what)\n\(daemon.transcript)")
            }
            guard ContinuousClock.now < deadline else {
                let outputs = [flowd, reactorHost].compactMap { $0?.transcript }.joined(separator: "\n")
                throw HarnessError("not within \(timeout): \(what)\n\(outputs)")
            }
            Thread.sleep(forTimeInterval: 0.2)
        }
    }

    func waitForOutput(of process: ManagedProcess, matching pattern: String) throws {
        guard try process.waitForOutput(matching: pattern, timeout: timeout) else {
            throw HarnessError("\(process.name) did not print /\(pattern)/ within \(timeout)\n\(process.transcript)")
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
