import FlowBusClient
import FlowBusWire

/// A flow declared in the config file: a root and, per step name, what navigating to it does.
///
/// ```yaml
/// WishlistFlow:
///   root: stack
///   id: wishlist
///   steps:
///     movieList:
///       - push: { screen: wishlist/movies, stepper: wishlist/movies }
///     moviePicked:
///       - push: { screen: "wishlist/movie/{withMovieId}", stepper: "wishlist/movie/{withMovieId}" }
///     castPicked:
///       - push: { screen: "wishlist/cast/{withCastId}" }
/// ```
/// `{param}` in an id is replaced by that parameter of the step. `params:` may declare, per step,
/// the params it needs and their types (`params: { moviePicked: { withMovieId: int } }`); a step
/// lacking one or sending another type is refused as `bad-params`.
public struct DeclaredFlowSpec: Codable, Sendable, Hashable {
    /// The kind of the flow's root presentable.
    public enum RootKind: String, Codable, Sendable, Hashable {
        case stack, tabs, screen
    }

    /// The root's kind; a stack unless said otherwise.
    public var root: RootKind
    /// The root presentable's id; the flow's name, lowercased, unless said otherwise.
    public var id: String?
    /// What each step does, in order. A step absent here is refused as `unknown-step`.
    public var steps: [String: [NavigationRule]]
    /// Per step name, the params it must carry and their types.
    public var params: [String: [String: ParamType]]?

    public init(
        root: RootKind = .stack, id: String? = nil, steps: [String: [NavigationRule]],
        params: [String: [String: ParamType]]? = nil
    ) {
        self.root = root
        self.id = id
        self.steps = steps
        self.params = params
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        root = try container.decodeIfPresent(RootKind.self, forKey: .root) ?? .stack
        id = try container.decodeIfPresent(String.self, forKey: .id)
        steps = try container.decodeIfPresent([String: [NavigationRule]].self, forKey: .steps) ?? [:]
        params = try container.decodeIfPresent([String: [String: ParamType]].self, forKey: .params)
    }

    /// Names of the flows this flow can start.
    package var childFlowNames: [String] {
        steps.values.flatMap { rules in
            rules.flatMap { rule -> [String] in
                switch rule {
                case .present(.flow(let child)): [child.flow]
                case .tabs(let tabs): tabs.flows.map(\.flow)
                default: []
                }
            }
        }
    }
}

/// The type a declared step's param must have: `int`, `double` (an int is accepted), `string`,
/// `bool`, `list`, `map` or `any`; a trailing `?` makes it optional (`note: string?`).
public struct ParamType: Codable, Sendable, Hashable, CustomStringConvertible {
    public enum Kind: String, Sendable, Hashable, CaseIterable {
        case int, double, string, bool, list, map, any
    }

    public var kind: Kind
    public var optional: Bool

    public init(_ kind: Kind, optional: Bool = false) {
        self.kind = kind
        self.optional = optional
    }

    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        let optional = text.hasSuffix("?")
        guard let kind = Kind(rawValue: String(optional ? text.dropLast() : Substring(text))) else {
            throw DecodingError.dataCorrupted(
                .init(
                    codingPath: decoder.codingPath,
                    debugDescription:
                        "'\(text)' is not a param type: use \(Kind.allCases.map(\.rawValue).joined(separator: ", ")), with ? for an optional one"
                ))
        }
        self.init(kind, optional: optional)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(description)
    }

    public var description: String { kind.rawValue + (optional ? "?" : "") }

    /// Whether `value` has this type (null only for an optional param).
    public func admits(_ value: WireValue) -> Bool {
        switch (kind, value) {
        case (_, .null): optional
        case (.any, _), (.int, .int), (.double, .double), (.double, .int), (.string, .string), (.bool, .bool),
            (.list, .list), (.map, .map):
            true
        default: false
        }
    }
}

/// A screen to show, and the stepper (process) that speaks for it.
public struct ScreenSpec: Codable, Sendable, Hashable {
    /// The screen's presentable id (may use `{param}`).
    public var screen: String
    /// The stepper id bound to the screen (may use `{param}`); none: the screen emits no steps.
    public var stepper: String?
    /// Accept the stepper's steps while the screen is not visible.
    public var allowStepWhenNotPresented: Bool?
    /// Accept the stepper's steps after the screen is dismissed.
    public var allowStepWhenDismissed: Bool?

    public init(
        screen: String, stepper: String? = nil, allowStepWhenNotPresented: Bool? = nil,
        allowStepWhenDismissed: Bool? = nil
    ) {
        self.screen = screen
        self.stepper = stepper
        self.allowStepWhenNotPresented = allowStepWhenNotPresented
        self.allowStepWhenDismissed = allowStepWhenDismissed
    }
}

/// A child flow to start, with its first step.
public struct ChildFlowSpec: Codable, Sendable, Hashable {
    /// The child flow's name, a key of `flows`.
    public var flow: String
    /// The child's first step.
    public var step: String

    public init(flow: String, step: String) {
        self.flow = flow
        self.step = step
    }
}

/// A tab bar of child flows.
public struct TabsSpec: Codable, Sendable, Hashable {
    /// The tab bar's presentable id.
    public var id: String
    /// A stepper bound to the tab bar itself (e.g. a dashboard opening settings).
    public var stepper: String?
    /// One child flow per tab, in order.
    public var flows: [ChildFlowSpec]
    /// The tab selected first.
    public var selected: Int?
}

/// What a modal presentation shows.
public enum PresentTarget: Codable, Sendable, Hashable {
    case screen(ScreenSpec)
    case flow(ChildFlowSpec)

    public init(from decoder: any Decoder) throws {
        if let flow = try? ChildFlowSpec(from: decoder) {
            self = .flow(flow)
        } else {
            self = .screen(try ScreenSpec(from: decoder))
        }
    }

    public func encode(to encoder: any Encoder) throws {
        switch self {
        case .screen(let screen): try screen.encode(to: encoder)
        case .flow(let flow): try flow.encode(to: encoder)
        }
    }
}

/// One thing navigating to a step does: one of RxFlow's contributions, with the tree change it implies.
public enum NavigationRule: Codable, Sendable, Hashable {
    /// Push a screen on the root stack.
    case push(ScreenSpec)
    /// Replace the root stack's content with a screen.
    case setRoot(ScreenSpec)
    /// Present a screen or a child flow modally over the root.
    case present(PresentTarget)
    /// Show a tab bar of child flows (as the root stack's content, or as the root when it is `tabs`).
    case tabs(TabsSpec)
    /// Select a tab of the root tab bar.
    case selectTab(Int)
    /// Pop the root stack's top screen.
    case pop
    /// Pop the root stack to its first screen.
    case popToRoot
    /// Dismiss what is presented over the root.
    case dismiss
    /// Forward a step (by name, with this step's params) to the parent flow.
    case forwardToParent(String)
    /// Re-inject a step (by name, with this step's params) into this flow.
    case forwardToCurrent(String)
    /// End this flow, forwarding a step (by name, with this step's params) to the parent.
    case end(String)
    /// Do nothing (an explicit `.none`).
    case none

    private enum Keys: String, CodingKey, CaseIterable {
        case push, setRoot, present, tabs, selectTab, pop, popToRoot, dismiss, forwardToParent, forwardToCurrent, end,
            none
    }

    public init(from decoder: any Decoder) throws {
        if let word = try? decoder.singleValueContainer().decode(String.self) {
            switch word {
            case "pop": self = .pop
            case "popToRoot": self = .popToRoot
            case "dismiss": self = .dismiss
            case "none": self = .none
            default:
                throw DecodingError.dataCorrupted(
                    .init(
                        codingPath: decoder.codingPath,
                        debugDescription:
                            "unknown rule '\(word)': a bare rule is one of pop, popToRoot, dismiss, none; others take a value, e.g. 'push: { screen: id }'"
                    ))
            }
            return
        }
        let container = try decoder.container(keyedBy: Keys.self)
        guard container.allKeys.count == 1, let key = container.allKeys.first else {
            throw DecodingError.dataCorrupted(
                .init(
                    codingPath: decoder.codingPath,
                    debugDescription:
                        "a rule has exactly one of the keys \(Keys.allCases.map(\.rawValue).joined(separator: ", "))"))
        }
        switch key {
        case .push: self = .push(try container.decode(ScreenSpec.self, forKey: key))
        case .setRoot: self = .setRoot(try container.decode(ScreenSpec.self, forKey: key))
        case .present: self = .present(try container.decode(PresentTarget.self, forKey: key))
        case .tabs: self = .tabs(try container.decode(TabsSpec.self, forKey: key))
        case .selectTab: self = .selectTab(try container.decode(Int.self, forKey: key))
        case .pop: self = .pop
        case .popToRoot: self = .popToRoot
        case .dismiss: self = .dismiss
        case .forwardToParent: self = .forwardToParent(try container.decode(String.self, forKey: key))
        case .forwardToCurrent: self = .forwardToCurrent(try container.decode(String.self, forKey: key))
        case .end: self = .end(try container.decode(String.self, forKey: key))
        case .none: self = .none
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: Keys.self)
        switch self {
        case .push(let screen): try container.encode(screen, forKey: .push)
        case .setRoot(let screen): try container.encode(screen, forKey: .setRoot)
        case .present(let target): try container.encode(target, forKey: .present)
        case .tabs(let tabs): try container.encode(tabs, forKey: .tabs)
        case .selectTab(let index): try container.encode(index, forKey: .selectTab)
        case .pop: try container.encode(true, forKey: .pop)
        case .popToRoot: try container.encode(true, forKey: .popToRoot)
        case .dismiss: try container.encode(true, forKey: .dismiss)
        case .forwardToParent(let step): try container.encode(step, forKey: .forwardToParent)
        case .forwardToCurrent(let step): try container.encode(step, forKey: .forwardToCurrent)
        case .end(let step): try container.encode(step, forKey: .end)
        case .none: try container.encode(true, forKey: .none)
        }
    }
}

extension NavigationRule {
    /// The id templates this rule expands, each with its key path within the rule (`push.screen`).
    package var templatePaths: [(path: String, template: String)] {
        switch self {
        case .push(let spec), .setRoot(let spec), .present(.screen(let spec)):
            let key = if case .push = self { "push" } else if case .setRoot = self { "setRoot" } else { "present" }
            return [("\(key).screen", spec.screen)] + (spec.stepper.map { [("\(key).stepper", $0)] } ?? [])
        case .tabs(let tabs):
            return [("tabs.id", tabs.id)] + (tabs.stepper.map { [("tabs.stepper", $0)] } ?? [])
        default:
            return []
        }
    }

    /// The steps this rule passes the step's params on to: a child flow's first step, or a step
    /// forwarded to this flow or to its parent.
    package enum Handoff {
        case child(flow: String, step: String)
        case current(step: String)
        case parent(step: String)
    }

    package var handoffs: [Handoff] {
        switch self {
        case .present(.flow(let child)): [.child(flow: child.flow, step: child.step)]
        case .tabs(let tabs): tabs.flows.map { .child(flow: $0.flow, step: $0.step) }
        case .forwardToCurrent(let step): [.current(step: step)]
        case .forwardToParent(let step), .end(let step): [.parent(step: step)]
        default: []
        }
    }
}

/// `{name}` placeholders in presentable and stepper ids.
package enum Template {
    package static func expand(_ template: String, with params: WireParams) -> String {
        guard template.contains("{") else { return template }
        var result = ""
        var rest = Substring(template)
        while let open = rest.firstIndex(of: "{"), let close = rest[open...].firstIndex(of: "}") {
            result += rest[..<open]
            let name = String(rest[rest.index(after: open)..<close])
            result += params[name]?.displayText ?? ""
            rest = rest[rest.index(after: close)...]
        }
        return result + rest
    }

    /// The `{name}`s of a template, in order.
    package static func placeholders(_ template: String) -> [String] {
        var names: [String] = []
        var rest = Substring(template)
        while let open = rest.firstIndex(of: "{"), let close = rest[open...].firstIndex(of: "}") {
            names.append(String(rest[rest.index(after: open)..<close]))
            rest = rest[rest.index(after: close)...]
        }
        return names
    }
}
