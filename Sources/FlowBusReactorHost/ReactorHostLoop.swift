import FlowBusClient
import FlowBusConfiguration
import FlowBusDaemon
import FlowBusProtocol
import FlowBusWire
import Foundation
import Logging
import Reactors
import Synchronization
import ZeroMQ

/// The thread that owns every socket of a reactor host: the `actions` ROUTER, the `states` XPUB
/// and one DEALER per stepper id its reactors publish as. It turns the shared ``DaemonLoop`` with
/// a ``ReactorHostRole``.
///
/// Actions are decoded on this thread and handed to their ``HostedReactor`` at once (no task, no
/// stream hop: the store's drain runs the synchronous part of the action right here). States come
/// back through the ``ReactorHostOutlet`` in each store's serial context; the loop commits them
/// (saved first, for persisted reactors) and only then are they published and the actions that
/// caused them acknowledged. The thread keeps the latest published state of every reactor and
/// answers snapshot requests from it: a snapshot with sequence N is always the last state of that
/// reactor that went to the `states` socket, so every later state follows it on the socket (Clone
/// pattern).
package final class ReactorHostLoop: Sendable {
    package struct Settings: Sendable {
        var hostName: String
        var spec: FlowBusConfig.ReactorHostSpec
        /// flowd's ingress on each of its instances: the active one gets the hosted steppers' steps.
        var stepIngress: [String]
        var limits: FlowBusConfig.Limits
        var heartbeat: Duration
        /// Heartbeats a view may miss before it is reported dead.
        var liveness: Int
        var contentType: ContentType
        var sourceID: String
        /// How long a graceful stop waits for in-flight actions to finish (their asynchronous
        /// mutations reduced, published and saved) before the reactors are shut down.
        var drain: Duration = .seconds(2)
        /// CURVE keys for tcp endpoints: a server key makes the host admit only allowed clients.
        var curve = CurveKeys()
        /// Where persisted states and the de-duplication table are kept (nil: nowhere).
        var store: (any ReactorStateStore)?
        /// A view found ahead of the store (its newest entries lost) has its sequence adopted
        /// instead of being refused as `journal-behind` (`reactor-host --accept-journal-loss`).
        var acceptsLedgerLoss = false
    }

    let settings: Settings
    let registry: ReactorRegistry
    let outlet: ReactorHostOutlet
    let logger: Logger
    let control: DaemonControl

    /// Messages drained from the ROUTER before the loop commits, publishes and acknowledges.
    package static let maxBatchSize = 256
    /// The same for a host that persists: it syncs its database once per commit, and a larger
    /// batch shares that among more actions (RELIABILITY.md). The steps a batch makes must still
    /// fit in a stepper's outbox past its backlog limit, which the host checks once per turn.
    package static let maxPersistingBatchSize = 1024

    package init(settings: Settings, registry: ReactorRegistry, outlet: ReactorHostOutlet, logger: Logger) {
        self.settings = settings
        self.registry = registry
        self.outlet = outlet
        self.logger = logger
        control = DaemonControl(inbox: LoopInbox(wake: outlet.wake))
    }

    /// Starts the thread; returns once the endpoints are bound and the exact reactors created.
    /// - Throws: when an endpoint cannot be bound.
    func start() async throws {
        try await withCheckedThrowingContinuation { (started: CheckedContinuation<Void, any Error>) in
            let thread = Thread { [self] in
                outlet.ioThreadStarted()
                let host: ReactorHostIO
                do {
                    host = try ReactorHostIO(loop: self)
                } catch {
                    control.finish(failure: nil)
                    closed.signal()
                    started.resume(throwing: error)
                    return
                }
                host.createExactReactors()
                started.resume()
                host.run()
            }
            thread.name = "reactor-host-io"
            thread.start()
        }
    }

    /// Asks the thread to stop; it shuts the reactors down and closes its sockets. A graceful
    /// stop first deals with queued messages and waits (up to `settings.drain`) for in-flight
    /// actions to finish.
    func requestStop(graceful: Bool) {
        control.stopAccepting(graceful: graceful)
    }

    /// Returns once the thread has closed its sockets.
    func waitUntilFinished() async {
        await closed.wait()
    }

    /// Signalled once the thread closed its sockets (after the loop finished).
    let closed = ReadinessSignal()
}

/// The sockets of a reactor host and the loop over them, on the host's own thread.
private final class ReactorHostIO {
    private let host: ReactorHostLoop
    private let context: Context
    private let authenticator: ZAPHandler?
    private let loop: DaemonLoop
    private let role: ReactorHostRole

    init(loop host: ReactorHostLoop) throws {
        self.host = host
        let settings = host.settings
        let logger = host.logger
        let database = settings.store
        context = try Context(defaultLinger: 0)
        // The ZAP handler must exist before any CURVE socket binds: without it CURVE admits everyone.
        authenticator = try DaemonAuthenticator.start(
            context: context, curve: settings.curve, inbox: host.control.inbox, logger: logger)
        let actions = try ZMQRouterTransport(
            context: context, endpoint: settings.spec.actions, what: "reactors.\(settings.hostName).actions",
            limits: settings.limits, curve: settings.curve, linger: 200)
        let publisher = try BusPublisher(
            context: context, name: "states", endpoint: settings.spec.states, limits: settings.limits,
            curve: settings.curve, sourceID: settings.sourceID, contentType: settings.contentType, logger: logger)
        try publisher.bind()
        // The host's database keeps sources for a retention period, not for ever, so a source found
        // nowhere is adopted at its first sequence; one it holds (across a restart, or after being
        // forgotten in memory) is looked up there.
        let intake = Intake(
            endpoint: "actions",
            policy: .init(
                remembersSources: false, deadAfter: settings.heartbeat * max(1, settings.liveness),
                idleTimeout: .seconds(settings.limits.sourceIdleSeconds), maxSources: settings.limits.maxSources,
                hasDurableLedger: database != nil, acceptsLedgerLoss: settings.acceptsLedgerLoss,
                ledgerLossRemedy:
                    "restart the reactor host with --accept-journal-loss (see docs/DEPLOYMENT.md, \"A journal behind its steppers\")"
            ),
            defaultRole: "view")
        let data = RouterEndpoint(
            replier: RouterReplier(
                name: "actions", transport: actions, publisher: publisher, sourceID: settings.sourceID,
                refusalDetails: ["host": .string(settings.hostName)], logger: logger),
            intake: intake, limits: WireLimits(maxFrameBytes: settings.limits.maxMessageBytes), logger: logger)
        role = try ReactorHostRole(host: host, data: data, database: database, context: context)
        var loopSettings = DaemonLoop.Settings(
            heartbeat: settings.heartbeat,
            maxBatchSize: database == nil ? ReactorHostLoop.maxBatchSize : ReactorHostLoop.maxPersistingBatchSize)
        loopSettings.drain = settings.drain
        loopSettings.dropReason = "a view is too slow; views resynchronise from a snapshot on a gap"
        loopSettings.dropDetails = ["host": .string(settings.hostName)]
        if let database {
            loopSettings.lookUp = { sources in
                do {
                    let found = try database.lastSequences(of: sources)
                    return sources.map { LedgerAnswer(source: $0, last: .success(found[$0])) }
                } catch {
                    return sources.map { LedgerAnswer(source: $0, last: .failure(error)) }
                }
            }
        }
        loop = try DaemonLoop(
            data: data, publisher: publisher, control: host.control, role: role, settings: loopSettings, logger: logger)
    }

    func createExactReactors() {
        role.createExactReactors()
        loop.flush()
    }

    /// Turns the loop until it finished, then shuts the reactors down and closes the sockets.
    func run() {
        loop.runUntilFinished()
        role.shutDownReactors()
        // What the reactors made while shutting down is still saved, published and acknowledged.
        loop.flush()
        loop.close(linger: 200)
        role.close()
        authenticator?.stop()
        host.closed.signal()
    }
}
