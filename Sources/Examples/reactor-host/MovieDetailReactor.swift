import Reactors

/// One movie's detail screen, a member of the `movie/` family (`movie/42`): `load` fetches the
/// title after a simulated delay, with `isLoading` true meanwhile.
final class MovieDetailReactor: Reactor {
    enum Action: Decodable, Sendable {
        case load
    }

    enum Mutation: Sendable {
        case setLoading(Bool)
        case setTitle(String)
    }

    struct State: Codable, Sendable {
        var id: Int
        var title: String?
        var isLoading = false

        enum CodingKeys: String, CodingKey { case id, title, isLoading }

        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(id, forKey: .id)
            try container.encode(title, forKey: .title)
            try container.encode(isLoading, forKey: .isLoading)
        }
    }

    /// A few titles of the demo's catalogue; other ids get a made-up one.
    static let catalogue: [Int: String] = [
        23452: "The Grand Budapest Hotel", 42: "The Hitchhiker's Guide to the Galaxy", 1: "Metropolis",
    ]

    let initialState: State
    private let loadTime: Duration

    init(id: Int, loadTime: Duration) {
        initialState = State(id: id)
        self.loadTime = loadTime
    }

    func mutate(action: Action) -> Mutations<Mutation> {
        let id = initialState.id
        let loadTime = self.loadTime
        switch action {
        case .load:
            return .concat(
                .just(.setLoading(true)),
                .run { send in
                    try await Task.sleep(for: loadTime)
                    send(.setTitle(Self.catalogue[id] ?? "Movie #\(id)"))
                },
                .just(.setLoading(false))
            )
            .cancellable(id: "load", cancelInFlight: true)
        }
    }

    func reduce(state: State, mutation: Mutation) -> State {
        var state = state
        switch mutation {
        case .setLoading(let isLoading): state.isLoading = isLoading
        case .setTitle(let title): state.title = title
        }
        return state
    }
}
