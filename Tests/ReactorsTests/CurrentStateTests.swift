import Reactors
import Testing

/// Ignores `add` while loading, deciding from the state mutate reads (ReactorKit's currentState).
private struct GuardedCounter: Reactor {
    enum Action: Sendable { case add, startLoading }
    enum Mutation: Sendable {
        case increment
        case setLoading(Bool)
    }
    struct State: Sendable, Equatable {
        var value = 0
        var isLoading = false
    }

    let initialState = State()

    func mutate(action: Action, currentState: State) -> Mutations<Mutation> {
        switch action {
        case .add: currentState.isLoading ? .none : .just(.increment)
        case .startLoading: .just(.setLoading(true))
        }
    }

    func reduce(state: State, mutation: Mutation) -> State {
        var state = state
        switch mutation {
        case .increment: state.value += 1
        case .setLoading(let loading): state.isLoading = loading
        }
        return state
    }
}

@Suite("mutate reads the current state")
struct CurrentStateTests {
    @Test("mutate(action:currentState:) sees every mutation reduced before it")
    func mutateSeesCurrentState() {
        let store = ReactorStore(GuardedCounter())
        store.send(.add)
        store.send(.add)
        #expect(store.currentState == .init(value: 2, isLoading: false))
        store.send(.startLoading)
        store.send(.add)
        #expect(store.currentState == .init(value: 2, isLoading: true), "ignored while loading")
    }
}
