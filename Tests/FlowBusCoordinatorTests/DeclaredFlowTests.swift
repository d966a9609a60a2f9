import FlowBusConfiguration
import FlowBusCoordinator
import FlowBusWire
import Flows
import Foundation
import Testing

/// Collects the coordinator's events as log lines.
@FlowActor
final class EventLog {
    var didNavigate: [String] = []
    var diagnostics: [DiagnosticReason] = []
    var messages: [String] = []
    var commands: [String] = []
    /// Navigations and commands in the order a renderer receives them.
    var trace: [String] = []

    func record(_ event: CoordinatorEvent) {
        switch event {
        case .willNavigate(let navigation):
            trace.append("will \(navigation.flow.name) \(describeStep(navigation.step))")
        case .didNavigate(let navigation):
            didNavigate.append("\(navigation.flow.name) \(describeStep(navigation.step))")
            trace.append("did \(navigation.flow.name) \(describeStep(navigation.step))")
        case .diagnostic(let diagnostic):
            diagnostics.append(diagnostic.reason)
            messages.append(diagnostic.message)
        case .command(let command):
            commands.append("\(command.verb.rawValue) \(command.target)")
            trace.append("\(command.flow?.name ?? "-"): \(command)")
        default: break
        }
    }
}

@Suite("Flows declared in the config, run by the engine")
@FlowActor
struct DeclaredFlowTests {
    let yaml = """
        endpoints: { ingress: ipc://a, events: ipc://b, control: ipc://c }
        coordinator: { flow: Main, step: start }
        flows:
          Main:
            root: stack
            id: main
            steps:
              start:
                - setRoot: { screen: list, stepper: list }
              picked:
                - push: { screen: "item/{id}", stepper: "item/{id}" }
              settings:
                - present: { flow: Settings, step: open }
              closed:
                - dismiss
              back:
                - pop
          Settings:
            id: settings
            steps:
              open:
                - setRoot: { screen: settings/main, stepper: settings/main }
              done:
                - end: closed
        """

    func start() async throws -> (FlowCoordinator, EventLog) {
        let config = try FlowBusConfig.parse(yaml: yaml, environment: [:])
        let log = EventLog()
        let coordinator = FlowCoordinator { log.record($0) }
        let main = try #require(DeclaredFlow.make(named: "Main", in: config))
        await coordinator.coordinate(flow: main, with: OneStepper(withSingleStep: CanonicalStep("start")))
        return (coordinator, log)
    }

    @Test("Templates in ids take the step's params; pushed screens bind their steppers")
    func templates() async throws {
        let (coordinator, log) = try await start()
        await coordinator.receive(CanonicalStep("picked", ["id": 42]), from: "list")
        await coordinator.receive(CanonicalStep("picked", ["id": 7]), from: "item/42")
        #expect(log.didNavigate == ["Main start", "Main picked(id: 42)", "Main picked(id: 7)"])
        #expect(log.commands.contains("push item/42"))
        #expect(coordinator.snapshot().bindings.map(\.stepperID).contains("item/7"))
        // item/42 is covered by item/7: its steps are dropped and reported.
        await coordinator.receive(CanonicalStep("back"), from: "item/42")
        #expect(log.diagnostics == [.notVisible])
    }

    @Test(
        "A step the table lacks is unknown-step; one lacking a templated param is bad-params naming the key and the rule"
    )
    func unknownSteps() async throws {
        let (coordinator, log) = try await start()
        await coordinator.receive(CanonicalStep("nonsense"), from: "list")
        await coordinator.receive(CanonicalStep("picked", ["ID": 7]), from: "list")
        #expect(log.diagnostics == [.unknownStep, .badParams])
        let message = try #require(log.messages.last)
        #expect(
            message.contains("lacks param 'id'")
                && message.contains("flows.Main.steps.picked[0].push.screen 'item/{id}'"), "\(message)")
        #expect(message.contains("it has 'ID'"), "\(message)")
        #expect(log.didNavigate == ["Main start"])
    }

    @Test("A presented child flow ends into its parent, which dismisses it")
    func childFlowEnds() async throws {
        let (coordinator, log) = try await start()
        await coordinator.receive(CanonicalStep("settings"), from: "list")
        #expect(coordinator.activeFlows.map(\.name) == ["Main", "Settings"])
        await coordinator.receive(CanonicalStep("done"), from: "settings/main")
        #expect(log.didNavigate == ["Main start", "Main settings", "Settings open", "Settings done", "Main closed"])
        #expect(coordinator.activeFlows.map(\.name) == ["Main"])
        #expect(!coordinator.snapshot().bindings.map(\.stepperID).contains("settings/main"))
        // Every command of a navigation, the end of the flow it ends included, comes before its didNavigate.
        #expect(
            Array(log.trace.suffix(6)) == [
                "will Settings done",
                "Settings: end settings (stack)",
                "did Settings done",
                "will Main closed",
                "Main: dismiss settings (stack) in main",
                "did Main closed",
            ])
    }

    @Test("A flow ended by its parent's navigation (its root dismissed) ends before that navigation's didNavigate")
    func dismissedChildFlowEndsWithinTheNavigation() async throws {
        let (coordinator, log) = try await start()
        await coordinator.receive(CanonicalStep("settings"), from: "list")
        await coordinator.navigate(to: CanonicalStep("closed"))
        #expect(coordinator.activeFlows.map(\.name) == ["Main"])
        #expect(
            Array(log.trace.suffix(4)) == [
                "will Main closed",
                "Main: dismiss settings (stack) in main",
                "Settings: end settings (stack)",
                "did Main closed",
            ])
    }

    @Test("A tabs rule puts the tab bar in the root stack, then tells renderers its tabs in order")
    func tabsAnnounced() async throws {
        let config = try FlowBusConfig.parse(
            yaml: """
                endpoints: { ingress: ipc://a, events: ipc://b, control: ipc://c }
                coordinator: { flow: Main, step: start }
                flows:
                  Main:
                    root: stack
                    id: main
                    steps:
                      start:
                        - tabs:
                            id: dashboard
                            flows:
                              - { flow: Wishlist, step: list }
                              - { flow: Watched, step: list }
                  Wishlist:
                    id: wishlist
                    steps:
                      list:
                        - push: { screen: wishlist/movies }
                  Watched:
                    id: watched
                    steps:
                      list:
                        - push: { screen: watched/movies }
                """, environment: [:])
        let log = EventLog()
        let coordinator = FlowCoordinator { log.record($0) }
        let main = try #require(DeclaredFlow.make(named: "Main", in: config))
        await coordinator.coordinate(flow: main, with: OneStepper(withSingleStep: CanonicalStep("start")))
        #expect(
            log.trace == [
                "Main: setRoot main (stack)",
                "will Main start",
                "Main: setRoot dashboard (tabs) in main at 0 [dashboard]",
                "Main: setTabs dashboard (tabs) at 0 [wishlist, watched]",
                "did Main start",
                "will Wishlist list",
                "Wishlist: push wishlist/movies (screen) in wishlist at 0",
                "did Wishlist list",
                "will Watched list",
                "Watched: push watched/movies (screen) in watched at 0",
                "did Watched list",
            ])
    }

    @Test(
        "Declared param types: a step lacking a required param or sending another type is bad-params, naming the key, the rule and the fix"
    )
    func declaredParamTypes() async throws {
        let typed = yaml.replacingOccurrences(
            of: "\n  Settings:\n", with: "\n    params:\n      picked: { id: int, note: string? }\n  Settings:\n")
        let config = try FlowBusConfig.parse(yaml: typed, environment: [:])
        let log = EventLog()
        let coordinator = FlowCoordinator { log.record($0) }
        let main = try #require(DeclaredFlow.make(named: "Main", in: config))
        await coordinator.coordinate(flow: main, with: OneStepper(withSingleStep: CanonicalStep("start")))
        await coordinator.receive(CanonicalStep("picked", ["id": "42"]), from: "list")
        await coordinator.receive(CanonicalStep("picked", ["note": "x"]), from: "list")
        await coordinator.receive(CanonicalStep("picked", ["id": 42, "note": 3]), from: "list")
        #expect(log.diagnostics == [.badParams, .badParams, .badParams])
        #expect(
            log.messages[0].contains(
                "step picked param 'id' is string 42, but flows.Main.params.picked.id declares int"),
            "\(log.messages[0])")
        #expect(
            log.messages[1].contains("step picked lacks param 'id', which flows.Main.params.picked.id requires (int)"),
            "\(log.messages[1])")
        #expect(
            log.messages[2].contains(
                "param 'note' is int 3, but flows.Main.params.picked.note declares string?: send it as a string, e.g. note:='\"3\"'"
            ), "\(log.messages[2])")
        await coordinator.receive(CanonicalStep("picked", ["id": 42]), from: "list")
        #expect(log.didNavigate == ["Main start", "Main picked(id: 42)"], "an optional param may be left out")
    }

    @Test("The in-process stepper of a flow is named flow:<FlowID> in bindings, not TypeName@0x…")
    func readableStepperIDs() async throws {
        let (coordinator, _) = try await start()
        await coordinator.receive(CanonicalStep("settings"), from: "list")
        let ids = coordinator.snapshot().bindings.map(\.stepperID)
        #expect(ids.contains("flow:Main#1") && ids.contains("flow:Settings#1"), "\(ids)")
        #expect(!ids.contains { $0.contains("@0x") }, "\(ids)")
    }
}
