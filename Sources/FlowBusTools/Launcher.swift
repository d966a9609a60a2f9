import Dispatch
import FlowBusClient
import FlowBusConfiguration
import FlowBusCoordinator
import FlowBusDaemon
import FlowBusWire
import Foundation
import Synchronization
import ZeroMQ

#if canImport(Glibc)
import Glibc
#endif

/// How `flowctl launch` runs a topology's `launch:` section.
public struct LaunchOptions: Sendable {
    /// Stop everything after this long (`--for`).
    public var duration: Duration?
    /// Stop everything when this one-shot process exits, and exit with its status (`--until-exit`).
    public var untilExit: String?
    /// How long each process gets after SIGTERM before SIGKILL.
    public var stopTimeout: Duration
    /// Whether each process's prefix is coloured.
    public var colour: Bool
    /// Where a bare command name is looked up before `PATH` (flowctl's own directory).
    public var searchDirectories: [URL]
    /// The environment the processes get (plus their `env:`).
    public var environment: [String: String]
    /// The `optional: true` entries to start too (`--with`).
    public var including: Set<String>
    /// Writes one line of output (prefix included).
    public var output: @Sendable (String) -> Void

    public init(
        duration: Duration? = nil, untilExit: String? = nil, stopTimeout: Duration = .seconds(5), colour: Bool = false,
        searchDirectories: [URL] = [], environment: [String: String] = ProcessInfo.processInfo.environment,
        including: Set<String> = [],
        output: @escaping @Sendable (String) -> Void = { FileHandle.standardOutput.write(Data(($0 + "\n").utf8)) }
    ) {
        self.duration = duration
        self.untilExit = untilExit
        self.stopTimeout = stopTimeout
        self.colour = colour
        self.searchDirectories = searchDirectories
        self.environment = environment
        self.including = including
        self.output = output
    }
}

/// Starts the processes of a topology's `launch:` section in dependency order, waiting for each
/// to be ready before starting what comes `after` it; restarts a crashed one with exponential
/// back-off up to its retry limit; prefixes (and colours) each line of their output with their
/// name; and stops them all in reverse start order (SIGTERM, then SIGKILL after
/// ``LaunchOptions/stopTimeout``).
///
/// When a process fails beyond its retries (or a one-shot fails, or a process has no restart
/// policy and exits) everything is stopped and ``run()`` returns 1: a topology missing a member
/// is not left half running.
///
/// Each process runs in its own process group, so a terminal's Ctrl-C reaches the launcher only
/// and stopping a process stops what it started (e.g. `sh -c`'s children).
public final class Launcher: Sendable {
    /// The processes, in start order (dependencies first, else as written).
    public let specs: [LaunchSpec]
    package let config: FlowBusConfig
    package let options: LaunchOptions
    package let executables: [URL]
    package let events = LaunchEvents()
    package let printer: LinePrinter

    /// Validates `config.launch` (names, `after`, readiness, commands) without starting anything.
    public init(
        config: FlowBusConfig, options: LaunchOptions = LaunchOptions(), source: String = "config"
    ) throws(ConfigError) {
        guard let declared = config.launch, !declared.isEmpty else {
            throw ConfigError(.invalid, "\(source): no launch: section lists processes to start")
        }
        let optionalNames = declared.filter(\.optional).map(\.name)
        for name in options.including.sorted() where !optionalNames.contains(name) {
            throw ConfigError(
                .unknownName,
                "--with \(name): no optional launch entry of that name (\(optionalNames.isEmpty ? "the file has none; mark one optional: true" : "optional: \(optionalNames.joined(separator: ", "))"))"
            )
        }
        // `--until-exit NAME` starts NAME too: waiting for an entry implies running it.
        let launch = declared.filter {
            !$0.optional || options.including.contains($0.name) || $0.name == options.untilExit
        }
        var names = Set<String>()
        for (index, spec) in launch.enumerated() {
            let at = "\(source): launch[\(index)] \(spec.name)"
            guard !spec.name.isEmpty, names.insert(spec.name).inserted else {
                throw ConfigError(.invalid, "\(at): every launch entry needs a name of its own")
            }
            guard !spec.command.isEmpty, !spec.command[0].isEmpty else {
                throw ConfigError(.invalid, "\(at): command is empty")
            }
            if let ready = spec.ready {
                guard ready.kinds.count == 1 else {
                    throw ConfigError(
                        .invalid,
                        "\(at): ready needs exactly one of control, heartbeat, logLine, delayMs (has \(ready.kinds.count))"
                    )
                }
                if let host = ready.heartbeat, config.reactors[host] == nil {
                    throw ConfigError(
                        .invalid,
                        "\(at): ready.heartbeat names reactor host '\(host)', which is not declared under reactors")
                }
                if let pattern = ready.logLine {
                    do { _ = try Regex(pattern) } catch {
                        throw ConfigError(
                            .invalid, "\(at): ready.logLine '\(pattern)' is not a regular expression: \(error)")
                    }
                }
            }
            if let restart = spec.restart {
                guard !spec.oneShot else {
                    throw ConfigError(.invalid, "\(at): a oneShot process is not restarted: remove restart")
                }
                guard restart.maxRetries >= 0, restart.backoffMs >= 0 else {
                    throw ConfigError(.invalid, "\(at): restart needs maxRetries and backoffMs >= 0")
                }
            }
        }
        for spec in launch {
            for dependency in spec.after where optionalNames.contains(dependency) && !names.contains(dependency) {
                throw ConfigError(
                    .invalid,
                    "\(source): launch \(spec.name) is after '\(dependency)', an optional entry: start it too with --with \(dependency)"
                )
            }
            for dependency in spec.after where !names.contains(dependency) || dependency == spec.name {
                throw ConfigError(
                    .invalid,
                    "\(source): launch \(spec.name) is after '\(dependency)', which is not another launch entry")
            }
        }
        // Dependencies first; otherwise as written.
        var ordered: [LaunchSpec] = []
        var placed = Set<String>()
        while ordered.count < launch.count {
            guard let next = launch.first(where: { !placed.contains($0.name) && $0.after.allSatisfy(placed.contains) })
            else {
                let cycle = launch.filter { !placed.contains($0.name) }.map(\.name)
                throw ConfigError(
                    .invalid,
                    "\(source): launch entries depend on each other in a cycle: \(cycle.joined(separator: ", "))")
            }
            ordered.append(next)
            placed.insert(next.name)
        }
        if let name = options.untilExit {
            guard let spec = launch.first(where: { $0.name == name }) else {
                throw ConfigError(
                    .unknownName,
                    "--until-exit \(name): no launch entry of that name (\(launch.map(\.name).joined(separator: ", ")))"
                )
            }
            guard spec.oneShot else { throw ConfigError(.invalid, "--until-exit \(name): it is not oneShot: true") }
        }
        var executables: [URL] = []
        for spec in ordered {
            guard
                let url = Self.resolve(
                    spec.command[0], searchDirectories: options.searchDirectories, environment: options.environment)
            else {
                let beside = options.searchDirectories.map(\.path).joined(separator: ", ")
                throw ConfigError(
                    .invalid,
                    "\(source): launch \(spec.name): '\(spec.command[0])' is not an executable\(beside.isEmpty ? "" : " in \(beside)") or in PATH"
                )
            }
            executables.append(url)
        }
        specs = ordered
        self.config = config
        self.options = options
        self.executables = executables
        printer = LinePrinter(names: ["launch"] + ordered.map(\.name), colour: options.colour, output: options.output)
    }

    /// The executable a command names: a path as is; a bare name in `searchDirectories`, then in `PATH`.
    public static func resolve(_ command: String, searchDirectories: [URL], environment: [String: String]) -> URL? {
        let manager = FileManager.default
        if command.contains("/") {
            return manager.isExecutableFile(atPath: command) ? URL(fileURLWithPath: command) : nil
        }
        let path = (environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin").split(separator: ":").map {
            URL(fileURLWithPath: String($0))
        }
        return (searchDirectories + path).map { $0.appendingPathComponent(command) }.first { url in
            var isDirectory: ObjCBool = false
            return manager.fileExists(atPath: url.path, isDirectory: &isDirectory) && !isDirectory.boolValue
                && manager.isExecutableFile(atPath: url.path)
        }
    }

    /// Stops everything (from a signal handler, or any thread); ``run()`` then returns.
    public func requestStop(reason: String) {
        events.post(.stop(reason))
    }

    /// Runs on the calling thread (where SIGINT and SIGTERM are unblocked, so the processes it
    /// starts can be stopped) until a stop is requested, `--for` elapses, the `--until-exit` process exits, a
    /// process fails beyond its retries, or every process (all one-shots) has finished; then stops
    /// everything still running.
    /// - Returns: the exit status: 0 if everything stopped cleanly, 1 if a process failed or had
    ///   to be killed, the `--until-exit` process's status if it is not 0.
    public func run() -> Int32 {
        LaunchSession(launcher: self).run()
    }

    package func say(_ text: String) {
        printer.line(0, text)
    }
}

package enum LaunchEvent: Sendable {
    case exited(index: Int, generation: Int, status: Int32, signalled: Bool)
    case ready(index: Int, generation: Int)
    case notReady(index: Int, generation: Int, reason: String)
    case stop(String)
}

/// Events from output readers, readiness probes, exits and signals, for the session's thread.
package final class LaunchEvents: Sendable {
    private let queue = Mutex<[LaunchEvent]>([])
    private let semaphore = DispatchSemaphore(value: 0)

    package func post(_ event: LaunchEvent) {
        queue.withLock { $0.append(event) }
        semaphore.signal()
    }

    /// The next event, or nil once `deadline` has passed.
    package func next(until deadline: ContinuousClock.Instant?) -> LaunchEvent? {
        while true {
            if let event = queue.withLock({ $0.isEmpty ? nil : $0.removeFirst() }) { return event }
            if let deadline {
                let left = ContinuousClock.now.duration(to: deadline)
                guard left > .zero else { return nil }
                _ = semaphore.wait(timeout: .now() + .nanoseconds(Int(left.nanoseconds)))
            } else {
                semaphore.wait()
            }
        }
    }
}

extension Duration {
    package var nanoseconds: Int64 {
        components.seconds * 1_000_000_000 + components.attoseconds / 1_000_000_000
    }
}

/// Writes whole lines, prefixed `name | ` (padded, optionally coloured), one at a time.
package final class LinePrinter: Sendable {
    private let prefixes: [String]
    private let output: @Sendable (String) -> Void
    private let lock = Mutex(())
    private static let palette = [36, 32, 33, 35, 34, 96, 92, 93, 95, 94, 91, 31]

    package init(names: [String], colour: Bool, output: @escaping @Sendable (String) -> Void) {
        let width = names.map(\.count).max() ?? 0
        prefixes = names.enumerated().map { index, name in
            let padded = name.padding(toLength: width, withPad: " ", startingAt: 0) + " |"
            // The launcher's own lines are bold; each process gets the next palette colour.
            let code = index == 0 ? "1" : String(Self.palette[(index - 1) % Self.palette.count])
            return colour ? "\u{1B}[\(code)m\(padded)\u{1B}[0m " : padded + " "
        }
        self.output = output
    }

    /// Writes `text` prefixed with name `index` (0: the launcher, then the specs in start order).
    package func line(_ index: Int, _ text: String) {
        lock.withLock { _ in output(prefixes[index] + text) }
    }
}

/// Tells a readiness probe its process has gone (or everything is stopping).
package final class ProbeToken: Sendable {
    private let flag = Atomic<Bool>(false)
    package var isCancelled: Bool { flag.load(ordering: .relaxed) }
    package func cancel() { flag.store(true, ordering: .relaxed) }
}

/// The state of one `run()`: owned by its thread; others only post events.
package final class LaunchSession {
    package struct Member {
        package var process: Process?
        package var pid: Int32 = 0
        package var ownGroup = false
        package var generation = 0
        package var ready = false
        package var retries = 0
        package var restartAt: ContinuousClock.Instant?
        package var startedAt: ContinuousClock.Instant?
        package var probe: ProbeToken?
        package var lastStatus: (status: Int32, signalled: Bool)?
    }

    package let launcher: Launcher
    package var members: [Member]
    package var startOrder: [Int] = []
    package var nextToStart = 0
    package var outcome: Int32?

    package init(launcher: Launcher) {
        self.launcher = launcher
        members = Array(repeating: Member(), count: launcher.specs.count)
    }

    package var specs: [LaunchSpec] { launcher.specs }

    package func say(_ text: String) { launcher.say(text) }

    package func index(of name: String) -> Int? { specs.firstIndex { $0.name == name } }

    package func run() -> Int32 {
        // Children inherit the signal mask of the thread that starts them: one started with
        // SIGTERM blocked (e.g. by a test runner) could not be stopped.
        var stopSignals = sigset_t()
        sigemptyset(&stopSignals)
        sigaddset(&stopSignals, SIGINT)
        sigaddset(&stopSignals, SIGTERM)
        pthread_sigmask(SIG_UNBLOCK, &stopSignals, nil)
        say("starting \(specs.map(\.name).joined(separator: ", "))")
        let forDeadline = launcher.options.duration.map { ContinuousClock.now + $0 }
        while outcome == nil {
            startWhatCan()
            let now = ContinuousClock.now
            for index in members.indices {
                if let at = members[index].restartAt, at <= now {
                    members[index].restartAt = nil
                    start(index)
                }
            }
            if outcome != nil { break }
            if nextToStart == specs.count, members.allSatisfy({ $0.process == nil && $0.restartAt == nil }) {
                say("every process has finished")
                outcome = 0
                break
            }
            if let forDeadline, now >= forDeadline {
                say("--for elapsed: stopping")
                outcome = 0
                break
            }
            let wake = ([forDeadline] + members.map(\.restartAt)).compactMap { $0 }.min()
            guard let event = launcher.events.next(until: wake) else { continue }
            handle(event)
        }
        let clean = stopAll()
        let result = outcome ?? 1
        if result == 0, !clean { return 1 }
        return result
    }

    /// Starts, in order, every process whose dependencies are ready.
    package func startWhatCan() {
        while nextToStart < specs.count, outcome == nil {
            let spec = specs[nextToStart]
            let waiting = spec.after.filter { name in index(of: name).map { !members[$0].ready } ?? false }
            guard waiting.isEmpty else { return }
            startOrder.append(nextToStart)
            nextToStart += 1
            start(nextToStart - 1)
        }
    }

    package func start(_ index: Int) {
        let spec = specs[index]
        members[index].generation += 1
        members[index].ready = false
        let generation = members[index].generation
        let events = launcher.events
        let process = Process()
        process.executableURL = launcher.executables[index]
        process.arguments = Array(spec.command.dropFirst())
        process.environment = launcher.options.environment.merging(spec.env) { _, new in new }
        process.standardInput = FileHandle.nullDevice
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        let drained = DispatchSemaphore(value: 0)
        process.terminationHandler = { process in
            let status = process.terminationStatus
            let signalled = process.terminationReason == .uncaughtSignal
            // Its last lines are printed before its exit is reported.
            DispatchQueue.global().async {
                _ = drained.wait(timeout: .now() + .milliseconds(500))
                events.post(.exited(index: index, generation: generation, status: status, signalled: signalled))
            }
        }
        do {
            try process.run()
        } catch {
            say("\(spec.name): cannot start \(launcher.executables[index].path): \(error.localizedDescription)")
            handleExit(index, status: 127, signalled: false)
            return
        }
        try? pipe.fileHandleForWriting.close()
        let pid = process.processIdentifier
        members[index].process = process
        members[index].pid = pid
        members[index].ownGroup = getpgid(pid) == pid
        members[index].startedAt = .now
        say("started \(spec.name) (pid \(pid)): \(spec.command.joined(separator: " "))")
        readOutput(pipe.fileHandleForReading, index: index, generation: generation, drained: drained)
        let token = ProbeToken()
        members[index].probe = token
        guard let ready = spec.ready else {
            if !spec.oneShot { markReady(index, how: "started") }
            return
        }
        probe(ready, index: index, generation: generation, token: token)
    }

    package func markReady(_ index: Int, how: String) {
        members[index].ready = true
        say("\(specs[index].name) is ready (\(how))")
    }

    package func readOutput(_ handle: FileHandle, index: Int, generation: Int, drained: DispatchSemaphore) {
        let printer = launcher.printer
        let events = launcher.events
        let pattern = specs[index].ready?.logLine
        Thread.detachNewThread {
            let regex = pattern.flatMap { try? Regex($0) }
            var matched = false
            var buffer = Data()
            func emit(_ bytes: Data) {
                var line = String(decoding: bytes, as: UTF8.self)
                if line.hasSuffix("\r") { line.removeLast() }
                printer.line(index + 1, line)
                if !matched, let regex, line.contains(regex) {
                    matched = true
                    events.post(.ready(index: index, generation: generation))
                }
            }
            while true {
                let chunk = handle.availableData
                if chunk.isEmpty { break }
                buffer.append(chunk)
                while let newline = buffer.firstIndex(of: 10) {
                    emit(buffer[buffer.startIndex..<newline])
                    buffer.removeSubrange(buffer.startIndex...newline)
                }
            }
            if !buffer.isEmpty { emit(buffer) }
            try? handle.close()
            drained.signal()
        }
    }

    package func probe(_ ready: LaunchSpec.Readiness, index: Int, generation: Int, token: ProbeToken) {
        if ready.logLine != nil { return }  // the output reader posts it
        let events = launcher.events
        let config = launcher.config
        let timeout = Duration.milliseconds(ready.timeoutMs ?? 30_000)
        Thread.detachNewThread {
            let deadline = ContinuousClock.now + timeout
            func done(_ event: LaunchEvent) { if !token.isCancelled { events.post(event) } }
            if let delay = ready.delayMs {
                let end = ContinuousClock.now + .milliseconds(delay)
                while !token.isCancelled, ContinuousClock.now < end { Thread.sleep(forTimeInterval: 0.01) }
                return done(.ready(index: index, generation: generation))
            }
            if ready.control == true {
                while !token.isCancelled, ContinuousClock.now < deadline {
                    if (try? StatusClient.fetch(
                        endpoints: config.controlEndpoints, curve: config.curve, timeout: .milliseconds(200))) != nil
                    {
                        return done(.ready(index: index, generation: generation))
                    }
                    Thread.sleep(forTimeInterval: 0.02)
                }
                return done(
                    .notReady(
                        index: index, generation: generation,
                        reason:
                            "flowd did not answer on \(FlowBusConfig.either(config.controlEndpoints)) within \(timeout)"
                    ))
            }
            if let host = ready.heartbeat, let spec = config.reactors[host] {
                do {
                    let subscriber = try BusSubscriber(endpoint: spec.states, topics: ["hb/"], curve: config.curve)
                    while !token.isCancelled, ContinuousClock.now < deadline {
                        if try subscriber.waitUntilConnected(
                            timeout: min(.milliseconds(250), ContinuousClock.now.duration(to: deadline)))
                        {
                            return done(.ready(index: index, generation: generation))
                        }
                    }
                    return done(
                        .notReady(
                            index: index, generation: generation,
                            reason: "no heartbeat on \(spec.states) within \(timeout)"))
                } catch {
                    return done(
                        .notReady(index: index, generation: generation, reason: "cannot watch \(spec.states): \(error)")
                    )
                }
            }
        }
    }

    package func handle(_ event: LaunchEvent) {
        switch event {
        case .stop(let reason):
            say("\(reason): stopping")
            if outcome == nil { outcome = 0 }
        case .ready(let index, let generation):
            guard generation == members[index].generation, members[index].process != nil, !members[index].ready else {
                return
            }
            markReady(index, how: specs[index].ready?.kinds.first ?? "started")
            if specs[index].restart != nil { members[index].startedAt = .now }
        case .notReady(let index, let generation, let reason):
            guard generation == members[index].generation, members[index].process != nil, !members[index].ready else {
                return
            }
            say("\(specs[index].name) is not ready: \(reason): killing it")
            send(index, SIGKILL)
        case .exited(let index, let generation, let status, let signalled):
            guard generation == members[index].generation, members[index].process != nil else { return }
            handleExit(index, status: status, signalled: signalled)
        }
    }

    package func describe(status: Int32, signalled: Bool) -> String {
        signalled ? "was killed by signal \(status)" : "exited with status \(status)"
    }

    package func handleExit(_ index: Int, status: Int32, signalled: Bool) {
        let spec = specs[index]
        members[index].probe?.cancel()
        members[index].process = nil
        members[index].lastStatus = (status, signalled)
        members[index].ready = false
        killLeftovers(index)
        let what = describe(status: status, signalled: signalled)
        if spec.oneShot {
            if spec.name == launcher.options.untilExit {
                say("\(spec.name) \(what): stopping everything (--until-exit)")
                outcome = signalled ? 128 + status : status
            } else if status == 0, !signalled {
                say("\(spec.name) finished")
                members[index].ready = true
            } else {
                say("\(spec.name) (one-shot) \(what): stopping everything")
                outcome = 1
            }
            return
        }
        guard let policy = spec.restart else {
            say("\(spec.name) \(what) and has no restart policy: stopping everything")
            outcome = 1
            return
        }
        if let startedAt = members[index].startedAt, startedAt.duration(to: .now) >= .milliseconds(policy.resetAfterMs)
        {
            members[index].retries = 0
        }
        guard members[index].retries < policy.maxRetries else {
            say("\(spec.name) \(what); gave up after \(policy.maxRetries) restart(s): stopping everything")
            outcome = 1
            return
        }
        members[index].retries += 1
        let delay = policy.delay(forAttempt: members[index].retries)
        say(
            "\(spec.name) \(what); restarting in \(delay.nanoseconds / 1_000_000) ms (retry \(members[index].retries) of \(policy.maxRetries))"
        )
        members[index].restartAt = .now + delay
    }

    /// Sends `signal` to the process's group (or to it alone if it has none of its own).
    package func send(_ index: Int, _ signal: Int32) {
        let member = members[index]
        guard member.process != nil, member.pid > 0 else { return }
        if member.ownGroup, kill(-member.pid, signal) == 0 { return }
        _ = kill(member.pid, signal)
    }

    /// Kills what is left of an exited process's group (children it started and left behind).
    package func killLeftovers(_ index: Int) {
        let member = members[index]
        if member.ownGroup, member.pid > 0 { _ = kill(-member.pid, SIGKILL) }
        members[index].pid = 0
        members[index].ownGroup = false
    }

    /// Stops every running process in reverse start order.
    /// - Returns: whether each stopped by itself within the bound with status 0 (or by SIGTERM/SIGINT).
    package func stopAll() -> Bool {
        var clean = true
        for index in members.indices {
            members[index].restartAt = nil
            members[index].probe?.cancel()
        }
        for index in startOrder.reversed() where members[index].process != nil {
            let name = specs[index].name
            say("stopping \(name) (SIGTERM)")
            send(index, SIGTERM)
            if !waitForExit(index, timeout: launcher.options.stopTimeout) {
                say("\(name) did not stop within \(launcher.options.stopTimeout): SIGKILL")
                clean = false
                send(index, SIGKILL)
                if !waitForExit(index, timeout: .seconds(5)) {
                    say("\(name) (pid \(members[index].pid)) did not exit after SIGKILL")
                    continue
                }
            }
            if let (status, signalled) = members[index].lastStatus {
                let stopped = signalled ? status == SIGTERM || status == SIGINT : status == 0
                say("\(name) \(describe(status: status, signalled: signalled))")
                if !stopped { clean = false }
            }
        }
        say(clean ? "everything stopped" : "stopped, not cleanly")
        return clean
    }

    /// Waits for process `index` to exit, noting other exits meanwhile (nothing is restarted).
    package func waitForExit(_ index: Int, timeout: Duration) -> Bool {
        let deadline = ContinuousClock.now + timeout
        while members[index].process != nil {
            guard let event = launcher.events.next(until: deadline) else { return false }
            guard case .exited(let other, let generation, let status, let signalled) = event,
                generation == members[other].generation, members[other].process != nil
            else { continue }
            members[other].process = nil
            members[other].lastStatus = (status, signalled)
            killLeftovers(other)
            if other != index {
                say("\(specs[other].name) \(describe(status: status, signalled: signalled))")
            }
        }
        return true
    }
}
