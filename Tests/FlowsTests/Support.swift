import FlowBusWire
import Flows
import Testing

/// The steps of RxFlow's own FlowCoordinator tests.
enum TestStep: Step, Equatable {
    case one, two, three, four, multiple, unauthorized
}

struct AdaptFailure: Error {}

/// Records every event of a coordinator, in order.
@FlowActor
final class EventLog {
    private(set) var events: [CoordinatorEvent] = []

    func record(_ event: CoordinatorEvent) { events.append(event) }

    var lines: [String] { events.map(\.description) }

    /// `did navigate flow=… step=…` lines.
    var didNavigate: [String] {
        events.compactMap {
            if case .didNavigate(let n) = $0 { return "\(n.flow) \(describeStep(n.step))" } else { return nil }
        }
    }

    var willNavigate: [String] {
        events.compactMap {
            if case .willNavigate(let n) = $0 { return "\(n.flow) \(describeStep(n.step))" } else { return nil }
        }
    }

    var diagnostics: [Diagnostic] {
        events.compactMap { if case .diagnostic(let d) = $0 { return d } else { return nil } }
    }

    var reasons: [DiagnosticReason] { diagnostics.map(\.reason) }

    var commands: [NavigationCommand] {
        events.compactMap { if case .command(let c) = $0 { return c } else { return nil } }
    }

    func clear() { events.removeAll() }
}

@FlowActor
func makeCoordinator() -> (FlowCoordinator, EventLog) {
    let log = EventLog()
    let coordinator = FlowCoordinator { log.record($0) }
    return (coordinator, log)
}

/// A flow whose navigation is a closure and which records every step it navigates to.
@FlowActor
final class ScriptedFlow: Flow {
    let name: String
    let rootNode: NavigationNode
    var recorded: [String] = []
    var script: @FlowActor (ScriptedFlow, any Step) -> FlowContributors
    var adaptScript: (@FlowActor (any Step) async throws -> any Step)?

    init(
        _ name: String = "TestFlow", root: NavigationNode? = nil,
        script: @escaping @FlowActor (ScriptedFlow, any Step) -> FlowContributors = { _, _ in .none }
    ) {
        self.name = name
        self.rootNode = root ?? Screen(id: name.lowercased())
        self.script = script
    }

    var flowName: String { name }
    var root: any Presentable { rootNode }
    /// Only a flow given an adapt script adapts: the others take the synchronous path.
    var adaptsSteps: Bool { adaptScript != nil }
    var stack: NavigationStack { rootNode as! NavigationStack }

    func adapt(step: any Step) async throws -> any Step {
        guard let adaptScript else { return step }
        return try await adaptScript(step)
    }

    func navigate(to step: any Step) -> FlowContributors {
        recorded.append(describeStep(step))
        return script(self, step)
    }
}

/// An in-process stepper the test drives by hand.
@FlowActor
final class ManualStepper: Stepper {
    let steps = StepRelay()
    let initialStep: any Step
    let stepperID: String
    var onReady: (@FlowActor (ManualStepper) -> Void)?
    private(set) var readyCalls = 0

    init(_ id: String = "manual", initial: any Step = NoneStep(), onReady: (@FlowActor (ManualStepper) -> Void)? = nil)
    {
        self.stepperID = id
        self.initialStep = initial
        self.onReady = onReady
    }

    func readyToEmitSteps() {
        readyCalls += 1
        onReady?(self)
    }
}
