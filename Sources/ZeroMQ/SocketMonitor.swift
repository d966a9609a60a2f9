import CZeroMQ
import Foundation

/// A connection event of a monitored socket.
public struct MonitorEvent: Sendable, Hashable, CustomStringConvertible {
    /// What happened.
    public enum Kind: UInt16, Sendable, Hashable, CaseIterable {
        case connected = 0x0001
        case connectDelayed = 0x0002
        case connectRetried = 0x0004
        case listening = 0x0008
        case bindFailed = 0x0010
        case accepted = 0x0020
        case acceptFailed = 0x0040
        case closed = 0x0080
        case closeFailed = 0x0100
        case disconnected = 0x0200
        case monitorStopped = 0x0400
        case handshakeFailedNoDetail = 0x0800
        case handshakeSucceeded = 0x1000
        case handshakeFailedProtocol = 0x2000
        case handshakeFailedAuth = 0x4000
    }

    /// What happened; `nil` for an event this version does not know.
    public var kind: Kind?
    /// The raw event code.
    public var code: UInt16
    /// The event's value: a file descriptor, an errno, a reconnect interval, or a ZAP status code.
    public var value: UInt32
    /// The endpoint concerned.
    public var endpoint: String

    public var description: String {
        "\(kind.map { "\($0)" } ?? "event 0x\(String(code, radix: 16))") \(endpoint) (\(value))"
    }
}

/// Receives the connection events of one socket (`zmq_socket_monitor`).
///
/// It owns a PAIR socket, so it belongs to the thread of the socket it watches.
public final class SocketMonitor {
    /// The PAIR socket events arrive on; add it to a ``Poller`` to wait for events with other sockets.
    public let socket: Socket

    /// Starts monitoring `target` for the given kinds of event (all by default).
    public init(
        watching target: Socket, context: Context, events: Set<MonitorEvent.Kind> = Set(MonitorEvent.Kind.allCases)
    ) throws(ZMQError) {
        let endpoint = "inproc://monitor-\(UUID().uuidString)"
        let mask = events.reduce(Int32(0)) { $0 | Int32($1.rawValue) }
        let handle = try target.openHandle("monitor")
        _ = try retryingInterrupts("monitor \(target.type) socket") { zmq_socket_monitor(handle, endpoint, mask) }
        socket = try context.socket(.pair)
        try socket.setOption(.linger(0))
        try socket.connect(endpoint)
    }

    /// The next event, or `nil` when none arrives in time.
    public func next(mode: ReceiveMode = .blocking) throws(ZMQError) -> MonitorEvent? {
        var frames: [[UInt8]] = []
        guard try socket.receive(into: &frames, mode: mode) else { return nil }
        guard frames.count == 2, frames[0].count == 6 else {
            throw ZMQError(
                operation: "read monitor event", message: "unexpected monitor message of \(frames.count) frames")
        }
        // libzmq writes the event code and value in host byte order.
        let code = frames[0].withUnsafeBytes { $0.loadUnaligned(fromByteOffset: 0, as: UInt16.self) }
        let value = frames[0].withUnsafeBytes { $0.loadUnaligned(fromByteOffset: 2, as: UInt32.self) }
        return MonitorEvent(
            kind: MonitorEvent.Kind(rawValue: code), code: code, value: value,
            endpoint: String(decoding: frames[1], as: UTF8.self))
    }

    /// Waits for the first event of `kind`, skipping others, until `timeout` milliseconds pass.
    public func waitFor(_ kind: MonitorEvent.Kind, timeout milliseconds: Int) throws(ZMQError) -> MonitorEvent? {
        let deadline = ContinuousClock.now.advanced(by: .milliseconds(milliseconds))
        while true {
            let left = ContinuousClock.now.duration(to: deadline)
            guard left > .zero else { return nil }
            guard let event = try next(mode: .within(left)) else { return nil }
            if event.kind == kind { return event }
        }
    }
}

@available(*, unavailable, message: "a monitor belongs to the thread of the socket it watches")
extension SocketMonitor: Sendable {}

/// libzmq's built-in forwarder (`zmq_proxy_steerable`).
public enum Proxy {
    /// Forwards messages between `frontend` and `backend` (both ways), copying each to `capture`,
    /// until `control` receives `TERMINATE` or the context shuts down.
    public static func run(
        frontend: Socket, backend: Socket, capture: Socket? = nil, control: Socket? = nil
    ) throws(ZMQError) {
        let front = try frontend.openHandle("proxy")
        let back = try backend.openHandle("proxy")
        let tap = try capture?.openHandle("proxy")
        let steer = try control?.openHandle("proxy")
        do {
            _ = try retryingInterrupts("proxy") { zmq_proxy_steerable(front, back, tap, steer) }
        } catch  where error.isContextTerminated {
            return
        }
    }
}
