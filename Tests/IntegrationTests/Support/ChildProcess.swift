import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A failure with a message that says what went wrong and, where it can, how to fix it.
struct TestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// A real child process whose stdout and stderr go to files (no pipe can fill up and block it).
///
/// Every wait is bounded; ``stop()`` (also called on deinit) kills a process still running, so a
/// failing test never leaves one behind.
final class ChildProcess {
    /// A short name for messages, e.g. `wire-smoke listen`.
    let name: String
    private let process = Process()
    private let stdoutURL: URL
    private let stderrURL: URL

    /// Starts `executable` with `arguments`; output files go to `directory`.
    init(_ name: String, executable: URL, arguments: [String], directory: TemporaryDirectory) throws {
        self.name = name
        let fileStem = name.replacingOccurrences(of: " ", with: "-") + "-" + String(UInt32.random(in: 0 ... .max), radix: 16)
        stdoutURL = directory.url.appendingPathComponent(fileStem + ".out")
        stderrURL = directory.url.appendingPathComponent(fileStem + ".err")
        for url in [stdoutURL, stderrURL] where !FileManager.default.createFile(atPath: url.path, contents: nil) {
            throw TestFailure("cannot create \(url.path)")
        }
        process.executableURL = executable
        process.arguments = arguments
        process.currentDirectoryURL = directory.url
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = try FileHandle(forWritingTo: stdoutURL)
        process.standardError = try FileHandle(forWritingTo: stderrURL)
        do {
            try process.run()
        } catch {
            throw TestFailure("cannot start \(name) (\(executable.path)): \(error)")
        }
    }

    /// Starts `python3` with `arguments`.
    static func python(_ name: String, _ arguments: [String], directory: TemporaryDirectory) throws -> ChildProcess {
        try ChildProcess(
            name, executable: URL(fileURLWithPath: "/usr/bin/env"), arguments: ["python3"] + arguments,
            directory: directory)
    }

    deinit { stop() }

    var isRunning: Bool { process.isRunning }

    /// Waits at most `timeout` for the process to exit; returns its exit status, or `nil` if it
    /// had to be killed (it is killed then) or died from a signal.
    @discardableResult
    func waitForExit(timeout: Duration) -> Int32? {
        let clock = ContinuousClock()
        let deadline = clock.now + timeout
        while process.isRunning && clock.now < deadline {
            Thread.sleep(forTimeInterval: 0.01)
        }
        if process.isRunning {
            stop()
            return nil
        }
        return process.terminationReason == .exit ? process.terminationStatus : nil
    }

    /// Waits for the exit and fails with the process's output if the status is not `expected`.
    func expectExit(_ expected: Int32, within timeout: Duration = .seconds(30), sourceLocation: SourceLocation = #_sourceLocation) {
        let status = waitForExit(timeout: timeout)
        #expect(
            status == expected,
            "\(name) exited with \(status.map(String.init) ?? "no status (killed after \(timeout) or by a signal)"), \(expected) expected\n\(transcript)",
            sourceLocation: sourceLocation)
    }

    /// Kills the process if it still runs (SIGTERM, then SIGKILL) and reaps it, within 5 s.
    func stop() {
        guard process.isRunning else { return }
        process.terminate()
        let clock = ContinuousClock()
        let deadline = clock.now + .seconds(2)
        while process.isRunning && clock.now < deadline { Thread.sleep(forTimeInterval: 0.01) }
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            let hardDeadline = clock.now + .seconds(3)
            while process.isRunning && clock.now < hardDeadline { Thread.sleep(forTimeInterval: 0.01) }
        }
    }

    /// Everything written to stdout so far.
    var stdout: String { (try? String(contentsOf: stdoutURL, encoding: .utf8)) ?? "" }
    /// Everything written to stderr so far.
    var stderr: String { (try? String(contentsOf: stderrURL, encoding: .utf8)) ?? "" }
    /// The stdout lines so far.
    var stdoutLines: [String] { stdout.split(separator: "\n").map(String.init) }
    /// Both outputs, for failure messages.
    var transcript: String { "--- \(name) stdout:\n\(stdout)--- \(name) stderr:\n\(stderr)---" }
}

/// A fresh directory under /tmp (short, so `ipc://` paths fit the 107-byte socket path limit),
/// removed with everything in it on deinit.
final class TemporaryDirectory {
    let url: URL
    var path: String { url.path }

    init() throws {
        var template = Array("/tmp/flowbus-it.XXXXXX".utf8CString)
        guard let created = mkdtemp(&template) else {
            throw TestFailure("mkdtemp failed: errno \(errno)")
        }
        url = URL(fileURLWithPath: String(cString: created), isDirectory: true)
    }

    /// An `ipc://` endpoint in this directory.
    func ipcEndpoint(_ name: String) -> String { "ipc://\(path)/\(name)" }

    deinit { try? FileManager.default.removeItem(at: url) }
}

/// Where things are: the package root, the built executables, python3.
enum Locations {
    /// The package root: the nearest ancestor of this file with a Package.swift.
    static let packageRoot: URL = {
        var directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        while directory.path != "/" {
            if FileManager.default.fileExists(atPath: directory.appendingPathComponent("Package.swift").path) {
                return directory
            }
            directory.deleteLastPathComponent()
        }
        return URL(fileURLWithPath: FileManager.default.currentDirectoryPath)
    }()

    /// A file of the package, by its path from the root.
    static func file(_ relativePath: String) -> URL {
        packageRoot.appendingPathComponent(relativePath)
    }

    /// An executable product of this package, built beside the test bundle.
    ///
    /// SwiftPM puts products and the test bundle in one directory (`.build/<triple>/debug`; on
    /// Linux the bundle is the running executable, on macOS it is a bundle directory around it),
    /// so this walks up from the running executable. `FLOWBUS_BIN_DIR` overrides it;
    /// `<root>/.build/debug` is the last resort.
    static func product(_ name: String) throws -> URL {
        var candidates: [URL] = []
        if let override = ProcessInfo.processInfo.environment["FLOWBUS_BIN_DIR"] {
            candidates.append(URL(fileURLWithPath: override))
        }
        var directory = runningExecutable.deletingLastPathComponent()
        for _ in 0..<4 where directory.path != "/" {
            candidates.append(directory)
            directory.deleteLastPathComponent()
        }
        candidates.append(packageRoot.appendingPathComponent(".build/debug"))
        for candidate in candidates {
            let path = candidate.appendingPathComponent(name).path
            if FileManager.default.isExecutableFile(atPath: path) { return URL(fileURLWithPath: path) }
        }
        throw TestFailure(
            "the \(name) executable is not built (looked in \(candidates.map(\.path).joined(separator: ", "))). "
                + "Build it with `swift build --product \(name)` or `swift build --build-tests`, or set FLOWBUS_BIN_DIR.")
    }

    /// The test process's own executable, symlinks resolved.
    static var runningExecutable: URL {
        #if os(Linux)
        var buffer = [UInt8](repeating: 0, count: Int(PATH_MAX) + 1)
        let count = buffer.withUnsafeMutableBufferPointer { pointer in
            pointer.withMemoryRebound(to: CChar.self) { readlink("/proc/self/exe", $0.baseAddress!, $0.count - 1) }
        }
        if count > 0 {
            return URL(fileURLWithPath: String(decoding: buffer[..<count], as: UTF8.self))
        }
        #endif
        return (Bundle.main.executableURL ?? URL(fileURLWithPath: CommandLine.arguments[0])).resolvingSymlinksInPath()
    }
}

/// Whether python3 with pyzmq can run here (it runs the protocol's Python examples).
enum Python {
    static let hasPyzmq: Bool = {
        guard let directory = try? TemporaryDirectory(),
            let check = try? ChildProcess.python("python3-check", ["-c", "import zmq"], directory: directory)
        else { return false }
        return check.waitForExit(timeout: .seconds(30)) == 0
    }()

    static let hasPython3: Bool = {
        guard let directory = try? TemporaryDirectory(),
            let check = try? ChildProcess.python("python3-check", ["-c", "pass"], directory: directory)
        else { return false }
        return check.waitForExit(timeout: .seconds(30)) == 0
    }()

    /// Python tests run when pyzmq is there, and always on CI (where scripts/bootstrap installs
    /// it), so that a missing install step fails CI instead of skipping silently.
    static var testsEnabled: Bool {
        hasPyzmq || ProcessInfo.processInfo.environment["CI"] != nil
    }

    static let skipReason: Comment = "python3 with pyzmq is missing: run scripts/bootstrap (it installs pyzmq)"

    /// Tests that need python3 only (no pyzmq), with the same rule on CI.
    static var plainTestsEnabled: Bool {
        hasPython3 || ProcessInfo.processInfo.environment["CI"] != nil
    }
}
