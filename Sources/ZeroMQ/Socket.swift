import CZeroMQ

/// How a receive waits for a message.
public enum ReceiveMode: Sendable, Hashable {
    /// Wait until a message arrives (or the context shuts down).
    case blocking
    /// Return at once when nothing is queued.
    case nonBlocking
    /// Wait at most this many milliseconds.
    case timeout(milliseconds: Int)
}

extension ReceiveMode {
    /// Wait at most `duration`, rounded up to whole milliseconds (a positive wait never becomes 0).
    public static func within(_ duration: Duration) -> ReceiveMode {
        let (seconds, attoseconds) = duration.components
        guard seconds >= 0, duration > .zero else { return .nonBlocking }
        let milliseconds = seconds * 1000 + (attoseconds + 999_999_999_999_999) / 1_000_000_000_000_000
        return .timeout(milliseconds: Int(clamping: milliseconds))
    }
}

extension Duration {
    /// The duration in whole milliseconds, rounded down: what libzmq's timeouts take.
    public var wholeMilliseconds: Int {
        let (seconds, attoseconds) = components
        return Int(clamping: seconds * 1000 + attoseconds / 1_000_000_000_000_000)
    }
}

/// How a send waits for room in the queue.
public enum SendMode: Sendable, Hashable {
    /// Wait until the message is queued (or the socket's send timeout passes).
    case blocking
    /// Return `false` at once when the message cannot be queued (high-water mark, no peer).
    case nonBlocking
}

/// One libzmq socket, owned by one thread.
///
/// libzmq sockets are not thread-safe, so `Socket` is not `Sendable`: create it on the thread
/// (or in the task) that uses it. It closes in `deinit`; ``close()`` closes it earlier and is
/// safe to call twice. Any use after close throws ``ZMQError`` rather than touching freed memory.
public final class Socket {
    /// The kind of socket.
    public let type: SocketType
    private let context: Context
    private var handle: UnsafeMutableRawPointer?

    init(context: Context, type: SocketType) throws(ZMQError) {
        guard let handle = zmq_socket(context.handle, type.rawValue) else {
            throw ZMQError(code: CZeroMQ_errno(), operation: "create \(type) socket")
        }
        self.context = context
        self.type = type
        self.handle = handle
        try setOption(.linger(context.defaultLinger))
        try setOption(.connectTimeout(context.defaultConnectTimeout))
    }

    deinit {
        if let handle { zmq_close(handle) }
    }

    /// Closes the socket; pending outgoing messages may still leave during its linger.
    public func close() {
        if let handle {
            zmq_close(handle)
            self.handle = nil
        }
    }

    /// Whether ``close()`` was called.
    public var isClosed: Bool { handle == nil }

    func openHandle(_ operation: @autoclosure () -> String) throws(ZMQError) -> UnsafeMutableRawPointer {
        guard let handle else { throw ZMQError(code: ENOTSOCK, operation: "\(operation()) on a closed \(type) socket") }
        return handle
    }

    // MARK: Endpoints

    /// Binds to `endpoint` (`tcp://127.0.0.1:5555`, `ipc:///tmp/x`, `inproc://name`, `tcp://127.0.0.1:*`).
    public func bind(_ endpoint: String) throws(ZMQError) {
        let handle = try openHandle("bind \(endpoint)")
        _ = try retryingInterrupts("bind \(type) to \(endpoint)") { zmq_bind(handle, endpoint) }
    }

    /// Connects to `endpoint`; libzmq keeps reconnecting in the background.
    public func connect(_ endpoint: String) throws(ZMQError) {
        let handle = try openHandle("connect \(endpoint)")
        _ = try retryingInterrupts("connect \(type) to \(endpoint)") { zmq_connect(handle, endpoint) }
    }

    /// Stops listening on `endpoint`.
    public func unbind(_ endpoint: String) throws(ZMQError) {
        let handle = try openHandle("unbind \(endpoint)")
        _ = try retryingInterrupts("unbind \(type) from \(endpoint)") { zmq_unbind(handle, endpoint) }
    }

    /// Drops the connection to `endpoint`.
    public func disconnect(_ endpoint: String) throws(ZMQError) {
        let handle = try openHandle("disconnect \(endpoint)")
        _ = try retryingInterrupts("disconnect \(type) from \(endpoint)") { zmq_disconnect(handle, endpoint) }
    }

    /// The endpoint last bound, with wildcards resolved (e.g. the port chosen for `tcp://127.0.0.1:*`).
    public var lastEndpoint: String {
        get throws(ZMQError) { try stringOption(ZMQ_LAST_ENDPOINT, name: "lastEndpoint") }
    }

    // MARK: Options

    /// Sets one option.
    public func setOption(_ option: SocketOption) throws(ZMQError) {
        let handle = try openHandle("set \(option.name)")
        let code = option.code
        _ = try retryingInterrupts("set \(option.name) on \(type) socket") {
            switch option.value {
            case .int32(var value):
                return zmq_setsockopt(handle, code, &value, MemoryLayout<Int32>.size)
            case .int64(var value):
                return zmq_setsockopt(handle, code, &value, MemoryLayout<Int64>.size)
            case .bytes(let bytes):
                return bytes.withUnsafeBytes { zmq_setsockopt(handle, code, $0.baseAddress, $0.count) }
            }
        }
    }

    /// Sets several options in order.
    public func setOptions(_ options: [SocketOption]) throws(ZMQError) {
        for option in options { try setOption(option) }
    }

    func intOption(_ code: Int32, name: String) throws(ZMQError) -> Int32 {
        let handle = try openHandle("get \(name)")
        var value: Int32 = 0
        var size = MemoryLayout<Int32>.size
        _ = try retryingInterrupts("get \(name)") { zmq_getsockopt(handle, code, &value, &size) }
        return value
    }

    func stringOption(_ code: Int32, name: String) throws(ZMQError) -> String {
        let handle = try openHandle("get \(name)")
        var buffer = [UInt8](repeating: 0, count: 1024)
        var size = buffer.count
        _ = try retryingInterrupts("get \(name)") { zmq_getsockopt(handle, code, &buffer, &size) }
        let end = buffer[..<size].firstIndex(of: 0) ?? size
        return String(decoding: buffer[..<end], as: UTF8.self)
    }

    /// Messages queued per peer before sends wait or drop (`ZMQ_SNDHWM`).
    public var sendHighWaterMark: Int32 {
        get throws(ZMQError) { try intOption(ZMQ_SNDHWM, name: "sendHighWaterMark") }
    }

    /// How long a TCP connect may take before libzmq gives it up and tries again, in
    /// milliseconds (`ZMQ_CONNECT_TIMEOUT`; 0: the kernel's own timeout).
    public var connectTimeout: Int32 {
        get throws(ZMQError) { try intOption(ZMQ_CONNECT_TIMEOUT, name: "connectTimeout") }
    }

    /// Messages queued per peer on receipt before the peer's sends wait (`ZMQ_RCVHWM`).
    public var receiveHighWaterMark: Int32 {
        get throws(ZMQError) { try intOption(ZMQ_RCVHWM, name: "receiveHighWaterMark") }
    }

    /// The security mechanism in use: `NULL`, `PLAIN` or `CURVE`.
    public var mechanism: String {
        get throws(ZMQError) {
            switch try intOption(ZMQ_MECHANISM, name: "mechanism") {
            case ZMQ_PLAIN: "PLAIN"
            case ZMQ_CURVE: "CURVE"
            default: "NULL"
            }
        }
    }

    // MARK: Sending

    /// Sends one frame; `more` says another frame of the same message follows.
    /// - Returns: `false` when a non-blocking send would have blocked.
    @discardableResult
    public func send(
        _ bytes: UnsafeRawBufferPointer, more: Bool = false, mode: SendMode = .blocking
    ) throws(ZMQError) -> Bool {
        let handle = try openHandle("send")
        var flags: Int32 = more ? ZMQ_SNDMORE : 0
        if mode == .nonBlocking { flags |= ZMQ_DONTWAIT }
        let sent = try retryingInterruptsOrWouldBlock("send on \(type) socket") {
            zmq_send(handle, bytes.baseAddress, bytes.count, flags)
        }
        return sent != nil
    }

    /// Sends one frame from any contiguous bytes.
    @discardableResult
    public func send(_ bytes: [UInt8], more: Bool = false, mode: SendMode = .blocking) throws(ZMQError) -> Bool {
        try bytes.withUnsafeBytes { buffer in
            Result { () throws(ZMQError) in try send(buffer, more: more, mode: mode) }
        }.get()
    }

    /// Sends one text frame (UTF-8).
    @discardableResult
    public func send(_ text: String, more: Bool = false, mode: SendMode = .blocking) throws(ZMQError) -> Bool {
        try send(Array(text.utf8), more: more, mode: mode)
    }

    /// Sends a whole multipart message. libzmq delivers it atomically: all frames or none.
    /// - Returns: `false` when a non-blocking send would have blocked; nothing was sent then.
    @discardableResult
    public func send(message: some FrameSource, mode: SendMode = .blocking) throws(ZMQError) -> Bool {
        let count = message.frameCount
        precondition(count > 0, "a message has at least one frame")
        for index in 0..<count {
            let more = index < count - 1
            // Only the first frame can meet the high-water mark; later ones follow it.
            let frameMode: SendMode = index == 0 ? mode : .blocking
            let sent = try message.withFrameBytes(index) { bytes in
                Result { () throws(ZMQError) in try send(bytes, more: more, mode: frameMode) }
            }.get()
            if !sent { return false }
        }
        return true
    }

    // MARK: Receiving

    /// Receives one whole multipart message into `buffer`, replacing its previous content.
    /// - Returns: `false` when nothing arrived (non-blocking, or the timeout passed).
    public func receive(into buffer: inout some ReceiveBuffer, mode: ReceiveMode = .blocking) throws(ZMQError) -> Bool {
        let handle = try openHandle("receive")
        var firstFlags: Int32 = 0
        switch mode {
        case .blocking:
            break
        case .nonBlocking:
            firstFlags = ZMQ_DONTWAIT
        case .timeout(let milliseconds):
            guard try waitReadable(handle, milliseconds: milliseconds) else { return false }
            firstFlags = ZMQ_DONTWAIT
        }
        var message = zmq_msg_t()
        zmq_msg_init(&message)
        defer { zmq_msg_close(&message) }
        guard
            try retryingInterruptsOrWouldBlock(
                "receive on \(type) socket", { zmq_msg_recv(&message, handle, firstFlags) }) != nil
        else {
            return false
        }
        buffer.removeAllFrames()
        while true {
            buffer.appendFrame(UnsafeRawBufferPointer(start: zmq_msg_data(&message), count: zmq_msg_size(&message)))
            guard zmq_msg_more(&message) == 1 else { return true }
            // The rest of a message arrives with its first frame, so this never waits.
            _ = try retryingInterrupts("receive next frame on \(type) socket") { zmq_msg_recv(&message, handle, 0) }
        }
    }

    /// Receives one whole multipart message as an array of frames, or `nil` when nothing arrived.
    public func receiveMessage(mode: ReceiveMode = .blocking) throws(ZMQError) -> [[UInt8]]? {
        var frames: [[UInt8]] = []
        return try receive(into: &frames, mode: mode) ? frames : nil
    }

    private func waitReadable(_ handle: UnsafeMutableRawPointer, milliseconds: Int) throws(ZMQError) -> Bool {
        var item = zmq_pollitem_t(socket: handle, fd: -1, events: Int16(ZMQ_POLLIN), revents: 0)
        let ready = try retryingInterrupts("poll \(type) socket") { zmq_poll(&item, 1, milliseconds) }
        return ready > 0
    }

    /// Whether a message can be received now without blocking.
    public var isReadable: Bool {
        get throws(ZMQError) { try intOption(ZMQ_EVENTS, name: "events") & Int32(ZMQ_POLLIN) != 0 }
    }

    /// Whether a message can be sent now without blocking.
    public var isWritable: Bool {
        get throws(ZMQError) { try intOption(ZMQ_EVENTS, name: "events") & Int32(ZMQ_POLLOUT) != 0 }
    }
}

@available(*, unavailable, message: "libzmq sockets are not thread-safe: create a socket on the thread that uses it")
extension Socket: Sendable {}
