import FlowBusWire
import Flows
import Testing

@Suite("Steppers and steps")
@FlowActor
struct StepperTests {
    @Test("OneStepper emits only its single step")
    func oneStepper() async {
        let (coordinator, _) = makeCoordinator()
        let flow = ScriptedFlow()
        await coordinator.coordinate(flow: flow, with: OneStepper(withSingleStep: TestStep.one))
        #expect(flow.recorded == ["one"])
    }

    @Test("DefaultStepper emits the canonical home step; coordinate uses it by default")
    func defaultStepper() async {
        let (coordinator, _) = makeCoordinator()
        let flow = ScriptedFlow()
        await coordinator.coordinate(flow: flow)
        #expect(flow.recorded == ["home"])
        #expect(DefaultStepper().initialStep as? CanonicalStep == .home)
    }

    @Test("NoneStepper and RemoteStepper emit nothing by themselves")
    func silentSteppers() async {
        let (coordinator, _) = makeCoordinator()
        let flow = ScriptedFlow()
        await coordinator.coordinate(flow: flow, with: NoneStepper())
        #expect(flow.recorded.isEmpty)
        #expect(!coordinator.isReady(flow))
        #expect(RemoteStepper(id: "r").initialStep is NoneStep)
        #expect(RemoteStepper(id: "r").stepperID == "r")
    }

    @Test("CompositeStepper: inner initial steps in order, then merged steps, then each inner readyToEmitSteps")
    func compositeOrder() async {
        let (coordinator, _) = makeCoordinator()
        let flow = ScriptedFlow()
        let a = ManualStepper("a", initial: TestStep.one) { $0.steps.accept(TestStep.three) }
        let b = ManualStepper("b", initial: TestStep.two) { $0.steps.accept(TestStep.four) }
        let none = ManualStepper("none")  // NoneStep initial: filtered
        await coordinator.coordinate(flow: flow, with: CompositeStepper(steppers: [a, none, b]))
        #expect(flow.recorded == ["one", "two", "three", "four"])
        b.steps.accept(TestStep.multiple)
        a.steps.accept(TestStep.unauthorized)
        await coordinator.idle()
        #expect(flow.recorded == ["one", "two", "three", "four", "multiple", "unauthorized"])
        #expect(a.readyCalls == 1 && b.readyCalls == 1)
    }

    @Test("Steps emitted inside readyToEmitSteps are not lost (#134)")
    func readyToEmitStepsNotLost() async {
        let (coordinator, _) = makeCoordinator()
        let flow = ScriptedFlow { flow, step in
            guard step as? TestStep == .one else { return .none }
            let stepper = ManualStepper("inner") { $0.steps.accept(TestStep.three) }
            return .one(flowContributor: .contribute(withNextPresentable: flow.rootNode, withNextStepper: stepper))
        }
        await coordinator.coordinate(flow: flow, with: OneStepper(withSingleStep: TestStep.one))
        #expect(flow.recorded == ["one", "three"])
    }

    @Test("A screen that is its own stepper: contribute(withNext:)")
    func contributeWithNext() async {
        final class StepperScreen: Screen, Stepper {
            let steps = StepRelay()
            var initialStep: any Step { TestStep.two }
            var stepperID: String { presentableID }
        }
        let (coordinator, log) = makeCoordinator()
        let flow = ScriptedFlow(root: NavigationStack(id: "root")) { flow, step in
            guard step as? TestStep == .one else { return .none }
            let screen = StepperScreen(id: "self")
            flow.stack.setRoot(screen)
            return .one(flowContributor: .contribute(withNext: screen))
        }
        await coordinator.coordinate(flow: flow, with: OneStepper(withSingleStep: TestStep.one))
        #expect(flow.recorded == ["one", "two"])
        #expect(log.lines.contains("bound self -> TestFlow#1 @ self"))
    }

    @Test("CanonicalStep prints like the Swift enum case")
    func canonicalDescription() {
        #expect(CanonicalStep("movieList").description == "movieList")
        #expect(CanonicalStep("moviePicked", ["withMovieId": 23452]).description == "moviePicked(withMovieId: 23452)")
        #expect(
            CanonicalStep("search", ["query": "star", "page": 2]).description == "search(page: 2, query: \"star\")")
        #expect(describeStep(NoneStep()) == "NoneStep")
    }
}

/// A declared flow, as the YAML layer will build them: a table from step name to contributions.
@FlowActor
final class TableFlow: Flow {
    typealias Route = @FlowActor (TableFlow, CanonicalStep) -> FlowContributors
    let name: String
    let stack: NavigationStack
    let routes: [String: Route]

    init(_ name: String, routes: [String: Route]) {
        self.name = name
        self.stack = NavigationStack(id: name.lowercased())
        self.routes = routes
    }

    var flowName: String { name }
    var root: any Presentable { stack }

    func navigate(to step: any Step) -> FlowContributors {
        guard let step = step as? CanonicalStep, let route = routes[step.name] else { return .none }
        return route(self, step)
    }
}

@Suite("Declared flows")
@FlowActor
struct DeclaredFlowTests {
    @Test("A table-driven flow navigates on canonical steps by name")
    func tableFlow() async {
        let (coordinator, log) = makeCoordinator()
        let flow = TableFlow(
            "CatalogFlow",
            routes: [
                "home": { flow, _ in
                    let list = Screen(id: "catalog/list")
                    flow.stack.setRoot(list)
                    return .one(
                        flowContributor: .contribute(
                            withNextPresentable: list, withNextStepper: RemoteStepper(id: "catalog/list")))
                },
                "itemPicked": { flow, step in
                    let id = step.params["id"]?.intValue ?? 0
                    let detail = Screen(id: "catalog/item/\(id)")
                    flow.stack.push(detail)
                    return .one(
                        flowContributor: .contribute(
                            withNextPresentable: detail, withNextStepper: RemoteStepper(id: detail.presentableID)))
                },
                "back": { flow, _ in
                    flow.stack.pop()
                    return .none
                },
            ])
        await coordinator.coordinate(flow: flow)
        await coordinator.receive(CanonicalStep("itemPicked", ["id": 7]), from: "catalog/list")
        await coordinator.receive(CanonicalStep("back"), from: "catalog/item/7")
        await coordinator.receive(CanonicalStep("itemPicked", ["id": 8]), from: "catalog/list")
        await coordinator.receive(CanonicalStep("unknown"), from: "catalog/item/8")  // no route: navigates to .none
        #expect(
            log.didNavigate == [
                "CatalogFlow#1 home", "CatalogFlow#1 itemPicked(id: 7)", "CatalogFlow#1 back",
                "CatalogFlow#1 itemPicked(id: 8)",
                "CatalogFlow#1 unknown",
            ])
        #expect(flow.stack.items.map(\.presentableID) == ["catalog/list", "catalog/item/8"])
        #expect(log.diagnostics.isEmpty)
    }
}
