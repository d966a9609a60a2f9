import CZeroMQ

/// A libzmq context: the owner of I/O threads and the scope of `inproc://` endpoints.
///
/// A context is thread-safe and may be shared; its sockets are not. Every socket keeps its
/// context alive, so the context is terminated (in `deinit`) only after its last socket closed.
public final class Context: Sendable {
    // A raw pointer is not Sendable, but libzmq documents contexts as thread-safe.
    nonisolated(unsafe) let handle: UnsafeMutableRawPointer
    /// The linger every new socket starts with, in milliseconds. libzmq's default (-1, wait
    /// forever) can hang a process at exit, so FlowBus bounds it.
    public let defaultLinger: Int32
    /// The `ZMQ_CONNECT_TIMEOUT` every new socket starts with, in milliseconds. libzmq's default
    /// (0) leaves a TCP connect to a machine that is cut off in the kernel's SYN retries for about
    /// two minutes, during which it is not tried again; FlowBus bounds it, so a peer that comes
    /// back is reached within a reconnect interval of this.
    public let defaultConnectTimeout: Int32

    /// The connect timeout of FlowBus's sockets, in milliseconds: a TCP handshake takes a round
    /// trip, and this is tens of them on the slowest links.
    public static let flowBusConnectTimeout: Int32 = 2000

    /// Creates a context.
    /// - Parameters:
    ///   - ioThreads: libzmq I/O threads (one moves more than a million small messages a second).
    ///   - defaultLinger: how long a closed socket may keep trying to deliver pending messages.
    ///   - defaultConnectTimeout: how long a TCP connect may take before it is given up and tried
    ///     again; 0 leaves it to the kernel.
    public init(
        ioThreads: Int32 = 1, defaultLinger: Int32 = 1000, defaultConnectTimeout: Int32 = Context.flowBusConnectTimeout
    ) throws(ZMQError) {
        guard let handle = zmq_ctx_new() else {
            throw ZMQError(code: CZeroMQ_errno(), operation: "zmq_ctx_new")
        }
        self.handle = handle
        self.defaultLinger = defaultLinger
        self.defaultConnectTimeout = defaultConnectTimeout
        if ioThreads != 1 {
            _ = try retryingInterrupts("set io threads") { zmq_ctx_set(handle, ZMQ_IO_THREADS, ioThreads) }
        }
    }

    /// Makes every blocking call on this context's sockets return with ETERM
    /// (``ZMQError/isContextTerminated``), so the threads that own them can close them and leave.
    public func shutdown() {
        _ = zmq_ctx_shutdown(handle)
    }

    deinit {
        while zmq_ctx_term(handle) != 0 && CZeroMQ_errno() == EINTR {}
    }

    /// Creates a socket of `type` owned by the caller.
    public func socket(_ type: SocketType) throws(ZMQError) -> Socket {
        try Socket(context: self, type: type)
    }
}

/// Facts about the libzmq this process is linked with.
public enum ZeroMQLibrary {
    /// libzmq's version, e.g. `(4, 3, 4)`.
    public static var version: (major: Int, minor: Int, patch: Int) {
        var major: Int32 = 0
        var minor: Int32 = 0
        var patch: Int32 = 0
        zmq_version(&major, &minor, &patch)
        return (Int(major), Int(minor), Int(patch))
    }

    /// libzmq's version as text, e.g. `4.3.4`.
    public static var versionString: String {
        let v = version
        return "\(v.major).\(v.minor).\(v.patch)"
    }

    /// Whether libzmq was built with a capability such as `curve` or `ipc`.
    public static func has(_ capability: String) -> Bool {
        zmq_has(capability) == 1
    }
}
