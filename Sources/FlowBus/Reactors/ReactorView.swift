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
/// The view keeps every message the host has not acknowledged in an outbox and sends it again,
/// with its original sequence, when the host restarts (a message from a new host source), when
/// the host says a message was lost in transit (`out-of-order`), or when no ack has come for
/// ``retransmitInterval`` while waiting for one. The host de-duplicates by (source, sequence), so
/// an action is applied once however often it is sent (``retransmissions`` counts resends).
///
/// A view owns sockets: use it from one thread.
public final class ReactorView {
    /// The reactor this view talks to.
    public let reactorID: String
    /// This view's source id in envelopes.
    public let sourceID: String
    /// The host's `actions` endpoint.
    public let actionsEndpoint: String
    /// The host's `states` endpoint.
    public let statesEndpoint: String
    /// How action params are encoded.
    public var contentType: ContentType
    private let context: Context
    private let curve: CurveKeys
    private let dealer: Socket
    private var subscriber: Socket?
    private var poller: Poller?
    private var sequence: UInt64 = 0
    private var acknowledged: UInt64 = 0
    /// What the host has not acknowledged yet, in sequence order.
    private var outbox: [(sequence: UInt64, message: Unacknowledged)] = []
    /// Entries of `outbox` before this index are acknowledged (removed in bulk, not per ack).
    private var outboxHead = 0
    /// The highest sequence sent when the outbox was last resent.
    private var resentThrough: UInt64 = 0
    /// The first outbox entry not handed to the socket yet (no connection to the host).
    private var firstUnsent: UInt64?
    private var refusals: [UInt64: DiagnosticMessage] = [:]
    private var merger = CloneMerger()
    private var sawHeartbeat = false
    private var pendingSnapshotRequest: UInt64?
    private var ready: [ReactorViewState] = []
    private var readyHead = 0
    private var failure: ClientError?
    private var buffer = FrameBuffer()
    private var outgoing = FrameBuffer()
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
    public private(set) var retransmissions = 0
    /// While waiting for an ack, how long without progress before unacknowledged messages are
    /// sent again.
    public var retransmitInterval: Duration = .seconds(1)

    /// A message kept until the host acknowledges it.
    private enum Unacknowledged {
        case action(name: String, params: WireParams, contentType: ContentType)
        /// A snapshot request: resent as a heartbeat with its sequence (it only fills the
        /// sequence; a new request is made when a snapshot is still wanted).
        case sequenceOnly
    }

    /// A view of `reactorID` on the host that serves it in `config` (`config.reactorHost(for:)`).
    /// - Throws: ``ClientError`` when no host of the config serves the id.
    public convenience init(reactorID: String, config: FlowBusConfig, contentType: ContentType = .fbv, context: Context? = nil) throws {
        guard let host = config.reactorHost(for: reactorID) else {
            throw ClientError(
                "no reactor host serves \(reactorID): list it (or its family, e.g. movie/) under reactors.<host>.serves in the config")
        }
        try self.init(
            reactorID: reactorID, actionsEndpoint: host.spec.actions, statesEndpoint: host.spec.states, contentType: contentType,
            curve: config.curve, context: context)
    }

    /// A view of `reactorID` on the host at these endpoints. Connects the `actions` DEALER now;
    /// the `states` subscription starts at the first ``next(timeout:)``. `curve` secures tcp
    /// endpoints when the topology has a `security:` section.
    public init(
        reactorID: String, actionsEndpoint: String, statesEndpoint: String, contentType: ContentType = .fbv,
        curve: CurveKeys = CurveKeys(), context: Context? = nil
    ) throws {
        self.reactorID = reactorID
        self.curve = curve
        self.actionsEndpoint = actionsEndpoint
        self.statesEndpoint = statesEndpoint
        self.contentType = contentType
        sourceID = "view:\(String(decoding: reactorID.utf8.prefix(200), as: UTF8.self))#\(UUID().uuidString.prefix(8).lowercased())"
        self.context = try context ?? Context(defaultLinger: 0)
        dealer = try self.context.socket(.dealer)
        try dealer.setOptions([.sendHighWaterMark(100_000), .reconnectInterval(100), .reconnectIntervalMax(2000), .linger(1000)])
        try curve.secureClient(dealer, endpoint: actionsEndpoint)
        try dealer.connect(actionsEndpoint)
    }

    // MARK: Actions

    /// The last sequence this view sent (actions and snapshot requests share it).
    public var lastSequence: UInt64 { sequence }
    /// The highest sequence the host acknowledged.
    public var lastAcknowledged: UInt64 { acknowledged }

    /// Sends an action given by name and params.
    /// - Returns: the action's sequence (for ``refusal(for:)``).
    @discardableResult
    public func send(_ name: String, _ params: WireParams = [:]) throws -> UInt64 {
        // Notice a host restart first, so that resent messages go before this one.
        try drainDealer()
        sequence += 1
        let message = ActionMessage(
            reactorID: reactorID, envelope: Envelope(kind: .action, contentType: contentType, sequence: sequence, source: sourceID),
            name: name, params: params)
        do {
            try message.encode(into: &outgoing)
        } catch {
            sequence -= 1
            throw error
        }
        outbox.append((sequence, .action(name: name, params: params, contentType: contentType)))
        try sendInOrder(sequence)
        try drainDealer()
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
        var progress = (acknowledged, ContinuousClock.now)
        while acknowledged < sequence {
            let now = ContinuousClock.now
            guard now < deadline else { return false }
            if acknowledged != progress.0 {
                progress = (acknowledged, now)
            } else if now - progress.1 >= retransmitInterval {
                // No ack for a while: the messages may have been lost with a host that died.
                try retransmit(from: acknowledged + 1)
                progress.1 = now
            }
            let wait = min(now.duration(to: deadline), retransmitInterval)
            if try dealer.receive(into: &buffer, mode: .within(wait)) {
                handleDealer()
                try drainDealer()
            }
        }
        return true
    }

    /// Messages sent but not yet acknowledged by the host.
    public var unacknowledgedCount: Int { outbox.count - outboxHead }

    /// The diagnostic the host sent back for the message with `sequence`, if it refused it.
    public func refusal(for sequence: UInt64) -> DiagnosticMessage? {
        refusals[sequence]
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
        let poller = try self.poller ?? {
            let poller = Poller()
            try poller.add(dealer)
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
    public func next<State: Decodable>(_ type: State.Type, timeout: Duration?) throws -> (sequence: UInt64, state: State)? {
        guard let received = try next(timeout: timeout) else { return nil }
        return (received.sequence, try received.decode(type))
    }

    // MARK: Internals

    private func subscribed() throws -> Socket {
        if let subscriber { return subscriber }
        let socket = try context.socket(.sub)
        try socket.setOptions([
            .receiveHighWaterMark(100_000), .reconnectInterval(100), .reconnectIntervalMax(2000), .linger(0),
            .subscribe(Topic.state(reactorID)), .subscribe("hb/"),
        ])
        try curve.secureClient(socket, endpoint: statesEndpoint)
        try socket.connect(statesEndpoint)
        subscriber = socket
        return socket
    }

    private func requestSnapshot() throws {
        sequence += 1
        let request = SnapshotRequest(
            reactorID: reactorID, envelope: Envelope(kind: .snapshotRequest, sequence: sequence, source: sourceID))
        try request.encode(into: &outgoing)
        outbox.append((sequence, .sequenceOnly))
        pendingSnapshotRequest = sequence
        try sendInOrder(sequence)
    }

    /// Sends the message just encoded in `outgoing` unless earlier ones are still unsent. Sends
    /// never block: with no connection to the host (not up yet, or it refused this client's key)
    /// the message waits in the outbox and goes out, in order, once the connection is there.
    private func sendInOrder(_ sequence: UInt64) throws {
        try flushUnsent()
        guard firstUnsent == nil else { return }
        if try !dealer.send(message: outgoing, mode: .nonBlocking) { firstUnsent = sequence }
    }

    /// Sends the messages that could not be sent yet, in order, as far as the socket takes them.
    private func flushUnsent() throws {
        guard let first = firstUnsent else { return }
        for entry in outbox[outboxHead...] where entry.sequence >= first {
            try encode(entry, asSnapshotRequest: entry.sequence == pendingSnapshotRequest)
            guard try dealer.send(message: outgoing, mode: .nonBlocking) else {
                firstUnsent = entry.sequence
                return
            }
        }
        firstUnsent = nil
    }

    private func encode(_ entry: (sequence: UInt64, message: Unacknowledged), asSnapshotRequest: Bool) throws {
        switch entry.message {
        case .action(let name, let params, let contentType):
            try ActionMessage(
                reactorID: reactorID,
                envelope: Envelope(kind: .action, contentType: contentType, sequence: entry.sequence, source: sourceID),
                name: name, params: params
            ).encode(into: &outgoing)
        case .sequenceOnly where asSnapshotRequest:
            try SnapshotRequest(
                reactorID: reactorID, envelope: Envelope(kind: .snapshotRequest, sequence: entry.sequence, source: sourceID)
            ).encode(into: &outgoing)
        case .sequenceOnly:
            try Heartbeat(envelope: Envelope(kind: .heartbeat, sequence: entry.sequence, source: sourceID)).encode(into: &outgoing)
        }
    }

    /// Sends again, in order and with their original sequences, the unacknowledged messages from
    /// `first` on.
    private func retransmit(from first: UInt64) throws {
        var resent = 0
        // Everything unsent is at or after `first`: this pass sends it or notes where it stopped.
        firstUnsent = nil
        for entry in outbox[outboxHead...] where entry.sequence >= first {
            try encode(entry, asSnapshotRequest: false)
            guard try dealer.send(message: outgoing, mode: .nonBlocking) else {
                firstUnsent = entry.sequence
                break
            }
            resent += 1
        }
        resentThrough = sequence
        retransmissions += resent
    }

    private func acknowledge(_ sequence: UInt64) {
        guard sequence > acknowledged else { return }
        acknowledged = sequence
        while outboxHead < outbox.count, outbox[outboxHead].sequence <= sequence { outboxHead += 1 }
        if outboxHead == outbox.count {
            outbox.removeAll(keepingCapacity: outbox.count <= 1024)
            outboxHead = 0
        } else if outboxHead >= 1024, outboxHead * 2 >= outbox.count {
            outbox.removeFirst(outboxHead)
            outboxHead = 0
        }
    }

    /// Any message from the host names its source: a new one means the host restarted. The view
    /// then resends what was not acknowledged and, if it follows states, asks for a new snapshot
    /// once its subscription is active at the new host (a heartbeat or state from it).
    private func noticeHost(_ source: String, onSubscriber: Bool) {
        guard let known = hostSource else {
            hostSource = source
            return
        }
        guard known != source else { return }
        hostSource = source
        hostRestarts += 1
        if merger.phase == .live || pendingSnapshotRequest != nil {
            merger.hostRestarted()
            pendingSnapshotRequest = nil
            resynchronisations += 1
        }
        sawHeartbeat = onSubscriber
        do {
            try retransmit(from: acknowledged + 1)
        } catch {
            failure = ClientError("cannot resend unacknowledged messages to the restarted reactor host at \(actionsEndpoint): \(error)")
        }
    }

    private func drainDealer() throws {
        try flushUnsent()
        while try dealer.receive(into: &buffer, mode: .nonBlocking) {
            handleDealer()
        }
    }

    /// An ack, diagnostic or snapshot from the host's `actions` endpoint (in `buffer`).
    private func handleDealer() {
        guard let message = try? WireMessage.decode(from: buffer) else { return }
        switch message {
        case .ack(let ack) where ack.acknowledgedSource == sourceID:
            noticeHost(ack.envelope.source, onSubscriber: false)
            acknowledge(ack.acknowledgedSequence)
        case .diagnostic(let diagnostic):
            noticeHost(diagnostic.envelope.source, onSubscriber: false)
            guard diagnostic.details["source"]?.stringValue == sourceID, let refused = diagnostic.details["sequence"]?.intValue else { return }
            let refusedSequence = UInt64(clamping: refused)
            switch diagnostic.reason {
            case .outOfOrder:
                // An earlier message was lost in transit: resend from the one the host expects
                // (unless a resend sent after this message already covers it).
                if refusedSequence == pendingSnapshotRequest { pendingSnapshotRequest = nil }
                if refusedSequence > resentThrough, let expected = diagnostic.details["expected"]?.intValue {
                    do {
                        try retransmit(from: UInt64(clamping: expected))
                    } catch {
                        failure = ClientError("cannot resend to the reactor host at \(actionsEndpoint): \(error)")
                    }
                }
                return
            case .duplicate:
                // Already dealt with (a resend whose first copy got through): not a refusal.
                return
            default:
                break
            }
            refusals[refusedSequence] = diagnostic
            if refusedSequence == pendingSnapshotRequest {
                pendingSnapshotRequest = nil
                failure = ClientError("the reactor host at \(actionsEndpoint) refused the snapshot of \(reactorID): \(diagnostic.reason): \(diagnostic.message)")
            }
        case .snapshot(let snapshot) where snapshot.reactorID == reactorID && pendingSnapshotRequest != nil:
            noticeHost(snapshot.envelope.source, onSubscriber: false)
            // A restart noticed just now cancelled the request: a new one follows.
            guard pendingSnapshotRequest != nil else { return }
            pendingSnapshotRequest = nil
            let outcome = merger.snapshot(
                ReactorViewState(reactorID: reactorID, envelope: snapshot.envelope, state: snapshot.state, isSnapshot: true))
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
            deliver(merger.live(ReactorViewState(reactorID: reactorID, envelope: state.envelope, state: state.state, isSnapshot: false)))
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
