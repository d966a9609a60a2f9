import FlowBusWire

/// Something that can be displayed: a node of the coordinator's navigation tree, or a
/// ``Flow`` (whose visibility is its root's).
///
/// Visibility is never stored by the presentable: it is derived from the tree (see
/// ``NavigationNode/isVisible``) and may be overridden by renderer reports.
@FlowActor
public protocol Presentable: AnyObject, Sendable {
    /// The node that stands for this presentable in the navigation tree.
    var navigationNode: NavigationNode { get }
}

extension Presentable {
    /// The presentable id (e.g. `movie/23452`) of the underlying node.
    public var presentableID: String { navigationNode.presentableID }

    /// Whether the presentable is displayed now (see ``NavigationNode/isVisible``).
    public var isVisible: Bool { navigationNode.isVisible }

    /// Whether the presentable has been dismissed (terminal).
    public var isDismissed: Bool { navigationNode.isDismissed }
}
