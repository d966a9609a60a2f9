import FlowBusProtocol
import FlowBusWire
import Foundation
import ZeroMQ

/// A ``BusSubscriber``'s resumption of flowd's events (PROTOCOL.md §4.6): its DEALER on
/// flowd's `control`, which asks for the events after the subscriber's position, and the
/// ``EventResume`` rules deciding what of the live stream to deliver.
final class EventCatchUp {
    private(set) var machine: EventResume
    let dealer: Socket
    private let topics: [String]
    private var sequence: UInt64 = 0
    private let source = Envelope.newSourceID(for: "resume")
    /// Live messages held while a replay comes.
    private var held: [Caught] = []
    /// What is ready to deliver, in order, with the event sequence of each one that has one.
    private var ready: [(caught: Caught, event: UInt64?)] = []
    private var readyIndex = 0
    /// The event sequence of the last message taken (or the position it started from).
    private(set) var delivered: UInt64
    /// When the catch-up's request and the request for dropped events went out, while unanswered:
    /// both may be out at once, and each is resent on its own.
    private var catchUpAskedAt: ContinuousClock.Instant?
    private var fillAskedAt: ContinuousClock.Instant?
    private var buffer = FrameBuffer()
    /// How long an unanswered request waits before it is sent again (to an instance that is gone).
    static let requestTimeout = Duration.seconds(2)

    init(
        context: Context, control endpoints: [String], topics: [String], since: UInt64?, curve: CurveKeys,
        heartbeatMilliseconds: Int
    ) throws {
        machine = EventResume(since: since)
        delivered = since ?? 0
        self.topics = topics.filter { !$0.isEmpty }
        dealer = try context.socket(.dealer)
        try dealer.setOptions([.linger(0), .sendHighWaterMark(16)])
        _ = try dealer.connect(toFlowdInstances: endpoints, curve: curve, heartbeatMilliseconds: heartbeatMilliseconds)
    }

    /// A message on its way to the subscriber's caller, with its frames as flowd published them
    /// when the subscriber keeps frames.
    struct Caught {
        var message: WireMessage
        var frames: FrameBuffer?
    }

    /// Takes a message of the SUB. Heartbeats and malformed messages are the caller's.
    func received(_ message: WireMessage, frames: FrameBuffer? = nil) throws {
        let envelope = message.envelope
        if case .heartbeat = message {
            let wasWaiting = machine.phase == .awaitingHeartbeat
            if let since = machine.heartbeat(source: envelope.source, sequence: envelope.sequence) {
                try request(since: since)
            } else if wasWaiting, machine.phase == .live {
                // Started at this heartbeat: no replay, what came before it is judged now.
                delivered = machine.position
                judgeHeld()
            }
            return
        }
        if case .diagnostic(let diagnostic) = message, diagnostic.reason == .droppedHWM, envelope.sequence == 0 {
            // The events nobody received: asked for by their sequences.
            let ranges: [ClosedRange<UInt64>] =
                diagnostic.details["events"]?.listValue?.compactMap { pair in
                    guard let bounds = pair.listValue, bounds.count == 2, let first = bounds[0].intValue,
                        let last = bounds[1].intValue, first >= 1, last >= first
                    else { return nil }
                    return UInt64(first)...UInt64(last)
                } ?? []
            let complete = diagnostic.details["events_complete"]?.boolValue ?? true
            if let fill = machine.dropped(ranges, complete: complete) { try request(fill) }
            // Subscribed to for this alone when the topics leave it out.
            guard topics.isEmpty || topics.contains(where: { message.topic.hasPrefix($0) }) else { return }
        }
        let caught = Caught(message: message, frames: frames)
        switch machine.live(kind: message.kind, source: envelope.source, sequence: envelope.sequence) {
        case .deliver: ready.append((caught, Self.eventSequence(of: message)))
        case .drop: break
        case .hold: held.append(caught)
        case .holdAndRequest(let since):
            held.append(caught)
            try request(since: since)
        }
    }

    /// The publisher was silent, or came back: what it sent meanwhile may be missed.
    func mayHaveMissed() throws {
        if let since = machine.mayHaveMissed() { try request(since: since) }
    }

    /// The SUB connected to a publisher again (a new instance, or the same one after a break).
    func reconnected() throws {
        if let since = machine.reconnected() { try request(since: since) }
    }

    /// Reads what the DEALER holds; returns a fallback when flowd answered that the events asked
    /// for are gone.
    func readReplies() throws -> EventFallback? {
        var fallback: EventFallback?
        while try dealer.receive(into: &buffer, mode: .nonBlocking) {
            switch try? WireMessage.decode(from: buffer) {
            case .replay(let reply)?:
                let wasCatchingUp = reply.until == nil
                let outcome = machine.replayed(reply)
                guard outcome.answered else { continue }
                if wasCatchingUp { catchUpAskedAt = nil } else { fillAskedAt = nil }
                for (event, frames) in outcome.deliver {
                    // A dropped event comes late: it does not move the position.
                    if let message = try? WireMessage.decode(from: frames) {
                        ready.append((Caught(message: message, frames: frames), wasCatchingUp ? event : nil))
                    }
                }
                if let fill = outcome.fill { try request(fill) }
                if let since = outcome.requestSince {
                    try request(since: since)
                } else if wasCatchingUp {
                    judgeHeld()
                }
            case .diagnostic(let refusal)? where refusal.reason == .rateLimited:
                // What is out is asked again at the timeout: the refusal may be about either.
                let retry =
                    ContinuousClock.now - Self.requestTimeout
                    + .milliseconds(refusal.details["retry_after_ms"]?.intValue ?? 100)
                if catchUpAskedAt != nil { catchUpAskedAt = retry }
                if fillAskedAt != nil { fillAskedAt = retry }
            case .diagnostic(let refusal)? where refusal.details["until"] != nil:
                let since = UInt64(max(0, refusal.details["since"]?.intValue ?? 0))
                let until = UInt64(max(0, refusal.details["until"]?.intValue ?? 0))
                guard machine.answersFill(since: since, until: until) else { continue }
                fillAskedAt = nil
                fallback = EventFallback(
                    since: since, oldest: 0, head: until,
                    reason: "events dropped at flowd's high-water mark are no longer kept: \(refusal.message)")
                if let fill = machine.fillGone() { try request(fill) }
            case .diagnostic(let refusal)?:
                catchUpAskedAt = nil
                let since = machine.position
                let head = refusal.details["head"]?.intValue.map { UInt64(max(0, $0)) } ?? since
                let oldest = refusal.details["oldest"]?.intValue.map { UInt64(max(0, $0)) } ?? 0
                machine.gone(head: head)
                delivered = max(delivered, head)
                fallback = EventFallback(
                    since: since, oldest: oldest, head: head,
                    reason: refusal.reason == .gone ? refusal.message : "\(refusal.reason): \(refusal.message)")
                judgeHeld()
            default:
                continue
            }
        }
        if let catchUpAskedAt, ContinuousClock.now - catchUpAskedAt >= Self.requestTimeout {
            if let again = machine.catchUpTimedOut() { try request(again) } else { self.catchUpAskedAt = nil }
        }
        if let fillAskedAt, ContinuousClock.now - fillAskedAt >= Self.requestTimeout {
            if let again = machine.fillTimedOut() { try request(again) } else { self.fillAskedAt = nil }
        }
        return fallback
    }

    /// Takes the next message ready to deliver.
    func takeReady() -> Caught? {
        guard readyIndex < ready.count else { return nil }
        let (caught, event) = ready[readyIndex]
        readyIndex += 1
        if let event { delivered = max(delivered, event) }
        if readyIndex == ready.count {
            ready.removeAll(keepingCapacity: true)
            readyIndex = 0
            // Everything up to the position was delivered: the events passed over were not asked for.
            delivered = max(delivered, machine.position)
        }
        return caught
    }

    /// The event sequence a live message carries: flowd's own numbered ones (PROTOCOL.md §4.6);
    /// a step or deep link passed on carries its sender's.
    private static func eventSequence(of message: WireMessage) -> UInt64? {
        switch message.kind {
        case .step, .deepLink, .heartbeat: nil
        default: message.envelope.sequence == 0 ? nil : message.envelope.sequence
        }
    }

    /// When an unanswered request is due again, if one is out.
    var retryAt: ContinuousClock.Instant? {
        [catchUpAskedAt, fillAskedAt].compactMap { $0 }.min().map { $0 + Self.requestTimeout }
    }

    private func judgeHeld() {
        let messages = held
        held.removeAll()
        for caught in messages {
            let envelope = caught.message.envelope
            if machine.judgeHeld(kind: caught.message.kind, source: envelope.source, sequence: envelope.sequence)
                == .deliver
            {
                ready.append((caught, Self.eventSequence(of: caught.message)))
            }
        }
    }

    private func request(since: UInt64) throws {
        try request(EventResume.Request(since: since))
    }

    private func request(_ wanted: EventResume.Request) throws {
        sequence += 1
        let request = ReplayRequest(
            envelope: Envelope(kind: .replayRequest, contentType: .json, sequence: sequence, source: source),
            since: wanted.since, until: wanted.until, topics: topics)
        try request.encode(into: &buffer)
        _ = try dealer.send(message: buffer, mode: .nonBlocking)
        if wanted.until == nil { catchUpAskedAt = .now } else { fillAskedAt = .now }
    }
}
