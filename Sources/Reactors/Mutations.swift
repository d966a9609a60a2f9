/// What ``Reactor/mutate(action:)`` returns: the mutations one action produces, over time.
///
/// `Mutations` plays the role of ReactorKit's `Observable<Mutation>`, but it is a description,
/// not a running stream: the ``ReactorStore`` interprets it. That lets the store tell the
/// *synchronous* part (`just`, `sequence` of an array, `none`, and the leading synchronous
/// members of a `concat`) from the *asynchronous* part (`run`, `sequence` of an
/// `AsyncSequence`): the synchronous part is reduced at once, inside the call that sent the
/// action (rule 4); the asynchronous part runs in a task the store owns and can cancel.
///
/// ```swift
/// func mutate(action: Action) -> Mutations<Mutation> {
///     switch action {
///     case .increase:
///         return .concat(
///             .just(.setLoading(true)),           // reduced within `send`
///             .run { send in                      // runs in a task
///                 try await api.increment()
///                 send(.increaseValue)
///             },
///             .just(.setLoading(false))           // after the task part
///         )
///         .cancellable(id: "counter", cancelInFlight: true)
///     case .stop:
///         return .cancel(id: "counter")
///     }
/// }
/// ```
///
/// Streams returned for different actions are **merged**: a slow stream never holds back the
/// next action. Nothing is cancelled unless asked (``cancellable(id:cancelInFlight:)``,
/// ``cancel(id:)``, ``ReactorStore/cancel(id:)``) or the store shuts down. An error thrown by an
/// asynchronous part ends that stream only; the reactor lives on (rule 1).
public struct Mutations<Element: Sendable>: Sendable {
    // Only the case that holds a node is indirect: one mutation, the common case, is no box.
    @usableFromInline
    enum Node: Sendable {
        case one(Element)
        case values([Element])
        case operation(@Sendable (MutationSender<Element>) async throws -> Void)
        case concat([Node])
        case merge([Node])
        indirect case cancellable(id: CancelID, cancelInFlight: Bool, Node)
        case cancel([CancelID])
        /// Stands for "every stream `mutate(action:)` returns", inside
        /// ``Reactor/transform(mutation:)``. `transform` maps each such mutation (input: the
        /// reactor's `Mutation`; output: this node's `Element`; nil drops it). Type-erased
        /// because `map` may change the element type on the way.
        case upstream(transform: (@Sendable (Any) -> Any?)?)
    }

    @usableFromInline let node: Node

    @usableFromInline init(node: Node) { self.node = node }
}

// MARK: - Building

extension Mutations {
    /// No mutation: the action changes nothing (ReactorKit's `.empty()`).
    @inlinable public static var none: Mutations { Mutations(node: .values([])) }

    /// One mutation, reduced synchronously.
    @inlinable public static func just(_ mutation: Element) -> Mutations {
        Mutations(node: .one(mutation))
    }

    /// Several mutations in order, all reduced synchronously.
    @inlinable public static func sequence(_ mutations: [Element]) -> Mutations {
        Mutations(node: .values(mutations))
    }

    /// Asynchronous work that sends any number of mutations over time.
    ///
    /// The closure runs in a task owned by the store. Each `send(_:)` is delivered in order;
    /// the stream ends when the closure returns, throws (the error ends this stream only and is
    /// reported to the store's failure handler) or is cancelled. After cancellation, mutations
    /// the closure still sends are dropped.
    ///
    /// - Parameter operation: The work; `send` delivers one mutation.
    public static func run(
        _ operation: @escaping @Sendable (_ send: MutationSender<Element>) async throws -> Void
    ) -> Mutations {
        Mutations(node: .operation(operation))
    }

    /// Mutations produced by an asynchronous sequence; its end or error ends this stream only.
    ///
    /// - Parameter sequence: Any sendable asynchronous sequence of mutations.
    public static func sequence<S: AsyncSequence & Sendable>(_ sequence: S) -> Mutations
    where S.Element == Element {
        Mutations(
            node: .operation { send in
                for try await mutation in sequence {
                    try Task.checkCancellation()
                    send(mutation)
                }
            })
    }

    /// Runs each member after the previous one ended (RxSwift's `concat`).
    ///
    /// Leading members that are synchronous are reduced within `send`; the rest runs in order in
    /// one task.
    public static func concat(_ members: [Mutations]) -> Mutations {
        Mutations(node: .concat(members.map { $0.node }))
    }

    /// Runs each member after the previous one ended (RxSwift's `concat`).
    public static func concat(_ members: Mutations...) -> Mutations { concat(members) }

    /// Runs all members at once and interleaves their mutations (RxSwift's `merge`).
    ///
    /// Synchronous members are reduced within `send`, in argument order; each asynchronous
    /// member runs in its own task.
    public static func merge(_ members: [Mutations]) -> Mutations {
        Mutations(node: .merge(members.map { $0.node }))
    }

    /// Runs all members at once and interleaves their mutations (RxSwift's `merge`).
    public static func merge(_ members: Mutations...) -> Mutations { merge(members) }

    /// Cancels every in-flight stream tagged with `id`. Produces no mutation.
    ///
    /// The cancellation happens when the store interprets this value: for a direct return of
    /// `mutate(action:)`, before the next action is processed. Mutations a cancelled stream had
    /// already sent but that were not reduced yet are dropped.
    public static func cancel(id: some Hashable & Sendable) -> Mutations {
        Mutations(node: .cancel([CancelID(id)]))
    }

    /// Cancels every in-flight stream tagged with any of `ids`. Produces no mutation.
    public static func cancel(ids: [any Hashable & Sendable]) -> Mutations {
        Mutations(node: .cancel(ids.map { CancelID(erasing: $0) }))
    }
}

// MARK: - Modifying

extension Mutations {
    /// Tags the asynchronous part of these mutations with a cancellation id.
    ///
    /// - Parameters:
    ///   - id: Any hashable value (an enum case, a string). Several streams may share an id.
    ///   - cancelInFlight: When true, streams already running under `id` are cancelled before
    ///     this one starts ("latest wins", RxSwift's `flatMapLatest`).
    public func cancellable(
        id: some Hashable & Sendable, cancelInFlight: Bool = false
    )
        -> Mutations
    {
        Mutations(node: .cancellable(id: CancelID(id), cancelInFlight: cancelInFlight, node))
    }

    /// Transforms every mutation.
    public func map<T: Sendable>(_ transform: @escaping @Sendable (Element) -> T) -> Mutations<T> {
        compactMap(transform)
    }

    /// Transforms every mutation and drops those for which `transform` returns nil.
    public func compactMap<T: Sendable>(
        _ transform: @escaping @Sendable (Element) -> T?
    )
        -> Mutations<T>
    {
        Mutations<T>(node: Self.convert(node, transform))
    }

    private static func convert<T: Sendable>(
        _ node: Node, _ transform: @escaping @Sendable (Element) -> T?
    ) -> Mutations<T>.Node {
        switch node {
        case .one(let value):
            return transform(value).map { .one($0) } ?? .values([])
        case .values(let values):
            return .values(values.compactMap(transform))
        case .operation(let operation):
            return .operation { send in
                try await operation(
                    MutationSender { element in
                        if let mapped = transform(element) { send(mapped) }
                    })
            }
        case .concat(let members):
            return .concat(members.map { convert($0, transform) })
        case .merge(let members):
            return .merge(members.map { convert($0, transform) })
        case .cancellable(let id, let cancelInFlight, let member):
            return .cancellable(id: id, cancelInFlight: cancelInFlight, convert(member, transform))
        case .cancel(let ids):
            return .cancel(ids)
        case .upstream(let previous):
            return .upstream { mutation in
                let stage: Any? = previous.map { $0(mutation) } ?? mutation
                return (stage as? Element).flatMap(transform)
            }
        }
    }
}

// MARK: - Inspecting

extension Mutations.Node {
    /// True when interpreting this node needs no task: no `run`, no async sequence.
    @usableFromInline var isSynchronous: Bool {
        switch self {
        case .one, .values, .cancel, .upstream: return true
        case .operation: return false
        case .concat(let members), .merge(let members): return members.allSatisfy(\.isSynchronous)
        case .cancellable(_, _, let member): return member.isSynchronous
        }
    }

    /// The transform of the first placeholder for mutate's streams, if there is one.
    var upstream: (found: Bool, transform: (@Sendable (Any) -> Any?)?) {
        switch self {
        case .one, .values, .cancel, .operation: return (false, nil)
        case .upstream(let transform): return (true, transform)
        case .concat(let members), .merge(let members):
            for member in members {
                let found = member.upstream
                if found.found { return found }
            }
            return (false, nil)
        case .cancellable(_, _, let member): return member.upstream
        }
    }
}

// MARK: - Sending

/// The `send` handed to ``Mutations/run(_:)``: delivers one mutation to the store.
///
/// Calling it never blocks and never suspends. It is safe to call from any task; mutations sent
/// by one stream are reduced in the order they were sent.
public struct MutationSender<Element: Sendable>: Sendable {
    let deliver: @Sendable (Element) -> Void

    init(_ deliver: @escaping @Sendable (Element) -> Void) { self.deliver = deliver }

    /// Delivers `mutation` to the store.
    public func callAsFunction(_ mutation: Element) { deliver(mutation) }
}

// MARK: - Cancellation ids

/// A type-erased cancellation id (see ``Mutations/cancellable(id:cancelInFlight:)``).
@usableFromInline
struct CancelID: Hashable, @unchecked Sendable {
    // `AnyHashable` is not declared Sendable; every value stored here came in as
    // `some Hashable & Sendable`, which makes the box safe to share.
    let base: AnyHashable

    init(_ id: some Hashable & Sendable) { base = AnyHashable(id) }

    init(erasing id: any Hashable & Sendable) { base = AnyHashable(id) }
}
