import FlowBusProtocol
import FlowBusWire
import Logging
import ZeroMQ

extension Socket {
    /// Connects this DEALER to flowd's ingress or control endpoint on every instance the config
    /// lists. With several (active and standbys sharing a PostgreSQL journal), `ZMQ_IMMEDIATE`
    /// keeps messages off instances that are not there (a standby binds nothing), reconnection
    /// is tried every 100–250 ms so that a new active instance is found at once, and ZMTP
    /// heartbeats drop the connection to an instance that vanished without closing it (its
    /// machine was cut off) within two heartbeat intervals.
    /// - Returns: whether the socket queues messages before its first connection (one endpoint):
    ///   then a ``ReliableOutbox`` hands them over at once.
    package func connect(
        toFlowdInstances endpoints: [String], curve: CurveKeys, heartbeatMilliseconds: Int
    ) throws(ZMQError) -> Bool {
        if endpoints.count > 1 {
            let heartbeat = Int32(clamping: heartbeatMilliseconds)
            try setOptions([
                .immediate(true), .reconnectInterval(100), .reconnectIntervalMax(250),
                .heartbeatInterval(heartbeat), .heartbeatTimeout(heartbeat * 2),
            ])
        } else {
            try setOptions([.reconnectInterval(100), .reconnectIntervalMax(2000)])
        }
        for endpoint in endpoints {
            try curve.secureClient(self, endpoint: endpoint)
            try connect(endpoint)
        }
        return endpoints.count == 1
    }

    /// Encodes `message` into `buffer` and sends it to `peer` of this ROUTER; never blocks.
    /// - Returns: false when it was not sent (the peer is gone or its queue is full), which the
    ///   protocol tolerates: an ack or a refusal that is lost is sent again on the next resend.
    @discardableResult
    package func send(
        _ message: some WireMessageEncodable, to peer: [UInt8], using buffer: inout FrameBuffer, logger: Logger
    ) -> Bool {
        do {
            try message.encode(into: &buffer)
            try send(peer, more: true, mode: .nonBlocking)
            return try send(message: buffer, mode: .nonBlocking)
        } catch {
            logger.debug("\(message.kind) to a peer not sent: \(error)")
            return false
        }
    }

    /// Hands the messages of `transmission` to this socket, in order, as far as it takes them;
    /// the first one it does not take, and every later one, wait in `outbox` for the next chance.
    /// Never blocks. `willSend` runs before each message is handed over.
    /// - Returns: false when the socket would not take a message (its queue is full, or there is
    ///   no connection yet).
    /// - Throws: the socket's error; the message it was sending waits in `outbox`.
    @discardableResult
    package func send(
        _ transmission: ReliableOutbox.Transmission, of outbox: inout ReliableOutbox,
        willSend: (UInt64) -> Void = { _ in }
    ) throws(ZMQError) -> Bool {
        for sequence in transmission.sequences {
            willSend(sequence)
            let taken: Bool
            do {
                taken = try send(message: outbox.frames(of: sequence, in: transmission), mode: .nonBlocking)
            } catch {
                outbox.notTaken(from: sequence)
                throw error
            }
            guard taken else {
                outbox.notTaken(from: sequence)
                return false
            }
        }
        return true
    }
}
