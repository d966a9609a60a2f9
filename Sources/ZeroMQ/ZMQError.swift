import CZeroMQ

/// A failed libzmq call: the operation, the `errno` it left and libzmq's text for it.
public struct ZMQError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The `errno` value libzmq reported.
    public let code: Int32
    /// What FlowBus was doing, e.g. `bind ipc:///tmp/x`.
    public let operation: String
    /// `zmq_strerror(code)`.
    public let message: String

    public init(code: Int32, operation: String) {
        self.code = code
        self.operation = operation
        self.message = String(cString: zmq_strerror(code))
    }

    public init(operation: String, message: String) {
        self.code = EINVAL
        self.operation = operation
        self.message = message
    }

    /// The context was terminated while the call was blocked or pending.
    public var isContextTerminated: Bool { code == ETERM }
    /// The call would have blocked (only seen where FlowBus reports it as an error, e.g. a timed send).
    public var isWouldBlock: Bool { code == EAGAIN }
    /// The peer is not reachable (e.g. a ROUTER with `routerMandatory` and an unknown routing id).
    public var isHostUnreachable: Bool { code == EHOSTUNREACH }

    public var description: String { "\(operation): \(message) (errno \(code))" }
}

/// Calls `body` until it stops failing with EINTR; returns its result or throws a ``ZMQError``.
///
/// `@inline(never)` so errno is read right after the call, before anything else can change it.
@inline(never)
func retryingInterrupts(_ operation: @autoclosure () -> String, _ body: () -> Int32) throws(ZMQError) -> Int32 {
    while true {
        let rc = body()
        if rc >= 0 { return rc }
        let code = CZeroMQ_errno()
        if code == EINTR { continue }
        throw ZMQError(code: code, operation: operation())
    }
}

/// Like ``retryingInterrupts(_:_:)`` but maps EAGAIN to `nil` so would-block is a value, not an error.
@inline(never)
func retryingInterruptsOrWouldBlock(
    _ operation: @autoclosure () -> String, _ body: () -> Int32
) throws(ZMQError) -> Int32? {
    while true {
        let rc = body()
        if rc >= 0 { return rc }
        let code = CZeroMQ_errno()
        if code == EINTR { continue }
        if code == EAGAIN { return nil }
        throw ZMQError(code: code, operation: operation())
    }
}
