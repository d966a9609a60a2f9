import FlowBusClient
import FlowBusConfiguration
import FlowBusWire
import Foundation

/// Drives an exploration's plans through a real flowd and compares what it does with the model:
/// each plan is a walk of fixed messages (``FlowWalker``) on a fresh flowd in a run directory of
/// its own (the config's `${FLOWBUS_RUN_DIR}`): every didNavigate, navigation command and
/// diagnostic flowd publishes must be the engine's, in order, and flowd's tree and bindings the
/// engine's after every message. The first difference ends the run, with the plan and the
/// messages that led to it.
public struct PlanRunner: Sendable {
    public var config: FlowBusConfig
    /// The config file flowd runs (a copy of it, in each plan's run directory).
    public var configPath: String
    /// The flowd executable.
    public var flowd: String
    /// Seconds to wait for flowd to answer, and for each message's outcome.
    public var timeout: Double

    public init(config: FlowBusConfig, configPath: String, flowd: String, timeout: Double = 10) {
        self.config = config
        self.configPath = configPath
        self.flowd = flowd
        self.timeout = timeout
    }

    /// What a run found.
    public struct Report: Sendable {
        public var plans = 0
        public var messages = 0
        /// The first difference between flowd and the model, if any.
        public var divergence: String?
        public var seconds = 0.0
    }

    /// Runs every plan, in order, until the first divergence.
    public func run(_ exploration: FlowExploration) async throws -> Report {
        var report = Report()
        let started = ContinuousClock.now
        let walker = FlowWalker(config: config, configPath: configPath, flowd: flowd, timeout: timeout)
        for (index, plan) in exploration.plans.enumerated() {
            report.plans += 1
            report.messages += plan.steps.count
            let outcome = try await walker.run(
                .fixed(plan.steps.map { .flow($0.message) }), restarts: 0, name: "plan \(index + 1)")
            if let failure = outcome.failure {
                let path = plan.steps.prefix(failure.message + 1).map { "\($0.message)" }.joined(separator: " → ")
                report.divergence = "plan \(index + 1) (\(path)): \(failure.text)"
                break
            }
        }
        let elapsed = ContinuousClock.now - started
        report.seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        return report
    }
}

/// A flowd of its own for one run: the config copied into a fresh run directory (its
/// `${FLOWBUS_RUN_DIR}`) with 50 ms heartbeats unless it sets them, started and answering. With
/// `journaled`, a config without `persistence:` gets a SQLite journal in that directory, so that
/// a ``restart()`` restores what the one before applied. `hosts` names reactor hosts to start
/// too, each by the config's `launch:` entry that is ready on its heartbeat
/// (`ready: { heartbeat: NAME }`), with `${FLOWBUS_CONFIG}` naming the copy.
final class FreshFlowd {
    let config: FlowBusConfig
    private let directory: URL
    private let flowd: String
    private let copy: String
    private let environment: [String: String]
    private let timeout: Double
    private let name: String
    private var process = Process()
    private var hostProcesses: [(name: String, process: Process)] = []
    private let log: URL
    private let logHandle: FileHandle

    init(
        configPath: String, flowd: String, timeout: Double, name: String, journaled: Bool = false,
        hosts: [String] = []
    ) throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "fbrun-\(UUID().uuidString.prefix(8).lowercased())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        var text = try String(contentsOfFile: configPath, encoding: .utf8)
        let keys = text.split(separator: "\n")
        if !keys.contains(where: { $0.hasPrefix("heartbeatMilliseconds:") }) {
            text += "\nheartbeatMilliseconds: 50\n"
        }
        if journaled && !keys.contains(where: { $0.hasPrefix("persistence:") }) {
            text += "\npersistence: { journal: \"\(directory.path)/journal.sqlite\" }\n"
        }
        copy = directory.appendingPathComponent("config.yaml").path
        try text.write(toFile: copy, atomically: true, encoding: .utf8)
        var environment = ProcessInfo.processInfo.environment
        environment["FLOWBUS_RUN_DIR"] = directory.path
        environment[FlowBusConfig.pathVariable] = copy
        self.environment = environment
        self.flowd = flowd
        self.timeout = timeout
        self.name = name
        log = directory.appendingPathComponent("flowd.log")
        let loaded: FlowBusConfig
        do {
            loaded = try FlowBusConfig.load(path: copy, environment: environment, expandingLaunch: !hosts.isEmpty)
            _ = FileManager.default.createFile(atPath: log.path, contents: nil)
            logHandle = try FileHandle(forWritingTo: log)
        } catch {
            try? FileManager.default.removeItem(at: directory)
            throw error
        }
        config = loaded
        do {
            try launch()
            for host in hosts { try launchHost(host) }
        } catch {
            stop()
            throw error
        }
    }

    private func launch() throws {
        process = Process()
        process.executableURL = URL(fileURLWithPath: flowd)
        process.arguments = ["--config", copy, "--log-level", "warning"]
        process.environment = environment
        process.standardOutput = logHandle
        process.standardError = logHandle
        try process.run()
        let deadline = ContinuousClock.now + .milliseconds(Int(timeout * 1000))
        while (try? StatusClient.fetch(
            endpoints: config.controlEndpoints, curve: config.curve, timeout: .milliseconds(50)))
            == nil
        {
            guard process.isRunning, ContinuousClock.now < deadline else {
                throw ClientError(.failed, "\(name): flowd did not answer within \(timeout) s\(output)")
            }
        }
    }

    /// Starts reactor host `host` by its launch entry; the caller waits for its heartbeat.
    private func launchHost(_ host: String) throws {
        guard
            let spec = config.launch?.first(where: { $0.ready?.heartbeat == host && !$0.oneShot }),
            let command = spec.command.first
        else {
            throw ClientError(
                .failed,
                "\(name): reactors.\(host) has sampleActions, so its host must run too: add a launch: entry that starts it "
                    + "with ready: { heartbeat: \(host) } (as config/demo.yaml's reactors entry)")
        }
        // Beside flowd, then beside this tool (a wrapper script may stand in for flowd).
        let searchDirectories =
            [URL(fileURLWithPath: flowd).deletingLastPathComponent()]
            + [Bundle.main.executableURL?.deletingLastPathComponent()].compactMap { $0 }
        guard let executable = Launcher.resolve(command, searchDirectories: searchDirectories, environment: environment)
        else {
            throw ClientError(
                .failed,
                "\(name): launch entry \(spec.name) runs \(command), which is neither beside \(flowd), nor beside this tool, nor in PATH"
            )
        }
        let process = Process()
        process.executableURL = executable
        process.arguments = Array(spec.command.dropFirst())
        process.environment = environment.merging(spec.env) { _, own in own }
        process.standardOutput = logHandle
        process.standardError = logHandle
        try process.run()
        hostProcesses.append((host, process))
    }

    /// Stops flowd (SIGTERM, or SIGKILL with `kill`) and starts it again on the same run
    /// directory, answering.
    func restart(kill: Bool = false) throws {
        Self.signal(process, kill ? SIGKILL : SIGTERM)
        process.waitUntilExit()
        try launch()
    }

    /// What flowd and the hosts printed last, to quote in a report.
    var output: String {
        let whose = hostProcesses.isEmpty ? "flowd's" : "flowd's and the reactor hosts'"
        return (try? String(contentsOf: log, encoding: .utf8)).map { "\n\(whose) output:\n\($0.suffix(2000))" } ?? ""
    }

    /// Signals a process's group (a wrapper script's children too), or the process alone when it
    /// has no group of its own.
    private static func signal(_ process: Process, _ signal: Int32) {
        let pid = process.processIdentifier
        if getpgid(pid) == pid, kill(-pid, signal) == 0 { return }
        kill(pid, signal)
    }

    /// Kills every process (the run's directory, journal included, goes with them).
    func stop() {
        for process in hostProcesses.map(\.process) + [process] where process.isRunning {
            Self.signal(process, SIGKILL)
            process.waitUntilExit()
        }
        hostProcesses = []
        try? logHandle.close()
        try? FileManager.default.removeItem(at: directory)
    }
}
