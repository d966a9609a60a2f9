import FlowBusWire
import Foundation
import ZeroMQ

/// The end-to-end step path: a stepper process → `flowd` → a process receiving didNavigate.
///
/// flowbench writes a one-flow config into its temporary directory and starts the real `flowd`
/// (the executable beside flowbench, or `--flowd`). The flow's first step sets a root screen
/// bound to the stepper `movie-list` (allowed to step while not presented); its `moviePicked`
/// step is `[none]`, so every step the sender publishes is decoded, routed to the flow,
/// navigated (willNavigate, didNavigate) and leaves the tree as it was: memory stays flat
/// however many steps are sent.
///
/// The sender publishes the very step of the raw scenarios (same stepper id, source, name and
/// params, same bytes) from a DEALER to flowd's ingress; flowd's acks pile up unread in the
/// sender's DEALER and are dropped by flowd's ROUTER once that pipe is full, which costs flowd
/// nothing. The receiver SUBscribes to `nav/did/` on flowd's events endpoint. Because the
/// didNavigate envelope carries flowd's own sequence, the sequence travels in the step's
/// `withMovieId` param (0: probe, 1...: measured), which flowd copies into didNavigate's params;
/// the step envelopes are numbered 1, 2, 3… since flowd drops a (source, sequence) it has
/// seen. Each measurement (throughput, latency) gets a fresh flowd, as the raw two-hop path
/// gets a fresh forwarder.
struct StepsScenario: Scenario {
    static let key = "steps"
    static let flowName = "BenchFlow"

    var id: ScenarioID { ScenarioID(group: .flowbus, key: Self.key) }
    var path: String { "stepper DEALER → flowd (ROUTER → flow → XPUB) → SUB nav/did/, step in, didNavigate out" }
    var baseline: ScenarioID? { .rawTwoHop }

    func preflight(config: BenchConfig) throws {
        _ = try Self.flowdExecutable(config: config)
    }

    func run(on bench: Bench) throws -> Measurement {
        let flowd = try Self.flowdExecutable(config: bench.config)
        let throughput = try measure(.throughput, flowd: flowd, on: bench)
        let latency = try measure(.latency, flowd: flowd, on: bench)
        let elapsed = Double(throughput.receiver.firstToLastNanoseconds) / 1e9
        return Measurement(
            messageBytes: throughput.receiver.bytesPerMessage,
            frames: 6,
            throughputPerSecond: elapsed > 0 ? Double(throughput.receiver.received) / elapsed : nil,
            senderPerSecond: throughput.sender.elapsedNanoseconds.map { Double(throughput.sender.sent) / (Double($0) / 1e9) },
            latency: latency.sender.latency,
            lost: throughput.receiver.lost, latencyLost: latency.sender.lost)
    }

    // MARK: Finding flowd

    /// `--flowd`, else `flowd` in flowbench's own directory (both are products of the package,
    /// so a build puts them side by side).
    static func flowdExecutable(config: BenchConfig) throws -> String {
        let buildHint = "swift build -c release --product flowbench --product flowd"
        if let explicit = config.flowdPath {
            guard FileManager.default.isExecutableFile(atPath: explicit) else {
                throw BenchError("--flowd \(explicit) is not an executable file",
                                 fix: "point --flowd at a built flowd, e.g. .build/release/flowd (build it with `\(buildHint)`)")
            }
            return explicit
        }
        let directory = URL(fileURLWithPath: try selfExecutablePath()).deletingLastPathComponent().path
        let candidate = "\(directory)/flowd"
        guard FileManager.default.isExecutableFile(atPath: candidate) else {
            throw BenchError(
                "the steps scenario needs flowd, and there is none beside flowbench (\(candidate))",
                fix: "build both with `\(buildHint)` (same -c and --scratch-path as flowbench), pass --flowd PATH, or skip it with --only one_hop two_hop reactor")
        }
        return candidate
    }

    // MARK: One measurement

    private func measure(_ mode: MeasureMode, flowd executable: String, on bench: Bench) throws -> (sender: SenderReport, receiver: ReceiverReport) {
        let run = bench.nextRun()
        let config = bench.config
        defer { bench.stopAll() }
        let hwm = ["--hwm", String(config.highWaterMark)]
        let expected = mode == .throughput ? config.messages : config.latencyWarmup + config.latencySamples

        let endpoints = try flowdEndpoints(run: run, on: bench)
        let configPath = "\(bench.directory)/\(run)-flowd.yaml"
        do {
            try flowdConfig(endpoints: endpoints, highWaterMark: config.highWaterMark)
                .write(toFile: configPath, atomically: true, encoding: .utf8)
        } catch {
            throw BenchError("cannot write the flowd config \(configPath): \(error)", fix: "set TMPDIR to a writable directory")
        }
        let flowd = try bench.spawnProcess(
            "\(run)-flowd", executable: executable, arguments: ["--config", configPath, "--log-level", config.flowdLogLevel]
        ) { _ in try Self.isReady(control: endpoints.control, context: bench.context) }

        do {
            var receiverArguments = ["--mode", mode.rawValue, "--messages", String(expected),
                                     "--idle-timeout", String(config.idleTimeoutMilliseconds),
                                     "--input", "sub", "--endpoint", endpoints.events,
                                     "--subscribe", Topic.didNavigate(Self.flowName), "--sequence-in", "params"] + hwm
            if mode == .latency { receiverArguments += ["--ack-bind", bench.bindEndpoint("\(run)-ack")] }
            let receiver = "\(run)-receiver"
            let receiverEndpoints = try bench.spawnPeer(receiver, role: .receiver, arguments: receiverArguments)

            var senderArguments = ["--connect", endpoints.ingress, "--mode", mode.rawValue, "--shape", FrameShape.step.rawValue,
                                   "--sequence-in", "params"] + hwm
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

            // Probes (withMovieId 0) go through flowd until the receiver sees their didNavigate.
            try bench.send(sender, "prime")
            _ = try bench.waitFor("primed", from: receiver, timeout: 15)
            try bench.send(sender, "go")
            let timeout = 30 + Double(expected) / 2_000
            let senderReport = try bench.result(SenderReport.self, from: sender, timeout: timeout)
            let receiverReport = try bench.result(ReceiverReport.self, from: receiver, timeout: timeout)
            return (senderReport, receiverReport)
        } catch {
            FileHandle.standardError.write(Data("flowbench: \(flowd.name) output (\(flowd.logPath)):\n\(flowd.output())\n".utf8))
            throw error
        }
    }

    // MARK: flowd's config

    private struct Endpoints {
        var ingress: String
        var events: String
        var control: String
    }

    /// ipc: socket files of this run in the temporary directory. tcp: ports on 127.0.0.1 that
    /// were free a moment ago (flowd binds them itself and does not report kernel-chosen ports).
    private func flowdEndpoints(run: String, on bench: Bench) throws -> Endpoints {
        switch bench.config.transport {
        case .ipc:
            return Endpoints(ingress: bench.bindEndpoint("\(run)-ingress"), events: bench.bindEndpoint("\(run)-events"),
                             control: bench.bindEndpoint("\(run)-control"))
        case .tcp:
            return Endpoints(ingress: try bench.freeTCPEndpoint(), events: try bench.freeTCPEndpoint(),
                             control: try bench.freeTCPEndpoint())
        }
    }

    /// One flow: `start` sets a root screen bound to the bench stepper; `moviePicked` does
    /// nothing to the tree but is still navigated (willNavigate, didNavigate).
    private func flowdConfig(endpoints: Endpoints, highWaterMark: Int32) -> String {
        """
        # Written by flowbench for its steps scenario.
        endpoints:
          ingress: \(endpoints.ingress)
          events: \(endpoints.events)
          control: \(endpoints.control)
        limits:
          maxMessageBytes: 1048576
          highWaterMark: \(highWaterMark)
        heartbeatMilliseconds: 1000
        coordinator:
          flow: \(Self.flowName)
          step: start
        flows:
          \(Self.flowName):
            root: stack
            id: bench
            steps:
              start:
                - setRoot: { screen: \(BenchMessage.stepperID), stepper: \(BenchMessage.stepperID), allowStepWhenNotPresented: true }
              \(BenchMessage.stepName):
                - none

        """
    }

    // MARK: Readiness

    /// Whether flowd answers a status request on `control` and binds the bench stepper: its
    /// endpoints are bound and its root flow has run its first step.
    static func isReady(control: String, context: Context) throws -> Bool {
        let socket = try context.socket(.dealer)
        defer { socket.close() }
        try socket.setOption(.linger(0))
        try socket.connect(control)
        let request = StatusRequest(envelope: Envelope(kind: .statusRequest, sequence: 1, source: "flowbench#\(getpid())"))
        _ = try socket.send(message: try request.encoded().frames)
        guard let frames = try socket.receiveMessage(mode: .timeout(milliseconds: 250)),
              case .statusReply(let reply)? = try? WireMessage.decode(from: FrameBuffer(frames: frames)),
              case .list(let bindings)? = reply.status["bindings"]
        else { return false }
        return bindings.contains { binding in
            if case .map(let map) = binding, case .string(BenchMessage.stepperID)? = map["stepper"] { return true }
            return false
        }
    }
}
