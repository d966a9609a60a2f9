import FlowBusConfiguration
import FlowBusCoordinator
import FlowBusWire
import Flows
import Foundation
import Testing

/// A checkpoint must stand for the whole history before it: a coordinator restored from one
/// answers every later input exactly as the coordinator that took it.
@Suite("Coordinator checkpoints")
@FlowActor
struct CheckpointTests {
    static let yaml = """
        endpoints: { ingress: ipc://a, events: ipc://b, control: ipc://c }
        coordinator: { flow: Main, step: start }
        flows:
          Main:
            root: stack
            id: main
            steps:
              start: [ { setRoot: { screen: home, stepper: home } } ]
              picked: [ { push: { screen: "item/{id}", stepper: "item/{id}" } } ]
              back: [ pop ]
              top: [ popToRoot ]
              tabs: [ { tabs: { id: tabbar, stepper: tabbar, selected: 1, flows: [ { flow: Left, step: open }, { flow: Right, step: open } ] } } ]
              settings: [ { present: { flow: Settings, step: open } } ]
              sheet: [ { present: { screen: "sheet/{id}", stepper: "sheet/{id}", allowStepWhenDismissed: true } } ]
              closed: [ dismiss ]
              left: [ { selectTab: 0 } ]
              right: [ { selectTab: 1 } ]
          Left:
            id: left
            steps:
              open: [ { setRoot: { screen: left/home, stepper: left/home } } ]
              picked: [ { push: { screen: "left/{id}", stepper: "left/{id}", allowStepWhenNotPresented: true } } ]
              back: [ pop ]
              settings: [ { forwardToParent: settings } ]
          Right:
            id: right
            steps:
              open: [ { setRoot: { screen: right/home, stepper: right/home } } ]
              picked: [ { push: { screen: "right/{id}", stepper: "right/{id}" } } ]
              done: [ { end: top } ]
          Settings:
            id: settings
            steps:
              open: [ { setRoot: { screen: settings/main, stepper: settings/main } } ]
              picked: [ { push: { screen: "settings/{id}", stepper: "settings/{id}" } } ]
              again: [ { forwardToCurrent: picked } ]
              done: [ { end: closed } ]
        """

    static let stepNames = [
        "picked", "back", "top", "tabs", "settings", "sheet", "closed", "left", "right", "done", "again", "open",
        "nosuch",
    ]

    /// One input of a random history.
    enum Input {
        case step(String, WireParams, from: String)
        case deepLink(String, WireParams)
        case report(RendererReport, String)
    }

    /// A deterministic generator (SplitMix64), so that a failure can be replayed.
    struct Random {
        var state: UInt64
        mutating func next(_ bound: Int) -> Int {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return Int((z ^ (z >> 31)) % UInt64(bound))
        }
    }

    /// Mostly steps from bound steppers (so that the tree keeps changing), some from ids that
    /// were bound once or never, some deep links and renderer reports.
    static func input(_ random: inout Random, coordinator: FlowCoordinator) -> Input {
        let bound = coordinator.snapshot().bindings.filter(\.isRemote).map(\.stepperID)
        let known = bound + ["item/1", "item/2", "sheet/1", "settings/3", "ghost"]
        let name = stepNames[random.next(stepNames.count)]
        let params: WireParams = random.next(4) == 0 ? [:] : ["id": .int(Int64(random.next(3) + 1))]
        switch random.next(20) {
        case 0: return .deepLink(name, params)
        case 1, 2:
            let event = RendererReport.allCases[random.next(RendererReport.allCases.count)]
            return .report(event, known[random.next(known.count)])
        case 3: return .step(name, params, from: known[random.next(known.count)])
        default:
            let from = bound.isEmpty ? "home" : bound[random.next(bound.count)]
            return .step(name, params, from: from)
        }
    }

    static func apply(_ input: Input, to coordinator: FlowCoordinator) -> String {
        let progress: StepProgress
        switch input {
        case .step(let name, let params, let from):
            progress = coordinator.receiveNow(CanonicalStep(name, params), from: from)
        case .deepLink(let name, let params): progress = coordinator.navigateNow(to: CanonicalStep(name, params))
        case .report(let event, let presentableID):
            coordinator.report(event, for: presentableID)
            return "report"
        }
        guard case .done(let outcomes) = progress else { return "pending" }
        return normalized("\(outcomes)")
    }

    /// In-process steppers are restored under fresh ids (`NoneStepper@0x…`).
    static func normalized(_ text: String) -> String {
        text.replacing(/[A-Za-z]+Stepper@0x[0-9a-f]+/, with: "in-process")
    }

    /// The snapshot with its unordered parts sorted.
    static func canonical(_ snapshot: CoordinatorSnapshot) -> String {
        func counters(_ counters: StepperCounters) -> String {
            "\(counters.accepted) "
                + counters.dropped.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: ",")
        }
        let bindings = snapshot.bindings.map { normalized("\($0)") }.sorted()
        let steppers = snapshot.steppers.map { normalized($0.key) + " " + counters($0.value) }.sorted()
        return normalized("\(snapshot.flows)") + "\n\(bindings)\n\(steppers)\n" + counters(snapshot.totals)
    }

    final class Log {
        var lines: [String] = []
    }

    func makeCoordinator(_ config: FlowBusConfig) async throws -> (FlowCoordinator, Log) {
        let log = Log()
        let coordinator = FlowCoordinator { log.lines.append(Self.normalized("\($0)")) }
        let main = try #require(DeclaredFlow.make(named: "Main", in: config))
        await coordinator.coordinate(flow: main, with: OneStepper(withSingleStep: CanonicalStep("start")))
        return (coordinator, log)
    }

    func restored(from original: FlowCoordinator, config: FlowBusConfig) throws -> (FlowCoordinator, Log) {
        // Through its stored form, as flowd keeps it.
        let stored = try JSONEncoder().encode(try original.checkpoint())
        let checkpoint = try JSONDecoder().decode(CoordinatorCheckpoint.self, from: stored)
        let log = Log()
        let coordinator = FlowCoordinator { log.lines.append(Self.normalized("\($0)")) }
        try coordinator.restore(checkpoint) { DeclaredFlow.make(named: $0, in: config) }
        #expect(log.lines.isEmpty, "restoring emits nothing")
        return (coordinator, log)
    }

    @Test("A restored coordinator answers every later input as the original does", arguments: [1, 2, 3, 4, 5, 6, 7, 8])
    func equivalence(seed: UInt64) async throws {
        let config = try FlowBusConfig.parse(yaml: Self.yaml, environment: [:])
        let (original, originalLog) = try await makeCoordinator(config)
        var random = Random(state: seed)
        var copies: [(coordinator: FlowCoordinator, log: Log, from: Int)] = []
        for round in 0..<400 {
            if round % 100 == 50 {
                let (copy, log) = try restored(from: original, config: config)
                #expect(Self.canonical(copy.snapshot()) == Self.canonical(original.snapshot()))
                copies.append((copy, log, originalLog.lines.count))
            }
            let input = Self.input(&random, coordinator: original)
            let outcome = Self.apply(input, to: original)
            for copy in copies {
                #expect(Self.apply(input, to: copy.coordinator) == outcome, "seed \(seed), round \(round): \(input)")
            }
        }
        for copy in copies {
            #expect(copy.log.lines == Array(originalLog.lines[copy.from...]), "seed \(seed)")
            #expect(Self.canonical(copy.coordinator.snapshot()) == Self.canonical(original.snapshot()))
        }
    }

    @Test("A checkpoint is refused while a Swift flow or a live in-process stepper is bound, and names it")
    func obstacles() async throws {
        final class PlainFlow: Flow {
            let stack = NavigationStack(id: "plain")
            var root: any Presentable { stack }
            func navigate(to step: any Step) -> FlowContributors { .none }
        }
        let coordinator = FlowCoordinator()
        await coordinator.coordinate(flow: PlainFlow())
        #expect(coordinator.checkpointObstacle?.contains("PlainFlow#1") == true)
        #expect { try coordinator.checkpoint() } throws: { ($0 as? CheckpointError)?.code == .obstructed }
    }

    @Test("A checkpoint that does not fit the config is refused with the reason")
    func misfit() async throws {
        let config = try FlowBusConfig.parse(yaml: Self.yaml, environment: [:])
        let (original, _) = try await makeCoordinator(config)
        _ = original.receiveNow(CanonicalStep("settings"), from: "home")
        let checkpoint = try original.checkpoint()
        let other = try FlowBusConfig.parse(
            yaml: Self.yaml.replacing("  Settings:\n    id: settings", with: "  Settings:\n    id: preferences"),
            environment: [:])
        let coordinator = FlowCoordinator()
        #expect {
            try coordinator.restore(checkpoint) { DeclaredFlow.make(named: $0, in: other) }
        } throws: { error in
            "\(error)".contains("preferences") && "\(error)".contains("settings")
                && (error as? CheckpointError)?.code == .configMismatch
        }
    }
}
