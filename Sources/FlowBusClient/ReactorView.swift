import FlowBusProtocol
import FlowBusWire
import Foundation
import ZeroMQ

/// A view's connection to one reactor on a reactor host: sends actions, and reads its states —
/// the snapshot first, then every live state, with no gap and no duplicate (Clone pattern).
///
/// ```swift
/// let view = try ReactorView(reactorID: "counter", config: config)
/// let first = try view.next(timeout: .seconds(5))          // the snapshot
/// try view.send(CounterAction.increase)                    // or view.send("increase")
/// while let (sequence, state) = try view.next(CounterState.self, timeout: .seconds(2)) { … }
/// ```
///
/// How states are read: ``next(timeout:)`` subscribes to `state/<reactorId>` on the host's
/// `states` endpoint, waits for a heartbeat there (from then on the subscription is active), asks
/// the `actions` endpoint for a snapshot, queues live states until the snapshot (sequence N)
/// arrives, returns it, then drops states with sequence ≤ N and returns the others in order. A
/// gap in the sequence (a state lost at a high-water mark) or a new host source (the host
/// restarted) makes it ask for a new snapshot, counted in ``resynchronisations``.
///
/// Actions carry this view's source id and a sequence from 1; the host acknowledges them
/// cumulatively (``waitForAcknowledgement(timeout:)``), applies each (source, sequence) once, and
/// tells the view about a refused one (``refusal(for:)``) before the ack that covers it.
///
/// The view keeps every message the host has not acknowledged in a `ReliableOutbox` and sends
/// it again, with its original sequence, when the host restarts (a message from a new host
/// source), when the host says a message was lost in transit (`out-of-order`), or when no ack has
/// come for ``retransmitInterval`` (doubling up to 30 s while none comes). The host de-duplicates
/// by (source, sequence), so an action is applied once however often it is sent
/// (``retransmissions`` counts resends).
///
/// A view owns sockets: use it from one thread.
public final class ReactorView {
    /// The reactor this view talks to.
    public let reactorID: String
    /// This view's source id in envelopes.
    public let sourceID: String
    /// The `actions` endpoint of each of the host's instances (one, unless the host has a standby).
    public let actionsEndpoints: [String]
    /// The `states` endpoint of each of the host's instances.
    public let statesEndpoints: [String]
    /// The host's `actions` endpoint (its first instance's).
    public var actionsEndpoint: String { actionsEndpoints[0] }
    /// The host's `states` endpoint (its first instance's).
    public var statesEndpoint: String { statesEndpoints[0] }
    /// The host's actions endpoints, for messages.
    private var actionsWhere: String { actionsEndpoints.joined(separator: " or ") }
    /// How action params are encoded.
    public var contentType: ContentType
    private let context: Context
    private let curve: CurveKeys
    /// Actions and snapshot requests until the host acknowledges them.
    private let dealer: ReliableDealer
    private var subscriber: Socket?
    private var poller: Poller?
    /// Waits for the host's replies alone.
    private let acks = Poller()
    private var merger = CloneMerger()
    private var sawHeartbeat = false
    private var pendingSnapshotRequest: UInt64?
    private var ready: [ReactorViewState] = []
    private var readyHead = 0
    private var failure: ClientError?
    private var buffer = FrameBuffer()
    /// How many times a gap or a host restart made the view ask for a new snapshot.
    public private(set) var resynchronisations = 0
    /// Messages on the `states` endpoint that did not decode.
    public private(set) var malformedCount = 0
    /// The source id of the host, once any message from it was seen.
    public private(set) var hostSource: String?
    /// Whether the view is following live states (it has its snapshot and no resynchronisation
    /// is under way).
    public var isSynchronised: Bool { merger.phase == .live }
    /// How many times the host's source id changed (the host restarted).
    public private(set) var hostRestarts = 0
    /// Messages sent again because the host had not acknowledged them.
    public var retransmissions: Int { dealer.outbox.resentCount }
    /// How long without ack progress before unacknowledged messages are sent again (the interval
    /// doubles while no ack comes).
    public var retransmitInterval: Duration {
        get { dealer.retransmitInterval }
        set { dealer.retransmitInterval = newValue }
    }

    /// A view of `reactorID` on the host at these endpoints. Connects the `actions` DEALER now;
    /// the `states` subscription starts at the first ``next(timeout:)``. `curve` secures tcp
    /// endpoints when the topology has a `security:` section.
    public convenience init(
        reactorID: String, actionsEndpoint: String, statesEndpoint: String, contentType: ContentType = .fbv,
        curve: CurveKeys = CurveKeys(), context: Context? = nil
    ) throws {
        try self.init(
            reactorID: reactorID, actionsEndpoints: [actionsEndpoint], statesEndpoints: [statesEndpoint],
            contentType: contentType, curve: curve, context: context)
    }

    /// A view of `reactorID` on a host of several instances sharing their states, one of them
    /// active (`reactors.<host>.instances`): the view connects to every instance and follows the
    /// one that binds. A connection to another instance means the one before lost its lease: that
    /// stale connection is dropped, what was not acknowledged goes to the new one, and a new host
    /// source makes the view take a new snapshot.
    /// - Parameter heartbeatMilliseconds: The topology's heartbeat interval; with several
    ///   instances, a connection silent for two of them is dropped.
    public init(
        reactorID: String, actionsEndpoints: [String], statesEndpoints: [String], contentType: ContentType = .fbv,
        curve: CurveKeys = CurveKeys(), heartbeatMilliseconds: Int = 1000, context: Context? = nil
    ) throws {
        precondition(
            !actionsEndpoints.isEmpty && !statesEndpoints.isEmpty,
            "a view needs its host's actions and states endpoints")
        self.reactorID = reactorID
        self.curve = curve
        self.actionsEndpoints = actionsEndpoints
        self.statesEndpoints = statesEndpoints
        self.contentType = contentType
        sourceID = Envelope.newSourceID(for: "view:\(reactorID)")
        self.context = try context ?? Context(defaultLinger: 0)
        // Unbounded: a view does not wait for room (its sends never block). A restarted host is
        // told by its source (any message from it); with several instances the connections are
        // watched too, to drop one to an instance that lost its lease.
        dealer = try ReliableDealer(
            sourceID: sourceID, endpoints: actionsEndpoints, curve: curve, context: self.context,
            heartbeatMilliseconds: heartbeatMilliseconds, maxOutstanding: .max, linger: 1000,
            followsConnections: actionsEndpoints.count > 1)
        _ = try acks.add(dealer.socket)
        dealer.willSend = { [unowned self] sequence, transmission in
            if sequence == pendingSnapshotRequest, transmission.isResend(sequence) {
                // Resent as a filler: the request itself is made again.
                pendingSnapshotRequest = nil
            }
        }
    }

    // MARK: Actions

    /// The last sequence this view sent (actions and snapshot requests share it).
    public var lastSequence: UInt64 { dealer.outbox.lastSequence }
    /// The highest sequence the host acknowledged.
    public var lastAcknowledged: UInt64 { dealer.outbox.lastAcknowledged }

    /// Sends an action given by name and params.
    /// - Parameter traceContext: W3C Trace Context of the span that sends it (PROTOCOL.md §4.5).
    /// - Returns: the action's sequence (for ``refusal(for:)``).
    @discardableResult
    public func send(_ name: String, _ params: WireParams = [:], traceContext: TraceContext? = nil) throws -> UInt64 {
        // Notice a host restart first, so that resent messages go before this one.
        try drainDealer()
        let sequence = try dealer.enqueue { sequence throws(WireError) in
            var frames = FrameBuffer()
            try ActionMessage(
                reactorID: reactorID,
                envelope: Envelope(kind: .action, contentType: contentType, sequence: sequence, source: sourceID),
                name: name, params: params, traceContext: traceContext
            ).encode(into: &frames)
            return frames
        }
        // Queued: a socket error is the next call's (see ``ReliableDealer/enqueue(_:resentAs:)``).
        try? drainDealer()
        return sequence
    }

    /// Sends a Swift enum action through its canonical form (`submit(apiKey: "k")` → name
    /// `submit`, params `{apiKey: "k"}`).
    @discardableResult
    public func send<Action: Encodable>(_ action: Action) throws -> UInt64 {
        let form = try canonicalForm(action)
        return try send(form.name, form.params)
    }

    /// Waits until the host acknowledged everything sent, or `timeout` passes.
    /// - Returns: whether everything was acknowledged (refused actions are acknowledged too: see
    ///   ``refusal(for:)``).
    public func waitForAcknowledgement(timeout: Duration = .seconds(5)) throws -> Bool {
        let deadline = ContinuousClock.now + timeout
        while dealer.outbox.outstanding > 0 {
            let now = ContinuousClock.now
            guard now < deadline else { return false }
            // No ack for a while: the messages may have been lost with a host that died.
            try drainDealer()
            guard dealer.outbox.outstanding > 0 else { break }
            try acks.poll(timeout: max(1, min(now.duration(to: deadline), Self.tickInterval).wholeMilliseconds))
        }
        return true
    }

    /// Messages sent but not yet acknowledged by the host.
    public var unacknowledgedCount: Int { dealer.outbox.outstanding }

    /// The diagnostic the host sent back for the message with `sequence`, if it refused it.
    public func refusal(for sequence: UInt64) -> DiagnosticMessage? {
        dealer.outbox.refusal(for: sequence)
    }

    // MARK: States

    /// The next state: the snapshot first, then live states in sequence order.
    /// - Parameter timeout: How long to wait; nil waits forever.
    /// - Returns: nil when nothing arrived in time (no heartbeat yet: is the host running?).
    /// - Throws: ``ClientError`` when the host refused the snapshot request (e.g.
    ///   `unknown-reactor`), or a socket error.
    public func next(timeout: Duration?) throws -> ReactorViewState? {
        let deadline = timeout.map { ContinuousClock.now + $0 }
        let subscriber = try subscribed()
        let poller =
            try self.poller
            ?? {
                let poller = Poller()
                try poller.add(dealer.socket)
                try poller.add(subscriber)
                self.poller = poller
                return poller
            }()
        while true {
            if let failure {
                self.failure = nil
                throw failure
            }
            if readyHead < ready.count {
                let state = ready[readyHead]
                readyHead += 1
                if readyHead == ready.count {
                    ready.removeAll(keepingCapacity: true)
                    readyHead = 0
                }
                return state
            }
            if sawHeartbeat, merger.phase == .waitingForSnapshot, pendingSnapshotRequest == nil {
                try requestSnapshot()
            }
            var milliseconds = -1
            if let deadline {
                let left = ContinuousClock.now.duration(to: deadline)
                guard left > .zero else { return nil }
                milliseconds = max(1, left.wholeMilliseconds)
            }
            try poller.poll(timeout: milliseconds)
            try drainDealer()
            while try subscriber.receive(into: &buffer, mode: .nonBlocking) {
                handleSubscriber()
            }
        }
    }

    /// The next state decoded as `State` (see ``next(timeout:)``).
    public func next<State: Decodable>(
        _ type: State.Type, timeout: Duration?
    ) throws -> (sequence: UInt64, state: State)? {
        guard let received = try next(timeout: timeout) else { return nil }
        return (received.sequence, try received.decode(type))
    }

    // MARK: Internals

    /// How often a wait gives the outbox a chance to resend.
    private static let tickInterval: Duration = .milliseconds(100)

    /// The options of the SUB following `instances` hosts' `states`: with several, as every
    /// subscriber following instances (ZMTP heartbeats, PROTOCOL.md §3.2).
    package static func subscriberOptions(reactorID: String, instances: Int) -> [SocketOption] {
        [
            .receiveHighWaterMark(100_000), .reconnectInterval(100), .linger(0),
            .subscribe(Topic.state(reactorID)), .subscribe("hb/"),
        ] + BusSubscriber.followingInstances(instances)
    }

    private func subscribed() throws -> Socket {
        if let subscriber { return subscriber }
        let socket = try context.socket(.sub)
        try socket.setOptions(Self.subscriberOptions(reactorID: reactorID, instances: statesEndpoints.count))
        for endpoint in statesEndpoints {
            try curve.secureClient(socket, endpoint: endpoint)
            try socket.connect(endpoint)
        }
        subscriber = socket
        return socket
    }

    /// Sends a snapshot request. It takes a sequence like an action; sent again it is a heartbeat
    /// with that sequence, which only fills the sequence (a new request is made while a snapshot
    /// is still wanted).
    private func requestSnapshot() throws {
        pendingSnapshotRequest = try dealer.enqueue(
            { sequence throws(WireError) in
                let envelope = Envelope(kind: .snapshotRequest, sequence: sequence, source: sourceID)
                return try SnapshotRequest(reactorID: reactorID, envelope: envelope).encoded()
            },
            resentAs: { [sourceID] sequence throws(WireError) in
                try Heartbeat(envelope: Envelope(kind: .heartbeat, sequence: sequence, source: sourceID)).encoded()
            })
    }

    /// Any message from the host names its source: a new one means the host restarted. The view
    /// then resends what was not acknowledged and, if it follows states, asks for a new snapshot
    /// once its subscription is active at the new host (a heartbeat or state from it).
    private func noticeHost(_ source: String, onSubscriber: Bool, isAck: Bool = false) {
        if let known = hostSource, known != source {
            hostRestarts += 1
            if merger.phase == .live || pendingSnapshotRequest != nil {
                merger.hostRestarted()
                pendingSnapshotRequest = nil
                resynchronisations += 1
            }
            sawHeartbeat = onSubscriber
        }
        hostSource = source
        // An ack tells the outbox itself, after what it acknowledges is released.
        guard !isAck else { return }
        do {
            try dealer.heard(from: source)
        } catch {
            failure = ClientError(
                .notSent, "cannot resend unacknowledged messages to the reactor host at \(actionsWhere): \(error)")
        }
    }

    /// Sends what waits in the outbox (or resends after silence), and reads the host's replies.
    private func drainDealer() throws {
        try dealer.service(now: .now, before: noticeReply, after: handleReply)
    }

    /// Any reply names the host's source: noticed before the outbox takes an ack or a refusal.
    private func noticeReply(_ message: WireMessage?) {
        switch message {
        case .ack(let ack)? where ack.acknowledgedSource == sourceID:
            noticeHost(ack.envelope.source, onSubscriber: false, isAck: true)
        case .diagnostic(let diagnostic)?:
            noticeHost(diagnostic.envelope.source, onSubscriber: false)
        case .snapshot(let snapshot)? where snapshot.reactorID == reactorID && pendingSnapshotRequest != nil:
            noticeHost(snapshot.envelope.source, onSubscriber: false)
        default:
            break
        }
    }

    /// A refusal of the snapshot request, or the snapshot, once the outbox took the reply.
    private func handleReply(_ message: WireMessage?) {
        switch message {
        case .diagnostic?:
            // An `out-of-order` refusal resent (the snapshot request among them as a filler).
            if let pending = pendingSnapshotRequest, let refusal = dealer.outbox.refusal(for: pending) {
                pendingSnapshotRequest = nil
                let reason = "\(refusal.reason): \(refusal.message)"
                failure = ClientError(
                    .refused, "the reactor host at \(actionsWhere) refused the snapshot of \(reactorID): \(reason)")
            }
        case .snapshot(let snapshot)? where snapshot.reactorID == reactorID:
            // A restart noticed just now cancelled the request: a new one follows.
            guard pendingSnapshotRequest != nil else { return }
            pendingSnapshotRequest = nil
            let outcome = merger.snapshot(
                ReactorViewState(
                    reactorID: reactorID, envelope: snapshot.envelope, state: snapshot.state, isSnapshot: true))
            deliver(outcome)
        default:
            break
        }
    }

    /// A heartbeat or state from the host's `states` endpoint (in `buffer`).
    private func handleSubscriber() {
        let message: WireMessage
        do {
            message = try WireMessage.decode(from: buffer)
        } catch {
            malformedCount += 1
            return
        }
        switch message {
        case .heartbeat(let heartbeat):
            // A restarted host: resend, and resynchronise from a new snapshot (the merger keeps
            // what was delivered, so the snapshot of a persisted reactor is not delivered twice).
            noticeHost(heartbeat.envelope.source, onSubscriber: true)
            sawHeartbeat = true
        case .state(let state) where state.reactorID == reactorID:
            noticeHost(state.envelope.source, onSubscriber: true)
            // Any state proves the subscription is active, like a heartbeat.
            sawHeartbeat = true
            deliver(
                merger.live(
                    ReactorViewState(
                        reactorID: reactorID, envelope: state.envelope, state: state.state, isSnapshot: false)))
        default:
            break
        }
    }

    private func deliver(_ outcome: (deliver: [ReactorViewState], resync: Bool)) {
        ready.append(contentsOf: outcome.deliver)
        if outcome.resync {
            resynchronisations += 1
        }
    }
}

@available(*, unavailable, message: "a view owns sockets: use it from one thread")
extension ReactorView: Sendable {}
