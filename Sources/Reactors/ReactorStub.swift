/// The test side of a stubbed ``ReactorStore`` (rule 7): read the actions a view sent, set the
/// states it should render.
///
/// ```swift
/// let store = ReactorStore(stubbing: CounterReactor())
/// view.bind(store)
/// view.tapIncrease()
/// #expect(store.stub.actions == [.increase])
/// store.stub.state = .init(value: 7, isLoading: false)   // emitted to the view, sequence 1
/// ```
public struct ReactorStub<R: Reactor>: Sendable {
    let store: ReactorStore<R>

    /// Every action sent to the store, in order (before any transform; mutate never runs).
    public var actions: [R.Action] { store.withStubActions { $0 } }

    /// The last action sent, if any.
    public var lastAction: R.Action? { store.withStubActions(\.last) }

    /// The current state. Setting it emits the state to every observer with the next sequence
    /// number and updates ``ReactorStore/currentState`` (at once if the store is idle).
    public var state: R.State {
        get { store.currentState }
        nonmutating set { store.enqueue(.stubState(newValue)) }
    }

    /// Emits `state`, as setting ``state`` does.
    public func setState(_ state: R.State) { store.enqueue(.stubState(state)) }
}

extension ReactorStore {
    /// The stub controls of a store created with ``init(stubbing:)``.
    ///
    /// - Precondition: ``isStubbed`` is true.
    public var stub: ReactorStub<R> {
        precondition(isStubbed, "ReactorStore.stub used on a store not created with init(stubbing:)")
        return ReactorStub(store: self)
    }
}
