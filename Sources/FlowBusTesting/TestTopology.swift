import FlowBus
import FlowBusWire
import Foundation

/// A FlowBus topology for one test: a private temporary directory for its ipc endpoints, a
/// config written there, and the processes started for it. Everything is stopped and removed
/// when the topology is released, even when the test fails.
///
/// ```swift
/// let topology = try TestTopology(configYAML: yaml)
/// try topology.startFlowd()
/// let events = try topology.subscribe(["nav/did/"])
/// let stepper = try topology.stepper("wishlist/movies")
/// try stepper.publish("moviePicked", ["withMovieId": 23452])
/// ```
public final class TestTopology: @unchecked Sendable {
    /// The directory holding the endpoints, the config and each process's output.
    public let directory: URL
    /// The config file's path.
    public let configPath: String
    /// The config as loaded.
    public let config: FlowBusConfig
    private var processes: [ManagedProcess] = []
    private let lock = NSLock()

    /// Writes `configYAML` into a fresh directory; `${FLOWBUS_RUN_DIR}` in it names that directory.
    public init(configYAML: String) throws {
        let base = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("flowbus-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: base, withIntermediateDirectories: true)
        directory = base
        let path = base.appendingPathComponent("topology.yaml").path
        try configYAML.write(toFile: path, atomically: true, encoding: .utf8)
        configPath = path
        do {
            config = try FlowBusConfig.load(path: path, environment: ["FLOWBUS_RUN_DIR": base.path])
        } catch {
            throw HarnessError(error.description)
        }
    }

    /// Uses an existing config file (e.g. `config/demo.yaml`), with endpoints in a fresh directory.
    public convenience init(configFile: String) throws {
        try self.init(configYAML: try String(contentsOfFile: configFile, encoding: .utf8))
    }

    deinit {
        stopAll()
        try? FileManager.default.removeItem(at: directory)
    }

    /// The environment every process of this topology gets.
    public var environment: [String: String] {
        ["FLOWBUS_RUN_DIR": directory.path, FlowBusConfig.pathVariable: configPath]
    }

    /// Starts a built executable of this package with the topology's environment.
    @discardableResult
    public func start(_ executable: String, arguments: [String] = [], name: String? = nil) throws -> ManagedProcess {
        let label = name ?? executable
        let process = try ManagedProcess(
            name: label, executable: try BuiltProducts.executable(executable), arguments: arguments,
            environment: environment, outputURL: directory.appendingPathComponent("\(label.replacingOccurrences(of: "/", with: "_"))-\(UUID().uuidString.prefix(4)).log"))
        lock.withLock { processes.append(process) }
        return process
    }

    /// Starts `flowd` on this topology and waits until it answers status queries.
    @discardableResult
    public func startFlowd(arguments: [String] = [], timeout: Duration = .seconds(20)) throws -> ManagedProcess {
        let flowd = try start("flowd", arguments: ["--config", configPath] + arguments)
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            guard flowd.isRunning else {
                throw HarnessError("flowd exited during start-up:\n\(flowd.output)")
            }
            if (try? StatusClient.fetch(endpoint: config.endpoints.control, curve: config.curve, timeout: .milliseconds(200))) != nil { return flowd }
        }
        throw HarnessError("flowd did not answer within \(timeout):\n\(flowd.output)")
    }

    /// Runs a built executable to completion and returns its exit status and output.
    public func run(_ executable: String, _ arguments: [String], timeout: Duration = .seconds(30)) throws -> (status: Int32, output: String) {
        let process = try start(executable, arguments: arguments)
        guard let status = process.waitForExit(timeout: timeout) else {
            process.kill()
            throw HarnessError("\(executable) \(arguments.joined(separator: " ")) did not finish within \(timeout):\n\(process.output)")
        }
        return (status, process.output)
    }

    /// A stepper connected to flowd's ingress.
    public func stepper(_ stepperID: String, contentType: ContentType = .fbv) throws -> StepPublisher {
        try StepPublisher(stepperID: stepperID, config: config, contentType: contentType)
    }

    /// A subscriber to flowd's events, connected (it has seen a heartbeat) before it is returned.
    public func subscribe(_ topics: [String], timeout: Duration = .seconds(10)) throws -> BusSubscriber {
        let subscriber = try BusSubscriber(endpoint: config.endpoints.events, topics: topics, curve: config.curve)
        guard try subscriber.waitUntilConnected(timeout: timeout) else {
            throw HarnessError("no heartbeat from flowd's events endpoint \(config.endpoints.events) within \(timeout)")
        }
        return subscriber
    }

    /// flowd's status.
    public func status() throws -> WireParams {
        try StatusClient.fetch(endpoint: config.endpoints.control, curve: config.curve)
    }

    /// Stops every process this topology started (SIGTERM, then SIGKILL after a grace period).
    public func stopAll() {
        let running = lock.withLock { processes }
        for process in running.reversed() { process.terminate(timeout: .seconds(5)) }
    }
}

extension BusSubscriber {
    /// Collects messages until `count` matched `filter` or `timeout` passed.
    public func collect(_ count: Int, timeout: Duration = .seconds(10), where filter: (WireMessage) -> Bool = { _ in true }) throws -> [WireMessage] {
        var messages: [WireMessage] = []
        let deadline = ContinuousClock.now + timeout
        while messages.count < count {
            let left = ContinuousClock.now.duration(to: deadline)
            guard left > .zero, let received = try next(timeout: left) else { break }
            if case .message(let message) = received, filter(message) { messages.append(message) }
        }
        return messages
    }
}
