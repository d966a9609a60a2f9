import FlowBusProtocol
import FlowBusWire
import Foundation
import ZeroMQ

/// A process's connection to `flowd`'s ingress, publishing steps as one stepper.
///
/// Steps carry this publisher's source id and a sequence number from 1; `flowd` acknowledges
/// them cumulatively and applies each (source, sequence) once, in order.
///
/// Delivery is reliable across a restart of flowd: the publisher keeps every step until it is
/// acknowledged and sends the unacknowledged ones again, in order, when its connection to flowd
/// is re-established (ZeroMQ socket monitor), when acks start coming from another flowd
/// instance, when flowd reports a gap (`out-of-order`), or when no ack progress was seen for
/// ``retransmitInterval`` (doubling up to 30 s). While the connection is down, new steps wait and
/// go out once it is back. `ReliableOutbox` makes these decisions; the publisher carries them out.
/// flowd drops what it already dealt with and what arrives before a missing sequence, so each
/// step is applied exactly once. With a journal (`persistence:` in the config), this holds even
/// across a SIGKILL of flowd.
///
/// There is no background thread: ``publish(_:_:traceContext:)`` reads acks and resends opportunistically,
/// ``waitForAcknowledgement(timeout:)`` and ``poll(timeout:)`` do so while they wait. At most
/// ``maxOutstanding`` steps wait for their ack; `publish` then waits for room (back-pressure).
/// The publisher owns a socket, so it is used from one thread.
public final class StepPublisher {
    /// The stepper id steps are published as (the topic `step/<id>`).
    public let stepperID: String
    /// This process instance's source id in envelopes.
    public let sourceID: String
    /// How params are encoded.
    public var contentType: ContentType
    /// How many published messages may wait for their ack before ``publish(_:_:traceContext:)`` waits.
    public var maxOutstanding: Int {
        get { dealer.outbox.maxOutstanding }
        set { dealer.maxOutstanding = newValue }
    }
    /// How long without ack progress, while connected, before unacknowledged messages are sent
    /// again (a safety net: reconnections and a new flowd instance trigger a resend at once).
    public var retransmitInterval: Duration {
        get { dealer.outbox.retransmitInterval }
        set { dealer.retransmitInterval = newValue }
    }
    /// When set, ``poll(timeout:)`` sends a heartbeat after this much silence, so flowd can tell
    /// this process is alive (and report it `peer-dead` when it stops).
    public var heartbeatInterval: Duration? {
        didSet { flowd.silenceLimit = silenceLimit }
    }
    /// With ``heartbeatInterval`` set: flowd answers each heartbeat, so this many intervals with
    /// nothing from it mean it is down or unreachable (reported through ``onFlowdLiveness``).
    public var livenessIntervals = 3 {
        didSet { flowd.silenceLimit = silenceLimit }
    }
    /// Called from ``poll(timeout:)`` and the other calls that read the socket when flowd goes
    /// silent or comes back. Unacknowledged steps are kept and resent when it is back.
    public var onFlowdLiveness: ((LivenessChange) -> Void)?
    /// Whether flowd is silent past the liveness limit now.
    public var isFlowdSilent: Bool { flowd.isSilent }
    private var lastSent = ContinuousClock.now
    /// A socket error met after a message was queued: thrown by the next publish.
    private var deferredError: (any Error)?
    private var flowd = PeerLiveness(silenceLimit: .seconds(3), now: .now)
    private var silenceLimit: Duration { (heartbeatInterval ?? .zero) * max(1, livenessIntervals) }

    private let context: Context
    private let dealer: ReliableDealer
    private let poller = Poller()

    /// Connects to `endpoint` (flowd's ingress). libzmq connects in the background and queues
    /// steps until flowd is there.
    public convenience init(
        stepperID: String, endpoint: String, contentType: ContentType = .fbv, curve: CurveKeys = CurveKeys(),
        context: Context? = nil
    ) throws {
        try self.init(
            stepperID: stepperID, endpoints: [endpoint], contentType: contentType, curve: curve, context: context)
    }

    /// Connects to the ingress of each flowd instance in `endpoints` (one, or the active and its
    /// standbys): steps go to the instance that serves, and when another takes over, what it
    /// did not acknowledge goes to the new one. Steps wait until an instance is there.
    /// - Parameter heartbeatMilliseconds: The topology's heartbeat interval; with several
    ///   endpoints, a connection silent for two of them is dropped.
    public init(
        stepperID: String, endpoints: [String], contentType: ContentType = .fbv, curve: CurveKeys = CurveKeys(),
        context: Context? = nil, heartbeatMilliseconds: Int = 1000
    ) throws {
        precondition(!endpoints.isEmpty, "a publisher needs flowd's ingress endpoint")
        self.stepperID = stepperID
        self.sourceID = Envelope.newSourceID(for: stepperID)
        self.contentType = contentType
        self.context = try context ?? Context(defaultLinger: 2000)
        dealer = try ReliableDealer(
            sourceID: sourceID, endpoints: endpoints, curve: curve, context: self.context,
            heartbeatMilliseconds: heartbeatMilliseconds, linger: 2000, followsConnections: true)
        _ = try poller.add(dealer.socket)
        if let monitor = dealer.monitor { _ = try poller.add(monitor.socket) }
    }

    /// flowd's ingress on each of its instances, as connected.
    public var endpoints: [String] { dealer.endpoints }

    /// The last sequence published.
    public var lastSequence: UInt64 { dealer.outbox.lastSequence }
    /// The highest sequence flowd acknowledged.
    public var lastAcknowledged: UInt64 { dealer.outbox.lastAcknowledged }
    /// How many published messages wait for their ack.
    public var outstanding: Int { dealer.outbox.outstanding }
    /// Refusals flowd sent back for this publisher's messages, oldest first (the last 1024).
    public var refusals: [DiagnosticMessage] { dealer.outbox.refusals }
    /// How many messages were sent again so far.
    public var resentMessages: Int { dealer.outbox.resentCount }
    /// The source id of the flowd instance heard last (it changes when another takes over).
    public var flowdSource: String? { dealer.outbox.daemonSource }

    /// The refusal flowd sent back for the message with `sequence`, if it refused it on arrival.
    public func refusal(for sequence: UInt64) -> DiagnosticMessage? {
        dealer.outbox.refusal(for: sequence)
    }

    /// Publishes a step given by name and params.
    /// - Parameter traceContext: W3C Trace Context of the span that sends it (PROTOCOL.md §4.5).
    @discardableResult
    public func publish(_ name: String, _ params: WireParams = [:], traceContext: TraceContext? = nil) throws -> UInt64
    {
        try send { envelope in
            StepMessage(
                stepperID: stepperID, envelope: envelope, name: name, params: params, traceContext: traceContext)
        }
    }

    /// Publishes a canonical step.
    @discardableResult
    public func publish(_ step: CanonicalStep) throws -> UInt64 {
        try publish(step.name, step.params)
    }

    /// Publishes a Swift enum step through its Codable form (`case moviePicked(withId: Int)` →
    /// `moviePicked` with params `withId`).
    @discardableResult
    public func publish<S: Encodable>(_ step: S) throws -> UInt64 {
        let form = try canonicalForm(step)
        return try publish(form.name, form.params)
    }

    /// Publishes a deep link, which flowd sends to every active flow.
    @discardableResult
    public func publishDeepLink(
        _ name: String, _ params: WireParams = [:], traceContext: TraceContext? = nil
    ) throws -> UInt64 {
        try send { envelope in
            DeepLinkMessage(envelope: envelope, name: name, params: params, traceContext: traceContext)
        }
    }

    /// Reports what a renderer did with a presentable.
    @discardableResult
    public func report(_ event: PresentableEvent, for presentableID: String) throws -> UInt64 {
        try send(contentType: ContentType.none) { envelope in
            PresentableReport(envelope: envelope, presentableID: presentableID, event: event)
        }
    }

    /// Waits until flowd acknowledged everything published, or `timeout` passes, resending
    /// what flowd lost meanwhile.
    /// - Returns: whether everything was acknowledged.
    public func waitForAcknowledgement(timeout: Duration = .seconds(5)) throws -> Bool {
        let deadline = ContinuousClock.now + timeout
        while dealer.outbox.outstanding > 0 {
            let left = ContinuousClock.now.duration(to: deadline)
            guard left > .zero else { return false }
            try poll(timeout: min(left, .milliseconds(100)))
        }
        return true
    }

    /// Reads acks, refusals and connection events for up to `timeout` (returning as soon as
    /// something arrived), and resends unacknowledged messages if flowd lost them. Call it from
    /// a sending loop that may go quiet, so that resends happen without a thread.
    public func poll(timeout: Duration = .zero) throws {
        // Only what the poller found readable is read: a publish costs no receive on a quiet socket.
        if try poller.poll(timeout: max(0, timeout.wholeMilliseconds)) > 0 {
            let now = ContinuousClock.now
            try dealer.read { message in
                guard flowd.heard(now: now) else { return }
                onFlowdLiveness?(.back(source: message?.envelope.source ?? "?"))
            }
        }
        let now = ContinuousClock.now
        try dealer.tick(now: now)
        if heartbeatInterval != nil, let silentFor = flowd.check(now: now) {
            onFlowdLiveness?(.silent(silentFor: silentFor))
        }
        if let heartbeatInterval, now - lastSent >= heartbeatInterval {
            // Heartbeats are not numbered (sequence 0): a lost one leaves no gap to resend.
            try dealer.sendUnnumbered(
                try Heartbeat(envelope: Envelope(kind: .heartbeat, sequence: 0, source: sourceID)).encoded())
            lastSent = .now
        }
    }

    private func send(contentType: ContentType? = nil, _ make: (Envelope) -> some WireMessageEncodable) throws -> UInt64
    {
        if let error = deferredError {
            deferredError = nil
            throw error
        }
        while !dealer.outbox.hasRoom {
            try poll(timeout: .milliseconds(100))
        }
        let contentType = contentType ?? self.contentType
        let sequence = try dealer.enqueue { sequence throws(WireError) in
            var frames = FrameBuffer()
            let envelope = Envelope(kind: .step, contentType: contentType, sequence: sequence, source: sourceID)
            try make(envelope).encode(into: &frames)
            return frames
        }
        lastSent = .now
        // Queued: a socket error is the next call's (see ``ReliableDealer/enqueue(_:resentAs:)``).
        do { try poll() } catch { deferredError = error }
        return sequence
    }
}

@available(*, unavailable, message: "a publisher owns a socket: use it from one thread")
extension StepPublisher: Sendable {}
