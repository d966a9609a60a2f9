import FlowBusWire
import Foundation
import ZeroMQ

/// The steps scenario with flowd holding a large navigation tree: `--scale-flows` leaf flows and
/// `--scale-bindings` stepper bindings (10,000 and 100,000 by default), built by steps through
/// a declared config before each measurement, the measured steps spread over every bound stepper.
///
/// The declared-flow language adds child flows without replacing others only through `present`
/// (a modal goes on top of the topmost one; `tabs` replaces its tabs), and makes ids distinct
/// only through step params. So each setup step `spawn(group: "0042")` makes the root flow present
/// a group flow, whose tab bar holds ``ScaleTree/flowsPerGroup`` leaf flows; each leaf is a
/// declared flow of its own (tabs of one bar get the same params), whose first step fills its
/// stack with ``ScaleTree/steppersPerFlow`` screens bound to the steppers
/// `s/<group>/<leaf>/<screen>`, zero-padded so that every id has one length and the sender can
/// patch it in place. The screens allow steps while not presented: only a stack's top is
/// visible, and each group covers the ones presented before it.
///
/// The measured step is the steps scenario's `moviePicked(withMovieId:)`, which every leaf
/// navigates to with `none`: the tree keeps its size, so the figure is routing at scale, not
/// growth. The sender sends it from each bound stepper in turn, the leaf flow changing at every
/// step; the receiver subscribes to the leaves' didNavigate.
struct ScaleScenario: DaemonPathScenario {
    static let key = "steps_at_scale"

    var tree: ScaleTree

    var id: ScenarioID { ScenarioID(group: .flowbus, key: Self.key) }
    var path: String {
        "stepper DEALER as \(grouped(tree.leafFlows * tree.steppersPerFlow)) steppers in turn → flowd "
            + "(\(grouped(tree.liveFlows)) flows) → SUB nav/did/\(ScaleTree.leafPrefix)"
    }
    var baseline: ScenarioID? { .rawTwoHop }
    /// The same step through a one-flow flowd.
    var reference: ScenarioID? { .steps }

    // MARK: The daemon path

    var daemon: DaemonExecutable { FlowdSetup.daemon(scenario: Self.key) }
    var frames: Int { 6 }
    var senderShape: FrameShape { .step }
    var subscription: String { Topic.didNavigate(ScaleTree.leafPrefix) }
    var receiverSequence: SequenceField { .params }

    func daemonRun(_ run: String, on bench: Bench) throws -> DaemonRun {
        let endpoints = try FlowdSetup.endpoints(run: run, on: bench)
        let steppersFile = "\(bench.directory)/\(run)-steppers.txt"
        do {
            try tree.stepperIDs().joined(separator: "\n").write(toFile: steppersFile, atomically: true, encoding: .utf8)
        } catch {
            throw BenchError("cannot write \(steppersFile): \(error)", fix: "set TMPDIR to a writable directory")
        }
        let config =
            FlowdSetup.configHeader(
                endpoints: endpoints, highWaterMark: bench.config.highWaterMark,
                journal: nil, purpose: "its \(Self.key) scenario")
            + tree.flowsYAML()
        let context = bench.context
        return DaemonRun(
            configFile: "flowd.yaml", config: config,
            arguments: ["--log-level", bench.config.flowdLogLevel], senderEndpoint: endpoints.ingress,
            receiverEndpoint: endpoints.events,
            isReady: { try FlowdSetup.binds(ScaleTree.rootStepper, control: endpoints.control, context: context) },
            senderArguments: ["--stepper-ids", steppersFile],
            setUp: { daemon in try tree.build(ingress: endpoints.ingress, context: context, daemon: daemon) },
            census: { try tree.census(control: endpoints.control, context: context) })
    }
}

/// The shape of the scale scenario's tree, the config that declares it, and the setup that
/// builds it in a running flowd.
struct ScaleTree {
    static let rootFlow = "ScaleRoot"
    static let groupFlow = "ScaleGroup"
    static let leafPrefix = "ScaleLeaf"
    static let rootStepper = "scale/root"
    static let spawnStep = "spawn"
    static let groupParam = "group"
    /// Tabs per group: a bigger tab bar means fewer groups (a shorter chain of modals, which
    /// flowd walks to present the next one) but more declared leaf flows in the config.
    static let maxFlowsPerGroup = 100

    /// Leaf flows per group flow.
    let flowsPerGroup: Int
    /// Group flows, one per setup step.
    let groups: Int
    /// Screens, each bound to a stepper, per leaf flow.
    let steppersPerFlow: Int

    /// The smallest tree with at least `flows` leaf flows and `bindings` leaf bindings.
    init(flows: Int, bindings: Int) {
        flowsPerGroup = min(Self.maxFlowsPerGroup, max(1, flows))
        groups = (max(1, flows) + flowsPerGroup - 1) / flowsPerGroup
        let leaves = groups * flowsPerGroup
        steppersPerFlow = max(1, (bindings + leaves - 1) / leaves)
    }

    var leafFlows: Int { groups * flowsPerGroup }
    /// The root, the groups and the leaves.
    var liveFlows: Int { 1 + groups + leafFlows }

    // MARK: Ids

    private func padded(_ value: Int, below limit: Int) -> String {
        let digits = String(max(limit - 1, 0)).count
        let text = String(value)
        return String(repeating: "0", count: digits - text.count) + text
    }

    func groupParam(_ group: Int) -> String { padded(group, below: groups) }
    func leafFlow(_ leaf: Int) -> String { Self.leafPrefix + padded(leaf, below: flowsPerGroup) }

    /// A leaf stepper's id; `nil` group: the template the config declares (`{group}`).
    func stepperID(group: Int?, leaf: Int, screen: Int) -> String {
        let groupText = group.map(groupParam) ?? "{\(Self.groupParam)}"
        return "s/\(groupText)/\(padded(leaf, below: flowsPerGroup))/\(padded(screen, below: steppersPerFlow))"
    }

    /// Every leaf stepper id, the leaf flow changing fastest: consecutive steps go to different
    /// flows (and different groups).
    func stepperIDs() -> [String] {
        var ids: [String] = []
        ids.reserveCapacity(leafFlows * steppersPerFlow)
        for screen in 0..<steppersPerFlow {
            for leaf in 0..<flowsPerGroup {
                for group in 0..<groups { ids.append(stepperID(group: group, leaf: leaf, screen: screen)) }
            }
        }
        return ids
    }

    // MARK: The config

    /// `coordinator:` and `flows:`: the root (spawn presents a group), the group (a tab bar of
    /// the leaves), the leaves (screens bound to steppers; the measured step does nothing).
    func flowsYAML() -> String {
        var text = """
            coordinator:
              flow: \(Self.rootFlow)
              step: start
            flows:
              \(Self.rootFlow):
                root: stack
                id: scale
                steps:
                  start:
                    - setRoot:
                        screen: \(Self.rootStepper)
                        stepper: \(Self.rootStepper)
                        allowStepWhenNotPresented: true
                  \(Self.spawnStep):
                    - present: { flow: \(Self.groupFlow), step: start }
              \(Self.groupFlow):
                root: tabs
                id: scale/group
                steps:
                  start:
                    - tabs:
                        id: scale/group
                        flows:

            """
        for leaf in 0..<flowsPerGroup {
            text += "              - { flow: \(leafFlow(leaf)), step: start }\n"
        }
        for leaf in 0..<flowsPerGroup {
            text += """
                  \(leafFlow(leaf)):
                    root: stack
                    id: scale/\(leafFlow(leaf).lowercased())
                    steps:
                      start:

                """
            for screen in 0..<steppersPerFlow {
                let id = stepperID(group: nil, leaf: leaf, screen: screen)
                let rule = screen == 0 ? "setRoot" : "push"
                text +=
                    "          - \(rule): { screen: \"\(id)\", stepper: \"\(id)\", "
                    + "allowStepWhenNotPresented: true }\n"
            }
            text += """
                      \(BenchMessage.stepName):
                        - none

                """
        }
        return text
    }

    // MARK: Setup

    /// Sends the setup steps from one source and waits for flowd's acknowledgement of the last:
    /// flowd acknowledges a step once it and every step it caused are applied.
    func build(ingress: String, context: Context, daemon: ExternalProcess) throws -> SetupFigures {
        let socket = try context.socket(.dealer)
        defer { socket.close() }
        try socket.setOptions([.linger(0), .sendTimeout(10_000)])
        try socket.connect(ingress)
        let source = "flowbench-setup#\(getpid())"
        let started = monotonicNanoseconds()
        for group in 0..<groups {
            let envelope = Envelope(kind: .step, contentType: .fbv, sequence: UInt64(group + 1), source: source)
            let step = StepMessage(
                stepperID: Self.rootStepper, envelope: envelope, name: Self.spawnStep,
                params: [Self.groupParam: .string(groupParam(group))])
            guard try socket.send(message: try step.encoded().frames) else {
                throw BenchError(
                    "flowd took no setup step for 10 s (step \(group + 1) of \(groups))",
                    fix: "see flowd's output; try a smaller --scale-flows")
            }
        }
        // Generous: 10,000 leaf flows take about a second on 2 cores.
        let limit = max(60, Double(leafFlows) / 100)
        var acknowledged: UInt64 = 0
        while acknowledged < UInt64(groups) {
            try daemon.checkRunning()
            guard monotonicNanoseconds() - started < Int64(limit * 1e9) else {
                throw BenchError(
                    "flowd did not acknowledge the \(groups) setup steps within \(Int(limit)) s",
                    fix: "see flowd's output; try a smaller --scale-flows or --scale-bindings")
            }
            guard let frames = try socket.receiveMessage(mode: .timeout(milliseconds: 1000)) else { continue }
            if case .ack(let ack)? = try? WireMessage.decode(from: FrameBuffer(frames: frames)),
                ack.acknowledgedSource == source
            {
                acknowledged = max(acknowledged, ack.acknowledgedSequence)
            }
        }
        let seconds = Double(monotonicNanoseconds() - started) / 1e9
        let took = String(format: "%.1f", seconds)
        let line = "flowbench:   set up \(grouped(liveFlows)) flows by \(groups) steps in \(took) s\n"
        FileHandle.standardError.write(Data(line.utf8))
        return SetupFigures(steps: groups, seconds: rounded(seconds, 3))
    }

    /// The flows and bindings flowd's status reply lists.
    func census(control: String, context: Context) throws -> SetupFigures.Census {
        let started = monotonicNanoseconds()
        guard let status = try FlowdSetup.status(control: control, context: context, timeout: 120),
            let flows = status["flows"]?.listValue, let bindings = status["bindings"]?.listValue
        else {
            throw BenchError(
                "flowd sent no status reply within 120 s after the throughput run",
                fix: "see flowd's output; try a smaller --scale-flows or --scale-bindings")
        }
        // flowd lists at most 1,000 of each; the totals count them all. Each flow binds its own
        // stepper; in this config every other binding is a screen's remote stepper.
        let flowTotal = status["flows_total"]?.intValue.map(Int.init) ?? flows.count
        let bindingTotal = status["bindings_total"]?.intValue.map(Int.init) ?? bindings.count
        let remote =
            bindingTotal == bindings.count
            ? bindings.count { $0.mapValue?["remote"]?.boolValue == true } : bindingTotal - flowTotal
        return SetupFigures.Census(
            flows: flowTotal, bindings: bindingTotal, remoteBindings: remote,
            statusSeconds: rounded(Double(monotonicNanoseconds() - started) / 1e9, 3))
    }
}
