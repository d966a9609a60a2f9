import FlowBusWire

/// Where a step processed by a flow came from.
public enum StepOrigin: Sendable, Hashable, CustomStringConvertible {
    /// Emitted by the stepper with this id (remote or in-process).
    case stepper(String)
    /// A deep link (``FlowCoordinator/navigate(to:)``).
    case deepLink
    /// `.forwardToCurrentFlow` of the same flow.
    case forwardedToCurrentFlow
    /// `.forwardToParentFlow` or `.end` of this child flow.
    case forwardedFromChild(FlowID)

    /// Short text.
    public var description: String {
        switch self {
        case .stepper(let id): return "stepper \(id)"
        case .deepLink: return "deep link"
        case .forwardedToCurrentFlow: return "forwardToCurrentFlow"
        case .forwardedFromChild(let child): return "from child \(child)"
        }
    }
}

/// One navigation of one flow: the payload of `willNavigate` and `didNavigate`.
public struct NavigationEvent: Sendable, CustomStringConvertible {
    /// The flow that navigates.
    public var flow: FlowID
    /// The step, after decoding and adapt.
    public var step: any Step
    /// Where the step came from.
    public var origin: StepOrigin
    /// The presentable whose stepper emitted the step, if any.
    public var presentableID: String?
    /// The navigation's number in its coordinator, from 1: a willNavigate and its didNavigate share
    /// it (0: not numbered).
    public var number: UInt64

    /// Creates the payload.
    public init(flow: FlowID, step: any Step, origin: StepOrigin, presentableID: String?, number: UInt64 = 0) {
        self.flow = flow
        self.step = step
        self.origin = origin
        self.presentableID = presentableID
        self.number = number
    }

    /// The stepper id, when the step came from a stepper.
    public var stepperID: String? {
        if case .stepper(let id) = origin { return id }
        return nil
    }

    /// `flow=WishlistFlow#1 step=moviePicked(withMovieId: 23452)`.
    public var description: String { "flow=\(flow) step=\(describeStep(step))" }
}

/// How a stepper is bound.
public enum BindingRole: String, Sendable, Hashable {
    /// The flow-level stepper (given to `coordinate` or contributed with a child flow):
    /// never gated by visibility (RXFLOW.md rule 2).
    case flowStepper
    /// A stepper contributed with a presentable: gated by its visibility (rule 3).
    case presentableStepper
}

/// A binding of a stepper id to a flow and a presentable: where that stepper's steps go.
public struct BindingInfo: Sendable, Hashable, CustomStringConvertible {
    /// The stepper id.
    public var stepperID: String
    /// The flow receiving its steps.
    public var flow: FlowID
    /// The presentable gating its steps (the flow's root for flow steppers).
    public var presentableID: String
    /// Flow stepper or presentable stepper.
    public var role: BindingRole
    /// Whether steps pass while the presentable is not visible.
    public var allowStepWhenNotPresented: Bool
    /// Whether the binding survives the presentable's dismissal.
    public var allowStepWhenDismissed: Bool
    /// Whether remote steps (``FlowCoordinator/receive(_:from:)``) are accepted for it.
    public var isRemote: Bool

    /// Creates a binding description.
    public init(
        stepperID: String, flow: FlowID, presentableID: String, role: BindingRole,
        allowStepWhenNotPresented: Bool, allowStepWhenDismissed: Bool, isRemote: Bool
    ) {
        self.stepperID = stepperID
        self.flow = flow
        self.presentableID = presentableID
        self.role = role
        self.allowStepWhenNotPresented = allowStepWhenNotPresented
        self.allowStepWhenDismissed = allowStepWhenDismissed
        self.isRemote = isRemote
    }

    /// `movie/1 -> WishlistFlow#1 @ movie/1`.
    public var description: String { "\(stepperID) -> \(flow) @ \(presentableID)" }
}

/// Why a binding went away.
public enum UnbindReason: String, Sendable, Hashable {
    /// Its presentable was dismissed.
    case presentableDismissed
    /// Its flow ended or was dismissed.
    case flowEnded
}

/// Why a flow stopped.
public enum FlowEndReason: Sendable, CustomStringConvertible {
    /// It returned `.end(forwardToParentFlowWithStep:)` with this step.
    case ended(step: any Step)
    /// Its root was dismissed (RXFLOW.md rule 10).
    case dismissed
    /// Its parent flow stopped.
    case parentEnded

    /// Short text.
    public var description: String {
        switch self {
        case .ended(let step): return "ended(\(describeStep(step)))"
        case .dismissed: return "dismissed"
        case .parentEnded: return "parentEnded"
        }
    }
}

/// A refused or dropped step, or a failure: every drop is one of these (RxFlow drops silently).
public struct Diagnostic: Sendable, CustomStringConvertible {
    /// The reason code.
    public var reason: DiagnosticReason
    /// A sentence for people.
    public var message: String
    /// The stepper the step came from, if any.
    public var stepperID: String?
    /// The flow concerned, if any.
    public var flow: FlowID?
    /// The presentable concerned, if any.
    public var presentableID: String?
    /// The step concerned, if any.
    public var step: (any Step)?

    /// Creates a diagnostic.
    public init(
        reason: DiagnosticReason, message: String, stepperID: String? = nil, flow: FlowID? = nil,
        presentableID: String? = nil, step: (any Step)? = nil
    ) {
        self.reason = reason
        self.message = message
        self.stepperID = stepperID
        self.flow = flow
        self.presentableID = presentableID
        self.step = step
    }

    /// `not-visible: …`.
    public var description: String { "\(reason): \(message)" }
}

/// Everything the engine asks the runtime to publish, in the order it happened.
///
/// The engine never performs I/O: every input (a remote step, a deep link, a renderer report,
/// an in-process stepper emission) produces zero or more of these events, delivered in order
/// to ``FlowCoordinator/onEvent`` and to every ``FlowCoordinator/events()`` stream.
public enum CoordinatorEvent: Sendable, CustomStringConvertible {
    /// A flow is coordinated (`parent` is `nil` for top-level flows).
    case flowStarted(flow: FlowID, parent: FlowID?, rootPresentableID: String)
    /// A flow became ready (RXFLOW.md rule 13); emitted once per flow.
    case flowReady(FlowID)
    /// A flow stopped; its bindings and children are gone.
    case flowEnded(flow: FlowID, reason: FlowEndReason)
    /// Before `navigate(to:)` (after adapt).
    case willNavigate(NavigationEvent)
    /// After `navigate(to:)` and what it did to the tree: the flows it ended (by `.end`, or by
    /// dismissing their roots) are ended, so every command of the navigation precedes it.
    case didNavigate(NavigationEvent)
    /// A change of the navigation tree for renderers.
    case command(NavigationCommand)
    /// A stepper was bound to a flow and presentable.
    case bound(BindingInfo)
    /// A binding went away.
    case unbound(BindingInfo, reason: UnbindReason)
    /// A step was refused or dropped, or a flow failed.
    case diagnostic(Diagnostic)

    /// One line per event, e.g. `did navigate flow=MainFlow#1 step=apiKeyIsComplete`.
    public var description: String {
        switch self {
        case .flowStarted(let flow, let parent, let root):
            return "flow started \(flow)" + (parent.map { " parent=\($0)" } ?? "") + " root=\(root)"
        case .flowReady(let flow): return "flow ready \(flow)"
        case .flowEnded(let flow, let reason): return "flow ended \(flow) \(reason)"
        case .willNavigate(let navigation): return "will navigate \(navigation)"
        case .didNavigate(let navigation): return "did navigate \(navigation)"
        case .command(let command): return "command \(command)"
        case .bound(let binding): return "bound \(binding)"
        case .unbound(let binding, let reason): return "unbound \(binding) (\(reason.rawValue))"
        case .diagnostic(let diagnostic): return "diagnostic \(diagnostic)"
        }
    }
}

/// What became of one step handed to the coordinator.
public enum StepOutcome: Sendable, Hashable, CustomStringConvertible {
    /// The flow navigated to it.
    case navigated(FlowID)
    /// It was dropped for `reason` (a diagnostic event was emitted too).
    case dropped(DiagnosticReason, flow: FlowID?)

    /// Short text.
    public var description: String {
        switch self {
        case .navigated(let flow): return "navigated \(flow)"
        case .dropped(let reason, let flow): return "dropped \(reason)" + (flow.map { " \($0)" } ?? "")
        }
    }
}
