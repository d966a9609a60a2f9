import FlowBusWire
import Logging
import ZeroMQ

extension Socket {
    /// Encodes `message` into `buffer` and sends it to `peer` of this ROUTER; never blocks.
    /// - Returns: false when it was not sent (the peer is gone or its queue is full), which the
    ///   protocol tolerates: an ack or a refusal that is lost is sent again on the next resend.
    @discardableResult
    func send(_ message: some WireMessageEncodable, to peer: [UInt8], using buffer: inout FrameBuffer, logger: Logger) -> Bool {
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
    func send(
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
