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
///
/// `steps_journaled` is the same path with `persistence: { journal, synchronous: full }`: flowd
/// commits every batch to a fresh SQLite journal in the temporary directory (flushed to the
/// disk) before it publishes the batch's events. `steps_journaled_postgres` commits to a fresh
/// database of a PostgreSQL server flowbench starts on 127.0.0.1 (fsync on, as in production),
/// compared with `steps_journaled`.
struct StepsScenario: DaemonPathScenario {
    static let plainKey = "steps"
    static let journaledKey = "steps_journaled"
    static let postgresKey = "steps_journaled_postgres"
    static let tracedKey = "steps_traced"
    static let sampledKey = "steps_traced_1pct"
    static let flowName = "BenchFlow"

    /// Where flowd journals what it applies.
    enum Journal {
        case none, sqlite, postgres
    }

    var journal: Journal

    /// Which steps flowd traces, exporting their spans to a local OTLP/HTTP sink (`--traits Tracing`).
    enum Tracing {
        /// Every step (`always_on`).
        case all
        /// 1% of them (`traceidratio` 0.01).
        case onePercent
    }

    var tracing: Tracing?

    init(journal: Journal, tracing: Tracing? = nil) {
        self.journal = journal
        self.tracing = tracing
    }

    var id: ScenarioID {
        if let tracing { return ScenarioID(group: .flowbus, key: tracing == .all ? Self.tracedKey : Self.sampledKey) }
        let key =
            switch journal {
            case .none: Self.plainKey
            case .sqlite: Self.journaledKey
            case .postgres: Self.postgresKey
            }
        return ScenarioID(group: .flowbus, key: key)
    }
    var path: String {
        if let tracing {
            let which = tracing == .all ? "every step" : "1% of steps"
            return
                "stepper DEALER → flowd (ROUTER → flow → XPUB; spans of \(which) → OTLP/HTTP 127.0.0.1) → SUB nav/did/"
        }
        return switch journal {
        case .none: "stepper DEALER → flowd (ROUTER → flow → XPUB) → SUB nav/did/, step in, didNavigate out"
        case .sqlite: "stepper DEALER → flowd (ROUTER → flow → journal commit, synchronous: full → XPUB) → SUB nav/did/"
        case .postgres: "stepper DEALER → flowd (ROUTER → flow → PostgreSQL commit on 127.0.0.1 → XPUB) → SUB nav/did/"
        }
    }
    var baseline: ScenarioID? { .rawTwoHop }
    /// The journal's cost: the same path without it; PostgreSQL's: beside SQLite's; tracing's:
    /// beside the same path untraced.
    var reference: ScenarioID? {
        if tracing != nil { return .steps }
        switch journal {
        case .none: return nil
        case .sqlite: return .steps
        case .postgres: return ScenarioID(group: .flowbus, key: Self.journaledKey)
        }
    }

    // MARK: The daemon path

    var daemon: DaemonExecutable { FlowdSetup.daemon(scenario: id.key) }
    var frames: Int { 6 }
    var senderShape: FrameShape { .step }
    var subscription: String { Topic.didNavigate(Self.flowName) }
    var receiverSequence: SequenceField { .params }

    func daemonRun(_ run: String, on bench: Bench) throws -> DaemonRun {
        let endpoints = try FlowdSetup.endpoints(run: run, on: bench)
        let info: JournalInfo? =
            switch journal {
            case .none: nil
            case .sqlite:
                JournalInfo(
                    path: "\(bench.directory)/\(run)-journal.sqlite", synchronous: "full",
                    fileSystem: ProcFS.fileSystemType(of: bench.directory))
            case .postgres:
                // A fresh database per measurement, as a fresh SQLite file.
                JournalInfo(
                    path: try BenchPostgres.shared.database(named: run.replacingOccurrences(of: "-", with: "_")),
                    synchronous: "synchronous_commit on, fsync on", fileSystem: "PostgreSQL on 127.0.0.1",
                    isPostgres: true)
            }
        let config =
            FlowdSetup.configHeader(
                endpoints: endpoints, highWaterMark: bench.config.highWaterMark,
                journal: info, purpose: "its \(id.key) scenario")
            + tracingSection + flows
        return DaemonRun(
            configFile: "flowd.yaml", config: config,
            arguments: ["--log-level", bench.config.flowdLogLevel], senderEndpoint: endpoints.ingress,
            receiverEndpoint: endpoints.events,
            isReady: {
                try FlowdSetup.binds(BenchMessage.stepperID, control: endpoints.control, context: bench.context)
            },
            journal: info)
    }

    /// Where and which spans flowd exports: the run's local sink.
    private var tracingSection: String {
        #if Tracing
        switch tracing {
        case .all: return "tracing: { endpoint: \"\(OTLPSink.shared.endpoint)\", sampler: always_on }\n"
        case .onePercent:
            return "tracing: { endpoint: \"\(OTLPSink.shared.endpoint)\", sampler: traceidratio, ratio: 0.01 }\n"
        case nil: return ""
        }
        #else
        return ""
        #endif
    }

    /// One flow: `start` sets a root screen bound to the bench stepper; `moviePicked` does
    /// nothing to the tree but is still navigated (willNavigate, didNavigate).
    private var flows: String {
        """
        coordinator:
          flow: \(Self.flowName)
          step: start
        flows:
          \(Self.flowName):
            root: stack
            id: bench
            steps:
              start:
                - setRoot:
                    screen: \(BenchMessage.stepperID)
                    stepper: \(BenchMessage.stepperID)
                    allowStepWhenNotPresented: true
              \(BenchMessage.stepName):
                - none

        """
    }
}

/// What every flowd scenario shares: the executable, endpoints, the config's common part, and
/// status requests on the control endpoint.
enum FlowdSetup {
    static func daemon(scenario: String) -> DaemonExecutable {
        DaemonExecutable(
            name: "flowd", scenario: scenario, explicitPath: \.flowdPath,
            // One --product per command: given several, swift build builds only the last.
            buildHint: "swift build -c release --product flowd", builds: "it",
            otherScenarios: "one_hop two_hop reactor")
    }

    struct Endpoints {
        var ingress: String
        var events: String
        var control: String
    }

    /// ipc: socket files of this run in the temporary directory. tcp: ports on 127.0.0.1 that
    /// were free a moment ago (flowd binds them itself and does not report kernel-chosen ports).
    static func endpoints(run: String, on bench: Bench) throws -> Endpoints {
        switch bench.config.transport {
        case .ipc:
            return Endpoints(
                ingress: bench.bindEndpoint("\(run)-ingress"), events: bench.bindEndpoint("\(run)-events"),
                control: bench.bindEndpoint("\(run)-control"))
        case .tcp:
            return Endpoints(
                ingress: try bench.freeTCPEndpoint(), events: try bench.freeTCPEndpoint(),
                control: try bench.freeTCPEndpoint())
        }
    }

    /// Endpoints, limits, heartbeat and, with `journal`, persistence; the flows follow.
    static func configHeader(
        endpoints: Endpoints, highWaterMark: Int32, journal: JournalInfo?, purpose: String
    ) -> String {
        var text = """
            # Written by flowbench for \(purpose).
            endpoints:
              ingress: \(endpoints.ingress)
              events: \(endpoints.events)
              control: \(endpoints.control)
            limits:
              maxMessageBytes: 1048576
              highWaterMark: \(highWaterMark)
            heartbeatMilliseconds: 1000
            # The receiver reads the sequence from FBV params; JSON's cost is in the codec rows.
            wire: { publish: fbv }

            """
        if let journal, journal.isPostgres == true {
            text += """
                persistence:
                  postgres: "\(journal.path)"

                """
        } else if let journal {
            text += """
                persistence:
                  journal: \(journal.path)
                  synchronous: \(journal.synchronous)

                """
        }
        return text
    }

    /// flowd's status reply on `control`, or `nil` if none came within `timeout` seconds.
    static func status(control: String, context: Context, timeout: Double) throws -> WireParams? {
        let socket = try context.socket(.dealer)
        defer { socket.close() }
        try socket.setOption(.linger(0))
        try socket.connect(control)
        let request = StatusRequest(
            envelope: Envelope(kind: .statusRequest, sequence: 1, source: "flowbench#\(getpid())"))
        _ = try socket.send(message: try request.encoded().frames)
        let wait = ReceiveMode.timeout(milliseconds: Int(timeout * 1000))
        guard let frames = try socket.receiveMessage(mode: wait) else { return nil }
        // The reply lists every flow and binding: far over the 1 MiB a bus message may have.
        let reply: WireMessage
        do {
            reply = try WireMessage.decode(
                from: FrameBuffer(frames: frames),
                limits: WireLimits(maxFrameBytes: 1 << 30))
        } catch {
            let bytes = frames.map(\.count).reduce(0, +)
            throw BenchError(
                "flowd's status reply (\(bytes) bytes) cannot be decoded: \(error)",
                fix: "this is a bug in flowbench or flowd")
        }
        guard case .statusReply(let status) = reply else { return nil }
        return status.status
    }

    /// Whether flowd answers a status request and binds `stepperID`: its endpoints are bound and
    /// its root flow has run its first step.
    static func binds(_ stepperID: String, control: String, context: Context) throws -> Bool {
        guard let status = try status(control: control, context: context, timeout: 0.25),
            let bindings = status["bindings"]?.listValue
        else { return false }
        return bindings.contains { $0.mapValue?["stepper"]?.stringValue == stepperID }
    }
}
