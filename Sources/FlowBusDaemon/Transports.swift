import FlowBusClient
import FlowBusConfiguration
import FlowBusProtocol
import FlowBusWire
import ZeroMQ

/// The socket under a daemon's ROUTER endpoint: a ZeroMQ ROUTER (``ZMQRouterTransport``), or
/// an in-memory one (``EmbeddedRouterTransport``) that tests feed and read.
///
/// Used by one thread. Neither call waits: a daemon never blocks on a peer.
package protocol RouterTransport: AnyObject {
    /// The socket a poller waits on; nil when there is none (embedded).
    var pollable: Socket? { get }
    /// Reads the next message into `message`. - Returns: false when none is there.
    func receive(into message: inout RoutedFrames) throws(ZMQError) -> Bool
    /// Sends `frames` to `peer`. - Returns: false when it was not sent (the peer is gone or its
    /// queue is full): the protocol tolerates it, a lost ack or refusal is sent again on a resend.
    func send(_ frames: FrameBuffer, to peer: [UInt8]) throws(ZMQError) -> Bool
    /// Sends to `peer` a message that `build` makes only once the socket took the peer's routing
    /// id: a costly reply is not built for a peer that is gone (a mandatory ROUTER fails then).
    /// - Returns: false when the peer is gone or not reading; nothing was built.
    func send(to peer: [UInt8], building build: () -> FrameBuffer) throws(ZMQError) -> Bool
    /// Closes it; what it still queues may leave within `linger` milliseconds.
    func close(linger: Int32)
}

/// The socket under a daemon's XPUB endpoint: a ZeroMQ XPUB (``ZMQPublisherTransport``), or an
/// in-memory one (``EmbeddedPublisherTransport``).
package protocol PublisherTransport: AnyObject {
    /// The socket a poller waits on (readable when subscriptions arrive); nil when there is none.
    var pollable: Socket? { get }
    /// Sends one message. - Returns: false when the socket refused it (its high-water mark).
    func send(_ frames: some FrameSource) throws(ZMQError) -> Bool
    /// Reads the next subscription message (`\u{1}topic` or `\u{0}topic`). - Returns: false when none.
    func receiveSubscription(into frames: inout FrameBuffer) throws(ZMQError) -> Bool
    /// Closes it; what it still queues may leave within `linger` milliseconds.
    func close(linger: Int32)
}

/// A bound ZeroMQ ROUTER socket.
package final class ZMQRouterTransport: RouterTransport {
    package let socket: Socket
    package var pollable: Socket? { socket }

    /// A ROUTER for `endpoint` of a topology with `limits`, bound once made. `mandatory`: a reply
    /// to a peer that went away fails instead of vanishing (the control endpoint builds no reply
    /// for it).
    /// - Throws: when `endpoint` cannot be bound (`what` names it in the message).
    package init(
        context: Context, endpoint: String, what: String, limits: FlowBusConfig.Limits, curve: CurveKeys,
        mandatory: Bool = false, linger: Int32 = 0
    ) throws {
        socket = try context.socket(.router)
        var options: [SocketOption] = [
            // Frames between the configured limit and this ceiling are refused as `oversize` with a
            // diagnostic; only larger ones are cut off by libzmq before they are allocated.
            .maxMessageSize(limits.socketCeiling),
            .receiveHighWaterMark(Int32(clamping: limits.receiveHighWaterMark)),
            .sendHighWaterMark(Int32(clamping: limits.highWaterMark)),
            .linger(linger),
        ]
        if mandatory { options.append(.routerMandatory(true)) }
        try socket.setOptions(options)
        try curve.secureServer(socket, endpoint: endpoint)
        try prepareToBind(endpoint, what: what)
        try socket.bind(endpoint)
        restrictPermissions(ofIPCEndpoint: endpoint)
    }

    package func receive(into message: inout RoutedFrames) throws(ZMQError) -> Bool {
        try socket.receive(into: &message, mode: .nonBlocking)
    }

    package func send(_ frames: FrameBuffer, to peer: [UInt8]) throws(ZMQError) -> Bool {
        // The routing id goes first: if the peer is gone (mandatory) or not reading, that fails and
        // nothing follows; otherwise the rest completes the message.
        guard try socket.send(peer, more: true, mode: .nonBlocking) else { return false }
        return try socket.send(message: frames, mode: .nonBlocking)
    }

    package func send(to peer: [UInt8], building build: () -> FrameBuffer) throws(ZMQError) -> Bool {
        do {
            guard try socket.send(peer, more: true, mode: .nonBlocking) else { return false }
        } catch  where error.isHostUnreachable {
            return false
        }
        // Only the first frame of a message can meet the high-water mark: the rest follow it.
        return try socket.send(message: build(), mode: .nonBlocking)
    }

    package func close(linger: Int32) {
        try? socket.setOption(.linger(linger))
        socket.close()
    }
}

/// A ZeroMQ XPUB socket that reports drops instead of dropping silently.
package final class ZMQPublisherTransport: PublisherTransport {
    package let socket: Socket
    private let endpoint: String
    private let what: String
    package var pollable: Socket? { socket }

    /// An XPUB for `endpoint`; it serves once ``bind()``.
    package init(
        context: Context, endpoint: String, what: String, limits: FlowBusConfig.Limits, curve: CurveKeys
    ) throws {
        self.endpoint = endpoint
        self.what = what
        socket = try context.socket(.xpub)
        try socket.setOptions([
            .sendHighWaterMark(Int32(clamping: limits.highWaterMark)),
            // At the mark XPUB returns EAGAIN instead of dropping silently, so drops are counted.
            .xpubNoDrop(true),
            .linger(200),
        ])
        try curve.secureServer(socket, endpoint: endpoint)
    }

    /// Binds the endpoint: subscribers reach it from now on.
    package func bind() throws {
        try prepareToBind(endpoint, what: what)
        try socket.bind(endpoint)
        restrictPermissions(ofIPCEndpoint: endpoint)
    }

    package func send(_ frames: some FrameSource) throws(ZMQError) -> Bool {
        try socket.send(message: frames, mode: .nonBlocking)
    }

    package func receiveSubscription(into frames: inout FrameBuffer) throws(ZMQError) -> Bool {
        try socket.receive(into: &frames, mode: .nonBlocking)
    }

    package func close(linger: Int32) {
        try? socket.setOption(.linger(linger))
        socket.close()
    }
}

/// An in-memory ROUTER for deterministic tests: messages are queued in with ``deliver(_:from:)``
/// and what the daemon sent is read back with ``takeSent()``.
package final class EmbeddedRouterTransport: RouterTransport {
    /// A message the daemon sent: its peer and frames.
    package struct Sent: Sendable {
        package var peer: [UInt8]
        package var frames: FrameBuffer

        /// The message decoded; nil when it does not decode.
        package var message: WireMessage? { try? WireMessage.decode(from: frames) }
    }

    private var inbound: [(peer: [UInt8], frames: FrameBuffer)] = []
    private var inboundHead = 0
    private var sent: [Sent] = []
    /// Peers whose replies are refused, as a gone peer's are on a mandatory ROUTER.
    package var gonePeers: Set<[UInt8]> = []
    package private(set) var isClosed = false
    package var pollable: Socket? { nil }

    package init() {}

    /// Queues `frames` as a message from `peer`.
    package func deliver(_ frames: FrameBuffer, from peer: [UInt8]) {
        inbound.append((peer, frames))
    }

    /// Queues `message` from `peer`, encoded.
    package func deliver(_ message: some WireMessageEncodable, from peer: [UInt8]) throws {
        deliver(try message.encoded(), from: peer)
    }

    /// Messages queued and not read yet.
    package var pending: Int { inbound.count - inboundHead }

    /// What the daemon sent since the last call, in order.
    package func takeSent() -> [Sent] {
        defer { sent.removeAll() }
        return sent
    }

    package func receive(into message: inout RoutedFrames) throws(ZMQError) -> Bool {
        guard inboundHead < inbound.count else { return false }
        let next = inbound[inboundHead]
        inboundHead += 1
        if inboundHead == inbound.count {
            inbound.removeAll(keepingCapacity: true)
            inboundHead = 0
        }
        message.removeAllFrames()
        next.peer.withUnsafeBytes { message.appendFrame($0) }
        for index in 0..<next.frames.frameCount {
            next.frames.withFrame(index) { message.appendFrame($0) }
        }
        return true
    }

    package func send(_ frames: FrameBuffer, to peer: [UInt8]) throws(ZMQError) -> Bool {
        guard !gonePeers.contains(peer) else { return false }
        sent.append(Sent(peer: peer, frames: frames))
        return true
    }

    package func send(to peer: [UInt8], building build: () -> FrameBuffer) throws(ZMQError) -> Bool {
        guard !gonePeers.contains(peer) else { return false }
        sent.append(Sent(peer: peer, frames: build()))
        return true
    }

    package func close(linger: Int32) {
        isClosed = true
    }
}

/// An in-memory XPUB for deterministic tests: subscriptions are given with ``subscribe(_:)``, and
/// what was published is read back with ``takePublished()``.
package final class EmbeddedPublisherTransport: PublisherTransport {
    private var subscriptions: [[UInt8]] = []
    private var published: [FrameBuffer] = []
    /// Whether sends are refused, as at the high-water mark.
    package var isFull = false
    package var pollable: Socket? { nil }

    package init() {}

    /// A subscriber subscribes to `prefix` (every topic when empty).
    package func subscribe(_ prefix: String) {
        subscriptions.append([1] + Array(prefix.utf8))
    }

    /// What was published since the last call, decoded, in order.
    package func takePublished() -> [WireMessage] {
        defer { published.removeAll() }
        return published.compactMap { try? WireMessage.decode(from: $0) }
    }

    package func send(_ frames: some FrameSource) throws(ZMQError) -> Bool {
        guard !isFull else { return false }
        var copy = FrameBuffer()
        for index in 0..<frames.frameCount { frames.withFrameBytes(index) { copy.append(frame: $0) } }
        published.append(copy)
        return true
    }

    package func receiveSubscription(into frames: inout FrameBuffer) throws(ZMQError) -> Bool {
        guard !subscriptions.isEmpty else { return false }
        let next = subscriptions.removeFirst()
        frames.removeAll(keepingCapacity: true)
        next.withUnsafeBytes { frames.append(frame: $0) }
        return true
    }

    package func close(linger: Int32) {}
}

// A held message goes to the socket straight from the store it was copied into.
extension HeldMessages.Message: FrameSource {
    package func withFrameBytes<Result>(_ index: Int, _ body: (UnsafeRawBufferPointer) -> Result) -> Result {
        withFrame(index, body)
    }
}
