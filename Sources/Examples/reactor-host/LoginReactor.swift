import FlowBusConfiguration
import FlowBusDaemon
import FlowBusReactorHost
import Reactors

/// The api key screen's reactor, and a stepper: a submitted non-empty key completes the
/// onboarding, published as step `apiKeyIsComplete` of stepper `apikey` (flowd's MainFlow then
/// navigates to the dashboard).
///
/// `submit(apiKey: "")` → `{isSubmitting: false, error: "…"}`;
/// `submit(apiKey: "k")` → `{isSubmitting: true, error: null}`, the step, then
/// `{isSubmitting: false, error: null}`.
final class LoginReactor: Reactor {
    enum Action: Decodable, Sendable {
        case submit(apiKey: String)
    }

    enum Mutation: Sendable {
        case started
        case succeeded
        case failed(String)
    }

    struct State: Encodable, Sendable {
        var isSubmitting = false
        var error: String?

        enum CodingKeys: String, CodingKey { case isSubmitting, error }

        // `error` is written as null when there is none, so the state always has both keys.
        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(isSubmitting, forKey: .isSubmitting)
            try container.encode(error, forKey: .error)
        }
    }

    let initialState = State()
    private let steps: ReactorStepper

    init(steps: ReactorStepper) {
        self.steps = steps
    }

    func mutate(action: Action) -> Mutations<Mutation> {
        switch action {
        case .submit(let apiKey):
            guard !apiKey.allSatisfy(\.isWhitespace) else {
                return .just(.failed("the api key is empty"))
            }
            let steps = self.steps
            return .concat(
                .just(.started),
                .run { send in
                    steps.emit("apiKeyIsComplete")
                    send(.succeeded)
                }
            )
            .cancellable(id: "submit", cancelInFlight: true)
        }
    }

    func reduce(state: State, mutation: Mutation) -> State {
        var state = state
        switch mutation {
        case .started:
            state.isSubmitting = true
            state.error = nil
        case .succeeded:
            state.isSubmitting = false
        case .failed(let message):
            state.isSubmitting = false
            state.error = message
        }
        return state
    }
}
