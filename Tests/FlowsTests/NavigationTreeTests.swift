import FlowBusWire
import Flows
import Testing

/// Visibility derived from the headless navigation tree, and renderer reports.
@Suite("Navigation tree")
@FlowActor
struct NavigationTreeTests {
    /// Coordinates a flow whose root is `root`, so the root is a window.
    func window(_ root: NavigationNode) async -> (FlowCoordinator, EventLog, ScriptedFlow) {
        let (coordinator, log) = makeCoordinator()
        let flow = ScriptedFlow(root: root)
        await coordinator.coordinate(flow: flow, with: NoneStepper())
        return (coordinator, log, flow)
    }

    @Test("A pushed screen covers the one below it")
    func pushCovers() async {
        let stack = NavigationStack(id: "stack")
        _ = await window(stack)
        let a = Screen(id: "a")
        let b = Screen(id: "b")
        stack.push(a)
        #expect(stack.isVisible && a.isVisible)
        stack.push(b)
        #expect(!a.isVisible && b.isVisible && stack.isVisible)
    }

    @Test("A modal covers the whole displayed path, containers included")
    func modalCovers() async {
        let tabs = TabBar(id: "tabs")
        let (coordinator, log, _) = await window(tabs)
        let stack = NavigationStack(id: "stack")
        let a = Screen(id: "a")
        stack.push(a)
        tabs.setTabs([stack, Screen(id: "other")])
        #expect(tabs.isVisible && stack.isVisible && a.isVisible)
        let modal = NavigationStack(id: "modal")
        let m = Screen(id: "m")
        modal.push(m)
        a.present(modal)
        #expect(!tabs.isVisible && !stack.isVisible && !a.isVisible)
        #expect(modal.isVisible && m.isVisible)
        // A second modal goes on top of the first.
        let top = Screen(id: "top")
        tabs.present(top)
        #expect(a.presented === modal && modal.presented === top)
        #expect(!m.isVisible && top.isVisible)
        #expect(log.commands.last?.description == "present top (screen) in modal")
        a.dismissPresented()
        #expect(modal.isDismissed && top.isDismissed && m.isDismissed)
        #expect(a.isVisible)
        withExtendedLifetime(coordinator) {}
    }

    @Test("Tab selection decides which tab is visible")
    func tabSelection() async {
        let tabs = TabBar(id: "tabs")
        _ = await window(tabs)
        let first = Screen(id: "first")
        let second = Screen(id: "second")
        tabs.setTabs([first, second], selected: 1)
        #expect(!first.isVisible && second.isVisible)
        tabs.select(0)
        #expect(first.isVisible && !second.isVisible)
        #expect(tabs.selectedIndex == 0)
    }

    @Test("A popped screen is dismissed, terminally: it cannot be shown again")
    func popDismisses() async {
        let stack = NavigationStack(id: "stack")
        let (coordinator, log, _) = await window(stack)
        let a = Screen(id: "a")
        let b = Screen(id: "b")
        stack.push(a)
        stack.push(b)
        stack.pop()
        #expect(b.isDismissed && !b.isVisible && b.placement == .detached)
        #expect(a.isVisible)
        stack.push(b)
        #expect(log.reasons == [.flowError])
        #expect(stack.items.map(\.presentableID) == ["a"])
        stack.pop()  // the root item cannot be popped
        #expect(log.reasons == [.flowError, .flowError])
        withExtendedLifetime(coordinator) {}  // tree nodes refer to their coordinator weakly
    }

    @Test("Popping to a lower item dismisses everything above it; setRoot replaces the stack")
    func dismissMiddle() async {
        let stack = NavigationStack(id: "stack")
        _ = await window(stack)
        let screens = (0..<4).map { Screen(id: "s\($0)") }
        for screen in screens { stack.push(screen) }
        screens[2].dismiss()
        #expect(stack.items.map(\.presentableID) == ["s0", "s1"])
        #expect(screens[2].isDismissed && screens[3].isDismissed)
        let fresh = Screen(id: "fresh")
        stack.setRoot(fresh)
        #expect(screens[0].isDismissed && screens[1].isDismissed && fresh.isVisible)
    }

    @Test("A node outside any window is not visible (its visibility is not known)")
    func detachedNotVisible() {
        let stack = NavigationStack(id: "stack")
        let a = Screen(id: "a")
        stack.push(a)
        #expect(!a.isVisible && !stack.isVisible)
    }

    @Test("Tree operations record navigation commands, attributed to the navigating flow")
    func commands() async {
        let (coordinator, log) = makeCoordinator()
        let flow = ScriptedFlow("AppFlow", root: NavigationStack(id: "app")) { flow, step in
            guard step as? TestStep == .one else { return .none }
            let tabs = TabBar(id: "tabs")
            flow.stack.setRoot(Screen(id: "login"))
            flow.stack.push(tabs)
            tabs.setTabs([Screen(id: "t0"), Screen(id: "t1")])
            tabs.select(1)
            tabs.present(Screen(id: "sheet"))
            tabs.dismissPresented()
            flow.stack.pop()
            return .none
        }
        await coordinator.coordinate(flow: flow, with: OneStepper(withSingleStep: TestStep.one))
        #expect(
            log.commands.map(\.description) == [
                "setRoot app (stack)",
                "setRoot login (screen) in app at 0 [login]",
                "push tabs (tabs) in app at 1",
                "setTabs tabs (tabs) at 0 [t0, t1]",
                "selectTab t1 (screen) in tabs at 1",
                "present sheet (screen) in tabs",
                "dismiss sheet (screen) in tabs",
                "pop tabs (tabs) in app at 1",
            ])
        let app = FlowID(name: "AppFlow", instance: 1)
        #expect(log.commands.dropFirst().allSatisfy { $0.flow == app })
    }

    @Test("Containers filled before they are shown are announced when they join the tree: tabs, items, modals")
    func contentBuiltBeforeShown() async {
        let (coordinator, log) = makeCoordinator()
        let flow = ScriptedFlow("AppFlow", root: NavigationStack(id: "app")) { flow, step in
            guard step as? TestStep == .one else { return .none }
            // RxFlow's dashboard: the tab bar gets its tabs first, then it is shown.
            let list = NavigationStack(id: "list")
            list.push(Screen(id: "list/home"))
            list.push(Screen(id: "list/detail"))
            let tabs = TabBar(id: "tabs")
            tabs.setTabs([list, Screen(id: "other")], selected: 1)
            flow.stack.setRoot(tabs)
            let sheet = NavigationStack(id: "sheet")
            sheet.setRoot(Screen(id: "sheet/form"))
            sheet.present(Screen(id: "sheet/alert"))
            flow.stack.present(sheet)
            return .none
        }
        await coordinator.coordinate(flow: flow, with: OneStepper(withSingleStep: TestStep.one))
        #expect(
            log.commands.map(\.description) == [
                "setRoot app (stack)",
                "setRoot tabs (tabs) in app at 0 [tabs]",
                "setTabs tabs (tabs) at 1 [list, other]",
                "setRoot list/home (screen) in list at 0 [list/home]",
                "push list/detail (screen) in list at 1",
                "present sheet (stack) in app",
                "setRoot sheet/form (screen) in sheet at 0 [sheet/form]",
                "present sheet/alert (screen) in sheet",
            ])
        let app = FlowID(name: "AppFlow", instance: 1)
        #expect(log.commands.allSatisfy { $0.flow == app })
        // Announced once: a later change is one command again.
        log.clear()
        (flow.stack.top as? TabBar)?.select(0)
        #expect(log.commands.map(\.description) == ["selectTab list (stack) in tabs at 0"])
        withExtendedLifetime(coordinator) {}
    }

    @Test("Renderer reports override the tree for that node: appeared, disappeared")
    func rendererOverride() async {
        let stack = NavigationStack(id: "stack")
        let (coordinator, _, _) = await window(stack)
        let a = Screen(id: "a")
        let b = Screen(id: "b")
        stack.push(a)
        stack.push(b)
        coordinator.report(.appeared, for: "a")  // e.g. b is a transparent overlay
        #expect(a.isVisible && b.isVisible)
        coordinator.report(.disappeared, for: "b")
        #expect(!b.isVisible && b.isOnDisplayedPath)
        #expect(stack.isVisible)  // per node: the container is still derived from the tree
        coordinator.report(.appeared, for: "b")
        #expect(b.isVisible)
        #expect(coordinator.snapshot().flows.first?.root.children.map(\.reportedVisibility) == [true, true])
    }

    @Test("A renderer's dismissed report removes the node without a command and unbinds its stepper")
    func rendererDismissed() async {
        let (coordinator, log) = makeCoordinator()
        let flow = ScriptedFlow(root: NavigationStack(id: "stack")) { flow, step in
            guard step as? TestStep == .one else { return .none }
            let detail = Screen(id: "detail")
            flow.stack.setRoot(Screen(id: "list"))
            flow.stack.push(detail)
            return .one(
                flowContributor: .contribute(withNextPresentable: detail, withNextStepper: RemoteStepper(id: "detail")))
        }
        await coordinator.coordinate(flow: flow, with: OneStepper(withSingleStep: TestStep.one))
        log.clear()
        coordinator.report(.dismissed, for: "detail")  // the user swiped back
        #expect(flow.stack.items.map(\.presentableID) == ["list"])
        #expect(log.commands.isEmpty)
        #expect(log.lines == ["unbound detail -> TestFlow#1 @ detail (presentableDismissed)"])
        coordinator.report(.appeared, for: "detail")
        #expect(log.reasons == [.unknownPresentable])
        // A dismissed node stays dismissed even if a renderer says it appeared.
        #expect(
            await coordinator.receive(CanonicalStep("x"), from: "detail") == [
                .dropped(.dismissed, flow: FlowID(name: "TestFlow", instance: 1))
            ])
    }

    @Test("Container screens are not falsely dismissed: disappearing is not dismissal (#117, #100)")
    func containerNotDismissed() async {
        let tabs = TabBar(id: "tabs")
        let (coordinator, _, _) = await window(tabs)
        let first = Screen(id: "first")
        tabs.setTabs([first, Screen(id: "second")])
        tabs.select(1)
        coordinator.report(.disappeared, for: "first")
        #expect(!first.isDismissed)
        tabs.select(0)
        #expect(!first.isVisible)  // the renderer's report governs until it reports again
        coordinator.report(.appeared, for: "first")
        #expect(first.isVisible)
    }
}
