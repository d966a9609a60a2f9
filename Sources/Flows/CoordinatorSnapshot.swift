import FlowBusWire

/// Per-stepper counters for the status query.
public struct StepperCounters: Sendable, Hashable {
    /// Steps that reached `navigate(to:)`.
    public var accepted = 0
    /// Steps dropped, by reason.
    public var dropped: [DiagnosticReason: Int] = [:]

    /// Creates zero counters.
    public init() {}

    /// All dropped steps.
    public var droppedTotal: Int { dropped.values.reduce(0, +) }

    /// Adds `other`'s counts to these.
    mutating func add(_ other: StepperCounters) {
        accepted += other.accepted
        dropped.merge(other.dropped, uniquingKeysWith: +)
    }
}

/// One node of a flow's tree in a snapshot.
public struct NodeSnapshot: Sendable, Hashable {
    /// Presentable id.
    public var id: String
    /// Kind.
    public var kind: PresentableKind
    /// Placement.
    public var placement: NodePlacement
    /// Effective visibility (tree + renderer reports).
    public var isVisible: Bool
    /// What a renderer last reported, if anything.
    public var reportedVisibility: Bool?
    /// Selected tab index, for tab bars.
    public var selectedIndex: Int?
    /// Stack items or tabs.
    public var children: [NodeSnapshot]
    /// When this node is the root of another (child) flow: that flow; its subtree is in that
    /// flow's own snapshot and ``children`` is empty.
    public var childFlow: FlowID?
    var presentedStorage: [NodeSnapshot]

    /// The modal this node presents.
    public var presented: NodeSnapshot? { presentedStorage.first }
}

/// A coordinated flow in a snapshot.
public struct FlowSnapshot: Sendable, Hashable {
    /// The flow.
    public var id: FlowID
    /// Its parent flow.
    public var parent: FlowID?
    /// Its child flows, in creation order.
    public var children: [FlowID]
    /// Whether it is ready.
    public var isReady: Bool
    /// Whether it survives its root's dismissal.
    public var allowStepWhenDismissed: Bool
    /// Its live tree, cut at child flows' roots.
    public var root: NodeSnapshot
}

/// Which entries of a list a snapshot takes: those whose id starts with ``prefix``, ``limit`` of
/// them from ``offset``, in the list's order (flows in pre-order; bindings by stepper id, then
/// flow; stepper ids sorted).
public struct SnapshotWindow: Sendable, Hashable {
    public var offset: Int
    public var limit: Int
    /// Of a flow's id (`Name#instance`), or of a binding's stepper id.
    public var prefix: String?

    public init(offset: Int = 0, limit: Int = .max, prefix: String? = nil) {
        self.offset = offset
        self.limit = limit
        self.prefix = prefix
    }

    func admits(_ id: String) -> Bool {
        prefix.map(id.hasPrefix) ?? true
    }

    /// Whether the `index`th matching entry is in the window.
    func lists(_ index: Int) -> Bool {
        index >= offset && index - offset < limit
    }
}

/// The answer to a status query: flows and their trees, bindings, counters.
public struct CoordinatorSnapshot: Sendable, Hashable {
    /// Active flows, pre-order (parents before children, siblings in creation order).
    public var flows: [FlowSnapshot]
    /// Active bindings.
    public var bindings: [BindingInfo]
    /// Counters of currently bound stepper ids.
    public var steppers: [String: StepperCounters]
    /// Counters over all steppers, including unbound ids and bindings gone.
    public var totals: StepperCounters
    /// Steps waiting in the queue.
    public var queuedSteps: Int
    /// How many flows, bindings and bound stepper ids there are; a snapshot taken with a limit
    /// lists only some of them.
    public var flowCount = 0
    public var bindingCount = 0
    public var stepperCount = 0
    /// How many of them a window's prefix admits: what its pages go through.
    public var flowsMatching = 0
    public var bindingsMatching = 0
    public var steppersMatching = 0

    /// The snapshot of one flow.
    public func flow(_ id: FlowID) -> FlowSnapshot? { flows.first { $0.id == id } }
}
