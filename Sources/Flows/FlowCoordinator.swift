import FlowBusWire

/// When ``FlowCoordinator/use(_:when:block:)`` runs its block: RxFlow's `ExecuteStrategy`.
public enum FlowReadiness: Sendable, Hashable {
    /// At once, synchronously.
    case created
    /// When every flow is ready (RXFLOW.md rule 13). FlowBus replays readiness: a flow that is
    /// already ready runs the block at once (RxFlow does not: issue #143).
    case ready
}

/// The engine: RxFlow's `FlowCoordinator` for a whole hierarchy of flows, without I/O.
///
/// It takes inputs — ``coordinate(flow:with:allowStepWhenDismissed:)``, remote steps
/// (``receive(_:from:)``), deep links (``navigate(to:)``), renderer reports
/// (``report(_:for:)``) and in-process ``Stepper`` emissions — and produces ordered
/// ``CoordinatorEvent``s that the runtime publishes. See the `Flows` overview article for the
/// processing model and ordering guarantees.
///
/// All steps of all flows go through one queue, processed one at a time: a step's adapt,
/// navigate and consequences never interleave with another step's (rule 8), even while an
/// `adapt` is suspended.
@FlowActor
public final class FlowCoordinator {
    // What a routed step touches is `@exclusivity(unchecked)`: the engine runs on one thread, and
    // the runtime's check of every access to these was ~7% of flowd's loop (with the publisher's).
    /// Called with every event, in order, before the event streams get it.
    @exclusivity(unchecked) public var onEvent: (@FlowActor (CoordinatorEvent) -> Void)?

    @exclusivity(unchecked) private var streams: [Int: AsyncStream<CoordinatorEvent>.Continuation] = [:]
    private var nextStreamID = 0

    var roots: [FlowRecord] = []
    var recordsByObject: [ObjectIdentifier: FlowRecord] = [:]
    var recordsByID: [FlowID: FlowRecord] = [:]
    var instanceCounters: [String: Int] = [:]
    @exclusivity(unchecked) var steppers: [String: StepperSlot] = [:]
    /// The keys of ``steppers`` in order, for status pages; nil once a key came or went.
    var sortedStepperIDs: [String]?
    @exclusivity(unchecked) var totals = StepperCounters()
    var tombstones: [String: BindingInfo] = [:]
    var tombstoneOrder: [String] = []
    private let tombstoneLimit = 256
    /// Hosted, undismissed nodes by presentable id, for renderer reports. Held strongly: a node
    /// leaves when it is dismissed (`navigationNodesDismissed(_:)`). Nil until a renderer first
    /// reports: a coordinator nobody renders holds no index of its hundred thousand screens.
    var nodesByID: [String: InlineFirstArray<NavigationNode>]?
    /// The flow each flow root is the root of (a flow holds its root, so the identifier stays its).
    var flowRoots: [ObjectIdentifier: FlowID] = [:]
    private var decoders: [String: StepDecoder] = [:]
    var readyCallbacks: [ObjectIdentifier: [@FlowActor () -> Void]] = [:]

    @exclusivity(unchecked) var queue: [PendingStep] = []
    @exclusivity(unchecked) var isPumping = false
    private var pumpScheduled = false
    private var idleWaiters: [CheckedContinuation<Void, Never>] = []

    /// Non-nil while a step's synchronous phase runs: steps emitted then are its consequences.
    @exclusivity(unchecked) var collected: [PendingStep]?
    @exclusivity(unchecked) private var collectingTicket: Ticket?
    /// Navigations so far: the last one's ``NavigationEvent/number``.
    @exclusivity(unchecked) private var navigations: UInt64 = 0
    /// See ``reusableTicket()``.
    @exclusivity(unchecked) private var spareTicket: Ticket?
    @exclusivity(unchecked) private var currentFlow: FlowID?
    @exclusivity(unchecked) private var deferDismissals = false
    @exclusivity(unchecked) var pendingDismissals: [NavigationNode] = []

    /// Creates an idle coordinator.
    /// - Parameter onEvent: called with every event, in order.
    public init(onEvent: (@FlowActor (CoordinatorEvent) -> Void)? = nil) {
        self.onEvent = onEvent
    }

    // MARK: - Events

    /// A new stream of every event from now on, in order (unbounded buffer).
    public func events() -> AsyncStream<CoordinatorEvent> {
        let (stream, continuation) = AsyncStream.makeStream(of: CoordinatorEvent.self)
        let id = nextStreamID
        nextStreamID += 1
        streams[id] = continuation
        continuation.onTermination = { [weak self] _ in
            guard let self else { return }
            Task { @FlowActor in self.streams.removeValue(forKey: id) }
        }
        return stream
    }

    /// Finishes every event stream (call when the coordinator is shut down).
    public func finishEvents() {
        let continuations = streams.values
        streams.removeAll()
        for continuation in continuations { continuation.finish() }
    }

    private func emit(_ event: CoordinatorEvent) {
        onEvent?(event)
        for continuation in streams.values { continuation.yield(event) }
    }

    private func diagnose(
        _ reason: DiagnosticReason, _ message: String, stepperID: String? = nil, flow: FlowID? = nil,
        presentableID: String? = nil, step: (any Step)? = nil
    ) {
        emit(
            .diagnostic(
                Diagnostic(
                    reason: reason, message: message, stepperID: stepperID, flow: flow,
                    presentableID: presentableID, step: step)))
    }

    // MARK: - Decoding

    /// Registers how flows named `name` decode canonical steps; takes precedence over
    /// ``Flow/step(from:)``. This is where the runtime plugs its Codable machinery in.
    public func setStepDecoder(_ decoder: @escaping StepDecoder, forFlowNamed name: String) {
        decoders[name] = decoder
    }

    private func decode(_ step: any Step, for record: FlowRecord) -> (any Step)? {
        guard let canonical = step.canonicalStep else { return step }
        if !decoders.isEmpty, let decoder = decoders[record.id.name] { return decoder(canonical) }
        return record.flow.step(from: canonical)
    }

    // MARK: - Inputs

    /// Coordinates a top-level flow: its root becomes a window, `stepper` its flow-level
    /// stepper; returns once the steps this caused have been processed.
    /// - Parameters:
    ///   - flow: the flow.
    ///   - stepper: its flow-level stepper (never gated by visibility); ``DefaultStepper`` by default.
    ///   - allowStepWhenDismissed: keep the flow running after its root is dismissed.
    public func coordinate(
        flow: any Flow, with stepper: any Stepper = DefaultStepper(), allowStepWhenDismissed: Bool = false
    ) async {
        let ticket = Ticket()
        startRoot(flow, stepper: stepper, allowStepWhenDismissed: allowStepWhenDismissed, ticket: ticket)
        await wait(for: ticket)
    }

    /// Like ``coordinate(flow:with:allowStepWhenDismissed:)`` but does not wait: the initial
    /// steps are queued and processed in the background.
    public func start(
        flow: any Flow, with stepper: any Stepper = DefaultStepper(), allowStepWhenDismissed: Bool = false
    ) {
        startRoot(flow, stepper: stepper, allowStepWhenDismissed: allowStepWhenDismissed, ticket: nil)
        ensurePump()
    }

    /// Hands a step from a remote stepper to the flows it is bound to, and waits until it and
    /// every step it caused have been processed.
    ///
    /// Unbound ids are refused (`unbound-stepper`, or `dismissed` when the id was recently
    /// unbound by a dismissal). Each binding is gated separately (`not-visible`, `dismissed`);
    /// a flow that cannot decode it reports `unknown-step`.
    ///
    /// Never await this from a flow's `adapt`: it would wait for the step being adapted. Use
    /// ``submit(_:from:)`` there.
    /// - Returns: what became of the step in each bound flow: refusals at the gate first, then
    ///   the outcome of each queued delivery in processing order.
    @discardableResult
    public func receive(_ step: CanonicalStep, from stepperID: String) async -> [StepOutcome] {
        let ticket = Ticket()
        admitRemote(step, from: stepperID, ticket: ticket)
        await wait(for: ticket)
        return ticket.outcomes
    }

    /// Like ``receive(_:from:)``, without suspending when it can: the step and its consequences
    /// are processed on the caller's stack unless a flow on the way adapts steps
    /// (``Flow/adaptsSteps``). Then the rest continues asynchronously, in order, before any later
    /// input: await ``StepProgress/Pending/outcomes()`` before handing the coordinator the next one.
    public func receiveNow(_ step: CanonicalStep, from stepperID: String) -> StepProgress {
        let ticket = reusableTicket()
        // The usual case, a stepper of one binding whose flow does not adapt, with nothing queued
        // and nobody pumping: the step is processed at once, as the queue would have, without
        // passing through it. Then the queue is pumped as it would have been: it holds the step's
        // consequences, and what was submitted meanwhile (by a flow, or an event handler).
        if queue.isEmpty, !isPumping, let binding = steppers[stepperID]?.only, binding.isActive, binding.isRemote,
            let flow = binding.flow, !flow.flow.adaptsSteps, gate(binding, of: flow) == nil
        {
            processNow(
                makeItem(
                    flow, step, origin: .stepper(stepperID), binding: binding, ticket: ticket, recordsOutcome: true))
            return progress(of: ticket, isDone: queue.isEmpty || pumpSynchronously())
        }
        admitRemote(step, from: stepperID, ticket: ticket)
        return progress(of: ticket)
    }

    /// Like ``navigate(to:)``, without suspending when it can (see ``receiveNow(_:from:)``).
    public func navigateNow(to step: any Step) -> StepProgress {
        let ticket = reusableTicket()
        admitDeepLink(step, ticket: ticket)
        return progress(of: ticket)
    }

    private func progress(of ticket: Ticket) -> StepProgress {
        progress(of: ticket, isDone: ticket.pending == 0 || pumpSynchronously())
    }

    /// `isDone`: whether the ticket and the queue were done with on the caller's stack.
    private func progress(of ticket: Ticket, isDone: Bool) -> StepProgress {
        if isDone {
            // Done on the caller's stack: nothing refers to it any more, the next input reuses it.
            spareTicket = ticket
            return .done(ticket.outcomes)
        }
        return .pending(StepProgress.Pending(coordinator: self, ticket: ticket))
    }

    /// The ticket of an input processed on the caller's stack: the last one's, reset, so that the
    /// routing of a step allocates neither a ticket nor (once the caller dropped the last
    /// outcomes) their array.
    private func reusableTicket() -> Ticket {
        guard let ticket = spareTicket else { return Ticket() }
        spareTicket = nil
        ticket.pending = 0
        ticket.outcomes.removeAll(keepingCapacity: true)
        return ticket
    }

    /// Like ``receive(_:from:)`` but does not wait for processing (never call `receive` from a
    /// flow's `adapt`: it would wait for itself; use `submit`).
    /// - Returns: whether at least one binding accepted the step into the queue.
    @discardableResult
    public func submit(_ step: CanonicalStep, from stepperID: String) -> Bool {
        let ticket = Ticket()
        admitRemote(step, from: stepperID, ticket: ticket)
        ensurePump()
        return ticket.pending > 0
    }

    /// Deep link: sends `step` to every active flow, parents before children (siblings in
    /// creation order), skipping the visibility gate and the NoneStep filter, and waits until
    /// it and every step it caused have been processed. A child flow created by the link also
    /// receives it, after its own initial steps (RxFlow issue #162). A canonical step is
    /// decoded per flow; flows that cannot decode it are skipped, and if none could, one
    /// `unknown-step` diagnostic is emitted.
    /// Never await this from a flow's `adapt`; use ``submitDeepLink(_:)`` there.
    /// - Returns: what became of the step in each flow, in processing order.
    @discardableResult
    public func navigate(to step: any Step) async -> [StepOutcome] {
        let ticket = Ticket()
        admitDeepLink(step, ticket: ticket)
        await wait(for: ticket)
        return ticket.outcomes
    }

    /// Like ``navigate(to:)`` but does not wait.
    public func submitDeepLink(_ step: any Step) {
        admitDeepLink(step, ticket: nil)
        ensurePump()
    }

    /// Applies a renderer's report about every live node with this presentable id.
    ///
    /// `appeared`/`disappeared` override the tree-derived visibility of that node from then on
    /// (the latest report wins); `dismissed` removes the node from the tree as if popped or
    /// dismissed, without emitting a command (the renderer already did it), unbinding its
    /// steppers and ending flows rooted there. Unknown ids: `unknown-presentable` diagnostic.
    public func report(_ report: RendererReport, for presentableID: String) {
        let nodes = liveNodes(presentableID)
        guard !nodes.isEmpty else {
            diagnose(
                .unknownPresentable,
                "renderer reported \(report.rawValue) for \(presentableID), which is not in the tree",
                presentableID: presentableID)
            return
        }
        for node in nodes {
            switch report {
            case .appeared: node.reportedVisibility = true
            case .disappeared: node.reportedVisibility = false
            case .dismissed: node.remove(emitCommands: false)
            }
        }
        flushDismissals()
    }

    /// Returns once the queue is empty and nothing is being processed (drives the processing
    /// itself if nobody else does). Tests use it instead of sleeping.
    public func idle() async {
        if queue.isEmpty && !isPumping { return }
        if !isPumping {
            await pump()
            return
        }
        await withCheckedContinuation { idleWaiters.append($0) }
    }

    // MARK: - Readiness

    /// Runs `block` with the flows' roots at once (`.created`) or when all of them are ready
    /// (`.ready`; at once if they already are — FlowBus replays readiness, RxFlow issue #143).
    public func use(
        _ flows: [any Flow], when readiness: FlowReadiness, block: @escaping @FlowActor ([any Presentable]) -> Void
    ) {
        let roots = flows.map(\.root)
        switch readiness {
        case .created:
            block(roots)
        case .ready:
            var remaining = flows.count
            if remaining == 0 {
                block(roots)
                return
            }
            for flow in flows {
                onReady(flow) {
                    remaining -= 1
                    if remaining == 0 { block(roots) }
                }
            }
        }
    }

    /// Waits until every flow is ready (returns at once for flows already ready).
    public func waitUntilReady(_ flows: [any Flow]) async {
        await withCheckedContinuation { continuation in
            use(flows, when: .ready) { _ in continuation.resume() }
        }
    }

    /// Whether `flow` is coordinated and ready.
    public func isReady(_ flow: any Flow) -> Bool {
        recordsByObject[ObjectIdentifier(flow)]?.isReady ?? false
    }

    /// The id of `flow` while it is coordinated here.
    public func flowID(of flow: any Flow) -> FlowID? {
        recordsByObject[ObjectIdentifier(flow)]?.id
    }

    /// The coordinated flows, pre-order.
    public var activeFlows: [FlowID] {
        var ids: [FlowID] = []
        func visit(_ record: FlowRecord) {
            ids.append(record.id)
            record.children.forEach(visit)
        }
        roots.forEach(visit)
        return ids
    }

    private func onReady(_ flow: any Flow, _ callback: @escaping @FlowActor () -> Void) {
        let key = ObjectIdentifier(flow)
        if recordsByObject[key]?.isReady == true {
            callback()
        } else {
            readyCallbacks[key, default: []].append(callback)
        }
    }

    private func markReady(_ record: FlowRecord) {
        guard !record.isReady, record.isActive else { return }
        record.isReady = true
        record.readinessGroups.removeAll()
        record.readinessMembers.removeAll()
        emit(.flowReady(record.id))
        let callbacks = readyCallbacks.removeValue(forKey: ObjectIdentifier(record.flow)) ?? []
        for callback in callbacks { callback() }
        if let parent = record.parent { checkReadiness(parent) }
    }

    private func checkReadiness(_ record: FlowRecord) {
        guard !record.isReady else { return }
        for group in record.readinessGroups
        where group.allSatisfy({ recordsByObject[$0]?.isReady == true }) {
            markReady(record)
            return
        }
    }

    // MARK: - Snapshot

    /// The state for a status query: flows with their live trees, bindings, counters.
    /// - Parameters:
    ///   - limit: at most this many children per node, and entries of each list a window does
    ///     not say, are listed, so that the work and the size of a status reply stay bounded
    ///   however large the topology; the counts are always complete.
    ///   - flows, bindings, steppers: the page of each list to take (see ``SnapshotWindow``).
    public func snapshot(
        limit: Int = .max, flows flowWindow: SnapshotWindow? = nil, bindings bindingWindow: SnapshotWindow? = nil,
        steppers stepperWindow: SnapshotWindow? = nil
    ) -> CoordinatorSnapshot {
        let flowWindow = flowWindow ?? SnapshotWindow(limit: limit)
        let bindingWindow = bindingWindow ?? SnapshotWindow(limit: limit)
        let stepperWindow = stepperWindow ?? SnapshotWindow(limit: limit)
        var flows: [FlowSnapshot] = []
        var flowCount = 0
        var flowsMatching = 0
        func visit(_ record: FlowRecord) {
            flowCount += 1
            if flowWindow.admits(record.id.description) {
                if flowWindow.lists(flowsMatching) {
                    flows.append(
                        FlowSnapshot(
                            id: record.id, parent: record.parent?.id, children: record.children.map(\.id),
                            isReady: record.isReady, allowStepWhenDismissed: record.allowStepWhenDismissed,
                            root: nodeSnapshot(record.flow.navigationNode, owner: record.id, limit: limit)))
                }
                flowsMatching += 1
            }
            record.children.forEach(visit)
        }
        roots.forEach(visit)

        // Pages of stepper ids come from the ids kept sorted between binds: a status request costs
        // the page and a binary search, not a sort of every id.
        let ordered = orderedStepperIDs()
        var bindings: [BindingInfo] = []
        var bindingCount = 0
        for slot in steppers.values { bindingCount += slot.count { $0.isActive } }
        var bindingsMatching = 0
        let bindingIDs = ordered[Self.range(of: bindingWindow.prefix, in: ordered)]
        for stepperID in bindingIDs {
            let slot = steppers[stepperID]!
            let active = slot.count { $0.isActive }
            let end = bindingsMatching + active
            if bindingWindow.limit > 0, end > bindingWindow.offset,
                bindingsMatching - bindingWindow.offset < bindingWindow.limit
            {
                let infos = slot.filter(\.isActive).map(\.info).sorted { $0.flow < $1.flow }
                for (index, info) in infos.enumerated() where bindingWindow.lists(bindingsMatching + index) {
                    bindings.append(info)
                }
            }
            bindingsMatching = end
        }

        let stepperIDs = ordered[Self.range(of: stepperWindow.prefix, in: ordered)]
        var listedSteppers: [String: StepperCounters] = [:]
        for stepperID in stepperIDs.dropFirst(stepperWindow.offset).prefix(stepperWindow.limit) {
            listedSteppers[stepperID] = steppers[stepperID]!.counters
        }
        var snapshot = CoordinatorSnapshot(
            flows: flows, bindings: bindings,
            steppers: listedSteppers, totals: totals, queuedSteps: queue.count)
        snapshot.flowCount = flowCount
        snapshot.bindingCount = bindingCount
        snapshot.stepperCount = steppers.count
        snapshot.flowsMatching = flowsMatching
        snapshot.bindingsMatching = bindingsMatching
        snapshot.steppersMatching = stepperIDs.count
        return snapshot
    }

    private func orderedStepperIDs() -> [String] {
        if let sortedStepperIDs { return sortedStepperIDs }
        let sorted = steppers.keys.sorted()
        sortedStepperIDs = sorted
        return sorted
    }

    /// The ids of `sorted` that start with `prefix`: one run, found by binary search.
    private static func range(of prefix: String?, in sorted: [String]) -> Range<Int> {
        guard let prefix, !prefix.isEmpty else { return sorted.indices }
        var low = 0
        var high = sorted.count
        while low < high {
            let middle = (low + high) / 2
            if sorted[middle] < prefix { low = middle + 1 } else { high = middle }
        }
        var end = low
        while end < sorted.count, sorted[end].hasPrefix(prefix) { end += 1 }
        return low..<end
    }

    private func nodeSnapshot(_ node: NavigationNode, owner: FlowID, limit: Int) -> NodeSnapshot {
        if let flow = flowRoots[ObjectIdentifier(node)], flow != owner {
            return NodeSnapshot(
                id: node.presentableID, kind: node.kind, placement: node.placement,
                isVisible: node.isVisible, reportedVisibility: node.reportedVisibility, selectedIndex: node.selected,
                children: [], childFlow: flow, presentedStorage: [])
        }
        return NodeSnapshot(
            id: node.presentableID, kind: node.kind, placement: node.placement,
            isVisible: node.isVisible, reportedVisibility: node.reportedVisibility, selectedIndex: node.selected,
            children: node.children.prefix(limit).map { nodeSnapshot($0, owner: owner, limit: limit) }, childFlow: nil,
            presentedStorage: node.presented.map { [nodeSnapshot($0, owner: owner, limit: limit)] } ?? [])
    }

    // MARK: - Admission

    private func startRoot(_ flow: any Flow, stepper: any Stepper, allowStepWhenDismissed: Bool, ticket: Ticket?) {
        guard recordsByObject[ObjectIdentifier(flow)] == nil else {
            diagnose(.flowError, "\(flow.flowName) is already coordinated", flow: flowID(of: flow))
            return
        }
        let node = flow.navigationNode
        guard node.placement == .detached, !node.isDismissed else {
            diagnose(
                .flowError, "the root \(node.presentableID) of \(flow.flowName) is already in a tree or dismissed",
                presentableID: node.presentableID)
            return
        }
        node.placement = .window
        let record = makeRecord(flow, parent: nil, allowStepWhenDismissed: allowStepWhenDismissed)
        roots.append(record)
        let outer = (collected, collectingTicket)
        collected = []
        collectingTicket = ticket
        bind(
            stepper, to: record, node: node, role: .flowStepper, allowStepWhenNotPresented: true,
            allowStepWhenDismissed: allowStepWhenDismissed)
        let items = collected ?? []
        (collected, collectingTicket) = outer
        if collected != nil {
            collected?.append(contentsOf: items)
        } else {
            queue.append(contentsOf: items)
        }
    }

    private func admitRemote(_ step: CanonicalStep, from stepperID: String, ticket: Ticket) {
        let slot = steppers[stepperID]
        guard let slot, slot.contains(where: { $0.isActive && $0.isRemote }) else {
            if let tombstone = tombstones[stepperID] {
                countDrop(.dismissed, binding: nil)
                diagnose(
                    .dismissed,
                    "\(stepperID) is no longer bound: its presentable \(tombstone.presentableID) was dismissed",
                    stepperID: stepperID, flow: tombstone.flow, presentableID: tombstone.presentableID, step: step)
                ticket.outcomes.append(.dropped(.dismissed, flow: tombstone.flow))
            } else {
                countDrop(.unboundStepper, binding: nil)
                diagnose(.unboundStepper, "no flow has bound stepper \(stepperID)", stepperID: stepperID, step: step)
                ticket.outcomes.append(.dropped(.unboundStepper, flow: nil))
            }
            return
        }
        for binding in slot where binding.isActive && binding.isRemote {
            guard let flow = binding.flow else { continue }
            if let reason = gate(binding, of: flow) {
                dropEmission(step, binding: binding, reason: reason)
                ticket.outcomes.append(.dropped(reason, flow: flow.id))
            } else {
                queue.append(
                    makeItem(
                        flow, step, origin: .stepper(stepperID), binding: binding, ticket: ticket,
                        recordsOutcome: true))
            }
        }
    }

    private func admitDeepLink(_ step: any Step, ticket: Ticket?) {
        let active = roots.filter(\.isActive)
        guard !active.isEmpty else {
            diagnose(.unknownStep, "deep link \(describeStep(step)) reached no flow: none is coordinated", step: step)
            ticket?.outcomes.append(.dropped(.unknownStep, flow: nil))
            return
        }
        let broadcast = Broadcast(step: step)
        for root in active {
            queue.append(
                makeItem(root, step, origin: .deepLink, broadcast: broadcast, ticket: ticket, recordsOutcome: true))
        }
    }

    /// RXFLOW.md rule 3: a presentable stepper's steps pass only while its presentable is
    /// visible (unless allowStepWhenNotPresented) and not dismissed (unless allowStepWhenDismissed).
    /// Flow steppers are never gated by visibility (rule 2).
    /// `flow` is the binding's, which the caller loaded (a weak reference, not loaded twice).
    private func gate(_ binding: StepperBinding, of flow: FlowRecord) -> DiagnosticReason? {
        guard binding.isActive, flow.isActive else { return .dismissed }
        guard binding.role == .presentableStepper else { return nil }
        if binding.node.isDismissed && !binding.allowStepWhenDismissed { return .dismissed }
        if !binding.allowStepWhenNotPresented && !binding.node.isVisible {
            return binding.node.isDismissed ? .dismissed : .notVisible
        }
        return nil
    }

    func stepperEmitted(_ step: any Step, binding: StepperBinding) {
        guard binding.isActive, let flow = binding.flow else { return }
        if step is NoneStep { return }
        if let reason = gate(binding, of: flow) {
            dropEmission(step, binding: binding, reason: reason)
            return
        }
        schedule(
            makeItem(
                flow, step, origin: .stepper(binding.stepperID), binding: binding,
                ticket: collected != nil ? collectingTicket : nil, recordsOutcome: false))
    }

    private func dropEmission(_ step: any Step, binding: StepperBinding, reason: DiagnosticReason) {
        countDrop(reason, binding: binding)
        let info = binding.info
        let what = reason == .notVisible ? "is not visible" : "was dismissed"
        diagnose(
            reason, "step \(describeStep(step)) from \(info.stepperID) dropped: \(info.presentableID) \(what)",
            stepperID: info.stepperID, flow: info.flow, presentableID: info.presentableID, step: step)
    }

    private func countDrop(_ reason: DiagnosticReason, binding: StepperBinding?) {
        totals.dropped[reason, default: 0] += 1
        guard let binding else { return }
        counted(binding).counters.dropped[reason, default: 0] += 1
    }

    /// The binding whose counters count for `binding`: itself while bound; once unbound (a step
    /// of it was still queued), the first binding of its stepper id, which took its counts.
    private func counted(_ binding: StepperBinding) -> StepperBinding {
        binding.isActive ? binding : steppers[binding.stepperID]?.first ?? binding
    }

    private func makeItem(
        _ flow: FlowRecord, _ step: any Step, origin: StepOrigin, binding: StepperBinding? = nil,
        broadcast: Broadcast? = nil, ticket: Ticket?, recordsOutcome: Bool
    ) -> PendingStep {
        ticket?.pending += 1
        broadcast?.pending += 1
        return PendingStep(
            flow: flow, step: step, origin: origin, binding: binding, broadcast: broadcast,
            ticket: ticket, recordsOutcome: recordsOutcome)
    }

    /// A step produced now: part of the running step's consequences, or an outside emission
    /// appended to the queue.
    private func schedule(_ item: PendingStep) {
        if collected != nil {
            collected?.append(item)
        } else {
            queue.append(item)
            ensurePump()
        }
    }

    // MARK: - Processing

    private func ensurePump() {
        guard !isPumping, !pumpScheduled, !queue.isEmpty else { return }
        pumpScheduled = true
        Task {
            self.pumpScheduled = false
            await self.pump()
        }
    }

    /// The first queued step. A lone one (the common case) is moved out: `removeFirst` copies
    /// it, then destroys the original, retaining and releasing each of its references.
    private func dequeue() -> PendingStep {
        queue.count == 1 ? queue.removeLast() : queue.removeFirst()
    }

    private func pump() async {
        guard !isPumping else { return }
        isPumping = true
        while !queue.isEmpty {
            let item = dequeue()
            await process(item)
        }
        isPumping = false
        let waiters = idleWaiters
        idleWaiters.removeAll()
        for waiter in waiters { waiter.resume() }
    }

    /// Processes queued steps on the caller's stack while none of them needs an `adapt` that
    /// may suspend.
    /// - Returns: true when the queue is empty; false when the next step needs the asynchronous
    ///   path (or another caller is processing).
    private func pumpSynchronously() -> Bool {
        guard !isPumping else { return false }
        isPumping = true
        while !queue.isEmpty {
            // Processing may suspend when the flow's `adapt` is awaited. Only the item's flow is
            // read in place: passing the queue's item to a method copies it (a retain and a
            // release per reference), as the queue is a property of this class.
            if queue[0].flow.flow.adaptsSteps, !isStale(queue[0]) {
                isPumping = false
                return false
            }
            let item = dequeue()
            if let decoded = decodeForProcessing(item) { navigate(item, to: decoded) }
            complete(item)
        }
        isPumping = false
        let waiters = idleWaiters
        idleWaiters.removeAll()
        for waiter in waiters { waiter.resume() }
        return true
    }

    /// Processes `item` on the caller's stack, the queue being empty and nobody pumping; what it
    /// causes, and what is submitted meanwhile, is queued.
    private func processNow(_ item: PendingStep) {
        isPumping = true
        if let decoded = decodeForProcessing(item) { navigate(item, to: decoded) }
        complete(item)
        isPumping = false
        guard queue.isEmpty, !idleWaiters.isEmpty else { return }
        let waiters = idleWaiters
        idleWaiters.removeAll()
        for waiter in waiters { waiter.resume() }
    }

    private func wait(for ticket: Ticket) async {
        guard ticket.pending > 0 else { return }
        if !isPumping {
            await pump()
        }
        if ticket.pending > 0 {
            await withCheckedContinuation { ticket.continuation = $0 }
        }
    }

    private func complete(_ item: PendingStep) {
        if let ticket = item.ticket {
            ticket.pending -= 1
            if ticket.pending == 0, let continuation = ticket.continuation {
                ticket.continuation = nil
                continuation.resume()
            }
        }
        if let broadcast = item.broadcast {
            broadcast.pending -= 1
            if broadcast.pending == 0 && broadcast.decoded == 0 {
                diagnose(
                    .unknownStep, "deep link \(describeStep(broadcast.step)) was understood by no flow",
                    step: broadcast.step)
            }
        }
    }

    private func drop(_ item: PendingStep, _ reason: DiagnosticReason, _ message: String) {
        if item.recordsOutcome { item.ticket?.outcomes.append(.dropped(reason, flow: item.flow.id)) }
        if let binding = item.binding { countDrop(reason, binding: binding) }
        diagnose(
            reason, message, stepperID: item.binding?.stepperID, flow: item.flow.id,
            presentableID: item.binding?.node.presentableID, step: item.step)
    }

    private func isStale(_ item: PendingStep) -> Bool {
        !item.flow.isActive || item.binding?.isActive == false
    }

    /// RXFLOW.md rules 1 and 6 for one step: decode → adapt → willNavigate → navigate (tree
    /// commands) → dismissal cleanup → `.end` → didNavigate → forwards → readiness → contributors
    /// bound in array order → consequences queued.
    private func process(_ item: PendingStep) async {
        defer { complete(item) }
        guard let decoded = decodeForProcessing(item) else { return }
        let record = item.flow
        guard record.flow.adaptsSteps else {
            navigate(item, to: decoded)
            return
        }
        let step: any Step
        do {
            step = try await record.flow.adapt(step: decoded)
        } catch {
            diagnose(
                .flowError, "\(record.id) adapt(\(describeStep(decoded))) failed: \(error); navigating to NoneStep",
                stepperID: item.binding?.stepperID, flow: record.id, step: decoded)
            step = NoneStep()
        }
        if isStale(item) {
            drop(
                item, .dismissed,
                "step \(describeStep(step)) for \(record.id) dropped: the flow or presentable went away during adapt")
            return
        }
        navigate(item, to: step)
    }

    /// The step `item`'s flow navigates to, decoded; nil when the item ends here (stale, or not
    /// decodable: dropped, or a deep link passed on to the flow's children).
    private func decodeForProcessing(_ item: PendingStep) -> (any Step)? {
        let record = item.flow
        if isStale(item) {
            drop(
                item, .dismissed,
                "step \(describeStep(item.step)) for \(record.id) dropped: the flow or presentable is gone")
            return nil
        }
        let decoded = decode(item.step, for: record)
        // A canonical step is not a refusal: the common case needs no dynamic cast.
        if decoded?.canonicalStep == nil, let refused = decoded as? RefusedStep {
            drop(item, refused.reason, "\(record.id) refused step \(describeStep(item.step)): \(refused.message)")
            if item.broadcast != nil {
                var children: [PendingStep] = []
                fanOut(item, from: record, into: &children)
                queue.insert(contentsOf: children, at: 0)
            }
            return nil
        }
        guard let decoded else {
            if item.broadcast != nil {
                if item.recordsOutcome { item.ticket?.outcomes.append(.dropped(.unknownStep, flow: record.id)) }
                var children: [PendingStep] = []
                fanOut(item, from: record, into: &children)
                queue.insert(contentsOf: children, at: 0)
            } else {
                drop(item, .unknownStep, "\(record.id) cannot decode step \(describeStep(item.step))")
            }
            return nil
        }
        item.broadcast?.decoded += 1
        return decoded
    }

    /// The synchronous phase of one step, after adapt.
    private func navigate(_ item: PendingStep, to step: any Step) {
        let record = item.flow
        // The synchronous phase: nothing else runs until the consequences are queued.
        collected = []
        collectingTicket = item.ticket
        currentFlow = record.id
        deferDismissals = true

        navigations += 1
        let navigation = NavigationEvent(
            flow: record.id, step: step, origin: item.origin,
            presentableID: item.binding?.node.presentableID, number: navigations)
        emit(.willNavigate(navigation))
        let contributors = record.flow.navigate(to: step)
        if let binding = item.binding {
            counted(binding).counters.accepted += 1
            totals.accepted += 1
        }
        if item.recordsOutcome { item.ticket?.outcomes.append(.navigated(record.id)) }

        deferDismissals = false
        flushDismissals()

        var urgent: [PendingStep] = []
        var deferred: [PendingStep] = []
        func forwardToParent(_ forwarded: any Step) {
            if let parent = record.parent, parent.isActive {
                urgent.append(
                    makeItem(
                        parent, forwarded, origin: .forwardedFromChild(record.id), ticket: item.ticket,
                        recordsOutcome: false))
            } else {
                diagnose(
                    .noParentFlow, "\(record.id) forwarded \(describeStep(forwarded)) to its parent, but it has none",
                    flow: record.id, step: forwarded)
            }
        }

        if case .end(let forwarded) = contributors {
            forwardToParent(forwarded)
            endFlow(record, reason: .ended(step: forwarded))
        }
        // didNavigate closes the navigation once every command it caused is out (PROTOCOL.md
        // §3.3): its tree operations', then the `end` of each flow it ended, by `.end` or by
        // dismissing the flow's root.
        emit(.didNavigate(navigation))

        switch contributors {
        case .end:
            break
        case .none, .one, .multiple:
            var childFlows: [any Flow] = []
            for contributor in contributors.contributors {
                switch contributor {
                case .forwardToParentFlow(let forwarded):
                    forwardToParent(forwarded)
                case .forwardToCurrentFlow(let forwarded):
                    deferred.append(
                        makeItem(
                            record, forwarded, origin: .forwardedToCurrentFlow, ticket: item.ticket,
                            recordsOutcome: false))
                case .contribute(let presentable, _, _, _):
                    if let flow = presentable as? any Flow { childFlows.append(flow) }
                }
            }
            guard record.isActive else { break }
            if !record.isReady {
                if childFlows.isEmpty {
                    markReady(record)
                } else {
                    record.readinessGroups.append(childFlows.map { ObjectIdentifier($0) })
                    record.readinessMembers += childFlows
                }
            }
            for contributor in contributors.contributors {
                guard case .contribute(let presentable, let stepper, let notPresented, let dismissed) = contributor,
                    record.isActive
                else { continue }
                if let childFlow = presentable as? any Flow {
                    startChild(childFlow, stepper: stepper, parent: record, allowStepWhenDismissed: dismissed)
                } else {
                    bind(
                        stepper, to: record, node: presentable.navigationNode, role: .presentableStepper,
                        allowStepWhenNotPresented: notPresented, allowStepWhenDismissed: dismissed)
                }
            }
        }

        var head = collected ?? []
        collected = nil
        collectingTicket = nil
        currentFlow = nil
        if !urgent.isEmpty { head.insert(contentsOf: urgent, at: 0) }
        fanOut(item, from: record, into: &head)
        if !head.isEmpty { queue.insert(contentsOf: head, at: 0) }
        if !deferred.isEmpty { queue.append(contentsOf: deferred) }
    }

    /// A deep link continues into every active child of `record` (including children the link
    /// itself just created), in creation order.
    private func fanOut(_ item: PendingStep, from record: FlowRecord, into items: inout [PendingStep]) {
        guard let broadcast = item.broadcast else { return }
        for child in record.children where child.isActive {
            items.append(
                makeItem(
                    child, broadcast.step, origin: .deepLink, broadcast: broadcast, ticket: item.ticket,
                    recordsOutcome: true))
        }
    }

    // MARK: - Flows and bindings

    private func makeRecord(_ flow: any Flow, parent: FlowRecord?, allowStepWhenDismissed: Bool) -> FlowRecord {
        let name = flow.flowName
        let instance = (instanceCounters[name] ?? 0) + 1
        instanceCounters[name] = instance
        let record = FlowRecord(
            id: FlowID(name: name, instance: instance), flow: flow, parent: parent,
            allowStepWhenDismissed: allowStepWhenDismissed)
        recordsByObject[ObjectIdentifier(flow)] = record
        recordsByID[record.id] = record
        let node = flow.navigationNode
        flowRoots[ObjectIdentifier(node)] = record.id
        let joined = node.attach(to: self)
        navigationNodeAttached(node)
        emit(.flowStarted(flow: record.id, parent: parent?.id, rootPresentableID: node.presentableID))
        // A root flow's root becomes a window. Renderers learn it, then what a flow put in its
        // root before it was coordinated (a child flow's root usually joined its parent's tree before).
        let outer = currentFlow
        if parent == nil {
            currentFlow = record.id
            navigationCommand(NavigationCommand(verb: .setRoot, target: node.presentableID, kind: node.kind))
        }
        node.announceContent(of: joined)
        currentFlow = outer
        return record
    }

    /// RXFLOW.md rule 4: a contributed flow gets its own record under the parent; its stepper
    /// is its flow-level stepper; allowStepWhenNotPresented is ignored, allowStepWhenDismissed inherited.
    private func startChild(_ flow: any Flow, stepper: any Stepper, parent: FlowRecord, allowStepWhenDismissed: Bool) {
        guard recordsByObject[ObjectIdentifier(flow)] == nil else {
            diagnose(
                .flowError, "\(parent.id) contributed \(flow.flowName), which is already coordinated",
                flow: parent.id, presentableID: flow.navigationNode.presentableID)
            return
        }
        guard !flow.navigationNode.isDismissed else {
            diagnose(
                .flowError, "\(parent.id) contributed \(flow.flowName) whose root is dismissed",
                flow: parent.id, presentableID: flow.navigationNode.presentableID)
            return
        }
        let record = makeRecord(flow, parent: parent, allowStepWhenDismissed: allowStepWhenDismissed)
        parent.children.append(record)
        bind(
            stepper, to: record, node: flow.navigationNode, role: .flowStepper, allowStepWhenNotPresented: true,
            allowStepWhenDismissed: allowStepWhenDismissed)
    }

    /// The id a binding is known by in status, counters and diagnostics. An in-process stepper
    /// keeping the default `Type@0x…` id gets one a person can read: `flow:<FlowID>` for a flow's
    /// own stepper, `<Type>:<presentable id>` for a screen's (`#2`, … while another holds it).
    private func bindingID(
        of stepper: any Stepper, role: BindingRole, record: FlowRecord, node: NavigationNode
    ) -> String {
        let id = stepper.stepperID
        guard !(stepper is any RemoteSteppable), id.hasPrefix("\(type(of: stepper))@0x") else { return id }
        let base = role == .flowStepper ? "flow:\(record.id)" : "\(type(of: stepper)):\(node.presentableID)"
        var candidate = base
        var suffix = 2
        while steppers[candidate]?.contains(where: { $0.stepper !== stepper }) == true {
            candidate = "\(base)#\(suffix)"
            suffix += 1
        }
        return candidate
    }

    /// RXFLOW.md rules 2 and 3: initial step, then subscribe, then readyToEmitSteps.
    private func bind(
        _ stepper: any Stepper, to record: FlowRecord, node: NavigationNode, role: BindingRole,
        allowStepWhenNotPresented: Bool, allowStepWhenDismissed: Bool
    ) {
        let stepperID = bindingID(of: stepper, role: role, record: record, node: node)
        let info = BindingInfo(
            stepperID: stepperID, flow: record.id, presentableID: node.presentableID, role: role,
            allowStepWhenNotPresented: allowStepWhenNotPresented, allowStepWhenDismissed: allowStepWhenDismissed,
            isRemote: stepper is any RemoteSteppable)
        let binding = StepperBinding(stepper: info.isRemote ? nil : stepper, info: info, flow: record, node: node)
        record.bindings.append(binding)
        if steppers[stepperID] == nil {
            steppers[stepperID] = StepperSlot(binding)
            sortedStepperIDs = nil
        } else {
            steppers[stepperID]?.append(binding)
        }
        if tombstones.removeValue(forKey: stepperID) != nil {
            tombstoneOrder.removeAll { $0 == stepperID }
        }
        emit(.bound(info))

        stepperEmitted(stepper.initialStep, binding: binding)
        stepper.steps.subscribe(binding, of: self)
        stepper.readyToEmitSteps()
    }

    private func unbind(_ binding: StepperBinding, reason: UnbindReason) {
        guard binding.isActive else { return }
        binding.isActive = false
        // A remote binding has no stepper to unsubscribe from: its subscription, if its
        // stand-in still lives, delivers nothing once the binding is inactive.
        binding.stepper?.steps.unsubscribe(binding)
        let stepperID = binding.stepperID
        if steppers[stepperID]?.remove(binding) == true, let first = steppers[stepperID]?.first {
            // The stepper id's counts outlive this binding while the id stays bound.
            first.counters.add(binding.counters)
            binding.counters = StepperCounters()
        } else {
            steppers.removeValue(forKey: stepperID)
            sortedStepperIDs = nil
            if binding.isRemote {
                tombstones[stepperID] = binding.info
                tombstoneOrder.append(stepperID)
                if tombstoneOrder.count > tombstoneLimit {
                    tombstones.removeValue(forKey: tombstoneOrder.removeFirst())
                }
            }
        }
        binding.flow?.bindings.removeAll { $0 === binding }
        emit(.unbound(binding.info, reason: reason))
    }

    /// Ends a flow: children first, then its bindings; removes it from its parent. Its tree
    /// nodes are left where they are (RXFLOW.md rule 9: `.end` does not dismiss UI by itself).
    private func endFlow(_ record: FlowRecord, reason: FlowEndReason) {
        guard record.isActive else { return }
        record.isActive = false
        for child in record.children { endFlow(child, reason: .parentEnded) }
        record.children.removeAll()
        for binding in record.bindings { unbind(binding, reason: .flowEnded) }
        record.bindings.removeAll()
        record.readinessGroups.removeAll()
        record.readinessMembers.removeAll()
        if let parent = record.parent {
            parent.children.removeAll { $0 === record }
        } else {
            roots.removeAll { $0 === record }
        }
        recordsByObject.removeValue(forKey: ObjectIdentifier(record.flow))
        recordsByID.removeValue(forKey: record.id)
        let node = record.flow.navigationNode
        if flowRoots[ObjectIdentifier(node)] == record.id { flowRoots.removeValue(forKey: ObjectIdentifier(node)) }
        emit(.command(NavigationCommand(verb: .end, target: node.presentableID, kind: node.kind, flow: record.id)))
        emit(.flowEnded(flow: record.id, reason: reason))
    }

    /// Dismissed nodes unbind their presentable steppers (unless allowStepWhenDismissed) and
    /// end the flows rooted at them (unless the flow allows steps when dismissed) — rule 10:
    /// nothing is forwarded to the parent.
    private func flushDismissals() {
        guard !deferDismissals else { return }
        while !pendingDismissals.isEmpty {
            let nodes = pendingDismissals
            pendingDismissals.removeAll()
            let dismissed = Set(nodes.map { ObjectIdentifier($0) })
            for node in nodes { forget(node) }
            var affected: [(stepperID: String, position: Int, binding: StepperBinding)] = []
            for (stepperID, slot) in steppers {
                for (position, binding) in slot.enumerated()
                where binding.isActive && binding.role == .presentableStepper
                    && !binding.allowStepWhenDismissed
                    && dismissed.contains(ObjectIdentifier(binding.node))
                {
                    affected.append((stepperID, position, binding))
                }
            }
            // In an order that does not depend on the dictionary's: a replay or a restored
            // checkpoint must publish the same events in the same order.
            affected.sort { ($0.stepperID, $0.position) < ($1.stepperID, $1.position) }
            for entry in affected { unbind(entry.binding, reason: .presentableDismissed) }
            for node in nodes {
                guard let flowID = flowRoots[ObjectIdentifier(node)], let record = recordsByID[flowID], record.isActive,
                    !record.allowStepWhenDismissed
                else { continue }
                endFlow(record, reason: .dismissed)
            }
        }
    }

    private func liveNodes(_ presentableID: String) -> [NavigationNode] {
        if nodesByID == nil { nodesByID = indexNodes() }
        guard let entries = nodesByID?[presentableID] else { return [] }
        let live = entries.filter { !$0.isDismissed }
        // A node dismissed outside its host's sight must not stay referenced here.
        if live.isEmpty {
            nodesByID?.removeValue(forKey: presentableID)
        } else if live.count < entries.count {
            nodesByID?[presentableID] = InlineFirstArray(live)
        }
        return live
    }

    /// Every hosted, undismissed node by presentable id: the trees of the flows, in pre-order,
    /// flows in pre-order.
    private func indexNodes() -> [String: InlineFirstArray<NavigationNode>] {
        var index: [String: InlineFirstArray<NavigationNode>] = [:]
        var seen = Set<ObjectIdentifier>()
        func visit(_ record: FlowRecord) {
            for node in record.flow.navigationNode.subtree
            where node.host === self && !node.isDismissed && seen.insert(ObjectIdentifier(node)).inserted {
                index[node.presentableID, default: InlineFirstArray()].append(node)
            }
            record.children.forEach(visit)
        }
        roots.forEach(visit)
        return index
    }

    private func forget(_ node: NavigationNode) {
        nodesByID?[node.presentableID]?.removeAll { $0 === node }
        if nodesByID?[node.presentableID]?.isEmpty == true { nodesByID?.removeValue(forKey: node.presentableID) }
    }
}

/// What became of an input handed to ``FlowCoordinator/receiveNow(_:from:)`` or
/// ``FlowCoordinator/navigateNow(to:)``.
@FlowActor
public enum StepProgress {
    /// Processed with everything it caused; what became of it in each flow.
    case done([StepOutcome])
    /// A flow's `adapt` must be awaited: the rest is processed asynchronously.
    case pending(Pending)

    /// An input whose processing continues asynchronously.
    @FlowActor
    public struct Pending {
        fileprivate let coordinator: FlowCoordinator
        fileprivate let ticket: Ticket

        /// Waits until the input and everything it caused are processed.
        public func outcomes() async -> [StepOutcome] {
            await coordinator.finish(ticket)
            return ticket.outcomes
        }
    }
}

extension FlowCoordinator {
    fileprivate func finish(_ ticket: Ticket) async {
        await wait(for: ticket)
    }
}

/// What the nodes of its tree tell the coordinator.
extension FlowCoordinator {
    func navigationNodeAttached(_ node: NavigationNode) {
        guard nodesByID != nil, nodesByID?[node.presentableID]?.contains(where: { $0 === node }) != true else { return }
        nodesByID?[node.presentableID, default: InlineFirstArray()].append(node)
    }

    func navigationCommand(_ command: NavigationCommand) {
        var command = command
        command.flow = currentFlow
        emit(.command(command))
    }

    func navigationNodesDismissed(_ nodes: [NavigationNode]) {
        pendingDismissals.append(contentsOf: nodes)
        flushDismissals()
    }

    func navigationError(_ message: String, presentableID: String) {
        diagnose(.flowError, message, flow: currentFlow, presentableID: presentableID)
    }
}
