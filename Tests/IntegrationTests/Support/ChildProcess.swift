import FlowBusTesting
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// What the tests need of a process beyond FlowBusTesting's ``ManagedProcess``: bounded waits that
/// stop a process still running, exit status expectations, and stdout and stderr read apart
/// (start it with its own error file, e.g. ``ManagedProcess/init(name:executable:arguments:environment:in:)``).
extension ManagedProcess {
    /// Waits at most `timeout` for the process to exit; returns its exit status, or `nil` if it
    /// had to be stopped (it is stopped then) or died from a signal.
    @discardableResult
    func exitStatus(within timeout: Duration) -> Int32? {
        if waitForExit(timeout: timeout) == nil && isRunning {
            stop()
            return nil
        }
        return exitStatus
    }

    /// Waits for the exit and fails with the process's output if the status is not `expected`.
    func expectExit(
        _ expected: Int32, within timeout: Duration = .seconds(30), sourceLocation: SourceLocation = #_sourceLocation
    ) {
        let status = exitStatus(within: timeout)
        #expect(
            status == expected,
            "\(name) exited with \(status.map(String.init) ?? "no status (killed after \(timeout) or by a signal)"), \(expected) expected\n\(transcript)",
            sourceLocation: sourceLocation)
    }

    /// Stops the process if it still runs (SIGTERM, then SIGKILL after 2 s) and reaps it.
    func stop() {
        terminate(timeout: .seconds(2))
    }

    /// Everything written to stdout so far.
    var stdout: String { output }
    /// Everything written to stderr so far.
    var stderr: String { errorOutput }
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
            throw HarnessError(.unavailable, "mkdtemp failed: errno \(errno)")
        }
        url = URL(fileURLWithPath: String(cString: created), isDirectory: true)
    }

    /// An `ipc://` endpoint in this directory.
    func ipcEndpoint(_ name: String) -> String { "ipc://\(path)/\(name)" }

    deinit { try? FileManager.default.removeItem(at: url) }
}

/// Where things are: the package root and its files.
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
}

/// Whether python3 with pyzmq can run here (it runs the protocol's Python examples).
enum Python {
    static let hasPyzmq: Bool = {
        guard let directory = try? TemporaryDirectory(),
            let check = try? ManagedProcess.python3(
                name: "python3-check", arguments: ["-c", "import zmq"], in: directory.url)
        else { return false }
        return check.exitStatus(within: .seconds(30)) == 0
    }()

    static let hasPython3: Bool = {
        guard let directory = try? TemporaryDirectory(),
            let check = try? ManagedProcess.python3(
                name: "python3-check", arguments: ["-c", "pass"], in: directory.url)
        else { return false }
        return check.exitStatus(within: .seconds(30)) == 0
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
