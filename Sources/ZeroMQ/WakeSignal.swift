import CZeroMQ

/// An eventfd that wakes a ``Poller`` from another thread: the way to hand work to the thread
/// that owns the sockets.
public final class WakeSignal: Sendable {
    /// The descriptor to add to a ``Poller``.
    public let fileDescriptor: Int32

    public init() {
        fileDescriptor = CZeroMQ_eventfd()
        precondition(fileDescriptor >= 0, "eventfd failed: errno \(CZeroMQ_errno())")
    }

    deinit {
        CZeroMQ_close(fileDescriptor)
    }

    /// Makes the descriptor readable until ``clear()``.
    public func signal() {
        CZeroMQ_signal(fileDescriptor)
    }

    /// Consumes pending signals.
    public func clear() {
        CZeroMQ_drain(fileDescriptor)
    }
}
