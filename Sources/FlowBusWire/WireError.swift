/// Why a message was refused: the reason code carried by a diagnostic message.
///
/// Reason codes are short ASCII words such as `malformed` or `unbound-stepper`. They appear in
/// the topic of a diagnostic (`diag/<reason>`) and in its frame 2. The set is open: a peer may
/// receive a code it does not know, so this is a struct over a string with the codes of
/// protocol v1 as static members rather than a closed enum.
public struct DiagnosticReason: RawRepresentable, Hashable, Sendable, Comparable, CustomStringConvertible,
    ExpressibleByStringLiteral
{
    /// Orders by code.
    public static func < (lhs: DiagnosticReason, rhs: DiagnosticReason) -> Bool { lhs.rawValue < rhs.rawValue }

    /// The reason code as it travels on the wire, e.g. `"unknown-kind"`.
    public let rawValue: String

    /// Wraps a reason code.
    public init(rawValue: String) { self.rawValue = rawValue }

    /// Wraps a reason code written as a literal.
    public init(stringLiteral value: String) { self.rawValue = value }

    public var description: String { rawValue }

    /// The message does not follow the protocol: wrong frame count, truncated or trailing bytes,
    /// invalid UTF-8, a topic that does not match the kind, a value that does not decode.
    public static let malformed: DiagnosticReason = "malformed"
    /// The envelope's version byte is not one this peer speaks.
    public static let unsupportedVersion: DiagnosticReason = "unsupported-version"
    /// The envelope's kind byte is not a known message kind.
    public static let unknownKind: DiagnosticReason = "unknown-kind"
    /// A frame, a name, a topic or the number of frames exceeds a limit.
    public static let oversize: DiagnosticReason = "oversize"
    /// A step came from a stepper that no flow contribution binds.
    public static let unboundStepper: DiagnosticReason = "unbound-stepper"
    /// A step came from a stepper whose presentable is not visible; it was dropped.
    public static let notVisible: DiagnosticReason = "not-visible"
    /// A step came from a stepper whose presentable was dismissed.
    public static let dismissed: DiagnosticReason = "dismissed"
    /// The flow does not know the step.
    public static let unknownStep: DiagnosticReason = "unknown-step"
    /// No reactor with that id is hosted here.
    public static let unknownReactor: DiagnosticReason = "unknown-reactor"
    /// The reactor cannot map the action.
    public static let badAction: DiagnosticReason = "bad-action"
    /// The parameters of a step, deep link, action or navigation event do not decode.
    public static let badParams: DiagnosticReason = "bad-params"
    /// The message repeats a (source, sequence) pair already dealt with.
    public static let duplicate: DiagnosticReason = "duplicate"
    /// The peer is not allowed to send this message.
    public static let unauthorized: DiagnosticReason = "unauthorized"
    /// A socket dropped messages at its high-water mark.
    public static let droppedHWM: DiagnosticReason = "dropped-hwm"
    /// A peer stopped sending heartbeats.
    public static let peerDead: DiagnosticReason = "peer-dead"
    /// A flow failed while navigating.
    public static let flowError: DiagnosticReason = "flow-error"
    /// A step was forwarded to (or ended into) the parent of a root flow.
    public static let noParentFlow: DiagnosticReason = "no-parent-flow"
    /// A renderer reported about a presentable id that is not in the tree.
    public static let unknownPresentable: DiagnosticReason = "unknown-presentable"
    /// A message skipped ahead of the next sequence expected from its source (an earlier one was
    /// lost in transit): not applied; the sender resends from `expected` (in the details).
    public static let outOfOrder: DiagnosticReason = "out-of-order"
    /// A sender is ahead of the daemon's durable ledger (its journal lost its newest entries) and
    /// holds nothing older: not applied until the daemon is started accepting the loss.
    public static let journalBehind: DiagnosticReason = "journal-behind"
    /// A peer sent more control requests than its rate allows: not answered; retry later.
    public static let rateLimited: DiagnosticReason = "rate-limited"
    /// A daemon could not commit its journal or state store; acks wait for a commit.
    public static let persistenceFailed: DiagnosticReason = "persistence-failed"
    /// A reactor's state could not be encoded, so it was not published.
    public static let badState: DiagnosticReason = "bad-state"
    /// A replay asked for events older than the oldest kept: take a status snapshot instead.
    public static let gone: DiagnosticReason = "gone"

    /// Every reason code defined by protocol v1.
    public static let allV1: [DiagnosticReason] = [
        .malformed, .unsupportedVersion, .unknownKind, .oversize, .unboundStepper, .notVisible,
        .dismissed, .unknownStep, .unknownReactor, .badAction, .badParams, .duplicate,
        .unauthorized, .droppedHWM, .peerDead, .flowError, .noParentFlow, .unknownPresentable, .outOfOrder,
        .journalBehind, .persistenceFailed, .badState, .rateLimited, .gone,
    ]
}

/// An error of the wire layer: a message or value that cannot be decoded or encoded.
///
/// ``reason`` is one of the diagnostic reason codes, so a receiver can publish a diagnostic
/// with it as is; ``detail`` says precisely what is wrong, for logs and for the diagnostic's
/// `message`.
public struct WireError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The diagnostic reason code.
    public var reason: DiagnosticReason
    /// What is wrong, in words, e.g. `"envelope is 12 bytes, at least 38 expected"`.
    public var detail: String

    /// Creates an error.
    /// - Parameters:
    ///   - reason: The diagnostic reason code.
    ///   - detail: What is wrong, precisely.
    public init(_ reason: DiagnosticReason, _ detail: String) {
        self.reason = reason
        self.detail = detail
    }

    public var description: String { "\(reason.rawValue): \(detail)" }

    /// The same error with another reason code (e.g. `malformed` → `bad-params` when the
    /// value was a params frame).
    public func withReason(_ reason: DiagnosticReason) -> WireError {
        WireError(reason, detail)
    }

    /// The same error with a prefix on the detail, e.g. `"frame 3: "`.
    public func prefixed(_ context: String) -> WireError {
        WireError(reason, context + detail)
    }

    static func malformed(_ detail: String) -> WireError { WireError(.malformed, detail) }
}
