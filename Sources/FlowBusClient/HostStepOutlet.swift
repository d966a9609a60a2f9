import FlowBusProtocol
import FlowBusWire
import Logging
import ZeroMQ

/// One stepper id a hosted reactor publishes as: a ``ReliableDealer`` to flowd's ingress, owned by
/// the host's thread, with its own source id and sequence. Steps are delivered as a
/// ``StepPublisher`` delivers them; the host's loop calls ``service(now:logger:)`` every turn, and
/// at least once per heartbeat interval.
package final class HostStepOutlet {
    package let stepperID: String
    /// This stepper's source id in envelopes.
    package let sourceID: String
    private let contentType: ContentType
    private let dealer: ReliableDealer

    /// A stepper whose source id is `<stepperID>#<sourceSuffix>`, numbering from 1.
    package convenience init(
        stepperID: String, sourceSuffix: String, endpoints: [String], contentType: ContentType, curve: CurveKeys,
        heartbeatMilliseconds: Int, context: Context, logger: Logger
    ) throws {
        try self.init(
            stepperID: stepperID, sourceID: Self.sourceID(stepperID, suffix: sourceSuffix), continuingAfter: 0,
            endpoints: endpoints, contentType: contentType, curve: curve, heartbeatMilliseconds: heartbeatMilliseconds,
            context: context, logger: logger)
    }

    /// A stepper going on with `sourceID` after sequence `last` (its steps are kept by the host's
    /// store across restarts).
    package init(
        stepperID: String, sourceID: String, continuingAfter last: UInt64, endpoints: [String],
        contentType: ContentType, curve: CurveKeys, heartbeatMilliseconds: Int, context: Context, logger: Logger
    ) throws {
        self.stepperID = stepperID
        self.sourceID = sourceID
        self.contentType = contentType
        dealer = try ReliableDealer(
            sourceID: sourceID, endpoints: endpoints, curve: curve, context: context,
            heartbeatMilliseconds: heartbeatMilliseconds, maxOutstanding: Self.maxWaiting, linger: 2000,
            followsConnections: true, continuingAfter: last)
        dealer.didResend = { reason, count in
            logger.notice("resending \(count) unacknowledged step(s) of \(stepperID) to flowd: \(reason)")
        }
        dealer.didNotTake = {
            logger.warning(
                "steps of \(stepperID) wait: flowd's ingress queue is full or not connected (is flowd running?)")
        }
    }

    /// Queues a step for flowd.
    /// - Returns: false when it was dropped: too many steps wait for flowd's ack, or it does not encode.
    package func send(name: String, params: WireParams, trace: TraceContext? = nil, logger: Logger) -> Bool {
        guard dealer.outbox.hasRoom else {
            let waiting = dealer.outbox.outstanding
            logger.warning(
                "step \(name) as \(stepperID) dropped: \(waiting) steps wait for flowd's ack (is flowd running?)")
            return false
        }
        return enqueue(name: name, params: params, trace: trace, logger: logger)
    }

    /// The source id of stepper `stepperID` in a host whose source id ends in `suffix`.
    package static func sourceID(_ stepperID: String, suffix: String) -> String {
        Envelope.sourceID(stepperID, suffix: suffix)
    }

    /// The last sequence flowd acknowledged.
    package var acknowledged: UInt64 { dealer.outbox.lastAcknowledged }

    /// How many steps wait for flowd's ack.
    package var waiting: Int { dealer.outbox.outstanding }

    /// How many steps may wait for flowd's ack before a new one is dropped (one kept by the host's
    /// store is queued whatever waits).
    package static let maxWaiting = 10_000

    /// Steps waiting for flowd's ack past which the host reads no more actions: the steps of the
    /// batch read before it stopped still fit under ``maxWaiting``.
    package static let backlogLimit = maxWaiting * 8 / 10

    /// Steps waiting below which the host reads actions again.
    package static let backlogResume = maxWaiting * 6 / 10

    /// Whether so many steps wait for flowd's ack that the host should read no more actions.
    package var isBackedUp: Bool { waiting >= Self.backlogLimit }

    /// Queues a step the host's store kept with `sequence`, whatever waits already: it is saved,
    /// so it must go out, and only the store's own growth bounds it.
    /// - Returns: false when the outbox's next sequence is not `sequence` (the step is not queued).
    package func sendKept(
        name: String, params: WireParams, trace: TraceContext?, sequence: UInt64, logger: Logger
    ) -> Bool {
        guard dealer.outbox.lastSequence + 1 == sequence else {
            logger.error(
                "step \(name) of \(stepperID) kept with sequence \(sequence), but the next is \(dealer.outbox.lastSequence + 1): not sent"
            )
            return false
        }
        return enqueue(name: name, params: params, trace: trace, logger: logger)
    }

    private func enqueue(name: String, params: WireParams, trace: TraceContext?, logger: Logger) -> Bool {
        do {
            try dealer.enqueue { sequence throws(WireError) in
                try StepMessage(
                    stepperID: stepperID,
                    envelope: Envelope(kind: .step, contentType: contentType, sequence: sequence, source: sourceID),
                    name: name, params: params, traceContext: trace
                ).encoded()
            }
            return true
        } catch {
            // Not queued: it cannot be encoded (a socket error after queueing is not thrown).
            logger.error("step \(name) as \(stepperID) not sent: \(error)")
            return false
        }
    }

    /// Reads connection events, acks and refusals, and sends what is due.
    package func service(now: ContinuousClock.Instant, logger: Logger) {
        do {
            try dealer.read { message in
                guard case .diagnostic(let diagnostic)? = message else { return }
                logger.notice("flowd refused a step of \(stepperID): \(diagnostic.reason): \(diagnostic.message)")
            }
        } catch {
            logger.error("stepper \(stepperID): reading from flowd failed: \(error)")
        }
        do {
            try dealer.tick(now: now)
        } catch {
            logger.error("step of \(stepperID) not sent: \(error) (it waits for the next chance)")
        }
    }

    package func close() {
        dealer.close()
    }
}
