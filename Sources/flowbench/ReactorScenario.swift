import FlowBusWire
import Foundation
import ZeroMQ

/// The reactor path: a view process sends actions → a reactor host → the view receives states.
///
/// flowbench writes a config with one `reactors:` entry (host `bench`, serving the `bench`
/// reactor) into its temporary directory and starts the real `reactor-host` example (the
/// executable beside flowbench, or `--reactor-host`). Its `bench` reactor turns `tick(n: k)` into
/// the state `{n: k}` synchronously, on the host's I/O thread: one action, one state.
///
/// The sender is a view's DEALER sending `tick(n:)` actions to the host's `actions` ROUTER; the
/// host's cumulative acks pile up unread in that DEALER and are dropped by the ROUTER once its
/// pipe is full, which costs the host nothing. The receiver SUBscribes to `state/bench` on the
/// host's `states` XPUB. As the state's envelope carries the reactor's state sequence, the
/// bench sequence travels in `n` (0: probe, 1...: measured); the action envelopes are numbered
/// 1, 2, 3… since the host refuses a (source, sequence) it has seen. Each measurement
/// (throughput, latency) gets a fresh host, as the raw two-hop path gets a fresh forwarder.
struct ReactorScenario: Scenario {
    static let key = "reactor"

    var id: ScenarioID { ScenarioID(group: .flowbus, key: Self.key) }
    var path: String { "view DEALER → reactor-host (ROUTER → bench reactor → XPUB) → SUB state/bench, action in, state out" }
    var baseline: ScenarioID? { .rawTwoHop }

    func preflight(config: BenchConfig) throws {
        _ = try Self.reactorHostExecutable(config: config)
    }

    func run(on bench: Bench) throws -> Measurement {
        let host = try Self.reactorHostExecutable(config: bench.config)
        let throughput = try measure(.throughput, host: host, on: bench)
        let latency = try measure(.latency, host: host, on: bench)
        let elapsed = Double(throughput.receiver.firstToLastNanoseconds) / 1e9
        return Measurement(
            messageBytes: throughput.receiver.bytesPerMessage,
            frames: 3,
            throughputPerSecond: elapsed > 0 ? Double(throughput.receiver.received) / elapsed : nil,
            senderPerSecond: throughput.sender.elapsedNanoseconds.map { Double(throughput.sender.sent) / (Double($0) / 1e9) },
            latency: latency.sender.latency,
            lost: throughput.receiver.lost, latencyLost: latency.sender.lost)
    }

    // MARK: Finding reactor-host

    /// `--reactor-host`, else `reactor-host` in flowbench's own directory (both are products of
    /// the package, so a build puts them side by side).
    static func reactorHostExecutable(config: BenchConfig) throws -> String {
        let buildHint = "swift build -c release --product reactor-host"
        if let explicit = config.reactorHostPath {
            guard FileManager.default.isExecutableFile(atPath: explicit) else {
                throw BenchError("--reactor-host \(explicit) is not an executable file",
                                 fix: "point --reactor-host at a built reactor-host, e.g. .build/release/reactor-host (build it with `\(buildHint)`)")
            }
            return explicit
        }
        let directory = URL(fileURLWithPath: try selfExecutablePath()).deletingLastPathComponent().path
        let candidate = "\(directory)/reactor-host"
        guard FileManager.default.isExecutableFile(atPath: candidate) else {
            throw BenchError(
                "the reactor scenario needs reactor-host, and there is none beside flowbench (\(candidate))",
                fix: "build it with `\(buildHint)` (same -c and --scratch-path as flowbench), pass --reactor-host PATH, or skip it with --only one_hop two_hop steps")
        }
        return candidate
    }

    // MARK: One measurement

    private func measure(_ mode: MeasureMode, host executable: String, on bench: Bench) throws -> (sender: SenderReport, receiver: ReceiverReport) {
        let run = bench.nextRun()
        let config = bench.config
        defer { bench.stopAll() }
        let hwm = ["--hwm", String(config.highWaterMark)]
        let expected = mode == .throughput ? config.messages : config.latencyWarmup + config.latencySamples

        let actions = config.transport == .ipc ? bench.bindEndpoint("\(run)-actions") : try bench.freeTCPEndpoint()
        let states = config.transport == .ipc ? bench.bindEndpoint("\(run)-states") : try bench.freeTCPEndpoint()
        let configPath = "\(bench.directory)/\(run)-reactors.yaml"
        do {
            try hostConfig(run: run, actions: actions, states: states, directory: bench.directory, highWaterMark: config.highWaterMark)
                .write(toFile: configPath, atomically: true, encoding: .utf8)
        } catch {
            throw BenchError("cannot write the reactor-host config \(configPath): \(error)", fix: "set TMPDIR to a writable directory")
        }
        let host = try bench.spawnProcess(
            "\(run)-reactor-host", executable: executable, arguments: ["--config", configPath, "--host", Self.hostName]
        ) { _ in try Self.isReady(actions: actions, context: bench.context) }

        do {
            var receiverArguments = ["--mode", mode.rawValue, "--messages", String(expected),
                                     "--idle-timeout", String(config.idleTimeoutMilliseconds),
                                     "--input", "sub", "--endpoint", states,
                                     "--subscribe", Topic.state(BenchMessage.reactorID), "--sequence-in", SequenceField.state.rawValue] + hwm
            if mode == .latency { receiverArguments += ["--ack-bind", bench.bindEndpoint("\(run)-ack")] }
            let receiver = "\(run)-receiver"
            let receiverEndpoints = try bench.spawnPeer(receiver, role: .receiver, arguments: receiverArguments)

            var senderArguments = ["--connect", actions, "--mode", mode.rawValue, "--shape", FrameShape.action.rawValue,
                                   "--sequence-in", SequenceField.params.rawValue] + hwm
            switch mode {
            case .throughput: senderArguments += ["--messages", String(config.messages)]
            case .latency:
                guard let ack = receiverEndpoints["ack"] else {
                    throw BenchError("the receiver did not report its ack endpoint", fix: "this is a bug in flowbench")
                }
                senderArguments += ["--messages", String(config.latencySamples), "--warmup", String(config.latencyWarmup),
                                    "--ack-connect", ack]
            }
            let sender = "\(run)-sender"
            try bench.spawnPeer(sender, role: .sender, arguments: senderArguments)

            // Probes (n = 0) go through the host until the receiver sees their state.
            try bench.send(sender, "prime")
            _ = try bench.waitFor("primed", from: receiver, timeout: 15)
            try bench.send(sender, "go")
            let timeout = 30 + Double(expected) / 2_000
            let senderReport = try bench.result(SenderReport.self, from: sender, timeout: timeout)
            let receiverReport = try bench.result(ReceiverReport.self, from: receiver, timeout: timeout)
            return (senderReport, receiverReport)
        } catch {
            FileHandle.standardError.write(Data("flowbench: \(host.name) output (\(host.logPath)):\n\(host.output())\n".utf8))
            throw error
        }
    }

    // MARK: reactor-host's config

    static let hostName = "bench"

    /// One reactor host. The config format requires flowd's `endpoints:` too; nothing binds or
    /// connects them here (socket files that are never created). `serves` lists the example's
    /// other reactors as well, which it always hosts, so that it does not warn about them.
    private func hostConfig(run: String, actions: String, states: String, directory: String, highWaterMark: Int32) -> String {
        """
        # Written by flowbench for its reactor scenario.
        endpoints:
          ingress: ipc://\(directory)/\(run)-unused-ingress
          events: ipc://\(directory)/\(run)-unused-events
          control: ipc://\(directory)/\(run)-unused-control
        limits:
          maxMessageBytes: 1048576
          highWaterMark: \(highWaterMark)
        heartbeatMilliseconds: 1000
        reactors:
          \(Self.hostName):
            actions: \(actions)
            states: \(states)
            serves: [\(BenchMessage.reactorID), counter, login, movie/]

        """
    }

    // MARK: Readiness

    /// Whether the host answers a snapshot request for the bench reactor on `actions`: both its
    /// endpoints are bound and the reactor runs. A fresh source id per attempt, since the host
    /// refuses a (source, sequence) it has seen.
    static func isReady(actions: String, context: Context) throws -> Bool {
        let socket = try context.socket(.dealer)
        defer { socket.close() }
        try socket.setOption(.linger(0))
        try socket.connect(actions)
        let source = "flowbench#\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        let request = SnapshotRequest(reactorID: BenchMessage.reactorID,
                                      envelope: Envelope(kind: .snapshotRequest, sequence: 1, source: source))
        _ = try socket.send(message: try request.encoded().frames)
        let deadline = monotonicNanoseconds() + 250_000_000
        while true {
            let left = Int((deadline - monotonicNanoseconds()) / 1_000_000)
            guard left > 0, let frames = try socket.receiveMessage(mode: .timeout(milliseconds: left)) else { return false }
            // The snapshot comes before the ack of the batch; skip anything else.
            if case .snapshot(let snapshot)? = try? WireMessage.decode(from: FrameBuffer(frames: frames)),
               snapshot.reactorID == BenchMessage.reactorID {
                return true
            }
        }
    }
}
