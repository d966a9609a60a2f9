import Reactors

/// The reactor of flowbench's `reactor` scenario (hosted when the host's `serves:` lists `bench`):
/// `tick(n: 7)` → state `{n: 7}`, reduced synchronously, so each action yields exactly one state
/// and the value the view sent comes back in it.
final class BenchReactor: Reactor {
    enum Action: Decodable, Sendable {
        case tick(n: Int)
    }

    enum Mutation: Sendable {
        case setN(Int)
    }

    struct State: Encodable, Sendable {
        var n = 0
    }

    /// The id flowbench sends its actions to.
    static let reactorID = "bench"

    let initialState = State()

    func mutate(action: Action) -> Mutations<Mutation> {
        switch action {
        case .tick(let n): .just(.setN(n))
        }
    }

    func reduce(state: State, mutation: Mutation) -> State {
        switch mutation {
        case .setN(let n): State(n: n)
        }
    }
}
