import FlowBusClient
import FlowBusConfiguration
import FlowBusCoordinator
import FlowBusDaemon
import FlowBusWire
import Foundation
import ZeroMQ

/// Draws flows as graphs: the declared flows of a config (steps → what they do, child flows),
/// or flowd's live navigation tree, in Graphviz DOT or Mermaid.
public struct FlowGraph: Sendable {
    /// One box of the graph.
    public struct Node: Sendable, Hashable {
        public var id: String
        public var label: String
        public var shape: Shape
        /// The flow (cluster) it belongs to, if any.
        public var group: String?
        /// Drawn faded (e.g. a hidden presentable).
        public var dimmed = false
    }

    public enum Shape: String, Sendable, Hashable {
        case step, screen, container, flow
    }

    /// One arrow of the graph.
    public struct Edge: Sendable, Hashable {
        public var from: String
        public var to: String
        public var label: String

        public init(from: String, to: String, label: String) {
            self.from = from
            self.to = to
            self.label = label
        }
    }

    public private(set) var nodes: [Node] = []
    public private(set) var edges: [Edge] = []
    private var known: Set<String> = []

    package mutating func add(_ node: Node) {
        if known.insert(node.id).inserted { nodes.append(node) }
    }

    package mutating func connect(_ from: String, _ to: String, _ label: String = "") {
        edges.append(Edge(from: from, to: to, label: label))
    }

    /// The declared flows of `config`: per flow, its steps and what each does.
    public static func declared(_ config: FlowBusConfig) -> FlowGraph {
        var graph = FlowGraph()
        for (flowName, spec) in config.flows.sorted(by: { $0.key < $1.key }) {
            let rootID = "\(flowName)/root"
            graph.add(
                Node(
                    id: rootID, label: "\(spec.root.rawValue) \(spec.id ?? flowName.lowercased())", shape: .container,
                    group: flowName))
            for (stepName, rules) in spec.steps.sorted(by: { $0.key < $1.key }) {
                let stepID = "\(flowName).\(stepName)"
                graph.add(Node(id: stepID, label: stepName, shape: .step, group: flowName))
                for rule in rules { graph.draw(rule, from: stepID, in: flowName) }
            }
        }
        if let start = config.coordinator {
            graph.add(Node(id: "start", label: "start", shape: .flow))
            graph.connect("start", "\(start.flow).\(start.step)", "")
        }
        return graph
    }

    private mutating func draw(_ rule: NavigationRule, from stepID: String, in flowName: String) {
        func screen(_ spec: ScreenSpec, _ verb: String) {
            let id = "screen:\(spec.screen)"
            add(
                Node(
                    id: id, label: spec.stepper.map { "\(spec.screen)\\nstepper \($0)" } ?? spec.screen, shape: .screen,
                    group: flowName))
            connect(stepID, id, verb)
        }
        func child(_ spec: ChildFlowSpec, _ verb: String) {
            connect(stepID, "\(spec.flow).\(spec.step)", "\(verb) \(spec.flow)")
        }
        switch rule {
        case .push(let spec): screen(spec, "push")
        case .setRoot(let spec): screen(spec, "setRoot")
        case .present(.screen(let spec)): screen(spec, "present")
        case .present(.flow(let spec)): child(spec, "present")
        case .tabs(let tabs):
            let id = "tabs:\(tabs.id)"
            add(
                Node(
                    id: id, label: tabs.stepper.map { "tabs \(tabs.id)\\nstepper \($0)" } ?? "tabs \(tabs.id)",
                    shape: .container, group: flowName))
            connect(stepID, id, "tabs")
            for spec in tabs.flows { connect(id, "\(spec.flow).\(spec.step)", spec.flow) }
        case .selectTab(let index): connect(stepID, "\(flowName)/root", "selectTab \(index)")
        case .pop: connect(stepID, "\(flowName)/root", "pop")
        case .popToRoot: connect(stepID, "\(flowName)/root", "popToRoot")
        case .dismiss: connect(stepID, "\(flowName)/root", "dismiss")
        case .forwardToCurrent(let step): connect(stepID, "\(flowName).\(step)", "forward")
        case .forwardToParent(let step):
            add(Node(id: "parent.\(step)", label: "parent: \(step)", shape: .flow))
            connect(stepID, "parent.\(step)", "forward to parent")
        case .end(let step):
            add(Node(id: "parent.\(step)", label: "parent: \(step)", shape: .flow))
            connect(stepID, "parent.\(step)", "end")
        case .none: break
        }
    }

    /// flowd's live navigation trees, from its status: containers hold their children; hidden
    /// presentables are dimmed.
    public static func live(_ status: WireParams) -> FlowGraph {
        var graph = FlowGraph()
        for flow in status["flows"]?.listValue ?? [] {
            guard let flow = flow.mapValue, let flowID = flow["id"]?.stringValue, let root = flow["root"] else {
                continue
            }
            graph.drawTree(root, group: flowID, parent: nil)
        }
        return graph
    }

    private mutating func drawTree(_ value: WireValue, group: String, parent: String?, verb: String = "") {
        guard let node = value.mapValue, let id = node["id"]?.stringValue else { return }
        let kind = node["kind"]?.stringValue ?? "screen"
        let nodeID = "\(group):\(id)"
        let shape: Shape = kind == "screen" ? .screen : .container
        add(
            Node(
                id: nodeID, label: "\(kind) \(id)", shape: shape, group: group,
                dimmed: node["visible"]?.boolValue != true))
        if let parent { connect(parent, nodeID, verb) }
        if let child = node["flow"]?.stringValue {
            // The child flow's tree is drawn in its own cluster, rooted at this same presentable.
            connect(nodeID, "\(child):\(id)", "flow \(child)")
        }
        for childNode in node["children"]?.listValue ?? [] { drawTree(childNode, group: group, parent: nodeID) }
        if let presented = node["presented"] { drawTree(presented, group: group, parent: nodeID, verb: "presents") }
    }

    /// Graphviz DOT.
    public var dot: String {
        func quote(_ text: String) -> String { "\"" + text.replacingOccurrences(of: "\"", with: "\\\"") + "\"" }
        func attributes(_ node: Node) -> String {
            let shape =
                switch node.shape {
                case .step: "ellipse"
                case .screen: "box"
                case .container: "box3d"
                case .flow: "octagon"
                }
            return "[label=\(quote(node.label)), shape=\(shape)\(node.dimmed ? ", style=dashed, fontcolor=gray" : "")]"
        }
        var lines = ["digraph flowbus {", "  rankdir=LR;", "  node [fontname=Helvetica];"]
        let groups = Dictionary(grouping: nodes, by: \.group)
        for group in groups.keys.compactMap({ $0 }).sorted() {
            lines.append("  subgraph \(quote("cluster_" + group)) {")
            lines.append("    label=\(quote(group));")
            for node in groups[group] ?? [] { lines.append("    \(quote(node.id)) \(attributes(node));") }
            lines.append("  }")
        }
        for node in groups[nil] ?? [] { lines.append("  \(quote(node.id)) \(attributes(node));") }
        for edge in edges {
            lines.append(
                "  \(quote(edge.from)) -> \(quote(edge.to))\(edge.label.isEmpty ? "" : " [label=\(quote(edge.label))]");"
            )
        }
        lines.append("}")
        return lines.joined(separator: "\n")
    }

    /// A Mermaid flowchart.
    public var mermaid: String {
        var ids: [String: String] = [:]
        for (index, node) in nodes.enumerated() { ids[node.id] = "n\(index)" }
        func name(_ id: String) -> String {
            ids[id] ?? "x_" + id.map { $0.isLetter || $0.isNumber ? String($0) : "_" }.joined()
        }
        func box(_ node: Node) -> String {
            let label =
                "\""
                + node.label.replacingOccurrences(of: "\\n", with: "<br/>").replacingOccurrences(of: "\"", with: "'")
                + "\""
            return switch node.shape {
            case .step: "\(name(node.id))([\(label)])"
            case .screen: "\(name(node.id))[\(label)]"
            case .container: "\(name(node.id))[[\(label)]]"
            case .flow: "\(name(node.id)){{\(label)}}"
            }
        }
        var lines = ["flowchart LR"]
        let groups = Dictionary(grouping: nodes, by: \.group)
        for group in groups.keys.compactMap({ $0 }).sorted() {
            lines.append(
                "  subgraph \(group.map { $0.isLetter || $0.isNumber ? String($0) : "_" }.joined())[\"\(group)\"]")
            for node in groups[group] ?? [] { lines.append("    \(box(node))") }
            lines.append("  end")
        }
        for node in groups[nil] ?? [] { lines.append("  \(box(node))") }
        for edge in edges {
            lines.append("  \(name(edge.from)) -->\(edge.label.isEmpty ? "" : "|\"\(edge.label)\"|") \(name(edge.to))")
        }
        let dimmed = nodes.filter(\.dimmed).map { name($0.id) }
        if !dimmed.isEmpty {
            lines += [
                "  classDef hidden stroke-dasharray: 4 4,color:#888;",
                "  class \(dimmed.joined(separator: ",")) hidden;",
            ]
        }
        return lines.joined(separator: "\n")
    }
}
