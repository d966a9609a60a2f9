import Reactors

/// The failover tests' reactors (hosted when the host's `serves:` lists `tally/`): each member
/// counts the `add(n:)` actions it applied and sums their `n`, reduced synchronously, so each
/// action yields exactly one state. Its state is `Codable`: a host that persists `tally/` resumes
/// every member from its last saved state, and a count that differs from the actions sent, or from
/// the state's sequence, shows an action lost or applied twice.
final class TallyReactor: Reactor {
    enum Action: Decodable, Sendable {
        case add(n: Int)
    }

    struct State: Codable, Sendable {
        var count = 0
        var sum = 0
    }

    /// The family of the tallies.
    static let family = "tally/"

    let initialState = State()

    func mutate(action: Action) -> Mutations<Action> {
        .just(action)
    }

    func reduce(state: State, mutation: Action) -> State {
        switch mutation {
        case .add(let n): State(count: state.count + 1, sum: state.sum + n)
        }
    }
}
