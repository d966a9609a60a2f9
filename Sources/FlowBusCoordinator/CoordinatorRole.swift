import FlowBusClient
import FlowBusConfiguration
import FlowBusDaemon
import FlowBusProtocol
import FlowBusWire
import Flows
import Foundation
import Logging
import ZeroMQ

/// Who sent an applied message: its (source, sequence), which the journal records.
package struct Origin: Sendable, Hashable {
    package var source: String
    package var sequence: UInt64
}

/// What flowd's endpoints counted, for status replies and metrics.
package struct IngressCounters: Sendable {
    package var received = 0
    package var accepted = 0
    package var duplicates = 0
    /// Messages dropped because an earlier sequence of their source is missing (resent later).
    package var outOfOrder = 0
    package var refused: [DiagnosticReason: Int] = [:]
    /// Sources adopted past the journal (`--accept-journal-loss`), and the sequences lost so.
    package var journalAdopted = 0
    package var journalLost: UInt64 = 0
    /// Messages dropped while their source was looked up in the journal (resent by their sender).
    package var heldDropped = 0
    /// Control requests read, refused or dropped over their peer's rate, and not answered
    /// because their peer was gone.
    package var controlRequests = 0
    package var controlRateRefused = 0
    package var controlRateDropped = 0
    package var controlPeerGone = 0

    package init() {}
}

/// A reactor host's `states` endpoint flowd subscribes to for its heartbeats.
private struct WatchedHost {
    var name: String
    var endpoint: String
    var socket: Socket
}

/// flowd's part of the ``DaemonLoop``: steps, deep links and renderer reports from `ingress` go
/// to the ``StepRouter``; status requests on `control` are answered from it; reactor hosts'
/// heartbeats (subscriptions to their `states`) keep their liveness.
///
/// It runs on ``FlowLoop``'s thread, where the engine runs: each message is applied there with no
/// stream, no task and no `await`. A step whose flow adapts asynchronously suspends reading (the
/// loop commits and acknowledges the batch so far): the engine finishes it on the same thread
/// between turns, status queries and heartbeats go on meanwhile, and later steps are read once it
/// is done, so arrival order holds.
@FlowActor
final class CoordinatorRole: @FlowActor DaemonRole {
    private let router: StepRouter
    private let data: RouterEndpoint
    private let query: QueryEndpoint
    private let control: DaemonControl
    private let logger: Logger
    private let wireLimits: WireLimits
    private let watched: [WatchedHost]
    private var heartbeatFrames = FrameBuffer()
    /// Step names and stepper ids, made once each.
    private let texts = TextInterner()
    private var accepted = 0
    private var suspended = false
    /// A batch this large (or one that ended at the loop's limit) says more is on the way.
    private static let busyBatchSize = 32

    fileprivate init(
        router: StepRouter, data: RouterEndpoint, query: QueryEndpoint, control: DaemonControl, watched: [WatchedHost],
        limits: WireLimits, logger: Logger
    ) {
        self.router = router
        self.data = data
        self.query = query
        self.control = control
        self.watched = watched
        wireLimits = limits
        self.logger = logger
    }

    /// What the endpoints counted.
    var counters: IngressCounters {
        let intake = data.intake.counters
        var counters = IngressCounters()
        counters.received = data.counters.received
        counters.accepted = accepted
        counters.duplicates = intake.duplicates
        counters.outOfOrder = intake.outOfOrder
        counters.refused = data.replier.refused.merging(query.replier.refused, uniquingKeysWith: +)
        counters.journalAdopted = intake.adoptedSources
        counters.journalLost = intake.lostSequences
        counters.heldDropped = data.counters.heldDropped
        counters.controlRequests = query.counters.requests
        counters.controlRateRefused = query.rateLimited.refused
        counters.controlRateDropped = query.rateLimited.dropped
        counters.controlPeerGone = query.counters.peerGone
        return counters
    }

    // MARK: DaemonRole

    // An isolated conformance: the loop calls these on FlowLoop's thread, the engine's, with no
    // check or hop per message.

    func beginTurn(now: ContinuousClock.Instant) throws {
        try stoppingOnLostLease { try router.checkLease() }
        readHeartbeatsOfHosts(now: now)
    }

    func beginBatch() {}

    func apply(_ message: InboundMessage) -> DaemonApplied {
        applyOnLoop(message)
    }

    func answer(_ request: InboundMessage) {
        answerOnLoop(request)
    }

    var isSuspended: Bool { suspended }

    // The flow that releases the held step wakes the loop.
    var suspendedRecheck: Duration? { nil }

    var hasOutput: Bool { false }

    func commit(_ batch: DaemonBatch) -> DaemonCommit {
        commitOnLoop(batch)
    }

    func tick(now: ContinuousClock.Instant) throws {
        try stoppingOnLostLease { try router.tick(ingress: counters) }
    }

    /// Runs `check`; its error (the shared journal's lease is gone) stops flowd, and says why.
    private func stoppingOnLostLease(_ check: () throws -> Void) throws {
        do {
            try check()
        } catch {
            logger.critical("lost the journal's lease: \(error); stopping so that the standby takes over")
            throw error
        }
    }

    func endTurn(now: ContinuousClock.Instant) {}

    // What was dealt with is durable once committed, and flowd commits every batch it acknowledges.
    func isUnsaved(_ source: String) -> Bool { false }

    var hasWorkInFlight: Bool { false }

    // MARK: On the loop

    /// Reactor hosts publish heartbeats on `states`: flowd judges them dead by silence. Read even
    /// while saturated: a busy flowd must not judge a live reactor host dead.
    private func readHeartbeatsOfHosts(now: ContinuousClock.Instant) {
        for host in watched {
            while (try? host.socket.receive(into: &heartbeatFrames, mode: .nonBlocking)) == true {
                let message: WireMessage
                do {
                    message = try WireMessage.decode(from: heartbeatFrames)
                } catch {
                    logger.warning(
                        "reactor host \(host.name) on \(host.endpoint) sent a malformed heartbeat: \(error.reason): \(error.detail)"
                    )
                    continue
                }
                guard case .heartbeat(let heartbeat) = message else { continue }
                data.heard(source: heartbeat.envelope.source, role: "reactor-host \(host.name)", now: now)
            }
        }
    }

    private func applyOnLoop(_ message: InboundMessage) -> DaemonApplied {
        let header = message.header
        let origin = Origin(source: header.envelope.source, sequence: header.envelope.sequence)
        do {
            switch header.kind {
            case .step, .deepLink:
                let view = try NamedMessageView.decode(
                    from: message.frames, header: header, limits: wireLimits, texts: texts)
                let step = CanonicalStep(view.name, try view.params.decodeParams())
                accepted += 1
                let input: StepRouter.Input =
                    header.kind == .step ? .step(stepperID: texts.text(header.topicID)) : .deepLink
                guard
                    let unfinished = router.apply(
                        input, step, frames: message.frames, params: view.params, origin: origin, topic: header.topic,
                        envelope: header.envelope, trace: view.traceContext)
                else { return .done }
                suspend(until: unfinished)
                return .suspended
            case .presentableReport:
                guard case .presentableReport(let report) = try WireMessage.decode(from: message.frames, header: header)
                else { return .done }
                accepted += 1
                router.applyReport(report.event, for: report.presentableID, origin: origin, topic: header.topic)
            default:
                data.refuse(
                    .unknownKind,
                    "flowd's ingress accepts step, deepLink, presentableReport and heartbeat, not \(header.kind)",
                    message: message)
            }
        } catch {
            data.refuse(error.reason, error.detail, message: message)
        }
        return .done
    }

    /// Stops reading steps until the engine finished `unfinished` (on this thread, between
    /// turns): heartbeats, status replies and events keep flowing however long the flow awaits.
    private func suspend(until unfinished: StepRouter.Unfinished) {
        suspended = true
        let control = self.control
        Task { [router] in
            await router.finish(unfinished)
            self.suspended = false
            control.wake()
        }
    }

    private func commitOnLoop(_ batch: DaemonBatch) -> DaemonCommit {
        do {
            // Under load the journal commits on its own thread while the loop applies the next
            // batch; a lone step commits here, sparing the hops between threads (its latency).
            let busy = batch.endedAtLimit || batch.size >= Self.busyBatchSize
            let wake: (@Sendable () -> Void)? = busy ? { @Sendable [control] in control.wake() } : nil
            let underWay = try router.commitBatch(
                size: batch.size, receivedAt: batch.startedAt, dealtWith: batch.dealtWith, ingress: counters,
                wake: wake)
            return underWay ? .underWay : .committed
        } catch {
            logger.critical("cannot write the journal: \(error); stopping without acknowledging the last batch")
            return .stop(error)
        }
    }

    func finishCommit(waiting: Bool) -> Result<Void, any Error>? {
        let outcome = router.finishCommitBatch(waiting: waiting, ingress: counters)
        if case .failure(let error) = outcome {
            logger.critical("cannot write the journal: \(error); stopping without acknowledging the last batches")
        }
        return outcome
    }

    private func answerOnLoop(_ request: InboundMessage) {
        let status: StatusQuery
        do {
            switch try WireMessage.decode(from: request.frames, header: request.header) {
            case .statusRequest(let decoded):
                status = try StatusQuery(decoded.params)
            case .replayRequest(let replay):
                answer(replay, to: request)
                return
            default:
                return
            }
        } catch {
            query.refuse(error.reason, error.detail, request: request)
            return
        }
        query.reply(to: request.peer) {
            let reply = StatusReply(
                envelope: query.envelope(.statusReply, contentType: .json),
                status: router.status(
                    ingress: counters, peers: data.peers, control: query.status, query: status))
            var frames = FrameBuffer()
            do throws(WireError) {
                try reply.encode(into: &frames)
            } catch {
                // The routing id is sent: something must follow it.
                let refusal = Refusal(
                    reason: error.reason, detail: "status reply not encoded: \(error.detail)",
                    endpoint: query.replier.name)
                try? refusal.diagnostic(query.envelope(.diagnostic, contentType: .json)).encode(into: &frames)
            }
            return frames
        }
    }
}

extension CoordinatorRole {
    /// Answers a replay request with the kept events it asks for, or `gone` (PROTOCOL.md §4.6).
    fileprivate func answer(_ request: ReplayRequest, to inbound: InboundMessage) {
        let answer = router.replay(request)
        switch answer {
        case .gone(let message, let oldest, let head), .unreadable(let message, let oldest, let head):
            var details: WireParams = [
                "since": .int(Int64(clamping: request.since)), "oldest": .int(Int64(clamping: oldest)),
                "head": .int(Int64(clamping: head)),
            ]
            if let until = request.until { details["until"] = .int(Int64(clamping: until)) }
            let reason: DiagnosticReason =
                if case .unreadable = answer { .persistenceFailed } else { .gone }
            let refusal = Refusal(reason, message, endpoint: query.replier.name, header: inbound.header, extra: details)
            query.replier.refuse(refusal, to: inbound.peer, count: 0, publish: false, log: false)
        case .events(let replay, let head, let oldest):
            query.reply(to: inbound.peer) {
                let end = min(request.until ?? head, head)
                let reply = ReplayReply(
                    envelope: query.envelope(.replay, contentType: .json), since: request.since,
                    until: request.until, last: replay.last, head: head, oldest: oldest, more: replay.last < end,
                    events: replay.events)
                var frames = FrameBuffer()
                do throws(WireError) {
                    try reply.encode(into: &frames)
                } catch {
                    let refusal = Refusal(
                        reason: error.reason, detail: "replay reply not encoded: \(error.detail)",
                        endpoint: query.replier.name)
                    try? refusal.diagnostic(query.envelope(.diagnostic, contentType: .json)).encode(into: &frames)
                }
                return frames
            }
        }
    }
}

/// flowd's loop as the driver of ``FlowLoop``: the shared ``DaemonLoop`` over `ingress` and
/// `control`, turned on the engine's thread.
@FlowActor
final class CoordinatorDriver: FlowLoopDriver {
    /// Messages read into one batch before it is committed and acknowledged: under load each
    /// batch is a commit of the journal, whose cost a larger batch shares among more steps.
    static let maxBatchSize = 1024
    /// How long acks and replies still queued at shutdown may take to leave, in milliseconds.
    static let shutdownLinger: Int32 = 1000

    private let loop: DaemonLoop
    private let watched: [WatchedHost]
    nonisolated let control: DaemonControl

    /// Creates the sockets and binds them; throws if an endpoint cannot be bound. With
    /// `acceptJournalLoss`, a stepper found ahead of the journal has its sequence adopted
    /// (PROTOCOL.md §4.4, `journal-behind`) instead of being refused.
    init(
        context: Context, config: FlowBusConfig, sourceID: String, router: StepRouter, control: DaemonControl,
        logger: Logger, journal: (any Journal)?, acceptJournalLoss: Bool = false
    ) throws {
        self.control = control
        let limits = config.limits
        let endpoints = config.endpoints
        let heartbeat = Duration.milliseconds(config.heartbeatMilliseconds)
        // With a journal, flowd remembers every source it ever dealt with: one it does not hold in
        // memory (new, or forgotten) is looked up there.
        let intake = Intake(
            endpoint: "ingress",
            policy: .init(
                remembersSources: journal != nil,
                deadAfter: heartbeat * max(1, config.heartbeatLiveness),
                idleTimeout: .seconds(limits.sourceIdleSeconds), maxSources: limits.maxSources,
                hasDurableLedger: journal != nil, acceptsLedgerLoss: acceptJournalLoss,
                ledgerLossRemedy:
                    "restart flowd with --accept-journal-loss (see docs/DEPLOYMENT.md, \"A journal behind its steppers\")"
            ),
            defaultRole: "stepper")
        let ingress = try ZMQRouterTransport(
            context: context, endpoint: endpoints.ingress, what: "endpoints.ingress", limits: limits,
            curve: config.curve)
        let controlSocket: ZMQRouterTransport
        do {
            // A reply to a peer that went away fails instead of vanishing: no reply is built for it.
            controlSocket = try ZMQRouterTransport(
                context: context, endpoint: endpoints.control, what: "endpoints.control", limits: limits,
                curve: config.curve, mandatory: true)
        } catch {
            ingress.close(linger: 0)
            throw error
        }
        var watched: [WatchedHost] = []
        for (name, host) in config.reactors.sorted(by: { $0.key < $1.key }) {
            let socket = try context.socket(.sub)
            try socket.setOptions([
                .subscribe(Topic.Prefix.heartbeat.subscription), .reconnectInterval(100), .reconnectIntervalMax(2000),
                .linger(0),
            ])
            // Every instance: only the active one publishes.
            for endpoint in host.statesEndpoints {
                try config.curve.secureClient(socket, endpoint: endpoint)
                try socket.connect(endpoint)
            }
            watched.append(
                WatchedHost(name: name, endpoint: FlowBusConfig.either(host.statesEndpoints), socket: socket))
        }
        self.watched = watched
        let wireLimits = WireLimits(maxFrameBytes: limits.maxMessageBytes)
        let publisher = router.publisher
        let data = RouterEndpoint(
            replier: RouterReplier(
                name: "ingress", transport: ingress, publisher: publisher, sourceID: sourceID, logger: logger),
            intake: intake, limits: wireLimits, logger: logger)
        let query = QueryEndpoint(
            replier: RouterReplier(
                name: "control", transport: controlSocket, publisher: publisher, sourceID: sourceID, logger: logger),
            accepts: [.statusRequest, .replayRequest],
            limiter: RateLimiter(rate: limits.controlRate, burst: Double(limits.controlBurst)),
            limits: wireLimits, reportInterval: max(heartbeat, .seconds(1)), logger: logger)
        let role = CoordinatorRole(
            router: router, data: data, query: query, control: control, watched: watched, limits: wireLimits,
            logger: logger)
        var settings = DaemonLoop.Settings(heartbeat: heartbeat, maxBatchSize: Self.maxBatchSize)
        // A slow journal (PostgreSQL's round trips) gets larger commits under load.
        settings.maxGroupedBatchSize = Self.maxBatchSize * 4
        if let journal {
            settings.lookUp = { sources in
                do {
                    let found = try journal.lastSequences(of: sources)
                    return sources.map { LedgerAnswer(source: $0, last: .success(found[$0])) }
                } catch {
                    return sources.map { LedgerAnswer(source: $0, last: .failure(error)) }
                }
            }
        }
        loop = try DaemonLoop(
            data: data, query: query, publisher: publisher, control: control, role: role,
            sockets: watched.map(\.socket), settings: settings, logger: logger)
    }

    /// What the endpoints counted (tests, status).
    var peers: [String: Intake.Liveness] { loop.data.peers }

    nonisolated func wake() {
        control.wake()
    }

    nonisolated func turn(mayWait: Bool) {
        FlowActor.assumeIsolated { loop.turn(mayWait: mayWait) }
    }

    /// Sends what is still queued and closes the sockets, letting replies leave within a linger.
    func close() {
        // The events endpoint is the router's: it closes it after the engine's last events.
        loop.closeEndpoints(linger: Self.shutdownLinger)
        for host in watched { host.socket.close() }
    }
}
