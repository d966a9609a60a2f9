import FlowBusProtocol
import FlowBusWire
import ZeroMQ

/// A DEALER that delivers one source's numbered messages to a daemon reliably: the sending side of
/// the protocol, carried out once for every sender — a ``StepPublisher`` and a reactor host's
/// ``HostStepOutlet`` to flowd's `ingress`, a ``ReactorView`` to a reactor host's `actions`.
///
/// Its ``ReliableOutbox`` decides what goes out and when (numbering, keeping until acknowledged,
/// resending on a reconnection, a new daemon instance, an `out-of-order` refusal or stalled acks);
/// this class hands its decisions to the socket. With `followsConnections`, a socket monitor
/// reports connections, so that what was in flight is resent when one comes back, and a
/// connection to a second flowd instance drops the first (``FlowdLinks``).
///
/// The encoding closures given to ``enqueue(_:resentAs:)`` run while the outbox is being changed:
/// they must not read it (the sender's source id is a `let` of its own).
///
/// Nothing here waits: ``service(now:before:after:)`` reads what is there and sends what is due; its owner
/// calls it when the socket is readable and at least once per heartbeat interval. Used from one
/// thread, like its socket.
package final class ReliableDealer {
    package let socket: Socket
    /// The socket monitor, for a poller; nil unless connections are followed.
    package let monitor: SocketMonitor?
    package private(set) var outbox: ReliableOutbox
    private var links: FlowdLinks
    private var received = FrameBuffer()
    /// Called before each message goes to the socket, with its sequence and the transmission (a
    /// view notices its snapshot request going out again as a filler). It runs while the outbox is
    /// being changed: it must not read it.
    package var willSend: (UInt64, ReliableOutbox.Transmission) -> Void = { _, _ in }
    /// Called when messages handed over before go out again, with why and how many.
    package var didResend: (ReliableOutbox.ResendReason, UInt64) -> Void = { _, _ in }
    /// Called when the socket does not take a message (no connection yet, or its queue is full):
    /// the rest waits in the outbox for the next chance.
    package var didNotTake: () -> Void = {}

    /// A DEALER of `sourceID` connected to `endpoints` (one daemon, or flowd's instances).
    /// - Parameters:
    ///   - followsConnections: Watch connections with a socket monitor (a sender to flowd); a view
    ///     tells a restarted host by its source instead (``heard(from:)``).
    ///   - heartbeatMilliseconds: The topology's heartbeat interval; with several endpoints, a
    ///     connection silent for two of them is dropped.
    ///   - last: The sequence the source gave out last (a source kept across restarts).
    package init(
        sourceID: String, endpoints: [String], curve: CurveKeys, context: Context, heartbeatMilliseconds: Int,
        maxOutstanding: Int = 10_000, linger: Int32, followsConnections: Bool, continuingAfter last: UInt64 = 0
    ) throws {
        precondition(!endpoints.isEmpty, "a sender needs its daemon's endpoint")
        outbox = ReliableOutbox(sourceID: sourceID, maxOutstanding: maxOutstanding, continuingAfter: last)
        links = FlowdLinks(endpoints: endpoints)
        socket = try context.socket(.dealer)
        try socket.setOptions([.sendHighWaterMark(100_000), .linger(linger)])
        monitor =
            followsConnections
            ? try SocketMonitor(watching: socket, context: context, events: [.connected, .disconnected]) : nil
        if try socket.connect(toFlowdInstances: endpoints, curve: curve, heartbeatMilliseconds: heartbeatMilliseconds) {
            outbox.socketQueuesUntilConnected()
        }
    }

    /// How many messages may wait for their ack before ``ReliableOutbox/hasRoom`` is false.
    package var maxOutstanding: Int {
        get { outbox.maxOutstanding }
        set { outbox.maxOutstanding = newValue }
    }

    /// How long without ack progress, while connected, before unacknowledged messages go again.
    package var retransmitInterval: Duration {
        get { outbox.retransmitInterval }
        set { outbox.retransmitInterval = newValue }
    }

    /// The daemon's endpoints, as connected.
    package var endpoints: [String] { links.endpoints }

    /// Numbers `encode`'s message with the next sequence and sends what is due.
    /// - Parameter resentAs: What to send instead when it goes out again (a request whose
    ///   answer is no longer awaited only fills its sequence).
    /// - Returns: its sequence.
    /// - Throws: only when it is not queued (it cannot be encoded).
    @discardableResult
    package func enqueue(
        _ encode: (UInt64) throws(WireError) -> FrameBuffer,
        resentAs: ((UInt64) throws(WireError) -> FrameBuffer)? = nil
    ) throws(WireError) -> UInt64 {
        let (sequence, action) =
            if let resentAs { try outbox.enqueue(encode, resentAs: resentAs) } else { try outbox.enqueue(encode) }
        // Queued: it goes out with the outbox's resends whatever the socket says now, and a socket
        // that fails fails the next call too. Thrown here, it would be sent again by a caller
        // retrying, under another sequence.
        try? carryOut(action)
        return sequence
    }

    /// Reads the connection events and what the daemon sent, without waiting (``read(before:after:)``),
    /// then sends what the outbox says is due by `now` (``tick(now:)``).
    package func service(
        now: ContinuousClock.Instant, before: (WireMessage?) -> Void = { _ in },
        after: (WireMessage?) -> Void = { _ in }
    ) throws {
        try read(before: before, after: after)
        try tick(now: now)
    }

    /// Reads the connection events and what the daemon sent, without waiting: acks and refusals
    /// go to the outbox; every message read is shown to `before` first and `after` once the
    /// outbox took it (nil: one that did not decode).
    package func read(before: (WireMessage?) -> Void = { _ in }, after: (WireMessage?) -> Void = { _ in }) throws {
        if let monitor {
            while let event = try monitor.next(mode: .nonBlocking) {
                try carryOut(try socket.follow(event, links: &links, outbox: &outbox))
            }
        }
        while try socket.receive(into: &received, mode: .nonBlocking) {
            let message = try? WireMessage.decode(from: received)
            before(message)
            switch message {
            case .ack(let ack):
                try carryOut(outbox.received(ack: ack))
            case .diagnostic(let diagnostic):
                try carryOut(outbox.received(refusal: diagnostic))
            default:
                break
            }
            after(message)
        }
    }

    /// Sends what waits, and what the outbox says is due by `now` (a resend after silence).
    package func tick(now: ContinuousClock.Instant) throws {
        try carryOut(outbox.tick(now: now))
    }

    /// A message of the daemon's arrived another way (a view's subscription to the host's states):
    /// a new daemon source means a restart, and what it did not acknowledge goes out again.
    package func heard(from source: String) throws {
        try carryOut(outbox.heard(from: source))
    }

    /// Sends `frames` as they are, outside the numbered stream (an unnumbered heartbeat).
    package func sendUnnumbered(_ frames: FrameBuffer) throws {
        try socket.send(message: frames, mode: .nonBlocking)
    }

    /// Closes the socket (its linger lets queued messages leave) and the monitor.
    package func close() {
        monitor?.socket.close()
        socket.close()
    }

    /// Hands the messages of `action` to the socket, in order, as far as it takes them; the rest
    /// wait in the outbox for the next chance.
    private func carryOut(_ action: ReliableOutbox.Action) throws {
        guard case .send(let transmission) = action else { return }
        if let reason = transmission.reason {
            didResend(reason, transmission.firstNew - transmission.sequences.lowerBound)
        }
        if try !socket.send(transmission, of: &outbox, willSend: { sequence in willSend(sequence, transmission) }) {
            didNotTake()
        }
    }
}
