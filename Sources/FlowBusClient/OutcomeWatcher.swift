import FlowBusProtocol
import FlowBusWire
import Foundation
import ZeroMQ

/// What became of one step or deep link a ``StepPublisher`` sent.
public enum PublishedOutcome: Sendable {
    /// flowd applied it; with navigation wanted, the didNavigate events it caused, in order.
    case applied(navigations: [NavigationEventMessage])
    /// flowd refused it: on arrival (sent back before the ack) or while routing it (published
    /// on `events`: `not-visible`, `unbound-stepper`, `unknown-step`, …).
    case refused(DiagnosticMessage)
    /// Applied, but no didNavigate followed within the time given (only with navigation wanted).
    case noNavigation
}

/// A command-line class of outcome, each with its own exit status, so that a script can tell a
/// dropped step from a refused one and from a daemon that is not there.
public enum OutcomeExit: Int32, CaseIterable, Sendable {
    case applied = 0
    /// No acknowledgement in time: the daemon is not running or not reachable.
    case noAnswer = 2
    /// `bad-params`: a parameter is missing, of the wrong type, or not `key=value`.
    case badParams = 3
    /// `not-visible`: the stepper's screen is not on the displayed path (dropped, as RxFlow drops it).
    case notVisible = 4
    /// `dismissed`: the stepper's screen or flow is gone.
    case dismissed = 5
    /// `unbound-stepper`: no flow contribution binds the stepper id.
    case unboundStepper = 6
    /// `unknown-step` (also `bad-action` for actions): no flow (reactor) takes a step (action) by that name, or it does not decode.
    case unknownStep = 7
    /// Any other refusal (`malformed`, `oversize`, `flow-error`, `no-parent-flow`, `unknown-reactor`, `rate-limited`, …).
    case otherRefusal = 8
    /// `--wait-nav`: applied, but no didNavigate followed in time.
    case noNavigation = 9

    /// The class of a refusal's reason.
    public init(refusal reason: DiagnosticReason) {
        switch reason {
        case .badParams: self = .badParams
        case .notVisible: self = .notVisible
        case .dismissed: self = .dismissed
        case .unboundStepper: self = .unboundStepper
        case .unknownStep, .badAction: self = .unknownStep
        default: self = .otherRefusal
        }
    }

    /// One line per code, for `--help` and the docs.
    public static let table = """
        Exit status: 0 applied; 2 no acknowledgement (is the daemon running?); 3 bad-params; \
        4 not-visible (dropped: the stepper's screen is not shown); 5 dismissed; 6 unbound-stepper; \
        7 unknown-step or bad-action; 8 any other refusal; 9 no didNavigate in time (--wait-nav); \
        64 a usage error.
        """
}

/// Watches flowd's `events` for the outcome of messages a ``StepPublisher`` sends, matching
/// them by source and sequence as PROTOCOL.md 3.3 describes.
///
/// Create it before publishing: it subscribes to `step/<stepper>`, `deeplink/`, `diag/` and
/// `nav/did/` and waits for flowd's first heartbeat, so nothing published after the message is
/// missed. flowd re-publishes a step it decoded, then publishes what it did (didNavigate) or
/// the diagnostic of its refusal, then, no later than that, its next heartbeat: a heartbeat
/// after the re-publication with no diagnostic naming the message means it was applied.
/// A flow whose `adapt` suspends lets heartbeats through while it awaits; wanting navigation
/// covers that case (the wait then ends at the didNavigate or the timeout).
public final class OutcomeWatcher {
    private let subscriber: BusSubscriber
    private let endpoint: String

    /// Subscribes to flowd's events endpoint (on each of its instances) for steps of
    /// `stepperID` (and deep links).
    /// - Throws: ``ClientError`` when flowd sends no heartbeat within `timeout`.
    public init(
        stepperID: String, eventsEndpoints: [String], curve: CurveKeys = CurveKeys(), timeout: Duration = .seconds(5)
    ) throws {
        endpoint = describeEither(eventsEndpoints)
        subscriber = try BusSubscriber(
            endpoints: eventsEndpoints, topics: [Topic.step(stepperID), "deeplink/", "diag/", "nav/did/"],
            includeHeartbeats: true, curve: curve)
        guard try subscriber.waitUntilConnected(timeout: timeout) else {
            throw ClientError(
                .noAnswer,
                "no heartbeat from flowd on \(endpoint) within \(timeout): is it running? Start it with `flowd --config FILE`"
            )
        }
    }

    /// Waits for the outcome of the message `sequence` of `publisher`: its acknowledgement, a
    /// refusal sent back, then what the flows did with it.
    /// - Parameter navigation: wait for the didNavigate events it causes too.
    /// - Returns: `nil` when flowd did not acknowledge within `timeout`.
    public func outcome(
        of sequence: UInt64, from publisher: StepPublisher, navigation: Bool = false, timeout: Duration
    ) throws -> PublishedOutcome? {
        let deadline = ContinuousClock.now + timeout
        guard try publisher.waitForAcknowledgement(timeout: timeout) else { return nil }
        if let refusal = publisher.refusal(for: sequence) { return .refused(refusal) }
        var republished = false
        var navigations: [NavigationEventMessage] = []
        while true {
            let left = ContinuousClock.now.duration(to: deadline)
            guard left > .zero, let received = try subscriber.next(timeout: left) else {
                if !republished {
                    throw ClientError(
                        .notRepublished,
                        "flowd acknowledged it but did not re-publish it on \(endpoint) within \(timeout)")
                }
                return navigations.isEmpty ? .noNavigation : .applied(navigations: navigations)
            }
            guard case .message(let message) = received else { continue }
            let envelope = message.envelope
            switch message {
            case .step, .deepLink:
                if envelope.source == publisher.sourceID && envelope.sequence == sequence {
                    republished = true
                } else if republished && !navigations.isEmpty {
                    // The next message's consequences start here.
                    return .applied(navigations: navigations)
                }
            case .diagnostic(let diagnostic):
                if republished, diagnostic.details["source"]?.stringValue == publisher.sourceID,
                    diagnostic.details["sequence"]?.intValue == Int64(clamping: sequence)
                {
                    return .refused(diagnostic)
                }
            case .navigation(let event) where event.phase == .did:
                if republished { navigations.append(event) }
            // The instance that acknowledged it: another one may still be heard for a few seconds.
            case .heartbeat where publisher.flowdSource.map { $0 == envelope.source } ?? true:
                if republished && (!navigation || !navigations.isEmpty) {
                    return .applied(navigations: navigations)
                }
            default:
                break
            }
        }
    }
}

@available(*, unavailable, message: "a watcher owns a socket: use it from one thread")
extension OutcomeWatcher: Sendable {}
