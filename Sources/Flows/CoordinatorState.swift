import FlowBusWire

// Internal bookkeeping of the FlowCoordinator: the records that stand for RxFlow's child
// FlowCoordinators, stepper bindings, queue entries and completion tickets.

/// One coordinated flow: RxFlow's (child) `FlowCoordinator`. The parent holds its children;
/// a child refers to its parent weakly (RXFLOW.md rule 4).
@FlowActor
final class FlowRecord {
    let id: FlowID
    let flow: any Flow
    weak var parent: FlowRecord?
    var children: [FlowRecord] = []
    var bindings: [StepperBinding] = []
    let allowStepWhenDismissed: Bool
    var isActive = true
    var isReady = false
    /// Sets of child flows (by object identity) whose readiness makes this flow ready.
    var readinessGroups: [[ObjectIdentifier]] = []
    /// The flows those groups name, kept alive so that no other flow can take their identifiers.
    var readinessMembers: [any Flow] = []

    init(id: FlowID, flow: any Flow, parent: FlowRecord?, allowStepWhenDismissed: Bool) {
        self.id = id
        self.flow = flow
        self.parent = parent
        self.allowStepWhenDismissed = allowStepWhenDismissed
    }
}

/// A stepper bound to a flow and a presentable. A coordinator holds one per screen: its
/// description (``info``) is kept as the fields it is made of, not copied.
@FlowActor
final class StepperBinding {
    /// The in-process stepper; nil for a remote one, whose steps come by ``stepperID``: the
    /// binding keeps no stand-in object for it (see ``RemoteBindingSubscription``).
    let stepper: (any Stepper)?
    let stepperID: String
    /// Alive while anything reaches the binding: its flow holds it until the flow ends, which
    /// unbinds it, and a queued step holds both.
    weak var flow: FlowRecord?
    let node: NavigationNode
    /// Its share of its stepper id's counters (``StepperSlot/counters``): kept here, not in an
    /// object of their own, so that a binding costs one allocation, not two.
    var counters = StepperCounters()
    let role: BindingRole
    let allowStepWhenNotPresented: Bool
    let allowStepWhenDismissed: Bool
    var isActive = true

    /// Binds `stepper`, which is nil exactly when `info` says the stepper is remote.
    init(stepper: (any Stepper)?, info: BindingInfo, flow: FlowRecord, node: NavigationNode) {
        precondition((stepper == nil) == info.isRemote, "a binding keeps its stepper exactly when it is in-process")
        self.stepper = stepper
        stepperID = info.stepperID
        self.flow = flow
        self.node = node
        role = info.role
        allowStepWhenNotPresented = info.allowStepWhenNotPresented
        allowStepWhenDismissed = info.allowStepWhenDismissed
    }

    /// Whether its steps come from another process, by its id.
    var isRemote: Bool { stepper == nil }

    var info: BindingInfo {
        BindingInfo(
            stepperID: stepperID, flow: flow?.id ?? FlowID(name: "", instance: 0), presentableID: node.presentableID,
            role: role, allowStepWhenNotPresented: allowStepWhenNotPresented,
            allowStepWhenDismissed: allowStepWhenDismissed, isRemote: isRemote)
    }
}

/// Completion of one input (a remote step, a deep link, a coordinate call) and of every step
/// it caused; what `receive`, `navigate(to:)` and `coordinate` await.
@FlowActor
final class Ticket {
    var pending = 0
    var outcomes: [StepOutcome] = []
    var continuation: CheckedContinuation<Void, Never>?
}

/// One deep link on its way through the flow hierarchy.
@FlowActor
final class Broadcast {
    let step: any Step
    var pending = 0
    var decoded = 0

    init(step: any Step) {
        self.step = step
    }
}

/// A step waiting in the coordinator's queue.
struct PendingStep {
    let flow: FlowRecord
    let step: any Step
    let origin: StepOrigin
    let binding: StepperBinding?
    let broadcast: Broadcast?
    let ticket: Ticket?
    let recordsOutcome: Bool
}

/// The bindings of one stepper id, in the order steps reach them. A slot is never empty (it goes
/// with its last binding). Nearly every stepper id has one binding, kept without an array: a slot
/// is one word in the coordinator's dictionary of a hundred thousand ids.
struct StepperSlot: RandomAccessCollection {
    private enum Storage {
        case one(StepperBinding)
        case many([StepperBinding])
    }

    private var storage: Storage

    init(_ binding: StepperBinding) {
        storage = .one(binding)
    }

    var startIndex: Int { 0 }
    var endIndex: Int {
        switch storage {
        case .one: 1
        case .many(let bindings): bindings.count
        }
    }

    /// The binding of a slot of one.
    var only: StepperBinding? {
        if case .one(let binding) = storage { return binding }
        return nil
    }

    subscript(position: Int) -> StepperBinding {
        switch storage {
        case .one(let binding):
            precondition(position == 0, "index \(position) out of a slot of one binding")
            return binding
        case .many(let bindings):
            return bindings[position]
        }
    }

    /// Iterates without going through the collection's subscript, whose generic accessor
    /// allocates at every element in a debug build.
    struct Iterator: IteratorProtocol {
        fileprivate let slot: StepperSlot
        fileprivate var position = 0

        mutating func next() -> StepperBinding? {
            defer { position += 1 }
            switch slot.storage {
            case .one(let binding): return position == 0 ? binding : nil
            case .many(let bindings): return position < bindings.count ? bindings[position] : nil
            }
        }
    }

    func makeIterator() -> Iterator {
        Iterator(slot: self)
    }

    mutating func append(_ binding: StepperBinding) {
        switch storage {
        case .one(let first):
            storage = .many([first, binding])
        case .many(var bindings):
            storage = .one(binding)  // lets go of the array, so that it is appended to in place
            bindings.append(binding)
            storage = .many(bindings)
        }
    }

    /// Removes `binding`; false when it was the last one (the slot is to go).
    mutating func remove(_ binding: StepperBinding) -> Bool {
        switch storage {
        case .one(let only):
            return only !== binding
        case .many(var bindings):
            storage = .one(bindings[0])  // lets go of the array, so that it is changed in place
            bindings.removeAll { $0 === binding }
            guard let first = bindings.first else { return false }
            storage = bindings.count == 1 ? .one(first) : .many(bindings)
            return true
        }
    }

    /// The stepper id's counters: its bindings' together (a binding unbound before the others
    /// left its counts to the first that stays).
    @FlowActor
    var counters: StepperCounters {
        var counters = self[0].counters
        for binding in dropFirst() { counters.add(binding.counters) }
        return counters
    }
}

/// An array whose first element is kept inline: nearly every stepper id has one binding and
/// nearly every presentable id one node, and a one-element array costs a heap allocation.
struct InlineFirstArray<Element>: RandomAccessCollection {
    private var head: Element?
    private var tail: [Element] = []

    init() {}

    init(_ elements: some Sequence<Element>) {
        for element in elements { append(element) }
    }

    var startIndex: Int { 0 }
    var endIndex: Int { head == nil ? 0 : 1 + tail.count }

    subscript(position: Int) -> Element {
        guard position > 0 else { return head! }
        return tail[position - 1]
    }

    /// Iterates without going through the collection's subscript, whose generic accessor
    /// allocates at every element in a debug build.
    struct Iterator: IteratorProtocol {
        fileprivate let elements: InlineFirstArray
        fileprivate var position = 0

        mutating func next() -> Element? {
            defer { position += 1 }
            guard position > 0 else { return elements.head }
            return position <= elements.tail.count ? elements.tail[position - 1] : nil
        }
    }

    func makeIterator() -> Iterator {
        Iterator(elements: self)
    }

    mutating func append(_ element: Element) {
        if head == nil {
            head = element
        } else {
            tail.append(element)
        }
    }

    mutating func removeAll(where shouldBeRemoved: (Element) throws -> Bool) rethrows {
        try tail.removeAll(where: shouldBeRemoved)
        if let head, try shouldBeRemoved(head) {
            self.head = tail.isEmpty ? nil : tail.removeFirst()
        }
    }
}
