import Reactors

/// The Counter of seed 001, with the delay injected so tests drive it.
final class CounterReactor: Reactor {
    enum Action: Sendable, Equatable {
        case increase
        case decrease
    }

    enum Mutation: Sendable, Equatable {
        case increaseValue
        case decreaseValue
        case setLoading(Bool)
    }

    struct State: Sendable, Equatable {
        var value = 0
        var isLoading = false
    }

    let initialState = State()
    let delay: @Sendable () async throws -> Void

    init(delay: @escaping @Sendable () async throws -> Void) {
        self.delay = delay
    }

    func mutate(action: Action) -> Mutations<Mutation> {
        let delay = self.delay
        switch action {
        case .increase:
            return .concat(
                .just(.setLoading(true)),
                .run { send in
                    try await delay()
                    send(.increaseValue)
                },
                .just(.setLoading(false))
            )
        case .decrease:
            return .concat(
                .just(.setLoading(true)),
                .run { send in
                    try await delay()
                    send(.decreaseValue)
                },
                .just(.setLoading(false))
            )
        }
    }

    func reduce(state: State, mutation: Mutation) -> State {
        var state = state
        switch mutation {
        case .increaseValue: state.value += 1
        case .decreaseValue: state.value -= 1
        case .setLoading(let isLoading): state.isLoading = isLoading
        }
        return state
    }
}
