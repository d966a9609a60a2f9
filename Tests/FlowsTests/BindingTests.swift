import FlowBusWire
import Flows
import Testing

/// Remote steppers, bindings, decoding, counters and the snapshot.
@Suite("Bindings and remote steps")
@FlowActor
struct BindingTests {
    /// A flow whose `.one` pushes screen `s` bound to remote stepper `s` (through `standIn`, if
    /// given, else a stand-in of its own), and that ends on the canonical step `endsOn`, if given.
    func remoteFlow(
        _ name: String = "TestFlow", stepperID: String = "s", endsOn: String? = nil, standIn: RemoteStepper? = nil
    ) -> ScriptedFlow {
        ScriptedFlow(name, root: NavigationStack(id: name.lowercased())) { flow, step in
            if let endsOn, (step as? CanonicalStep)?.name == endsOn {
                return .end(forwardToParentFlowWithStep: NoneStep())
            }
            guard step as? TestStep == .one else { return .none }
            let screen = Screen(id: stepperID)
            flow.stack.setRoot(screen)
            return .one(
                flowContributor: .contribute(
                    withNextPresentable: screen, withNextStepper: standIn ?? RemoteStepper(id: stepperID)))
        }
    }

    /// A flow whose `.one` shows a tab bar of `visible` (selected) and `hidden`, each started by `.one`.
    func tabBarFlow(_ visible: ScriptedFlow, _ hidden: ScriptedFlow) -> ScriptedFlow {
        ScriptedFlow("ParentFlow", root: TabBar(id: "tabs")) { flow, step in
            guard step as? TestStep == .one else { return .none }
            (flow.rootNode as! TabBar).setTabs([visible, hidden], selected: 0)
            return .multiple(
                .contribute(withNextPresentable: visible, withNextStepper: OneStepper(withSingleStep: TestStep.one)),
                .contribute(withNextPresentable: hidden, withNextStepper: OneStepper(withSingleStep: TestStep.one)))
        }
    }

    @Test("A step from an unbound stepper id is refused with unbound-stepper")
    func unboundStepper() async {
        let (coordinator, log) = makeCoordinator()
        await coordinator.coordinate(flow: remoteFlow(), with: OneStepper(withSingleStep: TestStep.one))
        let outcome = await coordinator.receive(CanonicalStep("x"), from: "stranger")
        #expect(outcome == [.dropped(.unboundStepper, flow: nil)])
        let diagnostic = try! #require(log.diagnostics.last)
        #expect(diagnostic.reason == .unboundStepper && diagnostic.stepperID == "stranger")
        #expect(coordinator.snapshot().totals.dropped[.unboundStepper] == 1)
        #expect(coordinator.snapshot().steppers["stranger"] == nil)  // no per-id state for strangers
    }

    @Test("A remote process cannot send under an in-process stepper's id")
    func noImpersonation() async {
        let (coordinator, log) = makeCoordinator()
        let flow = ScriptedFlow()
        await coordinator.coordinate(flow: flow, with: ManualStepper("local"))
        await coordinator.receive(CanonicalStep("x"), from: "local")
        #expect(log.reasons == [.unboundStepper])
        #expect(flow.recorded.isEmpty)
    }

    @Test("A remote step reaches its flow, decoded by the registered decoder; unknown-step when it cannot decode")
    func decoding() async {
        let (coordinator, log) = makeCoordinator()
        let flow = remoteFlow()
        coordinator.setStepDecoder({ $0.name == "two" ? TestStep.two : nil }, forFlowNamed: "TestFlow")
        await coordinator.coordinate(flow: flow, with: OneStepper(withSingleStep: TestStep.one))
        #expect(
            await coordinator.receive(CanonicalStep("two"), from: "s") == [
                .navigated(FlowID(name: "TestFlow", instance: 1))
            ])
        #expect(
            await coordinator.receive(CanonicalStep("nine"), from: "s") == [
                .dropped(.unknownStep, flow: FlowID(name: "TestFlow", instance: 1))
            ])
        #expect(flow.recorded == ["one", "two"])
        #expect(log.reasons == [.unknownStep])
        let counters = try! #require(coordinator.snapshot().steppers["s"])
        #expect(counters.accepted == 1 && counters.dropped == [.unknownStep: 1])
    }

    @Test("A typed flow can decode through its own step(from:)")
    func flowOwnDecoder() async {
        final class TypedFlow: Flow {
            let screen = Screen(id: "typed")
            var recorded: [TestStep] = []
            var root: any Presentable { screen }
            func step(from canonical: CanonicalStep) -> (any Step)? {
                canonical.name == "three" ? TestStep.three : nil
            }
            func navigate(to step: any Step) -> FlowContributors {
                if let step = step as? TestStep { recorded.append(step) }
                return .none
            }
        }
        let (coordinator, _) = makeCoordinator()
        let flow = TypedFlow()
        await coordinator.coordinate(flow: flow, with: RemoteStepper(id: "typed"))
        await coordinator.receive(CanonicalStep("three"), from: "typed")
        #expect(flow.recorded == [.three])
    }

    @Test("One stepper id bound in two flows: each binding is gated separately")
    func twoBindings() async {
        let (coordinator, log) = makeCoordinator()
        let visible = remoteFlow("VisibleFlow", stepperID: "shared")
        let hidden = remoteFlow("HiddenFlow", stepperID: "shared")
        await coordinator.coordinate(flow: tabBarFlow(visible, hidden), with: OneStepper(withSingleStep: TestStep.one))
        let outcome = await coordinator.receive(CanonicalStep("hello"), from: "shared")
        #expect(
            Set(outcome) == [
                .navigated(FlowID(name: "VisibleFlow", instance: 1)),
                .dropped(.notVisible, flow: FlowID(name: "HiddenFlow", instance: 1)),
            ])
        #expect(log.reasons == [.notVisible])
        let counters = try! #require(coordinator.snapshot().steppers["shared"])
        #expect(counters.accepted == 1 && counters.dropped[.notVisible] == 1)
    }

    @Test("A stepper id's counters outlive one of its bindings: a flow that ends leaves its counts to the id")
    func countersOutliveABinding() async {
        let (coordinator, _) = makeCoordinator()
        // Two flows bind "shared"; the visible one ends on "bye", the hidden one stays.
        let visible = remoteFlow("VisibleFlow", stepperID: "shared", endsOn: "bye")
        let hidden = remoteFlow("HiddenFlow", stepperID: "shared", endsOn: "bye")
        await coordinator.coordinate(flow: tabBarFlow(visible, hidden), with: OneStepper(withSingleStep: TestStep.one))
        await coordinator.receive(CanonicalStep("hello"), from: "shared")
        await coordinator.receive(CanonicalStep("bye"), from: "shared")
        let snapshot = coordinator.snapshot()
        #expect(snapshot.flows.map(\.id.name).contains("VisibleFlow") == false, "the visible flow ended")
        #expect(snapshot.bindings.filter { $0.stepperID == "shared" }.count == 1)
        let counters = try! #require(snapshot.steppers["shared"])
        #expect(counters.accepted == 2, "hello and bye, both taken by the visible flow's binding")
        #expect(counters.dropped[.notVisible] == 2, "hello and bye, both refused by the hidden one's")
        await coordinator.receive(CanonicalStep("again"), from: "shared")
        #expect(coordinator.snapshot().steppers["shared"]?.dropped[.notVisible] == 3)
    }

    @Test("A remote binding keeps no stand-in; one the caller keeps delivers until its binding goes")
    func remoteStandIns() async {
        let (coordinator, log) = makeCoordinator()
        weak var forgotten: RemoteStepper?
        let flow = ScriptedFlow("TestFlow", root: NavigationStack(id: "testflow")) { flow, step in
            guard step as? TestStep == .one else { return .none }
            let screen = Screen(id: "s")
            flow.stack.setRoot(screen)
            let standIn = RemoteStepper(id: "s")
            forgotten = standIn
            return .one(flowContributor: .contribute(withNextPresentable: screen, withNextStepper: standIn))
        }
        await coordinator.coordinate(flow: flow, with: OneStepper(withSingleStep: TestStep.one))
        #expect(forgotten == nil, "nothing keeps a stand-in once its screen is bound")
        #expect(
            await coordinator.receive(CanonicalStep("two"), from: "s") == [
                .navigated(FlowID(name: "TestFlow", instance: 1))
            ])

        let kept = RemoteStepper(id: "k")
        let keeper = remoteFlow("KeptFlow", stepperID: "k", endsOn: "bye", standIn: kept)
        await coordinator.coordinate(flow: keeper, with: OneStepper(withSingleStep: TestStep.one))
        #expect(kept.hasSubscribers)
        kept.accept(CanonicalStep("hello"))
        await coordinator.idle()
        await coordinator.receive(CanonicalStep("bye"), from: "k")
        #expect(!kept.hasSubscribers, "the flow ended, unbinding k")
        kept.accept(CanonicalStep("late"))
        await coordinator.idle()
        #expect(keeper.recorded == ["one", "hello", "bye"])

        // Bound again: a step reaches the new binding once (the old one's subscription delivers nothing).
        let again = remoteFlow("AgainFlow", stepperID: "k", standIn: kept)
        await coordinator.coordinate(flow: again, with: OneStepper(withSingleStep: TestStep.one))
        kept.accept(CanonicalStep("hi"))
        await coordinator.idle()
        #expect(again.recorded == ["one", "hi"])
        #expect(log.reasons == [.noParentFlow], "KeptFlow's end; the late step went nowhere, unreported")
    }

    @Test("The snapshot shows the live tree per flow, bindings and counters")
    func snapshot() async {
        let (coordinator, _) = makeCoordinator()
        let child = remoteFlow("ChildFlow", stepperID: "child/screen")
        let parent = ScriptedFlow("ParentFlow", root: NavigationStack(id: "parent")) { flow, step in
            guard step as? TestStep == .one else { return .none }
            flow.stack.setRoot(Screen(id: "home"))
            flow.stack.push(child)
            return .one(
                flowContributor: .contribute(
                    withNextPresentable: child, withNextStepper: OneStepper(withSingleStep: TestStep.one)))
        }
        await coordinator.coordinate(flow: parent, with: RemoteStepper(id: "parent"))
        coordinator.submitDeepLink(TestStep.one)
        await coordinator.idle()
        let snapshot = coordinator.snapshot()
        #expect(snapshot.flows.map(\.id.description) == ["ParentFlow#1", "ChildFlow#1"])
        let parentTree = try! #require(snapshot.flows.first?.root)
        #expect(parentTree.id == "parent" && parentTree.placement == .window && parentTree.isVisible)
        #expect(parentTree.children.map(\.id) == ["home", "childflow"])
        #expect(parentTree.children[1].childFlow == FlowID(name: "ChildFlow", instance: 1))
        #expect(parentTree.children[1].children.isEmpty)
        let childTree = try! #require(snapshot.flows.last?.root)
        #expect(childTree.children.map(\.id) == ["child/screen"])
        #expect(childTree.children[0].isVisible)
        let remote = snapshot.bindings.filter(\.isRemote).map(\.description)
        #expect(remote == ["child/screen -> ChildFlow#1 @ child/screen", "parent -> ParentFlow#1 @ parent"])
        #expect(snapshot.queuedSteps == 0)
    }

    @Test("Every drop is observable: not-visible, dismissed, unbound-stepper all counted and reported (#163, #88, #60)")
    func everyDropObservable() async {
        let (coordinator, log) = makeCoordinator()
        let driver = ManualStepper("driver", initial: TestStep.one)
        let flow = ScriptedFlow(root: NavigationStack(id: "root")) { flow, step in
            switch step as? TestStep {
            case .one:
                let a = Screen(id: "a")
                flow.stack.setRoot(Screen(id: "base"))
                flow.stack.push(a)
                return .one(
                    flowContributor: .contribute(withNextPresentable: a, withNextStepper: RemoteStepper(id: "a")))
            case .two:
                flow.stack.present(Screen(id: "cover"))
            case .three:
                flow.stack.dismissPresented()
                flow.stack.pop()
            default: break
            }
            return .none
        }
        await coordinator.coordinate(flow: flow, with: driver)
        driver.steps.accept(TestStep.two)
        await coordinator.idle()
        await coordinator.receive(CanonicalStep("x"), from: "a")
        driver.steps.accept(TestStep.three)
        await coordinator.idle()
        await coordinator.receive(CanonicalStep("x"), from: "a")
        await coordinator.receive(CanonicalStep("x"), from: "b")
        #expect(log.reasons == [.notVisible, .dismissed, .unboundStepper])
        #expect(coordinator.snapshot().totals.dropped == [.notVisible: 1, .dismissed: 1, .unboundStepper: 1])
    }

    @Test("Events reach AsyncStream subscribers in the same order as onEvent")
    func eventStream() async {
        let (coordinator, log) = makeCoordinator()
        let stream = coordinator.events()
        await coordinator.coordinate(flow: remoteFlow(), with: OneStepper(withSingleStep: TestStep.one))
        coordinator.finishEvents()
        var lines: [String] = []
        for await event in stream { lines.append(event.description) }
        #expect(lines == log.lines)
        #expect(!lines.isEmpty)
    }

    @Test("Two instances of one flow type get distinct ids")
    func flowIdentity() async {
        let (coordinator, _) = makeCoordinator()
        let a = ScriptedFlow("WishlistFlow")
        let b = ScriptedFlow("WishlistFlow")
        let parent = ScriptedFlow("MainFlow") { _, _ in
            .multiple(
                .contribute(withNextPresentable: a, withNextStepper: NoneStepper()),
                .contribute(withNextPresentable: b, withNextStepper: NoneStepper()))
        }
        await coordinator.coordinate(flow: parent, with: OneStepper(withSingleStep: TestStep.one))
        #expect(coordinator.flowID(of: a)?.description == "WishlistFlow#1")
        #expect(coordinator.flowID(of: b)?.description == "WishlistFlow#2")
    }

    @Test("receiveNow processes a step and what it caused on the caller's stack when no flow adapts")
    func receiveNowIsSynchronous() async {
        let (coordinator, log) = makeCoordinator()
        let flow = remoteFlow()
        await coordinator.coordinate(flow: flow, with: OneStepper(withSingleStep: TestStep.one))
        log.clear()
        guard case .done(let outcomes) = coordinator.receiveNow(CanonicalStep("two"), from: "s") else {
            Issue.record("a flow that does not adapt never needs the asynchronous path")
            return
        }
        // Nothing was awaited: the navigation already happened.
        #expect(outcomes == [.navigated(FlowID(name: "TestFlow", instance: 1))])
        #expect(log.didNavigate == ["TestFlow#1 two"])
        guard case .done(let refused) = coordinator.receiveNow(CanonicalStep("x"), from: "stranger") else {
            Issue.record("a refusal at the gate is immediate")
            return
        }
        #expect(refused == [.dropped(.unboundStepper, flow: nil)])
    }

    @Test("receiveNow also processes, before it returns, a step a flow submits while it navigates")
    func receiveNowProcessesWhatIsSubmitted() async {
        let (coordinator, log) = makeCoordinator()
        let flow = remoteFlow()
        await coordinator.coordinate(flow: flow, with: OneStepper(withSingleStep: TestStep.one))
        let script = flow.script
        flow.script = { flow, step in
            // Submitted without the received step's ticket: not a consequence the caller waits for.
            if (step as? CanonicalStep)?.name == "two" { _ = coordinator.submit(CanonicalStep("three"), from: "s") }
            return script(flow, step)
        }
        log.clear()
        guard case .done(let outcomes) = coordinator.receiveNow(CanonicalStep("two"), from: "s") else {
            Issue.record("a flow that does not adapt never needs the asynchronous path")
            return
        }
        #expect(outcomes == [.navigated(FlowID(name: "TestFlow", instance: 1))])
        #expect(log.didNavigate == ["TestFlow#1 two", "TestFlow#1 three"], "nothing is left in the queue")
    }

    @Test("receiveNow leaves a step to the asynchronous path when its flow adapts; later steps keep arrival order")
    func receiveNowHandsOverToAdapt() async {
        let (coordinator, log) = makeCoordinator()
        let flow = remoteFlow()
        flow.adaptScript = { step in
            await Task.yield()
            return step
        }
        await coordinator.coordinate(flow: flow, with: OneStepper(withSingleStep: TestStep.one))
        log.clear()
        guard case .pending(let first) = coordinator.receiveNow(CanonicalStep("two"), from: "s") else {
            Issue.record("an adapting flow's step must be awaited")
            return
        }
        #expect(log.didNavigate.isEmpty, "not navigated before its adapt ran")
        #expect(await first.outcomes() == [.navigated(FlowID(name: "TestFlow", instance: 1))])
        guard case .pending(let second) = coordinator.receiveNow(CanonicalStep("three"), from: "s") else {
            Issue.record("an adapting flow's step must be awaited")
            return
        }
        _ = await second.outcomes()
        #expect(log.didNavigate == ["TestFlow#1 two", "TestFlow#1 three"])
    }

    @Test("A snapshot with a limit lists at most that many flows, bindings, steppers and children, and counts them all")
    func limitedSnapshot() async {
        let (coordinator, _) = makeCoordinator()
        let flow = ScriptedFlow("Big", root: NavigationStack(id: "big")) { flow, step in
            guard step as? TestStep == .one else { return .none }
            var contributors: [FlowContributor] = []
            for index in 0..<30 {
                let screen = Screen(id: "screen/\(index)")
                flow.stack.push(screen)
                contributors.append(
                    .contribute(
                        withNextPresentable: screen, withNextStepper: RemoteStepper(id: "s/\(index)"),
                        allowStepWhenNotPresented: true))
            }
            return .multiple(flowContributors: contributors)
        }
        await coordinator.coordinate(flow: flow, with: OneStepper(withSingleStep: TestStep.one))
        let full = coordinator.snapshot()
        let limited = coordinator.snapshot(limit: 5)
        #expect(full.bindings.count == 31 && full.bindingCount == 31)
        #expect(limited.bindings.count == 5 && limited.bindingCount == 31)
        #expect(limited.steppers.count == 5 && limited.stepperCount == 31)
        #expect(limited.flows.count == 1 && limited.flowCount == 1)
        #expect(full.flows[0].root.children.count == 30)
        #expect(limited.flows[0].root.children.count == 5)

        // Windows page through a list in its order, filtered by prefix; the counts stay whole.
        let page = coordinator.snapshot(bindings: SnapshotWindow(offset: 3, limit: 4, prefix: "s/1"))
        #expect(page.bindings.map(\.stepperID) == ["s/12", "s/13", "s/14", "s/15"])
        #expect(page.bindingsMatching == 11 && page.bindingCount == 31)
        let steppers = coordinator.snapshot(steppers: SnapshotWindow(offset: 9, limit: 5, prefix: "s/"))
        #expect(steppers.steppers.keys.sorted() == ["s/17", "s/18", "s/19", "s/2", "s/20"])
        #expect(steppers.steppersMatching == 30 && steppers.stepperCount == 31)
        let flows = coordinator.snapshot(flows: SnapshotWindow(offset: 1))
        #expect(flows.flows.isEmpty && flows.flowsMatching == 1 && flows.flowCount == 1)
        let countsOnly = coordinator.snapshot(bindings: SnapshotWindow(limit: 0, prefix: "s/2"))
        #expect(countsOnly.bindings.isEmpty && countsOnly.bindingsMatching == 11)
    }
}
