/// A reactor: the business logic of one view, as `Action → Mutation → State`.
///
/// A reactor is a description; a ``ReactorStore`` runs it. The store calls every requirement
/// below in its serial context (one at a time, never concurrently, in a strict order), so a
/// reactor needs no locks of its own. It must still be `Sendable` because the serial context
/// is not tied to one thread.
///
/// ```swift
/// final class CounterReactor: Reactor {
///     enum Action: Sendable { case increase, decrease }
///     enum Mutation: Sendable { case increaseValue, decreaseValue, setLoading(Bool) }
///     struct State: Sendable { var value = 0; var isLoading = false }
///
///     let initialState = State()
///
///     func mutate(action: Action) -> Mutations<Mutation> {
///         switch action {
///         case .increase:
///             .concat(.just(.setLoading(true)), .run { send in
///                 try await Task.sleep(for: .milliseconds(500))
///                 send(.increaseValue)
///             }, .just(.setLoading(false)))
///         case .decrease:
///             .just(.decreaseValue)
///         }
///     }
///
///     func reduce(state: State, mutation: Mutation) -> State {
///         var state = state
///         switch mutation {
///         case .increaseValue: state.value += 1
///         case .decreaseValue: state.value -= 1
///         case .setLoading(let isLoading): state.isLoading = isLoading
///         }
///         return state
///     }
/// }
/// ```
///
/// The engine requires nothing of `Action` and `State` beyond `Sendable`; a process that hosts
/// reactors on the bus will additionally want `Action: Decodable` and `State: Encodable`.
public protocol Reactor: Sendable {
    /// What the view asks for (user interactions).
    associatedtype Action: Sendable
    /// A change to the state; the bridge between actions and state. Defaults to `Action`.
    associatedtype Mutation: Sendable = Action
    /// What the view renders.
    associatedtype State: Sendable

    /// The first state; it is emitted with sequence number 0.
    var initialState: State { get }

    /// Turns an action into mutations over time. Asynchronous work lives here.
    ///
    /// Default: ``Mutations/none``, or `.just(action)` when `Action == Mutation`.
    func mutate(action: Action) -> Mutations<Mutation>

    /// ``mutate(action:)`` with ReactorKit's `currentState`: the state after every mutation
    /// reduced so far (transformed, as ``ReactorStore/currentState``), read in the serial
    /// context, so no other action's mutation lands between the read and this call. Implement
    /// this one instead of ``mutate(action:)`` to decide from the state (`guard
    /// !currentState.isLoading else { return .none }`). Default: ``mutate(action:)``.
    func mutate(action: Action, currentState: State) -> Mutations<Mutation>

    /// Computes the next state. Pure and synchronous.
    ///
    /// Default: the state unchanged.
    func reduce(state: State, mutation: Mutation) -> State

    /// Rewrites or drops an action before ``mutate(action:)`` (nil drops it).
    ///
    /// Unlike ReactorKit this hook sees one action at a time; operators over the whole action
    /// stream (debounce, startWith, merging other sources) belong in the sequences you bind with
    /// ``ReactorStore/bind(actions:)``. Default: the action itself.
    func transform(action: Action) -> Action?

    /// Rewrites the mutation stream; the place to merge global event streams (rule 9).
    ///
    /// Called once, when the store is created. `mutation` stands for every stream
    /// ``mutate(action:)`` will return; merge other sources with it:
    ///
    /// ```swift
    /// func transform(mutation: Mutations<Mutation>) -> Mutations<Mutation> {
    ///     .merge(mutation, .sequence(session.userEvents.map { .setUser($0) }))
    /// }
    /// ```
    ///
    /// Everything in the returned value except `mutation` starts when the store is created and
    /// runs until it shuts down. `map`/`compactMap` applied to `mutation` apply to each mutation
    /// mutate produces. Leaving `mutation` out of the result drops mutate's output (and mutate is
    /// then never called), as in ReactorKit. Default: `mutation`.
    func transform(mutation: Mutations<Mutation>) -> Mutations<Mutation>

    /// Rewrites each state after ``reduce(state:mutation:)`` and before it becomes
    /// ``ReactorStore/currentState`` and is emitted (the initial state included).
    ///
    /// As in ReactorKit, `reduce` keeps working on its own result: the next `reduce` receives
    /// the untransformed previous state. Default: the state itself.
    func transform(state: State) -> State
}

extension Reactor {
    public func mutate(action: Action) -> Mutations<Mutation> { .none }

    public func mutate(action: Action, currentState: State) -> Mutations<Mutation> { mutate(action: action) }

    public func reduce(state: State, mutation: Mutation) -> State { state }

    public func transform(action: Action) -> Action? { action }

    public func transform(mutation: Mutations<Mutation>) -> Mutations<Mutation> { mutation }

    public func transform(state: State) -> State { state }
}

extension Reactor where Action == Mutation {
    /// Default when actions are their own mutations: the action itself, reduced at once.
    public func mutate(action: Action) -> Mutations<Mutation> { .just(action) }
}
