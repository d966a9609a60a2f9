import FlowBusConfiguration
import FlowBusCoordinator
import FlowBusWire
import Flows
import Foundation

/// Explores what a config's declared flows can do, with the engine flowd runs and no daemon.
///
/// From the coordinator's first step it searches, breadth first, the states the engine reaches
/// (each flow's tree with visibility, and the bound steppers): in each state every bound remote
/// stepper sends every step its flow declares, and every declared step name is sent as a deep link.
/// Params are the ones the step needs (its declared `params:` and every `{param}` its ids and the
/// steps it hands off to use), one fixed value each, so that paths meet in the same states.
///
/// What it reports, each with its config path: screens never presented, steps no stepper ever
/// gets applied (and why: no stepper of the flow is ever bound, or every send was refused, with
/// the reasons), rules never taken, flows never started, and bindings left without their screen
/// (a stepper that stays bound after a `dismiss`).
public struct FlowExplorer: Sendable {
    /// Bounds of the search.
    public struct Limits: Sendable, Hashable {
        /// Messages from the first state.
        public var depth: Int
        /// Distinct states.
        public var states: Int

        public init(depth: Int = 8, states: Int = 1_000) {
            self.depth = depth
            self.states = states
        }
    }

    public let config: FlowBusConfig

    public init(config: FlowBusConfig) {
        self.config = config
    }

    /// A message the explorer sends.
    public struct Message: Sendable, Hashable, CustomStringConvertible {
        /// The stepper sending it; nil for a deep link.
        public var stepperID: String?
        public var step: CanonicalStep

        public var description: String {
            (stepperID.map { "\($0): " } ?? "deep link: ") + step.description
        }
    }

    /// Searches the states; throws when the first state cannot be checkpointed (the engine holds
    /// something a declared flow never makes).
    @FlowActor
    public func explore(limits: Limits = Limits()) async throws -> FlowExploration {
        var search = Search(config: config, limits: limits)
        try await search.run()
        return search.report
    }
}

/// What ``FlowExplorer/explore(limits:)`` found.
public struct FlowExploration: Sendable {
    /// One thing the config declares, and whether the exploration saw it happen.
    public struct Item: Sendable, Hashable {
        /// Where the config declares it, e.g. `flows.MainFlow.steps.settings[0].present.flow`.
        public var path: String
        /// What it is, e.g. `screen settings/list`.
        public var what: String
        public var covered: Bool
        /// Why it never happened, when it did not.
        public var why: String?
    }

    public var states = 0
    public var messages = 0
    /// Distinct (state, message) pairs that navigated.
    public var transitions = 0
    /// A limit stopped the search before every state was expanded.
    public var truncated = false
    public var limits = FlowExplorer.Limits()
    public var flows: [Item] = []
    public var screens: [Item] = []
    public var steps: [Item] = []
    public var rules: [Item] = []
    /// Bindings whose presentable is in no tree, with the messages that led there.
    public var orphanBindings: [Item] = []
    /// The fewest paths, each from a fresh start, that take every kind of transition the search
    /// met: each stepper (by its declared id) sending each step, with each outcome (the flows that
    /// navigated, or the refusal's reason), and each deep link that navigated.
    public var plans: [Plan] = []
    /// The transitions the plans cover.
    public var planTargets = 0

    /// One path from a fresh start, with what each message does.
    public struct Plan: Sendable {
        public var steps: [PlanStep]
    }

    /// One message of a plan and what the engine did with it.
    public struct PlanStep: Sendable {
        public var message: FlowExplorer.Message
        /// The didNavigate events, in order: flow name, step name, params.
        public var navigations: [(flow: String, step: String, params: WireParams)]
        /// The refusals' reasons, when the message was dropped: one per binding of its stepper.
        public var refusals: [String]
        /// flowd's status `flows` after it (PROTOCOL.md §4.3).
        public var tree: WireValue
    }

    /// The plans as text: one message a line, with what it does.
    public var planText: String {
        var lines = ["\(plans.count) plans cover \(planTargets) kinds of transition"]
        for (index, plan) in plans.enumerated() {
            lines.append("plan \(index + 1):")
            for step in plan.steps {
                let outcome =
                    step.navigations.isEmpty
                    ? "refused " + step.refusals.joined(separator: ", ")
                    : step.navigations.map { "\($0.flow).\($0.step)" }.joined(separator: ", ")
                lines.append("  \(step.message) → \(outcome)")
            }
        }
        return lines.joined(separator: "\n")
    }

    /// Everything declared that never happened.
    public var unreachable: [Item] {
        (flows + screens + steps + rules).filter { !$0.covered } + orphanBindings
    }

    /// The report `flowctl explore` prints.
    public var text: String {
        var lines = [
            "explored \(states) states, \(messages) messages sent, \(transitions) transitions"
                + (truncated
                    ? " (stopped by the limits: depth \(limits.depth), \(limits.states) states; raise them to see more)"
                    : " (every reachable state, depth ≤ \(limits.depth))")
        ]
        for (title, items) in [("flows", flows), ("screens", screens), ("steps", steps), ("rules", rules)] {
            let covered = items.filter(\.covered).count
            lines.append(
                "\(title): \(covered) of \(items.count) \(title == "flows" ? "started" : title == "screens" ? "presented" : title == "steps" ? "applied (deep links aside)" : "taken")"
            )
            for item in items where !item.covered {
                lines.append("  never: \(item.what) (\(item.path))" + (item.why.map { ": \($0)" } ?? ""))
            }
        }
        if !orphanBindings.isEmpty {
            lines.append("bindings left without their screen: \(orphanBindings.count)")
            for item in orphanBindings {
                lines.append("  \(item.what) (\(item.path))" + (item.why.map { ": \($0)" } ?? ""))
            }
        }
        lines.append(unreachable.isEmpty ? "nothing unreachable" : "\(unreachable.count) unreachable")
        return lines.joined(separator: "\n")
    }

    /// The report as JSON (a `WireValue`), for tools.
    public var json: WireValue {
        func list(_ items: [Item]) -> WireValue {
            .list(
                items.map { item in
                    var map: [String: WireValue] = [
                        "path": .string(item.path), "what": .string(item.what), "covered": .bool(item.covered),
                    ]
                    if let why = item.why { map["why"] = .string(why) }
                    return .map(map)
                })
        }
        return .map([
            "states": .int(Int64(states)), "messages": .int(Int64(messages)), "transitions": .int(Int64(transitions)),
            "truncated": .bool(truncated), "depth": .int(Int64(limits.depth)), "maxStates": .int(Int64(limits.states)),
            "flows": list(flows), "screens": list(screens), "steps": list(steps), "rules": list(rules),
            "orphanBindings": list(orphanBindings), "unreachable": .int(Int64(unreachable.count)),
        ])
    }
}

// MARK: The search

@FlowActor
private struct Search {
    let config: FlowBusConfig
    let limits: FlowExplorer.Limits
    let catalog: DeclaredFlowCatalog
    let candidates: StepCandidates
    var report = FlowExploration()

    /// A reached state: its checkpoint and the messages that led there from the first one.
    struct State {
        var checkpoint: CoordinatorCheckpoint
        var snapshot: CoordinatorSnapshot
        var path: [FlowExplorer.Message]
        /// Every message on the path had one kind of outcome (navigated, or refused), so that a
        /// test can assert it without a refusal and a navigation of one step racing.
        var clean = true
    }

    private var seen: Set<String> = []
    private var startedFlows: Set<String> = []
    /// Steps applied at all, and applied other than by a deep link (the first step, a stepper's
    /// message and what it handed on).
    private var appliedAtAll: Set<FlowStep> = []
    private var appliedWithoutDeepLinks: Set<FlowStep> = []
    /// (flow, step) → the reasons sends by a bound stepper of the flow were refused, counted.
    private var refusals: [FlowStep: [String: Int]] = [:]
    private var boundFlows: Set<String> = []
    private var orphans: [String: FlowExploration.Item] = [:]
    /// The shortest path found to each kind of transition (see ``FlowExploration/plans``).
    private var targets: [String: [FlowExplorer.Message]] = [:]

    struct FlowStep: Hashable {
        var flow: String
        var step: String
    }

    init(config: FlowBusConfig, limits: FlowExplorer.Limits) {
        self.config = config
        candidates = StepCandidates(config: config)
        self.limits = limits
        catalog = DeclaredFlowCatalog(flows: config.flows)
        report.limits = limits
    }

    mutating func run() async throws {
        let log = EventLog()
        guard let engine = await FlowCoordinator.started(config, catalog, log: log) else {
            finish()
            return
        }
        take(log.events, message: nil)
        var frontier = [State(checkpoint: try engine.checkpoint(), snapshot: engine.snapshot(), path: [])]
        seen.insert(Self.key(frontier[0].snapshot))
        report.states = 1
        check(frontier[0])
        while !frontier.isEmpty {
            var next: [State] = []
            for state in frontier {
                guard state.path.count < limits.depth else {
                    report.truncated = true
                    continue
                }
                for message in candidates.messages(in: state.snapshot) {
                    guard let reached = try await send(message, from: state) else { continue }
                    let key = Self.key(reached.snapshot)
                    guard !seen.contains(key) else { continue }
                    guard seen.count < limits.states else {
                        report.truncated = true
                        continue
                    }
                    seen.insert(key)
                    report.states += 1
                    check(reached)
                    next.append(reached)
                }
            }
            frontier = next
        }
        finish()
        try await plan()
    }

    /// Applies `message` to a fresh engine restored from `state`; the state it reaches when it
    /// changed anything (nil when every outcome was a refusal and nothing moved).
    mutating func send(_ message: FlowExplorer.Message, from state: State) async throws -> State? {
        let engine = FlowCoordinator()
        try engine.restore(state.checkpoint, makeFlow: { catalog.make($0) })
        let log = EventLog()
        engine.onEvent = { log.events.append($0) }
        report.messages += 1
        let outcomes = await engine.apply(message)
        let path = state.path + [message]
        take(log.events, message: message)
        if let stepperID = message.stepperID,
            let binding = state.snapshot.bindings.first(where: { $0.stepperID == stepperID })
        {
            let key = FlowStep(flow: binding.flow.name, step: message.step.name)
            for outcome in outcomes {
                if case .dropped(let reason, _) = outcome {
                    refusals[key, default: [:]][reason.rawValue, default: 0] += 1
                }
            }
        }
        let navigated = outcomes.compactMap { if case .navigated(let flow) = $0 { flow.name } else { nil } }
        let refused = outcomes.compactMap { if case .dropped(let reason, _) = $0 { reason.rawValue } else { nil } }
        let sender =
            message.stepperID.map { id in
                state.snapshot.bindings.first { $0.stepperID == id }.flatMap {
                    declaration(ofStepper: id, in: $0.flow.name)
                }
                    ?? id
            } ?? "deep link"
        // A navigation with a refusal or a diagnostic beside it (e.g. a flow-error of a dismiss
        // with nothing presented): real, but the two race on the wire.
        let diagnosed = log.events.contains { if case .diagnostic = $0 { true } else { false } }
        let mixed = !navigated.isEmpty && (!refused.isEmpty || diagnosed)
        if state.clean, !mixed, !navigated.isEmpty || (message.stepperID != nil && !refused.isEmpty) {
            let kind =
                "\(sender) \(message.step.name) " + (navigated.isEmpty ? "refused \(refused.sorted())" : "applied")
            if targets[kind] == nil { targets[kind] = path }
        }
        guard !navigated.isEmpty else { return nil }
        report.transitions += 1
        return State(
            checkpoint: try engine.checkpoint(), snapshot: engine.snapshot(), path: path, clean: state.clean && !mixed)
    }

    /// Records what the engine did: flows started, steps applied, steppers bound.
    mutating func take(_ events: [CoordinatorEvent], message: FlowExplorer.Message?) {
        for event in events {
            switch event {
            case .flowStarted(let flow, _, _):
                startedFlows.insert(flow.name)
            case .didNavigate(let navigation):
                guard let step = navigation.step as? CanonicalStep else { continue }
                let key = FlowStep(flow: navigation.flow.name, step: step.name)
                appliedAtAll.insert(key)
                if message == nil || message?.stepperID != nil { appliedWithoutDeepLinks.insert(key) }
            case .bound(let binding) where binding.isRemote:
                boundFlows.insert(binding.flow.name)
            default:
                continue
            }
        }
    }

    /// Bindings whose presentable is in no flow's tree: a stepper left bound to what is gone.
    mutating func check(_ state: State) {
        var present: Set<String> = []
        func collect(_ node: NodeSnapshot) {
            present.insert(node.id)
            node.children.forEach(collect)
            node.presented.map(collect)
        }
        for flow in state.snapshot.flows { collect(flow.root) }
        for binding in state.snapshot.bindings where binding.isRemote && !present.contains(binding.presentableID) {
            guard orphans[binding.stepperID] == nil else { continue }
            let declared = declaration(ofStepper: binding.stepperID, in: binding.flow.name)
            orphans[binding.stepperID] = .init(
                path: declared ?? "flows.\(binding.flow.name)",
                what: "stepper \(binding.stepperID) of \(binding.flow) stays bound to \(binding.presentableID)",
                covered: false,
                why: "\(binding.presentableID) is no longer in any tree after "
                    + (state.path.isEmpty ? "the first step" : state.path.map(\.description).joined(separator: " → ")))
        }
    }

    /// The config path of the rule that declares `stepperID` (its template matched) in `flow`.
    func declaration(ofStepper stepperID: String, in flow: String) -> String? {
        guard let spec = config.flows[flow] else { return nil }
        for (step, rules) in spec.steps.sorted(by: { $0.key < $1.key }) {
            for (index, rule) in rules.enumerated() {
                for (path, template) in rule.templatePaths where path.hasSuffix("stepper") {
                    if Self.matches(template, stepperID) { return "flows.\(flow).steps.\(step)[\(index)].\(path)" }
                }
            }
        }
        return nil
    }

    /// Whether `id` is `template` with its `{param}`s filled in.
    static func matches(_ template: String, _ id: String) -> Bool {
        var pattern = "^"
        var rest = Substring(template)
        while let open = rest.firstIndex(of: "{"), let close = rest[open...].firstIndex(of: "}") {
            pattern += NSRegularExpression.escapedPattern(for: String(rest[..<open])) + ".+"
            rest = rest[rest.index(after: close)...]
        }
        pattern += NSRegularExpression.escapedPattern(for: String(rest)) + "$"
        return id.range(of: pattern, options: .regularExpression) != nil
    }

    // MARK: The report

    /// Keeps the longest paths, dropping each that is the start of another, and replays each from
    /// a fresh start to record what every message does.
    mutating func plan() async throws {
        report.planTargets = targets.count
        // A refusal leaves the state as it was: it goes into a kept path that passes through the
        // same state (one that starts with the same messages), right there.
        var kept: [[FlowExplorer.Message]] = []
        var refusals: [[FlowExplorer.Message]] = []
        for (kind, path) in targets.sorted(by: { $0.key < $1.key }) {
            if kind.contains(" refused ") { refusals.append(path) } else { kept.append(path) }
        }
        kept.sort { $0.count != $1.count ? $0.count > $1.count : "\($0)" < "\($1)" }
        var longest: [[FlowExplorer.Message]] = []
        for path in kept where !longest.contains(where: { $0.starts(with: path) }) { longest.append(path) }
        kept = longest
        // Deepest first: an insertion changes nothing before it, so shallower prefixes still match.
        for refusal in refusals.sorted(by: { $0.count > $1.count }) {
            let prefix = refusal.dropLast()
            if let index = kept.firstIndex(where: { $0.starts(with: prefix) }) {
                kept[index].insert(refusal[refusal.count - 1], at: prefix.count)
            } else {
                kept.append(refusal)
            }
        }
        // A refusal's own path may now contain another plan from its start.
        kept.sort { $0.count != $1.count ? $0.count > $1.count : "\($0)" < "\($1)" }
        longest = []
        for path in kept where !longest.contains(where: { $0.starts(with: path) }) { longest.append(path) }
        kept = longest
        for path in kept.sorted(by: { "\($0)" < "\($1)" }) {
            let log = EventLog()
            guard let engine = await FlowCoordinator.started(config, catalog, log: log) else { return }
            var steps: [FlowExploration.PlanStep] = []
            for message in path {
                log.events = []
                let outcomes = await engine.apply(message)
                let navigations = log.events.compactMap { event -> (flow: String, step: String, params: WireParams)? in
                    guard case .didNavigate(let navigation) = event, let step = navigation.step as? CanonicalStep else {
                        return nil
                    }
                    return (navigation.flow.name, step.name, step.params)
                }
                let refusals = outcomes.compactMap {
                    if case .dropped(let reason, _) = $0 { reason.rawValue } else { nil }
                }
                steps.append(
                    .init(
                        message: message, navigations: navigations, refusals: refusals,
                        tree: .list(engine.snapshot().flows.map(\.statusEntry))))
            }
            report.plans.append(.init(steps: steps))
        }
    }

    mutating func finish() {
        let started = startedFlows
        report.flows = config.flows.keys.sorted().map { name in
            .init(
                path: "flows.\(name)", what: "flow \(name)", covered: started.contains(name),
                why: started.contains(name) ? nil : "no rule that is ever taken presents it or makes it a tab")
        }
        for (flow, spec) in config.flows.sorted(by: { $0.key < $1.key }) {
            for (step, rules) in spec.steps.sorted(by: { $0.key < $1.key }) {
                let key = FlowStep(flow: flow, step: step)
                let applied = appliedAtAll.contains(key)
                let why = applied ? nil : reasonNeverApplied(key)
                let covered = appliedWithoutDeepLinks.contains(key)
                report.steps.append(
                    .init(
                        path: "flows.\(flow).steps.\(step)", what: "step \(flow).\(step)", covered: covered,
                        why: covered ? nil : why ?? reasonOnlyAsDeepLink(key)))
                for (index, rule) in rules.enumerated() {
                    let path = "flows.\(flow).steps.\(step)[\(index)]"
                    report.rules.append(
                        .init(path: path, what: "rule \(Self.name(of: rule))", covered: applied, why: why))
                    for (key, template) in rule.templatePaths where !key.hasSuffix("stepper") {
                        report.screens.append(
                            .init(path: "\(path).\(key)", what: "screen \(template)", covered: applied, why: why))
                    }
                }
            }
        }
        report.orphanBindings = orphans.values.sorted { $0.what < $1.what }
    }

    func reasonNeverApplied(_ key: FlowStep) -> String {
        guard startedFlows.contains(key.flow) else { return "flow \(key.flow) is never started" }
        if let refused = refusals[key], !refused.isEmpty {
            return "every send was refused: "
                + refused.sorted { $0.key < $1.key }.map { "\($0.key) ×\($0.value)" }.joined(separator: ", ")
        }
        guard boundFlows.contains(key.flow) else { return "no stepper is ever bound to \(key.flow)" }
        return "no message reaching \(key.flow) applied it"
    }

    /// Why a step that only deep links got applied never happens otherwise.
    func reasonOnlyAsDeepLink(_ key: FlowStep) -> String {
        "applied only as a deep link; " + reasonNeverApplied(key)
    }

    static func name(of rule: NavigationRule) -> String {
        switch rule {
        case .push: "push"
        case .setRoot: "setRoot"
        case .present(.screen): "present screen"
        case .present(.flow(let child)): "present flow \(child.flow)"
        case .tabs: "tabs"
        case .selectTab(let index): "selectTab \(index)"
        case .pop: "pop"
        case .popToRoot: "popToRoot"
        case .dismiss: "dismiss"
        case .forwardToParent(let step): "forwardToParent \(step)"
        case .forwardToCurrent(let step): "forwardToCurrent \(step)"
        case .end(let step): "end \(step)"
        case .none: "none"
        }
    }

    // MARK: State keys

    /// The state as text, flow instances numbered by their order (name, then instance), so that
    /// the same tree reached along two paths is one state.
    static func key(_ snapshot: CoordinatorSnapshot) -> String {
        let flows = snapshot.flows.sorted { $0.id < $1.id }
        var number: [FlowID: Int] = [:]
        for (index, flow) in flows.enumerated() { number[flow.id] = index }
        var text = ""
        func write(_ node: NodeSnapshot) {
            text += "(\(node.id) \(node.kind) \(node.placement.rawValue) \(node.isVisible ? "v" : "h")"
            if let selected = node.selectedIndex { text += " s\(selected)" }
            if let child = node.childFlow { text += " f\(number[child] ?? -1)" }
            node.children.forEach(write)
            if let presented = node.presented {
                text += " p"
                write(presented)
            }
            text += ")"
        }
        for flow in flows {
            text += "\(flow.id.name)<\(flow.parent.flatMap { number[$0] } ?? -1) "
            write(flow.root)
            text += "\n"
        }
        for binding in snapshot.bindings.sorted(by: { $0.stepperID < $1.stepperID }) {
            text +=
                "\(binding.stepperID)>\(number[binding.flow] ?? -1)@\(binding.presentableID)"
                + " \(binding.role) \(binding.allowStepWhenNotPresented) \(binding.allowStepWhenDismissed)\n"
        }
        return text
    }
}

extension FlowCoordinator {
    /// A coordinator at the config's first step, its events going to `log`; nil when the config
    /// names no declared root flow.
    static func started(
        _ config: FlowBusConfig, _ catalog: DeclaredFlowCatalog, log: EventLog
    ) async
        -> FlowCoordinator?
    {
        guard let start = config.coordinator, let root = catalog.make(start.flow) else { return nil }
        let engine = FlowCoordinator()
        engine.onEvent = { log.events.append($0) }
        await engine.coordinate(flow: root, with: OneStepper(withSingleStep: CanonicalStep(start.step)))
        return engine
    }

    /// Applies a message as flowd's router does: a stepper's step, or a deep link.
    func apply(_ message: FlowExplorer.Message) async -> [StepOutcome] {
        let progress =
            if let stepperID = message.stepperID {
                receiveNow(message.step, from: stepperID)
            } else {
                navigateNow(to: message.step)
            }
        switch progress {
        case .done(let outcomes): return outcomes
        case .pending(let pending): return await pending.outcomes()
        }
    }
}

/// The events one input made the engine emit.
@FlowActor
final class EventLog {
    var events: [CoordinatorEvent] = []
}

/// The messages worth sending in a state, with the params each step needs: shared by the
/// exploration and the walks.
struct StepCandidates: Sendable {
    let config: FlowBusConfig

    /// Every message worth sending in a state: each bound remote stepper sends each step its flow
    /// declares; each declared step name goes as a deep link.
    func messages(in snapshot: CoordinatorSnapshot) -> [FlowExplorer.Message] {
        var messages: [FlowExplorer.Message] = []
        var senders: Set<[String]> = []
        for binding in snapshot.bindings.sorted(by: { $0.stepperID < $1.stepperID }) where binding.isRemote {
            // A stepper bound to several screens (the same screen pushed again) sends once.
            guard let spec = config.flows[binding.flow.name],
                senders.insert([binding.stepperID, binding.flow.name]).inserted
            else { continue }
            for step in spec.steps.keys.sorted() {
                messages.append(
                    .init(
                        stepperID: binding.stepperID,
                        step: CanonicalStep(name: step, params: params(binding.flow.name, step))))
            }
        }
        for name in Set(config.flows.values.flatMap(\.steps.keys)).sorted() {
            var params: WireParams = [:]
            for (flow, spec) in config.flows where spec.steps[name] != nil {
                params.merge(self.params(flow, name)) { first, _ in first }
            }
            messages.append(.init(stepperID: nil, step: CanonicalStep(name: name, params: params)))
        }
        return messages
    }

    /// The params step `step` of `flow` needs: its declared ones, and every `{param}` its rules'
    /// ids and the steps it hands off to use; one fixed value each.
    func params(_ flow: String, _ step: String) -> WireParams {
        var params: WireParams = [:]
        var visited: Set<String> = []
        collect(flow, step, into: &params, visited: &visited)
        return params
    }

    private func collect(_ flow: String, _ step: String, into params: inout WireParams, visited: inout Set<String>) {
        guard visited.insert("\(flow).\(step)").inserted, let spec = config.flows[flow],
            let rules = spec.steps[step]
        else { return }
        for (key, type) in spec.params?[step] ?? [:] where params[key] == nil {
            params[key] = Self.sample(type.kind)
        }
        for rule in rules {
            for (_, template) in rule.templatePaths {
                for key in Template.placeholders(template) where params[key] == nil { params[key] = .int(1) }
            }
            for handoff in rule.handoffs {
                switch handoff {
                case .child(let child, let first): collect(child, first, into: &params, visited: &visited)
                case .current(let next): collect(flow, next, into: &params, visited: &visited)
                case .parent: continue  // any flow may be the parent: its steps' params are sent to it directly
                }
            }
        }
    }

    static func sample(_ kind: ParamType.Kind) -> WireValue {
        switch kind {
        case .int, .any: .int(1)
        case .double: .double(1.5)
        case .string: .string("a")
        case .bool: .bool(true)
        case .list: .list([])
        case .map: .map([:])
        }
    }
}
