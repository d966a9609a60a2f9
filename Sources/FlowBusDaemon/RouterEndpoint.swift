import FlowBusProtocol
import FlowBusWire
import Logging
import ZeroMQ

/// A message a ``RouterEndpoint`` read that its intake judged fresh: the next of its source, for
/// the daemon to apply (or refuse with ``RouterEndpoint/refuse(_:_:message:)``); acknowledged
/// either way once its batch is committed.
package struct InboundMessage: Sendable {
    package var header: RoutedHeader
    package var frames: FrameBuffer
    /// The sender's routing id on the ROUTER socket.
    package var peer: [UInt8]
}

/// A daemon's ROUTER endpoint that takes numbered messages from DEALERs (flowd's `ingress`, a
/// reactor host's `actions`): it carries out what its ``Intake`` decides.
///
/// It reads each message, decodes its header, and lets the intake judge it: heartbeats are
/// answered, duplicates and gaps dealt with, malformed messages refused; only fresh ones reach the
/// daemon (``read()``). A message whose source must first be looked up in the durable ledger is
/// held here, a copy of its frames (a refusal without them), until ``lookedUp(_:)`` brings the
/// answer; it is then read again, in order, before anything the socket holds — judged, applied and
/// acknowledged in the batch that reads it, never before. ``endBatch(now:checkEvery:checksLiveness:)`` sends the batch's refusals, `journal-behind`
/// reports and heartbeat answers and reports the peers found dead; ``acknowledge(_:)`` sends the
/// acks once the batch is durable. Every reply is numbered in the socket's own sequence.
///
/// Used by one thread, like its socket.
package final class RouterEndpoint {
    /// What one ``read()`` found.
    package enum Read {
        /// Nothing is waiting.
        case none
        /// A message was read and dealt with here (a heartbeat, a duplicate, a refusal, one held
        /// for a look-up).
        case dealtWith
        /// A fresh message for the daemon.
        case fresh(InboundMessage)
    }

    /// What the endpoint counted; duplicates, gaps and the ledger's figures are the intake's.
    package struct Counters: Sendable, Equatable {
        /// Messages read from the socket.
        package var received = 0
        /// Messages dropped while their source was looked up, past ``maxHeld`` or ``maxHeldBytes``, or
        /// with a look-up that failed or took longer than ``lookUpTimeout``: their senders resend them.
        package var heldDropped = 0
    }

    /// Messages held at most while their sources are looked up, and their bytes.
    package static let maxHeld = 10_000
    package static let maxHeldBytes = 64 << 20
    /// A look-up with no answer after this long has failed.
    package static let lookUpTimeout: Duration = .seconds(10)

    package let replier: RouterReplier
    // Unchecked exclusivity for what each message touches: used by its loop's thread alone.
    @exclusivity(unchecked) package private(set) var intake: Intake
    @exclusivity(unchecked) package private(set) var counters = Counters()
    private let limits: WireLimits
    private let logger: Logger
    @exclusivity(unchecked) private var received = RoutedFrames()
    /// Topics and sources, made once each.
    private let texts = TextInterner()
    private var held: [String: [Held]] = [:]
    private var heldCount = 0
    private var heldBytes = 0
    private var unreportedDrops = 0
    /// When each source's look-up was handed out.
    private var lookingUp: [String: ContinuousClock.Instant] = [:]
    /// Held messages whose source was looked up, read again before the socket's.
    private var replay: [Held] = []
    private var replayHead = 0

    /// A message held while its source is looked up: its frames, or only its refusal when its
    /// header did not decode (what the refusal says is all that is left to do with it).
    private struct Held {
        var frames: FrameBuffer
        var peer: [UInt8]
        var refusal: Refusal?
    }

    /// The endpoint's name in refusals (`ingress`, `actions`).
    package var name: String { replier.name }

    package init(replier: RouterReplier, intake: Intake, limits: WireLimits, logger: Logger) {
        self.replier = replier
        self.intake = intake
        self.limits = limits
        self.logger = logger
    }

    /// The peers heard, by source id.
    package var peers: [String: Intake.Liveness] { intake.peers }

    /// Reads the next message — one held for a look-up that was answered, else one from the
    /// socket — and deals with what the intake says of it.
    package func read() throws(ZMQError) -> Read {
        if replayHead < replay.count {
            let message = replay[replayHead]
            replayHead += 1
            if replayHead == replay.count {
                replay.removeAll(keepingCapacity: true)
                replayHead = 0
            }
            if let refusal = message.refusal {
                judge(refusal, from: message.peer)
                return .dealtWith
            }
            return judge(message.frames, from: message.peer)
        }
        guard try replier.transport.receive(into: &received) else { return .none }
        counters.received += 1
        return judge(received.frames, from: received.routingID)
    }

    private func judge(_ frames: FrameBuffer, from peer: [UInt8]) -> Read {
        let header: RoutedHeader
        do {
            header = try RoutedHeader.decode(from: frames, limits: limits, texts: texts)
        } catch {
            let (refusal, verdict) = intake.refuse(error, frames: frames, peer: peer, limits: limits)
            switch verdict {
            case nil, .fresh?:
                replier.refuse(refusal, to: peer)
            case .lookUp?:
                hold(refusal.source ?? "", Held(frames: FrameBuffer(), peer: peer, refusal: refusal))
            case .duplicate?, .outOfOrder?, .unnumbered?, .ledgerBehind?:
                break
            }
            return .dealtWith
        }
        let envelope = header.envelope
        if header.kind == .heartbeat {
            // Heartbeats prove a peer alive and are answered; a numbered one fills its sequence.
            let verdict = intake.heartbeat(
                source: envelope.source, sequence: envelope.sequence, topic: header.topic, peer: peer)
            if verdict == .lookUp { hold(envelope.source, Held(frames: frames, peer: peer)) }
            return .dealtWith
        }
        switch intake.receive(source: envelope.source, sequence: envelope.sequence, topic: header.topic, peer: peer) {
        case .fresh:
            return .fresh(InboundMessage(header: header, frames: frames, peer: peer))
        case .lookUp:
            hold(envelope.source, Held(frames: frames, peer: peer))
        case .unnumbered:
            refuse(
                .malformed, "\(header.kind) with sequence 0: only a heartbeat may be unnumbered", header: header,
                peer: peer)
        case .duplicate, .outOfOrder, .ledgerBehind:
            // A resend of something dealt with is acknowledged again; a gap or a sender ahead of the
            // durable ledger is reported with the batch's end (PROTOCOL.md §4.4).
            break
        }
        return .dealtWith
    }

    /// A held refusal, its source now known: refused if it is the next of its source.
    private func judge(_ refusal: Refusal, from peer: [UInt8]) {
        guard let source = refusal.source, let sequence = refusal.sequence else { return }
        switch intake.receive(source: source, sequence: sequence, topic: refusal.topic ?? "", peer: peer) {
        case .fresh: replier.refuse(refusal, to: peer)
        case .lookUp: hold(source, Held(frames: FrameBuffer(), peer: peer, refusal: refusal))
        case .duplicate, .outOfOrder, .ledgerBehind, .unnumbered: break
        }
    }

    /// Refuses a fresh message the daemon cannot apply; its sender hears it before the ack.
    package func refuse(_ reason: DiagnosticReason, _ detail: String, message: InboundMessage) {
        refuse(reason, detail, header: message.header, peer: message.peer)
    }

    private func refuse(_ reason: DiagnosticReason, _ detail: String, header: RoutedHeader, peer: [UInt8]) {
        replier.refuse(Refusal(reason, detail, endpoint: name, header: header), to: peer)
    }

    /// Notes a peer heard elsewhere (flowd hears reactor hosts' heartbeats on their `states`).
    package func heard(source: String, role: String, now: ContinuousClock.Instant) {
        intake.heard(source: source, role: role, now: now)
    }

    // MARK: Look-ups

    private func hold(_ source: String, _ message: Held) {
        let bytes = message.frames.byteCount
        guard heldCount < Self.maxHeld, heldBytes + bytes <= Self.maxHeldBytes else {
            counters.heldDropped += 1
            unreportedDrops += 1
            return
        }
        heldCount += 1
        heldBytes += bytes
        held[source, default: []].append(message)
    }

    /// Takes what is held for `source` out of the store.
    private func takeHeld(_ source: String) -> [Held] {
        let messages = held.removeValue(forKey: source) ?? []
        heldCount -= messages.count
        heldBytes -= messages.reduce(0) { $0 + $1.frames.byteCount }
        return messages
    }

    /// Drops what is held for `source`, unacknowledged: its sender resends it.
    private func dropHeld(_ source: String) -> Int {
        let dropped = takeHeld(source).count
        counters.heldDropped += dropped
        return dropped
    }

    /// The durable ledger's answers for the sources a batch end named (``Intake/BatchEnd/lookUps``):
    /// the messages held for each are read again, in order, before anything the socket holds. A
    /// failed look-up drops them unacknowledged (their senders resend them).
    package func lookedUp(_ answers: [LedgerAnswer]) {
        for answer in answers {
            guard lookingUp.removeValue(forKey: answer.source) != nil else { continue }
            switch answer.last {
            case .failure(let error):
                let dropped = dropHeld(answer.source)
                logger.error(
                    "cannot read source \(answer.source) from the durable ledger: \(error); its \(dropped) message(s) wait for a resend"
                )
                intake.lookUpFailed(answer.source)
            case .success(let last):
                intake.lookedUp(answer.source, last: last)
                replay += takeHeld(answer.source)
            }
        }
    }

    /// Fails the look-ups handed out longer than ``lookUpTimeout`` ago that got no answer.
    private func expireLookUps(now: ContinuousClock.Instant) {
        for (source, since) in lookingUp where now - since > Self.lookUpTimeout {
            lookingUp.removeValue(forKey: source)
            let dropped = dropHeld(source)
            logger.error(
                "no answer from the durable ledger about source \(source) within \(Self.lookUpTimeout); its \(dropped) message(s) wait for a resend"
            )
            intake.lookUpFailed(source)
        }
    }

    // MARK: Batch end

    /// Ends a batch: sends the `out-of-order` refusals and `journal-behind` reports (before the
    /// acks that cover what came before) and the heartbeat answers, and reports the peers found dead.
    /// - Returns: the intake's batch end: the acks to send with ``acknowledge(_:)`` once the batch
    ///   is durable, what was dealt with per source, and the sources to look up.
    /// - Parameter checksLiveness: Whether peers may be judged dead now: not in a turn that read no
    ///   data (the daemon suspended, or holding back a failed commit), whose heartbeats wait unread.
    package func endBatch(
        now: ContinuousClock.Instant, checkEvery: Duration, checksLiveness: Bool = true
    )
        -> Intake.BatchEnd
    {
        let end = intake.endBatch(now: now, checkEvery: checkEvery, checksLiveness: checksLiveness)
        for source in end.lookUps { lookingUp[source] = now }
        if !lookingUp.isEmpty { expireLookUps(now: now) }
        if unreportedDrops > 0 {
            logger.warning(
                "\(unreportedDrops) message(s) of sources being looked up in the durable ledger dropped, over \(Self.maxHeld) messages or \(Self.maxHeldBytes >> 20) MiB held: their senders resend them (\(counters.heldDropped) in all)"
            )
            unreportedDrops = 0
        }
        for (peer, refusal) in end.refusals { replier.refuse(refusal, to: peer) }
        for behind in end.ledgerBehind { reportBehind(behind) }
        for peer in end.heartbeatAnswers {
            replier.send(Heartbeat(envelope: replier.envelope(.heartbeat)), to: peer)
        }
        for dead in end.deadPeers { reportDead(dead) }
        if !end.moreDeadPeers.isEmpty { reportDead(end.moreDeadPeers) }
        return end
    }

    /// Sends the acks of a batch that is durable.
    package func acknowledge(_ acks: [Intake.Ack]) {
        for ack in acks {
            replier.send(
                Ack(
                    envelope: replier.envelope(.ack), acknowledgedSource: ack.source, acknowledgedSequence: ack.sequence
                ),
                to: ack.peer)
        }
    }

    /// Forgets idle sources and those beyond the limit (see ``Intake/forgetSources(now:keeping:)``).
    package func forgetSources(now: ContinuousClock.Instant, keeping isUnsaved: (String) -> Bool) {
        intake.forgetSources(now: now, keeping: isUnsaved)
    }

    /// A sender ahead of the durable ledger: refused to it every time, logged and published once
    /// per source; adopted ones are logged with the sequences lost and the total so far.
    private func reportBehind(_ behind: Intake.LedgerBehind) {
        if behind.isFirstReport {
            if behind.adopted {
                let counts = intake.counters
                logger.warning(
                    "journal-behind: adopted sequence \(behind.received) of \(behind.source) (the durable ledger had \(behind.ledgerLast)): \(behind.lost) sequence(s) lost; \(counts.lostSequences) lost over \(counts.adoptedSources) source(s) since start",
                    metadata: ["source": "\(behind.source)"])
            } else {
                logger.error(
                    "\(behind.refusal.reason): \(behind.refusal.detail)", metadata: ["source": "\(behind.source)"])
            }
        }
        // An adopted sender's messages are applied: it is told nothing, and nothing is refused.
        let count = behind.adopted ? 0 : Int(behind.refusal.extra["count"]?.intValue ?? 1)
        replier.refuse(
            behind.refusal, to: behind.adopted ? nil : behind.peer, count: count, publish: behind.isFirstReport,
            log: false)
    }

    /// A peer that sent heartbeats went silent.
    private func reportDead(_ dead: Intake.DeadPeer) {
        let milliseconds = Int64(dead.silentFor.wholeMilliseconds)
        let message = "\(dead.role) \(dead.source) sent nothing for \(milliseconds) ms (its heartbeats stopped)"
        logger.warning("peer-dead: \(message)")
        replier.publisher.publishDiagnostic(
            .peerDead, message,
            details: ["source": .string(dead.source), "silent_ms": .int(milliseconds), "role": .string(dead.role)])
    }

    /// Many peers went silent at one liveness check: one diagnostic, so that churn (thousands of
    /// vanishing connections) cannot flood the logs and the bus.
    private func reportDead(_ dead: [Intake.DeadPeer]) {
        var roles: WireParams = [:]
        for peer in dead { roles[peer.role] = .int((roles[peer.role]?.intValue ?? 0) + 1) }
        let message =
            "\(dead.count) more peers sent nothing for \(dead.map(\.silentFor).min() ?? .zero) or longer (their heartbeats stopped)"
        logger.warning("peer-dead: \(message)")
        replier.publisher.publishDiagnostic(
            .peerDead, message,
            details: [
                "count": .int(Int64(dead.count)), "roles": .map(roles),
                "sources": .list(dead.prefix(20).map { .string($0.source) }),
            ])
    }
}

/// The durable ledger's answer for one source: its last sequence there (nil: none), or why it
/// could not be read.
package struct LedgerAnswer: Sendable {
    package var source: String
    package var last: Result<UInt64?, any Error>

    package init(source: String, last: Result<UInt64?, any Error>) {
        self.source = source
        self.last = last
    }
}
