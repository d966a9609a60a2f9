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
    /// The topic prefixes subscribers asked for. XPUB reports the first subscription to a prefix
    /// and the last unsubscription, so this is exact; nothing is encoded for a topic nobody wants.
    private var subscribedPrefixes: Set<[UInt8]> = []
    /// Messages refused by the socket at its high-water mark, counted and reported.
    private(set) var dropped = 0
    /// Drops already reported in a `dropped-hwm` diagnostic.
    private var reportedDrops = 0
    private(set) var published = 0
    /// Messages held back until ``releaseHeld()``, while ``isHolding``.
    private var held: [FrameBuffer] = []
    /// Whether messages are held back (the events of a batch until it is committed).
    private(set) var isHolding = false
    /// Messages not encoded because no subscriber wanted their topic.
    private(set) var unwanted = 0

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

    /// Closes the socket; what it still queues may leave within `linger` milliseconds.
    func close(linger: Int32 = 200) {
        try? socket.setOption(.linger(linger))
        socket.close()
    }

    /// A fresh envelope of this publisher.
    func envelope(_ kind: MessageKind, contentType: ContentType = .fbv) -> Envelope {
        sequence += 1
        return Envelope(kind: kind, contentType: contentType, sequence: sequence, messageID: .none, source: sourceID)
    }

    /// Whether a subscriber wants messages of `topic`.
    func isWanted(_ topic: some Collection<UInt8>) -> Bool {
        subscribedPrefixes.contains { topic.starts(with: $0) }
    }

    /// Sends frames as they are (a step re-published for observers).
    func publish(frames: FrameBuffer) {
        guard isWanted(frames.frameBytes(0)) else {
            unwanted += 1
            return
        }
        send(frames)
    }

    /// Encodes and sends one message, if anyone subscribed to its topic.
    func publish(_ message: some WireMessageEncodable) {
        guard isWanted(message.topic.utf8) else {
            unwanted += 1
            return
        }
        do {
            try message.encode(into: &buffer)
        } catch {
            logger.error("cannot encode \(message.kind) for the events endpoint: \(error)")
            return
        }
        send(buffer)
    }

    /// Publishes a `dropped-hwm` diagnostic for the drops since the last report, once the socket
    /// takes messages again: subscribers learn in band how much they missed. A report that is
    /// itself dropped is counted and included in the next one.
    func reportDrops() {
        let unreported = dropped - reportedDrops
        guard unreported > 0 else { return }
        let before = dropped
        publish(DiagnosticMessage(
            envelope: envelope(.diagnostic), reason: .droppedHWM,
            message: "\(unreported) message(s) dropped at the events high-water mark since the last report (a subscriber is too slow); \(before) in all",
            details: ["endpoint": "events", "dropped": .int(Int64(unreported)), "total": .int(Int64(before))]))
        if dropped == before { reportedDrops = before }
    }

    /// Holds every message back until ``releaseHeld()``: observers then never see an event of
    /// a step that a crash could undo.
    func hold() {
        isHolding = true
    }

    /// Sends what was held back, in order, and stops holding.
    func releaseHeld() {
        isHolding = false
        let messages = held
        held.removeAll(keepingCapacity: true)
        for message in messages { send(message) }
    }

    /// Forgets what was held back (the batch it belonged to was not committed).
    func discardHeld() {
        isHolding = false
        held.removeAll()
    }

    private func send(_ frames: FrameBuffer) {
        if isHolding {
            held.append(frames)
            return
        }
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
        while (try? socket.receive(into: &subscriptions, mode: .nonBlocking)) == true {
            let frame = subscriptions.frameBytes(0)
            guard let flag = frame.first else { continue }
            let prefix = Array(frame.dropFirst())
            if flag == 1 { subscribedPrefixes.insert(prefix) } else if flag == 0 { subscribedPrefixes.remove(prefix) }
        }
    }
}
