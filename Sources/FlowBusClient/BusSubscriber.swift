import FlowBusProtocol
import FlowBusWire
import Foundation
import ZeroMQ

/// A change in whether a daemon is heard, as a client judges it from the daemon's heartbeats.
public enum LivenessChange: Sendable, Equatable {
    /// Nothing arrived, not even a heartbeat, for `silentFor`: the daemon is down or unreachable.
    /// Reported once per outage.
    case silent(silentFor: Duration)
    /// The daemon is heard again after an outage; `source` is the instance heard.
    case back(source: String)
}

/// Where a subscriber to flowd's events resumes from (PROTOCOL.md §4.6).
public struct EventResumption: Sendable, Hashable {
    /// flowd's control endpoints (every instance), where replays are asked for.
    public var control: [String]
    /// The last event sequence the subscriber has; 0: every event flowd keeps; nil: the events
    /// from the subscriber's first heartbeat on (``fromNow(control:heartbeatMilliseconds:)``).
    public var since: UInt64?
    /// flowd's heartbeat interval, for the control connection's own heartbeats.
    public var heartbeatMilliseconds: Int

    public init(control: [String], since: UInt64?, heartbeatMilliseconds: Int = 1000) {
        self.control = control
        self.since = since
        self.heartbeatMilliseconds = heartbeatMilliseconds
    }

    /// Every event from the subscriber's first heartbeat on, none missed after it (a trace, a
    /// recording, a page that shows what happens from now).
    public static func fromNow(control: [String], heartbeatMilliseconds: Int = 1000) -> EventResumption {
        EventResumption(control: control, since: nil, heartbeatMilliseconds: heartbeatMilliseconds)
    }
}

/// A replay that could not be served: flowd no longer keeps the events after `since` (its
/// oldest is `oldest`), so the subscriber goes on from the newest, `head`, having missed some.
public struct EventFallback: Sendable, Equatable {
    public var since: UInt64
    public var oldest: UInt64
    public var head: UInt64
    public var reason: String
}

/// A subscription to a FlowBus PUB endpoint (flowd's events, a reactor host's states).
///
/// Used from one thread. Messages are decoded fully; a malformed one is returned as a
/// ``Received/malformed(_:)`` value, never thrown away silently.
///
/// Given an ``EventResumption``, it receives every event of flowd's once, in order, from the
/// position given, then the live stream with no gap and no duplicate, across restarts and changes
/// of flowd instance, and after drops at flowd's high-water mark (PROTOCOL.md §4.6);
/// ``position`` is where a later subscriber resumes.
public final class BusSubscriber {
    /// One received message.
    public enum Received: Sendable {
        case message(WireMessage)
        case malformed(WireError)
    }

    /// When set, a publisher silent for this long is reported through ``onLiveness``, and again
    /// when it comes back. Publishers send heartbeats (`heartbeatMilliseconds`), so a limit of a
    /// few intervals (`heartbeatLiveness`) tells a dead publisher from a quiet one.
    public var silenceLimit: Duration? {
        didSet { publisher.silenceLimit = silenceLimit ?? .zero }
    }
    /// Called from ``next(timeout:)`` and ``waitUntilConnected(timeout:)`` when the publisher goes
    /// silent or comes back.
    public var onLiveness: ((LivenessChange) -> Void)?
    /// Whether the publisher is silent past ``silenceLimit`` now.
    public var isPublisherSilent: Bool { publisher.isSilent }
    /// Called when a replay could not be served and events were missed (take a status snapshot).
    public var onFallback: ((EventFallback) -> Void)?
    /// With an ``EventResumption``: the sequence of the last event ``next(timeout:)`` returned
    /// (after a fallback: the newest flowd had then), where a later subscriber resumes.
    public var position: UInt64? { catchUp?.delivered }
    /// With an ``EventResumption``: replays asked for, and those that fell back.
    public var replayCount: Int { catchUp?.machine.replays ?? 0 }
    public var fallbackCount: Int { catchUp?.machine.fallbacks ?? 0 }
    /// Whether ``lastFrames`` is kept (a recorder stores messages as they were published).
    package var keepsFrames = false
    /// With ``keepsFrames``: the frames of the message ``next(timeout:)`` returned last, as its
    /// publisher sent them (a replayed event's from the replay).
    package private(set) var lastFrames: FrameBuffer?

    private let context: Context
    private let socket: Socket
    private let includeHeartbeats: Bool
    private var buffer = FrameBuffer()
    private var early: [(received: Received, frames: FrameBuffer?)] = []
    private var publisher = PeerLiveness(silenceLimit: .zero, now: .now)
    private var catchUp: EventCatchUp?
    private var poller: Poller?
    /// With an ``EventResumption``: the SUB's new connections (another instance, or a break).
    private var connections: SocketMonitor?

    /// Connects to `endpoint` and subscribes to each topic prefix (all topics when empty).
    /// Heartbeats (`hb/`) are always subscribed, to know the publisher is there, and returned
    /// only when `includeHeartbeats` is set or asked for in `topics`. `receiveHighWaterMark`
    /// bounds what waits to be read: beyond it the publisher drops (and reports `dropped-hwm`).
    public convenience init(
        endpoint: String, topics: [String], includeHeartbeats: Bool = false, curve: CurveKeys = CurveKeys(),
        context: Context? = nil, receiveHighWaterMark: Int32 = 1_000_000
    ) throws {
        try self.init(
            endpoints: [endpoint], topics: topics, includeHeartbeats: includeHeartbeats, curve: curve, context: context,
            receiveHighWaterMark: receiveHighWaterMark)
    }

    /// Connects to every endpoint in `endpoints`: flowd's events on each of its instances (only
    /// the active one publishes; when another takes over, its messages arrive on the same
    /// subscription). Otherwise as ``init(endpoint:topics:includeHeartbeats:curve:context:receiveHighWaterMark:)``.
    public init(
        endpoints: [String], topics: [String], includeHeartbeats: Bool = false, curve: CurveKeys = CurveKeys(),
        context: Context? = nil, receiveHighWaterMark: Int32 = 1_000_000, resuming resumption: EventResumption? = nil
    ) throws {
        self.context = try context ?? Context(defaultLinger: 0)
        self.includeHeartbeats = includeHeartbeats || topics.isEmpty || topics.contains { "hb/".hasPrefix($0) }
        socket = try self.context.socket(.sub)
        try socket.setOptions([.receiveHighWaterMark(receiveHighWaterMark), .reconnectInterval(100)])
        try socket.setOptions(Self.followingInstances(endpoints.count))
        for topic in Set(topics.isEmpty ? [""] : topics + ["hb/"] + Self.resumingTopics(resumption)) {
            try socket.setOption(.subscribe(topic))
        }
        if resumption != nil {
            connections = try SocketMonitor(watching: socket, context: self.context, events: [.connected])
        }
        for endpoint in endpoints {
            try curve.secureClient(socket, endpoint: endpoint)
            try socket.connect(endpoint)
        }
        if let resumption {
            let catchUp = try EventCatchUp(
                context: self.context, control: resumption.control, topics: topics, since: resumption.since,
                curve: curve, heartbeatMilliseconds: resumption.heartbeatMilliseconds)
            let poller = Poller()
            _ = try poller.add(socket)
            _ = try poller.add(catchUp.dealer)
            self.catchUp = catchUp
            self.poller = poller
        }
    }

    /// What a resuming subscriber subscribes to beside its topics: flowd's reports of the events it
    /// dropped at the high-water mark name those to ask for again (PROTOCOL.md §4.6), whatever the
    /// topics; they are delivered only when the topics cover them.
    package static func resumingTopics(_ resumption: EventResumption?) -> [String] {
        resumption == nil ? [] : [Topic.diagnostic(.droppedHWM)]
    }

    /// Socket options of a subscriber to `count` publishers. With several flowd instances, a new
    /// active one is found within a quarter second, and ZMTP heartbeats drop the connection to
    /// one whose machine vanished (a SUB sends nothing otherwise, so it would never notice).
    public static func followingInstances(_ count: Int) -> [SocketOption] {
        count > 1
            ? [.reconnectIntervalMax(250), .heartbeatInterval(1000), .heartbeatTimeout(3000)]
            : [.reconnectIntervalMax(2000)]
    }

    /// The next message, or `nil` when none arrives within `timeout` (`nil`: wait forever).
    public func next(timeout: Duration?) throws -> Received? {
        if !early.isEmpty {
            let (received, frames) = early.removeFirst()
            lastFrames = frames
            return received
        }
        let deadline = timeout.map { ContinuousClock.now + $0 }
        while true {
            if let catchUp, let caught = catchUp.takeReady() { return deliver(caught) }
            guard let received = try receiveOne(until: deadline) else { return nil }
            if case .message(.heartbeat) = received, !includeHeartbeats { continue }
            return received
        }
    }

    /// Waits for the publisher's first heartbeat: from then on nothing it publishes is missed.
    /// Messages that arrive before it are kept for ``next(timeout:)``.
    /// - Returns: whether the publisher was reached in time.
    public func waitUntilConnected(timeout: Duration = .seconds(5)) throws -> Bool {
        let deadline = ContinuousClock.now + timeout
        while let received = try receiveOne(until: deadline) {
            if case .message(.heartbeat) = received { return true }
            early.append((received, lastFrames))
        }
        return false
    }

    /// The sockets to poll for this subscriber's input (its SUB, and the DEALER of a resumption),
    /// for a caller that waits on several sources and reads each with ``next(timeout:)`` and `.zero`.
    package var pollableSockets: [Socket] { [socket] + (catchUp.map { [$0.dealer] } ?? []) }

    /// Whether nothing is held back for a replay: what arrived is ready to be read. Always true
    /// without an ``EventResumption``.
    public var isCaughtUp: Bool { catchUp.map { $0.machine.phase == .live } ?? true }

    /// With an ``EventResumption``: reads until the replay from the position given reached the
    /// head and the live stream took over, at most `timeout`; what arrived meanwhile is kept for
    /// ``next(timeout:)``.
    /// - Returns: whether it caught up in time.
    public func waitUntilCaughtUp(timeout: Duration = .seconds(10)) throws -> Bool {
        guard let catchUp else { return try waitUntilConnected(timeout: timeout) }
        let deadline = ContinuousClock.now + timeout
        while catchUp.machine.phase != .live {
            guard let received = try receiveOne(until: deadline) else { return false }
            if case .message(.heartbeat) = received, !includeHeartbeats { continue }
            early.append((received, lastFrames))
        }
        while let caught = catchUp.takeReady() { early.append((.message(caught.message), caught.frames)) }
        return true
    }

    private func deliver(_ caught: EventCatchUp.Caught) -> Received {
        lastFrames = caught.frames
        return .message(caught.message)
    }

    private func receiveOne(until deadline: ContinuousClock.Instant?) throws -> Received? {
        guard let catchUp else { return try receiveLive(until: deadline) }
        // Resuming: live messages go through the catch-up, which holds, drops or delivers them,
        // and replies to replay requests come on its DEALER.
        var polled = false
        while true {
            if let caught = catchUp.takeReady() { return deliver(caught) }
            if try readReplies(of: catchUp) { continue }
            // Messages held or dropped must not keep a caller past its deadline.
            if let deadline, ContinuousClock.now >= deadline, polled { return nil }
            polled = true
            var wakeAt = deadline
            if let retry = catchUp.retryAt { wakeAt = wakeAt.map { min($0, retry) } ?? retry }
            let milliseconds = wakeAt.map { max(0, ContinuousClock.now.duration(to: $0).wholeMilliseconds) } ?? -1
            _ = try poller?.poll(timeout: milliseconds == -1 ? 1000 : min(milliseconds, 1000))
            if try readReplies(of: catchUp) { continue }
            let wasSilent = publisher.isSilent
            if let received = try receiveLive(until: .now) {
                switch received {
                case .message(let message):
                    if wasSilent { try catchUp.mayHaveMissed() }
                    // A step passed on does not tell which instance sent it: a new connection's
                    // messages wait for a replay, else they come before what the old one missed.
                    if try hasReconnected() { try catchUp.reconnected() }
                    try catchUp.received(message, frames: lastFrames)
                    if case .heartbeat = message { return received }
                    continue
                case .malformed:
                    return received
                }
            }
            if let deadline, ContinuousClock.now >= deadline { return nil }
        }
    }

    /// Whether the SUB connected to a publisher since the last call. Asked once a message was
    /// read: libzmq reports a connection before it carries anything, so its first message is not
    /// judged before it is known.
    private func hasReconnected() throws -> Bool {
        guard let connections else { return false }
        var connected = false
        while let event = try connections.next(mode: .nonBlocking) {
            if event.kind == .connected { connected = true }
        }
        return connected
    }

    /// Reads the replies to replay requests; says when one fell back.
    /// - Returns: whether one did.
    private func readReplies(of catchUp: EventCatchUp) throws -> Bool {
        guard let fallback = try catchUp.readReplies() else { return false }
        onFallback?(fallback)
        return true
    }

    private func receiveLive(until deadline: ContinuousClock.Instant?) throws -> Received? {
        while true {
            // Wake at the silence limit too, to report an outage while waiting.
            let silenceDeadline = silenceLimit == nil ? nil : publisher.silentAt
            let wakeAt =
                switch (deadline, silenceDeadline) {
                case (let deadline?, let silence?): min(deadline, silence)
                case (let deadline, let silence): deadline ?? silence
                }
            let mode: ReceiveMode
            if let wakeAt {
                let left = ContinuousClock.now.duration(to: wakeAt)
                mode = left > .zero ? .within(left) : .nonBlocking
            } else {
                mode = .blocking
            }
            if try socket.receive(into: &buffer, mode: mode) {
                let received: Received
                do {
                    received = .message(try WireMessage.decode(from: buffer))
                } catch {
                    received = .malformed(error)
                }
                lastFrames = keepsFrames ? buffer : nil
                heard(received)
                return received
            }
            let now = ContinuousClock.now
            if silenceLimit != nil, let silentFor = publisher.check(now: now) {
                onLiveness?(.silent(silentFor: silentFor))
            }
            if let deadline, now >= deadline { return nil }
        }
    }

    private func heard(_ received: Received) {
        guard publisher.heard(now: .now) else { return }
        if case .message(let message) = received {
            onLiveness?(.back(source: message.envelope.source))
        } else {
            onLiveness?(.back(source: "?"))
        }
    }
}

@available(*, unavailable, message: "a subscriber owns a socket: use it from one thread")
extension BusSubscriber: Sendable {}

/// Asks `flowd` for its status on the control endpoint.
public enum StatusClient {
    /// The status map flowd returns: flows with their live trees, bindings, counters.
    /// - Parameter params: which sections and pages to return (PROTOCOL.md §4.3, STATUS-REQUEST);
    ///   none: the default reply.
    public static func fetch(
        endpoint: String, curve: CurveKeys = CurveKeys(), timeout: Duration = .seconds(3), params: WireParams = [:]
    ) throws -> WireParams {
        try fetch(endpoints: [endpoint], curve: curve, timeout: timeout, params: params)
    }

    /// The status of whichever flowd instance in `endpoints` answers first: the active one (a
    /// standby binds nothing, so it never answers).
    /// - Parameter context: A context to make the request's sockets in; nil: one of its own (a
    ///   tool that asks often passes one, as a context starts I/O threads).
    public static func fetch(
        endpoints: [String], curve: CurveKeys = CurveKeys(), timeout: Duration = .seconds(3), params: WireParams = [:],
        context: Context? = nil
    ) throws -> WireParams {
        let answers = try ask(
            endpoints, curve: curve, timeout: timeout, params: params, afterFirst: nil, context: context)
        guard let answer = answers.first(where: { $0.outcome != nil }) else {
            throw ClientError(
                .noAnswer,
                "flowd did not answer on \(describeEither(endpoints)) within \(timeout): is it running? Start it with `flowd --config FILE`"
            )
        }
        return try answer.outcome!.get()
    }

    /// What one flowd instance answered.
    public struct Answer: Sendable {
        /// Its control endpoint.
        public var endpoint: String
        /// Its status, or why the answer is not one; nil: it did not answer.
        public var outcome: Result<WireParams, ClientError>?
    }

    /// Asks every instance in `endpoints` and reports each one's answer, in the same order:
    /// waits up to `timeout` for the first, then `grace` for the others (only the active one
    /// answers; a standby, or an instance that is down, does not).
    public static func survey(
        endpoints: [String], curve: CurveKeys = CurveKeys(), timeout: Duration = .seconds(3),
        grace: Duration = .milliseconds(200),
        params: WireParams = [:]
    ) throws -> [Answer] {
        try ask(endpoints, curve: curve, timeout: timeout, params: params, afterFirst: grace)
    }

    /// One DEALER per instance, so that each answer is known to come from its endpoint.
    private static func ask(
        _ endpoints: [String], curve: CurveKeys, timeout: Duration, params: WireParams, afterFirst grace: Duration?,
        context: Context? = nil
    ) throws -> [Answer] {
        let context = try context ?? Context(defaultLinger: 0)
        let poller = Poller()
        var sockets: [Socket] = []
        let request = try StatusRequest(
            envelope: Envelope(
                kind: .statusRequest, sequence: 1, source: "flowctl#\(ProcessInfo.processInfo.processIdentifier)"),
            params: params
        ).encoded()
        for endpoint in endpoints {
            let socket = try context.socket(.dealer)
            try curve.secureClient(socket, endpoint: endpoint)
            try socket.connect(endpoint)
            try socket.send(message: request)
            _ = try poller.add(socket)
            sockets.append(socket)
        }
        var answers = endpoints.map { Answer(endpoint: $0, outcome: nil) }
        var deadline = ContinuousClock.now + timeout
        var buffer = FrameBuffer()
        while answers.contains(where: { $0.outcome == nil }) {
            let left = ContinuousClock.now.duration(to: deadline)
            guard left > .zero else { break }
            try poller.poll(timeout: max(1, left.wholeMilliseconds))
            for (index, socket) in sockets.enumerated() where answers[index].outcome == nil && poller.isReadable(index)
            {
                guard try socket.receive(into: &buffer, mode: .nonBlocking) else { continue }
                answers[index].outcome = reading(buffer, from: endpoints[index])
                guard let grace else { return answers }
                deadline = min(deadline, .now + grace)
            }
        }
        return answers
    }

    private static func reading(_ buffer: FrameBuffer, from endpoint: String) -> Result<WireParams, ClientError> {
        switch try? WireMessage.decode(from: buffer) {
        case .statusReply(let reply)?:
            .success(reply.status)
        case .diagnostic(let refusal)?:
            .failure(ClientError(.refused, "flowd refused the status request: \(refusal.reason): \(refusal.message)"))
        default:
            .failure(
                ClientError(
                    .unexpectedReply,
                    "\(endpoint) answered with something other than a status reply: is it flowd's control endpoint?"))
        }
    }
}
