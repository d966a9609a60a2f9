import Foundation

/// A FlowBus path through a real daemon that flowbench starts for each measurement (`flowd` for
/// the steps scenario, `fixture-reactors` for the reactor scenario):
///
///     sender DEALER → daemon (ROUTER → … → XPUB) → SUB receiver
///
/// The daemon is the executable beside flowbench, or the one its option names. Each measurement
/// (throughput, latency) writes a fresh config into the temporary directory, starts a fresh
/// daemon, waits for it to be ready, starts the receiver (SUB on the daemon's output) and the
/// sender (DEALER to the daemon's input), primes the path with probes (sequence 0), and collects
/// both reports; as the raw two-hop path gets a fresh forwarder. The daemon's CPU time is metered
/// over the throughput run, as the forwarder's is. A conforming scenario only states what
/// differs: its daemon, that daemon's config, endpoints and readiness, the receiver's
/// subscription and sequence field, and the sender's shape (and, if it has one, a setup phase).
protocol DaemonPathScenario: Scenario {
    /// The daemon and how to find it.
    var daemon: DaemonExecutable { get }
    /// ``Measurement/frames`` of this path.
    var frames: Int { get }
    /// What the sender sends (its sequence travels in the params: `--sequence-in params`).
    var senderShape: FrameShape { get }
    /// The topic the receiver subscribes to on ``DaemonRun/receiverEndpoint``.
    var subscription: String { get }
    /// Where the receiver finds the sequence in what the daemon publishes.
    var receiverSequence: SequenceField { get }
    /// Chooses the endpoints of measurement `run` and says how to configure and start the daemon.
    func daemonRun(_ run: String, on bench: Bench) throws -> DaemonRun
}

/// One measurement's daemon, as a ``DaemonPathScenario`` sets it up.
struct DaemonRun {
    /// The config file's name after `<run>-`, e.g. `flowd.yaml`.
    var configFile: String
    /// The config's text.
    var config: String
    /// The daemon's arguments after `--config <path>`.
    var arguments: [String]
    /// The endpoint the sender connects to.
    var senderEndpoint: String
    /// The endpoint the receiver subscribes on.
    var receiverEndpoint: String
    /// Whether the daemon is ready for the peers (polled after it starts).
    var isReady: () throws -> Bool
    /// More sender arguments (e.g. `--stepper-ids FILE`).
    var senderArguments: [String] = []
    /// The daemon's journal, if its config has one.
    var journal: JournalInfo? = nil
    /// Runs once the daemon is ready, before the peers start, in each measurement: builds what
    /// the measurement needs (e.g. a large navigation tree).
    var setUp: ((ExternalProcess) throws -> SetupFigures)? = nil
    /// Counts what the daemon holds, after the throughput run's usage is read: a large status
    /// reply costs the daemon memory, which must not count as its peak while routing.
    var census: (() throws -> SetupFigures.Census)? = nil
}

/// A daemon executable that a scenario needs: `--<name>`, else `<name>` in flowbench's own
/// directory (a build of the package puts its executables side by side).
struct DaemonExecutable {
    /// The executable's file name, also its option (`--<name>`) and its name in messages.
    var name: String
    /// The key of the scenario that needs it.
    var scenario: String
    /// The option's value in the config (`nil`: the one beside flowbench).
    var explicitPath: KeyPath<BenchConfig, String?>
    /// The command that builds it.
    var buildHint: String
    /// What ``buildHint`` builds, as the fix says it: `it` or `both`.
    var builds: String
    /// The other scenarios' keys, for the `--only` that skips this one.
    var otherScenarios: String

    func path(config: BenchConfig) throws -> String {
        if let explicit = config[keyPath: explicitPath] {
            guard FileManager.default.isExecutableFile(atPath: explicit) else {
                throw BenchError(
                    "--\(name) \(explicit) is not an executable file",
                    fix:
                        "point --\(name) at a built \(name), e.g. .build/release/\(name) (build it with `\(buildHint)`)"
                )
            }
            return explicit
        }
        let directory = URL(fileURLWithPath: try selfExecutablePath()).deletingLastPathComponent().path
        let candidate = "\(directory)/\(name)"
        guard FileManager.default.isExecutableFile(atPath: candidate) else {
            throw BenchError(
                "the \(scenario) scenario needs \(name), and there is none beside flowbench (\(candidate))",
                fix:
                    "build \(builds) with `\(buildHint)` (same -c and --scratch-path as flowbench), pass --\(name) PATH, or skip it with --only \(otherScenarios)"
            )
        }
        return candidate
    }
}

extension DaemonPathScenario {
    func preflight(config: BenchConfig) throws {
        _ = try daemon.path(config: config)
    }

    func run(on bench: Bench) throws -> Measurement {
        let executable = try daemon.path(config: bench.config)
        let throughput = try measure(.throughput, daemon: executable, on: bench)
        let latency = try measure(.latency, daemon: executable, on: bench)
        var measurement = Measurement(throughput: throughput.run, latency: latency.run, frames: frames)
        measurement.journal = throughput.journal
        measurement.setup = throughput.setup
        return measurement
    }

    // MARK: One measurement

    private func measure(
        _ mode: MeasureMode, daemon executable: String, on bench: Bench
    ) throws -> (run: PathRun, journal: JournalInfo?, setup: SetupFigures?) {
        let run = bench.nextRun()
        let config = bench.config
        defer { bench.stopAll() }
        let hwm = ["--hwm", String(config.highWaterMark)]
        let expected = mode == .throughput ? config.messages : config.latencyWarmup + config.latencySamples
        let name = daemon.name

        let setup = try daemonRun(run, on: bench)
        let configPath = "\(bench.directory)/\(run)-\(setup.configFile)"
        do {
            try setup.config.write(toFile: configPath, atomically: true, encoding: .utf8)
        } catch {
            throw BenchError(
                "cannot write the \(name) config \(configPath): \(error)", fix: "set TMPDIR to a writable directory")
        }
        let daemon = try bench.spawnProcess(
            "\(run)-\(name)", executable: executable, arguments: ["--config", configPath] + setup.arguments
        ) { _ in try setup.isReady() }

        do {
            var built = try setup.setUp?(daemon)
            built?.residentBytes = ProcFS.residentBytes(of: daemon.process.processIdentifier)
            var receiverArguments =
                [
                    "--mode", mode.rawValue, "--messages", String(expected),
                    "--idle-timeout", String(config.idleTimeoutMilliseconds),
                    "--input", "sub", "--endpoint", setup.receiverEndpoint,
                    "--subscribe", subscription, "--sequence-in", receiverSequence.rawValue,
                ] + hwm
            if mode == .latency { receiverArguments += ["--ack-bind", bench.bindEndpoint("\(run)-ack")] }
            let receiver = "\(run)-receiver"
            let receiverEndpoints = try bench.spawnPeer(receiver, role: .receiver, arguments: receiverArguments)

            var senderArguments =
                [
                    "--connect", setup.senderEndpoint, "--mode", mode.rawValue, "--shape", senderShape.rawValue,
                    "--sequence-in", SequenceField.params.rawValue,
                ] + hwm + setup.senderArguments
            switch mode {
            case .throughput: senderArguments += ["--messages", String(config.messages)]
            case .latency:
                guard let ack = receiverEndpoints["ack"] else {
                    throw BenchError("the receiver did not report its ack endpoint", fix: "this is a bug in flowbench")
                }
                senderArguments += [
                    "--messages", String(config.latencySamples), "--warmup", String(config.latencyWarmup),
                    "--ack-connect", ack,
                ]
            }
            let sender = "\(run)-sender"
            try bench.spawnPeer(sender, role: .sender, arguments: senderArguments)

            // Probes (sequence 0) go through the daemon until the receiver sees what they cause.
            let middle = mode == .throughput ? daemon.name : nil
            let measured = try bench.primeAndMeasure(
                sender: sender, receiver: receiver,
                timeout: 30 + Double(expected) / 2_000, middle: middle)
            if mode == .throughput, let census = setup.census {
                built?.census = try census()
            }
            return (measured, setup.journal, built)
        } catch {
            FileHandle.standardError.write(
                Data("flowbench: \(daemon.name) output (\(daemon.logPath)):\n\(daemon.output())\n".utf8))
            throw error
        }
    }
}
