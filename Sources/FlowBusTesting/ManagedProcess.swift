import Foundation

/// A child process started by a test: its output goes to a file, and it is always stopped.
public final class ManagedProcess: @unchecked Sendable {
    // Process is not Sendable; every use goes through `lock`.
    private let process = Process()
    private let lock = NSLock()
    /// A name for messages, e.g. `flowd`.
    public let name: String
    /// Where standard output and error go.
    public let outputURL: URL

    /// Starts `executable` with `arguments` and `environment` added to this process's own.
    public init(name: String, executable: URL, arguments: [String], environment: [String: String] = [:], outputURL: URL) throws {
        self.name = name
        self.outputURL = outputURL
        guard FileManager.default.createFile(atPath: outputURL.path, contents: nil) else {
            throw HarnessError("cannot create \(outputURL.path) for \(name)'s output")
        }
        let output = try FileHandle(forWritingTo: outputURL)
        process.executableURL = executable
        process.arguments = arguments
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { _, new in new }
        process.standardOutput = output
        process.standardError = output
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

    /// Everything it printed so far.
    public var output: String {
        (try? String(contentsOf: outputURL, encoding: .utf8)) ?? ""
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
