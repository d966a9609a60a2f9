@_exported public import FlowBusClient
import FlowBusConfiguration
import FlowBusTools
import FlowBusWire
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A FlowBus topology for one test: a private temporary directory for its ipc endpoints, a
/// config written there, and the processes started for it. Everything is stopped and removed
/// when the topology is released, even when the test fails.
///
/// ```swift
/// try withTopology(configFile: "config/demo.yaml") { topology in
///     try topology.launch()                               // flowd, then the reactor host
///     let trace = try topology.navigationTrace()
///     try topology.step("moviePicked", ["withMovieId": 23452], as: "wishlist/movies")
///     try trace.expect(["WishlistFlow.moviePicked(withMovieId: 23452)"])
/// }
/// ```
/// Processes are expected to keep running until the test stops them: one that ends by itself
/// fails the next call of the topology or of its traces with ``ProcessDied`` (name, exit status
/// or signal, last output). Every wait is bounded. Use a topology from one thread at a time.
public final class TestTopology: @unchecked Sendable {
    /// The directory holding the endpoints, the config and each process's output.
    public let directory: URL
    /// The config file's path.
    public let configPath: String
    /// The config as loaded.
    public let config: FlowBusConfig
    let watch = ProcessWatch()
    private let lock = NSLock()
    private var publishers: [String: StepPublisher] = [:]
    private var views: [String: ReactorView] = [:]
    private var traces: [any FinishableTrace] = []
    private var isTornDown = false

    /// Writes `configYAML` into a fresh directory; `${FLOWBUS_RUN_DIR}` in it names that
    /// directory and `${FLOWBUS_CONFIG}` the written file. With `heartbeat`, the daemons
    /// heartbeat at that interval (a short one lets traces connect and settle quickly).
    public init(configYAML: String, heartbeat: Duration? = nil) throws {
        directory = try Self.makeDirectory()
        let path = directory.appendingPathComponent("topology.yaml").path
        var yaml = configYAML
        if let heartbeat {
            yaml = Self.setting("heartbeatMilliseconds", to: "\(wholeMilliseconds(heartbeat))", in: yaml)
        }
        do {
            try yaml.write(toFile: path, atomically: true, encoding: .utf8)
            configPath = path
            let environment = ProcessInfo.processInfo.environment.merging([
                "FLOWBUS_RUN_DIR": directory.path, FlowBusConfig.pathVariable: path,
            ]) { _, new in new }
            config = try FlowBusConfig.load(path: path, environment: environment)
        } catch let error as ConfigError {
            try? FileManager.default.removeItem(at: directory)
            throw HarnessError(.invalidConfig, error.description)
        } catch {
            try? FileManager.default.removeItem(at: directory)
            throw error
        }
    }

    /// Uses an existing config file (e.g. `config/demo.yaml`, relative to the working directory:
    /// run `swift test` from the package root), with endpoints in a fresh directory.
    /// `appending` adds YAML (e.g. a `persistence:` section). The heartbeat is 50 ms unless
    /// `heartbeat` says otherwise (nil: the file's).
    public convenience init(configFile: String, appending: String = "", heartbeat: Duration? = .milliseconds(50)) throws
    {
        let text: String
        do {
            text = try String(contentsOfFile: configFile, encoding: .utf8)
        } catch {
            throw HarnessError(
                .invalidConfig,
                "cannot read \(configFile) (from \(FileManager.default.currentDirectoryPath)): \(error.localizedDescription)"
            )
        }
        try self.init(configYAML: text + (appending.isEmpty ? "" : "\n" + appending + "\n"), heartbeat: heartbeat)
    }

    /// A topology built in code.
    public convenience init(_ builder: TopologyBuilder) throws {
        try self.init(configYAML: try builder.yaml())
    }

    deinit {
        tearDown()
    }

    /// The environment every process of this topology gets.
    public var environment: [String: String] {
        ["FLOWBUS_RUN_DIR": directory.path, FlowBusConfig.pathVariable: configPath]
    }

    // MARK: Processes

    /// Every process started so far, in start order.
    public var processes: [ManagedProcess] { watch.processes }

    /// The process last started under `name`.
    public func process(named name: String) -> ManagedProcess? {
        processes.last { $0.name == name }
    }

    /// Starts an executable with the topology's environment, and waits until it is `ready`.
    ///
    /// `executable` is a product built by this package (or the package under test), else a
    /// command in `PATH`. The process is expected to run until the test stops it; with
    /// `mayExit` it may exit by itself (a one-shot). `ready` is one of the `launch:` section's
    /// probes: `control` (flowd answers), `heartbeat` (a reactor host of the config), `logLine`
    /// (a regular expression), `delayMs`. Without it, started is ready.
    @discardableResult
    public func start(
        _ executable: String, arguments: [String] = [], name: String? = nil, environment extra: [String: String] = [:],
        ready: LaunchSpec.Readiness? = nil, mayExit: Bool = false, timeout: Duration = .seconds(30)
    ) throws -> ManagedProcess {
        let label = name ?? executable
        let environment = self.environment.merging(extra) { _, new in new }
        let searchEnvironment = ProcessInfo.processInfo.environment.merging(environment) { _, new in new }
        guard
            let url = Launcher.resolve(
                executable, searchDirectories: [BuiltProducts.directory], environment: searchEnvironment)
        else {
            throw HarnessError(
                .notBuilt,
                "\(executable) is neither built in \(BuiltProducts.directory.path) (run `swift build`, or set FLOWBUS_BIN_DIR) nor in PATH"
            )
        }
        let stem = label.replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: " ", with: "_")
        let process = try ManagedProcess(
            name: label, executable: url, arguments: arguments, environment: environment,
            outputURL: directory.appendingPathComponent("\(stem)-\(UUID().uuidString.prefix(4)).log"), mayExit: mayExit)
        watch.add(process)
        try waitUntilReady(process, ready, timeout: timeout)
        return process
    }

    /// Starts `flowd` on this topology and waits until it answers status queries.
    @discardableResult
    public func startFlowd(arguments: [String] = [], timeout: Duration = .seconds(20)) throws -> ManagedProcess {
        try start(
            "flowd", arguments: ["--config", configPath] + arguments, ready: LaunchSpec.Readiness(control: true),
            timeout: timeout)
    }

    /// Starts reactor host `host` of the config (`reactor-host --config FILE --host HOST`, or
    /// another executable taking the same options) and waits for its first heartbeat.
    @discardableResult
    public func startReactorHost(
        _ host: String, executable: String = "reactor-host", arguments: [String] = [], timeout: Duration = .seconds(20)
    ) throws -> ManagedProcess {
        guard config.reactors[host] != nil else {
            throw HarnessError(
                .notDeclared,
                "the topology declares no reactor host \(host) (declared: \(config.reactors.keys.sorted().joined(separator: ", ")))"
            )
        }
        return try start(
            executable, arguments: ["--config", configPath, "--host", host] + arguments, name: host,
            ready: LaunchSpec.Readiness(heartbeat: host), timeout: timeout)
    }

    /// Starts the processes of the config's `launch:` section (all, or `only` these and what
    /// they are `after`), in dependency order, each once those it is after are ready, as
    /// `flowctl launch` does. A one-shot entry is ready when it exited with status 0.
    ///
    /// Restart policies do not apply: a crash fails the test.
    /// - Returns: the processes, in start order.
    @discardableResult
    public func launch(only names: [String]? = nil) throws -> [ManagedProcess] {
        let ordered: [LaunchSpec]
        do {
            // As `flowctl launch` reads it: ${…} in launch: expanded, FLOWBUS_CONFIG naming this file.
            let launchEnvironment = ProcessInfo.processInfo.environment
                .merging(["FLOWBUS_RUN_DIR": directory.path, FlowBusConfig.pathVariable: configPath]) { _, new in new }
                .merging(environment) { _, new in new }
            let launchConfig = try FlowBusConfig.load(
                path: configPath, environment: launchEnvironment, expandingLaunch: true)
            ordered = try Launcher(
                config: launchConfig,
                options: LaunchOptions(searchDirectories: [BuiltProducts.directory], environment: launchEnvironment),
                source: configPath
            ).specs
        } catch {
            throw HarnessError(.invalidConfig, error.description)
        }
        var wanted = Set(names ?? ordered.map(\.name))
        if let names {
            for name in names where !ordered.contains(where: { $0.name == name }) {
                throw HarnessError(
                    .notDeclared,
                    "the launch: section has no entry \(name) (it has \(ordered.map(\.name).joined(separator: ", ")))")
            }
            // Dependencies first in `ordered`: walking it backwards reaches each before its own.
            for spec in ordered.reversed() where wanted.contains(spec.name) { wanted.formUnion(spec.after) }
        }
        var started: [ManagedProcess] = []
        for spec in ordered where wanted.contains(spec.name) {
            let timeout = Duration.milliseconds(spec.ready?.timeoutMs ?? 30_000)
            started.append(
                try start(
                    spec.command[0], arguments: Array(spec.command.dropFirst()), name: spec.name, environment: spec.env,
                    ready: spec.ready,
                    mayExit: spec.oneShot, timeout: timeout))
            if spec.oneShot, spec.ready == nil { try waitForOneShot(started[started.count - 1], timeout: timeout) }
        }
        return started
    }

    /// Runs an executable to completion and returns its exit status and output.
    public func run(
        _ executable: String, _ arguments: [String], timeout: Duration = .seconds(30)
    ) throws -> (status: Int32, output: String) {
        let process = try start(executable, arguments: arguments, mayExit: true)
        guard let status = process.waitForExit(timeout: timeout) else {
            process.kill()
            throw HarnessError(
                .timedOut,
                "\(executable) \(arguments.joined(separator: " ")) did not finish within \(readable(timeout)):\n\(process.outputTail())"
            )
        }
        return (status, process.output)
    }

    /// Fails with ``ProcessDied`` if a process ended although the test neither stopped it nor
    /// allowed it to exit. Every call of the topology and its traces checks this while it waits.
    public func checkProcesses() throws {
        try watch.check("while the test was running")
    }

    /// Every process with how it is doing and its last `lines` lines of output, for failure messages.
    public func summary(lines: Int = 20) -> String {
        processes.map { process in
            let state = process.termination.map(\.description) ?? "running"
            return
                "--- \(process.name) (pid \(process.processIdentifier), \(state)):\n\(process.outputTail(lines: lines))"
        }.joined(separator: "\n")
    }

    // MARK: The bus

    /// Publishes a step as stepper `stepperID` and waits for flowd's acknowledgement, so that
    /// steps of different steppers reach flowd in the order the test publishes them. Once it
    /// returns, flowd has published everything the step caused.
    ///
    /// - Returns: the step's sequence.
    /// - Throws: ``Refused`` if flowd refused it on arrival (e.g. `bad-params`); a step flowd
    ///   reads but does not apply (`not-visible`, `unbound-stepper`, …) is a diagnostic on the
    ///   events endpoint: assert it with ``NavigationTrace/expectDiagnostic(_:stepper:exhaustivity:timeout:sourceLocation:)``.
    @discardableResult
    public func step(
        _ name: String, _ params: WireParams = [:], as stepperID: String, timeout: Duration = .seconds(10)
    ) throws -> UInt64 {
        let publisher = try stepPublisher(stepperID)
        let sequence = try publisher.publish(name, params)
        try awaitAcknowledgement(
            of: publisher, sequence: sequence, what: "step \(MessageFormatter.step(name, params)) from \(stepperID)",
            timeout: timeout)
        return sequence
    }

    /// Publishes a Swift enum step through its Codable form (`AppStep.moviePicked(withMovieId: 1)`).
    @discardableResult
    public func step(_ step: some Encodable, as stepperID: String, timeout: Duration = .seconds(10)) throws -> UInt64 {
        let form = try canonicalForm(step)
        return try self.step(form.name, form.params, as: stepperID, timeout: timeout)
    }

    /// Sends a deep link (to every active flow) and waits for flowd's acknowledgement.
    @discardableResult
    public func deepLink(_ name: String, _ params: WireParams = [:], timeout: Duration = .seconds(10)) throws -> UInt64
    {
        let publisher = try stepPublisher("flowbus-testing/deeplink")
        let sequence = try publisher.publishDeepLink(name, params)
        try awaitAcknowledgement(
            of: publisher, sequence: sequence, what: "deep link \(MessageFormatter.step(name, params))",
            timeout: timeout)
        return sequence
    }

    /// A stepper connected to flowd's ingress, for what ``step(_:_:as:timeout:)`` does not cover
    /// (renderer reports, heartbeats, many steps before one acknowledgement).
    public func stepper(_ stepperID: String, contentType: ContentType = .fbv) throws -> StepPublisher {
        try StepPublisher(stepperID: stepperID, config: config, contentType: contentType)
    }

    /// Sends an action to reactor `reactorID` (on the host of the config that serves it) and
    /// waits for the host's acknowledgement. States it causes synchronously have been published
    /// when it returns.
    /// - Throws: ``Refused`` if the host refused it (`bad-action`, `unknown-reactor`, …).
    @discardableResult
    public func send(
        _ action: String, _ params: WireParams = [:], to reactorID: String, timeout: Duration = .seconds(10)
    ) throws -> UInt64 {
        let view = try reactorView(reactorID)
        let sequence = try view.send(action, params)
        try awaitAcknowledgement(
            of: view, sequence: sequence, what: "action \(MessageFormatter.step(action, params)) to \(reactorID)",
            timeout: timeout)
        return sequence
    }

    /// Sends a Swift enum action through its Codable form (`LoginAction.submit(apiKey: "k")`).
    @discardableResult
    public func send(_ action: some Encodable, to reactorID: String, timeout: Duration = .seconds(10)) throws -> UInt64
    {
        let form = try canonicalForm(action)
        return try send(form.name, form.params, to: reactorID, timeout: timeout)
    }

    /// Starts recording flowd's didNavigate events (and diagnostics, unless `diagnostics` is
    /// false) from now on; returns once the subscription is active.
    ///
    /// Navigations matching `ignoring` are not recorded at all. The trace is checked when
    /// `withTopology(_:sourceLocation:_:)` ends (with ``Exhaustivity/on``: nothing unasserted).
    public func navigationTrace(
        exhaustivity: Exhaustivity = .on, diagnostics: Bool = true,
        ignoring: @escaping (Navigation) -> Bool = { _ in false },
        timeout: Duration = .seconds(20)
    ) throws -> NavigationTrace {
        let trace = try NavigationTrace(
            topology: self, exhaustivity: exhaustivity, diagnostics: diagnostics, ignoring: ignoring, timeout: timeout)
        lock.withLock { traces.append(trace) }
        return trace
    }

    /// Starts recording the states of `reactorID`, from its snapshot on; returns once the
    /// snapshot arrived. Checked when `withTopology(_:sourceLocation:_:)` ends, like a navigation trace.
    public func stateTrace<State: Decodable & Equatable>(
        of reactorID: String, as type: State.Type = State.self, exhaustivity: Exhaustivity = .on,
        timeout: Duration = .seconds(20)
    ) throws -> StateTrace<State> {
        let trace = try StateTrace<State>(
            topology: self, reactorID: reactorID, exhaustivity: exhaustivity, timeout: timeout)
        lock.withLock { traces.append(trace) }
        return trace
    }

    /// A subscriber to flowd's events, connected (it has seen a heartbeat) before it is returned.
    public func subscribe(_ topics: [String], timeout: Duration = .seconds(10)) throws -> BusSubscriber {
        let subscriber = try BusSubscriber(endpoint: config.endpoints.events, topics: topics, curve: config.curve)
        guard try subscriber.waitUntilConnected(timeout: timeout) else {
            try checkProcesses()
            throw HarnessError(
                .timedOut,
                "no heartbeat from flowd's events endpoint \(config.endpoints.events) within \(readable(timeout))")
        }
        return subscriber
    }

    /// flowd's status.
    public func status(timeout: Duration = .seconds(3)) throws -> WireParams {
        do {
            return try StatusClient.fetch(endpoints: config.controlEndpoints, curve: config.curve, timeout: timeout)
        } catch {
            try checkProcesses()
            throw error
        }
    }

    // MARK: The end

    /// Checks the end of a test: no process died unexpectedly, and each trace with
    /// ``Exhaustivity/on`` has nothing unasserted (after settling). Traces are not checked once
    /// a process died: what they wait for may have died with it. `withTopology(_:sourceLocation:_:)`
    /// calls it when its body returns.
    public func finish(sourceLocation: SourceLocation = #_sourceLocation) throws {
        try watch.check("before the end of the test")
        guard !processes.contains(where: \.diedUnexpectedly) else { return }
        var failures: [String] = []
        for trace in lock.withLock({ traces }) {
            do {
                try trace.finish(sourceLocation: sourceLocation)
            } catch let failure as ExpectationFailure {
                failures.append(failure.message)
            } catch {
                failures.append("\(error)")
            }
        }
        guard failures.isEmpty else {
            throw ExpectationFailure(
                "at the end of the test: " + failures.joined(separator: "\n"), sourceLocation: sourceLocation)
        }
    }

    /// Stops every process this topology started (SIGTERM, then SIGKILL after a grace period),
    /// last started first.
    public func stopAll(timeout: Duration = .seconds(5)) {
        for process in processes.reversed() { process.terminate(timeout: timeout) }
    }

    /// Closes the connections, stops every process, keeps their output in memory and removes
    /// the directory (kept when `FLOWBUS_KEEP_TEST_DIR` is set). Safe to call more than once;
    /// deinit calls it.
    public func tearDown() {
        let first = lock.withLock {
            defer { isTornDown = true }
            return !isTornDown
        }
        guard first else { return }
        lock.withLock {
            traces.removeAll()
            publishers.removeAll()
            views.removeAll()
        }
        stopAll()
        for process in processes { process.preserveOutput() }
        if let keep = ProcessInfo.processInfo.environment["FLOWBUS_KEEP_TEST_DIR"], !keep.isEmpty, keep != "0" {
            FileHandle.standardError.write(
                Data("FlowBusTesting: kept \(directory.path) (FLOWBUS_KEEP_TEST_DIR)\n".utf8))
        } else {
            try? FileManager.default.removeItem(at: directory)
        }
    }

    // MARK: Internals

    private func stepPublisher(_ stepperID: String) throws -> StepPublisher {
        if let publisher = lock.withLock({ publishers[stepperID] }) { return publisher }
        let publisher = try StepPublisher(stepperID: stepperID, config: config)
        lock.withLock { publishers[stepperID] = publisher }
        return publisher
    }

    private func reactorView(_ reactorID: String) throws -> ReactorView {
        if let view = lock.withLock({ views[reactorID] }) { return view }
        let view = try ReactorView(reactorID: reactorID, config: config)
        lock.withLock { views[reactorID] = view }
        return view
    }

    private func awaitAcknowledgement(
        of publisher: StepPublisher, sequence: UInt64, what: String, timeout: Duration
    ) throws {
        let deadline = ContinuousClock.now + timeout
        while try !publisher.waitForAcknowledgement(timeout: .milliseconds(50)) {
            try watch.check("while waiting for flowd to acknowledge the \(what)")
            guard ContinuousClock.now < deadline else {
                throw HarnessError(
                    .timedOut,
                    "flowd did not acknowledge the \(what) within \(readable(timeout)): is it running on \(config.endpoints.ingress)?"
                )
            }
        }
        let refusal = publisher.refusals.last {
            $0.details["source"]?.stringValue == publisher.sourceID
                && $0.details["sequence"]?.intValue == Int64(clamping: sequence)
        }
        if let refusal { throw Refused(what: "the \(what)", diagnostic: refusal) }
    }

    private func awaitAcknowledgement(of view: ReactorView, sequence: UInt64, what: String, timeout: Duration) throws {
        let deadline = ContinuousClock.now + timeout
        while try !view.waitForAcknowledgement(timeout: .milliseconds(50)) {
            try watch.check("while waiting for the reactor host to acknowledge the \(what)")
            guard ContinuousClock.now < deadline else {
                throw HarnessError(
                    .timedOut,
                    "the reactor host did not acknowledge the \(what) within \(readable(timeout)): is it running?")
            }
        }
        if let refusal = view.refusal(for: sequence) { throw Refused(what: "the \(what)", diagnostic: refusal) }
    }

    private func waitUntilReady(_ process: ManagedProcess, _ ready: LaunchSpec.Readiness?, timeout: Duration) throws {
        guard let ready else { return }
        let deadline = ContinuousClock.now + timeout
        let how =
            ready.control == true
            ? "control"
            : ready.heartbeat.map { "heartbeat \($0)" } ?? ready.logLine.map { "log line /\($0)/" }
                ?? ready.delayMs.map { "\($0) ms delay" } ?? "started"
        func alive() throws {
            if process.diedUnexpectedly
                || (process.mayExit && !process.isRunning && process.termination?.isSuccess != true)
            {
                try watch.check("while starting (waiting for \(how))")
                if let termination = process.termination {
                    throw ProcessDied(
                        name: process.name, processIdentifier: process.processIdentifier, termination: termination,
                        outputTail: process.outputTail(), context: "while starting (waiting for \(how))")
                }
            }
        }
        func notReady() -> HarnessError {
            HarnessError(
                .timedOut,
                "\(process.name) was not ready (\(how)) within \(readable(timeout)); its last output:\n\(process.outputTail())"
            )
        }
        if let host = ready.heartbeat {
            guard let spec = config.reactors[host] else {
                throw HarnessError(
                    .notDeclared, "ready.heartbeat names reactor host \(host), which the topology does not declare")
            }
            let probe = try BusSubscriber(endpoint: spec.states, topics: ["hb/"], curve: config.curve)
            while try !probe.waitUntilConnected(timeout: .milliseconds(100)) {
                try alive()
                guard ContinuousClock.now < deadline else { throw notReady() }
            }
        } else if ready.control == true {
            while (try? StatusClient.fetch(
                endpoint: config.endpoints.control, curve: config.curve, timeout: .milliseconds(200))) == nil
            {
                try alive()
                guard ContinuousClock.now < deadline else { throw notReady() }
            }
        } else if let pattern = ready.logLine {
            while try !process.waitForOutput(matching: pattern, timeout: .milliseconds(100)) {
                try alive()
                guard ContinuousClock.now < deadline else { throw notReady() }
            }
        } else if let delay = ready.delayMs {
            // The config asks for a delay; it is part of the topology, not an assertion.
            let end = ContinuousClock.now + .milliseconds(delay)
            while ContinuousClock.now < end {
                try alive()
                Thread.sleep(forTimeInterval: 0.01)
            }
        }
        try alive()
    }

    private func waitForOneShot(_ process: ManagedProcess, timeout: Duration) throws {
        guard process.waitForExit(timeout: timeout) != nil else {
            throw HarnessError(
                .timedOut,
                "one-shot \(process.name) did not finish within \(readable(timeout)); its last output:\n\(process.outputTail())"
            )
        }
        if let termination = process.termination, !termination.isSuccess {
            throw ProcessDied(
                name: process.name, processIdentifier: process.processIdentifier, termination: termination,
                outputTail: process.outputTail(),
                context: "(a one-shot of the launch: section, which must exit with status 0)")
        }
    }

    /// A fresh directory under `$TMPDIR`, or /tmp when that is too long for ipc paths (108 bytes).
    private static func makeDirectory() throws -> URL {
        var parent = ProcessInfo.processInfo.environment["TMPDIR"] ?? "/tmp"
        while parent.count > 1, parent.hasSuffix("/") { parent.removeLast() }
        if parent.isEmpty || parent.utf8.count > 60 { parent = "/tmp" }
        var template = Array("\(parent)/flowbus-test.XXXXXX".utf8CString)
        guard let created = mkdtemp(&template) else {
            throw HarnessError(.unavailable, "cannot create a temporary directory in \(parent): errno \(errno)")
        }
        return URL(fileURLWithPath: String(cString: created), isDirectory: true)
    }

    /// `yaml` with the top-level `key` set to `value` (replaced, or added at the end).
    static func setting(_ key: String, to value: String, in yaml: String) -> String {
        var lines = yaml.components(separatedBy: "\n")
        if let index = lines.firstIndex(where: { $0.hasPrefix("\(key):") }) {
            lines[index] = "\(key): \(value)"
            return lines.joined(separator: "\n")
        }
        return yaml + (yaml.hasSuffix("\n") ? "" : "\n") + "\(key): \(value)\n"
    }
}

/// Runs `body` on a fresh topology and cleans up whatever happens: when `body` returns, the
/// traces are finished (nothing unasserted, with ``Exhaustivity/on``) and the processes checked
/// (none died unexpectedly); then, and also when `body` throws, every process is stopped
/// (SIGTERM, then SIGKILL) and the directory removed. On failure each process's last output is
/// written to standard error, to see what the daemons said.
///
/// ```swift
/// @Test func journey() throws {
///     try withTopology(TestTopology(configFile: "config/demo.yaml")) { topology in
///         try topology.startFlowd()
///         let trace = try topology.navigationTrace()
///         try topology.step("apiKeyIsComplete", as: "apikey")
///         try trace.expect(["MainFlow.apiKeyIsComplete", "WishlistFlow.movieList", "WatchedFlow.movieList"])
///     }
/// }
/// ```
@discardableResult
public func withTopology<Result>(
    _ topology: @autoclosure () throws -> TestTopology, sourceLocation: SourceLocation = #_sourceLocation,
    _ body: (TestTopology) throws -> Result
) throws -> Result {
    let topology = try topology()
    defer { topology.tearDown() }
    do {
        let result = try body(topology)
        try topology.finish(sourceLocation: sourceLocation)
        return result
    } catch {
        reportOutputs(of: topology, after: error, sourceLocation: sourceLocation)
        throw error
    }
}

/// `withTopology(_:sourceLocation:_:)` on a config file (see ``TestTopology/init(configFile:appending:heartbeat:)``).
@discardableResult
public func withTopology<Result>(
    configFile: String, appending: String = "", heartbeat: Duration? = .milliseconds(50),
    sourceLocation: SourceLocation = #_sourceLocation,
    _ body: (TestTopology) throws -> Result
) throws -> Result {
    try withTopology(
        try TestTopology(configFile: configFile, appending: appending, heartbeat: heartbeat),
        sourceLocation: sourceLocation, body)
}

/// `withTopology(_:sourceLocation:_:)` on a topology built in code.
@discardableResult
public func withTopology<Result>(
    _ builder: TopologyBuilder, sourceLocation: SourceLocation = #_sourceLocation,
    _ body: (TestTopology) throws -> Result
) throws -> Result {
    try withTopology(try TestTopology(builder), sourceLocation: sourceLocation, body)
}

/// The processes' last output, beside a failure, on standard error (the test's own output):
/// it is not an issue of its own, and the failure may be one the test expects.
private func reportOutputs(of topology: TestTopology, after error: any Error, sourceLocation: SourceLocation) {
    // A dead process's output is already in its error.
    let shown = topology.processes.filter { !topology.watch.wasReported($0) }
    guard !shown.isEmpty else { return }
    let test = Test.current.map { "\($0.name), " } ?? ""
    let text =
        "FlowBusTesting: \(test)\(sourceLocation.fileID):\(sourceLocation.line) failed (\(type(of: error))); the topology's processes:\n"
        + shown.map { process in
            "--- \(process.name) (pid \(process.processIdentifier), \(process.termination.map(\.description) ?? "running")):\n\(process.outputTail(lines: 30))"
        }.joined(separator: "\n")
    FileHandle.standardError.write(Data((text + "\n").utf8))
}

extension BusSubscriber {
    /// Collects messages until `count` matched `filter` or `timeout` passed.
    public func collect(
        _ count: Int, timeout: Duration = .seconds(10), where filter: (WireMessage) -> Bool = { _ in true }
    ) throws -> [WireMessage] {
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
