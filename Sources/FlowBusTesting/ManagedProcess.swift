import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A child process started by a test: its output goes to a file, and it is always stopped.
///
/// A process is expected to keep running until the test stops it (``terminate(timeout:)``,
/// ``kill()``), unless it was started with `mayExit` (a one-shot). A ``TestTopology`` reports
/// any other exit as ``ProcessDied``. Output and ``termination`` stay readable after the
/// topology removed its directory.
public final class ManagedProcess: @unchecked Sendable {
    /// How a process ended.
    public enum Termination: Sendable, Hashable, CustomStringConvertible {
        /// It exited by itself with this status.
        case exited(Int32)
        /// A signal ended it (e.g. 15, SIGTERM; 9, SIGKILL; 11, SIGSEGV).
        case signalled(Int32)

        /// Whether it exited with status 0.
        public var isSuccess: Bool { self == .exited(0) }

        public var description: String {
            switch self {
            case .exited(let status): "exited with status \(status)"
            case .signalled(let signal):
                "was killed by signal \(signal)\(Self.signalNames[signal].map { " (\($0))" } ?? "")"
            }
        }

        static let signalNames: [Int32: String] = [
            SIGHUP: "SIGHUP", SIGINT: "SIGINT", SIGQUIT: "SIGQUIT", SIGILL: "SIGILL", SIGTRAP: "SIGTRAP",
            SIGABRT: "SIGABRT",
            SIGBUS: "SIGBUS", SIGFPE: "SIGFPE", SIGKILL: "SIGKILL", SIGSEGV: "SIGSEGV", SIGPIPE: "SIGPIPE",
            SIGTERM: "SIGTERM",
        ]
    }

    // Process is not Sendable; every use goes through `lock`.
    private let process = Process()
    private let lock = NSLock()
    private var stopRequested = false
    private var exitAllowed: Bool
    private var preserved: (output: String, errorOutput: String)?
    /// A name for messages, e.g. `flowd`.
    public let name: String
    /// Where standard output goes (and standard error, unless ``errorURL`` differs).
    public let outputURL: URL
    /// Where standard error goes: ``outputURL``, unless the process was started with its own file for it.
    public let errorURL: URL

    /// Starts `executable` with `arguments` and `environment` added to this process's own.
    ///
    /// Standard output and error go to `outputURL`, or error to `errorURL` if given. The process
    /// runs in `currentDirectory` if given, else in this process's working directory. With
    /// `mayExit`, exiting by itself is not a failure (a one-shot).
    public init(
        name: String, executable: URL, arguments: [String], environment: [String: String] = [:], outputURL: URL,
        errorURL: URL? = nil, currentDirectory: URL? = nil, mayExit: Bool = false
    ) throws {
        self.name = name
        self.outputURL = outputURL
        self.errorURL = errorURL ?? outputURL
        exitAllowed = mayExit
        let files = errorURL == nil ? [outputURL] : [outputURL, self.errorURL]
        for url in files where !FileManager.default.createFile(atPath: url.path, contents: nil) {
            throw HarnessError(.unavailable, "cannot create \(url.path) for \(name)'s output")
        }
        let output = try FileHandle(forWritingTo: outputURL)
        let errorOutput = errorURL == nil ? output : try FileHandle(forWritingTo: self.errorURL)
        process.executableURL = executable
        process.arguments = arguments
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { _, new in new }
        if let currentDirectory { process.currentDirectoryURL = currentDirectory }
        process.standardOutput = output
        process.standardError = errorOutput
        process.standardInput = FileHandle.nullDevice
        // A child inherits the signal mask of the thread starting it, and test runner threads
        // block SIGTERM: with it blocked, a child could only be killed, never stopped cleanly.
        var unblocked = sigset_t()
        var previous = sigset_t()
        sigemptyset(&unblocked)
        pthread_sigmask(SIG_SETMASK, &unblocked, &previous)
        defer { pthread_sigmask(SIG_SETMASK, &previous, nil) }
        do {
            try process.run()
        } catch {
            throw HarnessError(
                .cannotStart,
                "cannot start \(name) from \(executable.path): \(error.localizedDescription); build it first (swift build)"
            )
        }
    }

    deinit {
        kill()
    }

    /// The process id.
    public var processIdentifier: Int32 { lock.withLock { process.processIdentifier } }

    /// Whether it is still running.
    public var isRunning: Bool { lock.withLock { process.isRunning } }

    /// Everything it printed so far (to standard output only, if standard error has its own file).
    public var output: String {
        if let preserved = lock.withLock({ preserved }) { return preserved.output }
        return (try? String(contentsOf: outputURL, encoding: .utf8)) ?? ""
    }

    /// Everything it wrote to standard error so far (the same as ``output`` unless it has its own file).
    public var errorOutput: String {
        if let preserved = lock.withLock({ preserved }) { return preserved.errorOutput }
        return (try? String(contentsOf: errorURL, encoding: .utf8)) ?? ""
    }

    /// The last `count` lines of its output (both files when standard error has its own).
    public func outputTail(lines count: Int = 20) -> String {
        func tail(_ text: String) -> String {
            let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
            let trimmed = lines.last == "" ? lines.dropLast() : lines[...]
            let kept = trimmed.suffix(count)
            return (kept.count < trimmed.count ? "[… \(trimmed.count - kept.count) earlier lines]\n" : "")
                + kept.joined(separator: "\n")
        }
        guard errorURL != outputURL else { return tail(output) }
        return "stdout:\n\(tail(output))\nstderr:\n\(tail(errorOutput))"
    }

    /// Its exit status once it has exited by itself; `nil` while it runs or if a signal ended it.
    public var exitStatus: Int32? {
        lock.withLock { !process.isRunning && process.terminationReason == .exit ? process.terminationStatus : nil }
    }

    /// How it ended; `nil` while it runs.
    public var termination: Termination? {
        lock.withLock {
            guard !process.isRunning else { return nil }
            return process.terminationReason == .exit
                ? .exited(process.terminationStatus) : .signalled(process.terminationStatus)
        }
    }

    /// Whether the test asked it to stop (``terminate(timeout:)``, ``kill()``).
    public var wasStopped: Bool { lock.withLock { stopRequested } }

    /// Whether it may exit by itself without that being a failure (a one-shot, or ``allowExit()`` was called).
    public var mayExit: Bool { lock.withLock { exitAllowed } }

    /// Declares that it may exit by itself from now on (e.g. a daemon the test tells to quit).
    public func allowExit() {
        lock.withLock { exitAllowed = true }
    }

    /// Whether it ended although nobody stopped it and it was not allowed to exit.
    public var diedUnexpectedly: Bool {
        lock.withLock { !process.isRunning && !stopRequested && !exitAllowed }
    }

    /// Sends SIGTERM and waits up to `timeout` for a clean exit.
    /// - Returns: the exit status, or `nil` if it had to be killed.
    @discardableResult
    public func terminate(timeout: Duration = .seconds(10)) -> Int32? {
        lock.withLock {
            stopRequested = true
            if process.isRunning { process.terminate() }
        }
        return waitForExit(timeout: timeout)
            ?? {
                kill()
                return nil
            }()
    }

    /// Sends SIGKILL (a crash, as far as the process can tell).
    public func kill() {
        lock.withLock {
            stopRequested = true
            if process.isRunning { Foundation.kill(process.processIdentifier, SIGKILL) }
        }
        _ = waitForExit(timeout: .seconds(5))
    }

    /// Waits up to `timeout` for the process to exit by itself.
    /// - Returns: its exit status (the signal number if a signal ended it), or `nil` if it is still running.
    public func waitForExit(timeout: Duration) -> Int32? {
        let deadline = ContinuousClock.now + timeout
        while true {
            let status: Int32? = lock.withLock { process.isRunning ? nil : process.terminationStatus }
            if let status { return status }
            guard ContinuousClock.now < deadline else { return nil }
            Thread.sleep(forTimeInterval: 0.01)
        }
    }

    /// Waits up to `timeout` for a line of its output to match the regular expression `pattern`.
    /// - Returns: whether one did (false also when it exited without printing one).
    public func waitForOutput(matching pattern: String, timeout: Duration = .seconds(10)) throws -> Bool {
        let regex: Regex<AnyRegexOutput>
        do {
            regex = try Regex(pattern)
        } catch {
            throw HarnessError(.invalidArgument, "'\(pattern)' is not a regular expression: \(error)")
        }
        let deadline = ContinuousClock.now + timeout
        while true {
            // Read the exit state first: output written before the exit is then all in the file.
            let exited = !isRunning
            let text = output + (errorURL == outputURL ? "" : "\n" + errorOutput)
            if text.split(separator: "\n").contains(where: { $0.contains(regex) }) { return true }
            if exited || ContinuousClock.now >= deadline { return false }
            Thread.sleep(forTimeInterval: 0.02)
        }
    }

    /// Reads its output into memory, so that it outlives the files.
    func preserveOutput() {
        let kept = (output, errorOutput)
        lock.withLock { if preserved == nil { preserved = kept } }
    }
}

extension ManagedProcess {
    /// Starts `executable` in `directory`, with standard output and error in two files there
    /// (`<name>-<random>.out`, `.err`; spaces and slashes in `name` become dashes).
    public convenience init(
        name: String, executable: URL, arguments: [String], environment: [String: String] = [:], in directory: URL,
        mayExit: Bool = false
    ) throws {
        let stem =
            name.replacingOccurrences(of: " ", with: "-").replacingOccurrences(of: "/", with: "-")
            + "-" + String(UInt32.random(in: 0 ... .max), radix: 16)
        try self.init(
            name: name, executable: executable, arguments: arguments, environment: environment,
            outputURL: directory.appendingPathComponent(stem + ".out"),
            errorURL: directory.appendingPathComponent(stem + ".err"),
            currentDirectory: directory, mayExit: mayExit)
    }

    /// Starts `python3` (the one on `PATH`) with `arguments`, as ``init(name:executable:arguments:environment:in:mayExit:)`` does.
    public static func python3(name: String, arguments: [String], in directory: URL) throws -> ManagedProcess {
        try ManagedProcess(
            name: name, executable: URL(fileURLWithPath: "/usr/bin/env"), arguments: ["python3"] + arguments,
            in: directory,
            mayExit: true)
    }
}

/// Finds the executables this package builds (flowd, flowctl, examples).
public enum BuiltProducts {
    /// The build directory: `$FLOWBUS_BIN_DIR`, else the directory of the running test bundle.
    public static var directory: URL {
        if let explicit = ProcessInfo.processInfo.environment["FLOWBUS_BIN_DIR"] {
            return URL(fileURLWithPath: explicit)
        }
        var url = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
        // swift test runs `<build dir>/<Package>PackageTests.xctest`, beside the products (of a
        // user's package too, which may have no flowd).
        if url.pathExtension == "xctest" { return url.deletingLastPathComponent() }
        while url.path != "/" {
            url.deleteLastPathComponent()
            if FileManager.default.isExecutableFile(atPath: url.appendingPathComponent("flowd").path) { return url }
        }
        return URL(fileURLWithPath: FileManager.default.currentDirectoryPath).appendingPathComponent(".build/debug")
    }

    /// The executable `name`, or an error saying how to build it.
    public static func executable(_ name: String) throws -> URL {
        let url = directory.appendingPathComponent(name)
        guard FileManager.default.isExecutableFile(atPath: url.path) else {
            throw HarnessError(
                .notBuilt,
                "\(name) is not built in \(directory.path): run `swift build --product \(name)` (a dependency's executable is built only when named), or set FLOWBUS_BIN_DIR"
            )
        }
        return url
    }
}
