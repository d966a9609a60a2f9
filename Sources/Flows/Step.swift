@_exported public import FlowBusWire

/// A navigation intent: a marker protocol, as in RxFlow.
///
/// Swift flows usually declare an enum (`enum AppStep: Step { case moviePicked(withMovieId: Int) }`);
/// steps arriving from other processes are ``CanonicalStep`` values.
public protocol Step: Sendable {
    /// The step as the bus carries it, when it is one: read on every routed step, where a dynamic
    /// cast (`as? CanonicalStep`) costs more than the rest of the lookup.
    var canonicalStep: CanonicalStep? { get }
}

extension Step {
    public var canonicalStep: CanonicalStep? { nil }
}

/// "No step". Steppers may emit it; the coordinator filters it out of stepper streams
/// (RXFLOW.md rule 2), but not out of forwards, deep links or failed adapts (rules 5, 7, 11).
public struct NoneStep: Step, Hashable, CustomStringConvertible {
    /// Creates the empty step.
    public init() {}
    /// `NoneStep`.
    public var description: String { "NoneStep" }
}

extension CanonicalStep: Step {
    public var canonicalStep: CanonicalStep? { self }
}

/// What ``Flow/step(from:)`` returns for a step it knows but cannot take as sent (e.g. a param
/// its ids need is missing): the coordinator drops it with this reason and message, rather than
/// report the step as unknown.
public struct RefusedStep: Step, Hashable, CustomStringConvertible {
    /// The diagnostic reason, e.g. `bad-params`.
    public var reason: DiagnosticReason
    /// What is wrong and how to fix it, for the diagnostic.
    public var message: String

    public init(reason: DiagnosticReason, message: String) {
        self.reason = reason
        self.message = message
    }

    public var description: String { "RefusedStep(\(reason): \(message))" }
}

/// Turns a canonical step into the typed step a flow understands; `nil` when it cannot
/// (the coordinator then reports `DiagnosticReason/unknownStep`).
///
/// The engine knows nothing about Codable: the runtime builds these closures.
public typealias StepDecoder = @Sendable (CanonicalStep) -> (any Step)?

/// A printable description of any step, used in events and traces.
@inlinable
public func describeStep(_ step: any Step) -> String {
    String(describing: step)
}

extension CanonicalStep {
    /// This step as the typed step `S` (through Codable), for ``Flow/step(from:)``: `nil` when
    /// `S` has no case by this name (reported as `unknown-step`), a ``RefusedStep`` saying what
    /// is wrong when the case exists but the params do not fit it (the `unknown-step`
    /// diagnostic then reads e.g. `expected String for zip, got int 75001`).
    public func decoded<S: Step & Decodable>(as type: S.Type) -> (any Step)? {
        do {
            return try decodeCanonical(S.self, name: name, params: params)
        } catch {
            guard let why = canonicalDecodingFailure(error, name: name) else { return nil }
            return RefusedStep(reason: .unknownStep, message: "its params do not fit \(S.self).\(name): \(why)")
        }
    }
}
