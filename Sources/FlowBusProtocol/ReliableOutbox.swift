import FlowBusWire

/// The sending side of the protocol for one source talking to one daemon (a stepper to flowd's
/// `ingress`, a view to a reactor host's `actions`), without sockets: it decides what goes to the
/// socket and when; the socket's owner carries out its ``Action``s.
///
/// Guarantees, for messages given to ``enqueue(_:)``:
/// - They are numbered 1, 2, 3, … without a gap (the daemon acknowledges cumulatively and refuses
///   a gap), and handed to the socket in that order.
/// - Each is kept, as the frames it was encoded to, until a cumulative ack covers it; acknowledged
///   entries are released in bulk (amortised O(1) per message).
/// - Unacknowledged messages are sent again, in order and with their original sequences, when the
///   connection comes back after a disconnection, when a new daemon instance answers (a new source
///   id: a restarted daemon lost what it had not committed), when the daemon refuses a message as
///   `out-of-order` (from the sequence it expects), and, while connected, when acks made no progress
///   for ``retransmitInterval`` — an interval that doubles on each such resend up to
///   ``maxRetransmitInterval`` and starts again from ``retransmitInterval`` on progress. The daemon
///   de-duplicates by (source, sequence), so a message sent twice is applied once.
/// - While disconnected nothing is handed to the socket: messages wait and go out, in order, on
///   ``connected()``. A message the socket does not take (``notTaken(from:)``) waits likewise.
/// - A refusal naming this source and a sequence is recorded against that message
///   (``refusal(for:)``); `duplicate` is not a refusal (the message was dealt with before) and
///   `out-of-order` is not either (the message is sent again).
///
/// Time is passed in (``tick(now:)``): the outbox reads no clock, so it is deterministic.
///
/// The owner starts it with ``connected()`` when its socket queues messages before a connection
/// exists (a ZeroMQ DEALER does), then reports connections and disconnections as its socket monitor
/// sees them, and calls ``tick(now:)`` regularly (resends after silence, messages not taken yet).
package struct ReliableOutbox: Sendable {
    /// Why messages go out again.
    package enum ResendReason: Sendable, Hashable, CustomStringConvertible {
        /// The connection came back after a disconnection: what was in flight may be lost.
        case reconnected
        /// Another daemon instance answered: the previous one lost what it had not committed.
        case daemonRestarted
        /// No ack progress for the current retransmit interval.
        case noAckProgress
        /// The daemon refused a message that skipped ahead of the one it expects.
        case outOfOrder

        package var description: String {
            switch self {
            case .reconnected: "reconnected"
            case .daemonRestarted: "a new daemon instance answers"
            case .noAckProgress: "no ack progress"
            case .outOfOrder: "the daemon reported a gap (out-of-order)"
            }
        }
    }

    /// Messages to hand to the socket, oldest first: ``frames(of:in:)`` gives each one's frames.
    package struct Transmission: Sendable, Hashable {
        /// The sequences to send, in order.
        package let sequences: ClosedRange<UInt64>
        /// The first of ``sequences`` never handed to the socket before; those before it are resent.
        package let firstNew: UInt64
        /// Why messages handed over before go out again; nil when none does.
        package let reason: ResendReason?

        /// Whether `sequence` was handed to the socket before (this is a resend of it).
        package func isResend(_ sequence: UInt64) -> Bool { sequence < firstNew }
    }

    /// What the owner does after an event.
    package enum Action: Sendable, Hashable {
        /// Nothing.
        case none
        /// Hand these messages to the socket, in order, stopping at the first one it does not take
        /// (report it with ``notTaken(from:)``).
        case send(Transmission)
    }

    private enum Link {
        /// Not connected yet: messages wait, and the first connection resends nothing.
        case notYetConnected
        case connected
        /// Connected before: the next connection resends what is unacknowledged.
        case disconnected
    }

    private struct Entry {
        var frames: FrameBuffer
        var resendFrames: FrameBuffer? = nil
    }

    /// This sender's source id (acks and refusals for other sources are ignored).
    package let sourceID: String
    /// How many messages may wait for their ack before ``hasRoom`` is false.
    package var maxOutstanding: Int
    /// How long without ack progress, while connected, before unacknowledged messages are sent
    /// again; setting it restarts the back-off from this value.
    package var retransmitInterval: Duration {
        didSet { backoff = retransmitInterval }
    }
    /// The longest the retransmit interval grows to by doubling.
    package var maxRetransmitInterval: Duration
    /// How many refusals ``refusals`` keeps (the oldest go first).
    package let maxRecordedRefusals: Int

    /// Unacknowledged messages; `entries[head]` has sequence `lastAcknowledged + 1`.
    private var entries: [Entry] = []
    private var head = 0
    /// The sequence of `entries[0]`.
    private var base: UInt64 = 1
    /// The last sequence given out.
    package private(set) var lastSequence: UInt64 = 0
    /// The highest sequence the daemon acknowledged.
    package private(set) var lastAcknowledged: UInt64 = 0
    /// The first sequence not handed to the socket yet.
    private var nextToHandOver: UInt64 = 1
    /// The highest sequence ever handed to the socket (later ones go out for the first time).
    private var highestHandedOver: UInt64 = 0
    /// `highestHandedOver` before the last transmission, for ``notTaken(from:)``.
    private var handedOverBeforeTransmission: UInt64 = 0
    private var link = Link.notYetConnected
    /// Connections the socket holds now: one per daemon instance it reached.
    private var connections = 0
    /// The source id of the daemon instance heard last.
    package private(set) var daemonSource: String?
    /// A resend on reconnection went out and no daemon answered since: the next one to answer got it.
    private var reconnectResendUnanswered = false
    /// When the silence being timed began (set by the first tick that sees it); nil: not timing.
    private var silenceSince: ContinuousClock.Instant?
    private var backoff: Duration
    /// The last resend since ack progress: refusals of messages it covers are not news.
    private var resendSinceProgress: (from: UInt64, through: UInt64)?
    /// The daemon instance and gap of the last `out-of-order` that asked for acknowledged messages.
    private var lastBehindResend: (daemon: String, expected: UInt64)?
    private var lastResendReason: ResendReason?
    /// Messages sent again so far.
    package private(set) var resentCount = 0
    private var refusalsBySequence: [UInt64: DiagnosticMessage] = [:]
    private var refusalOrder: [UInt64] = []
    private var refusalHead = 0

    /// Creates an empty outbox, not connected.
    /// - Parameters:
    ///   - sourceID: This sender's source id, as its envelopes carry it.
    ///   - maxOutstanding: The back-pressure limit (see ``hasRoom``).
    ///   - retransmitInterval: The first interval without ack progress before a resend.
    ///   - maxRetransmitInterval: The cap of the doubling interval.
    ///   - maxRecordedRefusals: How many refusals to keep.
    ///   - last: The sequence the source gave out last before this outbox (one whose sequence is
    ///     kept across restarts): the first message enqueued gets the next.
    package init(
        sourceID: String, maxOutstanding: Int = 10_000, retransmitInterval: Duration = .seconds(1),
        maxRetransmitInterval: Duration = .seconds(30), maxRecordedRefusals: Int = 1024,
        continuingAfter last: UInt64 = 0
    ) {
        self.sourceID = sourceID
        base = last + 1
        lastSequence = last
        lastAcknowledged = last
        nextToHandOver = last + 1
        highestHandedOver = last
        handedOverBeforeTransmission = last
        self.maxOutstanding = maxOutstanding
        self.retransmitInterval = retransmitInterval
        self.maxRetransmitInterval = maxRetransmitInterval
        self.maxRecordedRefusals = max(1, maxRecordedRefusals)
        backoff = retransmitInterval
    }

    // MARK: Queries

    /// Messages enqueued and not acknowledged yet (sent or waiting).
    package var outstanding: Int { Int(lastSequence - lastAcknowledged) }

    /// Whether another message fits under ``maxOutstanding``; an owner that applies back-pressure
    /// waits (or refuses) while it is false. ``enqueue(_:)`` itself never refuses.
    package var hasRoom: Bool { outstanding < maxOutstanding }

    /// Whether the socket is connected as far as the outbox knows.
    package var isConnected: Bool { link == .connected }

    /// Messages enqueued and not handed to the socket yet.
    package var waiting: Int { Int(lastSequence + 1 - nextToHandOver) }

    /// The current retransmit interval (doubled by resends without progress).
    package var currentRetransmitInterval: Duration { backoff }

    /// The refusal the daemon sent back for the message with `sequence`, if any (among the last
    /// ``maxRecordedRefusals``).
    package func refusal(for sequence: UInt64) -> DiagnosticMessage? {
        refusalsBySequence[sequence]
    }

    /// The refusals recorded, oldest first.
    package var refusals: [DiagnosticMessage] {
        refusalOrder[refusalHead...].compactMap { refusalsBySequence[$0] }
    }

    /// The frames to hand to the socket for `sequence` in `transmission`: the message as enqueued,
    /// or its resend form when it is sent again and has one.
    /// - Precondition: `sequence` is in the transmission and not acknowledged since.
    package func frames(of sequence: UInt64, in transmission: Transmission) -> FrameBuffer {
        precondition(
            sequence > lastAcknowledged && sequence <= lastSequence, "sequence \(sequence) is not in the outbox")
        let entry = entries[Int(sequence - base)]
        if transmission.isResend(sequence), let resend = entry.resendFrames { return resend }
        return entry.frames
    }

    // MARK: Events

    /// Adds a message, numbered with the next sequence.
    /// - Parameter encode: Encodes the message with the sequence given (its envelope's); an error
    ///   leaves the outbox unchanged, so no sequence is skipped.
    /// - Returns: the message's sequence, and whether to send it now (not while disconnected, nor
    ///   behind earlier messages still waiting).
    package mutating func enqueue<E: Error>(
        _ encode: (_ sequence: UInt64) throws(E) -> FrameBuffer
    ) throws(E) -> (sequence: UInt64, action: Action) {
        add(Entry(frames: try encode(lastSequence + 1)))
    }

    /// Adds a message that is sent differently when it goes out again (e.g. a request whose answer
    /// is no longer awaited then only fills its sequence).
    /// - Parameters:
    ///   - encode: Encodes the message with the sequence given, as ``enqueue(_:)`` does.
    ///   - encodeResend: Encodes what to send instead, with the same sequence, when it is resent.
    package mutating func enqueue<E: Error>(
        _ encode: (_ sequence: UInt64) throws(E) -> FrameBuffer,
        resentAs encodeResend: (_ sequence: UInt64) throws(E) -> FrameBuffer
    ) throws(E) -> (sequence: UInt64, action: Action) {
        add(Entry(frames: try encode(lastSequence + 1), resendFrames: try encodeResend(lastSequence + 1)))
    }

    /// The socket takes messages before its first connection and delivers them once connected
    /// (a DEALER connected to one endpoint, without `ZMQ_IMMEDIATE`): messages go to it at once.
    /// Its connections are still counted by ``connected()`` and ``disconnected()``.
    package mutating func socketQueuesUntilConnected() {
        if link == .notYetConnected { link = .connected }
    }

    /// The socket made a connection (one per daemon instance it reaches). After a disconnection,
    /// everything unacknowledged goes out again; otherwise the messages waiting go out. Another
    /// connection while one is up (a new instance took over while the old one's connection is
    /// not yet known to be dead) resends nothing here: the new instance's first ack does.
    package mutating func connected() -> Action {
        connections += 1
        let wasDisconnected = link == .disconnected
        link = .connected
        guard wasDisconnected else { return transmit(from: nextToHandOver, reason: nil) }
        let action = transmit(from: lastAcknowledged + 1, reason: .reconnected)
        if case .send(let transmission) = action, transmission.reason != nil {
            reconnectResendUnanswered = true
        }
        return action
    }

    /// The socket lost a connection. Once it holds none, messages wait until ``connected()``.
    package mutating func disconnected() {
        connections = max(0, connections - 1)
        guard connections == 0 else { return }
        if link == .connected { link = .disconnected }
        silenceSince = nil
    }

    /// The socket did not take the message `sequence` of the last transmission (it would block):
    /// it and the later ones wait for the next ``enqueue(_:)``, ``connected()`` or
    /// ``tick(now:)``.
    package mutating func notTaken(from sequence: UInt64) {
        guard sequence > lastAcknowledged, sequence < nextToHandOver else { return }
        let firstNew = handedOverBeforeTransmission + 1
        if sequence < firstNew { resentCount -= Int(firstNew - sequence) }
        nextToHandOver = sequence
        highestHandedOver = max(handedOverBeforeTransmission, sequence - 1)
    }

    /// An ack from the daemon. Releases what it covers; a first ack from a new daemon instance
    /// resends what is still unacknowledged (once: later acks from it do not).
    package mutating func received(ack: Ack) -> Action {
        guard ack.acknowledgedSource == sourceID else { return .none }
        acknowledge(min(ack.acknowledgedSequence, lastSequence))
        return heard(from: ack.envelope.source)
    }

    /// A message from the daemon other than an ack (a heartbeat, a state, a reply) names its
    /// instance: a new one means the daemon restarted, and what is unacknowledged goes out again.
    package mutating func heard(from daemon: String) -> Action {
        let previous = daemonSource
        daemonSource = daemon
        // A resend on reconnection went to the instance that answers now.
        let resentToIt = reconnectResendUnanswered
        reconnectResendUnanswered = false
        guard let previous, previous != daemon, !resentToIt else { return .none }
        return transmit(from: lastAcknowledged + 1, reason: .daemonRestarted)
    }

    /// A diagnostic from the daemon. One naming this source and a sequence is recorded against that
    /// message, except `duplicate` (dealt with before) and `out-of-order`, which resends from the
    /// sequence the daemon expects (its details' `expected`, else everything unacknowledged) unless
    /// a resend since the last ack progress already covered the refused message. An `out-of-order`
    /// expecting a sequence already acknowledged (the daemon's ledger lost it) resends what is held
    /// at once, once per daemon instance and gap: going back to the oldest message held is how the
    /// daemon learns that nothing older can come (`journal-behind`, PROTOCOL.md §4.4).
    package mutating func received(refusal diagnostic: DiagnosticMessage) -> Action {
        guard diagnostic.details["source"]?.stringValue == sourceID else { return .none }
        let named = diagnostic.details["sequence"]?.intValue.map { UInt64(clamping: $0) }
        switch diagnostic.reason {
        case .duplicate:
            return .none
        case .outOfOrder:
            let expected = diagnostic.details["expected"]?.intValue.map { UInt64(clamping: $0) }
            let from = max(expected ?? 0, lastAcknowledged + 1)
            if let expected, expected <= lastAcknowledged {
                let daemon = diagnostic.envelope.source
                if let last = lastBehindResend, last.daemon == daemon, last.expected == expected { return .none }
                lastBehindResend = (daemon, expected)
                return transmit(from: from, reason: .outOfOrder)
            }
            // Refusals of messages sent before that resend arrive after it went: not news.
            if let covered = resendSinceProgress, covered.from <= from, (named ?? from) <= covered.through {
                return .none
            }
            return transmit(from: from, reason: .outOfOrder)
        default:
            guard let named, named >= 1, named <= lastSequence else { return .none }
            record(diagnostic, for: named)
            return .none
        }
    }

    /// Time passes. Sends the messages waiting, if connected; resends what is unacknowledged after
    /// the current retransmit interval without ack progress (measured from the first tick that saw
    /// the silence), then doubles the interval up to ``maxRetransmitInterval``.
    package mutating func tick(now: ContinuousClock.Instant) -> Action {
        guard link == .connected else { return .none }
        if nextToHandOver <= lastSequence {
            return transmit(from: nextToHandOver, reason: nil)
        }
        guard lastAcknowledged < highestHandedOver else {
            silenceSince = nil
            return .none
        }
        guard let since = silenceSince else {
            silenceSince = now
            return .none
        }
        guard now - since >= backoff else { return .none }
        let action = transmit(from: lastAcknowledged + 1, reason: .noAckProgress)
        backoff = min(backoff * 2, maxRetransmitInterval)
        silenceSince = now
        return action
    }

    // MARK: Internals

    private mutating func add(_ entry: Entry) -> (sequence: UInt64, action: Action) {
        entries.append(entry)
        lastSequence += 1
        return (lastSequence, transmit(from: nextToHandOver, reason: nil))
    }

    /// Hands over everything from `first` (or from an earlier message still waiting) to the last.
    private mutating func transmit(from first: UInt64, reason: ResendReason?) -> Action {
        guard link == .connected else { return .none }
        let from = min(max(first, lastAcknowledged + 1), nextToHandOver)
        guard from <= lastSequence else { return .none }
        let firstNew = highestHandedOver + 1
        var why: ResendReason?
        if from < firstNew {
            // Without a reason of its own, this is the rest of a resend the socket did not take.
            why = reason ?? lastResendReason
            lastResendReason = why
            resentCount += Int(min(highestHandedOver, lastSequence) - from + 1)
            resendSinceProgress = (min(resendSinceProgress?.from ?? from, from), lastSequence)
            silenceSince = nil
        }
        handedOverBeforeTransmission = highestHandedOver
        highestHandedOver = lastSequence
        nextToHandOver = lastSequence + 1
        return .send(Transmission(sequences: from...lastSequence, firstNew: firstNew, reason: why))
    }

    private mutating func acknowledge(_ sequence: UInt64) {
        guard sequence > lastAcknowledged else { return }
        lastAcknowledged = sequence
        nextToHandOver = max(nextToHandOver, sequence + 1)
        highestHandedOver = max(highestHandedOver, sequence)
        handedOverBeforeTransmission = max(handedOverBeforeTransmission, sequence)
        silenceSince = nil
        backoff = retransmitInterval
        resendSinceProgress = nil
        head = Int(sequence + 1 - base)
        // Released in bulk: an array shifted once per half of its length costs O(1) per message.
        if head == entries.count {
            entries.removeAll(keepingCapacity: entries.count <= 1024)
            base = sequence + 1
            head = 0
        } else if head >= 1024, head * 2 >= entries.count {
            entries.removeFirst(head)
            base += UInt64(head)
            head = 0
        }
    }

    private mutating func record(_ diagnostic: DiagnosticMessage, for sequence: UInt64) {
        if refusalsBySequence.updateValue(diagnostic, forKey: sequence) == nil {
            refusalOrder.append(sequence)
        }
        while refusalOrder.count - refusalHead > maxRecordedRefusals {
            refusalsBySequence.removeValue(forKey: refusalOrder[refusalHead])
            refusalHead += 1
        }
        if refusalHead >= 1024, refusalHead * 2 >= refusalOrder.count {
            refusalOrder.removeFirst(refusalHead)
            refusalHead = 0
        }
    }
}
