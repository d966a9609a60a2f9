import FlowBusProtocol
import FlowBusWire
import Logging
import ZeroMQ

/// What a daemon sends back on one ROUTER socket: messages numbered in the socket's own sequence
/// (PROTOCOL.md §4.2), and refusals — the one place a refusal is counted, logged, published as a
/// diagnostic and told to its sender.
package final class RouterReplier {
    /// The endpoint's name in refusals (`ingress`, `control`, `actions`).
    package let name: String
    package let transport: any RouterTransport
    /// Where refusals are published (the daemon's events or states).
    package let publisher: BusPublisher
    private let sourceID: String
    private let logger: Logger
    /// Keys every refusal of this daemon carries (a reactor host's `host`).
    private let refusalDetails: WireParams
    // Unchecked exclusivity for what each reply touches: used by its loop's thread alone.
    @exclusivity(unchecked) private var sequence: UInt64 = 0
    @exclusivity(unchecked) private var buffer = FrameBuffer()
    /// Refusals by reason.
    package private(set) var refused: [DiagnosticReason: Int] = [:]

    package init(
        name: String, transport: any RouterTransport, publisher: BusPublisher, sourceID: String,
        refusalDetails: WireParams = [:], logger: Logger
    ) {
        self.name = name
        self.transport = transport
        self.publisher = publisher
        self.sourceID = sourceID
        self.refusalDetails = refusalDetails
        self.logger = logger
    }

    /// A fresh envelope of this socket's sequence; `carriesValues`: the message has value frames,
    /// in the daemon's content type.
    package func envelope(_ kind: MessageKind, carriesValues: Bool = false) -> Envelope {
        envelope(kind, contentType: carriesValues ? publisher.contentType : .none)
    }

    /// A fresh envelope of this socket's sequence, for values in `contentType`.
    package func envelope(_ kind: MessageKind, contentType: ContentType) -> Envelope {
        sequence += 1
        return Envelope(kind: kind, contentType: contentType, sequence: sequence, messageID: .none, source: sourceID)
    }

    /// Encodes and sends `message` to `peer`; never blocks.
    /// - Returns: false when it was not sent (the peer is gone, or its queue is full).
    @discardableResult
    package func send(_ message: some WireMessageEncodable, to peer: [UInt8]) -> Bool {
        do {
            try message.encode(into: &buffer)
            return try transport.send(buffer, to: peer)
        } catch {
            logger.debug("\(message.kind) to a peer of \(name) not sent: \(error)")
            return false
        }
    }

    /// Counts, logs and publishes `refusal`, and tells its sender (before the ack that covers it).
    /// - Parameters:
    ///   - peer: Its sender; nil for a refusal of no message (a connection ZAP refused).
    ///   - count: How many messages it stands for (a `journal-behind` report counts them all).
    ///   - publish: Whether to publish it (a repeated report is only told to its sender).
    ///   - log: Whether to log it here (false: the caller logged it in its own words).
    package func refuse(_ refusal: Refusal, to peer: [UInt8]?, count: Int = 1, publish: Bool = true, log: Bool = true) {
        var refusal = refusal
        if !refusalDetails.isEmpty { refusal.extra.merge(refusalDetails) { _, daemon in daemon } }
        if count > 0 { refused[refusal.reason, default: 0] += count }
        if log {
            logger.warning(
                "refused message: \(refusal.reason): \(refusal.detail)",
                metadata: ["source": "\(refusal.source ?? "?")"])
        }
        if publish { publisher.publish(refusal.diagnostic(publisher.envelope(.diagnostic))) }
        guard let peer else { return }
        send(refusal.diagnostic(envelope(.diagnostic, carriesValues: true)), to: peer)
    }
}
