import FlowBusWire
import Testing

@testable import Flows

/// What refers to a coordinator or a flow without keeping it (a node's host, a stepper's relay, a
/// child flow's parent, a binding's flow) reads nil once it is gone, as a weak reference would.
@Suite("Links to coordinators and flows")
@FlowActor
struct LinkTests {
    @Test("A coordinator let go: its nodes lose their host, its steppers' steps go nowhere")
    func coordinatorLetGo() async {
        let stack = NavigationStack(id: "root")
        let stepper = ManualStepper("driver", initial: TestStep.one)
        let flow = ScriptedFlow("Root", root: stack) { _, _ in .none }
        weak var weakCoordinator: FlowCoordinator?
        do {
            let (coordinator, _) = makeCoordinator()
            weakCoordinator = coordinator
            await coordinator.coordinate(flow: flow, with: stepper)
            await coordinator.idle()
            #expect(stack.host === coordinator)
            #expect(flow.recorded == ["one"])
        }
        #expect(weakCoordinator == nil)
        #expect(stack.host == nil)
        stepper.steps.accept(TestStep.two)
        #expect(flow.recorded == ["one"])
    }

    @Test("A child flow's record reads its parent's until the parent's record is gone")
    func parentLink() {
        var parent: FlowRecord? = FlowRecord(
            id: FlowID(name: "Parent", instance: 1),
            flow: ScriptedFlow("Parent", root: Screen(id: "p")) { _, _ in .none },
            parent: nil, allowStepWhenDismissed: false)
        let child = FlowRecord(
            id: FlowID(name: "Child", instance: 1),
            flow: ScriptedFlow("Child", root: Screen(id: "c")) { _, _ in .none },
            parent: parent, allowStepWhenDismissed: false)
        weak let weakParent = parent
        let node = Screen(id: "c/screen")
        let binding = StepperBinding(
            stepper: nil,
            info: BindingInfo(
                stepperID: "c/screen", flow: child.id, presentableID: "c/screen", role: .presentableStepper,
                allowStepWhenNotPresented: false, allowStepWhenDismissed: false, isRemote: true),
            flow: parent!, node: node)
        #expect(child.parent === parent)
        #expect(binding.flow === parent)
        parent = nil
        #expect(weakParent == nil)
        #expect(child.parent == nil)
        #expect(binding.flow == nil)
    }
}
