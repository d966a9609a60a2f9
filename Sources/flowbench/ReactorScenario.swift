import FlowBusWire
import Foundation
import ZeroMQ

/// The reactor path: a view process sends actions → a reactor host → the view receives states.
///
/// flowbench writes a config with one `reactors:` entry (host `bench`, serving the `bench`
/// reactor) into its temporary directory and starts `fixture-reactors` (the executable beside
/// flowbench, or `--fixture-reactors`), which runs the shipped reactor host service. Its `bench`
/// reactor turns `tick(n: k)` into the state `{n: k}` synchronously, on the host's I/O thread:
/// one action, one state.
///
/// The sender is a view's DEALER sending `tick(n:)` actions to the host's `actions` ROUTER; the
/// host's cumulative acks pile up unread in that DEALER and are dropped by the ROUTER once its
/// pipe is full, which costs the host nothing. The receiver SUBscribes to `state/bench` on the
/// host's `states` XPUB. As the state's envelope carries the reactor's state sequence, the
/// bench sequence travels in `n` (0: probe, 1...: measured); the action envelopes are numbered
/// 1, 2, 3… since the host refuses a (source, sequence) it has seen. Each measurement
/// (throughput, latency) gets a fresh host, as the raw two-hop path gets a fresh forwarder; the
/// host's CPU time is metered over the throughput run, as the forwarder's is.
///
/// `reactor_saved` is the same path with the bench reactor persisted (`persistence: { database,
/// synchronous: full }`): the host saves each batch's last state and its sources' sequences to a
/// fresh SQLite database in the temporary directory (flushed to the disk) before it publishes the
/// batch's states and acknowledges its actions; compared with `reactor`.
struct ReactorScenario: DaemonPathScenario {
    static let key = "reactor"
    static let savedKey = "reactor_saved"

    /// Whether the host saves the bench reactor's state.
    var saved = false

    var id: ScenarioID { ScenarioID(group: .flowbus, key: saved ? Self.savedKey : Self.key) }
    var path: String {
        saved
            ? "view DEALER → fixture-reactors (ROUTER → bench reactor → state saved, synchronous: full → XPUB) → SUB state/bench"
            : "view DEALER → fixture-reactors (ROUTER → bench reactor → XPUB) → SUB state/bench, action in, state out"
    }
    var baseline: ScenarioID? { .rawTwoHop }
    /// The saves' cost: the same path without them.
    var reference: ScenarioID? { saved ? ScenarioID(group: .flowbus, key: Self.key) : nil }

    // MARK: The daemon path

    var daemon: DaemonExecutable {
        DaemonExecutable(
            name: "fixture-reactors", scenario: id.key, explicitPath: \.fixtureReactorsPath,
            buildHint: "swift build -c release --product fixture-reactors", builds: "it",
            otherScenarios: [
                "one_hop", "two_hop", StepsScenario.plainKey, StepsScenario.journaledKey, ScaleScenario.key,
            ].joined(separator: " "))
    }
    var frames: Int { 3 }
    var senderShape: FrameShape { .action }
    var subscription: String { Topic.state(BenchMessage.reactorID) }
    var receiverSequence: SequenceField { .state }

    func daemonRun(_ run: String, on bench: Bench) throws -> DaemonRun {
        let config = bench.config
        let actions = config.transport == .ipc ? bench.bindEndpoint("\(run)-actions") : try bench.freeTCPEndpoint()
        let states = config.transport == .ipc ? bench.bindEndpoint("\(run)-states") : try bench.freeTCPEndpoint()
        let database =
            saved
            ? JournalInfo(
                path: "\(bench.directory)/\(run)-reactors.sqlite", synchronous: "full",
                fileSystem: ProcFS.fileSystemType(of: bench.directory), holdsStates: true) : nil
        return DaemonRun(
            configFile: "reactors.yaml",
            config: hostConfig(
                run: run, actions: actions, states: states, directory: bench.directory,
                highWaterMark: config.highWaterMark, database: database?.path),
            arguments: ["--host", Self.hostName], senderEndpoint: actions, receiverEndpoint: states,
            isReady: { try Self.isReady(actions: actions, context: bench.context) },
            journal: database)
    }

    // MARK: The host's config

    static let hostName = "bench"

    /// One reactor host. The config format requires flowd's `endpoints:` too; nothing binds or
    /// connects them here (socket files that are never created).
    private func hostConfig(
        run: String, actions: String, states: String, directory: String, highWaterMark: Int32, database: String?
    ) -> String {
        let persistence =
            database.map {
                "    persistence: { database: \"\($0)\", reactors: [\(BenchMessage.reactorID)], synchronous: full }\n"
            } ?? ""
        return """
            # Written by flowbench for its reactor scenario.
            endpoints:
              ingress: ipc://\(directory)/\(run)-unused-ingress
              events: ipc://\(directory)/\(run)-unused-events
              control: ipc://\(directory)/\(run)-unused-control
            limits:
              maxMessageBytes: 1048576
              highWaterMark: \(highWaterMark)
            heartbeatMilliseconds: 1000
            # The receiver reads the state's sequence from FBV bytes; JSON's cost is in the codec rows.
            wire: { publish: fbv }
            reactors:
              \(Self.hostName):
                actions: \(actions)
                states: \(states)
                serves: [\(BenchMessage.reactorID)]
            \(persistence)
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
        let request = SnapshotRequest(
            reactorID: BenchMessage.reactorID,
            envelope: Envelope(kind: .snapshotRequest, sequence: 1, source: source))
        _ = try socket.send(message: try request.encoded().frames)
        let deadline = monotonicNanoseconds() + 250_000_000
        while true {
            let left = Int((deadline - monotonicNanoseconds()) / 1_000_000)
            guard left > 0, let frames = try socket.receiveMessage(mode: .timeout(milliseconds: left)) else {
                return false
            }
            // The snapshot comes before the ack of the batch; skip anything else.
            if case .snapshot(let snapshot)? = try? WireMessage.decode(from: FrameBuffer(frames: frames)),
                snapshot.reactorID == BenchMessage.reactorID
            {
                return true
            }
        }
    }
}
