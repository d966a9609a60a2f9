import FlowBusConfiguration
import FlowBusTools
import FlowBusWire
import Foundation
import Testing

@Suite("Exploring declared flows")
struct FlowExplorerTests {
    @Test("the demo's flows: every flow, screen, step and rule happens, with nothing left bound")
    func demoIsCovered() async throws {
        let demo = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("config/demo.yaml").path
        let config = try FlowBusConfig.load(path: demo, environment: ["FLOWBUS_RUN_DIR": "/tmp/x"])
        let exploration = try await FlowExplorer(config: config).explore(limits: .init(depth: 4, states: 1_000))
        #expect(exploration.unreachable.isEmpty, "\(exploration.text)")
        #expect(exploration.steps.count == 17 && exploration.screens.count == 11 && exploration.flows.count == 4)
        #expect(exploration.states > 1 && exploration.transitions > 0)
    }

    /// A config with three mistakes: a flow nothing presents, a tab nothing selects (its
    /// stepper is never visible), and a screen whose stepper outlives its dismissal.
    static let seeded = """
        endpoints: { ingress: ipc:///tmp/x/i, events: ipc:///tmp/x/e, control: ipc:///tmp/x/c }
        coordinator: { flow: Main, step: start }
        flows:
          Main:
            steps:
              start:
                - tabs:
                    id: home
                    stepper: home
                    flows:
                      - { flow: First, step: open }
                      - { flow: Second, step: open }
              help:
                - present: { screen: help, stepper: help, allowStepWhenDismissed: true }
              helpDone:
                - dismiss: true
          First:
            steps:
              open:
                - push: { screen: first, stepper: first }
          Second:
            steps:
              open:
                - push: { screen: second, stepper: second }
              next:
                - push: { screen: "second/{n}" }
          Orphan:
            steps:
              open:
                - push: { screen: lost }
        """

    @Test("seeded mistakes are named with their config paths and why")
    func seededMistakes() async throws {
        let config = try FlowBusConfig.parse(yaml: Self.seeded, environment: [:])
        let exploration = try await FlowExplorer(config: config).explore(limits: .init(depth: 4, states: 500))
        let unreachable = Dictionary(exploration.unreachable.map { ($0.path, $0) }, uniquingKeysWith: { a, _ in a })

        #expect(unreachable["flows.Orphan"]?.why == "no rule that is ever taken presents it or makes it a tab")
        #expect(unreachable["flows.Orphan.steps.open[0].push.screen"]?.what == "screen lost")
        let hidden = try #require(unreachable["flows.Second.steps.next"])
        #expect(hidden.why?.hasPrefix("applied only as a deep link; every send was refused: not-visible ×") == true)
        let orphan = try #require(exploration.orphanBindings.first)
        #expect(orphan.path == "flows.Main.steps.help[0].present.stepper")
        #expect(orphan.why?.hasSuffix("after home: help → help: helpDone") == true, "the shortest path that leaves it")
        #expect(exploration.unreachable.count == 6, "\(exploration.text)")
        #expect(exploration.text.hasSuffix("6 unreachable"))
        // Every declared step of the other flows happened.
        #expect(
            exploration.steps.filter(\.covered).map(\.path).sorted() == [
                "flows.First.steps.open", "flows.Main.steps.help", "flows.Main.steps.helpDone",
                "flows.Main.steps.start",
                "flows.Second.steps.open",
            ])
    }

    @Test("plans: the fewest paths from a fresh start that take every kind of transition, written as tests")
    func plans() async throws {
        let config = try FlowBusConfig.parse(yaml: Self.seeded, environment: [:])
        let exploration = try await FlowExplorer(config: config).explore(limits: .init(depth: 3, states: 500))
        #expect(exploration.plans.count >= 3 && exploration.planTargets > exploration.plans.count)
        // Each plan starts afresh: no plan is the start of another.
        let paths = exploration.plans.map { $0.steps.map(\.message) }
        for (index, path) in paths.enumerated() {
            #expect(!paths.enumerated().contains { $0.offset != index && $0.element.starts(with: path) })
        }
        // The help screen's stepper, refused once dismissed, is in a plan with the reason.
        let dismissed = exploration.plans.flatMap(\.steps).first {
            $0.message.stepperID == "help" && !$0.refusals.isEmpty
        }
        #expect(dismissed?.refusals == ["dismissed"] && dismissed?.navigations.isEmpty == true)
        let first = try #require(exploration.plans.first?.steps.first)
        guard case .list(let flows) = first.tree, case .map(let main)? = flows.first else {
            Issue.record("the tree is status flows: \(first.tree)")
            return
        }
        #expect(main["name"] == "Main" && main["id"] == "Main#1")
        #expect(
            exploration.planText.hasPrefix("\(exploration.plans.count) plans cover \(exploration.planTargets) kinds"))

        let pytest = PlanWriter.pytest(exploration, config: "seeded.yaml")
        #expect(pytest.components(separatedBy: "\ndef test_plan_").count - 1 == exploration.plans.count)
        #expect(pytest.contains("with pytest.raises(Dropped, match=\"dismissed\"):"))
        #expect(pytest.contains("navigation.expect_diagnostic(\"dismissed\", stepper=\"help\")"))
        let swift = PlanWriter.swiftTesting(exploration, config: "seeded.yaml")
        #expect(swift.components(separatedBy: "    @Test(\"plan ").count - 1 == exploration.plans.count)
        #expect(swift.contains("try withTopology(configFile: \"seeded.yaml\") { topology in"))
        #expect(
            PlanWriter.python(.map(["a\"b": .list([.null, .bool(true), .double(1.5)])]))
                == #"{"a\"b": [None, True, 1.5]}"#)
        #expect(PlanWriter.swift(.map(["k": .string("line\n\"q\"")])) == #"["k": "line\u{a}\"q\""]"#)
    }

    @Test("a walk's tree check: a visible tab bar shows one tab, no stepper is bound to what is in no tree")
    func walkTreeCheck() throws {
        func tree(_ json: String) throws -> WireValue { try WireJSON.decode(json) }
        let fine = try tree(
            #"[{"root":{"id":"main","kind":"tabs","visible":true,"children":[{"id":"a","kind":"stack","visible":true,"children":[]},{"id":"b","kind":"stack","visible":false,"children":[]}]}}]"#
        )
        let bound = try tree(
            #"[{"stepper":"a","presentable":"a","remote":true},{"stepper":"x","presentable":"gone","remote":false}]"#)
        #expect(FlowWalker.malformed(fine, bindings: bound) == nil)
        let twoTabs = try tree(
            #"[{"root":{"id":"main","kind":"tabs","visible":true,"children":[{"id":"a","kind":"stack","visible":true,"children":[]},{"id":"b","kind":"stack","visible":true,"children":[]}]}}]"#
        )
        #expect(FlowWalker.malformed(twoTabs, bindings: .list([])) == "tab bar main is visible with 2 visible tabs")
        let orphan = try tree(#"[{"stepper":"help","presentable":"help","remote":true}]"#)
        #expect(FlowWalker.malformed(fine, bindings: orphan) == "stepper help is bound to help, which is in no tree")
        // A tab a renderer reported on is the renderer's to show: no longer the tree's rule.
        let reported = try tree(
            #"[{"root":{"id":"main","kind":"tabs","visible":true,"children":[{"id":"a","kind":"stack","visible":true,"children":[]},{"id":"b","kind":"stack","visible":true,"reported":true,"children":[]}]}}]"#
        )
        #expect(FlowWalker.malformed(reported, bindings: .list([])) == nil)
        var one = SplitMix64(seed: 7)
        var two = SplitMix64(seed: 7)
        #expect((0..<5).map { _ in one.next() } == (0..<5).map { _ in two.next() }, "a seed draws one walk")
    }

    @Test("a walk's renderer reports: appeared and disappeared for every presentable, dismissed for swipeable ones")
    func walkReports() throws {
        let flows: WireValue = try WireJSON.decode(
            #"[{"root":{"id":"s","kind":"stack","visible":true,"children":[{"id":"a","kind":"screen","visible":false,"children":[]},{"id":"b","kind":"screen","visible":true,"children":[]}],"presented":{"id":"m","kind":"screen","visible":true,"children":[]}}}]"#
        )
        let reports = FlowWalker.reports(in: flows).map(\.description)
        #expect(
            reports == [
                "renderer: appeared a", "renderer: disappeared a", "renderer: appeared b", "renderer: disappeared b",
                "renderer: dismissed b", "renderer: appeared m", "renderer: disappeared m", "renderer: dismissed m",
                "renderer: appeared s", "renderer: disappeared s",
            ])
    }

    @Test("a walk over flows written in Swift: each bound stepper once, its flow's sample steps, each as a deep link")
    func walkSampleCandidates() throws {
        let config = try FlowBusConfig.parse(
            yaml: """
                endpoints: { ingress: ipc:///tmp/i, events: ipc:///tmp/e, control: ipc:///tmp/c }
                sampleSteps:
                  List: [refresh, { picked: { id: 7 } }]
                """, environment: [:])
        let bindings: WireValue = try WireJSON.decode(
            #"[{"stepper":"item/7","flow":"List#1","remote":true},{"stepper":"item/7","flow":"List#1","remote":true},{"stepper":"flow:List#1","flow":"List#1","remote":false},{"stepper":"other","flow":"Other#1","remote":true}]"#
        )
        #expect(
            SampleCandidates(config: config).messages(bound: bindings).map(\.description) == [
                "item/7: refresh", "item/7: picked(id: 7)", "deep link: picked(id: 7)", "deep link: refresh",
            ])
    }

    @Test("limits stop the search and say so")
    func limits() async throws {
        let config = try FlowBusConfig.parse(yaml: Self.seeded, environment: [:])
        let exploration = try await FlowExplorer(config: config).explore(limits: .init(depth: 1, states: 3))
        #expect(exploration.truncated && exploration.states <= 3)
        #expect(exploration.text.contains("stopped by the limits: depth 1, 3 states"))
        guard case .map(let json) = exploration.json else {
            Issue.record("the JSON report is a map")
            return
        }
        #expect(json["truncated"] == .bool(true) && json["states"] == .int(Int64(exploration.states)))
    }
}
