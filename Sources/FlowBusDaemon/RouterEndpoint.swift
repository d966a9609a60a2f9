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
/// held here, a copy of its frames, until ``lookedUp(_:)`` brings the answer; it is then judged
/// again, in order. ``endBatch(now:checkEvery:)`` sends the batch's refusals, `journal-behind`
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
        /// Messages dropped while their source was looked up, past ``maxHeld``: their senders resend them.
        package var heldDropped = 0
    }

    /// Messages held at most while their sources are looked up.
    package static let maxHeld = 10_000

    package let replier: RouterReplier
    package private(set) var intake: Intake
    package private(set) var counters = Counters()
    private let limits: WireLimits
    private let logger: Logger
    private var received = RoutedFrames()
    private var held: [String: [Held]] = [:]
    private var heldCount = 0
    /// Held messages judged fresh once their source was looked up, waiting for ``read()``.
    private var ready: [InboundMessage] = []
    private var readyHead = 0

    private struct Held {
        var frames: FrameBuffer
        var peer: [UInt8]
        /// A message whose header did not decode: refused once judged fresh.
        var refusal: Refusal?
        var isHeartbeat = false
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

    /// Reads the next message and deals with what the intake says of it.
    package func read() throws(ZMQError) -> Read {
        if readyHead < ready.count {
            let message = ready[readyHead]
            readyHead += 1
            if readyHead == ready.count {
                ready.removeAll(keepingCapacity: true)
                readyHead = 0
            }
            return .fresh(message)
        }
        guard try replier.transport.receive(into: &received) else { return .none }
        counters.received += 1
        let peer = received.routingID
        let header: RoutedHeader
        do {
            header = try RoutedHeader.decode(from: received.frames, limits: limits)
        } catch {
            let (refusal, verdict) = intake.refuse(error, frames: received.frames, peer: peer, limits: limits)
            switch verdict {
            case nil, .fresh?:
                replier.refuse(refusal, to: peer)
            case .lookUp?:
                hold(refusal.source ?? "", Held(frames: received.frames, peer: peer, refusal: refusal))
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
            if verdict == .lookUp {
                hold(envelope.source, Held(frames: received.frames, peer: peer, isHeartbeat: true))
            }
            return .dealtWith
        }
        switch intake.receive(source: envelope.source, sequence: envelope.sequence, topic: header.topic, peer: peer) {
        case .fresh:
            return .fresh(InboundMessage(header: header, frames: received.frames, peer: peer))
        case .lookUp:
            hold(envelope.source, Held(frames: received.frames, peer: peer))
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
        guard heldCount < Self.maxHeld else {
            counters.heldDropped += 1
            return
        }
        heldCount += 1
        held[source, default: []].append(message)
    }

    /// The durable ledger's answers for the sources a batch end named (``Intake/BatchEnd/lookUps``):
    /// the messages held for each are judged again, in order; fresh ones come out of ``read()``
    /// before anything the socket holds. A failed look-up drops them unacknowledged (resent later).
    package func lookedUp(_ answers: [LedgerAnswer]) {
        for answer in answers {
            let messages = held.removeValue(forKey: answer.source) ?? []
            heldCount -= messages.count
            switch answer.last {
            case .failure(let error):
                logger.error(
                    "cannot read source \(answer.source) from the durable ledger: \(error); its \(messages.count) message(s) wait for a resend"
                )
                intake.lookUpFailed(answer.source)
            case .success(let last):
                intake.lookedUp(answer.source, last: last)
                for message in messages { judgeAgain(message, source: answer.source) }
            }
        }
    }

    private func judgeAgain(_ message: Held, source: String) {
        if let refusal = message.refusal {
            guard let sequence = refusal.sequence else { return }
            let verdict = intake.receive(
                source: source, sequence: sequence, topic: refusal.topic ?? "", peer: message.peer)
            if verdict == .fresh { replier.refuse(refusal, to: message.peer) }
            return
        }
        // It decoded when it arrived; the same bytes decode again.
        guard let header = try? RoutedHeader.decode(from: message.frames, limits: limits) else { return }
        let verdict = intake.receive(
            source: source, sequence: header.envelope.sequence, topic: header.topic, peer: message.peer)
        guard verdict == .fresh, !message.isHeartbeat else { return }
        ready.append(InboundMessage(header: header, frames: message.frames, peer: message.peer))
    }

    // MARK: Batch end

    /// Ends a batch: sends the `out-of-order` refusals and `journal-behind` reports (before the
    /// acks that cover what came before) and the heartbeat answers, and reports the peers found dead.
    /// - Returns: the intake's batch end: the acks to send with ``acknowledge(_:)`` once the batch
    ///   is durable, what was dealt with per source, and the sources to look up.
    package func endBatch(now: ContinuousClock.Instant, checkEvery: Duration) -> Intake.BatchEnd {
        let end = intake.endBatch(now: now, checkEvery: checkEvery)
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
