import FlowBusClient
import FlowBusConfiguration
@_exported public import FlowBusDaemon
import FlowBusProtocol
import FlowBusWire
@_exported public import Flows
import Foundation
import Logging
import ServiceLifecycle
import Synchronization
import ZeroMQ

/// The coordinator daemon as a `Service`: routes steps from stepper processes to flows and
/// publishes what happens.
///
/// Run it in a `ServiceGroup`; it stops cleanly on SIGTERM: it stops reading its endpoints,
/// finishes the batches it already took, commits them, sends their acks and lets its events
/// leave (each within a bounded linger), then returns. With `persistence: { journal: PATH }` in
/// the config it journals what it applies and restores it when it starts again (see
/// ``StepJournal``). The flows come from the config
/// (``declared(config:logger:metrics:acceptJournalLoss:openJournal:)``) or from Swift code (``init(config:logger:metrics:makeFlow:acceptJournalLoss:openJournal:root:)``):
///
/// ```swift
/// let service = CoordinatorService(config: config, logger: logger) {
///     (flow: AppFlow(), stepper: OneStepper(withSingleStep: AppStep.start))
/// }
/// try await ServiceGroup(services: [service], logger: logger).run()
/// ```
public final class CoordinatorService: Service {
    public typealias RootFactory = @FlowActor @Sendable () -> (flow: any Flow, stepper: any Stepper)?
    /// Builds a flow by name: what restoring a checkpoint of the journal needs.
    public typealias FlowFactory = @FlowActor @Sendable (String) -> (any Flow)?
    /// Opens the journal `persistence.postgres` names (FlowBusPostgres provides one).
    public typealias JournalOpener = @Sendable (FlowBusConfig.Persistence, Logger) async throws -> any Journal

    private let config: FlowBusConfig
    private let logger: Logger
    private let root: RootFactory
    private let makeFlow: FlowFactory?
    private let metrics: MetricsExposition?
    private let acceptJournalLoss: Bool
    private let openJournal: JournalOpener?
    private let readiness = ReadinessSignal()

    /// A coordinator running the Swift flow `root` builds.
    ///
    /// `metrics` is the process's Prometheus text: served on `endpoints.metrics` when the config
    /// sets it, and returned by status queries. The coordinator records its metrics through
    /// swift-metrics either way (see `docs/METRICS.md`). With `makeFlow`, which builds each of
    /// the flows by name (all of them `CheckpointableFlow`s), the journal's checkpoints are
    /// restored; without it the journal is replayed from its first entry and never compacted.
    ///
    /// `acceptJournalLoss` (flowd's `--accept-journal-loss`): a stepper found ahead of the journal
    /// (its newest entries were lost) has its sequence adopted, the sequences lost reported,
    /// instead of being refused as `journal-behind` (PROTOCOL.md §4.4).
    public init(
        config: FlowBusConfig, logger: Logger, metrics: MetricsExposition? = nil, makeFlow: FlowFactory? = nil,
        acceptJournalLoss: Bool = false, openJournal: JournalOpener? = nil,
        root: @escaping RootFactory
    ) {
        self.openJournal = openJournal
        self.config = config
        self.logger = logger
        self.metrics = metrics
        self.makeFlow = makeFlow
        self.acceptJournalLoss = acceptJournalLoss
        self.root = root
    }

    /// A coordinator running the flows declared in `config`, starting at `config.coordinator`.
    public static func declared(
        config: FlowBusConfig, logger: Logger, metrics: MetricsExposition? = nil, acceptJournalLoss: Bool = false,
        openJournal: JournalOpener? = nil
    ) -> CoordinatorService {
        let catalog = DeclaredFlowCatalog(flows: config.flows)
        return CoordinatorService(
            config: config, logger: logger, metrics: metrics, makeFlow: { catalog.make($0) },
            acceptJournalLoss: acceptJournalLoss, openJournal: openJournal
        ) {
            guard let start = config.coordinator, let flow = catalog.make(start.flow) else {
                return nil
            }
            return (flow, OneStepper(withSingleStep: CanonicalStep(start.step)))
        }
    }

    /// Returns once the endpoints are bound and the root flow is started.
    public func waitUntilReady() async {
        await readiness.wait()
    }

    public func run() async throws {
        let context = try Context(defaultLinger: 200)
        let sourceID = Envelope.newSourceID(for: "flowd")
        let journal = try await open(config.persistence)
        defer {
            journal?.flush()
            journal?.close()
        }
        // The ZAP handler must exist before any CURVE socket binds: without it CURVE admits everyone.
        let control = DaemonControl()
        let authenticator = try DaemonAuthenticator.start(
            context: context, curve: config.curve, inbox: control.inbox, logger: logger)
        defer { authenticator?.stop() }
        let router = try await StepRouter(
            context: context, config: config, sourceID: sourceID, journal: journal, logger: logger)
        var started = false
        do {
            if let shared = journal as? any SharedJournal {
                // A standby follows the journal until it holds the lease, then serves.
                try await router.start(root, makeFlow: makeFlow, following: true)
                try await takeLease(of: shared, as: sourceID, router: router)
                // A lease found lost between two heartbeats stops the loop at its next turn.
                shared.whenLeaseLost { _ in control.wake() }
                try await router.stopFollowing(makeFlow: makeFlow)
                started = true
            }
            try await router.bindEvents()
        } catch is CancellationError {
            // SIGTERM while standing by: nothing was served, so there is nothing to finish.
            await router.close()
            logger.info("flowd stopped while standing by")
            return
        } catch {
            await router.close()
            throw error
        }
        let loop: CoordinatorDriver
        do {
            loop = try await CoordinatorDriver(
                context: context, config: config, sourceID: sourceID, router: router, control: control, logger: logger,
                journal: journal, acceptJournalLoss: acceptJournalLoss)
        } catch {
            await router.close()
            throw error
        }
        func closeAll() async {
            await loop.close()
            await router.close(linger: CoordinatorDriver.shutdownLinger)
        }
        let metricsEndpoint: MetricsEndpoint?
        do {
            metricsEndpoint = try startMetricsEndpoint(
                config.endpoints.metrics, exposition: metrics, what: "endpoints.metrics", logger: logger)
        } catch {
            await closeAll()
            throw error
        }
        defer { metricsEndpoint?.stop() }
        await router.exportMetrics(metrics, servedAt: metricsEndpoint?.boundEndpoint)
        do {
            if !started { try await router.start(root, makeFlow: makeFlow) }
        } catch {
            await closeAll()
            throw error
        }
        guard FlowLoop.shared.install(loop) else {
            await closeAll()
            throw CoordinatorError(
                .alreadyRunning, "another coordinator already runs in this process: one CoordinatorService per process")
        }
        logger.info(
            "flowd listening",
            metadata: [
                "ingress": "\(config.endpoints.ingress)", "events": "\(config.endpoints.events)",
                "control": "\(config.endpoints.control)",
            ])
        readiness.signal()

        // On SIGTERM the loop stops reading; it finishes once the batch in progress is applied,
        // committed and acknowledged.
        // Cancelling the service (another service of the group failed) stops it the same way.
        await withGracefulShutdownHandler {
            await withTaskCancellationHandler {
                await control.finished.wait()
            } onCancel: {
                control.stopAccepting()
            }
        } onGracefulShutdown: {
            control.stopAccepting()
        }
        FlowLoop.shared.uninstall(loop)
        let failure = control.failure
        await closeAll()
        context.shutdown()
        if let failure {
            logger.critical("flowd stopped: \(failure)")
            throw failure
        }
        logger.info("flowd stopped")
    }
}

extension CoordinatorService {
    /// Opens the journal the config names.
    func open(_ persistence: FlowBusConfig.Persistence?) async throws -> (any Journal)? {
        guard let persistence else { return nil }
        if let path = persistence.journal {
            return try StepJournal.open(path: path, synchronous: persistence.synchronous)
        }
        guard let openJournal else {
            throw CoordinatorError(
                .backendMissing,
                "persistence.postgres needs a coordinator built with the PostgreSQL trait: build flowd with "
                    + "`swift build --traits PostgreSQL --product flowd`; a coordinator of your own passes PostgresJournal.opener as openJournal"
            )
        }
        return try await openJournal(persistence, logger)
    }

    /// Waits until this instance holds the shared journal's lease: a standby serves nothing
    /// meanwhile, and `router` follows what the active instance journals.
    package func takeLease(of shared: any SharedJournal, as sourceID: String, router: StepRouter) async throws {
        let logger = self.logger
        let makeFlow = self.makeFlow
        try await cancelWhenGracefulShutdown {
            try await shared.acquireLease(instance: sourceID) { holder in
                logger.notice(
                    "standby: \(holder) holds the lease of \(shared.location); following its journal, taking over when the lease is free"
                )
            } following: {
                try await router.catchUp(makeFlow: makeFlow)
            }
        }
        logger.notice("holding the lease of \(shared.location): active as \(sourceID)")
    }
}
