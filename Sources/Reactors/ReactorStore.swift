import Dispatch
import Synchronization

/// Runs one reactor instance: queues its actions, interprets its mutations, reduces its state,
/// and delivers every state, with its sequence number, to observers and subscribers.
///
/// ## The serial context
///
/// Each store has exactly one serial context, its *drain*. Everything that touches the state
/// runs there, one item at a time, in FIFO order: `transform(action:)`, `mutate(action:)`,
/// `reduce`, `transform(state:)`, the update of ``currentState``, and the calls to observers
/// (``observe(_:)``, and the `yield` into every ``states()``/``snapshots()``/``pulse(_:)``
/// stream). The drain has no thread of its own: whoever enqueues work while the store is idle
/// (a `send` caller, a mutation task delivering a mutation) runs the drain on its own thread
/// until the queue is empty; work enqueued meanwhile from anywhere, including from inside the
/// drain (re-entrancy), is appended to the queue and runs after the current item. A mutex hands
/// the drain from one thread to the next, so each item sees all effects of the previous ones.
///
/// ## Ordering guarantees
///
/// - Actions are processed in the order they were enqueued (FIFO), one at a time.
/// - The synchronous part of an action's mutations (see ``Mutations``) is reduced while that
///   action is processed, before the next queued item.
/// - Mutations sent by one asynchronous stream are reduced in the order sent; streams of
///   different actions are merged (interleaved in arrival order).
/// - Each reduced mutation emits exactly one state (no de-duplication), numbered
///   1, 2, 3, … after the initial state's 0. ``currentState`` is updated before any observer
///   sees the state, and every observer sees every state in sequence order.
/// - An action sent from `reduce` or from an observer runs after the current emission has
///   reached every observer.
///
/// ## What "within send" means (rule 4)
///
/// ``send(_:)`` never waits for other work. If the store is idle, the caller runs the drain
/// itself, so when `send` returns the action's synchronous mutations are reduced, emitted and
/// visible in ``currentState``. If another thread is draining at that moment (or `send` is
/// called from inside the drain), the action is queued and `send` returns at once.
/// ``sendAndWait(_:)`` gives the guarantee in every case: it returns once the action itself
/// was processed (its synchronous mutations reduced; asynchronous parts started).
///
/// ## Lifetime (rule 8)
///
/// The store owns every task it starts (mutation streams, external streams from
/// `transform(mutation:)`, bound action sources) and holds none of them strongly in the other
/// direction. ``shutdown()``, or releasing the last reference to the store, cancels them all
/// and finishes every state stream. Nothing else is cancelled automatically.
public final class ReactorStore<R: Reactor>: Sendable {
    /// The reactor this store runs.
    public let reactor: R

    /// True for a store created with ``init(stubbing:)``.
    public let isStubbed: Bool

    // The action path below is inlinable so that it is specialized for the concrete reactor where
    // one is registered: unspecialized, each call would look up the metadata of `Work`, `Core` and
    // their tuples at run time.
    @usableFromInline let core: Mutex<Core>
    @usableFromInline let mutateIsConnected: Bool
    @usableFromInline let mutateTransform: (@Sendable (Any) -> Any?)?
    @usableFromInline let failureHandler: (@Sendable (any Error) -> Void)?
    @usableFromInline let mutationHandler: (@Sendable (R.Mutation) -> Void)?

    /// Creates a store for `reactor`, connected at once (hot, rule 1).
    ///
    /// The initial state, after `transform(state:)`, is the current state with sequence 0.
    /// `transform(mutation:)` is called now; external streams it merges start now.
    ///
    /// - Parameters:
    ///   - reactor: The reactor to run.
    ///   - onMutationFailure: Called, in the serial context, with the error that ended a
    ///     mutation stream or a bound action source (cancellation is not a failure). The
    ///     reactor lives on either way; this is where a host counts and logs it.
    ///   - onMutation: Called, in the serial context, with each mutation once it is reduced,
    ///     before the state it made is emitted (where a host traces mutations).
    public convenience init(
        _ reactor: R, onMutationFailure: (@Sendable (any Error) -> Void)? = nil,
        onMutation: (@Sendable (R.Mutation) -> Void)? = nil
    ) {
        let initialState = reactor.initialState
        self.init(
            reactor, reducedState: initialState,
            current: StateSnapshot(sequence: 0, state: reactor.transform(state: initialState)),
            onMutationFailure: onMutationFailure, onMutation: onMutation)
    }

    /// Creates a store for `reactor` that resumes from a state saved earlier (a reactor host
    /// restarting from its persisted state), connected at once.
    ///
    /// `restored` becomes the current state with its sequence, and the state `reduce` continues
    /// from: the next reduced mutation emits sequence `restored.sequence + 1`. The restored state
    /// is taken as it was emitted (after `transform(state:)`), so the transform is not applied to
    /// it again; `initialState` is not used. `transform(mutation:)` is called now, as for
    /// ``init(_:onMutationFailure:onMutation:)``.
    ///
    /// - Parameters:
    ///   - reactor: The reactor to run.
    ///   - restored: The state to resume from, with its sequence.
    ///   - onMutationFailure, onMutation: As for ``init(_:onMutationFailure:onMutation:)``.
    public convenience init(
        _ reactor: R, restoring restored: StateSnapshot<R.State>,
        onMutationFailure: (@Sendable (any Error) -> Void)? = nil,
        onMutation: (@Sendable (R.Mutation) -> Void)? = nil
    ) {
        self.init(
            reactor, reducedState: restored.state, current: restored, onMutationFailure: onMutationFailure,
            onMutation: onMutation)
    }

    private init(
        _ reactor: R, reducedState: R.State, current: StateSnapshot<R.State>,
        onMutationFailure: (@Sendable (any Error) -> Void)?, onMutation: (@Sendable (R.Mutation) -> Void)?
    ) {
        self.reactor = reactor
        self.isStubbed = false
        self.failureHandler = onMutationFailure
        self.mutationHandler = onMutation
        self.core = Mutex(Core(reducedState: reducedState, current: current))
        let root = reactor.transform(mutation: Mutations(node: .upstream(transform: nil))).node
        let upstream = root.upstream
        self.mutateIsConnected = upstream.found
        self.mutateTransform = upstream.transform
        enqueue(.external(root))
    }

    /// Creates a stubbed store, for testing views (rule 7).
    ///
    /// `mutate`, `reduce` and the transforms never run. Every action sent is recorded in
    /// ``ReactorStub/actions``; states are set with ``ReactorStub/state``. The current state
    /// starts as the reactor's `initialState`, sequence 0.
    public init(stubbing reactor: R) {
        self.reactor = reactor
        self.isStubbed = true
        self.failureHandler = nil
        self.mutationHandler = nil
        self.mutateIsConnected = false
        self.mutateTransform = nil
        let initialState = reactor.initialState
        self.core = Mutex(
            Core(reducedState: initialState, current: StateSnapshot(sequence: 0, state: initialState))
        )
    }

    deinit { shutdown() }

    // MARK: State

    /// The latest state. Updated in the serial context before observers see it.
    public var currentState: R.State { core.withLock { $0.current.state } }

    /// The latest state with its sequence number.
    public var currentSnapshot: StateSnapshot<R.State> { core.withLock { $0.current } }

    /// True once ``shutdown()`` ran.
    public var isShutDown: Bool { core.withLock(\.isShutDown) }

    /// True while work of an action is not finished: an action or mutation is queued or being
    /// processed, or a mutation stream returned by `mutate` (or a part of it) is still running.
    /// External streams merged in `transform(mutation:)` do not count (they may never end).
    ///
    /// A host stopping gracefully polls this to let in-flight actions finish within a bound
    /// before it saves the state and shuts the store down.
    public var hasWorkInFlight: Bool {
        core.withLock { core in
            core.isDraining || core.head < core.queue.count || core.streams.values.contains { $0.fromMutate }
        }
    }

    // MARK: Actions

    /// Sends an action. Never waits; see the type's discussion for when the action has been
    /// processed on return. Dropped after ``shutdown()``.
    @inlinable
    public func send(_ action: R.Action) {
        enqueue(.action(action, waiter: nil))
    }

    /// Sends an action and returns once it was processed: `transform(action:)` and `mutate` ran,
    /// its synchronous mutations were reduced and emitted to every observer, and its
    /// asynchronous parts were started. Returns at once after ``shutdown()``.
    public func sendAndWait(_ action: R.Action) async {
        await withCheckedContinuation { (waiter: CheckedContinuation<Void, Never>) in
            enqueue(.action(action, waiter: .task(waiter)))
        }
    }

    /// Sends an action and blocks the calling thread until it was processed, as
    /// ``sendAndWait(_:)`` does: for a host's own thread, which must know an action's synchronous
    /// states were emitted before it saves them (another thread may be draining the store's work,
    /// so that ``send(_:)`` only queues it). Never call it from the cooperative pool or from the
    /// store's serial context. `semaphore` is the caller's, at 0, used by one thread at a time.
    public func send(_ action: R.Action, blockingOn semaphore: DispatchSemaphore) {
        enqueue(.action(action, waiter: .thread(semaphore)))
        semaphore.wait()
    }

    /// Sends every element of `actions` to the store (a view's `bind(to: reactor.action)`).
    ///
    /// The end of the sequence, or an error it throws, ends only this binding: the store lives
    /// on (rule 2). An error is reported to the failure handler. The binding holds the store
    /// weakly and ends when the store shuts down.
    ///
    /// - Parameter actions: Any sendable asynchronous sequence of actions.
    /// - Returns: A handle to end the binding early.
    @discardableResult
    public func bind<S: AsyncSequence & Sendable>(actions: S) -> ReactorSubscription
    where S.Element == R.Action {
        let handle = CancellationHandle()
        guard let key = core.withLock({ $0.register(binding: handle) }) else {
            handle.cancel()
            return ReactorSubscription(handle)
        }
        let task = Task { [weak self] in
            do {
                for try await action in actions {
                    if handle.isCancelled { break }
                    self?.send(action)
                }
            } catch  where !(error is CancellationError) {
                self?.enqueue(.failure(error))
            } catch {}
            _ = self?.core.withLock { $0.bindings.removeValue(forKey: key) }
        }
        handle.attach { task.cancel() }
        return ReactorSubscription(handle)
    }

    // MARK: Cancellation

    /// Cancels every in-flight mutation stream tagged with `id` (see
    /// ``Mutations/cancellable(id:cancelInFlight:)``). Mutations those streams sent that were
    /// not reduced yet are dropped. Callable from anywhere, including the serial context.
    public func cancel(id: some Hashable & Sendable) {
        cancel(CancelID(id))
    }

    /// Ends everything: cancels every mutation stream and external stream, ends every action
    /// binding, finishes every state stream, drops queued work and ignores later actions.
    /// Idempotent; also done when the store is released. The state stays readable.
    public func shutdown() {
        let leftovers = core.withLock { $0.shutDown() }
        for stream in leftovers.streams { stream.handle.cancel() }
        for binding in leftovers.bindings { binding.cancel() }
        for observer in leftovers.observers { observer.onFinish?() }
        for waiter in leftovers.waiters { waiter.resume() }
    }

    // MARK: Observing

    /// Calls `observer` with the current snapshot, then with every later one, in order, in the
    /// serial context (the host's hook for publishing states without an extra hop).
    ///
    /// The first call happens when the registration reaches the front of the queue: at once if
    /// the store is idle. There is no gap and no duplicate between that replay and the live
    /// states. The observer must not block; it may send actions (they are queued).
    ///
    /// - Returns: A handle to stop observing.
    @discardableResult
    public func observe(
        _ observer: @escaping @Sendable (StateSnapshot<R.State>) -> Void
    )
        -> ReactorSubscription
    {
        let handle = CancellationHandle()
        let id = addObserver(Observer(onState: observer, onFinish: { handle.cancel() }))
        handle.attach { [weak self] in self?.removeObserver(id) }
        return ReactorSubscription(handle)
    }

    /// A new subscription to the states: the current state first (replay, rule 3), then every
    /// later state, without de-duplication. Finishes when the store shuts down; ending the
    /// iteration (or its task) unsubscribes. Unbounded buffer: a slow consumer misses nothing.
    public func states() -> AsyncStream<R.State> {
        stream { $0.state }
    }

    /// Like ``states()``, with each state's sequence number.
    public func snapshots() -> AsyncStream<StateSnapshot<R.State>> {
        stream { $0 }
    }

    /// The values of a ``Pulse`` field: the current value once, then the value at each later
    /// assignment (even of an equal value), never on unrelated mutations (rule 6).
    ///
    /// - Parameter keyPath: The pulse's projected value, e.g. `\.$alertMessage`.
    public func pulse<Value: Sendable>(
        _ keyPath: any KeyPath<R.State, Pulse<Value>> & Sendable
    )
        -> AsyncStream<Value>
    {
        let tracker = PulseTracker()
        return stream { snapshot in
            let pulse = snapshot.state[keyPath: keyPath]
            return tracker.isNew(pulse.updateCount) ? pulse.value : nil
        }
    }

    private func stream<Element: Sendable>(
        _ transform: @escaping @Sendable (StateSnapshot<R.State>) -> Element?
    ) -> AsyncStream<Element> {
        let (stream, continuation) = AsyncStream<Element>.makeStream()
        let id = addObserver(
            Observer(
                onState: { snapshot in
                    if let element = transform(snapshot) { continuation.yield(element) }
                },
                onFinish: { continuation.finish() }))
        continuation.onTermination = { [weak self] _ in self?.removeObserver(id) }
        return stream
    }

    private func addObserver(_ observer: Observer) -> UInt64 {
        guard let id = core.withLock({ $0.reserveObserverID() }) else {
            observer.onFinish?()
            return 0
        }
        enqueue(.addObserver(id: id, observer))
        return id
    }

    private func removeObserver(_ id: UInt64) {
        core.withLock { $0.removeObserver(id) }
    }

    func withStubActions<T: Sendable>(_ body: ([R.Action]) -> T) -> T {
        core.withLock { body($0.stubActions) }
    }
}

// MARK: - The drain

extension ReactorStore {
    @usableFromInline typealias Node = Mutations<R.Mutation>.Node

    /// Who waits for an action to be processed.
    @usableFromInline
    enum Waiter: Sendable {
        case task(CheckedContinuation<Void, Never>)
        case thread(DispatchSemaphore)

        @usableFromInline
        func resume() {
            switch self {
            case .task(let continuation): continuation.resume()
            case .thread(let semaphore): semaphore.signal()
            }
        }
    }

    @usableFromInline
    enum Work: Sendable {
        case action(R.Action, waiter: Waiter?)
        case mutation(R.Mutation, MutationStream)
        case external(Node)
        case stubState(R.State)
        case addObserver(id: UInt64, Observer)
        case failure(any Error)
    }

    @usableFromInline
    struct Observer: Sendable {
        @usableFromInline let onState: @Sendable (StateSnapshot<R.State>) -> Void
        @usableFromInline let onFinish: (@Sendable () -> Void)?
    }

    @inlinable
    func enqueue(_ work: Work) {
        switch core.withLock({ $0.enqueue(work) }) {
        case .queued:
            return
        case .drain:
            // The store was idle: this work goes first, without passing through the queue.
            process(work)
            drain()
        case .refused:
            if case .action(_, let waiter?) = work { waiter.resume() }
            if case .addObserver(_, let observer) = work { observer.onFinish?() }
        }
    }

    @inlinable
    func drain() {
        while let work = core.withLock({ $0.next() }) {
            process(work)
        }
    }

    @inlinable
    func process(_ work: Work) {
        switch work {
        case .action(let action, let waiter):
            handle(action)
            waiter?.resume()
        case .mutation(let mutation, let stream):
            guard !stream.isCancelled else { return }
            apply(mutation, fromMutate: stream.fromMutate)
        case .external(let root):
            interpret(root, ids: [], fromMutate: false)
        case .stubState(let state):
            emit(state, reducedFrom: state)
        case .addObserver(let id, let observer):
            if let snapshot = core.withLock({ $0.activate(id, observer) }) {
                observer.onState(snapshot)
            } else {
                // Removed, or the store shut down after this registration left the queue: its
                // stream still finishes (finishing twice is harmless).
                observer.onFinish?()
            }
        case .failure(let error):
            failureHandler?(error)
        }
    }

    @inlinable
    func handle(_ action: R.Action) {
        if isStubbed {
            core.withLock { $0.stubActions.append(action) }
            return
        }
        guard mutateIsConnected, let action = reactor.transform(action: action) else { return }
        let current = core.withLock { $0.current.state }
        interpret(reactor.mutate(action: action, currentState: current).node, ids: [], fromMutate: true)
    }

    @inlinable
    func apply(_ mutation: R.Mutation, fromMutate: Bool) {
        var mutation = mutation
        if fromMutate, let transform = mutateTransform {
            guard let transformed = transform(mutation) as? R.Mutation else { return }
            mutation = transformed
        }
        guard let previous = core.withLock({ $0.isShutDown ? nil : $0.reducedState }) else {
            return
        }
        let next = reactor.reduce(state: previous, mutation: mutation)
        mutationHandler?(mutation)
        emit(reactor.transform(state: next), reducedFrom: next)
    }

    /// Emits `state`, and sets `reduced`, the state `reduce` continues from, in the same lock.
    @inlinable
    func emit(_ state: R.State, reducedFrom reduced: R.State) {
        guard let (snapshot, observers) = core.withLock({ $0.emit(state, reducedFrom: reduced) }) else { return }
        for entry in observers { entry.observer.onState(snapshot) }
    }

    /// Interprets `node` in the serial context: synchronous parts are reduced now, each
    /// asynchronous part is started in its own task.
    @inlinable
    func interpret(_ node: Node, ids: [CancelID], fromMutate: Bool) {
        switch node {
        case .one(let mutation):
            apply(mutation, fromMutate: fromMutate)
        case .values(let mutations):
            for mutation in mutations { apply(mutation, fromMutate: fromMutate) }
        case .operation:
            start(node, ids: ids, fromMutate: fromMutate)
        case .concat(let members):
            let members = Self.flatten(members)
            let split = members.firstIndex { !$0.isSynchronous } ?? members.endIndex
            for member in members[..<split] {
                interpret(member, ids: ids, fromMutate: fromMutate)
            }
            if split < members.endIndex {
                start(.concat(Array(members[split...])), ids: ids, fromMutate: fromMutate)
            }
        case .merge(let members):
            for member in members { interpret(member, ids: ids, fromMutate: fromMutate) }
        case .cancellable(let id, let cancelInFlight, let member):
            if cancelInFlight { cancel(id) }
            interpret(member, ids: ids + [id], fromMutate: fromMutate)
        case .cancel(let ids):
            for id in ids { cancel(id) }
        case .upstream:
            break
        }
    }

    @usableFromInline
    static func flatten(_ members: [Node]) -> [Node] {
        members.flatMap { member -> [Node] in
            if case .concat(let inner) = member { return flatten(inner) }
            return [member]
        }
    }

    @usableFromInline
    func start(_ node: Node, ids: [CancelID], fromMutate: Bool) {
        guard let stream = register(ids: ids, parent: nil, fromMutate: fromMutate) else { return }
        let context = StreamContext(store: self)
        let task = Task {
            await context.run(node, in: stream)
            context.store?.unregister(stream)
        }
        stream.handle.attach { task.cancel() }
    }

    func register(ids: [CancelID], parent: MutationStream?, fromMutate: Bool) -> MutationStream? {
        core.withLock { $0.register(ids: ids, parent: parent, fromMutate: fromMutate) }
    }

    func unregister(_ stream: MutationStream) {
        core.withLock { $0.unregister(stream) }
    }

    @usableFromInline
    func cancel(_ id: CancelID) {
        let streams = core.withLock { $0.streams(for: id) }
        for stream in streams { stream.handle.cancel() }
    }

    /// Delivers a mutation from an asynchronous stream; dropped if the stream was cancelled.
    func deliver(_ mutation: R.Mutation, from stream: MutationStream) {
        guard !stream.isCancelled else { return }
        enqueue(.mutation(mutation, stream))
    }
}

// MARK: - Asynchronous interpretation

/// What a mutation task holds: a weak reference to the store, so that the task never keeps the
/// store alive (releasing the store cancels the task).
struct StreamContext<R: Reactor>: Sendable {
    typealias Node = Mutations<R.Mutation>.Node

    weak var store: ReactorStore<R>?

    /// Runs `node` to its end; reports a failure that was not a cancellation.
    func run(_ node: Node, in stream: MutationStream) async {
        do {
            try await execute(node, in: stream)
        } catch {
            if !stream.isCancelled && !(error is CancellationError) {
                store?.enqueue(.failure(error))
            }
        }
    }

    private func execute(_ node: Node, in stream: MutationStream) async throws {
        switch node {
        case .one(let mutation):
            try Task.checkCancellation()
            store?.deliver(mutation, from: stream)
        case .values(let mutations):
            for mutation in mutations {
                try Task.checkCancellation()
                store?.deliver(mutation, from: stream)
            }
        case .operation(let operation):
            let context = self
            try await operation(MutationSender { context.store?.deliver($0, from: stream) })
        case .concat(let members):
            for member in members { try await execute(member, in: stream) }
        case .merge(let members):
            try await withThrowingTaskGroup(of: Void.self) { group in
                for member in members {
                    group.addTask { try await execute(member, in: stream) }
                }
                try await group.waitForAll()
            }
        case .cancellable(let id, let cancelInFlight, let member):
            try await executeCancellable(
                member, id: id, cancelInFlight: cancelInFlight, parent: stream)
        case .cancel(let ids):
            for id in ids { store?.cancel(id) }
        case .upstream:
            break
        }
    }

    /// A cancellable part nested in an asynchronous stream: it runs as a child stream whose
    /// cancellation ends that part only; the enclosing stream then continues.
    private func executeCancellable(
        _ member: Node, id: CancelID, cancelInFlight: Bool, parent: MutationStream
    ) async throws {
        if cancelInFlight { store?.cancel(id) }
        guard
            let child = store?.register(ids: [id], parent: parent, fromMutate: parent.fromMutate)
        else { return }
        let context = self
        let task = Task { try await context.execute(member, in: child) }
        child.handle.attach { task.cancel() }
        defer { store?.unregister(child) }
        do {
            try await withTaskCancellationHandler {
                try await task.value
            } onCancel: {
                task.cancel()
            }
        } catch  where child.handle.isCancelled && !parent.isCancelled {
            // Cancelled by id: that part ends, the enclosing stream goes on.
        }
    }
}

// MARK: - Locked storage

extension ReactorStore {
    @usableFromInline
    enum EnqueueOutcome {
        case queued, drain, refused
    }

    struct Leftovers {
        var streams: [MutationStream] = []
        var bindings: [CancellationHandle] = []
        var observers: [Observer] = []
        var waiters: [Waiter] = []
    }

    @usableFromInline
    typealias Emission = (snapshot: StateSnapshot<R.State>, observers: [(id: UInt64, observer: Observer)])

    /// Everything the mutex protects. Only short, non-blocking bookkeeping runs under the lock;
    /// user code (reactor, observers) never does.
    @usableFromInline
    struct Core {
        @usableFromInline var reducedState: R.State
        @usableFromInline var current: StateSnapshot<R.State>
        @usableFromInline var isDraining = false
        @usableFromInline var isShutDown = false
        @usableFromInline var queue: [Work] = []
        @usableFromInline var head = 0
        @usableFromInline var observers: [(id: UInt64, observer: Observer)] = []
        var pendingObserverIDs: Set<UInt64> = []
        var nextKey: UInt64 = 1
        var streams: [UInt64: MutationStream] = [:]
        var streamKeysByID: [CancelID: Set<UInt64>] = [:]
        var bindings: [UInt64: CancellationHandle] = [:]
        @usableFromInline var stubActions: [R.Action] = []

        init(reducedState: R.State, current: StateSnapshot<R.State>) {
            self.reducedState = reducedState
            self.current = current
        }

        /// Queues `work`, unless the store is idle: then the caller drains, starting with `work`.
        @inlinable
        mutating func enqueue(_ work: Work) -> EnqueueOutcome {
            if isShutDown { return .refused }
            if isDraining {
                queue.append(work)
                return .queued
            }
            isDraining = true
            return .drain
        }

        /// The next item of the queue, or nil after marking the drain idle.
        @inlinable
        mutating func next() -> Work? {
            guard head < queue.count else {
                queue.removeAll(keepingCapacity: queue.capacity <= 256)
                head = 0
                isDraining = false
                return nil
            }
            let work = queue[head]
            head += 1
            if head >= 64 && head * 2 >= queue.count {
                queue.removeFirst(head)
                head = 0
            }
            return work
        }

        /// The new snapshot and the observers to give it: the list itself, shared (not a copy:
        /// an action's state reaches them without an allocation).
        @inlinable
        mutating func emit(_ state: R.State, reducedFrom reduced: R.State) -> Emission? {
            if isShutDown { return nil }
            reducedState = reduced
            current = StateSnapshot(sequence: current.sequence + 1, state: state)
            return (current, observers)
        }

        mutating func reserveObserverID() -> UInt64? {
            if isShutDown { return nil }
            let id = nextKey
            nextKey += 1
            pendingObserverIDs.insert(id)
            return id
        }

        /// Adds a pending observer and returns the snapshot to replay, unless it was removed
        /// before reaching the front of the queue.
        @usableFromInline
        mutating func activate(_ id: UInt64, _ observer: Observer) -> StateSnapshot<R.State>? {
            guard pendingObserverIDs.remove(id) != nil, !isShutDown else { return nil }
            observers.append((id, observer))
            return current
        }

        mutating func removeObserver(_ id: UInt64) {
            if pendingObserverIDs.remove(id) != nil { return }
            observers.removeAll { $0.id == id }
        }

        mutating func register(binding: CancellationHandle) -> UInt64? {
            if isShutDown { return nil }
            let key = nextKey
            nextKey += 1
            bindings[key] = binding
            return key
        }

        mutating func register(
            ids: [CancelID], parent: MutationStream?, fromMutate: Bool
        )
            -> MutationStream?
        {
            if isShutDown { return nil }
            let stream = MutationStream(
                key: nextKey, ids: ids, parent: parent, fromMutate: fromMutate)
            nextKey += 1
            streams[stream.key] = stream
            for id in ids { streamKeysByID[id, default: []].insert(stream.key) }
            return stream
        }

        mutating func unregister(_ stream: MutationStream) {
            streams.removeValue(forKey: stream.key)
            for id in stream.ids {
                streamKeysByID[id]?.remove(stream.key)
                if streamKeysByID[id]?.isEmpty == true { streamKeysByID.removeValue(forKey: id) }
            }
        }

        mutating func streams(for id: CancelID) -> [MutationStream] {
            guard let keys = streamKeysByID.removeValue(forKey: id) else { return [] }
            return keys.compactMap { streams[$0] }
        }

        mutating func shutDown() -> Leftovers {
            if isShutDown { return Leftovers() }
            isShutDown = true
            var leftovers = Leftovers()
            leftovers.streams = Array(streams.values)
            leftovers.bindings = Array(bindings.values)
            leftovers.observers = observers.map { $0.observer }
            for work in queue[head...] {
                switch work {
                case .action(_, let waiter?): leftovers.waiters.append(waiter)
                case .addObserver(_, let observer): leftovers.observers.append(observer)
                default: break
                }
            }
            queue.removeAll()
            head = 0
            streams.removeAll()
            streamKeysByID.removeAll()
            bindings.removeAll()
            observers.removeAll()
            pendingObserverIDs.removeAll()
            return leftovers
        }
    }
}

/// Remembers the last pulse update count a subscriber saw. Only touched in the serial context.
private final class PulseTracker: Sendable {
    private let last = Mutex<UInt64?>(nil)

    func isNew(_ count: UInt64) -> Bool {
        last.withLock { last in
            defer { last = count }
            return last != count
        }
    }
}
