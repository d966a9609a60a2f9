import Dispatch
import Foundation
import Synchronization
import ZeroMQ

/// The parent side of a benchmark: a temporary directory for ipc endpoints, a control ROUTER
/// that every peer process connects a DEALER to, and the peer processes themselves.
///
/// Control protocol (text frames; peer → parent unless noted):
/// `hello [name=endpoint]...` once its sockets are bound or connected (bound endpoints resolved);
/// `primed` when the receiver got its first probe; `result <json>`; `error <text>`.
/// Parent → peer: `prime` (start sending probes), `go` (measure), `stop` (report and exit).
final class Bench {
    let config: BenchConfig
    let directory: String
    let context: Context
    private let control: Socket
    let controlEndpoint: String
    private var peers: [String: PeerProcess] = [:]
    private var externals: [String: ExternalProcess] = [:]
    private var pending: [(peer: String, parts: [String])] = []
    private var runCounter = 0

    init(config: BenchConfig) throws {
        self.config = config
        directory = try makeTemporaryDirectory()
        ChildRegistry.shared.setDirectory(directory)
        do {
            context = try Context(defaultLinger: 200)
            control = try context.socket(.router)
            try control.setOption(.routerMandatory(true))
            try control.bind(config.transport == .ipc ? "ipc://\(directory)/control" : "tcp://127.0.0.1:*")
            controlEndpoint = try control.lastEndpoint
        } catch {
            try? FileManager.default.removeItem(atPath: directory)
            throw error
        }
    }

    /// The allocation counter preloaded into the middle processes, or why there is none.
    private(set) lazy var allocationCounter: AllocationCounter.Built = AllocationCounter.build(in: directory)

    /// Where a counted process named `name` reports its allocations.
    func allocationsFile(of name: String) -> String { "\(directory)/\(name).allocs" }

    /// The environment of a process whose allocations are counted; nil without a counter.
    private func countedEnvironment(_ name: String) -> [String: String]? {
        guard case .library(let library) = allocationCounter else { return nil }
        return AllocationCounter.environment(library: library, file: allocationsFile(of: name))
    }

    /// The process id of the peer or program named `name`.
    func processID(of name: String) -> Int32? {
        peers[name]?.process.processIdentifier ?? externals[name]?.process.processIdentifier
    }

    /// Stops every peer still running and removes the temporary directory. Safe to call twice.
    func shutdown() {
        stopAll()
        control.close()
        try? FileManager.default.removeItem(atPath: directory)
        ChildRegistry.shared.setDirectory(nil)
    }

    /// A fresh prefix for the peer names and ipc files of one run.
    func nextRun() -> String {
        runCounter += 1
        return "r\(runCounter)"
    }

    /// An endpoint for a peer to bind: a socket file in the temporary directory, or a kernel-chosen
    /// port on 127.0.0.1. The bound address comes back in the peer's `hello`.
    func bindEndpoint(_ name: String) -> String {
        switch config.transport {
        case .ipc: "ipc://\(directory)/\(name)"
        case .tcp: "tcp://127.0.0.1:*"
        }
    }

    /// A port on 127.0.0.1 that was free a moment ago, as an endpoint, for a program that binds
    /// it itself and does not report kernel-chosen ports (flowd, fixture-reactors) over tcp.
    func freeTCPEndpoint() throws -> String {
        let socket = try context.socket(.router)
        defer { socket.close() }
        try socket.setOption(.linger(0))
        try socket.bind("tcp://127.0.0.1:*")
        return try socket.lastEndpoint
    }

    // MARK: Peers

    /// Starts `flowbench peer <role> <arguments>` and waits for its `hello`.
    /// - Returns: the endpoints the peer reported (e.g. `["in": "ipc:///tmp/…/r1-in"]`).
    @discardableResult
    func spawnPeer(_ name: String, role: PeerRole, arguments: [String]) throws -> [String: String] {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: try selfExecutablePath())
        process.arguments =
            [
                "peer", role.rawValue, "--name", name, "--control", controlEndpoint,
                "--parent", String(getpid()),
            ] + arguments
        // Peers never write to stdout: it may carry the JSON report.
        process.standardOutput = FileHandle.standardError
        process.standardInput = FileHandle.nullDevice
        // The forwarder is a path's middle: its allocations are counted, as a daemon's are.
        if role == .forwarder, let environment = countedEnvironment(name) { process.environment = environment }
        do {
            try process.run()
        } catch {
            throw BenchError(
                "could not start the \(role.rawValue) peer: \(error)",
                fix: "check that \(process.executableURL?.path ?? "flowbench") is executable")
        }
        ChildRegistry.shared.add(process.processIdentifier)
        peers[name] = PeerProcess(name: name, role: role, process: process)
        let hello = try waitFor("hello", from: name, timeout: 15)
        var endpoints: [String: String] = [:]
        for part in hello.dropFirst() {
            guard let equals = part.firstIndex(of: "=") else { continue }
            endpoints[String(part[..<equals])] = String(part[part.index(after: equals)...])
        }
        return endpoints
    }

    /// The process id of a running peer, to meter its CPU time and memory.
    func processID(ofPeer name: String) -> Int32? {
        peers[name]?.process.processIdentifier
    }

    /// Sends a control command to a peer.
    func send(_ peer: String, _ parts: String...) throws {
        var frames: [[UInt8]] = [Array(peer.utf8)]
        frames += parts.map { Array($0.utf8) }
        do {
            try control.send(message: frames)
        } catch {
            throw BenchError(
                "could not reach the \(peer) peer on the control socket: \(error)",
                fix: "the peer has probably exited; look at its messages on stderr above")
        }
    }

    /// Waits for control message `command` from `peer` and returns its frames as text.
    /// Messages from other peers are kept for later waits; an `error` from any peer, or a peer
    /// exiting unexpectedly, ends the wait with an error.
    func waitFor(_ command: String, from peer: String, timeout seconds: Double) throws -> [String] {
        let deadline = monotonicNanoseconds() + Int64(seconds * 1e9)
        while true {
            if let index = pending.firstIndex(where: { $0.peer == peer && $0.parts.first == command }) {
                return pending.remove(at: index).parts
            }
            if monotonicNanoseconds() > deadline {
                throw BenchError(
                    "the \(peer) peer did not send \(command) within \(Int(seconds)) s",
                    fix:
                        "the machine may be overloaded; try fewer --messages, or --transport tcp if ipc files cannot be created in \(directory)"
                )
            }
            guard let frames = try control.receiveMessage(mode: .timeout(milliseconds: 100)) else {
                try checkPeersAlive()
                continue
            }
            guard frames.count >= 2 else { continue }
            let from = String(decoding: frames[0], as: UTF8.self)
            let parts = frames.dropFirst().map { String(decoding: $0, as: UTF8.self) }
            if parts.first == "error" {
                throw BenchError(
                    "the \(from) peer failed: \(parts.dropFirst().joined(separator: " "))",
                    fix: "see the peer's message above; rerun with fewer --messages if it ran out of time")
            }
            pending.append((from, parts))
        }
    }

    /// Waits for a `result` message from `peer` and decodes its JSON.
    func result<T: Decodable>(_ type: T.Type, from peer: String, timeout: Double) throws -> T {
        let parts = try waitFor("result", from: peer, timeout: timeout)
        guard parts.count >= 2 else {
            throw BenchError("the \(peer) peer sent an empty result", fix: "this is a bug in flowbench")
        }
        return try JSONDecoder().decode(T.self, from: Data(parts[1].utf8))
    }

    private func checkPeersAlive() throws {
        for peer in peers.values where !peer.stopping && !peer.process.isRunning {
            let status = peer.process.terminationStatus
            peers[peer.name] = nil
            ChildRegistry.shared.remove(peer.process.processIdentifier)
            throw BenchError(
                "the \(peer.name) peer (\(peer.role.rawValue)) exited early with status \(status)",
                fix: "see its message above on stderr")
        }
        for external in externals.values where !external.process.isRunning {
            try external.checkRunning()
        }
    }

    // MARK: Other programs

    /// Starts a program that is not flowbench (e.g. `flowd`), registers it for cleanup, and
    /// waits until `ready` returns `true` (polled until `timeout` seconds pass). Its stdout and
    /// stderr go to `<name>.log` in the temporary directory; ``ExternalProcess/output`` reads
    /// it back for error messages. ``stopAll()`` stops it with SIGTERM after the peers.
    func spawnProcess(
        _ name: String, executable: String, arguments: [String], timeout seconds: Double = 15,
        ready: (ExternalProcess) throws -> Bool
    ) throws -> ExternalProcess {
        let logPath = "\(directory)/\(name).log"
        guard FileManager.default.createFile(atPath: logPath, contents: nil),
            let log = FileHandle(forWritingAtPath: logPath)
        else {
            throw BenchError(
                "cannot create \(logPath) for the output of \(name)", fix: "set TMPDIR to a writable directory")
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.standardOutput = log
        process.standardError = log
        process.standardInput = FileHandle.nullDevice
        if let environment = countedEnvironment(name) { process.environment = environment }
        do {
            try process.run()
        } catch {
            throw BenchError(
                "could not start \(executable): \(error)", fix: "check that \(executable) exists and is executable")
        }
        try? log.close()
        ChildRegistry.shared.add(process.processIdentifier)
        let external = ExternalProcess(name: name, executable: executable, process: process, logPath: logPath)
        externals[name] = external
        let deadline = monotonicNanoseconds() + Int64(seconds * 1e9)
        while true {
            try external.checkRunning()
            if try ready(external) { return external }
            if monotonicNanoseconds() > deadline {
                throw BenchError(
                    "\(name) (\(executable)) was not ready within \(Int(seconds)) s; its output:\n\(external.output())",
                    fix: "see its output above; the machine may be overloaded")
            }
            usleep(20_000)
        }
    }

    /// Stops one program started by ``spawnProcess(_:executable:arguments:timeout:ready:)``:
    /// SIGTERM, up to 5 s to exit, then SIGKILL.
    /// - Returns: its exit status, or `nil` if it had to be killed.
    @discardableResult
    func stopProcess(_ external: ExternalProcess) -> Int32? {
        defer {
            externals[external.name] = nil
            ChildRegistry.shared.remove(external.process.processIdentifier)
        }
        let process = external.process
        // One that exited by itself was reported by checkRunning() already.
        let wasRunning = process.isRunning
        if process.isRunning {
            process.terminate()
            let deadline = monotonicNanoseconds() + 5_000_000_000
            while process.isRunning && monotonicNanoseconds() < deadline { usleep(5_000) }
            if process.isRunning {
                kill(process.processIdentifier, SIGKILL)
                process.waitUntilExit()
                FileHandle.standardError.write(
                    Data(
                        "flowbench: \(external.name) did not stop within 5 s of SIGTERM and was killed; its output:\n\(external.output())\n"
                            .utf8))
                return nil
            }
        }
        process.waitUntilExit()
        let status = process.terminationStatus
        if wasRunning && (process.terminationReason != .exit || status != 0) {
            FileHandle.standardError.write(
                Data(
                    "flowbench: \(external.name) exited with status \(status) after SIGTERM; its output:\n\(external.output())\n"
                        .utf8))
        }
        return status
    }

    /// Asks every peer to stop, waits a little, then terminates those still running.
    func stopAll() {
        for name in peers.keys.sorted() {
            peers[name]?.stopping = true
            try? send(name, "stop")
        }
        let deadline = monotonicNanoseconds() + 3_000_000_000
        while peers.values.contains(where: { $0.process.isRunning }) && monotonicNanoseconds() < deadline {
            usleep(10_000)
        }
        for peer in peers.values {
            if peer.process.isRunning {
                peer.process.terminate()
                usleep(100_000)
                if peer.process.isRunning { kill(peer.process.processIdentifier, SIGKILL) }
            }
            ChildRegistry.shared.remove(peer.process.processIdentifier)
        }
        peers.removeAll()
        for external in externals.values.sorted(by: { $0.name < $1.name }) { stopProcess(external) }
        // Control messages still queued belong to peers that are gone.
        pending.removeAll()
        while (try? control.receiveMessage(mode: .nonBlocking)) != nil {}
    }
}

/// A peer process started by ``Bench``.
struct PeerProcess {
    let name: String
    let role: PeerRole
    let process: Process
    var stopping = false
}

/// A program other than flowbench started by ``Bench`` (e.g. `flowd`), with its output file.
final class ExternalProcess {
    let name: String
    let executable: String
    let process: Process
    let logPath: String

    init(name: String, executable: String, process: Process, logPath: String) {
        self.name = name
        self.executable = executable
        self.process = process
        self.logPath = logPath
    }

    /// The last `lines` lines of what it wrote on stdout and stderr.
    func output(lines: Int = 60) -> String {
        guard let data = FileManager.default.contents(atPath: logPath), !data.isEmpty else { return "  (no output)" }
        let all = String(decoding: data, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false)
        let tail = all.suffix(lines)
        let skipped = all.count - tail.count
        let header = skipped > 0 ? ["  … \(skipped) earlier line(s) in \(logPath)"] : []
        return (header + tail.map { "  " + $0 }).joined(separator: "\n")
    }

    /// Throws, with its output, if it exited.
    func checkRunning() throws {
        guard !process.isRunning else { return }
        throw BenchError(
            "\(name) (\(executable)) exited early with status \(process.terminationStatus); its output:\n\(output())",
            fix: "see its output above")
    }
}

/// A failure with the problem and its fix, printed as `error: <problem>\nfix: <fix>`.
struct BenchError: Error, CustomStringConvertible {
    var problem: String
    var fix: String
    init(_ problem: String, fix: String) {
        self.problem = problem
        self.fix = fix
    }
    var description: String { "\(problem)\nfix: \(fix)" }
}

/// This executable's path, to start peers from.
func selfExecutablePath() throws -> String {
    if let path = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") { return path }
    let argument0 = CommandLine.arguments[0]
    if argument0.contains("/") { return argument0 }
    throw BenchError(
        "cannot find the flowbench executable to start peer processes",
        fix: "run flowbench by its path, e.g. .build/release/flowbench")
}

/// Creates a private directory for ipc socket files; ipc paths must stay under ~100 bytes.
private func makeTemporaryDirectory() throws -> String {
    var base = ProcessInfo.processInfo.environment["TMPDIR"] ?? "/tmp"
    if base.utf8.count > 60 { base = "/tmp" }
    var template = Array("\(base)/flowbench-XXXXXX".utf8CString)
    guard let result = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) else {
        throw BenchError(
            "cannot create a temporary directory in \(base): \(String(cString: strerror(errno)))",
            fix: "set TMPDIR to a writable directory")
    }
    return String(cString: result)
}

/// The children and the temporary directory to clean up if the user interrupts the run.
final class ChildRegistry: Sendable {
    static let shared = ChildRegistry()
    private let state = Mutex<(pids: Set<Int32>, directory: String?)>(([], nil))

    func add(_ pid: Int32) { state.withLock { _ = $0.pids.insert(pid) } }
    func remove(_ pid: Int32) { state.withLock { _ = $0.pids.remove(pid) } }
    func setDirectory(_ path: String?) { state.withLock { $0.directory = path } }

    /// On SIGINT or SIGTERM: terminate the peers, remove the directory, exit.
    func installSignalHandlers() {
        for signalNumber in [SIGINT, SIGTERM] {
            signal(signalNumber, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: signalNumber, queue: .global())
            source.setEventHandler { [self] in
                let (pids, directory) = state.withLock { ($0.pids, $0.directory) }
                for pid in pids { kill(pid, SIGTERM) }
                if let directory { try? FileManager.default.removeItem(atPath: directory) }
                FileHandle.standardError.write(Data("flowbench: interrupted, peers stopped\n".utf8))
                exit(128 + signalNumber)
            }
            source.resume()
            signalSources.append(source)
        }
    }
}

// Written once, from the main thread, before any peer starts.
nonisolated(unsafe) private var signalSources: [any DispatchSourceSignal] = []
