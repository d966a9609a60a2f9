import FlowBusWire
import Flows
import Foundation
import Logging
import Synchronization
import ZeroMQ

/// Something that arrived on the coordinator's ingress or control endpoint, decoded far enough
/// to be routed.
enum IngressItem: Sendable {
    /// A step from a stepper; `frames` are the message as received, for re-publishing.
    case step(stepperID: String, step: CanonicalStep, frames: FrameBuffer, origin: Origin)
    /// A deep link for every active flow.
    case deepLink(step: CanonicalStep, frames: FrameBuffer, origin: Origin)
    /// A renderer's report about a presentable.
    case report(presentableID: String, event: PresentableEvent, origin: Origin)
    /// A status request, to be answered to `routingID` on the control endpoint.
    case status(routingID: [UInt8])
    /// A refused message and why.
    case refused(Refusal)
    /// A peer that sends heartbeats went silent for the configured number of intervals.
    case peerDead(source: String, silentFor: Duration, role: String)
}

/// What flowd knows of a peer's liveness: a sender on ingress, or a reactor host it watches.
struct PeerLiveness: Sendable {
    var lastHeard: ContinuousClock.Instant
    /// Only peers that send heartbeats can be judged dead by their silence.
    var sendsHeartbeats = false
    var isDead = false
    /// What the peer is: `stepper` (a sender on ingress) or `reactor-host <name>`.
    var role = "stepper"
}

/// A reactor host's `states` endpoint flowd subscribes to for its heartbeats.
private struct WatchedHost {
    var name: String
    var endpoint: String
    var socket: Socket
}

/// Who sent an applied message: its (source, sequence), which the journal records.
struct Origin: Sendable, Hashable {
    var source: String
    var sequence: UInt64
}

/// What the ingress thread hands to the coordinator in one hop.
struct IngressBatch: Sendable {
    /// The items, in arrival order.
    var items: [IngressItem] = []
    /// The cumulative acks covering this batch, sent back (``IngressLoop/acknowledge(_:)``) only
    /// once the batch is applied and, with a journal, committed.
    var acks: [AckBatch.Pending] = []
    /// The highest sequence dealt with (accepted or refused) per source in this batch.
    var dealtWith: [String: UInt64] = [:]
    /// When the ingress thread started reading the oldest of these items (for the latency metric).
    var receivedAt: ContinuousClock.Instant?

    var isEmpty: Bool { items.isEmpty && acks.isEmpty }

    /// Adds a later batch to this one: its items after these, its acks and sequences over these.
    mutating func absorb(_ later: IngressBatch) {
        if items.isEmpty { receivedAt = later.receivedAt }
        items += later.items
        for ack in later.acks {
            if let index = acks.firstIndex(where: { $0.source == ack.source }) {
                if ack.sequence > acks[index].sequence { acks[index] = ack }
            } else {
                acks.append(ack)
            }
        }
        dealtWith.merge(later.dealtWith) { max($0, $1) }
    }
}

/// A message the coordinator refused, with what is known of it.
struct Refusal: Sendable {
    var reason: DiagnosticReason
    var detail: String
    var source: String?
    var topic: String?
    var sequence: UInt64?
    var endpoint: String
}

/// A multipart message from a ROUTER: the peer's routing id, then the FlowBus frames.
struct RoutedFrames: ReceiveBuffer {
    var routingID: [UInt8] = []
    var frames = FrameBuffer()
    private var sawRoutingID = false

    mutating func removeAllFrames() {
        routingID.removeAll(keepingCapacity: true)
        frames.removeAll(keepingCapacity: true)
        sawRoutingID = false
    }

    mutating func appendFrame(_ bytes: UnsafeRawBufferPointer) {
        if sawRoutingID {
            frames.append(frame: bytes)
        } else {
            routingID.append(contentsOf: bytes)
            sawRoutingID = true
        }
    }
}

/// The thread that owns the coordinator's ROUTER sockets (ingress and control).
///
/// It drains sockets in batches, decodes what routing needs, de-duplicates by (source,
/// sequence) and hands each batch to the coordinator in one hop. Replies produced elsewhere
/// come back through its outbox: status replies (``send(control:to:)``) and the acks of a batch
/// once the coordinator applied and committed it (``acknowledge(_:)``).
///
/// A source's messages are applied in sequence order with no gap: a message whose sequence is
/// not the next one expected is dropped unacknowledged (the sender resends it, see
/// ``StepPublisher``), and the last sequence dealt with is acknowledged again, which tells a
/// sender that a restarted flowd lost what it had in flight.
final class IngressLoop: Sendable {
    struct Counters: Sendable {
        var received = 0
        var accepted = 0
        var duplicates = 0
        /// Messages dropped because an earlier sequence of their source is missing (resent later).
        var outOfOrder = 0
        var refused: [DiagnosticReason: Int] = [:]

        mutating func add(_ other: Counters) {
            received += other.received
            accepted += other.accepted
            duplicates += other.duplicates
            outOfOrder += other.outOfOrder
            refused.merge(other.refused, uniquingKeysWith: +)
        }
    }

    private let context: Context
    private let endpoints: FlowBusConfig.Endpoints
    private let limits: FlowBusConfig.Limits
    private let logger: Logger
    private let wake = WakeSignal()
    private let stopping = Atomic<Bool>(false)
    private let accepting = Atomic<Bool>(true)
    private let pendingBatches = Atomic<Int>(0)
    private let outbox = Mutex<[(routingID: [UInt8], message: FrameBuffer)]>([])
    private let ackOutbox = Mutex<[[AckBatch.Pending]]>([])
    /// Items produced off the loop (e.g. the ZAP handler's refusals), handed over with the next batch.
    private let injected = Mutex<[IngressItem]>([])
    private let counterStore = Mutex(Counters())
    private let finished = DispatchSemaphore(value: 0)
    private let continuation: AsyncStream<IngressBatch>.Continuation
    /// Batches of routed items, in arrival order; finished once the loop stops accepting.
    let batches: AsyncStream<IngressBatch>
    private let sourceID: String
    /// The last sequence dealt with per source when the loop starts (restored from a journal).
    private let restoredSequences: [String: UInt64]
    /// Whether a source flowd has never seen must start at sequence 1 (with a journal, flowd
    /// remembers every source, so a later first sequence means earlier ones were lost).
    private let requiresFirstSequence: Bool

    /// How long acks and replies still queued at shutdown may take to leave, in milliseconds.
    static let shutdownLinger: Int32 = 1000

    /// Batches handed over but not yet processed before the loop stops reading (back-pressure).
    /// Items held for the coordinator before the loop stops reading (back-pressure).
    static let maxBatchSize = 512
    /// Control requests taken into one batch before its steps.
    static let maxControlPerBatch = 16

    private let curve: CurveKeys
    /// The configured limits, checked by the decoders: a frame over them is refused as `oversize`.
    private let wireLimits: WireLimits

    /// libzmq's own limit, above the configured one: a frame between the two reaches FlowBus and is
    /// refused with an `oversize` diagnostic; only a larger one is cut off (the peer disconnected)
    /// before it is allocated.
    static func hardCeiling(_ limits: FlowBusConfig.Limits) -> Int64 {
        Int64(limits.maxMessageBytes) * 4
    }
    /// Silence after which a peer that sends heartbeats is reported dead.
    private let deadAfter: Duration
    private let heartbeatInterval: Duration
    private let livenessStore = Mutex<[String: PeerLiveness]>([:])
    /// A dead peer is forgotten after this much silence, so restarts do not grow the table.
    static let forgetDeadPeersAfter: Duration = .seconds(3600)
    private let reactorHosts: [(name: String, states: String)]

    /// The peers heard on ingress, by source id.
    var liveness: [String: PeerLiveness] { livenessStore.withLock { $0 } }

    init(
        context: Context, config: FlowBusConfig, sourceID: String, logger: Logger,
        restoredSequences: [String: UInt64] = [:], requiresFirstSequence: Bool = false
    ) {
        self.restoredSequences = restoredSequences
        self.requiresFirstSequence = requiresFirstSequence
        self.context = context
        self.endpoints = config.endpoints
        self.limits = config.limits
        self.curve = config.curve
        wireLimits = WireLimits(maxFrameBytes: config.limits.maxMessageBytes)
        heartbeatInterval = .milliseconds(config.heartbeatMilliseconds)
        deadAfter = .milliseconds(config.heartbeatMilliseconds * max(1, config.heartbeatLiveness))
        reactorHosts = config.reactors.sorted { $0.key < $1.key }.map { ($0.key, $0.value.states) }
        self.sourceID = sourceID
        self.logger = logger
        (batches, continuation) = AsyncStream.makeStream(of: IngressBatch.self)
    }

    var counters: Counters { counterStore.withLock { $0 } }

    /// Binds the endpoints and starts the thread; throws if an endpoint cannot be bound.
    func start() throws {
        let bound = DispatchSemaphore(value: 0)
        let failure = Mutex<(any Error)?>(nil)
        let thread = Thread { [self] in
            defer {
                continuation.finish()
                finished.signal()
            }
            let ingress: Socket
            let control: Socket
            var watched: [WatchedHost] = []
            do {
                ingress = try context.socket(.router)
                try ingress.setOptions([
                    .maxMessageSize(Self.hardCeiling(limits)),
                    .receiveHighWaterMark(Int32(clamping: limits.highWaterMark)),
                    .sendHighWaterMark(Int32(clamping: limits.highWaterMark)),
                    .linger(0),
                ])
                try curve.secureServer(ingress, endpoint: endpoints.ingress)
                try ingress.bind(endpoints.ingress)
                restrictPermissions(ofIPCEndpoint: endpoints.ingress)
                control = try context.socket(.router)
                try control.setOptions([.maxMessageSize(Self.hardCeiling(limits)), .linger(0)])
                try curve.secureServer(control, endpoint: endpoints.control)
                try control.bind(endpoints.control)
                restrictPermissions(ofIPCEndpoint: endpoints.control)
                // Reactor hosts publish heartbeats on `states`: flowd judges them dead by silence.
                for host in reactorHosts {
                    let socket = try context.socket(.sub)
                    try socket.setOptions([.subscribe(Topic.Prefix.heartbeat.subscription), .reconnectInterval(100), .reconnectIntervalMax(2000), .linger(0)])
                    try curve.secureClient(socket, endpoint: host.states)
                    try socket.connect(host.states)
                    watched.append(WatchedHost(name: host.name, endpoint: host.states, socket: socket))
                }
            } catch {
                failure.withLock { $0 = error }
                bound.signal()
                return
            }
            bound.signal()
            run(ingress: ingress, control: control, watched: watched)
        }
        thread.name = "flowd-ingress"
        thread.start()
        bound.wait()
        if let error = failure.withLock({ $0 }) { throw error }
    }

    /// Stops reading the endpoints and finishes ``batches`` after the batches already handed
    /// over; the thread keeps sending acks and replies until ``stop()``.
    func stopAccepting() {
        if accepting.exchange(false, ordering: .acquiringAndReleasing) {
            wake.signal()
        }
    }

    /// Sends the queued acks and replies, stops the thread and waits for it.
    func stop() {
        stopAccepting()
        if !stopping.exchange(true, ordering: .acquiringAndReleasing) {
            wake.signal()
            finished.wait()
        }
    }

    /// Called by the consumer after each batch: lets the loop read again.
    func batchProcessed() {
        if pendingBatches.subtract(1, ordering: .acquiringAndReleasing).newValue == 0 {
            wake.signal()
        }
    }

    /// Hands `item` to the coordinator with the next batch.
    func inject(_ item: IngressItem) {
        if case .refused(let refusal) = item {
            counterStore.withLock { $0.refused[refusal.reason, default: 0] += 1 }
        }
        injected.withLock { $0.append(item) }
        wake.signal()
    }

    /// Queues the acks of a batch the coordinator applied (and committed).
    func acknowledge(_ acks: [AckBatch.Pending]) {
        guard !acks.isEmpty else { return }
        ackOutbox.withLock { $0.append(acks) }
        wake.signal()
    }

    /// Queues a reply for a peer of the control endpoint.
    func send(control message: FrameBuffer, to routingID: [UInt8]) {
        outbox.withLock { $0.append((routingID, message)) }
        wake.signal()
    }

    private func run(ingress: Socket, control: Socket, watched: [WatchedHost]) {
        let poller = Poller()
        do {
            try poller.add(ingress)
            try poller.add(control)
            for host in watched { try poller.add(host.socket) }
        } catch {
            logger.error("cannot poll ingress sockets: \(error)")
            return
        }
        let wakeIndex = poller.add(fileDescriptor: wake.fileDescriptor)
        var received = RoutedFrames()
        var deduplicator = Deduplicator(restoring: restoredSequences, requiresFirstSequence: requiresFirstSequence)
        var acks = AckBatch()
        var ownSequence: UInt64 = 0
        var ackBuffer = FrameBuffer()
        var finishedBatches = false
        defer {
            // The last acks and replies still go out, within a bounded linger.
            sendReplies(on: control)
            sendAcks(on: ingress, ownSequence: &ownSequence, buffer: &ackBuffer)
            try? ingress.setOption(.linger(Self.shutdownLinger))
            try? control.setOption(.linger(Self.shutdownLinger))
            if !finishedBatches { continuation.finish() }
        }

        // One batch is with the coordinator at a time; what arrives meanwhile is held and handed
        // over in one hop when it is done, so a busy coordinator gets bigger batches, not more hops.
        var held = IngressBatch()
        var peers: [String: PeerLiveness] = [:]
        var lastLivenessCheck = ContinuousClock.now
        var heartbeatBuffer = FrameBuffer()
        func noteHeard(_ source: String, heartbeat: Bool, role: String?, at now: ContinuousClock.Instant) {
            peers[source, default: PeerLiveness(lastHeard: now)].lastHeard = now
            if heartbeat { peers[source]?.sendsHeartbeats = true }
            if let role { peers[source]?.role = role }
            if peers[source]?.isDead == true {
                peers[source]?.isDead = false
                logger.notice("peer \(source) is heard again")
            }
        }
        func handOver(evenIfBusy: Bool = false) {
            guard !held.isEmpty, evenIfBusy || pendingBatches.load(ordering: .acquiring) == 0 else { return }
            pendingBatches.add(1, ordering: .acquiringAndReleasing)
            continuation.yield(held)
            held = IngressBatch()
        }

        while !stopping.load(ordering: .acquiring) {
            let isAccepting = accepting.load(ordering: .acquiring)
            if !isAccepting && !finishedBatches {
                // What was received is still applied, committed and acknowledged.
                handOver(evenIfBusy: true)
                continuation.finish()
                finishedBatches = true
            }
            handOver()
            let saturated = !isAccepting || held.items.count >= Self.maxBatchSize
            poller.setEvents(saturated ? [] : .readable, at: 0)
            poller.setEvents(saturated ? [] : .readable, at: 1)
            do {
                // Woken at least once per heartbeat interval, to judge silent peers.
                try poller.poll(timeout: min(1000, heartbeatInterval.wholeMilliseconds))
            } catch {
                if !error.isContextTerminated { logger.error("ingress poll failed: \(error)") }
                return
            }
            if poller.isReadable(wakeIndex) {
                wake.clear()
                sendReplies(on: control)
                sendAcks(on: ingress, ownSequence: &ownSequence, buffer: &ackBuffer)
            }
            // Read even while saturated: a busy flowd must not judge a live reactor host dead.
            for host in watched {
                while (try? host.socket.receive(into: &heartbeatBuffer, mode: .nonBlocking)) == true {
                    let message: WireMessage
                    do {
                        message = try WireMessage.decode(from: heartbeatBuffer)
                    } catch {
                        logger.warning("reactor host \(host.name) on \(host.endpoint) sent a malformed heartbeat: \(error.reason): \(error.detail)")
                        continue
                    }
                    guard case .heartbeat(let heartbeat) = message else { continue }
                    noteHeard(heartbeat.envelope.source, heartbeat: true, role: "reactor-host \(host.name)", at: .now)
                }
            }
            handOver()
            if saturated { continue }

            var batch = IngressBatch(receivedAt: .now)
            batch.items = injected.withLock { items in
                defer { items.removeAll() }
                return items
            }
            var tally = Counters()
            var gaps: [String: Gap] = [:]
            var heard: [String: Bool] = [:]
            var heartbeatsToAnswer: [[UInt8]] = []
            defer { if tally.received > 0 || !tally.refused.isEmpty { counterStore.withLock { $0.add(tally) } } }
            do {
                // Control first: under a steady flood of steps the ingress socket alone would fill
                // every batch and starve status queries.
                while batch.items.count < Self.maxControlPerBatch, try control.receive(into: &received, mode: .nonBlocking) {
                    batch.items.append(routeControl(received, tally: &tally))
                }
                while held.items.count + batch.items.count < Self.maxBatchSize, try ingress.receive(into: &received, mode: .nonBlocking) {
                    guard let item = route(received, deduplicator: &deduplicator, acks: &acks, dealtWith: &batch.dealtWith, gaps: &gaps, heard: &heard, heartbeatsToAnswer: &heartbeatsToAnswer, tally: &tally) else { continue }
                    if case .refused(let refusal) = item {
                        // The sender hears of its refusal before the ack that covers it (PROTOCOL 3.3).
                        ownSequence += 1
                        tell(received.routingID, refusal, sequence: ownSequence, on: ingress, buffer: &ackBuffer)
                    }
                    batch.items.append(item)
                }
                while held.items.count + batch.items.count < Self.maxBatchSize, try control.receive(into: &received, mode: .nonBlocking) {
                    batch.items.append(routeControl(received, tally: &tally))
                }
            } catch {
                if !error.isContextTerminated { logger.error("ingress receive failed: \(error)") }
                return
            }
            // One report per source that skipped ahead, not one per message: after a restart a
            // whole queue can arrive past a lost message.
            for (source, gap) in gaps.sorted(by: { $0.key < $1.key }) {
                let refusal = Refusal(
                    reason: .outOfOrder,
                    detail: "\(gap.count) message(s) of \(source) skipped ahead of sequence \(gap.expected) (first \(gap.first)): not applied; resend from \(gap.expected)",
                    source: source, topic: gap.topic, sequence: gap.expected, endpoint: "ingress")
                ownSequence += 1
                tell(gap.routingID, refusal, sequence: ownSequence, on: ingress, buffer: &ackBuffer)
                batch.items.append(refuse(refusal, tally: &tally))
            }
            batch.acks = acks.drain()
            // Heartbeats are answered, so that steppers can tell a dead flowd too.
            for routingID in heartbeatsToAnswer {
                ownSequence += 1
                answerHeartbeat(routingID, sequence: ownSequence, on: ingress, buffer: &ackBuffer)
            }
            let now = ContinuousClock.now
            for (source, wasHeartbeat) in heard {
                noteHeard(source, heartbeat: wasHeartbeat, role: nil, at: now)
            }
            if now - lastLivenessCheck >= heartbeatInterval {
                lastLivenessCheck = now
                for (source, peer) in peers where peer.sendsHeartbeats && !peer.isDead && now - peer.lastHeard > deadAfter {
                    peers[source]?.isDead = true
                    logger.warning("peer \(source) (\(peer.role)) sent nothing for \(now - peer.lastHeard): dead")
                    batch.items.append(.peerDead(source: source, silentFor: now - peer.lastHeard, role: peer.role))
                }
                peers = peers.filter { !$0.value.isDead || now - $0.value.lastHeard < Self.forgetDeadPeersAfter }
                livenessStore.withLock { $0 = peers }
            }
            // The coordinator sends the acks back once it applied (and committed) the batch.
            held.absorb(batch)
            handOver()
        }
    }

    private func sendAcks(on ingress: Socket, ownSequence: inout UInt64, buffer: inout FrameBuffer) {
        let batches = ackOutbox.withLock { pending -> [[AckBatch.Pending]] in
            defer { pending.removeAll() }
            return pending
        }
        for ack in batches.joined() {
            ownSequence += 1
            let message = Ack(
                envelope: Envelope(kind: .ack, sequence: ownSequence, source: sourceID),
                acknowledgedSource: ack.source, acknowledgedSequence: ack.sequence)
            do {
                try message.encode(into: &buffer)
                try ingress.send(ack.routingID, more: true, mode: .nonBlocking)
                try ingress.send(message: buffer, mode: .nonBlocking)
            } catch {
                logger.debug("ack to \(ack.source) not sent: \(error)")
            }
        }
    }

    private func answerHeartbeat(_ routingID: [UInt8], sequence: UInt64, on socket: Socket, buffer: inout FrameBuffer) {
        do {
            try Heartbeat(envelope: Envelope(kind: .heartbeat, sequence: sequence, source: sourceID)).encode(into: &buffer)
            try socket.send(routingID, more: true, mode: .nonBlocking)
            try socket.send(message: buffer, mode: .nonBlocking)
        } catch {
            logger.debug("heartbeat answer not sent: \(error)")
        }
    }

    private func tell(_ routingID: [UInt8], _ refusal: Refusal, sequence: UInt64, on socket: Socket, buffer: inout FrameBuffer) {
        var details: WireParams = ["endpoint": .string(refusal.endpoint)]
        if let source = refusal.source { details["source"] = .string(source) }
        if let topic = refusal.topic { details["topic"] = .string(topic) }
        if let sequence = refusal.sequence { details["sequence"] = .int(Int64(clamping: sequence)) }
        let diagnostic = DiagnosticMessage(
            envelope: Envelope(kind: .diagnostic, contentType: .fbv, sequence: sequence, source: sourceID),
            reason: refusal.reason, message: refusal.detail, details: details)
        do {
            try diagnostic.encode(into: &buffer)
            try socket.send(routingID, more: true, mode: .nonBlocking)
            try socket.send(message: buffer, mode: .nonBlocking)
        } catch {
            logger.debug("refusal not sent back to its sender: \(error)")
        }
    }

    private func sendReplies(on control: Socket) {
        let replies = outbox.withLock { pending -> [(routingID: [UInt8], message: FrameBuffer)] in
            defer { pending.removeAll() }
            return pending
        }
        for reply in replies {
            do {
                try control.send(reply.routingID, more: true)
                try control.send(message: reply.message)
            } catch {
                logger.warning("status reply not sent: \(error)")
            }
        }
    }

    private func refuse(_ refusal: Refusal, tally: inout Counters) -> IngressItem {
        tally.refused[refusal.reason, default: 0] += 1
        return .refused(refusal)
    }

    private func route(
        _ received: RoutedFrames, deduplicator: inout Deduplicator, acks: inout AckBatch, dealtWith: inout [String: UInt64],
        gaps: inout [String: Gap], heard: inout [String: Bool], heartbeatsToAnswer: inout [[UInt8]], tally: inout Counters
    ) -> IngressItem? {
        tally.received += 1
        let frames = received.frames
        let header: RoutedHeader
        do {
            header = try RoutedHeader.decode(from: frames, limits: wireLimits)
        } catch {
            return refuse(Refusal(reason: error.reason, detail: error.detail, endpoint: "ingress"), tally: &tally)
        }
        let envelope = header.envelope
        if header.kind == .heartbeat {
            // Heartbeats prove a peer alive; they are not numbered, acknowledged or applied.
            heard[envelope.source] = true
            heartbeatsToAnswer.append(received.routingID)
            return nil
        }
        heard[envelope.source] = heard[envelope.source] ?? false
        switch deduplicator.check(source: envelope.source, sequence: envelope.sequence) {
        case .duplicate:
            // A resend of something dealt with: acknowledged again, counted, not applied. Resends
            // are routine (a sender cannot tell a lost ack from a lost step), so no diagnostic.
            tally.duplicates += 1
            acks.record(routingID: received.routingID, source: envelope.source, sequence: envelope.sequence)
            return nil
        case .gap(let last):
            // An earlier sequence is missing (lost with a crashed flowd or a broken connection):
            // not applied, not acknowledged; repeating the last ack tells the sender to resend.
            tally.outOfOrder += 1
            acks.record(routingID: received.routingID, source: envelope.source, sequence: last)
            gaps[envelope.source, default: Gap(routingID: received.routingID, topic: header.topic, expected: last + 1, first: envelope.sequence)].count += 1
            return nil
        case .fresh:
            acks.record(routingID: received.routingID, source: envelope.source, sequence: envelope.sequence)
            dealtWith[envelope.source] = envelope.sequence
        }
        let origin = Origin(source: envelope.source, sequence: envelope.sequence)
        do {
            switch header.kind {
            case .step, .deepLink:
                let view = try NamedMessageView.decode(from: frames, header: header, limits: wireLimits)
                let step = CanonicalStep(view.name, try view.params.decodeParams())
                tally.accepted += 1
                if header.kind == .step {
                    return .step(stepperID: String(header.topicID), step: step, frames: frames, origin: origin)
                }
                return .deepLink(step: step, frames: frames, origin: origin)
            case .presentableReport:
                guard case .presentableReport(let report) = try WireMessage.decode(from: frames) else { return nil }
                tally.accepted += 1
                return .report(presentableID: report.presentableID, event: report.event, origin: origin)
            default:
                return refuse(Refusal(
                    reason: .unknownKind, detail: "flowd's ingress accepts step, deepLink, presentableReport and heartbeat, not \(header.kind)",
                    source: envelope.source, topic: header.topic, sequence: envelope.sequence, endpoint: "ingress"), tally: &tally)
            }
        } catch {
            return refuse(Refusal(
                reason: error.reason, detail: error.detail, source: envelope.source, topic: header.topic,
                sequence: envelope.sequence, endpoint: "ingress"), tally: &tally)
        }
    }

    private func routeControl(_ received: RoutedFrames, tally: inout Counters) -> IngressItem {
        do {
            let header = try RoutedHeader.decode(from: received.frames, limits: wireLimits)
            guard header.kind == .statusRequest else {
                return refuse(Refusal(
                    reason: .unknownKind, detail: "flowd's control endpoint answers statusRequest only, not \(header.kind)",
                    source: header.envelope.source, topic: header.topic, sequence: header.envelope.sequence, endpoint: "control"), tally: &tally)
            }
            return .status(routingID: received.routingID)
        } catch {
            return refuse(Refusal(reason: error.reason, detail: error.detail, endpoint: "control"), tally: &tally)
        }
    }
}

/// Messages of one source that skipped ahead in one batch.
struct Gap {
    var routingID: [UInt8]
    var topic: String
    var expected: UInt64
    var first: UInt64
    var count = 0
}

/// Remembers the last sequence dealt with per source, so that a source's messages are applied
/// once each, in order, with no gap.
struct Deduplicator {
    enum Verdict: Equatable {
        /// The next sequence of its source (or the first seen of a new source): apply it.
        case fresh
        /// Already dealt with.
        case duplicate(last: UInt64)
        /// A sequence after `last + 1`: earlier ones are missing.
        case gap(last: UInt64)
    }

    private var lastSequence: [String: UInt64]
    /// Whether a new source must start at 1 (see ``IngressLoop``).
    private let requiresFirstSequence: Bool

    init(restoring lastSequence: [String: UInt64] = [:], requiresFirstSequence: Bool = false) {
        self.lastSequence = lastSequence
        self.requiresFirstSequence = requiresFirstSequence
    }

    mutating func check(source: String, sequence: UInt64) -> Verdict {
        if let last = lastSequence[source] {
            if sequence <= last { return .duplicate(last: last) }
            if sequence != last + 1 { return .gap(last: last) }
        } else if requiresFirstSequence && sequence != 1 {
            return .gap(last: 0)
        }
        lastSequence[source] = sequence
        return .fresh
    }
}

/// The highest sequence seen per (peer, source) in one batch: one cumulative ack each.
struct AckBatch {
    struct Pending { var routingID: [UInt8]; var source: String; var sequence: UInt64 }
    private var pending: [String: Pending] = [:]

    mutating func record(routingID: [UInt8], source: String, sequence: UInt64) {
        if let existing = pending[source], existing.sequence >= sequence { return }
        pending[source] = Pending(routingID: routingID, source: source, sequence: sequence)
    }

    mutating func drain() -> [Pending] {
        defer { pending.removeAll(keepingCapacity: true) }
        return Array(pending.values)
    }
}
