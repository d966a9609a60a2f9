#if Studio
import FlowBusClient
import FlowBusConfiguration
import FlowBusTools
import FlowBusWire
import Foundation
import Logging
import Synchronization

/// Reads the bus for the studio: flowd's `events`, every reactor host's `states`, and flowd's
/// status, each on a thread of its own (ZeroMQ sockets block and belong to one thread), into a
/// ``StudioHub``.
///
/// Status is asked for after each batch of events that can change the tree (at most every
/// ``statusMinimumInterval``) and otherwise every ``statusInterval``, with only the `flows` and
/// `bindings` sections, so that a studio costs flowd little even under a flood.
public final class StudioFeed: Sendable {
    /// Least time between two status requests.
    public static let statusMinimumInterval: Duration = .milliseconds(100)
    /// Status is refreshed this often when nothing happens (peers, counters).
    public static let statusInterval: Duration = .seconds(1)
    /// Messages waiting in the studio's sockets at most: under a flood the daemons drop for the
    /// studio (and count it) rather than the studio's memory growing.
    static let receiveHighWaterMark: Int32 = 20_000

    private let config: FlowBusConfig
    private let hub: StudioHub
    private let logger: Logger
    private let stopped = Atomic<Bool>(false)

    public init(config: FlowBusConfig, hub: StudioHub, logger: Logger) {
        self.config = config
        self.hub = hub
        self.logger = logger
    }

    /// Starts the reader threads.
    public func start() {
        var threads = [Thread { [self] in readEvents() }]
        for (name, host) in config.reactors.sorted(by: { $0.key < $1.key }) {
            threads.append(Thread { [self] in readStates(host: name, spec: host) })
        }
        for (index, thread) in threads.enumerated() {
            thread.name = "studio-feed-\(index)"
            thread.start()
        }
    }

    /// Asks the threads to stop; they do within about 200 ms.
    public func stop() {
        stopped.store(true, ordering: .relaxed)
    }

    private var isStopped: Bool { stopped.load(ordering: .relaxed) }

    private func readEvents() {
        let endpoint = FlowBusConfig.either(config.eventsEndpoints)
        var lastStatus = ContinuousClock.now - Self.statusInterval
        var treeChanged = true
        do {
            // Resumed when flowd keeps events: the page misses none from now on, past a full queue
            // or a takeover (PROTOCOL.md §4.6).
            let subscriber = try BusSubscriber(
                endpoints: config.eventsEndpoints, topics: [], curve: config.curve,
                receiveHighWaterMark: Self.receiveHighWaterMark,
                resuming: config.replay.retain > 0
                    ? .fromNow(control: config.controlEndpoints, heartbeatMilliseconds: config.heartbeatMilliseconds)
                    : nil)
            subscriber.onFallback = { [hub, logger] fallback in
                let text =
                    "the studio missed events \(fallback.since + 1)…\(fallback.head): \(fallback.reason); the tree shown is flowd's status"
                logger.warning("\(text)")
                // Shown on the page as a diagnostic of the studio's own.
                let notice = WireMessage.diagnostic(
                    DiagnosticMessage(
                        envelope: Envelope(kind: .diagnostic, sequence: 0, source: "studio"), reason: .gone,
                        message: text,
                        details: [
                            "since": .int(Int64(clamping: fallback.since)),
                            "head": .int(Int64(clamping: fallback.head)),
                        ]))
                if let event = StudioEvent.describe(notice, endpoint: "events") { hub.record(event) }
            }
            while !isStopped {
                // Read what is there, then ask for status once for the whole batch.
                var received = try subscriber.next(timeout: .milliseconds(100))
                while let item = received {
                    if case .message(let message) = item, let event = StudioEvent.describe(message, endpoint: "events")
                    {
                        hub.record(event)
                        if event["kind"]?.stringValue != "step" { treeChanged = true }
                    }
                    received = try subscriber.next(timeout: .zero)
                    if isStopped { return }
                }
                let since = ContinuousClock.now - lastStatus
                if (treeChanged && since >= Self.statusMinimumInterval) || since >= Self.statusInterval {
                    lastStatus = .now
                    treeChanged = false
                    fetchStatus()
                }
            }
        } catch {
            logger.error(
                "studio: cannot read flowd's events", metadata: ["endpoint": "\(endpoint)", "error": "\(error)"])
        }
    }

    private func fetchStatus() {
        do {
            let status = try StatusClient.fetch(
                endpoints: config.controlEndpoints, curve: config.curve, timeout: .seconds(1),
                params: ["sections": ["flows", "bindings"]])
            let slim: WireParams = ["flows": status["flows"] ?? .list([]), "bindings": status["bindings"] ?? .list([])]
            if let json = try? WireJSON.string(.map(slim), maxDepth: 128) { hub.recordStatus(json) }
        } catch {
            logger.debug("studio: no status", metadata: ["error": "\(error)"])
        }
    }

    private func readStates(host: String, spec: FlowBusConfig.ReactorHostSpec) {
        let endpoint = "reactors.\(host).states"
        let subscriber: BusSubscriber
        do {
            // Subscribed before the snapshots are taken, so no state between the two is missed.
            subscriber = try BusSubscriber(
                endpoints: spec.statesEndpoints, topics: ["state/", "action/", "diag/"], curve: config.curve,
                receiveHighWaterMark: Self.receiveHighWaterMark)
            while !isStopped, try !subscriber.waitUntilConnected(timeout: .milliseconds(500)) {}
        } catch {
            logger.error(
                "studio: cannot read a reactor host's states", metadata: ["host": "\(host)", "error": "\(error)"])
            return
        }
        // Reactors with an exact id start with their snapshot, so a page sees them before they change.
        for reactorID in spec.serves where !reactorID.hasSuffix("/") && !isStopped {
            do {
                let view = try ReactorView(
                    reactorID: reactorID, actionsEndpoints: spec.actionsEndpoints,
                    statesEndpoints: spec.statesEndpoints,
                    contentType: .json, curve: config.curve, heartbeatMilliseconds: config.heartbeatMilliseconds)
                if let snapshot = try view.next(timeout: .seconds(2)) {
                    let message = WireMessage.snapshot(
                        SnapshotMessage(reactorID: reactorID, envelope: snapshot.envelope, state: snapshot.state))
                    if let event = StudioEvent.describe(message, endpoint: endpoint) { hub.record(event) }
                }
            } catch {
                logger.debug("studio: no snapshot", metadata: ["reactor": "\(reactorID)", "error": "\(error)"])
            }
        }
        do {
            while !isStopped {
                guard let item = try subscriber.next(timeout: .milliseconds(200)) else { continue }
                if case .message(let message) = item, let event = StudioEvent.describe(message, endpoint: endpoint) {
                    hub.record(event)
                }
            }
        } catch {
            logger.error(
                "studio: cannot read a reactor host's states", metadata: ["host": "\(host)", "error": "\(error)"])
        }
    }
}
#endif
