import Foundation

/// A child process started by a test: its output goes to a file, and it is always stopped.
public final class ManagedProcess: @unchecked Sendable {
    // Process is not Sendable; every use goes through `lock`.
    private let process = Process()
    private let lock = NSLock()
    /// A name for messages, e.g. `flowd`.
    public let name: String
    /// Where standard output goes (and standard error, unless ``errorURL`` differs).
    public let outputURL: URL
    /// Where standard error goes: ``outputURL``, unless the process was started with its own file for it.
    public let errorURL: URL

    /// Starts `executable` with `arguments` and `environment` added to this process's own.
    ///
    /// Standard output and error go to `outputURL`, or error to `errorURL` if given. The process
    /// runs in `currentDirectory` if given, else in this process's working directory.
    public init(
        name: String, executable: URL, arguments: [String], environment: [String: String] = [:], outputURL: URL,
        errorURL: URL? = nil, currentDirectory: URL? = nil
    ) throws {
        self.name = name
        self.outputURL = outputURL
        self.errorURL = errorURL ?? outputURL
        let files = errorURL == nil ? [outputURL] : [outputURL, self.errorURL]
        for url in files where !FileManager.default.createFile(atPath: url.path, contents: nil) {
            throw HarnessError("cannot create \(url.path) for \(name)'s output")
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
        do {
            try process.run()
        } catch {
            throw HarnessError("cannot start \(name) from \(executable.path): \(error.localizedDescription); build it first (swift build)")
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
        (try? String(contentsOf: outputURL, encoding: .utf8)) ?? ""
    }

    /// Everything it wrote to standard error so far (the same as ``output`` unless it has its own file).
    public var errorOutput: String {
        (try? String(contentsOf: errorURL, encoding: .utf8)) ?? ""
    }

    /// Its exit status once it has exited by itself; `nil` while it runs or if a signal ended it.
    public var exitStatus: Int32? {
        lock.withLock { !process.isRunning && process.terminationReason == .exit ? process.terminationStatus : nil }
    }

    /// Sends SIGTERM and waits up to `timeout` for a clean exit.
    /// - Returns: the exit status, or `nil` if it had to be killed.
    @discardableResult
    public func terminate(timeout: Duration = .seconds(10)) -> Int32? {
        lock.withLock { if process.isRunning { process.terminate() } }
        return waitForExit(timeout: timeout) ?? { kill(); return nil }()
    }

    /// Sends SIGKILL (a crash, as far as the process can tell).
    public func kill() {
        lock.withLock {
            if process.isRunning { Foundation.kill(process.processIdentifier, SIGKILL) }
        }
        _ = waitForExit(timeout: .seconds(5))
    }

    /// Waits up to `timeout` for the process to exit by itself.
    /// - Returns: its exit status, or `nil` if it is still running.
    public func waitForExit(timeout: Duration) -> Int32? {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            let status: Int32? = lock.withLock { process.isRunning ? nil : process.terminationStatus }
            if let status { return status }
            Thread.sleep(forTimeInterval: 0.01)
        }
        return nil
    }
}

extension ManagedProcess {
    /// Starts `executable` in `directory`, with standard output and error in two files there
    /// (`<name>-<random>.out`, `.err`; spaces and slashes in `name` become dashes).
    public convenience init(
        name: String, executable: URL, arguments: [String], environment: [String: String] = [:], in directory: URL
    ) throws {
        let stem = name.replacingOccurrences(of: " ", with: "-").replacingOccurrences(of: "/", with: "-")
            + "-" + String(UInt32.random(in: 0 ... .max), radix: 16)
        try self.init(
            name: name, executable: executable, arguments: arguments, environment: environment,
            outputURL: directory.appendingPathComponent(stem + ".out"), errorURL: directory.appendingPathComponent(stem + ".err"),
            currentDirectory: directory)
    }

    /// Starts `python3` (the one on `PATH`) with `arguments`, as ``init(name:executable:arguments:environment:in:)`` does.
    public static func python3(name: String, arguments: [String], in directory: URL) throws -> ManagedProcess {
        try ManagedProcess(
            name: name, executable: URL(fileURLWithPath: "/usr/bin/env"), arguments: ["python3"] + arguments, in: directory)
    }
}

/// A harness failure, with what to do about it.
public struct HarnessError: Error, CustomStringConvertible, Sendable {
    public var description: String

    public init(_ description: String) {
        self.description = description
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
        // swift test runs `<build dir>/<Package>PackageTests.xctest`, beside the products.
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
            throw HarnessError("\(name) is not built in \(directory.path): run `swift build` (or set FLOWBUS_BIN_DIR)")
        }
        return url
    }
}
