import Reactors

/// The Counter of seed 001: `increase` / `decrease` change the value after a delay, with
/// `isLoading` true around the change: (0, false) → (0, true) → (1, true) → (1, false).
final class CounterReactor: Reactor {
    enum Action: Decodable, Sendable {
        case increase
        case decrease
    }

    enum Mutation: Sendable {
        case increaseValue
        case decreaseValue
        case setLoading(Bool)
    }

    struct State: Codable, Sendable {
        var value = 0
        var isLoading = false
    }

    let initialState = State()
    private let delay: Duration

    init(delay: Duration) {
        self.delay = delay
    }

    func mutate(action: Action) -> Mutations<Mutation> {
        let delay = self.delay
        let change: Mutation = action == .increase ? .increaseValue : .decreaseValue
        return .concat(
            .just(.setLoading(true)),
            .run { send in
                try await Task.sleep(for: delay)
                send(change)
            },
            .just(.setLoading(false))
        )
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
