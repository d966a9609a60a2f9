import FlowBusWire

/// A flow whose whole state is its navigation tree and which can be built again from its name:
/// a coordinator running only such flows can write a ``CoordinatorCheckpoint`` and restore it
/// instead of replaying every step since it started. Flows built from a config's `flows:`
/// table are; a Swift flow holding other state must not conform.
@FlowActor
public protocol CheckpointableFlow: Flow {}

/// The coordinator's state at one point: its flows, their trees, the bindings and the
/// counters — everything the steps applied so far built.
///
/// ``FlowCoordinator/checkpoint()`` takes it between inputs; ``FlowCoordinator/restore(_:makeFlow:)``
/// rebuilds an identical coordinator from it: the same later inputs then produce the same
/// events. In-process steppers are restored as spent ones of the same type: only ``RemoteStepper``s and the
/// one-shot steppers (``OneStepper``, ``DefaultStepper``, ``NoneStepper``), which have nothing
/// left to emit once bound, may be bound when a checkpoint is taken.
public struct CoordinatorCheckpoint: Codable, Sendable, Hashable {
    /// The layout of this structure; a coordinator refuses another.
    public static let currentFormat = 1

    struct Flow: Codable, Hashable {
        var name: String
        var instance: Int
        var parent: Int?
        var children: [Int]
        var allowStepWhenDismissed: Bool
        var isReady: Bool
        /// Groups of child flows (indices into `flows`) whose readiness makes this one ready; -1
        /// for a member no longer coordinated, which keeps its group from ever being complete.
        var readinessGroups: [[Int]]
        var bindings: [Int]
        var root: Int

        // Short keys: a large tree has hundreds of thousands of nodes and bindings.
        enum CodingKeys: String, CodingKey {
            case name = "n"
            case instance = "i"
            case parent = "p"
            case children = "c"
            case allowStepWhenDismissed = "d"
            case isReady = "r"
            case readinessGroups = "g"
            case bindings = "b"
            case root = "o"
        }
    }

    struct Node: Codable, Hashable {
        var id: String
        var kind: String
        var placement: String
        var isDismissed: Bool
        var reportedVisibility: Bool?
        var selected: Int?
        var children: [Int]
        var presented: Int?
        /// The flow (index into `flows`) this node is the root of.
        var rootOf: Int?
        /// Whether the node was ever attached to the coordinator (a node bound but never shown was not).
        var hosted: Bool

        enum CodingKeys: String, CodingKey {
            case id = "i"
            case kind = "k"
            case placement = "p"
            case isDismissed = "d"
            case reportedVisibility = "v"
            case selected = "s"
            case children = "c"
            case presented = "m"
            case rootOf = "r"
            case hosted = "h"
        }
    }

    struct Binding: Codable, Hashable {
        var stepper: String
        var remote: Bool
        /// The type of an in-process stepper (`OneStepper`, `DefaultStepper`, `NoneStepper`).
        var type: String?
        var flow: Int
        var node: Int
        var role: String
        var allowStepWhenNotPresented: Bool
        var allowStepWhenDismissed: Bool

        enum CodingKeys: String, CodingKey {
            case stepper = "s"
            case remote = "x"
            case type = "t"
            case flow = "f"
            case node = "n"
            case role = "r"
            case allowStepWhenNotPresented = "p"
            case allowStepWhenDismissed = "d"
        }
    }

    struct Counters: Codable, Hashable {
        var accepted: Int
        var dropped: [String: Int]
    }

    struct Tombstone: Codable, Hashable {
        var stepper: String
        var flowName: String
        var flowInstance: Int
        var presentableID: String
        var role: String
        var allowStepWhenNotPresented: Bool
        var allowStepWhenDismissed: Bool
        var remote: Bool
    }

    var format = Self.currentFormat
    var flows: [Flow] = []
    var roots: [Int] = []
    var nodes: [Node] = []
    var bindings: [Binding] = []
    /// The bindings of each stepper id, in the order steps reach them.
    var bindingsByStepper: [String: [Int]] = [:]
    var stepperCounters: [String: Counters] = [:]
    var totals = Counters(accepted: 0, dropped: [:])
    var instanceCounters: [String: Int] = [:]
    var tombstones: [Tombstone] = []
    /// Live nodes per presentable id, in the order renderer reports reach them.
    var nodesByID: [String: [Int]] = [:]

    /// How many flows, nodes and bindings it holds.
    public var summary: (flows: Int, nodes: Int, bindings: Int) { (flows.count, nodes.count, bindings.count) }
}

/// Why a coordinator cannot write or restore a checkpoint.
///
/// ``code`` says what went wrong, so that a caller can match it (`error.code == .unsupportedFormat`);
/// ``description`` says it for a person. New codes do not break callers.
public struct CheckpointError: Error, CustomStringConvertible, Sendable, Hashable {
    /// What went wrong.
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        private enum Value: String {
            case obstructed
            case coordinatorNotNew = "coordinator-not-new"
            case unsupportedFormat = "unsupported-format"
            case configMismatch = "config-mismatch"
            case inconsistent
        }

        private let value: Value

        private init(_ value: Value) {
            self.value = value
        }

        /// No checkpoint can be taken now: ``FlowCoordinator/checkpointObstacle`` says why (steps
        /// under way, or a flow or stepper whose state a checkpoint cannot hold).
        public static let obstructed = Code(.obstructed)
        /// The coordinator to restore into already coordinates flows: restore into a new one.
        public static let coordinatorNotNew = Code(.coordinatorNotNew)
        /// The checkpoint's layout is not ``CoordinatorCheckpoint/currentFormat``: it was written by
        /// another version.
        public static let unsupportedFormat = Code(.unsupportedFormat)
        /// The checkpoint names a flow the config does not declare, or a flow whose root differs
        /// from the config's: the config changed since it was taken.
        public static let configMismatch = Code(.configMismatch)
        /// The checkpoint contradicts itself (links outside, values no build knows): it is damaged.
        public static let inconsistent = Code(.inconsistent)

        public var description: String { value.rawValue }
    }

    /// What went wrong, to match.
    public var code: Code
    /// What went wrong, in words.
    public var description: String

    init(_ code: Code, _ description: String) {
        self.code = code
        self.description = description
    }
}

extension FlowCoordinator {
    /// Why ``checkpoint()`` cannot be taken now, nil if it can.
    public var checkpointObstacle: String? {
        if !queue.isEmpty || isPumping || collected != nil || !pendingDismissals.isEmpty {
            return "steps are being processed"
        }
        if !readyCallbacks.isEmpty { return "flow-readiness callbacks are pending" }
        for record in recordsByID.values where !(record.flow is any CheckpointableFlow) {
            return "flow \(record.id) (\(type(of: record.flow))) is not a CheckpointableFlow"
        }
        for slot in steppers.values {
            for binding in slot {
                guard let stepper = binding.stepper, !Self.isRestorable(stepper) else { continue }
                return "stepper \(binding.stepperID) (\(type(of: stepper))) holds in-process state"
            }
        }
        return nil
    }

    private static func isRestorable(_ stepper: any Stepper) -> Bool {
        stepper is OneStepper || stepper is DefaultStepper || stepper is NoneStepper
    }

    /// The state now, between two inputs.
    /// - Throws: ``CheckpointError`` (``CheckpointError/Code/obstructed``) naming the
    ///   ``checkpointObstacle``.
    public func checkpoint() throws(CheckpointError) -> CoordinatorCheckpoint {
        if let obstacle = checkpointObstacle {
            throw CheckpointError(.obstructed, "no checkpoint can be taken: \(obstacle)")
        }
        var checkpoint = CoordinatorCheckpoint()
        var flowIndex: [ObjectIdentifier: Int] = [:]
        var nodeIndex: [ObjectIdentifier: Int] = [:]
        var bindingIndex: [ObjectIdentifier: Int] = [:]

        // Nodes are numbered as they are met; their links are filled in once all are numbered.
        var pendingNodes: [NavigationNode] = []
        func number(_ node: NavigationNode) -> Int {
            if let index = nodeIndex[ObjectIdentifier(node)] { return index }
            let index = checkpoint.nodes.count
            nodeIndex[ObjectIdentifier(node)] = index
            checkpoint.nodes.append(
                CoordinatorCheckpoint.Node(
                    id: node.presentableID, kind: node.kind.rawValue, placement: node.placement.rawValue,
                    isDismissed: node.isDismissed, reportedVisibility: node.reportedVisibility, selected: node.selected,
                    children: [], presented: nil, rootOf: nil, hosted: node.host != nil))
            pendingNodes.append(node)
            return index
        }

        func visit(_ record: FlowRecord, parent: Int?) {
            let index = checkpoint.flows.count
            flowIndex[ObjectIdentifier(record)] = index
            checkpoint.flows.append(
                CoordinatorCheckpoint.Flow(
                    name: record.id.name, instance: record.id.instance, parent: parent, children: [],
                    allowStepWhenDismissed: record.allowStepWhenDismissed, isReady: record.isReady, readinessGroups: [],
                    bindings: [], root: -1))
            let children = record.children.map { child -> Int in
                let childIndex = checkpoint.flows.count
                visit(child, parent: index)
                return childIndex
            }
            checkpoint.flows[index].children = children
        }
        for root in roots {
            checkpoint.roots.append(checkpoint.flows.count)
            visit(root, parent: nil)
        }
        // Records by index, to fill in what refers to other records.
        var records = [FlowRecord?](repeating: nil, count: checkpoint.flows.count)
        for record in recordsByID.values {
            guard let index = flowIndex[ObjectIdentifier(record)] else { continue }
            records[index] = record
        }
        for (index, record) in records.enumerated() {
            guard let record else { continue }
            let root = number(record.flow.navigationNode)
            checkpoint.flows[index].root = root
            checkpoint.nodes[root].rootOf = index
            checkpoint.flows[index].readinessGroups = record.readinessGroups.map { group in
                group.map { recordsByObject[$0].flatMap { flowIndex[ObjectIdentifier($0)] } ?? -1 }
            }
        }

        for (stepperID, slot) in steppers.sorted(by: { $0.key < $1.key }) {
            var indices: [Int] = []
            for binding in slot {
                guard let flow = binding.flow, let flowPosition = flowIndex[ObjectIdentifier(flow)] else { continue }
                let bindingPosition = checkpoint.bindings.count
                bindingIndex[ObjectIdentifier(binding)] = bindingPosition
                checkpoint.bindings.append(
                    CoordinatorCheckpoint.Binding(
                        stepper: stepperID, remote: binding.isRemote,
                        type: binding.stepper.map { "\(type(of: $0))" }, flow: flowPosition,
                        node: number(binding.node),
                        role: binding.role.rawValue,
                        allowStepWhenNotPresented: binding.allowStepWhenNotPresented,
                        allowStepWhenDismissed: binding.allowStepWhenDismissed))
                indices.append(bindingPosition)
            }
            checkpoint.bindingsByStepper[stepperID] = indices
        }
        for (index, record) in records.enumerated() {
            checkpoint.flows[index].bindings = record?.bindings.compactMap { bindingIndex[ObjectIdentifier($0)] } ?? []
        }

        // Links last: every node reachable from a flow root or a binding is numbered on the way.
        var position = 0
        while position < pendingNodes.count {
            let node = pendingNodes[position]
            let nodePosition = nodeIndex[ObjectIdentifier(node)]!
            let children = node.children.map { number($0) }
            let presented = node.presented.map { number($0) }
            checkpoint.nodes[nodePosition].children = children
            checkpoint.nodes[nodePosition].presented = presented
            position += 1
        }
        for (presentableID, entries) in nodesByID ?? [:] {
            let indices = entries.compactMap { nodeIndex[ObjectIdentifier($0)] }
            if !indices.isEmpty { checkpoint.nodesByID[presentableID] = indices }
        }

        checkpoint.stepperCounters = steppers.mapValues { .init($0.counters) }
        checkpoint.totals = .init(totals)
        checkpoint.instanceCounters = instanceCounters
        checkpoint.tombstones = tombstoneOrder.compactMap { stepperID in
            tombstones[stepperID].map {
                CoordinatorCheckpoint.Tombstone(
                    stepper: stepperID, flowName: $0.flow.name, flowInstance: $0.flow.instance,
                    presentableID: $0.presentableID, role: $0.role.rawValue,
                    allowStepWhenNotPresented: $0.allowStepWhenNotPresented,
                    allowStepWhenDismissed: $0.allowStepWhenDismissed, remote: $0.isRemote)
            }
        }
        return checkpoint
    }

    /// Rebuilds the state `checkpoint` holds, silently (no event is emitted: they were when the
    /// steps first happened). The coordinator must be new.
    /// - Parameter makeFlow: builds a fresh flow by name, as the config declares it; its root
    ///   node (id and kind) must be the one the checkpoint has.
    /// - Throws: ``CheckpointError`` when the checkpoint does not fit the flows `makeFlow` builds;
    ///   the coordinator must then be discarded.
    public func restore(
        _ checkpoint: CoordinatorCheckpoint, makeFlow: (String) -> (any Flow)?
    ) throws(CheckpointError) {
        guard roots.isEmpty, recordsByID.isEmpty, steppers.isEmpty else {
            throw CheckpointError(.coordinatorNotNew, "a checkpoint can only be restored into a new coordinator")
        }
        guard checkpoint.format == CoordinatorCheckpoint.currentFormat else {
            throw CheckpointError(
                .unsupportedFormat,
                "checkpoint format \(checkpoint.format) is not \(CoordinatorCheckpoint.currentFormat)")
        }
        func check(_ condition: Bool, _ problem: @autoclosure () -> String) throws(CheckpointError) {
            if !condition { throw CheckpointError(.inconsistent, "the checkpoint is inconsistent: \(problem())") }
        }
        let nodeCount = checkpoint.nodes.count
        let flowCount = checkpoint.flows.count

        // Flows first: a node that roots a flow is that flow's own root node.
        var flows: [any Flow] = []
        for saved in checkpoint.flows {
            guard let flow = makeFlow(saved.name) else {
                throw CheckpointError(.configMismatch, "flow \(saved.name) is in the checkpoint but not in the config")
            }
            try check(saved.root >= 0 && saved.root < nodeCount, "flow \(saved.name) has no root node")
            let root = flow.navigationNode
            let savedRoot = checkpoint.nodes[saved.root]
            guard root.presentableID == savedRoot.id, root.kind.rawValue == savedRoot.kind else {
                throw CheckpointError(
                    .configMismatch,
                    "flow \(saved.name)'s root is \(root.kind.rawValue) \(root.presentableID) in the config, "
                        + "\(savedRoot.kind) \(savedRoot.id) in the checkpoint")
            }
            flows.append(flow)
        }
        var nodes: [NavigationNode] = []
        nodes.reserveCapacity(nodeCount)
        for saved in checkpoint.nodes {
            if let flow = saved.rootOf {
                try check(
                    flow < flowCount && checkpoint.flows[flow].root == nodes.count,
                    "node \(saved.id) roots a flow that does not root it")
                nodes.append(flows[flow].navigationNode)
                continue
            }
            switch PresentableKind(rawValue: saved.kind) {
            case .screen: nodes.append(Screen(id: saved.id))
            case .stack: nodes.append(NavigationStack(id: saved.id))
            case .tabs: nodes.append(TabBar(id: saved.id))
            case .flow, nil: throw CheckpointError(.inconsistent, "node \(saved.id) has kind \(saved.kind)")
            }
        }
        for (node, saved) in zip(nodes, checkpoint.nodes) {
            guard let placement = NodePlacement(rawValue: saved.placement) else {
                throw CheckpointError(.inconsistent, "node \(saved.id) has placement \(saved.placement)")
            }
            try check(
                saved.children.allSatisfy { $0 < nodeCount } && (saved.presented ?? 0) < nodeCount,
                "node \(saved.id) links outside")
            node.placement = placement
            node.isDismissed = saved.isDismissed
            node.reportedVisibility = saved.reportedVisibility
            node.selected = saved.selected
            node.children = saved.children.map { nodes[$0] }
            for child in node.children { child.container = node }
            node.presented = saved.presented.map { nodes[$0] }
            node.presented?.container = node
            if saved.hosted { node.host = self }
        }

        var records: [FlowRecord] = []
        for (index, saved) in checkpoint.flows.enumerated() {
            try check(saved.parent.map { $0 < index } ?? true, "flow \(saved.name) comes before its parent")
            let record = FlowRecord(
                id: FlowID(name: saved.name, instance: saved.instance), flow: flows[index],
                parent: saved.parent.map { records[$0] }, allowStepWhenDismissed: saved.allowStepWhenDismissed)
            record.isReady = saved.isReady
            records.append(record)
            recordsByObject[ObjectIdentifier(record.flow)] = record
            recordsByID[record.id] = record
            flowRoots[ObjectIdentifier(nodes[saved.root])] = record.id
        }
        for (record, saved) in zip(records, checkpoint.flows) {
            try check(saved.children.allSatisfy { $0 < flowCount }, "flow \(saved.name) has unknown children")
            record.children = saved.children.map { records[$0] }
            record.readinessGroups = saved.readinessGroups.map { group in
                group.map {
                    $0 >= 0 && $0 < flowCount ? ObjectIdentifier(records[$0].flow) : ObjectIdentifier(Gone.member)
                }
            }
            record.readinessMembers = saved.readinessGroups.joined().filter { $0 >= 0 && $0 < flowCount }.map {
                records[$0].flow
            }
        }
        try check(checkpoint.roots.allSatisfy { $0 < flowCount }, "unknown root flows")
        roots = checkpoint.roots.map { records[$0] }

        // A checkpoint without the index leaves it to be built at the first renderer report.
        if !checkpoint.nodesByID.isEmpty {
            var index: [String: InlineFirstArray<NavigationNode>] = [:]
            for (presentableID, indices) in checkpoint.nodesByID {
                let live = indices.filter { $0 < nodeCount }.map { nodes[$0] }
                if !live.isEmpty { index[presentableID] = InlineFirstArray(live) }
            }
            nodesByID = index
        }

        // Each stepper id's counters go to its first binding restored.
        var counters = checkpoint.stepperCounters.mapValues(\.counters)
        // One silent stand-in per in-process stepper id, bound under the id it had.
        var inProcess: [String: any Stepper] = [:]
        var bindings: [StepperBinding] = []
        for saved in checkpoint.bindings {
            try check(saved.flow < flowCount && saved.node < nodeCount, "binding of \(saved.stepper) links outside")
            guard let role = BindingRole(rawValue: saved.role) else {
                throw CheckpointError(.inconsistent, "binding of \(saved.stepper) has role \(saved.role)")
            }
            // A remote stepper is known by its id: its binding keeps no stand-in.
            let stepper: (any Stepper)?
            if saved.remote {
                stepper = nil
            } else if let existing = inProcess[saved.stepper] {
                stepper = existing
            } else {
                // Spent: a one-shot stepper emitted its step when it was bound.
                switch saved.type {
                case "OneStepper": stepper = OneStepper(withSingleStep: NoneStep())
                case "DefaultStepper": stepper = DefaultStepper()
                default: stepper = NoneStepper()
                }
                inProcess[saved.stepper] = stepper
            }
            let record = records[saved.flow]
            let info = BindingInfo(
                stepperID: saved.stepper, flow: record.id, presentableID: nodes[saved.node].presentableID, role: role,
                allowStepWhenNotPresented: saved.allowStepWhenNotPresented,
                allowStepWhenDismissed: saved.allowStepWhenDismissed, isRemote: saved.remote)
            let binding = StepperBinding(stepper: stepper, info: info, flow: record, node: nodes[saved.node])
            binding.counters = counters.removeValue(forKey: saved.stepper) ?? StepperCounters()
            bindings.append(binding)
        }
        for (record, saved) in zip(records, checkpoint.flows) {
            record.bindings = saved.bindings.filter { $0 < bindings.count }.map { bindings[$0] }
        }
        var slotted = Set<ObjectIdentifier>()
        for (stepperID, indices) in checkpoint.bindingsByStepper {
            var slot: StepperSlot?
            for binding in indices.filter({ $0 < bindings.count }).map({ bindings[$0] })
            where binding.stepperID == stepperID && slotted.insert(ObjectIdentifier(binding)).inserted {
                // Subscribed only once the coordinator holds it (see `BindingSubscription`).
                binding.stepper?.steps.subscribe(binding, of: self)
                if slot == nil { slot = StepperSlot(binding) } else { slot?.append(binding) }
            }
            if let slot { steppers[stepperID] = slot }
            sortedStepperIDs = nil
        }
        totals = checkpoint.totals.counters
        instanceCounters = checkpoint.instanceCounters
        for saved in checkpoint.tombstones {
            guard let role = BindingRole(rawValue: saved.role) else { continue }
            tombstones[saved.stepper] = BindingInfo(
                stepperID: saved.stepper, flow: FlowID(name: saved.flowName, instance: saved.flowInstance),
                presentableID: saved.presentableID, role: role,
                allowStepWhenNotPresented: saved.allowStepWhenNotPresented,
                allowStepWhenDismissed: saved.allowStepWhenDismissed, isRemote: saved.remote)
            tombstoneOrder.append(saved.stepper)
        }
    }
}

/// Stands for a readiness-group member that is no longer coordinated: never in `recordsByObject`.
private final class Gone: Sendable {
    static let member = Gone()
}

extension CoordinatorCheckpoint.Counters {
    init(_ counters: StepperCounters) {
        accepted = counters.accepted
        dropped = Dictionary(uniqueKeysWithValues: counters.dropped.map { ($0.key.rawValue, $0.value) })
    }

    var counters: StepperCounters {
        var counters = StepperCounters()
        counters.accepted = accepted
        for (reason, count) in dropped { counters.dropped[DiagnosticReason(rawValue: reason)] = count }
        return counters
    }
}
