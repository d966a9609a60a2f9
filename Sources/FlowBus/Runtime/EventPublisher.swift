import FlowBusWire
import Flows
import Logging
import ZeroMQ

/// The coordinator's side of the `events` endpoint: turns coordinator events into wire messages.
///
/// It lives on ``FlowActor``, where the coordinator emits, so each event is encoded and sent
/// without a thread hop; it is the only user of its XPUB socket.
@FlowActor
final class EventPublisher {
    private let socket: Socket
    private let sourceID: String
    private let logger: Logger
    private var sequence: UInt64 = 0
    private var buffer = FrameBuffer()
    private var subscriptions = FrameBuffer()
    /// Messages refused by the socket at its high-water mark, counted and reported.
    private(set) var dropped = 0
    private(set) var published = 0

    init(context: Context, endpoint: String, limits: FlowBusConfig.Limits, curve: CurveKeys, sourceID: String, logger: Logger) throws {
        socket = try context.socket(.xpub)
        try socket.setOptions([
            .sendHighWaterMark(Int32(clamping: limits.highWaterMark)),
            // At the mark XPUB returns EAGAIN instead of dropping silently, so drops are counted.
            .xpubNoDrop(true),
            .linger(200),
        ])
        try curve.secureServer(socket, endpoint: endpoint)
        try socket.bind(endpoint)
        restrictPermissions(ofIPCEndpoint: endpoint)
        self.sourceID = sourceID
        self.logger = logger
    }

    func close() {
        socket.close()
    }

    /// A fresh envelope of this publisher.
    func envelope(_ kind: MessageKind, contentType: ContentType = .fbv) -> Envelope {
        sequence += 1
        return Envelope(kind: kind, contentType: contentType, sequence: sequence, messageID: .none, source: sourceID)
    }

    /// Sends frames as they are (a step re-published for observers).
    func publish(frames: FrameBuffer) {
        send(frames)
    }

    /// Encodes and sends one message.
    func publish(_ message: some WireMessageEncodable) {
        do {
            try message.encode(into: &buffer)
        } catch {
            logger.error("cannot encode \(message.kind) for the events endpoint: \(error)")
            return
        }
        send(buffer)
    }

    private func send(_ frames: FrameBuffer) {
        do {
            if try socket.send(message: frames, mode: .nonBlocking) {
                published += 1
            } else {
                dropped += 1
                if dropped == 1 || dropped % 10_000 == 0 {
                    logger.warning("events endpoint at its high-water mark: \(dropped) message(s) dropped so far (a subscriber is too slow)")
                }
            }
        } catch {
            logger.error("events send failed: \(error)")
        }
    }

    /// XPUB hands subscriptions to its owner; reading them keeps its queue empty and lets it
    /// attach new subscribers. Called once per batch and per heartbeat, not per message.
    func drainSubscriptions() {
        while (try? socket.receive(into: &subscriptions, mode: .nonBlocking)) == true {}
    }
}
