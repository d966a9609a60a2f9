#if Studio
import FlowBusWire

/// A navigation tree rebuilt from navigation commands alone, as a renderer would keep it: what a
/// recording (which holds no status replies) shows at each point of its time line.
///
/// It follows the verbs of PROTOCOL.md §4.3 (NAVIGATION-COMMAND). Visibility is derived the way
/// flowd derives it: a window root is displayed; a stack shows its top item, a tab bar its
/// selected tab; a node that presents another is covered by it.
public struct NavigationReplay: Sendable, Hashable {
    struct Node: Sendable, Hashable {
        var kind: String
        var children: [String] = []
        var selected: Int?
        var presented: String?
    }

    private var nodes: [String: Node] = [:]
    private var windows: [String] = []
    /// Node ids in the order first seen, so that roots are drawn in a stable order.
    private var order: [String] = []

    public init() {}

    /// Applies one command. Commands about unknown containers create them, so a recording that
    /// starts after flowd did still draws what it saw.
    public mutating func apply(_ command: NavigationCommandMessage) {
        let target = command.target
        let container = command.container ?? ""
        let kind = command.presentableKind?.rawValue ?? "screen"
        func ensure(_ id: String, kind: String) {
            guard nodes[id] == nil else { return }
            nodes[id] = Node(kind: kind)
            order.append(id)
        }
        switch command.verb {
        case .setRoot:
            ensure(target, kind: kind)
            if container.isEmpty {
                if !windows.contains(target) { windows.append(target) }
            } else {
                ensure(container, kind: "stack")
                nodes[container]?.children = [target]
            }
        case .push:
            ensure(target, kind: kind)
            ensure(container, kind: "stack")
            nodes[container]?.children.removeAll { $0 == target }
            nodes[container]?.children.append(target)
        case .pop:
            guard let index = nodes[container]?.children.firstIndex(of: target) else { return }
            nodes[container]?.children.removeSubrange(index...)
        case .present:
            ensure(target, kind: kind)
            ensure(container, kind: "screen")
            nodes[container]?.presented = target
        case .dismiss:
            if container.isEmpty {
                windows.removeAll { $0 == target }
            } else if nodes[container]?.presented == target {
                nodes[container]?.presented = nil
            }
        case .setTabs:
            ensure(target, kind: "tabs")
            let items = container.split(separator: ",").map(String.init)
            for item in items { ensure(item, kind: "stack") }
            nodes[target]?.children = items
            nodes[target]?.selected = items.isEmpty ? nil : 0
        case .selectTab:
            guard let index = nodes[container]?.children.firstIndex(of: target) else { return }
            nodes[container]?.selected = index
        case .end:
            break
        }
    }

    /// The tree in the shape of a status reply's `flows` (one pseudo-flow per window), so that a
    /// page draws a replayed tree and a live one alike.
    public var flows: WireValue {
        // A recording started after flowd did has no setRoot of the window: nodes that nothing
        // contains are drawn as windows then.
        var contained = Set<String>()
        for node in nodes.values {
            contained.formUnion(node.children)
            if let presented = node.presented { contained.insert(presented) }
        }
        let roots = windows + order.filter { !contained.contains($0) && !windows.contains($0) }
        return .list(
            roots.map { window in
                .map(["id": .string(window), "name": .string(window), "root": tree(window, visible: true, depth: 0)])
            })
    }

    private func tree(_ id: String, visible: Bool, depth: Int) -> WireValue {
        guard let node = nodes[id], depth < 64 else {
            return .map(["id": .string(id), "kind": "screen", "visible": false, "children": []])
        }
        let covered = node.presented != nil
        var map: WireParams = ["id": .string(id), "kind": .string(node.kind), "visible": .bool(visible && !covered)]
        map["children"] = .list(
            node.children.enumerated().map { index, child in
                let shown: Bool
                switch node.kind {
                case "tabs": shown = index == (node.selected ?? 0)
                default: shown = index == node.children.count - 1
                }
                return tree(child, visible: visible && !covered && shown, depth: depth + 1)
            })
        if let selected = node.selected { map["selected"] = .int(Int64(selected)) }
        if let presented = node.presented { map["presented"] = tree(presented, visible: visible, depth: depth + 1) }
        return .map(map)
    }
}
#endif
