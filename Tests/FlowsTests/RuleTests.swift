import FlowBusWire
import Flows
import Testing

/// One or more tests per rule of RXFLOW.md. Where FlowBus differs on purpose, the name says so.
@Suite("RXFLOW.md rules")
@FlowActor
struct RuleTests {

    // MARK: Rule 1

    /// A parent that presents a child flow modally on `.one` and dismisses it on `.two`.
    func modalParent(child: ScriptedFlow, childStepper: any Stepper, allowStepWhenDismissed: Bool) -> ScriptedFlow {
        ScriptedFlow("ParentFlow", root: NavigationStack(id: "parent")) { flow, step in
            switch step as? TestStep {
            case .one:
                flow.stack.setRoot(Screen(id: "home"))
                flow.stack.present(child)
                return .one(
                    flowContributor: .contribute(
                        withNextPresentable: child, withNextStepper: childStepper,
                        allowStepWhenDismissed: allowStepWhenDismissed))
            case .two:
                flow.stack.dismissPresented()
                return .none
            default:
                return .none
            }
        }
    }

    @Test("Rule 1: the pipeline stops when the flow is dismissed")
    func rule1PipelineStopsAtDismissal() async {
        let (coordinator, log) = makeCoordinator()
        let child = ScriptedFlow("ChildFlow")
        let childStepper = ManualStepper("child")
        let parentStepper = ManualStepper("parent", initial: TestStep.one)
        let parent = modalParent(child: child, childStepper: childStepper, allowStepWhenDismissed: false)
        await coordinator.coordinate(flow: parent, with: parentStepper)
        childStepper.steps.accept(TestStep.three)
        await coordinator.idle()
        #expect(child.recorded == ["three"])

        parentStepper.steps.accept(TestStep.two)
        await coordinator.idle()
        #expect(log.lines.contains("flow ended ChildFlow#1 dismissed"))
        childStepper.steps.accept(TestStep.four)
        await coordinator.idle()
        #expect(child.recorded == ["three"])
        #expect(coordinator.activeFlows == [FlowID(name: "ParentFlow", instance: 1)])
    }

    @Test("Rule 1: allowStepWhenDismissed keeps the pipeline running after dismissal")
    func rule1AllowStepWhenDismissed() async {
        let (coordinator, _) = makeCoordinator()
        let child = ScriptedFlow("ChildFlow")
        let childStepper = ManualStepper("child")
        let parentStepper = ManualStepper("parent", initial: TestStep.one)
        let parent = modalParent(child: child, childStepper: childStepper, allowStepWhenDismissed: true)
        await coordinator.coordinate(flow: parent, with: parentStepper)
        parentStepper.steps.accept(TestStep.two)
        await coordinator.idle()
        #expect(child.isDismissed)
        childStepper.steps.accept(TestStep.four)
        await coordinator.idle()
        #expect(child.recorded == ["four"])
    }

    // MARK: Rule 2

    @Test(
        "Rule 2: flow stepper — initial step, then subscribe, then readyToEmitSteps; NoneStep filtered; never paused by visibility"
    )
    func rule2FlowStepper() async {
        let (coordinator, log) = makeCoordinator()
        let flow = ScriptedFlow(root: NavigationStack(id: "root")) { flow, step in
            switch step as? TestStep {
            case .one: flow.stack.setRoot(Screen(id: "a"))
            case .two: flow.stack.present(Screen(id: "modal"))  // covers the flow's root
            default: break
            }
            return .none
        }
        let stepper = ManualStepper(initial: TestStep.one) { stepper in
            stepper.steps.accept(NoneStep())
            stepper.steps.accept(TestStep.two)  // emitted inside readyToEmitSteps: not lost (#134)
        }
        await coordinator.coordinate(flow: flow, with: stepper)
        #expect(flow.recorded == ["one", "two"])
        #expect(!flow.isVisible)
        stepper.steps.accept(TestStep.three)
        await coordinator.idle()
        #expect(flow.recorded == ["one", "two", "three"])
        #expect(log.diagnostics.isEmpty)
        #expect(stepper.readyCalls == 1)
    }

    // MARK: Rule 3

    /// Root stack; `.one` pushes `a` with `stepperA`; `.two` pushes `b`; `.four` pops.
    func stackFlow(stepperA: any Stepper, notPresented: Bool = false, dismissed: Bool = false) -> ScriptedFlow {
        ScriptedFlow(root: NavigationStack(id: "root")) { flow, step in
            switch step as? TestStep {
            case .one:
                let a = Screen(id: "a")
                flow.stack.setRoot(Screen(id: "base"))
                flow.stack.push(a)
                return .one(
                    flowContributor: .contribute(
                        withNextPresentable: a, withNextStepper: stepperA,
                        allowStepWhenNotPresented: notPresented, allowStepWhenDismissed: dismissed))
            case .two:
                flow.stack.push(Screen(id: "b"))
            case .four:
                flow.stack.pop()
            default: break
            }
            return .none
        }
    }

    @Test("Rule 3: a step from a covered screen is dropped, not buffered — FlowBus reports the drop (not-visible)")
    func rule3DroppedWhenNotVisible() async {
        let (coordinator, log) = makeCoordinator()
        let stepperA = ManualStepper("a")
        let driver = ManualStepper("driver", initial: TestStep.one)
        let flow = stackFlow(stepperA: stepperA)
        await coordinator.coordinate(flow: flow, with: driver)
        driver.steps.accept(TestStep.two)
        await coordinator.idle()

        stepperA.steps.accept(TestStep.three)
        await coordinator.idle()
        #expect(flow.recorded == ["one", "two"])
        let drop = try! #require(log.diagnostics.last)
        #expect(drop.reason == .notVisible)
        #expect(drop.stepperID == "a")
        #expect(drop.presentableID == "a")
        #expect(drop.flow == FlowID(name: "TestFlow", instance: 1))
        #expect(drop.step.map(describeStep) == "three")

        driver.steps.accept(TestStep.four)  // pop b: a is visible again; the dropped step stays dropped
        await coordinator.idle()
        #expect(flow.recorded == ["one", "two", "four"])
        stepperA.steps.accept(TestStep.three)
        await coordinator.idle()
        #expect(flow.recorded == ["one", "two", "four", "three"])
        #expect(coordinator.snapshot().steppers["a"]?.dropped[.notVisible] == 1)
        #expect(coordinator.snapshot().steppers["a"]?.accepted == 1)
    }

    @Test("Rule 3: a step emitted before the presentable's visibility is known is dropped (and reported)")
    func rule3DroppedBeforeVisibilityKnown() async {
        let (coordinator, log) = makeCoordinator()
        let flow = ScriptedFlow { _, step in
            guard step as? TestStep == .one else { return .none }
            // The screen is never put in the tree: its visibility is never known.
            return .one(
                flowContributor: .contribute(
                    withNextPresentable: Screen(id: "nowhere"),
                    withNextStepper: OneStepper(withSingleStep: TestStep.two)))
        }
        await coordinator.coordinate(flow: flow, with: OneStepper(withSingleStep: TestStep.one))
        #expect(flow.recorded == ["one"])
        #expect(log.reasons == [.notVisible])
    }

    @Test("Rule 3: allowStepWhenNotPresented lets a hidden presentable's steps through")
    func rule3AllowStepWhenNotPresented() async {
        let (coordinator, log) = makeCoordinator()
        let flow = ScriptedFlow { _, step in
            guard step as? TestStep == .one else { return .none }
            return .one(
                flowContributor: .contribute(
                    withNextPresentable: Screen(id: "hidden"),
                    withNextStepper: OneStepper(withSingleStep: TestStep.two), allowStepWhenNotPresented: true))
        }
        await coordinator.coordinate(flow: flow, with: OneStepper(withSingleStep: TestStep.one))
        #expect(flow.recorded == ["one", "two"])
        #expect(log.diagnostics.isEmpty)
    }

    @Test(
        "Rule 3: a contributed stepper stops at its screen's dismissal — later remote steps are reported as dismissed")
    func rule3StopsAtDismissal() async {
        let (coordinator, log) = makeCoordinator()
        let driver = ManualStepper("driver", initial: TestStep.one)
        let flow = stackFlow(stepperA: RemoteStepper(id: "a"))
        await coordinator.coordinate(flow: flow, with: driver)
        driver.steps.accept(TestStep.two)  // push b over a
        await coordinator.idle()
        #expect(
            await coordinator.receive(CanonicalStep("x"), from: "a") == [
                .dropped(.notVisible, flow: FlowID(name: "TestFlow", instance: 1))
            ])
        // Pop b, then a (directly on the tree, as a test may).
        flow.stack.pop()
        flow.stack.pop()
        #expect(coordinator.snapshot().bindings.map(\.stepperID) == ["driver"])
        #expect(log.lines.contains("unbound a -> TestFlow#1 @ a (presentableDismissed)"))
        let outcome = await coordinator.receive(CanonicalStep("x"), from: "a")
        #expect(outcome == [.dropped(.dismissed, flow: FlowID(name: "TestFlow", instance: 1))])
        #expect(log.reasons.last == .dismissed)
        #expect(flow.recorded == ["one", "two"])
    }

    @Test("Rule 3: allowStepWhenDismissed keeps a dismissed screen's stepper bound")
    func rule3AllowStepWhenDismissed() async {
        let (coordinator, _) = makeCoordinator()
        let stepperA = ManualStepper("a")
        let driver = ManualStepper("driver", initial: TestStep.one)
        let flow = stackFlow(stepperA: stepperA, notPresented: true, dismissed: true)
        await coordinator.coordinate(flow: flow, with: driver)
        driver.steps.accept(TestStep.two)
        await coordinator.idle()
        flow.stack.pop()
        flow.stack.pop()  // "a" is dismissed now
        #expect(flow.stack.items.map(\.presentableID) == ["base"])
        stepperA.steps.accept(TestStep.three)
        await coordinator.idle()
        #expect(flow.recorded.last == "three")
    }

    // MARK: Rule 4

    @Test("Rule 4: a contributed flow gets a child coordinator held by the parent; the child refers to it weakly")
    func rule4ChildCoordinator() async {
        let (coordinator, _) = makeCoordinator()
        weak var weakChild: ScriptedFlow?
        let parent = ScriptedFlow("ParentFlow", root: NavigationStack(id: "parent")) { flow, step in
            switch step as? TestStep {
            case .one:
                let child = ScriptedFlow("ChildFlow", root: NavigationStack(id: "child"))
                weakChild = child
                flow.stack.setRoot(child)
                return .one(
                    flowContributor: .contribute(
                        withNextPresentable: child,
                        withNextStepper: OneStepper(withSingleStep: TestStep.two)))
            case .two:
                flow.stack.setRoot(Screen(id: "other"))  // dismisses the child's root
                return .none
            default:
                return .none
            }
        }
        let driver = ManualStepper("driver", initial: TestStep.one)
        await coordinator.coordinate(flow: parent, with: driver)
        let snapshot = coordinator.snapshot()
        let childID = FlowID(name: "ChildFlow", instance: 1)
        #expect(snapshot.flow(FlowID(name: "ParentFlow", instance: 1))?.children == [childID])
        #expect(snapshot.flow(childID)?.parent == FlowID(name: "ParentFlow", instance: 1))
        #expect(weakChild?.recorded == ["two"])
        driver.steps.accept(TestStep.two)
        await coordinator.idle()
        #expect(coordinator.activeFlows == [FlowID(name: "ParentFlow", instance: 1)])
        #expect(weakChild == nil)
    }

    @Test("Rule 4: a child flow ignores allowStepWhenNotPresented and inherits allowStepWhenDismissed")
    func rule4ChildFlags() async {
        let (coordinator, log) = makeCoordinator()
        let child = ScriptedFlow("ChildFlow")  // its root is never placed in the tree: not visible
        let childStepper = ManualStepper("child", initial: TestStep.one)
        let parent = ScriptedFlow("ParentFlow") { _, step in
            guard step as? TestStep == .one else { return .none }
            return .one(
                flowContributor: .contribute(
                    withNextPresentable: child, withNextStepper: childStepper,
                    allowStepWhenNotPresented: false, allowStepWhenDismissed: true))
        }
        await coordinator.coordinate(flow: parent, with: OneStepper(withSingleStep: TestStep.one))
        #expect(!child.isVisible)
        #expect(child.recorded == ["one"])
        #expect(log.diagnostics.isEmpty)
        let childID = FlowID(name: "ChildFlow", instance: 1)
        #expect(coordinator.snapshot().flow(childID)?.allowStepWhenDismissed == true)
        child.rootNode.dismiss()  // detached root: just dismissed
        childStepper.steps.accept(TestStep.two)
        await coordinator.idle()
        #expect(child.recorded == ["one", "two"])
        #expect(coordinator.activeFlows.contains(childID))
    }

    // MARK: Rule 5

    @Test("Rule 5: adapt replaces the step before navigate, for flow and presentable steppers")
    func rule5AdaptReplacesStep() async {
        let (coordinator, log) = makeCoordinator()
        let flow = ScriptedFlow { _, step in
            guard step as? TestStep == .two else { return .none }
            return .one(
                flowContributor: .contribute(
                    withNextPresentable: Screen(id: "hidden"),
                    withNextStepper: OneStepper(withSingleStep: TestStep.one), allowStepWhenNotPresented: true))
        }
        flow.adaptScript = { step in (step as? TestStep) == .one ? TestStep.unauthorized : step }
        await coordinator.coordinate(flow: flow, with: OneStepper(withSingleStep: TestStep.two))
        #expect(flow.recorded == ["two", "unauthorized"])
        #expect(log.willNavigate == ["TestFlow#1 two", "TestFlow#1 unauthorized"])
    }

    @Test(
        "Rule 5: an adapt error becomes NoneStep, which reaches willNavigate and navigate (FlowBus also reports flow-error)"
    )
    func rule5AdaptErrorBecomesNoneStep() async {
        let (coordinator, log) = makeCoordinator()
        let flow = ScriptedFlow()
        flow.adaptScript = { step in
            if (step as? TestStep) == .one { throw AdaptFailure() }
            return step
        }
        await coordinator.coordinate(flow: flow, with: OneStepper(withSingleStep: TestStep.one))
        #expect(flow.recorded == ["NoneStep"])
        #expect(log.willNavigate == ["TestFlow#1 NoneStep"])
        #expect(log.reasons == [.flowError])
        #expect(log.diagnostics.first?.step.map(describeStep) == "one")
    }

    @Test("Rule 5 (FlowBus differs): adapt results stay in arrival order — a slow adapt is never overtaken (#183)")
    func rule5OrderedAdapt() async {
        let (coordinator, _) = makeCoordinator()
        let flow = ScriptedFlow()
        flow.adaptScript = { step in
            if (step as? TestStep) == .one {
                for _ in 0..<50 { await Task.yield() }  // slow
            }
            return step
        }
        let stepper = ManualStepper()
        await coordinator.coordinate(flow: flow, with: stepper)
        stepper.steps.accept(TestStep.one)
        stepper.steps.accept(TestStep.two)
        stepper.steps.accept(TestStep.three)
        await coordinator.idle()
        #expect(flow.recorded == ["one", "two", "three"])
    }

    // MARK: Rule 6

    @Test(
        "Rule 6: one step runs adapt → willNavigate → navigate → didNavigate → side effects → readiness → contributors in order"
    )
    func rule6Order() async {
        let (coordinator, log) = makeCoordinator()
        var trace: [String] = []
        let flow = ScriptedFlow(root: NavigationStack(id: "root")) { flow, step in
            trace.append("navigate \(describeStep(step))")
            guard step as? TestStep == .one else { return .none }
            let a = Screen(id: "a")
            flow.stack.setRoot(a)
            return .multiple(
                .contribute(withNextPresentable: a, withNextStepper: OneStepper(withSingleStep: TestStep.two)),
                .contribute(withNextPresentable: a, withNextStepper: OneStepper(withSingleStep: TestStep.three)))
        }
        flow.adaptScript = { step in
            trace.append("adapt \(describeStep(step))")
            return step
        }
        coordinator.onEvent = { event in
            log.record(event)
            switch event {
            case .willNavigate(let n): trace.append("will \(describeStep(n.step))")
            case .didNavigate(let n): trace.append("did \(describeStep(n.step))")
            case .command(let c): trace.append("command \(c.verb.rawValue) \(c.target)")
            case .flowReady(let id): trace.append("ready \(id)")
            case .bound(let b): trace.append("bound \(b.presentableID)")
            default: break
            }
        }
        await coordinator.coordinate(flow: flow, with: OneStepper(withSingleStep: TestStep.one))
        #expect(
            Array(trace.prefix(9)) == [
                "command setRoot root", "bound root", "adapt one", "will one", "navigate one", "command setRoot a",
                "did one", "ready TestFlow#1", "bound a",
            ])
        #expect(flow.recorded == ["one", "two", "three"])
    }

    // MARK: Rule 7

    @Test("Rule 7: forwardToCurrentFlow runs after contributed steppers' steps")
    func rule7ForwardToCurrentFlow() async {
        let (coordinator, _) = makeCoordinator()
        let flow = ScriptedFlow { flow, step in
            guard step as? TestStep == .multiple else { return .none }
            return .multiple(flowContributors: [
                .contribute(
                    withNextPresentable: flow.rootNode, withNextStepper: OneStepper(withSingleStep: TestStep.two)),
                .forwardToCurrentFlow(withStep: TestStep.one),
            ])
        }
        await coordinator.coordinate(flow: flow, with: OneStepper(withSingleStep: TestStep.multiple))
        #expect(flow.recorded == ["multiple", "two", "one"])
    }

    @Test("Rule 7: forwardToParentFlow reaches the parent ahead of queued steps, skipping gate and NoneStep filter")
    func rule7ForwardToParentFlow() async {
        let (coordinator, log) = makeCoordinator()
        let child = ScriptedFlow("ChildFlow") { _, step in
            guard step as? TestStep == .one else { return .none }
            return .multiple(.forwardToParentFlow(withStep: TestStep.three), .forwardToParentFlow(withStep: NoneStep()))
        }
        let parent = ScriptedFlow("ParentFlow") { _, step in
            guard step as? TestStep == .one else { return .none }
            return .multiple(
                .contribute(withNextPresentable: child, withNextStepper: OneStepper(withSingleStep: TestStep.one)),
                .forwardToCurrentFlow(withStep: TestStep.two))
        }
        await coordinator.coordinate(flow: parent, with: OneStepper(withSingleStep: TestStep.one))
        #expect(parent.recorded == ["one", "three", "NoneStep", "two"])
        #expect(
            log.didNavigate == [
                "ParentFlow#1 one", "ChildFlow#1 one", "ParentFlow#1 three", "ParentFlow#1 NoneStep",
                "ParentFlow#1 two",
            ])
    }

    @Test("Rule 7: forwardToParentFlow at the root goes nowhere (FlowBus reports no-parent-flow)")
    func rule7ForwardAtRoot() async {
        let (coordinator, log) = makeCoordinator()
        let flow = ScriptedFlow { _, step in
            (step as? TestStep) == .one ? .one(flowContributor: .forwardToParentFlow(withStep: TestStep.two)) : .none
        }
        await coordinator.coordinate(flow: flow, with: OneStepper(withSingleStep: TestStep.one))
        #expect(flow.recorded == ["one"])
        #expect(log.reasons == [.noParentFlow])
    }

    // MARK: Rule 8

    @Test(
        "Rule 8: steps arriving during processing are queued FIFO; processing never interleaves, even across await adapt"
    )
    func rule8FIFO() async {
        let (coordinator, log) = makeCoordinator()
        let remote = RemoteStepper(id: "remote")
        let flow = ScriptedFlow { flow, step in
            if step as? TestStep == .one {
                return .one(
                    flowContributor: .contribute(
                        withNextPresentable: flow.rootNode,
                        withNextStepper: OneStepper(withSingleStep: TestStep.four)))
            }
            return .none
        }
        var arrivedDuringAdapt = false
        flow.adaptScript = { step in
            if (step as? TestStep) == .one {
                await Task.yield()
                // Arrivals while step one is suspended in adapt:
                arrivedDuringAdapt = coordinator.submit(CanonicalStep("two"), from: "remote")
                _ = coordinator.submit(CanonicalStep("three"), from: "remote")
                for _ in 0..<20 { await Task.yield() }
            }
            return step
        }
        await coordinator.coordinate(flow: flow, with: remote)
        remote.steps.accept(TestStep.one)
        await coordinator.idle()
        #expect(arrivedDuringAdapt)
        // "four" is caused by "one" and so comes before the later arrivals.
        #expect(flow.recorded == ["one", "four", "two", "three"])
        let markers = log.events.compactMap { event -> String? in
            switch event {
            case .willNavigate: return "will"
            case .didNavigate: return "did"
            default: return nil
            }
        }
        #expect(markers == Array(repeating: ["will", "did"], count: 4).flatMap { $0 })
    }

    // MARK: Rule 9

    @Test(
        "Rule 9: .end forwards its step to the parent and removes the child, its children and bindings; UI is left to the parent"
    )
    func rule9End() async {
        let (coordinator, log) = makeCoordinator()
        let grandChild = ScriptedFlow("GrandChildFlow")
        let child = ScriptedFlow("ChildFlow", root: NavigationStack(id: "child")) { flow, step in
            switch step as? TestStep {
            case .one:
                let screen = Screen(id: "child/screen")
                flow.stack.setRoot(screen)
                return .multiple(
                    .contribute(withNextPresentable: screen, withNextStepper: RemoteStepper(id: "child/screen")),
                    .contribute(withNextPresentable: grandChild, withNextStepper: ManualStepper("grandchild")))
            case .two:
                return .end(forwardToParentFlowWithStep: TestStep.three)
            default:
                return .none
            }
        }
        var childPresentedWhenParentNavigates: Bool?
        let parent = ScriptedFlow("ParentFlow", root: NavigationStack(id: "parent")) { flow, step in
            switch step as? TestStep {
            case .one:
                flow.stack.setRoot(Screen(id: "home"))
                flow.stack.present(child)
                return .one(
                    flowContributor: .contribute(
                        withNextPresentable: child,
                        withNextStepper: ManualStepper("childflow", initial: TestStep.one)))
            case .three:
                childPresentedWhenParentNavigates = flow.stack.presented != nil
                flow.stack.dismissPresented()
            default: break
            }
            return .none
        }
        coordinator.setStepDecoder({ $0.name == "two" ? TestStep.two : nil }, forFlowNamed: "ChildFlow")
        await coordinator.coordinate(flow: parent, with: OneStepper(withSingleStep: TestStep.one))
        #expect(coordinator.activeFlows.count == 3)
        log.clear()
        let outcome = await coordinator.receive(CanonicalStep("two"), from: "child/screen")
        #expect(outcome == [.navigated(FlowID(name: "ChildFlow", instance: 1))])
        #expect(childPresentedWhenParentNavigates == true)  // .end did not dismiss the child's UI
        #expect(parent.recorded == ["one", "three"])
        #expect(coordinator.activeFlows == [FlowID(name: "ParentFlow", instance: 1)])
        #expect(
            coordinator.snapshot().bindings.map(\.stepperID).allSatisfy { !$0.hasPrefix("child") && $0 != "grandchild" }
        )
        #expect(
            log.lines == [
                "will navigate flow=ChildFlow#1 step=two",
                "unbound grandchild -> GrandChildFlow#1 @ grandchildflow (flowEnded)",
                "command end grandchildflow (screen)",
                "flow ended GrandChildFlow#1 parentEnded",
                "unbound childflow -> ChildFlow#1 @ child (flowEnded)",
                "unbound child/screen -> ChildFlow#1 @ child/screen (flowEnded)",
                "command end child (stack)",
                "flow ended ChildFlow#1 ended(three)",
                // didNavigate closes the navigation: the end commands it caused come before it.
                "did navigate flow=ChildFlow#1 step=two",
                "will navigate flow=ParentFlow#1 step=three",
                "command dismiss child (stack) in parent",
                "did navigate flow=ParentFlow#1 step=three",
                // The parent was waiting for ChildFlow's readiness; a navigation without child flows readies it.
                "flow ready ParentFlow#1",
            ])
    }

    @Test("Rule 9: .end at the root drops the step (FlowBus reports no-parent-flow) and ends the root flow")
    func rule9EndAtRoot() async {
        let (coordinator, log) = makeCoordinator()
        let flow = ScriptedFlow { _, step in
            (step as? TestStep) == .one ? .end(forwardToParentFlowWithStep: TestStep.two) : .none
        }
        await coordinator.coordinate(flow: flow, with: OneStepper(withSingleStep: TestStep.one))
        #expect(flow.recorded == ["one"])
        #expect(log.reasons == [.noParentFlow])
        #expect(coordinator.activeFlows.isEmpty)
    }

    // MARK: Rule 10

    @Test("Rule 10: dismissing a flow's root ends it and its children; nothing is forwarded to the parent")
    func rule10Dismissal() async {
        let (coordinator, log) = makeCoordinator()
        let grandChild = ScriptedFlow("GrandChildFlow")
        let child = ScriptedFlow("ChildFlow", root: NavigationStack(id: "child")) { flow, step in
            guard step as? TestStep == .one else { return .none }
            flow.stack.setRoot(grandChild)
            return .one(flowContributor: .contribute(withNextPresentable: grandChild, withNextStepper: NoneStepper()))
        }
        let driver = ManualStepper("driver", initial: TestStep.one)
        let parent = ScriptedFlow("ParentFlow", root: NavigationStack(id: "parent")) { flow, step in
            switch step as? TestStep {
            case .one:
                flow.stack.setRoot(Screen(id: "home"))
                flow.stack.push(child)
                return .one(
                    flowContributor: .contribute(
                        withNextPresentable: child,
                        withNextStepper: OneStepper(withSingleStep: TestStep.one)))
            case .two:
                flow.stack.pop()
            default: break
            }
            return .none
        }
        await coordinator.coordinate(flow: parent, with: driver)
        #expect(coordinator.activeFlows.count == 3)
        driver.steps.accept(TestStep.two)
        await coordinator.idle()
        #expect(coordinator.activeFlows == [FlowID(name: "ParentFlow", instance: 1)])
        #expect(log.lines.contains("flow ended ChildFlow#1 dismissed"))
        #expect(log.lines.contains("flow ended GrandChildFlow#1 parentEnded"))
        #expect(parent.recorded == ["one", "two"])
    }

    // MARK: Rule 11

    /// RxFlow's TestDeepLinkFlow: `.one` creates two children each driven by OneStepper(.two).
    final class DeepLinkFlow: Flow {
        let node: Screen
        let log: EventLogBox
        init(_ log: EventLogBox, id: String = "deep") {
            self.log = log
            self.node = Screen(id: id)
        }
        var root: any Presentable { node }
        func navigate(to step: any Step) -> FlowContributors {
            log.steps.append("\(node.presentableID):\(describeStep(step))")
            guard step as? TestStep == .one, node.presentableID == "deep" else { return .none }
            return .multiple(
                .contribute(
                    withNextPresentable: DeepLinkFlow(log, id: node.presentableID + "/a"),
                    withNextStepper: OneStepper(withSingleStep: TestStep.two)),
                .contribute(
                    withNextPresentable: DeepLinkFlow(log, id: node.presentableID + "/b"),
                    withNextStepper: OneStepper(withSingleStep: TestStep.two)))
        }
    }

    final class EventLogBox {
        var steps: [String] = []
    }

    @Test("Rule 11: a deep link reaches every active flow recursively, skipping the gate")
    func rule11DeepLinkReachesEveryFlow() async {
        let (coordinator, _) = makeCoordinator()
        let box = EventLogBox()
        let flow = DeepLinkFlow(box)
        await coordinator.coordinate(flow: flow, with: OneStepper(withSingleStep: TestStep.one))
        await coordinator.waitUntilReady([flow])
        box.steps.removeAll()
        let outcomes = await coordinator.navigate(to: TestStep.three)
        #expect(box.steps == ["deep:three", "deep/a:three", "deep/b:three"])
        #expect(outcomes.count == 3)
    }

    @Test("Rule 11: a child created by the deep link also receives it, after its own initial step (#162)")
    func rule11ChildCreatedByLink() async {
        let (coordinator, _) = makeCoordinator()
        let box = EventLogBox()
        let flow = DeepLinkFlow(box)
        await coordinator.coordinate(flow: flow, with: NoneStepper())
        await coordinator.navigate(to: TestStep.one)
        #expect(box.steps == ["deep:one", "deep/a:two", "deep/b:two", "deep/a:one", "deep/b:one"])
    }

    @Test("Rule 11: a canonical deep link is decoded per flow; unknown-step only when no flow understands it")
    func rule11CanonicalDeepLink() async {
        let (coordinator, log) = makeCoordinator()
        let child = ScriptedFlow("ChildFlow")
        let parent = ScriptedFlow("ParentFlow") { _, step in
            (step as? TestStep) == .one
                ? .one(flowContributor: .contribute(withNextPresentable: child, withNextStepper: NoneStepper())) : .none
        }
        coordinator.setStepDecoder({ $0.name == "one" ? TestStep.one : nil }, forFlowNamed: "ParentFlow")
        coordinator.setStepDecoder({ $0.name == "three" ? TestStep.three : nil }, forFlowNamed: "ChildFlow")
        await coordinator.coordinate(flow: parent, with: OneStepper(withSingleStep: TestStep.one))
        let outcomes = await coordinator.navigate(to: CanonicalStep("three"))
        #expect(
            outcomes == [
                .dropped(.unknownStep, flow: FlowID(name: "ParentFlow", instance: 1)),
                .navigated(FlowID(name: "ChildFlow", instance: 1)),
            ])
        #expect(child.recorded == ["three"])
        #expect(log.diagnostics.isEmpty)
        await coordinator.navigate(to: CanonicalStep("nobodyKnowsMe"))
        #expect(log.reasons == [.unknownStep])
    }

    // MARK: Rule 12

    @Test("Rule 12: the root observer sees every descendant's willNavigate and didNavigate")
    func rule12RootSeesDescendants() async {
        let (coordinator, log) = makeCoordinator()
        let grandChild = ScriptedFlow("GrandChildFlow")
        let child = ScriptedFlow("ChildFlow") { _, step in
            (step as? TestStep) == .two
                ? .one(
                    flowContributor: .contribute(
                        withNextPresentable: grandChild,
                        withNextStepper: OneStepper(withSingleStep: TestStep.three))) : .none
        }
        let parent = ScriptedFlow("ParentFlow") { _, step in
            (step as? TestStep) == .one
                ? .one(
                    flowContributor: .contribute(
                        withNextPresentable: child,
                        withNextStepper: OneStepper(withSingleStep: TestStep.two))) : .none
        }
        await coordinator.coordinate(flow: parent, with: OneStepper(withSingleStep: TestStep.one))
        #expect(log.willNavigate == ["ParentFlow#1 one", "ChildFlow#1 two", "GrandChildFlow#1 three"])
        #expect(log.didNavigate == log.willNavigate)
    }

    // MARK: Rule 13

    @Test("Rule 13: a flow is ready at once without child flows, else when all its child flows are ready")
    func rule13Readiness() async {
        let (coordinator, log) = makeCoordinator()
        let childStepper = ManualStepper("child")
        let child = ScriptedFlow("ChildFlow")
        let other = ScriptedFlow("OtherFlow")
        let parent = ScriptedFlow("ParentFlow") { _, step in
            (step as? TestStep) == .one
                ? .multiple(
                    .contribute(withNextPresentable: child, withNextStepper: childStepper),
                    .contribute(withNextPresentable: other, withNextStepper: OneStepper(withSingleStep: TestStep.one)))
                : .none
        }
        await coordinator.coordinate(flow: parent, with: OneStepper(withSingleStep: TestStep.one))
        #expect(coordinator.isReady(other))
        #expect(!coordinator.isReady(child))
        #expect(!coordinator.isReady(parent))
        childStepper.steps.accept(TestStep.two)
        await coordinator.idle()
        #expect(coordinator.isReady(parent))
        let ready = log.events.compactMap { if case .flowReady(let id) = $0 { return id.name } else { return nil } }
        #expect(ready == ["OtherFlow", "ChildFlow", "ParentFlow"])
    }

    @Test("Rule 13 (FlowBus differs): readiness is replayed — a late waiter sees ready at once (#143)")
    func rule13ReadinessReplayed() async {
        let (coordinator, _) = makeCoordinator()
        let flow = ScriptedFlow()
        await coordinator.coordinate(flow: flow, with: OneStepper(withSingleStep: TestStep.one))
        var ran = false
        coordinator.use([flow], when: .ready) { _ in ran = true }
        #expect(ran)  // synchronously, no waiting
        await coordinator.waitUntilReady([flow])  // returns at once
    }

    @Test("Rule 13: .created runs synchronously; .ready waits for the flow's first navigation")
    func rule13Created() async {
        let (coordinator, _) = makeCoordinator()
        let flow = ScriptedFlow()
        var created: [String] = []
        var ready = false
        coordinator.use([flow], when: .created) { roots in created = roots.map(\.presentableID) }
        coordinator.use([flow], when: .ready) { _ in ready = true }
        #expect(created == ["testflow"])
        #expect(!ready)
        coordinator.start(flow: flow, with: OneStepper(withSingleStep: TestStep.one))
        #expect(!ready)
        await coordinator.idle()
        #expect(ready)
    }

    // MARK: Rule 14

    @Test("Rule 14: errors never end the chain")
    func rule14ErrorsNeverEndChain() async {
        let (coordinator, log) = makeCoordinator()
        let stepper = ManualStepper()
        let flow = ScriptedFlow()
        flow.adaptScript = { step in
            if (step as? TestStep) != .three { throw AdaptFailure() }
            return step
        }
        await coordinator.coordinate(flow: flow, with: stepper)
        stepper.steps.accept(TestStep.one)
        stepper.steps.accept(TestStep.two)
        stepper.steps.accept(TestStep.three)
        await coordinator.idle()
        #expect(flow.recorded == ["NoneStep", "NoneStep", "three"])
        #expect(log.reasons == [.flowError, .flowError])
    }

    @Test("Rule 14: the chain holds flows, screens and steppers until .end, then lets them go (#152, #92)")
    func rule14Lifetimes() async {
        let (coordinator, _) = makeCoordinator()
        weak var weakChild: ScriptedFlow?
        weak var weakScreen: Screen?
        weak var weakStepper: ManualStepper?
        let driver = ManualStepper("driver", initial: TestStep.one)
        let parent = ScriptedFlow("ParentFlow", root: NavigationStack(id: "parent")) { flow, step in
            switch step as? TestStep {
            case .one:
                let child = ScriptedFlow("ChildFlow", root: NavigationStack(id: "child")) { child, step in
                    if step as? TestStep == .two { return .end(forwardToParentFlowWithStep: TestStep.three) }
                    let screen = Screen(id: "child/screen")
                    let stepper = ManualStepper("child/screen")
                    weakScreen = screen
                    weakStepper = stepper
                    child.stack.setRoot(screen)
                    return .one(flowContributor: .contribute(withNextPresentable: screen, withNextStepper: stepper))
                }
                weakChild = child
                flow.stack.setRoot(Screen(id: "home"))
                flow.stack.present(child)
                return .one(
                    flowContributor: .contribute(
                        withNextPresentable: child,
                        withNextStepper: OneStepper(withSingleStep: TestStep.one)))
            case .three:
                flow.stack.dismissPresented()
            default: break
            }
            return .none
        }
        await coordinator.coordinate(flow: parent, with: driver)
        #expect(weakChild != nil && weakScreen != nil && weakStepper != nil)
        weakStepper?.steps.accept(TestStep.two)
        await coordinator.idle()
        #expect(parent.recorded == ["one", "three"])
        #expect(weakChild == nil)
        #expect(weakScreen == nil)
        #expect(weakStepper == nil)
    }
}
