import CZeroMQ

/// What a poll waits for.
public struct PollEvents: OptionSet, Sendable, Hashable {
    public let rawValue: Int16
    public init(rawValue: Int16) { self.rawValue = rawValue }
    /// A message (or bytes, for a file descriptor) can be read.
    public static let readable = PollEvents(rawValue: Int16(ZMQ_POLLIN))
    /// A message can be sent without blocking.
    public static let writable = PollEvents(rawValue: Int16(ZMQ_POLLOUT))
}

/// Waits on several sockets (and plain file descriptors) at once.
///
/// Like its sockets, a poller belongs to one thread. It keeps its sockets alive.
public final class Poller {
    private var items: [zmq_pollitem_t] = []
    private var sockets: [Socket?] = []

    public init() {}

    /// Adds a socket; returns its index for ``events(at:)``.
    @discardableResult
    public func add(_ socket: Socket, events: PollEvents = .readable) throws(ZMQError) -> Int {
        let handle = try socket.openHandle("poll")
        items.append(zmq_pollitem_t(socket: handle, fd: -1, events: events.rawValue, revents: 0))
        sockets.append(socket)
        return items.count - 1
    }

    /// Adds a file descriptor (e.g. a pipe used to wake the poll loop); returns its index.
    @discardableResult
    public func add(fileDescriptor: Int32, events: PollEvents = .readable) -> Int {
        items.append(zmq_pollitem_t(socket: nil, fd: fileDescriptor, events: events.rawValue, revents: 0))
        sockets.append(nil)
        return items.count - 1
    }

    /// Changes what the item at `index` waits for.
    public func setEvents(_ events: PollEvents, at index: Int) {
        items[index].events = events.rawValue
    }

    /// Waits until an item is ready or `timeout` milliseconds pass (-1: forever).
    /// - Returns: how many items are ready.
    @discardableResult
    public func poll(timeout milliseconds: Int) throws(ZMQError) -> Int {
        for socket in sockets where socket?.isClosed == true {
            throw ZMQError(code: ENOTSOCK, operation: "poll a closed \(socket!.type) socket")
        }
        let count = items.count
        return Int(
            try items.withUnsafeMutableBufferPointer { buffer throws(ZMQError) in
                try retryingInterrupts("poll") { zmq_poll(buffer.baseAddress, Int32(count), milliseconds) }
            })
    }

    /// What the item at `index` is ready for after the last ``poll(timeout:)``.
    public func events(at index: Int) -> PollEvents {
        PollEvents(rawValue: items[index].revents)
    }

    /// Whether the item at `index` is readable after the last ``poll(timeout:)``.
    public func isReadable(_ index: Int) -> Bool {
        events(at: index).contains(.readable)
    }
}

@available(*, unavailable, message: "a poller belongs to the thread that owns its sockets")
extension Poller: Sendable {}
