import FlowBusWire
import Synchronization
import Testing

@testable import Flows

#if canImport(Glibc)
import Glibc
#endif

/// What refers to a coordinator or a flow without keeping it (a node's host, a stepper's relay, a
/// child flow's parent, a binding's flow) reads nil once it is gone, wherever it was let go.
@Suite("Weak references to coordinators and flows")
struct WeakReferenceTests {
    @Test("A coordinator let go: its nodes lose their host, its steppers' steps go nowhere")
    @FlowActor
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

    /// Holds a coordinator outside the actor, as an app's model on another thread does.
    final class Holder: @unchecked Sendable {
        var coordinator: FlowCoordinator?
    }

    @Test("A coordinator let go off the actor while a job on it emits a step: the step goes nowhere")
    func coordinatorLetGoOffTheActor() async {
        let holder = Holder()
        let (stepper, flow) = await Task { @FlowActor in
            (
                ManualStepper("driver", initial: TestStep.one),
                ScriptedFlow("Root", root: NavigationStack(id: "root")) { _, _ in .none }
            )
        }.value
        await Task { @FlowActor in
            let (coordinator, _) = makeCoordinator()
            holder.coordinator = coordinator
            await coordinator.coordinate(flow: flow, with: stepper)
            await coordinator.idle()
        }.value
        // A job already running on the actor emits once the coordinator was let go elsewhere.
        let released = Atomic<Bool>(false)
        let job = Task { @FlowActor in
            while !released.load(ordering: .acquiring) { usleep(1000) }
            stepper.steps.accept(TestStep.two)
        }
        try? await Task.sleep(for: .milliseconds(20))
        holder.coordinator = nil
        released.store(true, ordering: .releasing)
        await job.value
        try? await Task.sleep(for: .milliseconds(50))
        #expect(await Task { @FlowActor in flow.recorded }.value == ["one"])
    }

    @Test("A child flow's record reads its parent's until the parent's record is gone")
    @FlowActor
    func parentLetGo() {
        var parent: FlowRecord? = FlowRecord(
            id: FlowID(name: "Parent", instance: 1),
            flow: ScriptedFlow("Parent", root: Screen(id: "p")) { _, _ in .none },
            parent: nil, allowStepWhenDismissed: false)
        let child = FlowRecord(
            id: FlowID(name: "Child", instance: 1),
            flow: ScriptedFlow("Child", root: Screen(id: "c")) { _, _ in .none },
            parent: parent, allowStepWhenDismissed: false)
        weak let weakParent = parent
        let binding = StepperBinding(
            stepper: nil,
            info: BindingInfo(
                stepperID: "c/screen", flow: child.id, presentableID: "c/screen", role: .presentableStepper,
                allowStepWhenNotPresented: false, allowStepWhenDismissed: false, isRemote: true),
            flow: parent!, node: Screen(id: "c/screen"))
        #expect(child.parent === parent)
        #expect(binding.flow === parent)
        parent = nil
        #expect(weakParent == nil)
        #expect(child.parent == nil)
        #expect(binding.flow == nil)
    }
}
