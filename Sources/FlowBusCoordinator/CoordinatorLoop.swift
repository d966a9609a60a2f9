import FlowBusClient
import FlowBusConfiguration
import FlowBusDaemon
import FlowBusProtocol
import FlowBusWire
import Flows
import Foundation
import Logging
import Synchronization
import ZeroMQ

/// Who sent an applied message: its (source, sequence), which the journal records.
package struct Origin: Sendable, Hashable {
    package var source: String
    package var sequence: UInt64
}

/// A reactor host's `states` endpoint flowd subscribes to for its heartbeats.
private struct WatchedHost {
    package var name: String
    package var endpoint: String
    package var socket: Socket
}

/// flowd's event loop: the sockets of `ingress` and `control` (and subscriptions to reactor
/// hosts' heartbeats), read on ``FlowLoop``'s thread, where the engine runs.
///
/// Each turn reads a batch and hands every message straight to the ``StepRouter`` — no stream,
/// no task, no `await` per step. The receiving rules (sequence ledger, acks, `out-of-order`,
/// heartbeat answers, liveness) are the shared ``Intake``'s; this loop carries out what it says.
/// A batch ends when the sockets are drained or it is full: the router commits it (with a
/// journal) and publishes its held events, then the acks go out.
///
/// A step whose flow adapts asynchronously ends the batch there (committed, acknowledged) and
/// pauses reading steps: the engine finishes it on the same thread between turns, status queries
/// and heartbeats go on meanwhile, and later steps are read once it is done, so arrival order
/// holds.
@FlowActor
package final class CoordinatorLoop: FlowLoopDriver {
    /// What the ingress endpoint counted.
    package struct Counters: Sendable {
        package var received = 0
        package var accepted = 0
        package var duplicates = 0
        /// Messages dropped because an earlier sequence of their source is missing (resent later).
        package var outOfOrder = 0
        package var refused: [DiagnosticReason: Int] = [:]
        /// Sources adopted past the journal (`--accept-journal-loss`), and the sequences lost so.
        package var journalAdopted = 0
        package var journalLost: UInt64 = 0
        /// Control requests read, refused or dropped over their peer's rate, and not answered
        /// because their peer was gone.
        package var controlRequests = 0
        package var controlRateRefused = 0
        package var controlRateDropped = 0
        package var controlPeerGone = 0
    }

    /// What the loop counts itself; duplicates and gaps are the intake's.
    private var receivedCount = 0
    private var acceptedCount = 0
    private var refusedCounts: [DiagnosticReason: Int] = [:]

    /// Messages read into one batch before it is committed and acknowledged.
    package static let maxBatchSize = 512
    /// Control requests answered per turn: the control plane never starves steps.
    package static let maxControlPerTurn = 16
    /// Control requests read per turn, answered or not: refused and dropped ones cost little, so a
    /// flood drains fast without taking the turn from steps.
    package static let maxControlReadPerTurn = 256

    /// What the control endpoint counted.
    package struct ControlCounters: Sendable {
        package var requests = 0
        package var answered = 0
        /// Requests whose peer was gone (or not reading) when the reply was due: no reply built.
        package var peerGone = 0
    }
    /// How long acks and replies still queued at shutdown may take to leave, in milliseconds.
    package static let shutdownLinger: Int32 = 1000

    private let config: FlowBusConfig
    private let sourceID: String
    private let logger: Logger
    private let wireLimits: WireLimits
    private let heartbeatInterval: Duration
    private nonisolated let inbox: LoopInbox
    private nonisolated var wakeSignal: WakeSignal { inbox.wake }
    private nonisolated let accepting = Atomic<Bool>(true)
    package let finished = ReadinessSignal()

    private let ingress: Socket
    private let control: Socket
    private var watched: [WatchedHost] = []
    private let poller = Poller()
    private var wakeIndex = 0
    private var intake: Intake
    private var controlLimiter: RateLimiter
    private var controlCounts = ControlCounters()
    private var nextControlReport = ContinuousClock.now
    private let router: StepRouter
    package var counters: Counters {
        Counters(
            received: receivedCount, accepted: acceptedCount, duplicates: intake.counters.duplicates,
            outOfOrder: intake.counters.outOfOrder, refused: refusedCounts,
            journalAdopted: intake.counters.adoptedSources,
            journalLost: intake.counters.lostSequences, controlRequests: controlCounts.requests,
            controlRateRefused: controlLimiter.counters.refused, controlRateDropped: controlLimiter.counters.dropped,
            controlPeerGone: controlCounts.peerGone)
    }
    private var received = RoutedFrames()
    private var heartbeatFrames = FrameBuffer()
    private var replyBuffer = FrameBuffer()
    /// Sequences of the messages flowd sends on each ROUTER (PROTOCOL.md §4.2: one per socket).
    private var ingressSequence: UInt64 = 0
    private var controlSequence: UInt64 = 0
    private var batchSize = 0
    private var batchReceivedAt: ContinuousClock.Instant?
    /// An asynchronous flow is processing a step: reading waits until it is done.
    private var isPaused = false
    private var isFinished = false
    private var nextHeartbeat = ContinuousClock.now
    private var nextSourceCheck = ContinuousClock.now
    private(set) var failure: (any Error)?

    /// Creates the sockets and binds them; throws if an endpoint cannot be bound. With
    /// `acceptJournalLoss`, a stepper found ahead of the journal has its sequence adopted
    /// (PROTOCOL.md §4.4, `journal-behind`) instead of being refused.
    package init(
        context: Context, config: FlowBusConfig, sourceID: String, router: StepRouter, inbox: LoopInbox, logger: Logger,
        journal: (any Journal)?, acceptJournalLoss: Bool = false
    ) throws {
        self.inbox = inbox
        self.config = config
        self.sourceID = sourceID
        self.router = router
        self.logger = logger
        wireLimits = WireLimits(maxFrameBytes: config.limits.maxMessageBytes)
        heartbeatInterval = .milliseconds(config.heartbeatMilliseconds)
        // With a journal, flowd remembers every source it ever dealt with: one it does not hold in
        // memory (new, or forgotten) is looked up there.
        var lookUp: (@Sendable (String) throws -> UInt64?)?
        if let journal {
            lookUp = { @Sendable [logger] (source: String) throws -> UInt64? in
                do {
                    return try journal.lastSequence(of: source)
                } catch {
                    logger.error(
                        "cannot read source \(source) from the journal \(journal.location): \(error); its message waits for a resend"
                    )
                    throw error
                }
            }
        }
        intake = Intake(
            endpoint: "ingress",
            policy: .init(
                remembersSources: journal != nil,
                deadAfter: .milliseconds(config.heartbeatMilliseconds * max(1, config.heartbeatLiveness)),
                idleTimeout: .seconds(config.limits.sourceIdleSeconds), maxSources: config.limits.maxSources,
                lookUp: lookUp, acceptsLedgerLoss: acceptJournalLoss,
                ledgerLossRemedy:
                    "restart flowd with --accept-journal-loss (see docs/DEPLOYMENT.md, \"A journal behind its steppers\")"
            ),
            defaultRole: "stepper")
        let limits = config.limits
        let endpoints = config.endpoints
        ingress = try context.socket(.router)
        try ingress.setOptions([
            .maxMessageSize(limits.socketCeiling),
            .receiveHighWaterMark(Int32(clamping: limits.highWaterMark)),
            .sendHighWaterMark(Int32(clamping: limits.highWaterMark)),
            .linger(0),
        ])
        try config.curve.secureServer(ingress, endpoint: endpoints.ingress)
        try prepareToBind(endpoints.ingress, what: "endpoints.ingress")
        try ingress.bind(endpoints.ingress)
        restrictPermissions(ofIPCEndpoint: endpoints.ingress)
        controlLimiter = RateLimiter(rate: limits.controlRate, burst: Double(limits.controlBurst))
        control = try context.socket(.router)
        // A reply to a peer that went away fails (EHOSTUNREACH) instead of vanishing: its request
        // is dropped before any reply is built.
        try control.setOptions([.maxMessageSize(limits.socketCeiling), .linger(0), .routerMandatory(true)])
        try config.curve.secureServer(control, endpoint: endpoints.control)
        try prepareToBind(endpoints.control, what: "endpoints.control")
        try control.bind(endpoints.control)
        restrictPermissions(ofIPCEndpoint: endpoints.control)
        // Reactor hosts publish heartbeats on `states`: flowd judges them dead by silence.
        for (name, host) in config.reactors.sorted(by: { $0.key < $1.key }) {
            let socket = try context.socket(.sub)
            try socket.setOptions([
                .subscribe(Topic.Prefix.heartbeat.subscription), .reconnectInterval(100), .reconnectIntervalMax(2000),
                .linger(0),
            ])
            try config.curve.secureClient(socket, endpoint: host.states)
            try socket.connect(host.states)
            watched.append(WatchedHost(name: name, endpoint: host.states, socket: socket))
        }
        try poller.add(ingress)
        try poller.add(control)
        for host in watched { try poller.add(host.socket) }
        wakeIndex = poller.add(fileDescriptor: wakeSignal.fileDescriptor)
    }

    /// The peers heard on ingress and the reactor hosts watched, by source id.
    package var peers: [String: Intake.Liveness] { intake.peers }

    // MARK: Driver

    package nonisolated func wake() {
        wakeSignal.signal()
    }

    package nonisolated func turn(mayWait: Bool) {
        FlowActor.assumeIsolated { turnOnLoop(mayWait: mayWait) }
    }

    /// Stops reading the endpoints; the batch in progress is still applied, committed and
    /// acknowledged, then ``finished`` is signalled.
    package nonisolated func stopAccepting() {
        if accepting.exchange(false, ordering: .acquiringAndReleasing) { wakeSignal.signal() }
    }

    /// Sends what is still queued and closes the sockets, letting replies leave within a linger.
    package func close() {
        try? ingress.setOption(.linger(Self.shutdownLinger))
        try? control.setOption(.linger(Self.shutdownLinger))
        ingress.close()
        control.close()
        for host in watched { host.socket.close() }
        watched.removeAll()
    }

    private func turnOnLoop(mayWait: Bool) {
        if isFinished {
            if (try? poller.poll(timeout: mayWait ? 1000 : 0)) != nil, poller.isReadable(wakeIndex) {
                wakeSignal.clear()
            }
            return
        }
        let isAccepting = accepting.load(ordering: .acquiring)
        // While an asynchronous flow holds a step, later steps wait; status queries do not.
        let canRead = isAccepting && !isPaused
        poller.setEvents(canRead ? .readable : [], at: 0)
        poller.setEvents(isAccepting ? .readable : [], at: 1)
        let wait = mayWait ? max(0, ContinuousClock.now.duration(to: nextHeartbeat).wholeMilliseconds) : 0
        do {
            try poller.poll(timeout: wait)
        } catch {
            stop(after: error, doing: "poll")
            return
        }
        if poller.isReadable(wakeIndex) { wakeSignal.clear() }
        readHeartbeatsOfHosts()
        publishInjected()
        if isAccepting {
            do {
                try readControl()
                if canRead { try readIngress() }
            } catch {
                stop(after: error, doing: "receive")
                return
            }
        }
        if !isPaused { endBatch() }
        // A failed commit stopped the loop: nothing more may be published, checkpointed or compacted.
        if isFinished { return }
        reportRateLimited(now: .now)
        if ContinuousClock.now >= nextHeartbeat {
            do {
                try router.heartbeat(ingress: counters)
            } catch {
                logger.critical("lost the journal's lease: \(error); stopping so that the standby takes over")
                stop(failure: error)
                return
            }
            nextHeartbeat = .now + heartbeatInterval
        }
        if !isAccepting && !isPaused && batchSize == 0 { stop(failure: nil) }
    }

    /// A terminated context is a normal stop; any other socket error fails flowd (exit non-zero).
    private func stop(after error: ZMQError, doing operation: String) {
        if error.isContextTerminated {
            stop(failure: nil)
        } else {
            logger.error("flowd \(operation) failed: \(error)")
            stop(failure: error)
        }
    }

    private func stop(failure: (any Error)?) {
        guard !isFinished else { return }
        isFinished = true
        // Until the service uninstalls the loop, its turns only wait for a wake-up.
        for index in 0..<(2 + watched.count) { poller.setEvents([], at: index) }
        self.failure = failure
        accepting.store(false, ordering: .releasing)
        finished.signal()
    }

    // MARK: Reading

    private func readHeartbeatsOfHosts() {
        // Read even while saturated: a busy flowd must not judge a live reactor host dead.
        let now = ContinuousClock.now
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
                intake.heard(source: heartbeat.envelope.source, role: "reactor-host \(host.name)", now: now)
            }
        }
    }

    private func publishInjected() {
        for refusal in inbox.take() { refuse(refusal, to: nil) }
    }

    /// Status requests first, a bounded number: under a flood of steps they still get answered,
    /// and a flood of requests cannot starve steps. Each peer is held to its rate (``RateLimiter``):
    /// past it a request is refused as `rate-limited` or dropped, before anything is built for it.
    private func readControl() throws(ZMQError) {
        var answered = 0
        var read = 0
        let now = ContinuousClock.now
        while answered < Self.maxControlPerTurn, read < Self.maxControlReadPerTurn,
            try control.receive(into: &received, mode: .nonBlocking)
        {
            read += 1
            controlCounts.requests += 1
            let header: RoutedHeader
            do {
                header = try RoutedHeader.decode(from: received.frames, limits: wireLimits)
            } catch {
                if controlLimiter.admit(received.routingID, now: now) == .allow {
                    refuse(
                        Refusal(reason: error.reason, detail: error.detail, endpoint: "control"),
                        toControlPeer: received.routingID)
                }
                continue
            }
            switch controlLimiter.admit(received.routingID, now: now) {
            case .allow:
                break
            case .refuse(let retryAfter):
                // To the requester only: the interval's report stands for all of them on `events`.
                let milliseconds = max(1, Int64(retryAfter.wholeMilliseconds))
                let refusal = Refusal(
                    .rateLimited,
                    "more than \(Int(controlLimiter.burst)) control requests at once or \(controlLimiter.rate) per second: "
                        + "not answered; retry after \(milliseconds) ms (limits.controlRate, limits.controlBurst)",
                    endpoint: "control", header: header, extra: ["retry_after_ms": .int(milliseconds)])
                controlSequence += 1
                let envelope = Envelope(
                    kind: .diagnostic, contentType: config.wire.publish, sequence: controlSequence, source: sourceID)
                send(refusal.diagnostic(envelope), to: received.routingID, on: control)
                continue
            case .drop:
                continue
            }
            guard header.kind == .statusRequest else {
                refuse(
                    Refusal(
                        .unknownKind, "flowd's control endpoint answers statusRequest only, not \(header.kind)",
                        endpoint: "control", header: header), toControlPeer: received.routingID)
                continue
            }
            let query: StepRouter.StatusQuery
            do {
                guard case .statusRequest(let request) = try WireMessage.decode(from: received.frames, header: header)
                else { continue }
                query = try StepRouter.StatusQuery(request.params)
            } catch {
                refuse(
                    Refusal(error.reason, error.detail, endpoint: "control", header: header),
                    toControlPeer: received.routingID)
                continue
            }
            answered += 1
            answerStatus(to: received.routingID, query: query)
        }
    }

    /// Once per heartbeat interval: one log line and one `rate-limited` diagnostic for all the
    /// control requests refused or dropped meanwhile, never one per request.
    private func reportRateLimited(now: ContinuousClock.Instant) {
        guard now >= nextControlReport else { return }
        nextControlReport = now + max(heartbeatInterval, .seconds(1))
        guard let report = controlLimiter.takeReport() else { return }
        let busiest = report.busiest.peer.map { String($0, radix: 16, uppercase: false) }.joined()
        let message =
            "\(report.refused + report.dropped) control request(s) from \(report.peers) peer(s) over limits.controlRate "
            + "\(controlLimiter.rate)/s (burst \(Int(controlLimiter.burst))): \(report.refused) refused, "
            + "\(report.dropped) dropped unanswered; most from peer \(busiest) (\(report.busiest.count))"
        logger.warning("rate-limited: \(message)")
        router.publishDiagnostic(
            .rateLimited, message,
            details: [
                "endpoint": "control", "refused": .int(Int64(report.refused)), "dropped": .int(Int64(report.dropped)),
                "peers": .int(Int64(report.peers)),
                "retry_after_ms": .int(Int64((1000 / controlLimiter.rate).rounded(.up))),
            ])
    }

    /// The control plane's counts, for the status reply.
    private var controlStatus: WireValue {
        let limited = controlLimiter.counters
        return .map([
            "requests": .int(Int64(controlCounts.requests)), "answered": .int(Int64(controlCounts.answered)),
            "rate_limited": .map(["refused": .int(Int64(limited.refused)), "dropped": .int(Int64(limited.dropped))]),
            "peer_gone": .int(Int64(controlCounts.peerGone)), "peers_tracked": .int(Int64(controlLimiter.peerCount)),
            "rate": .double(controlLimiter.rate), "burst": .int(Int64(controlLimiter.burst)),
        ])
    }

    private func readIngress() throws(ZMQError) {
        while !isPaused, batchSize < Self.maxBatchSize, try ingress.receive(into: &received, mode: .nonBlocking) {
            if batchSize == 0 {
                batchReceivedAt = .now
                router.beginBatch()
            }
            batchSize += 1
            handleIngressMessage()
        }
    }

    private func handleIngressMessage() {
        receivedCount += 1
        let frames = received.frames
        let header: RoutedHeader
        do {
            header = try RoutedHeader.decode(from: frames, limits: wireLimits)
        } catch {
            if let refusal = intake.refuse(error, frames: frames, peer: received.routingID, limits: wireLimits) {
                refuse(refusal, to: received.routingID)
            }
            return
        }
        let envelope = header.envelope
        if header.kind == .heartbeat {
            // Heartbeats prove a peer alive and are answered; never applied.
            intake.heartbeat(
                source: envelope.source, sequence: envelope.sequence, topic: header.topic, peer: received.routingID)
            return
        }
        switch intake.receive(
            source: envelope.source, sequence: envelope.sequence, topic: header.topic, peer: received.routingID)
        {
        case .duplicate, .outOfOrder, .ledgerUnavailable, .ledgerBehind:
            // A resend of something dealt with is acknowledged again; a gap or a stepper ahead of
            // the journal is reported with the batch's end (PROTOCOL.md §4.4); an unreadable
            // journal makes the sender resend.
            return
        case .unnumbered:
            refuse(
                Refusal(
                    .malformed, "\(header.kind) with sequence 0: only a heartbeat may be unnumbered",
                    endpoint: "ingress",
                    header: header), to: received.routingID)
            return
        case .fresh:
            break
        }
        let origin = Origin(source: envelope.source, sequence: envelope.sequence)
        do {
            switch header.kind {
            case .step, .deepLink:
                let view = try NamedMessageView.decode(from: frames, header: header, limits: wireLimits)
                let step = CanonicalStep(view.name, try view.params.decodeParams())
                acceptedCount += 1
                let input: StepRouter.Input =
                    header.kind == .step ? .step(stepperID: String(header.topicID)) : .deepLink
                let unfinished = router.apply(
                    input, step, frames: frames, params: view.params, origin: origin, topic: header.topic)
                if let unfinished { pause(until: unfinished) }
            case .presentableReport:
                guard case .presentableReport(let report) = try WireMessage.decode(from: frames, header: header) else {
                    return
                }
                acceptedCount += 1
                router.applyReport(report.event, for: report.presentableID, origin: origin, topic: header.topic)
            default:
                refuse(
                    Refusal(
                        .unknownKind,
                        "flowd's ingress accepts step, deepLink, presentableReport and heartbeat, not \(header.kind)",
                        endpoint: "ingress", header: header), to: received.routingID)
            }
        } catch {
            refuse(Refusal(error.reason, error.detail, endpoint: "ingress", header: header), to: received.routingID)
        }
    }

    /// Stops reading steps until the engine finished `unfinished` (on this thread, between
    /// turns). The batch so far, the held step included, is committed and acknowledged first:
    /// heartbeats, status replies and events keep flowing however long the flow awaits.
    private func pause(until unfinished: StepRouter.Unfinished) {
        isPaused = true
        endBatch()
        Task { [router] in
            await router.finish(unfinished)
            self.isPaused = false
            self.wakeSignal.signal()
        }
    }

    // MARK: Replies

    /// Ends the batch: commits it, publishes what it held, then acknowledges. The intake's
    /// `out-of-order` refusals go to their senders before the acks that cover what came before.
    private func endBatch() {
        let end = intake.endBatch(now: .now, checkEvery: heartbeatInterval)
        for (peer, refusal) in end.refusals { refuse(refusal, to: peer) }
        for behind in end.ledgerBehind { reportBehind(behind) }
        for peer in end.heartbeatAnswers {
            ingressSequence += 1
            send(
                Heartbeat(envelope: Envelope(kind: .heartbeat, sequence: ingressSequence, source: sourceID)), to: peer,
                on: ingress)
        }
        for dead in end.deadPeers {
            logger.warning("peer \(dead.source) (\(dead.role)) sent nothing for \(dead.silentFor): dead")
            router.publishPeerDead(dead)
        }
        if !end.moreDeadPeers.isEmpty {
            logger.warning("\(end.moreDeadPeers.count) more peers went silent at the same check: dead")
            router.publishPeersDead(end.moreDeadPeers)
        }
        guard batchSize > 0 || !end.acks.isEmpty else {
            forgetSourcesIfDue()
            return
        }
        do {
            try router.commitBatch(
                size: batchSize, receivedAt: batchReceivedAt, dealtWith: end.dealtWith, ingress: counters)
        } catch {
            logger.critical("cannot write the journal: \(error); stopping without acknowledging the last batch")
            batchSize = 0
            stop(failure: error)
            return
        }
        batchSize = 0
        batchReceivedAt = nil
        forgetSourcesIfDue()
        for ack in end.acks {
            ingressSequence += 1
            send(
                FlowBusWire.Ack(
                    envelope: Envelope(kind: .ack, sequence: ingressSequence, messageID: .none, source: sourceID),
                    acknowledgedSource: ack.source, acknowledgedSequence: ack.sequence), to: ack.peer, on: ingress)
        }
    }

    /// Once per heartbeat interval, after a commit (or with nothing to commit): what was dealt
    /// with is in the journal, so sources may be forgotten (PROTOCOL.md §4.4).
    private func forgetSourcesIfDue() {
        let now = ContinuousClock.now
        guard now >= nextSourceCheck else { return }
        nextSourceCheck = now + heartbeatInterval
        intake.forgetSources(now: now)
    }

    /// A stepper ahead of the journal: refused to it every time, logged and published once per
    /// source; adopted ones are logged with the sequences lost and the total so far.
    private func reportBehind(_ behind: Intake.LedgerBehind) {
        if behind.isFirstReport {
            router.publishRefusal(behind.refusal, logged: false)
            if behind.adopted {
                let counts = intake.counters
                logger.warning(
                    "journal-behind: adopted sequence \(behind.received) of \(behind.source) (the journal had \(behind.ledgerLast)): \(behind.lost) sequence(s) lost; \(counts.lostSequences) lost over \(counts.adoptedSources) source(s) since start",
                    metadata: ["source": "\(behind.source)"])
            } else {
                logger.error(
                    "\(behind.refusal.reason): \(behind.refusal.detail)", metadata: ["source": "\(behind.source)"])
            }
        }
        guard !behind.adopted else { return }
        refusedCounts[.journalBehind, default: 0] += behind.refusal.extra["count"]?.intValue.map(Int.init) ?? 1
        ingressSequence += 1
        let envelope = Envelope(
            kind: .diagnostic, contentType: config.wire.publish, sequence: ingressSequence, source: sourceID)
        send(behind.refusal.diagnostic(envelope), to: behind.peer, on: ingress)
    }

    /// Counts, logs and publishes a refusal of a control request, and tells the requester.
    private func refuse(_ refusal: Refusal, toControlPeer peer: [UInt8]) {
        refusedCounts[refusal.reason, default: 0] += 1
        router.publishRefusal(refusal)
        controlSequence += 1
        let envelope = Envelope(
            kind: .diagnostic, contentType: config.wire.publish, sequence: controlSequence, source: sourceID)
        send(refusal.diagnostic(envelope), to: peer, on: control)
    }

    /// Counts, logs and publishes a refusal, and tells its sender (before the ack that covers it).
    private func refuse(_ refusal: Refusal, to peer: [UInt8]?) {
        refusedCounts[refusal.reason, default: 0] += 1
        router.publishRefusal(refusal)
        guard let peer else { return }
        ingressSequence += 1
        let envelope = Envelope(
            kind: .diagnostic, contentType: config.wire.publish, sequence: ingressSequence, source: sourceID)
        send(refusal.diagnostic(envelope), to: peer, on: ingress)
    }

    /// The routing id goes first: if the peer is gone or not reading its replies, that fails
    /// and no reply is built; otherwise the reply completes the message.
    private func answerStatus(to peer: [UInt8], query: StepRouter.StatusQuery) {
        do {
            guard try control.send(peer, more: true, mode: .nonBlocking) else {
                controlCounts.peerGone += 1
                return
            }
        } catch {
            if !error.isHostUnreachable { logger.debug("status reply not sent: \(error)") }
            controlCounts.peerGone += 1
            return
        }
        controlCounts.answered += 1
        controlSequence += 1
        let reply = StatusReply(
            envelope: Envelope(kind: .statusReply, contentType: .json, sequence: controlSequence, source: sourceID),
            status: router.status(ingress: counters, peers: intake.peers, control: controlStatus, query: query))
        do {
            try reply.encode(into: &replyBuffer)
        } catch {
            // The routing id is sent: something must follow it.
            let refusal = Refusal(
                reason: error.reason, detail: "status reply not encoded: \(error.detail)", endpoint: "control")
            let envelope = Envelope(kind: .diagnostic, contentType: .json, sequence: controlSequence, source: sourceID)
            try? refusal.diagnostic(envelope).encode(into: &replyBuffer)
        }
        do {
            // Only the first frame of a message can meet the high-water mark: the rest follow it.
            try control.send(message: replyBuffer, mode: .nonBlocking)
        } catch {
            logger.debug("status reply not sent: \(error)")
        }
    }

    private func send(_ message: some WireMessageEncodable, to peer: [UInt8], on socket: Socket) {
        socket.send(message, to: peer, using: &replyBuffer, logger: logger)
    }
}
