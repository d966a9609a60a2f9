import FlowBusClient
import FlowBusConfiguration
import FlowBusDaemon
import FlowBusProtocol
import FlowBusWire
import Flows
import ZeroMQ

/// A `Flow` built from a `DeclaredFlowSpec`: navigate looks the step's name up in the table.
///
/// What every instance of a declared flow shares (its spec, its id templates) is prepared once per
/// name by a `DeclaredFlowCatalog`: an instance holds its root node and little else, so that
/// ten thousand live flows cost what their trees cost.
@FlowActor
public final class DeclaredFlow: CheckpointableFlow {
    public nonisolated let flowName: String
    package let rootNode: NavigationNode
    private let blueprint: DeclaredFlowCatalog.Blueprint
    /// Builds child flows by name; they come from the same config.
    private let catalog: DeclaredFlowCatalog

    package var spec: DeclaredFlowSpec { blueprint.spec }
    public var root: any Presentable { rootNode }

    /// A declared flow never adapts: its steps take the coordinator's synchronous path.
    public var adaptsSteps: Bool { false }

    init(blueprint: DeclaredFlowCatalog.Blueprint, catalog: DeclaredFlowCatalog) {
        self.flowName = blueprint.name
        self.blueprint = blueprint
        self.catalog = catalog
        let rootID = blueprint.spec.id ?? blueprint.name.lowercased()
        switch blueprint.spec.root {
        case .stack: rootNode = NavigationStack(id: rootID)
        case .tabs: rootNode = TabBar(id: rootID)
        case .screen: rootNode = Screen(id: rootID)
        }
    }

    /// Builds the flow named `name` of `config`, able to start the child flows it declares.
    public static func make(named name: String, in config: FlowBusConfig) -> DeclaredFlow? {
        DeclaredFlowCatalog(flows: config.flows).make(name)
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
        if !blueprint.templatesByStep.isEmpty, let templates = blueprint.templatesByStep[canonical.name] {
            for (path, template, placeholders) in templates {
                guard let key = placeholders.first(where: { canonical.params[$0] == nil }) else { continue }
                let missing = placeholders.filter { canonical.params[$0] == nil }
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
        guard let step = step.canonicalStep, let rules = spec.steps[step.name] else { return .none }
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
            guard let flow = catalog.make(child.flow) else { return [] }
            rootNode.present(flow)
            return [
                .contribute(
                    withNextPresentable: flow,
                    withNextStepper: OneStepper(withSingleStep: CanonicalStep(child.step, params)))
            ]
        case .tabs(let tabs):
            let bar = (rootNode as? TabBar) ?? TabBar(id: Template.expand(tabs.id, with: params))
            let flows = tabs.flows.compactMap { child in catalog.make(child.flow).map { (flow: $0, step: child.step) } }
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

/// The flows a config declares, each prepared once, when first started, and shared by all its
/// instances.
@FlowActor
package final class DeclaredFlowCatalog: Sendable {
    /// What every instance of one declared flow shares.
    final class Blueprint: Sendable {
        let name: String
        let spec: DeclaredFlowSpec
        /// Per step name that has any: the id templates with `{param}` placeholders, where each
        /// is written (for refusals) and the params it takes.
        let templatesByStep: [String: [(path: String, template: String, placeholders: [String])]]

        init(name: String, spec: DeclaredFlowSpec) {
            self.name = name
            self.spec = spec
            var templatesByStep: [String: [(path: String, template: String, placeholders: [String])]] = [:]
            for (step, rules) in spec.steps {
                let templates = rules.enumerated().flatMap { index, rule in
                    rule.templatePaths.filter { $0.template.contains("{") }.map {
                        (
                            "flows.\(name).steps.\(step)[\(index)].\($0.path)", $0.template,
                            Template.placeholders($0.template)
                        )
                    }
                }
                if !templates.isEmpty { templatesByStep[step] = templates }
            }
            self.templatesByStep = templatesByStep
        }
    }

    private let flows: [String: DeclaredFlowSpec]
    private var blueprints: [String: Blueprint] = [:]

    package nonisolated init(flows: [String: DeclaredFlowSpec]) {
        self.flows = flows
    }

    /// A new instance of the flow named `name`; nil if the config declares none.
    package func make(_ name: String) -> DeclaredFlow? {
        if let blueprint = blueprints[name] { return DeclaredFlow(blueprint: blueprint, catalog: self) }
        guard let spec = flows[name] else { return nil }
        let blueprint = Blueprint(name: name, spec: spec)
        blueprints[name] = blueprint
        return DeclaredFlow(blueprint: blueprint, catalog: self)
    }
}
