import FlowBusClient
import FlowBusConfiguration
import FlowBusReactorHost
import FlowBusWire
import Foundation
import Logging
import Reactors

/// Runs blocking work (sockets, bounded waits) on its own thread, so that it never holds one of
/// the few threads of Swift's cooperative pool, which the reactors' mutation tasks need.
func onThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        let thread = Thread { continuation.resume(with: Result { try body() }) }
        thread.start()
    }
}

/// Runs a ``ReactorHostService`` in this process on ipc endpoints in a fresh directory, runs
/// `body` on a thread with the config, then stops the host. Assert on what `body` returns (in the
/// test's task), not inside it.
/// `persists` lists the reactors whose states are saved, in `state.sqlite` of the directory
/// (`body` finds it beside the endpoints); `liveness` is the config's `heartbeatLiveness`.
func withReactorHost<T: Sendable>(
    _ reactors: ReactorRegistry, serves: [String], persists: [String] = [], liveness: Int = 3,
    body: @escaping @Sendable (FlowBusConfig, ReactorHostService) throws -> T
) async throws -> T {
    let directory = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent(
        "fbrh-\(UUID().uuidString.prefix(8))")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: directory) }
    let run = directory.path
    let persistence =
        persists.isEmpty ? nil : ReactorPersistenceSpec(database: "\(run)/state.sqlite", reactors: persists)
    var topology = FlowBusConfig(
        endpoints: .init(
            ingress: "ipc://\(run)/ingress.sock", events: "ipc://\(run)/events.sock",
            control: "ipc://\(run)/control.sock"),
        heartbeatMilliseconds: 20,
        reactors: [
            "test": .init(
                actions: "ipc://\(run)/actions.sock", states: "ipc://\(run)/states.sock", serves: serves,
                persistence: persistence)
        ])
    topology.heartbeatLiveness = liveness
    let config = topology
    let service = try ReactorHostService(
        hostName: "test", config: config, reactors: reactors,
        logger: Logger(label: "reactor-host-test") { _ in SwiftLogNoOpLogHandler() })
    let task = Task { try await service.run() }
    let result: T
    do {
        try await service.waitUntilReady()
        result = try await onThread { try body(config, service) }
    } catch {
        task.cancel()
        _ = try? await task.value
        throw error
    }
    task.cancel()
    try await task.value
    return result
}

/// A counter whose every `add` is reduced at once (one state per action, value == sequence), and
/// whose `slowIncrease` has the Counter's loading states around a short delay.
final class TallyReactor: Reactor {
    enum Action: Codable, Sendable {
        case add(n: Int)
        case slowIncrease
    }

    enum Mutation: Sendable {
        case add(Int)
        case setLoading(Bool)
    }

    struct State: Codable, Sendable, Equatable {
        var value = 0
        var isLoading = false
    }

    let initialState = State()

    func mutate(action: Action) -> Mutations<Mutation> {
        switch action {
        case .add(let n):
            return .just(.add(n))
        case .slowIncrease:
            return .concat(
                .just(.setLoading(true)),
                .run { send in
                    try await Task.sleep(for: .milliseconds(20))
                    send(.add(1))
                },
                .just(.setLoading(false)))
        }
    }

    func reduce(state: State, mutation: Mutation) -> State {
        var state = state
        switch mutation {
        case .add(let n): state.value += n
        case .setLoading(let isLoading): state.isLoading = isLoading
        }
        return state
    }
}

/// A family member (`item/<n>`) whose state carries its id.
final class ItemReactor: Reactor {
    enum Action: Decodable, Sendable { case touch }
    struct State: Codable, Sendable, Equatable {
        var id: Int
        var touches = 0
    }

    let initialState: State

    init(id: Int) { initialState = State(id: id) }

    func mutate(action: Action) -> Mutations<Action> { .just(action) }

    func reduce(state: State, mutation: Action) -> State {
        var state = state
        state.touches += 1
        return state
    }
}

/// A reactor that is also a stepper: `greet(name:)` publishes step `greeted(name:)` as `greeter`.
final class GreeterReactor: Reactor {
    enum Action: Codable, Sendable { case greet(name: String) }
    enum Mutation: Sendable { case greeted(String) }
    struct State: Codable, Sendable, Equatable { var last: String? }

    let initialState = State()
    let steps: ReactorStepper

    init(steps: ReactorStepper) { self.steps = steps }

    func mutate(action: Action) -> Mutations<Mutation> {
        switch action {
        case .greet(let name):
            let steps = self.steps
            return .run { send in
                steps.emit("greeted", ["name": .string(name)])
                send(.greeted(name))
            }
        }
    }

    func reduce(state: State, mutation: Mutation) -> State {
        switch mutation {
        case .greeted(let name): State(last: name)
        }
    }
}

/// A reactor whose action and state read and write their wire form themselves (no Codable on the
/// host's path); their Codable conformances, which the host must not use, would fail.
final class WiredReactor: Reactor {
    enum Action: Decodable, Sendable, WireFormDecodable {
        case set(n: Int64)

        init(from decoder: any Decoder) throws {
            throw DecodingError.dataCorrupted(
                .init(codingPath: [], debugDescription: "Codable is not used for wired actions"))
        }

        init(wireName name: String, params: WireParams) throws(WireError) {
            guard name == "set" else { throw WireError(.badAction, "no action named '\(name)'") }
            self = .set(n: try params.integer("n"))
        }
    }

    struct State: Codable, Sendable, Equatable, WireFormEncodable {
        var n: Int64 = 0

        func encode(to encoder: any Encoder) throws {
            throw EncodingError.invalidValue(
                n, .init(codingPath: [], debugDescription: "Codable is not used for wired states"))
        }

        var wireValue: WireValue { .map(["n": .int(n), "wired": .bool(true)]) }
    }

    let initialState = State()

    func mutate(action: Action) -> Mutations<Action> { .just(action) }

    func reduce(state: State, mutation: Action) -> State {
        switch mutation {
        case .set(let n): State(n: n)
        }
    }
}

func testRegistry() -> ReactorRegistry {
    var reactors = ReactorRegistry()
    reactors.register("tally") { _ in TallyReactor() }
    reactors.register(family: "item/") { context in Int(context.memberID).map(ItemReactor.init(id:)) }
    reactors.register("greeter") { context in GreeterReactor(steps: context.stepper("greeter")) }
    reactors.register("wired") { _ in WiredReactor() }
    return reactors
}
