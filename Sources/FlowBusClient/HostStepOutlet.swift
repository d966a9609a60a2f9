import FlowBusProtocol
import FlowBusWire
import Logging
import ZeroMQ

/// One stepper id a hosted reactor publishes as: a DEALER to flowd's ingress, owned by the host's
/// I/O thread, with its own source id and sequence.
///
/// Steps are delivered like a ``StepPublisher``'s: a ``ReliableOutbox`` keeps each until flowd
/// acknowledges it and decides when to send again (the connection comes back, a restarted flowd
/// answers, flowd reports a gap, or acks stall); this class carries its decisions out. The host's
/// I/O loop calls ``service(now:logger:)`` every turn, and at least once per heartbeat interval.
package final class HostStepOutlet {
    package let stepperID: String
    package let sourceID: String
    private let contentType: ContentType
    private let socket: Socket
    private let monitor: SocketMonitor
    private var outbox: ReliableOutbox
    private var links: FlowdLinks
    private var received = FrameBuffer()

    package init(
        stepperID: String, sourceSuffix: String, endpoints: [String], contentType: ContentType, curve: CurveKeys,
        heartbeatMilliseconds: Int, context: Context
    ) throws(ZMQError) {
        self.stepperID = stepperID
        sourceID = "\(stepperID)#\(sourceSuffix)"
        self.contentType = contentType
        outbox = ReliableOutbox(sourceID: sourceID)
        links = FlowdLinks(endpoints: endpoints)
        socket = try context.socket(.dealer)
        try socket.setOptions([.sendHighWaterMark(100_000), .linger(2000)])
        monitor = try SocketMonitor(watching: socket, context: context, events: [.connected, .disconnected])
        if try socket.connect(toFlowdInstances: endpoints, curve: curve, heartbeatMilliseconds: heartbeatMilliseconds) {
            outbox.socketQueuesUntilConnected()
        }
    }

    /// Queues a step for flowd.
    /// - Returns: false when it was dropped: too many steps wait for flowd's ack, or it does not encode.
    package func send(name: String, params: WireParams, logger: Logger) -> Bool {
        guard outbox.hasRoom else {
            let waiting = outbox.outstanding
            logger.warning(
                "step \(name) as \(stepperID) dropped: \(waiting) steps wait for flowd's ack (is flowd running?)")
            return false
        }
        do {
            let (_, action) = try outbox.enqueue { sequence throws(WireError) in
                try StepMessage(
                    stepperID: stepperID,
                    envelope: Envelope(kind: .step, contentType: contentType, sequence: sequence, source: sourceID),
                    name: name, params: params
                ).encoded()
            }
            carryOut(action, logger: logger)
            return true
        } catch {
            logger.error("step \(name) as \(stepperID) not sent: \(error)")
            return false
        }
    }

    /// Reads connection events, acks and diagnostics, and sends what the outbox says is due.
    package func service(now: ContinuousClock.Instant, logger: Logger) {
        do {
            while let event = try monitor.next(mode: .nonBlocking) {
                carryOut(try socket.follow(event, links: &links, outbox: &outbox), logger: logger)
            }
            while try socket.receive(into: &received, mode: .nonBlocking) {
                switch try? WireMessage.decode(from: received) {
                case .ack(let ack):
                    carryOut(outbox.received(ack: ack), logger: logger)
                case .diagnostic(let diagnostic):
                    logger.notice("flowd refused a step of \(stepperID): \(diagnostic.reason): \(diagnostic.message)")
                    carryOut(outbox.received(refusal: diagnostic), logger: logger)
                default:
                    break
                }
            }
        } catch {
            logger.error("stepper \(stepperID): reading from flowd failed: \(error)")
        }
        carryOut(outbox.tick(now: now), logger: logger)
    }

    package func close() {
        monitor.socket.close()
        socket.close()
    }

    /// Hands the messages of `action` to the socket, in order, as far as it takes them.
    private func carryOut(_ action: ReliableOutbox.Action, logger: Logger) {
        guard case .send(let transmission) = action else { return }
        if let reason = transmission.reason {
            let count = transmission.firstNew - transmission.sequences.lowerBound
            logger.notice("resending \(count) unacknowledged step(s) of \(stepperID) to flowd: \(reason)")
        }
        do {
            if try !socket.send(transmission, of: &outbox) {
                logger.warning("steps of \(stepperID) wait: flowd's ingress queue is full (is flowd running?)")
            }
        } catch {
            logger.error("step of \(stepperID) not sent: \(error) (it waits for the next chance)")
        }
    }
}
