import FlowBusWire
import Reactors

/// The reactor of flowbench's `reactor` scenario (hosted when the host's `serves:` lists `bench`):
/// `tick(n: 7)` → state `{n: 7}`, reduced synchronously, so each action yields exactly one state
/// and the value the view sent comes back in it.
final class BenchReactor: Reactor {
    enum Action: Decodable, Sendable, WireFormDecodable {
        case tick(n: Int)

        init(wireName name: String, params: WireParams) throws(WireError) {
            guard name == "tick" else { throw WireError(.badAction, "no action named '\(name)'") }
            self = .tick(n: Int(try params.integer("n")))
        }
    }

    enum Mutation: Sendable {
        case setN(Int)
    }

    // Decodable too: the reactor_saved scenario restores it.
    struct State: Codable, Sendable, WireFormEncodable {
        var n = 0

        var wireValue: WireValue { .map(["n": .int(Int64(n))]) }
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
