import FlowBusConfiguration
import FlowBusDaemon
import FlowBusReactorHost
import FlowBusWire
import Reactors

/// A reactor that is a stepper publishing one numbered step per action (hosted when the host's
/// `serves:` lists `ticker`), so that tests can tell each step a reactor publishes from the others:
/// `tick(n: 7)` publishes step `tick(n: 7)` as stepper `ticker` and makes the state `{n: 7}`.
final class TickerReactor: Reactor {
    enum Action: Decodable, Sendable {
        case tick(n: Int)
    }

    enum Mutation: Sendable {
        case ticked(Int)
    }

    struct State: Codable, Sendable {
        var n = 0
    }

    /// The reactor id, which is also the stepper id its steps are published as.
    static let reactorID = "ticker"

    let initialState = State()
    private let steps: ReactorStepper

    init(steps: ReactorStepper) {
        self.steps = steps
    }

    func mutate(action: Action) -> Mutations<Mutation> {
        switch action {
        case .tick(let n):
            // Published while the action is applied, so steps leave in the order of the actions.
            steps.emit("tick", ["n": .int(Int64(n))])
            return .just(.ticked(n))
        }
    }

    func reduce(state: State, mutation: Mutation) -> State {
        switch mutation {
        case .ticked(let n): State(n: n)
        }
    }
}
