import FlowBusWire

/// What produces the next steps of a flow, as in RxFlow.
public enum FlowContributor: Sendable {
    /// Binds `nextStepper` to the current flow, gated by `nextPresentable`'s visibility and
    /// dismissal. If `nextPresentable` is a ``Flow``, a child flow is coordinated instead, with
    /// `nextStepper` as its flow-level stepper (`allowStepWhenNotPresented` is then ignored and
    /// `allowStepWhenDismissed` is inherited by the child).
    /// - Parameters:
    ///   - allowStepWhenNotPresented: accept the stepper's steps while the presentable is not visible.
    ///   - allowStepWhenDismissed: keep the stepper bound after the presentable is dismissed.
    case contribute(
        withNextPresentable: any Presentable, withNextStepper: any Stepper,
        allowStepWhenNotPresented: Bool = false, allowStepWhenDismissed: Bool = false)
    /// Re-injects `step` into the current flow after the steps of steppers contributed by the
    /// same navigation (RXFLOW.md rule 7).
    case forwardToCurrentFlow(withStep: any Step)
    /// Injects `step` into the parent flow, ahead of any queued step (RXFLOW.md rule 7).
    case forwardToParentFlow(withStep: any Step)

    /// Contributes one object that is both the presentable and the stepper.
    public static func contribute(withNext nextPresentableAndStepper: any Presentable & Stepper) -> FlowContributor {
        .contribute(withNextPresentable: nextPresentableAndStepper, withNextStepper: nextPresentableAndStepper)
    }
}

/// The result of ``Flow/navigate(to:)``.
public enum FlowContributors: Sendable {
    /// Nothing new.
    case none
    /// One contributor.
    case one(flowContributor: FlowContributor)
    /// Several contributors, handled in array order.
    case multiple(flowContributors: [FlowContributor])
    /// The flow ends: `forwardToParentFlowWithStep` goes to the parent, and the flow, its
    /// child flows and all their bindings are removed (RXFLOW.md rule 9).
    case end(forwardToParentFlowWithStep: any Step)

    /// Several contributors, handled in argument order.
    public static func multiple(_ flowContributors: FlowContributor...) -> FlowContributors {
        .multiple(flowContributors: flowContributors)
    }

    /// The individual contributors.
    public var contributors: [FlowContributor] {
        switch self {
        case .none, .end: return []
        case .one(let contributor): return [contributor]
        case .multiple(let contributors): return contributors
        }
    }
}
