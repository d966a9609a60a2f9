import ArgumentParser
import FlowBusClient
import FlowBusConfiguration
import FlowBusCoordinator
import FlowBusDaemon
import FlowBusTools
import Foundation

#if canImport(Glibc)
import Glibc
#endif

struct LaunchCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "launch",
        abstract:
            "Start the processes a topology's launch: section lists, in dependency order; stop them on Ctrl-C or SIGTERM.",
        discussion: """
            Each process waits for those it is `after` to be ready (control: flowd answers a status \
            request; heartbeat: HOST: the reactor host sends a heartbeat; logLine: REGEX; delayMs: N). \
            A crashed process is restarted with exponential back-off up to restart.maxRetries; beyond \
            that, everything is stopped and flowctl exits 1. Output lines are prefixed with the \
            process's name. ${FLOWBUS_CONFIG} in FILE names FILE itself, and the processes get it; \
            ${…} in the launch: section is expanded by launch only, so other commands read the same \
            file without those variables. A command is looked up in --bin-dir, then beside this \
            flowctl, then on PATH.
            """
    )

    @Argument(help: "The topology file with a launch: section.") var file: String
    @Option(name: .customLong("for"), help: "Stop everything after this many seconds.") var seconds: Double?
    @Option(help: "Stop everything when this one-shot process exits, and exit with its status.") var untilExit: String?
    @Option(name: .customLong("with"), help: "Also start this optional: true entry (repeatable), e.g. --with journey.")
    var including: [String] = []
    @Option(help: "Seconds a process gets to stop after SIGTERM before SIGKILL.") var stopTimeout: Double = 5
    @Option(help: "Look commands up in this directory first, e.g. your package's `swift build --show-bin-path`.")
    var binDir: String?
    @Flag(help: "Do not colour the prefixes (also when NO_COLOR is set or the output is not a terminal).") var noColor =
        false

    func validate() throws {
        if let seconds, seconds <= 0 { throw ValidationError("--for needs a positive number of seconds") }
        if stopTimeout <= 0 { throw ValidationError("--stop-timeout needs a positive number of seconds") }
    }

    func run() throws {
        var environment = ProcessInfo.processInfo.environment
        environment[FlowBusConfig.pathVariable] = file
        let beside = (Bundle.main.executableURL ?? URL(fileURLWithPath: CommandLine.arguments[0]))
            .resolvingSymlinksInPath().deletingLastPathComponent()
        // Launched scripts find flowctl and the daemons beside this flowctl first.
        let binDirectory = binDir.map { URL(fileURLWithPath: $0).standardizedFileURL }
        let search = (binDirectory.map { [$0] } ?? []) + [beside]
        environment["PATH"] = (search.map(\.path) + (environment["PATH"].map { [$0] } ?? [])).joined(separator: ":")
        let launcher: Launcher
        do {
            if let binDirectory, !FileManager.default.fileExists(atPath: binDirectory.path) {
                throw ClientError(
                    .failed,
                    "--bin-dir \(binDirectory.path) does not exist: build first (swift build --product NAME), or pass `swift build --show-bin-path`"
                )
            }
            let config = try FlowBusConfig.load(path: file, environment: environment, expandingLaunch: true)
            let colour = !noColor && isatty(STDOUT_FILENO) != 0 && (environment["NO_COLOR"] ?? "").isEmpty
            launcher = try Launcher(
                config: config,
                options: LaunchOptions(
                    duration: seconds.map { .milliseconds(Int($0 * 1000)) }, untilExit: untilExit,
                    stopTimeout: .milliseconds(Int(stopTimeout * 1000)), colour: colour, searchDirectories: search,
                    environment: environment, including: Set(including), output: emit),
                source: file)
        } catch let error as ClientError {
            throw error
        } catch {
            throw ClientError(.failed, "\(error)")
        }
        onStopSignal { number in launcher.requestStop(reason: number == SIGINT ? "SIGINT" : "SIGTERM") }
        let status = launcher.run()
        if status != 0 { throw ExitCode(status) }
    }
}

/// The write end of the pipe SIGINT and SIGTERM are reported through (set once, before the handler is installed).
nonisolated(unsafe) private var signalPipe: Int32 = -1

/// Calls `handler` (on a thread of its own) for each SIGINT or SIGTERM flowctl receives.
///
/// The signals are caught by a handler rather than ignored (`SIG_IGN`, as a dispatch signal
/// source wants): an ignored signal stays ignored in the processes flowctl starts, which could
/// then not be stopped with SIGTERM, while a caught one is reset to its default by exec.
private func onStopSignal(_ handler: @escaping @Sendable (Int32) -> Void) {
    var fds: [Int32] = [-1, -1]
    guard pipe(&fds) == 0 else { return }
    // Not inherited by the processes flowctl starts.
    for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
    signalPipe = fds[1]
    let readEnd = fds[0]
    Thread.detachNewThread {
        var byte: UInt8 = 0
        while read(readEnd, &byte, 1) == 1 { handler(Int32(byte)) }
    }
    for number in [SIGINT, SIGTERM] {
        _ = signal(number) { number in
            // Only async-signal-safe calls here.
            var byte = UInt8(truncatingIfNeeded: number)
            _ = write(signalPipe, &byte, 1)
        }
    }
}
