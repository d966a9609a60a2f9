import FlowBusProtocol
import FlowBusWire
import Foundation
import ZeroMQ

/// Why a client call failed, said so that the reader knows what to do.
public struct ClientError: Error, CustomStringConvertible, Sendable {
    public var description: String

    public init(_ description: String) {
        self.description = description
    }
}

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
/// go out once it is back. ``ReliableOutbox`` makes these decisions; the publisher carries them out.
/// flowd drops what it already dealt with and what arrives before a missing sequence, so each
/// step is applied exactly once. With a journal (`persistence:` in the config), this holds even
/// across a SIGKILL of flowd.
///
/// There is no background thread: ``publish(_:_:)`` reads acks and resends opportunistically,
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
    /// How many published messages may wait for their ack before ``publish(_:_:)`` waits.
    public var maxOutstanding: Int {
        get { outbox.maxOutstanding }
        set { outbox.maxOutstanding = newValue }
    }
    /// How long without ack progress, while connected, before unacknowledged messages are sent
    /// again (a safety net: reconnections and a new flowd instance trigger a resend at once).
    public var retransmitInterval: Duration {
        get { outbox.retransmitInterval }
        set { outbox.retransmitInterval = newValue }
    }
    /// When set, ``poll(timeout:)`` sends a heartbeat after this much silence, so flowd can tell
    /// this process is alive (and report it `peer-dead` when it stops).
    public var heartbeatInterval: Duration?
    /// With ``heartbeatInterval`` set: flowd answers each heartbeat, so this many intervals with
    /// nothing from it mean it is down or unreachable (reported through ``onFlowdLiveness``).
    public var livenessIntervals = 3
    /// Called from ``poll(timeout:)`` and the other calls that read the socket when flowd goes
    /// silent or comes back. Unacknowledged steps are kept and resent when it is back.
    public var onFlowdLiveness: ((LivenessChange) -> Void)?
    /// Whether flowd is silent past the liveness limit now.
    public private(set) var isFlowdSilent = false
    private var lastSent = ContinuousClock.now
    private var lastHeard = ContinuousClock.now

    private let context: Context
    private let socket: Socket
    private let monitor: SocketMonitor
    private let poller = Poller()
    private let socketIndex: Int
    private let monitorIndex: Int
    private var outbox: ReliableOutbox
    private var links: FlowdLinks
    private var received = FrameBuffer()

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
        self.sourceID = "\(stepperID)#\(UUID().uuidString.prefix(8).lowercased())"
        self.contentType = contentType
        outbox = ReliableOutbox(sourceID: sourceID)
        links = FlowdLinks(endpoints: endpoints)
        self.context = try context ?? Context(defaultLinger: 2000)
        socket = try self.context.socket(.dealer)
        try socket.setOptions([.sendHighWaterMark(100_000)])
        monitor = try SocketMonitor(watching: socket, context: self.context, events: [.connected, .disconnected])
        socketIndex = try poller.add(socket)
        monitorIndex = try poller.add(monitor.socket)
        if try socket.connect(toFlowdInstances: endpoints, curve: curve, heartbeatMilliseconds: heartbeatMilliseconds) {
            outbox.socketQueuesUntilConnected()
        }
    }

    /// flowd's ingress on each of its instances, as connected.
    public var endpoints: [String] { links.endpoints }

    /// The last sequence published.
    public var lastSequence: UInt64 { outbox.lastSequence }
    /// The highest sequence flowd acknowledged.
    public var lastAcknowledged: UInt64 { outbox.lastAcknowledged }
    /// How many published messages wait for their ack.
    public var outstanding: Int { outbox.outstanding }
    /// Refusals flowd sent back for this publisher's messages, oldest first (the last 1024).
    public var refusals: [DiagnosticMessage] { outbox.refusals }
    /// How many messages were sent again so far.
    public var resentMessages: Int { outbox.resentCount }
    /// The source id of the flowd instance heard last (it changes when another takes over).
    public var flowdSource: String? { outbox.daemonSource }

    /// The refusal flowd sent back for the message with `sequence`, if it refused it on arrival.
    public func refusal(for sequence: UInt64) -> DiagnosticMessage? {
        outbox.refusal(for: sequence)
    }

    /// Publishes a step given by name and params.
    @discardableResult
    public func publish(_ name: String, _ params: WireParams = [:]) throws -> UInt64 {
        try send { envelope in StepMessage(stepperID: stepperID, envelope: envelope, name: name, params: params) }
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
    public func publishDeepLink(_ name: String, _ params: WireParams = [:]) throws -> UInt64 {
        try send { envelope in DeepLinkMessage(envelope: envelope, name: name, params: params) }
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
        while outbox.outstanding > 0 {
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
        try poller.poll(timeout: max(0, timeout.wholeMilliseconds))
        if poller.isReadable(monitorIndex) {
            while let event = try monitor.next(mode: .nonBlocking) {
                try carryOut(try socket.follow(event, links: &links, outbox: &outbox))
            }
        }
        if poller.isReadable(socketIndex) {
            while try socket.receive(into: &received, mode: .nonBlocking) {
                try record(received)
            }
        }
        let now = ContinuousClock.now
        try carryOut(outbox.tick(now: now))
        if let heartbeatInterval, !isFlowdSilent, now - lastHeard > heartbeatInterval * max(1, livenessIntervals) {
            isFlowdSilent = true
            onFlowdLiveness?(.silent(silentFor: now - lastHeard))
        }
        if let heartbeatInterval, now - lastSent >= heartbeatInterval {
            // Heartbeats are not numbered (sequence 0): a lost one leaves no gap to resend.
            let heartbeat = Heartbeat(envelope: Envelope(kind: .heartbeat, sequence: 0, source: sourceID))
            try socket.send(message: try heartbeat.encoded(), mode: .nonBlocking)
            lastSent = .now
        }
    }

    private func send(contentType: ContentType? = nil, _ make: (Envelope) -> some WireMessageEncodable) throws -> UInt64
    {
        while !outbox.hasRoom {
            try poll(timeout: .milliseconds(100))
        }
        let contentType = contentType ?? self.contentType
        let (sequence, action) = try outbox.enqueue { sequence throws(WireError) in
            var frames = FrameBuffer()
            let envelope = Envelope(kind: .step, contentType: contentType, sequence: sequence, source: sourceID)
            try make(envelope).encode(into: &frames)
            return frames
        }
        try carryOut(action)
        lastSent = .now
        try poll()
        return sequence
    }

    /// Hands the messages of `action` to the socket, in order, as far as it takes them.
    private func carryOut(_ action: ReliableOutbox.Action) throws {
        guard case .send(let transmission) = action else { return }
        try socket.send(transmission, of: &outbox)
    }

    private func record(_ frames: FrameBuffer) throws {
        let message = try? WireMessage.decode(from: frames)
        lastHeard = .now
        if isFlowdSilent {
            isFlowdSilent = false
            onFlowdLiveness?(.back(source: message?.envelope.source ?? "?"))
        }
        switch message {
        case .ack(let ack):
            try carryOut(outbox.received(ack: ack))
        case .diagnostic(let diagnostic):
            try carryOut(outbox.received(refusal: diagnostic))
        default:
            break
        }
    }
}

@available(*, unavailable, message: "a publisher owns a socket: use it from one thread")
extension StepPublisher: Sendable {}
