import FlowBusClient
import FlowBusConfiguration
import FlowBusProtocol
import FlowBusWire
import Logging
import ZeroMQ

/// A daemon's XPUB endpoint (flowd's `events`, a reactor host's `states`): the socket, carrying
/// out what its ``Publication`` decides.
///
/// Owned by one thread, like its socket. Sends never block: at the high-water mark XPUB refuses
/// (`ZMQ_XPUB_NODROP`), and the drop is counted and reported in band by ``reportDrops(why:details:)``.
package final class BusPublisher {
    /// The socket under it, for a poller: it is readable when subscriptions arrive.
    package let transport: any PublisherTransport
    private let sourceID: String
    private let logger: Logger
    /// The content type of the values this endpoint publishes (`wire.publish`).
    package let contentType: ContentType
    // Unchecked exclusivity for what each message touches: used by its loop's thread alone.
    @exclusivity(unchecked) private var buffer = FrameBuffer()
    private var subscriptions = FrameBuffer()
    /// What the last release sends, kept with its capacity.
    @exclusivity(unchecked) private var released = HeldMessages()
    @exclusivity(unchecked) private(set) var publication: Publication

    /// An XPUB socket for `endpoint`, named `name` in diagnostics; it serves once ``bind()``.
    package convenience init(
        context: Context, name: String, endpoint: String, limits: FlowBusConfig.Limits, curve: CurveKeys,
        sourceID: String, contentType: ContentType, logger: Logger
    ) throws {
        let transport = try ZMQPublisherTransport(
            context: context, endpoint: endpoint, what: "the \(name) endpoint", limits: limits, curve: curve)
        self.init(transport: transport, name: name, sourceID: sourceID, contentType: contentType, logger: logger)
    }

    /// A publisher on `transport`, named `name` in diagnostics.
    package init(
        transport: any PublisherTransport, name: String, sourceID: String, contentType: ContentType, logger: Logger
    ) {
        self.transport = transport
        self.contentType = contentType
        publication = Publication(endpoint: name)
        self.sourceID = sourceID
        self.logger = logger
    }

    /// Binds the endpoint (a ZeroMQ XPUB): subscribers reach it from now on.
    package func bind() throws {
        try (transport as? ZMQPublisherTransport)?.bind()
    }

    package var counters: Publication.Counters { inPlace { $0.counters } }

    /// Closes the socket; what it still queues may leave within `linger` milliseconds.
    package func close(linger: Int32 = 200) {
        transport.close(linger: linger)
    }

    /// A fresh envelope of this endpoint's own sequence, for values in its content type
    /// (`valueContentType` false: a kind without value frames).
    package func envelope(_ kind: MessageKind, carriesValues: Bool = true) -> Envelope {
        Envelope(
            kind: kind, contentType: carriesValues ? contentType : .none, sequence: publication.nextSequence(for: kind),
            messageID: .none, source: sourceID)
    }

    /// Whether a subscriber wants the topic `head` + `id`; counted as unwanted if not.
    package func wants(head: StaticString, id: String) -> Bool {
        // Mutating calls: a call that reads a publication from another module would copy it.
        publication.offer(head: head, id: id)
    }

    /// Sends frames as they are (a step or an action re-published for observers).
    package func publish(frames: FrameBuffer) {
        if publication.offer(frames) == .send { send(frames) }
    }

    /// Encodes and sends one message, if anyone subscribed to its topic.
    @discardableResult
    package func publish(_ message: some WireMessageEncodable) -> Bool {
        guard publication.offer(topic: message.topic) else { return false }
        return publishWanted(message)
    }

    /// Encodes and sends a message whose topic ``wants(head:id:)`` already accepted (its topic
    /// string is not built again).
    @discardableResult
    package func publishWanted(_ message: some WireMessageEncodable) -> Bool {
        publishWanted(message, encodingInto: &buffer)
    }

    /// ``publishWanted(_:)``, encoding into the caller's `frames`, which keep the message after.
    @discardableResult
    package func publishWanted(_ message: some WireMessageEncodable, encodingInto frames: inout FrameBuffer) -> Bool {
        publishWanted(message.kind, encodingInto: &frames) { (frames) throws(WireError) in
            try message.encode(into: &frames)
        }
    }

    /// Sends, or holds, the message of `kind` that `encode` writes into the caller's `frames`
    /// (which keep it after), whose topic ``wants(head:id:)`` accepted.
    @discardableResult
    package func publishWanted(
        _ kind: MessageKind, encodingInto frames: inout FrameBuffer,
        with encode: (inout FrameBuffer) throws(WireError) -> Void
    ) -> Bool {
        do {
            try encode(&frames)
        } catch {
            logger.error("cannot encode \(kind) for the \(publication.endpoint) endpoint: \(error)")
            return false
        }
        return publishWanted(encoded: frames)
    }

    /// Sends, or holds, a message of this endpoint's own already encoded, whose topic
    /// ``wants(head:id:)`` accepted.
    @discardableResult
    package func publishWanted(encoded frames: FrameBuffer) -> Bool {
        publication.take(frames) == .held || send(frames)
    }

    /// Publishes a `dropped-hwm` diagnostic for the drops since the last report, once the socket
    /// takes messages again: subscribers learn in band how much they missed.
    package func reportDrops(why: String, details extra: WireParams = [:]) {
        guard let report = publication.dueDropReport() else { return }
        var details: WireParams = [
            "endpoint": .string(publication.endpoint), "dropped": .int(Int64(report.unreported)),
            "total": .int(Int64(report.total)),
        ]
        if publication.isEventStream {
            // Which events: a resuming subscriber asks for them again (PROTOCOL.md §4.6).
            details["events"] = .list(
                report.events.map {
                    .list([.int(Int64(clamping: $0.lowerBound)), .int(Int64(clamping: $0.upperBound))])
                })
            details["events_complete"] = .bool(report.eventsComplete)
        }
        details.merge(extra) { _, new in new }
        publish(
            DiagnosticMessage(
                envelope: envelope(.diagnostic), reason: .droppedHWM,
                message:
                    "\(report.unreported) message(s) dropped at the \(publication.endpoint) high-water mark since the last report (\(why)); \(report.total) in all",
                details: details))
        publication.reported(report)
    }

    /// Holds every message back until ``releaseHeld()``.
    package func hold() {
        publication.hold()
    }

    /// Sends what was held back, in order, and stops holding (an event stream holds the next).
    /// An event stream kept every event; only those a subscriber wants are sent.
    package func releaseHeld() {
        publication.release(into: &released)
        sendReleased()
    }

    /// Sets what is held aside for the commit now under way; what follows is held apart from it.
    package func sealHeld() {
        publication.seal()
    }

    /// Sends what ``sealHeld()`` set aside, in order, once its commit is done; what was held since
    /// stays held.
    package func releaseSealed() {
        publication.releaseSealed(into: &released)
        sendReleased()
    }

    /// Sends `released`, events up to the head: those a subscriber wants.
    private func sendReleased() {
        let isEventStream = publication.isEventStream
        // The released events are numbered up to the head.
        let firstEvent = publication.headEvent &- UInt64(released.count) &+ 1
        released.forEach { index, message in
            if isEventStream,
                !message.withFrame(0, { publication.offerReleased(topic: $0, event: firstEvent + UInt64(index)) })
            {
                return
            }
            if !send(message), isEventStream { publication.droppedEvent(firstEvent + UInt64(index)) }
        }
        released.removeAll()
    }

    /// Makes this endpoint an event stream (flowd's `events`, PROTOCOL.md §4.6) whose last event
    /// was `last`: what it publishes while holding is numbered, kept and sent once committed.
    package func numberEvents(after last: UInt64) {
        publication.numberEvents(after: last)
    }

    /// Bytes held back for the release.
    package var heldByteCount: Int { inPlace { $0.heldByteCount } }

    /// Whether events wait for a commit.
    package var hasHeldEvents: Bool { inPlace { $0.hasHeldEvents } }

    /// The sequence of the last event committed.
    package var headEvent: UInt64 { inPlace { $0.headEvent } }

    /// Reads the publication in place: a getter of another module's called on the stored value
    /// copies it first (a retain and a release per field, for every message read).
    private func inPlace<Value>(_ read: (inout Publication) -> Value) -> Value {
        read(&publication)
    }

    /// The events waiting for the commit, packed, and the sequence of the first.
    package func heldEvents(into packed: inout PackedEvents) -> UInt64 {
        publication.heldEvents(into: &packed)
        return publication.headEvent + 1
    }

    /// Forgets what was held back (the batch it belonged to was not committed).
    package func discardHeld() {
        publication.discardHeld()
    }

    @discardableResult
    private func send(_ frames: some FrameSource) -> Bool {
        do {
            let accepted = try transport.send(frames)
            if publication.sent(accepted: accepted) {
                logger.warning(
                    "\(publication.endpoint) endpoint at its high-water mark: \(publication.counters.dropped) message(s) dropped so far (a subscriber is too slow)"
                )
            }
            return accepted
        } catch {
            logger.error("\(publication.endpoint) send failed: \(error)")
            return false
        }
    }

    /// XPUB hands subscriptions to its owner; reading them keeps its queue empty and lets it
    /// attach new subscribers. Called once per batch and per heartbeat, not per message.
    package func drainSubscriptions() {
        while (try? transport.receiveSubscription(into: &subscriptions)) == true {
            subscriptions.withFrame(0) { publication.subscriptionMessage($0) }
        }
    }

    /// Publishes what `body` publishes now, past a hold: the daemon's own heartbeat, drop reports and
    /// reports of its own trouble (a failing save) must not wait for the commit that is held back.
    package func pastHold(_ body: () -> Void) {
        let wasHolding = publication.pauseHold()
        body()
        publication.resumeHold(wasHolding)
    }

    /// Publishes a diagnostic of the daemon's own (not about one message).
    package func publishDiagnostic(_ reason: DiagnosticReason, _ message: String, details: WireParams) {
        publish(DiagnosticMessage(envelope: envelope(.diagnostic), reason: reason, message: message, details: details))
    }
}
