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
struct StepsScenario: DaemonPathScenario {
    static let key = "steps"
    static let flowName = "BenchFlow"

    var id: ScenarioID { ScenarioID(group: .flowbus, key: Self.key) }
    var path: String { "stepper DEALER → flowd (ROUTER → flow → XPUB) → SUB nav/did/, step in, didNavigate out" }
    var baseline: ScenarioID? { .rawTwoHop }

    // MARK: The daemon path

    static var daemon: DaemonExecutable {
        DaemonExecutable(
            name: "flowd", scenario: key, explicitPath: \.flowdPath,
            buildHint: "swift build -c release --product flowbench --product flowd", builds: "both",
            otherScenarios: "one_hop two_hop reactor")
    }
    var frames: Int { 6 }
    var senderShape: FrameShape { .step }
    var subscription: String { Topic.didNavigate(Self.flowName) }
    var receiverSequence: SequenceField { .params }

    func daemonRun(_ run: String, on bench: Bench) throws -> DaemonRun {
        let endpoints = try flowdEndpoints(run: run, on: bench)
        return DaemonRun(
            configFile: "flowd.yaml", config: flowdConfig(endpoints: endpoints, highWaterMark: bench.config.highWaterMark),
            arguments: ["--log-level", bench.config.flowdLogLevel], senderEndpoint: endpoints.ingress,
            receiverEndpoint: endpoints.events,
            isReady: { try Self.isReady(control: endpoints.control, context: bench.context) })
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
