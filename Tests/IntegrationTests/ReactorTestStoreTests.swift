import FlowBusClient
import FlowBusConfiguration
import FlowBusCoordinator
import FlowBusReactorHost
import FlowBusTesting
import FlowBusTools
import FlowBusWire
import Foundation
import Reactors
import Testing

/// The seed's Counter, with a short real delay: the test store waits for it, bounded.
final class TestCounter: Reactor {
    enum Action: Sendable { case increase, decrease }
    enum Mutation: Sendable {
        case increaseValue, decreaseValue
        case setLoading(Bool)
    }
    struct State: Equatable, Sendable, Decodable {
        var value = 0
        var isLoading = false
    }

    let initialState = State()

    func mutate(action: Action) -> Mutations<Mutation> {
        let change: Mutation = action == .increase ? .increaseValue : .decreaseValue
        return .concat(
            .just(.setLoading(true)),
            .run { send in
                try await Task.sleep(for: .milliseconds(10))
                send(change)
            }, .just(.setLoading(false)))
    }

    func reduce(state: State, mutation: Mutation) -> State {
        var state = state
        switch mutation {
        case .increaseValue: state.value += 1
        case .decreaseValue: state.value -= 1
        case .setLoading(let loading): state.isLoading = loading
        }
        return state
    }
}

@Suite("Exhaustive reactor tests (TestStore style)")
struct ReactorTestStoreTests {
    typealias S = TestCounter.State

    @Test("In process: send asserts the synchronous states, receive the later ones, finish checks nothing is left")
    func inProcess() async {
        let store = ReactorTestStore(TestCounter())
        await store.send(.increase, S(value: 0, isLoading: true))
        await store.receive(S(value: 1, isLoading: true), S(value: 1, isLoading: false))
        await store.finish()
    }

    @Test("An unasserted state fails the test")
    func unassertedStateFails() async {
        let store = ReactorTestStore(TestCounter())
        await store.send(.increase, S(value: 0, isLoading: true))
        await withKnownIssue("two states were never asserted") {
            await store.finish()
        }
    }

    @Test("A wrong state fails the test; with exhaustivity off, states in between are skipped")
    func wrongStateAndRelaxed() async {
        let strict = ReactorTestStore(TestCounter())
        await withKnownIssue("the second state is (1, true)") {
            await strict.send(.increase, S(value: 0, isLoading: true))
            await strict.receive(S(value: 1, isLoading: false))
        }
        let relaxed = ReactorTestStore(TestCounter(), exhaustivity: .off)
        await relaxed.send(.increase)
        await relaxed.receive(S(value: 1, isLoading: false))
        await relaxed.finish()
    }

    @Test("Over the bus: the same style against a reactor process")
    func overTheBus() throws {
        let topology = try demoTopology()
        try topology.start(
            "reactor-host", arguments: ["--config", topology.configPath, "--host", "demo", "--counter-delay-ms", "20"])
        let spec = try #require(topology.config.reactors["demo"])
        let probe = try BusSubscriber(endpoint: spec.states, topics: ["hb/"])
        #expect(try probe.waitUntilConnected(timeout: .seconds(20)))
        let store = try RemoteReactorTestStore(reactorID: "counter", config: topology.config, as: S.self)
        #expect(store.snapshot?.state == S())
        try store.send(
            "increase",
            expecting: [S(value: 0, isLoading: true), S(value: 1, isLoading: true), S(value: 1, isLoading: false)])
        try store.finish()
    }
}
