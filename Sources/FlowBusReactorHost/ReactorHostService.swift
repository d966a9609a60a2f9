import FlowBusClient
import FlowBusConfiguration
@_exported public import FlowBusDaemon
import FlowBusProtocol
import FlowBusWire
import Foundation
import Logging
@_exported public import Reactors
import ServiceLifecycle
import Synchronization
import ZeroMQ

/// A process hosting reactor instances behind the bus, as a `Service`.
///
/// It binds the host's `actions` ROUTER and `states` PUB from `config.reactors[hostName]`. Views
/// send actions and snapshot requests to `actions`; every state of every hosted reactor is
/// published on `states` as `state/<reactorId>` with the reactor's state sequence, whether or not
/// anyone watches; a snapshot request is answered with the latest state and its sequence. Actions
/// are acknowledged cumulatively per source and applied once per (source, sequence). Refused
/// messages are counted, logged and published as `diag/<reason>` (and sent to the sender before
/// the ack); the host keeps serving. Heartbeats go out on `states` every
/// `config.heartbeatMilliseconds`.
///
/// ```swift
/// var reactors = ReactorRegistry()
/// reactors.register("counter") { _ in CounterReactor() }
/// let host = try ReactorHostService(hostName: "demo", config: config, reactors: reactors, logger: logger)
/// try await ServiceGroup(services: [host], logger: logger).run()
/// ```
///
/// One thread owns every socket of the host; reactors never touch a socket. See `docs/REACTORS.md`.
public final class ReactorHostService: Service {
    /// The host's name, a key of `config.reactors`.
    public let hostName: String
    /// The host's endpoints and the ids it serves.
    public let spec: FlowBusConfig.ReactorHostSpec
    /// This process instance's source id (`<hostName>#<random>`), in every envelope it sends.
    public let sourceID: String
    private let config: FlowBusConfig
    private let registry: ReactorRegistry
    private let contentType: ContentType
    private let drain: Duration
    private let logger: Logger
    private let outlet: ReactorHostOutlet
    private let metrics: MetricsExposition?
    private let readiness = ReadinessSignal()
    private let startError = Mutex<(any Error)?>(nil)
    private let acceptJournalLoss: Bool
    private let openStore: ReactorStateStoreOpener?

    /// A host for the reactors of `reactors`, on the endpoints of `config.reactors[hostName]`.
    ///
    /// - Parameters:
    ///   - hostName: A key of the config's `reactors:` section.
    ///   - config: The topology (endpoints, limits, heartbeat; flowd's ingress for reactors that
    ///     are steppers).
    ///   - reactors: The reactors and families to host.
    ///   - contentType: How states, snapshots, diagnostics and steps are encoded; by default the
    ///     config's `wire.publish` (JSON unless it says FBV).
    ///   - drain: On a graceful shutdown (SIGTERM), how long the host waits for in-flight actions
    ///     to finish — their asynchronous mutations reduced, published and saved — before it shuts
    ///     the reactors down. Cancelling ``run()``'s task stops at once instead.
    ///   - metrics: The process's Prometheus text, served on `reactors.<host>.metrics` when the
    ///     config sets it. The host records its metrics through swift-metrics either way; bootstrap
    ///     `MetricsSystem` before creating the host.
    ///   - acceptJournalLoss: `reactor-host --accept-journal-loss`: a view found ahead of the
    ///     state store (its newest entries were lost) has its sequence adopted, the sequences lost
    ///     reported, instead of its actions being refused as `journal-behind` (PROTOCOL.md §4.4).
    ///   - openStore: Opens `persistence.postgres` (FlowBusPostgres's `PostgresReactorStore.opener`):
    ///     the host's instances share their states there, one of them active.
    ///   - logger: Where the host logs.
    /// - Throws: `ConfigError` when the config has no host `hostName`.
    public init(
        hostName: String, config: FlowBusConfig, reactors: ReactorRegistry, contentType: ContentType? = nil,
        drain: Duration = .seconds(2), metrics: MetricsExposition? = nil, acceptJournalLoss: Bool = false,
        openStore: ReactorStateStoreOpener? = nil, logger: Logger
    ) throws(ConfigError) {
        guard let spec = config.reactors[hostName] else {
            let known = config.reactors.keys.sorted()
            throw ConfigError(
                .unknownName,
                "no reactor host '\(hostName)' in the config's reactors: section (\(known.isEmpty ? "it declares none" : "declared: \(known.joined(separator: ", "))"))"
            )
        }
        self.hostName = hostName
        self.spec = spec
        self.config = config
        self.registry = reactors
        self.contentType = contentType ?? config.wire.publish
        self.drain = drain
        self.metrics = metrics
        self.acceptJournalLoss = acceptJournalLoss
        self.openStore = openStore
        self.logger = logger
        outlet = ReactorHostOutlet(metrics: ReactorHostMetrics(host: hostName))
        sourceID = Envelope.newSourceID(for: hostName)
    }

    /// Returns once the endpoints are bound and the reactors with exact ids are running.
    /// - Throws: the error that ended ``run()`` before the host was ready (e.g. an endpoint in use).
    public func waitUntilReady() async throws {
        await readiness.wait()
        if let error = startError.withLock({ $0 }) { throw error }
    }

    /// The host's counters so far.
    public var counters: ReactorHostCounters { outlet.counters.withLock { $0 } }

    public func run() async throws {
        for id in registry.exactIDs where !spec.serves(id) {
            logger.warning(
                "reactor \(id) is hosted but not listed in reactors.\(hostName).serves: views will not find it through the config"
            )
        }
        for prefix in registry.familyPrefixes where !spec.serves.contains(prefix) {
            logger.warning("reactor family \(prefix) is hosted but not listed in reactors.\(hostName).serves")
        }
        for served in spec.serves where registry.registration(for: served.hasSuffix("/") ? served + "x" : served) == nil
        {
            logger.warning(
                "reactors.\(hostName).serves lists \(served), which this process does not host: its actions will be refused with unknown-reactor"
            )
        }
        let store: (any ReactorStateStore)?
        do {
            try checkPersistence()
            store = try await open(spec.persistence)
        } catch {
            startError.withLock { $0 = error }
            readiness.signal()
            throw error
        }
        defer { store?.close() }
        if let shared = store as? any SharedReactorStateStore {
            do {
                try await takeLease(of: shared)
            } catch is CancellationError {
                // SIGTERM while standing by: nothing was served, so there is nothing to finish.
                logger.info("reactor host \(hostName) stopped while standing by")
                return
            } catch {
                startError.withLock { $0 = error }
                readiness.signal()
                throw error
            }
        }
        var settings = ReactorHostLoop.Settings(
            hostName: hostName, spec: spec, stepIngress: config.ingressEndpoints, limits: config.limits,
            heartbeat: .milliseconds(config.heartbeatMilliseconds), liveness: config.heartbeatLiveness,
            contentType: contentType, sourceID: sourceID,
            drain: drain,
            curve: config.curve)
        settings.store = store
        settings.acceptsLedgerLoss = acceptJournalLoss
        let loop = ReactorHostLoop(settings: settings, registry: registry, outlet: outlet, logger: logger)
        // A lease found lost between two heartbeats stops the loop at its next turn.
        (store as? any SharedReactorStateStore)?.whenLeaseLost { _ in loop.control.wake() }
        do {
            try await loop.start()
        } catch {
            startError.withLock { $0 = error }
            readiness.signal()
            throw error
        }
        let metricsEndpoint: MetricsEndpoint?
        do {
            metricsEndpoint = try startMetricsEndpoint(
                spec.metrics, exposition: metrics, what: "reactors.\(hostName).metrics", logger: logger)
        } catch {
            loop.requestStop(graceful: false)
            await loop.waitUntilFinished()
            startError.withLock { $0 = error }
            readiness.signal()
            throw error
        }
        defer { metricsEndpoint?.stop() }
        logger.info(
            "reactor host \(hostName) listening",
            metadata: [
                "actions": "\(spec.actions)", "states": "\(spec.states)", "source": "\(sourceID)",
                "reactors": "\((registry.exactIDs + registry.familyPrefixes).joined(separator: ","))",
            ])
        readiness.signal()
        await withGracefulShutdownHandler {
            await withTaskCancellationHandler {
                await loop.waitUntilFinished()
            } onCancel: {
                loop.requestStop(graceful: false)
            }
        } onGracefulShutdown: {
            loop.requestStop(graceful: true)
        }
        let counters = self.counters
        if let failure = loop.control.failure {
            logger.critical("reactor host \(hostName) stopped: \(failure)")
            throw failure
        }
        logger.info(
            "reactor host \(hostName) stopped",
            metadata: [
                "received": "\(counters.received)", "actions": "\(counters.actionsApplied)",
                "snapshots": "\(counters.snapshotsAnswered)",
                "states": "\(counters.statesPublished)", "steps": "\(counters.stepsSent)",
                "refused":
                    "\(counters.refused.isEmpty ? "none" : counters.refused.map { "\($0.key)=\($0.value)" }.sorted().joined(separator: ","))",
                "saves": "\(counters.saves)", "saveFailures": "\(counters.saveFailures)",
            ])
    }

    /// Every reactor listed under `persistence.reactors` must be restorable (`State: Codable`).
    private func checkPersistence() throws(ConfigError) {
        guard let persistence = spec.persistence else { return }
        for listed in persistence.reactors {
            let probe = listed.hasSuffix("/") ? listed + "x" : listed
            guard let (registration, _) = registry.registration(for: probe) else {
                logger.warning("reactors.\(hostName).persistence lists \(listed), which this process does not host")
                continue
            }
            guard registration.isRestorable else {
                throw ConfigError(
                    .invalid,
                    "reactors.\(hostName).persistence lists \(listed), whose State is not Decodable: make it Codable (register it with a Codable State) or remove it from the list"
                )
            }
        }
        logger.info(
            "reactor host \(hostName) persists \(persistence.reactors.joined(separator: ", ")) in \(persistence.database ?? "PostgreSQL")"
        )
    }

    /// Opens the store `persistence` names: the SQLite database, or the shared PostgreSQL one.
    private func open(_ persistence: ReactorPersistenceSpec?) async throws -> (any ReactorStateStore)? {
        guard let persistence else { return nil }
        if persistence.database != nil { return try ReactorStateDatabase(spec: persistence) }
        guard let openStore else {
            throw ConfigError(
                .invalid,
                "reactors.\(hostName).persistence.postgres needs a reactor host built with the PostgreSQL trait: build it with "
                    + "`swift build --traits PostgreSQL`, and pass PostgresReactorStore.opener as openStore")
        }
        return try await openStore(persistence, hostName, logger)
    }

    /// Waits until this instance holds the shared store's lease: a standby binds and serves
    /// nothing meanwhile.
    private func takeLease(of shared: any SharedReactorStateStore) async throws {
        let logger = self.logger
        let hostName = self.hostName
        let sourceID = self.sourceID
        try await cancelWhenGracefulShutdown {
            try await shared.acquireLease(instance: sourceID) { holder in
                logger.notice(
                    "standby: \(holder) holds the lease of reactor host \(hostName) in \(shared.location); taking over when it is free"
                )
            }
        }
        logger.notice("holding the lease of reactor host \(hostName) in \(shared.location): active as \(sourceID)")
    }
}
