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
    private var buffer = FrameBuffer()

    /// Connects to `endpoint` and subscribes to each topic prefix (all topics when empty).
    public init(endpoint: String, topics: [String], context: Context? = nil) throws {
        self.context = try context ?? Context(defaultLinger: 0)
        socket = try self.context.socket(.sub)
        try socket.setOptions([.receiveHighWaterMark(1_000_000), .reconnectInterval(100), .reconnectIntervalMax(2000)])
        if topics.isEmpty {
            try socket.setOption(.subscribe(""))
        } else {
            for topic in topics { try socket.setOption(.subscribe(topic)) }
        }
        try socket.connect(endpoint)
    }

    /// The next message, or `nil` when none arrives within `timeout`.
    public func next(timeout: Duration?) throws -> Received? {
        let mode: ReceiveMode = timeout.map { .timeout(milliseconds: max(0, Int($0.components.seconds * 1000 + $0.components.attoseconds / 1_000_000_000_000_000))) } ?? .blocking
        guard try socket.receive(into: &buffer, mode: mode) else { return nil }
        do {
            return .message(try WireMessage.decode(from: buffer))
        } catch {
            return .malformed(error)
        }
    }

    /// Waits until the publisher is known to deliver to this subscriber: the first message of any
    /// kind (flowd sends a heartbeat every second), or `timeout`.
    public func waitUntilConnected(timeout: Duration = .seconds(5)) throws -> Received? {
        try next(timeout: timeout)
    }
}

@available(*, unavailable, message: "a subscriber owns a socket: use it from one thread")
extension BusSubscriber: Sendable {}

/// Asks `flowd` for its status on the control endpoint.
public enum StatusClient {
    /// The status map flowd returns: flows with their live trees, bindings, counters.
    public static func fetch(endpoint: String, timeout: Duration = .seconds(3)) throws -> WireParams {
        let context = try Context(defaultLinger: 0)
        let socket = try context.socket(.dealer)
        try socket.connect(endpoint)
        let request = StatusRequest(envelope: Envelope(kind: .statusRequest, sequence: 1, source: "flowctl#\(ProcessInfo.processInfo.processIdentifier)"))
        try socket.send(message: try request.encoded())
        var buffer = FrameBuffer()
        let milliseconds = Int(timeout.components.seconds * 1000)
        guard try socket.receive(into: &buffer, mode: .timeout(milliseconds: milliseconds)) else {
            throw ClientError("flowd did not answer on \(endpoint) within \(timeout): is it running? Start it with `flowd --config FILE`")
        }
        guard case .statusReply(let reply) = try WireMessage.decode(from: buffer) else {
            throw ClientError("\(endpoint) answered with something other than a status reply: is it flowd's control endpoint?")
        }
        return reply.status
    }
}
