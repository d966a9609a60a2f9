import FlowBusWire

/// Where a node sits in the navigation tree.
public enum NodePlacement: String, Sendable, Hashable, CaseIterable {
    /// Not in any tree (never inserted, or removed).
    case detached
    /// The root of a top-level flow: a window, displayed.
    case window
    /// An item of a ``NavigationStack``.
    case stackItem
    /// A tab of a ``TabBar``.
    case tab
    /// Presented modally by another node.
    case modal
}

/// One change of the navigation tree, published for renderer processes.
///
/// Every tree operation on a node of a coordinator's tree (``NavigationStack/push(_:)``,
/// ``NavigationNode/present(_:)``, …) records exactly one command, emitted as
/// ``CoordinatorEvent/command(_:)`` at the moment the operation happens (so between the
/// `willNavigate` and `didNavigate` of the step whose `navigate(to:)` called it). Operations on
/// a node the coordinator does not hold yet (built before it is shown) record nothing; when it
/// joins the tree, what it holds is announced right after the command that inserted it: a tab
/// bar given its tabs, then pushed, yields `push`, then `setTabs`; a stack's items yield
/// `setRoot` and `push`es; a modal it presents, `present`.
public struct NavigationCommand: Sendable, Hashable, CustomStringConvertible {
    /// The operation.
    public enum Verb: String, Sendable, Hashable, CaseIterable {
        /// `target` becomes the only item of stack `container`, or (no container) the root of a window.
        case setRoot
        /// `target` is pushed on stack `container`.
        case push
        /// `target` (and anything above it) is popped from stack `container`.
        case pop
        /// `target` is presented modally by `container`.
        case present
        /// Modal `target` is dismissed from `container` (or window `target` is closed).
        case dismiss
        /// Tab bar `target` shows `items`, `index` selected.
        case setTabs
        /// Tab `index` (`target`) of tab bar `container` is selected.
        case selectTab
        /// The flow `flow` rooted at `target` has ended; renderers may drop what belongs to it.
        case end
    }

    /// The operation.
    public var verb: Verb
    /// The presentable id the operation is about.
    public var target: String
    /// The target's kind.
    public var kind: PresentableKind
    /// The container (stack, tab bar, presenter) the operation happens in; `nil` for windows.
    public var container: String?
    /// A position (stack index, tab index) when it matters.
    public var index: Int?
    /// The item ids, for ``Verb/setTabs`` and ``Verb/setRoot`` of a stack.
    public var items: [String]
    /// The flow whose navigation issued the command (or, for ``Verb/end``, the ended flow).
    public var flow: FlowID?

    /// Creates a command.
    public init(
        verb: Verb, target: String, kind: PresentableKind, container: String? = nil,
        index: Int? = nil, items: [String] = [], flow: FlowID? = nil
    ) {
        self.verb = verb
        self.target = target
        self.kind = kind
        self.container = container
        self.index = index
        self.items = items
        self.flow = flow
    }

    /// `push movie/1 (screen) in wishlist` style text.
    public var description: String {
        var text = "\(verb.rawValue) \(target) (\(kind.rawValue))"
        if let container { text += " in \(container)" }
        if let index { text += " at \(index)" }
        if !items.isEmpty { text += " [" + items.joined(separator: ", ") + "]" }
        return text
    }
}

/// What a renderer process says about a presentable it shows.
public enum RendererReport: String, Sendable, Hashable, CaseIterable {
    /// It is on screen.
    case appeared
    /// It is off screen (but not gone).
    case disappeared
    /// It is gone for good (e.g. the user swiped back). Terminal.
    case dismissed
}
