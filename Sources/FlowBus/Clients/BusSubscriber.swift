import FlowBusWire
import Foundation
import ZeroMQ

/// A subscription to a FlowBus PUB endpoint (flowd's events, a reactor host's states).
///
/// Used from one thread. Messages are decoded fully; a malformed one is returned as a
/// ``Received/malformed(_:)`` value, never thrown away silently.
public final class BusSubscriber {
    /// One received message.
    public enum Received: Sendable {
        case message(WireMessage)
        case malformed(WireError)
    }

    private let context: Context
    private let socket: Socket
    private let includeHeartbeats: Bool
    private var buffer = FrameBuffer()
    private var early: [Received] = []

    /// Connects to `endpoint` and subscribes to each topic prefix (all topics when empty).
    /// Heartbeats (`hb/`) are always subscribed, to know the publisher is there, and returned
    /// only when `includeHeartbeats` is set or asked for in `topics`.
    public init(endpoint: String, topics: [String], includeHeartbeats: Bool = false, curve: CurveKeys = CurveKeys(), context: Context? = nil) throws {
        self.context = try context ?? Context(defaultLinger: 0)
        self.includeHeartbeats = includeHeartbeats || topics.isEmpty || topics.contains { "hb/".hasPrefix($0) }
        socket = try self.context.socket(.sub)
        try socket.setOptions([.receiveHighWaterMark(1_000_000), .reconnectInterval(100), .reconnectIntervalMax(2000)])
        for topic in Set(topics.isEmpty ? [""] : topics + ["hb/"]) {
            try socket.setOption(.subscribe(topic))
        }
        try curve.secureClient(socket, endpoint: endpoint)
        try socket.connect(endpoint)
    }

    /// The next message, or `nil` when none arrives within `timeout` (`nil`: wait forever).
    public func next(timeout: Duration?) throws -> Received? {
        if !early.isEmpty { return early.removeFirst() }
        let deadline = timeout.map { ContinuousClock.now + $0 }
        while true {
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
            early.append(received)
        }
        return false
    }

    private func receiveOne(until deadline: ContinuousClock.Instant?) throws -> Received? {
        let mode: ReceiveMode
        if let deadline {
            let left = ContinuousClock.now.duration(to: deadline)
            guard left > .zero else { return nil }
            mode = .within(left)
        } else {
            mode = .blocking
        }
        guard try socket.receive(into: &buffer, mode: mode) else { return nil }
        do {
            return .message(try WireMessage.decode(from: buffer))
        } catch {
            return .malformed(error)
        }
    }
}

@available(*, unavailable, message: "a subscriber owns a socket: use it from one thread")
extension BusSubscriber: Sendable {}

/// Asks `flowd` for its status on the control endpoint.
public enum StatusClient {
    /// The status map flowd returns: flows with their live trees, bindings, counters.
    public static func fetch(endpoint: String, curve: CurveKeys = CurveKeys(), timeout: Duration = .seconds(3)) throws -> WireParams {
        let context = try Context(defaultLinger: 0)
        let socket = try context.socket(.dealer)
        try curve.secureClient(socket, endpoint: endpoint)
        try socket.connect(endpoint)
        let request = StatusRequest(envelope: Envelope(kind: .statusRequest, sequence: 1, source: "flowctl#\(ProcessInfo.processInfo.processIdentifier)"))
        try socket.send(message: try request.encoded())
        var buffer = FrameBuffer()
        guard try socket.receive(into: &buffer, mode: .within(timeout)) else {
            throw ClientError("flowd did not answer on \(endpoint) within \(timeout): is it running? Start it with `flowd --config FILE`")
        }
        guard case .statusReply(let reply) = try WireMessage.decode(from: buffer) else {
            throw ClientError("\(endpoint) answered with something other than a status reply: is it flowd's control endpoint?")
        }
        return reply.status
    }
}
