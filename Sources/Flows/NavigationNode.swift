import FlowBusWire

/// A node of the headless navigation tree: a ``Screen``, a ``NavigationStack`` or a ``TabBar``.
///
/// The tree replaces UIKit's view-controller hierarchy. Flows change it from
/// ``Flow/navigate(to:)`` with the operations below; each operation records a
/// ``NavigationCommand`` for renderers. Parents hold children strongly, children refer to
/// their container weakly; a removed node is dismissed (terminal) and lets its subtree go.
///
/// ## Visibility
/// A node is visible iff, in order:
/// 1. it is not dismissed (dismissed is terminal: never visible again);
/// 2. if a renderer has reported `appeared` or `disappeared` for its id, the latest such
///    report decides (per node: a report about a container does not change its children);
/// 3. otherwise it is on the *displayed path* of a window: start at the window root, step into
///    the top item of a stack or the selected tab of a tab bar; whenever a node on the way
///    presents a modal, everything collected so far is covered and the walk continues in the
///    modal. The nodes of the last, uncovered stretch are visible.
///
/// A node in no window (never inserted, or in a subtree not attached yet) is not visible —
/// RxFlow's "visibility not known yet", under which steps are dropped.
@FlowActor
open class NavigationNode: Presentable {
    // Stored in this order, the one-byte fields last: a coordinator holds a node per screen,
    // and padding between fields would cost a heap size class.

    /// The presentable id, unique within a coordinator by convention (e.g. `wishlist/movie/23452`).
    public nonisolated let presentableID: String
    /// The stack, tab bar or presenter this node sits in (`nil` for windows and detached nodes).
    public internal(set) weak var container: NavigationNode?
    /// The modal this node presents, if any.
    public internal(set) var presented: NavigationNode?
    var children: [NavigationNode] = []
    /// The coordinator whose tree holds this node. (Which flow a node is the root of, the
    /// coordinator keeps: most nodes are roots of none.)
    weak var host: FlowCoordinator?
    /// What the node is.
    public nonisolated let kind: PresentableKind
    /// Where this node sits.
    public internal(set) var placement: NodePlacement = .detached
    /// Dismissed: popped, dismissed, replaced, or reported dismissed. Terminal.
    public internal(set) var isDismissed = false
    /// The visibility a renderer last reported (`nil`: never reported, the tree decides).
    public internal(set) var reportedVisibility: Bool?

    init(id: String, kind: PresentableKind) {
        self.presentableID = id
        self.kind = kind
    }

    /// The node itself.
    public var navigationNode: NavigationNode { self }

    /// A tab bar's selected tab; nil for other nodes, which keep no room for one.
    var selected: Int? {
        get { (self as? TabBar)?.selectedTab }
        set { (self as? TabBar)?.selectedTab = newValue }
    }

    /// Whether the node is displayed now (see the type's documentation for the rule).
    public var isVisible: Bool {
        if isDismissed { return false }
        if let reportedVisibility { return reportedVisibility }
        return isOnDisplayedPath
    }

    /// Whether the tree alone (ignoring renderer reports) puts this node on screen.
    public var isOnDisplayedPath: Bool {
        if isDismissed { return false }
        var top = self
        while let container = top.container { top = container }
        guard top.placement == .window else { return false }
        return NavigationNode.displayedLayer(from: top).contains { $0 === self }
    }

    /// The node displayed inside this one: a stack's top, a tab bar's selected tab.
    var displayedChild: NavigationNode? {
        switch kind {
        case .screen, .flow: return nil
        case .stack: return children.last
        case .tabs:
            guard let selected, children.indices.contains(selected) else { return nil }
            return children[selected]
        }
    }

    /// The uncovered stretch of the displayed path starting at `root`.
    static func displayedLayer(from root: NavigationNode) -> [NavigationNode] {
        var layer: [NavigationNode] = []
        var next: NavigationNode? = root
        while let node = next {
            if let modal = node.presented {
                layer.removeAll()
                next = modal
                continue
            }
            layer.append(node)
            next = node.displayedChild
        }
        return layer
    }

    /// Where a modal presented from this node goes: on top of the topmost modal shown in this
    /// node's window (UIKit presents over everything on screen), else on this node itself.
    /// Outside a window: on top of this node's own chain of modals.
    var topmostPresenter: NavigationNode {
        var top = self
        while let container = top.container { top = container }
        if top.placement == .window {
            var lastModal: NavigationNode?
            var next: NavigationNode? = top
            while let node = next {
                if let modal = node.presented {
                    lastModal = modal
                    next = modal
                    continue
                }
                next = node.displayedChild
            }
            if let lastModal { return lastModal }
        }
        var node = self
        while let modal = node.presented { node = modal }
        return node
    }

    /// The whole subtree, pre-order: the node, its items/tabs, then its modal.
    var subtree: [NavigationNode] {
        var nodes = [self]
        for child in children { nodes += child.subtree }
        if let presented { nodes += presented.subtree }
        return nodes
    }

    // MARK: Operations

    /// Presents `presentable` modally: on top of the topmost modal already shown in this node's
    /// window, or by this node if none is. Records `present` (its `container` is the actual presenter).
    public func present(_ presentable: any Presentable) {
        let node = presentable.navigationNode
        let presenter = topmostPresenter
        guard presenter.canAdopt(node) else { return }
        presenter.presented = node
        let joined = presenter.adopt(node, placement: .modal)
        command(.present, target: node, container: presenter)
        announceContent(of: joined)
    }

    /// Dismisses the modal this node presents (and whatever that modal presents).
    /// Records `dismiss`; a flow-error diagnostic if nothing is presented.
    public func dismissPresented() {
        guard let modal = presented else {
            host?.navigationError("\(presentableID) presents nothing to dismiss", presentableID: presentableID)
            return
        }
        removeModal(emitCommand: true)
        _ = modal
    }

    /// Dismisses this node, UIKit style: a modal is dismissed from its presenter; a stack item
    /// is popped together with everything above it; a window is closed; a detached node is
    /// just marked dismissed. A tab cannot dismiss itself (use ``TabBar/setTabs(_:selected:)``).
    public func dismiss() {
        remove(emitCommands: true)
    }

    // MARK: Internals

    func remove(emitCommands: Bool) {
        guard !isDismissed else { return }
        switch placement {
        case .modal:
            container?.removeModal(emitCommand: emitCommands)
        case .stackItem:
            guard let stack = container, let index = stack.children.firstIndex(where: { $0 === self }) else { return }
            if index == 0 && emitCommands {
                host?.navigationError(
                    "cannot pop \(presentableID): it is the root of stack \(stack.presentableID)",
                    presentableID: presentableID)
                return
            }
            stack.removeItems(from: index, emitCommand: emitCommands)
        case .tab:
            guard let tabs = container, let index = tabs.children.firstIndex(where: { $0 === self }) else { return }
            if emitCommands {
                host?.navigationError(
                    "a tab cannot dismiss itself (\(presentableID)); use setTabs",
                    presentableID: presentableID)
                return
            }
            tabs.children.remove(at: index)
            if let selected = tabs.selected, selected >= tabs.children.count {
                tabs.selected = tabs.children.isEmpty ? nil : tabs.children.count - 1
            }
            discard([self])
        case .window:
            if emitCommands { command(.dismiss, target: self, container: nil) }
            discard([self])
        case .detached:
            discard([self])
        }
    }

    func removeModal(emitCommand: Bool) {
        guard let modal = presented else { return }
        presented = nil
        if emitCommand { command(.dismiss, target: modal, container: self) }
        discard([modal])
    }

    func removeItems(from index: Int, emitCommand: Bool) {
        let removed = Array(children[index...])
        children.removeSubrange(index...)
        if emitCommand, let first = removed.first {
            command(.pop, target: first, container: self, index: index)
        }
        discard(removed)
    }

    /// Marks the subtrees of `roots` dismissed, breaks their links, tells the host.
    func discard(_ roots: [NavigationNode]) {
        var all: [NavigationNode] = []
        for root in roots { all += root.subtree }
        guard !all.isEmpty else { return }
        let host = self.host ?? all.first?.host
        for node in all {
            node.isDismissed = true
        }
        for node in all {
            node.container = nil
            node.placement = .detached
            node.children.removeAll()
            node.presented = nil
            node.selected = nil
        }
        host?.navigationNodesDismissed(all)
    }

    /// Whether `node` may be inserted under this node; reports a flow-error if not.
    func canAdopt(_ node: NavigationNode) -> Bool {
        let problem: String?
        if node.isDismissed {
            problem = "\(node.presentableID) is dismissed and cannot be shown again"
        } else if node.placement != .detached {
            problem = "\(node.presentableID) is already in the tree (\(node.placement.rawValue))"
        } else if isDismissed {
            problem = "\(presentableID) is dismissed"
        } else {
            var ancestor: NavigationNode? = self
            var cycle = false
            while let current = ancestor {
                if current === node {
                    cycle = true
                    break
                }
                ancestor = current.container
            }
            problem = cycle ? "inserting \(node.presentableID) under \(presentableID) would make a cycle" : nil
        }
        if let problem {
            (host ?? node.host)?.navigationError(problem, presentableID: node.presentableID)
            return false
        }
        return true
    }

    /// Inserts `node` here.
    /// - Returns: the nodes of its subtree that joined this node's host (see ``attach(to:)``).
    func adopt(_ node: NavigationNode, placement: NodePlacement) -> [NavigationNode] {
        node.container = self
        node.placement = placement
        guard let host else { return [] }
        return node.attach(to: host)
    }

    /// Makes `host` the host of this subtree.
    /// - Returns: the nodes it did not host before, pre-order: their content was built without
    ///   a host, so no command told renderers about it. Announce it (``announceContent(of:)``)
    ///   once the command that inserts them is recorded.
    @discardableResult
    func attach(to host: FlowCoordinator) -> [NavigationNode] {
        var joined: [NavigationNode] = []
        for node in subtree where node.host !== host {
            node.host = host
            host.navigationNodeAttached(node)
            joined.append(node)
        }
        return joined
    }

    /// Records, for nodes that just joined a host, the commands that build what they already
    /// hold: a tab bar's `setTabs`, a stack's `setRoot` and `push`es, a `present` of their modal.
    /// A flow usually fills a container before showing it (RxFlow's tab bar is given its tabs,
    /// then pushed); the operations it did then recorded nothing, and a renderer must still learn
    /// every node the tree shows.
    func announceContent(of nodes: [NavigationNode]) {
        for node in nodes {
            if node.kind == .tabs, !node.children.isEmpty {
                node.command(
                    .setTabs, target: node, container: nil, index: node.selected,
                    items: node.children.map(\.presentableID))
            } else if node.kind == .stack {
                for (index, item) in node.children.enumerated() {
                    if index == 0 {
                        node.command(.setRoot, target: item, container: node, index: 0, items: [item.presentableID])
                    } else {
                        node.command(.push, target: item, container: node, index: index)
                    }
                }
            }
            if let modal = node.presented { node.command(.present, target: modal, container: node) }
        }
    }

    func command(
        _ verb: NavigationCommand.Verb, target: NavigationNode, container: NavigationNode?,
        index: Int? = nil, items: [String] = []
    ) {
        host?.navigationCommand(
            NavigationCommand(
                verb: verb, target: target.presentableID, kind: target.kind,
                container: container?.presentableID, index: index, items: items))
    }
}

/// A leaf of the tree: one screen (a view controller, in UIKit terms). Subclass it to make a
/// screen that is also a ``Stepper`` and contribute it with `.contribute(withNext:)`.
open class Screen: NavigationNode {
    /// Creates a screen.
    /// - Parameter id: its presentable id, e.g. `wishlist/movie/23452`.
    public init(id: String) {
        super.init(id: id, kind: .screen)
    }
}

/// A navigation stack: it displays its top item.
public final class NavigationStack: NavigationNode {
    /// Creates an empty stack.
    /// - Parameter id: its presentable id.
    public init(id: String) {
        super.init(id: id, kind: .stack)
    }

    /// The items, bottom first.
    public var items: [NavigationNode] { children }

    /// The top item, the displayed one.
    public var top: NavigationNode? { children.last }

    /// Pushes `presentable` (a screen, a container or a ``Flow``). Records `push`.
    public func push(_ presentable: any Presentable) {
        let node = presentable.navigationNode
        guard canAdopt(node) else { return }
        children.append(node)
        let joined = adopt(node, placement: .stackItem)
        command(.push, target: node, container: self, index: children.count - 1)
        announceContent(of: joined)
    }

    /// Pops the top item (dismissing it). Records `pop`; a flow-error diagnostic when only the
    /// root is left.
    public func pop() {
        guard children.count > 1 else {
            host?.navigationError("stack \(presentableID) has nothing to pop", presentableID: presentableID)
            return
        }
        removeItems(from: children.count - 1, emitCommand: true)
    }

    /// Pops everything above the root item. Records one `pop` (of the lowest popped item).
    public func popToRoot() {
        guard children.count > 1 else { return }
        removeItems(from: 1, emitCommand: true)
    }

    /// Replaces all items with `presentable` (the old ones are dismissed). Records `setRoot`.
    public func setRoot(_ presentable: any Presentable) {
        let node = presentable.navigationNode
        let old = children.filter { $0 !== node }
        if children.contains(where: { $0 === node }) {
            children.removeAll { $0 === node }
            node.container = nil
            node.placement = .detached
        }
        guard canAdopt(node) else { return }
        children = [node]
        let joined = adopt(node, placement: .stackItem)
        command(.setRoot, target: node, container: self, index: 0, items: [node.presentableID])
        announceContent(of: joined)
        discard(old)
    }
}

/// A tab bar: it displays its selected tab. Tabs are usually child ``Flow``s.
public final class TabBar: NavigationNode {
    /// See ``NavigationNode/selected``.
    fileprivate var selectedTab: Int?

    /// Creates an empty tab bar.
    /// - Parameter id: its presentable id.
    public init(id: String) {
        super.init(id: id, kind: .tabs)
    }

    /// The tabs, in order.
    public var tabs: [NavigationNode] { children }

    /// The selected tab's index.
    public var selectedIndex: Int? { selected }

    /// Sets the tabs (old tabs not in the new list are dismissed) and selects one.
    /// Records `setTabs`.
    public func setTabs(_ presentables: [any Presentable], selected index: Int = 0) {
        let nodes = presentables.map(\.navigationNode)
        let kept = children.filter { old in nodes.contains { $0 === old } }
        let old = children.filter { old in !nodes.contains { $0 === old } }
        for node in kept {
            node.container = nil
            node.placement = .detached
        }
        children = []
        var accepted: [NavigationNode] = []
        var joined: [NavigationNode] = []
        for node in nodes where canAdopt(node) {
            accepted.append(node)
            children.append(node)
            joined += adopt(node, placement: .tab)
        }
        selected = accepted.isEmpty ? nil : min(max(index, 0), accepted.count - 1)
        command(.setTabs, target: self, container: nil, index: selected, items: accepted.map(\.presentableID))
        announceContent(of: joined)
        discard(old)
    }

    /// Selects tab `index`. Records `selectTab`; a flow-error diagnostic if out of range.
    public func select(_ index: Int) {
        guard children.indices.contains(index) else {
            host?.navigationError("tab bar \(presentableID) has no tab \(index)", presentableID: presentableID)
            return
        }
        selected = index
        command(.selectTab, target: children[index], container: self, index: index)
    }

    /// Selects the tab showing `presentable`.
    public func select(_ presentable: any Presentable) {
        let node = presentable.navigationNode
        guard let index = children.firstIndex(where: { $0 === node }) else {
            host?.navigationError(
                "\(node.presentableID) is not a tab of \(presentableID)", presentableID: presentableID)
            return
        }
        select(index)
    }
}
