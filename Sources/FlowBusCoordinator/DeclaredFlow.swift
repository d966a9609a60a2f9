import FlowBusClient
import FlowBusConfiguration
import FlowBusDaemon
import FlowBusProtocol
import FlowBusWire
import Flows
import ZeroMQ

/// A `Flow` built from a `DeclaredFlowSpec`: navigate looks the step's name up in the table.
@FlowActor
public final class DeclaredFlow: CheckpointableFlow {
    public nonisolated let flowName: String
    package let spec: DeclaredFlowSpec
    package let rootNode: NavigationNode
    /// The id templates with `{param}` placeholders, with where each is written, per step name that has any.
    private let templatesByStep: [String: [(path: String, template: String)]]
    /// Builds a child flow by name; child flows come from the same config.
    package let makeFlow: @FlowActor (String) -> DeclaredFlow?

    public var root: any Presentable { rootNode }

    /// A declared flow never adapts: its steps take the coordinator's synchronous path.
    public var adaptsSteps: Bool { false }

    package init(name: String, spec: DeclaredFlowSpec, makeFlow: @escaping @FlowActor (String) -> DeclaredFlow?) {
        self.flowName = name
        self.spec = spec
        self.makeFlow = makeFlow
        var templatesByStep: [String: [(path: String, template: String)]] = [:]
        for (step, rules) in spec.steps {
            let templates = rules.enumerated().flatMap { index, rule in
                rule.templatePaths.filter { $0.template.contains("{") }.map {
                    ("flows.\(name).steps.\(step)[\(index)].\($0.path)", $0.template)
                }
            }
            if !templates.isEmpty { templatesByStep[step] = templates }
        }
        self.templatesByStep = templatesByStep
        let rootID = spec.id ?? name.lowercased()
        switch spec.root {
        case .stack: rootNode = NavigationStack(id: rootID)
        case .tabs: rootNode = TabBar(id: rootID)
        case .screen: rootNode = Screen(id: rootID)
        }
    }

    /// Builds the flow named `name` of `config`, able to start the child flows it declares.
    public static func make(named name: String, in config: FlowBusConfig) -> DeclaredFlow? {
        guard let spec = config.flows[name] else { return nil }
        let flows = config.flows
        func build(_ name: String) -> DeclaredFlow? {
            guard let spec = flows[name] else { return nil }
            return DeclaredFlow(name: name, spec: spec, makeFlow: build)
        }
        return DeclaredFlow(name: name, spec: spec, makeFlow: build)
    }

    /// Accepts a step only if the table has it (else nil: `unknown-step`), it carries the params
    /// `params:` declares for it, of their types, and every `{param}` its ids use (else refused as
    /// `bad-params`, naming the key and the rule).
    public func step(from canonical: CanonicalStep) -> (any Step)? {
        guard spec.steps[canonical.name] != nil else { return nil }
        if let declared = spec.params?[canonical.name] {
            for (key, type) in declared.sorted(by: { $0.key < $1.key }) {
                let path = "flows.\(flowName).params.\(canonical.name).\(key)"
                guard let value = canonical.params[key] else {
                    if type.optional { continue }
                    return RefusedStep(
                        reason: .badParams,
                        message:
                            "step \(canonical.name) lacks param '\(key)', which \(path) requires (\(type)): send it, e.g. \(key)=…"
                    )
                }
                guard type.admits(value) else {
                    return RefusedStep(
                        reason: .badParams,
                        message:
                            "step \(canonical.name) param '\(key)' is \(value.typeName) \(value.displayText), but \(path) declares \(type)"
                            + (type.kind == .string
                                ? ": send it as a string, e.g. \(key):='\"\(value.displayText)\"'" : ""))
                }
            }
        }
        if !templatesByStep.isEmpty, let templates = templatesByStep[canonical.name] {
            for (path, template) in templates {
                let missing = Template.missingParameters(template, in: canonical.params)
                guard let key = missing.first else { continue }
                let has = canonical.params.keys.sorted().map { "'\($0)'" }.joined(separator: ", ")
                return RefusedStep(
                    reason: .badParams,
                    message: "step \(canonical.name) lacks param '\(key)', which \(path) '\(template)' uses "
                        + "(it has \(has.isEmpty ? "no params" : has)): send it with \(missing.map { "'\($0)'" }.joined(separator: ", "))"
                )
            }
        }
        return canonical
    }

    public func navigate(to step: any Step) -> FlowContributors {
        guard let step = step as? CanonicalStep, let rules = spec.steps[step.name] else { return .none }
        var contributors: [FlowContributor] = []
        for rule in rules {
            switch rule {
            case .end(let name):
                return .end(forwardToParentFlowWithStep: CanonicalStep(name, step.params))
            case .none:
                continue
            default:
                contributors += apply(rule, for: step)
            }
        }
        switch contributors.count {
        case 0: return .none
        case 1: return .one(flowContributor: contributors[0])
        default: return .multiple(flowContributors: contributors)
        }
    }

    private func apply(_ rule: NavigationRule, for step: CanonicalStep) -> [FlowContributor] {
        let params = step.params
        switch rule {
        case .push(let spec):
            let screen = Screen(id: Template.expand(spec.screen, with: params))
            (rootNode as? NavigationStack)?.push(screen)
            return contribution(for: screen, spec, params)
        case .setRoot(let spec):
            let screen = Screen(id: Template.expand(spec.screen, with: params))
            (rootNode as? NavigationStack)?.setRoot(screen)
            return contribution(for: screen, spec, params)
        case .present(.screen(let spec)):
            let screen = Screen(id: Template.expand(spec.screen, with: params))
            rootNode.present(screen)
            return contribution(for: screen, spec, params)
        case .present(.flow(let child)):
            guard let flow = makeFlow(child.flow) else { return [] }
            rootNode.present(flow)
            return [
                .contribute(
                    withNextPresentable: flow,
                    withNextStepper: OneStepper(withSingleStep: CanonicalStep(child.step, params)))
            ]
        case .tabs(let tabs):
            let bar = (rootNode as? TabBar) ?? TabBar(id: Template.expand(tabs.id, with: params))
            let flows = tabs.flows.compactMap { child in makeFlow(child.flow).map { (flow: $0, step: child.step) } }
            bar.setTabs(flows.map(\.flow), selected: tabs.selected ?? 0)
            if bar !== rootNode { (rootNode as? NavigationStack)?.setRoot(bar) }
            var contributors: [FlowContributor] = flows.map {
                .contribute(
                    withNextPresentable: $0.flow,
                    withNextStepper: OneStepper(withSingleStep: CanonicalStep($0.step, params)))
            }
            if let stepper = tabs.stepper {
                contributors.append(
                    .contribute(
                        withNextPresentable: bar,
                        withNextStepper: RemoteStepper(id: Template.expand(stepper, with: params))))
            }
            return contributors
        case .selectTab(let index):
            // The root itself, or the tab bar a `tabs` rule put in the root stack.
            let bar = (rootNode as? TabBar) ?? ((rootNode as? NavigationStack)?.top as? TabBar)
            bar?.select(index)
            return []
        case .pop:
            (rootNode as? NavigationStack)?.pop()
            return []
        case .popToRoot:
            (rootNode as? NavigationStack)?.popToRoot()
            return []
        case .dismiss:
            rootNode.dismissPresented()
            return []
        case .forwardToParent(let name):
            return [.forwardToParentFlow(withStep: CanonicalStep(name, params))]
        case .forwardToCurrent(let name):
            return [.forwardToCurrentFlow(withStep: CanonicalStep(name, params))]
        case .end, .none:
            return []
        }
    }

    private func contribution(for screen: Screen, _ spec: ScreenSpec, _ params: WireParams) -> [FlowContributor] {
        guard let stepper = spec.stepper else { return [] }
        return [
            .contribute(
                withNextPresentable: screen,
                withNextStepper: RemoteStepper(id: Template.expand(stepper, with: params)),
                allowStepWhenNotPresented: spec.allowStepWhenNotPresented ?? false,
                allowStepWhenDismissed: spec.allowStepWhenDismissed ?? false)
        ]
    }
}
