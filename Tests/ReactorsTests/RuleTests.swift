import Reactors
import Synchronization
import Testing

/// One test (at least) per rule of REACTORKIT.md.
@Suite("ReactorKit rules", .timeLimit(.minutes(1)))
struct RuleTests {
    /// Records every call of the pipeline, to check its order.
    struct PipelineReactor: Reactor {
        typealias Action = String
        typealias Mutation = String
        typealias State = [String]

        let calls: Log<String>

        var initialState: [String] { ["initial"] }

        func transform(action: String) -> String? {
            calls.append("transform(action: \(action))")
            return action == "drop" ? nil : action + "!"
        }

        func mutate(action: String) -> Mutations<String> {
            calls.append("mutate(\(action))")
            return .sequence([action + "1", action + "2"])
        }

        func transform(mutation: Mutations<String>) -> Mutations<String> {
            calls.append("transform(mutation:)")
            return mutation.map { "m:" + $0 }
        }

        func reduce(state: [String], mutation: String) -> [String] {
            calls.append("reduce(\(state.last ?? ""), \(mutation))")
            return state + [mutation]
        }

        func transform(state: [String]) -> [String] {
            calls.append("transform(state: \(state.count))")
            return state.map { $0.uppercased() }
        }
    }

    @Test(
        "Rule 1: actions → transform(action:) → mutate → transform(mutation:) → reduce → transform(state:) → currentState, hot from the start"
    )
    func rule1Pipeline() {
        let calls = Log<String>()
        let store = ReactorStore(PipelineReactor(calls: calls))
        // Hot: connected at once; the initial state went through transform(state:).
        #expect(calls.all == ["transform(state: 1)", "transform(mutation:)"])
        #expect(store.currentSnapshot == StateSnapshot(sequence: 0, state: ["INITIAL"]))

        store.send("a")
        #expect(
            calls.all.dropFirst(2) == [
                "transform(action: a)", "mutate(a!)",
                "reduce(initial, m:a!1)", "transform(state: 2)",
                "reduce(m:a!1, m:a!2)", "transform(state: 3)",
            ])
        // reduce works on its own, untransformed result; currentState is the transformed one.
        #expect(store.currentSnapshot == StateSnapshot(sequence: 2, state: ["INITIAL", "M:A!1", "M:A!2"]))

        store.send("drop")
        #expect(calls.all.last == "transform(action: drop)")
        #expect(store.currentSnapshot.sequence == 2)
    }

    @Test("Rule 1: a failing mutation stream is dropped, the reactor lives on")
    func rule1FailingStream() async throws {
        let (failures, failed) = AsyncStream<any Error>.makeStream()
        let store = ReactorStore(ScriptReactor(), onMutationFailure: { failed.yield($0) })
        var states = store.states().makeAsyncIterator()
        #expect(try await take(1, from: &states) == [[]])

        store.send(
            .run { send in
                send("a")
                throw Boom()
            })
        var failureIterator = failures.makeAsyncIterator()
        let failure = await failureIterator.next()
        #expect(failure as? Boom == Boom())
        #expect(try await take(1, from: &states) == [["a"]])

        // The failed stream's task may still be leaving the serial queue: wait for "b" itself.
        await store.sendAndWait(.just("b"))
        #expect(store.currentState == ["a", "b"])
        #expect(try await take(1, from: &states) == [["a", "b"]])

        // A failing async sequence too.
        let (source, input) = AsyncThrowingStream<String, any Error>.makeStream()
        store.send(.sequence(source))
        input.yield("c")
        input.finish(throwing: Boom())
        #expect(await failureIterator.next() as? Boom == Boom())
        store.send(.just("d"))
        #expect(try await take(2, from: &states) == [["a", "b", "c"], ["a", "b", "c", "d"]])
    }

    @Test("Rule 2: a bound action source that ends or throws does not kill the reactor")
    func rule2BoundSourceEnds() async throws {
        let (failures, failed) = AsyncStream<any Error>.makeStream()
        let store = ReactorStore(ScriptReactor(), onMutationFailure: { failed.yield($0) })
        var states = store.states().makeAsyncIterator()
        _ = try await take(1, from: &states)

        let (finishing, finishingInput) = AsyncStream<Mutations<String>>.makeStream()
        let finishingBinding = store.bind(actions: finishing)
        finishingInput.yield(.just("1"))
        finishingInput.finish()
        #expect(try await take(1, from: &states) == [["1"]])

        let (throwing, throwingInput) = AsyncThrowingStream<Mutations<String>, any Error>
            .makeStream()
        store.bind(actions: throwing)
        throwingInput.yield(.just("2"))
        throwingInput.finish(throwing: Boom())
        #expect(try await take(1, from: &states) == [["1", "2"]])
        var failureIterator = failures.makeAsyncIterator()
        #expect(await failureIterator.next() as? Boom == Boom())

        store.send(.just("3"))
        #expect(try await take(1, from: &states) == [["1", "2", "3"]])
        #expect(!store.isShutDown)
        #expect(!finishingBinding.isCancelled)
    }

    @Test("Rule 3: a new subscriber gets the latest state at once; every mutation emits, no de-duplication")
    func rule3ReplayNoDedup() async throws {
        let store = ReactorStore(ScriptReactor())
        store.send(.just("a"))
        var late = store.snapshots().makeAsyncIterator()
        #expect(try await take(1, from: &late) == [StateSnapshot(sequence: 1, state: ["a"])])

        // A reducer that returns an identical state still emits it.
        let counter = ReactorStore(CounterReactor(delay: {}))
        var states = counter.snapshots().makeAsyncIterator()
        _ = try await take(1, from: &states)
        counter.send(.increase)
        counter.send(.increase)
        let emitted = try await take(6, from: &states)
        #expect(emitted.map(\.sequence) == [1, 2, 3, 4, 5, 6])
        #expect(emitted.last?.state == CounterReactor.State(value: 2, isLoading: false))
    }

    @Test("Rule 4: currentState is updated before subscribers run; a synchronous mutate updates it within send")
    func rule4CurrentStateBeforeSubscribers() {
        let store = ReactorStore(ScriptReactor())
        let seen = Log<Bool>()
        store.observe { [weak store] snapshot in
            seen.append(store?.currentSnapshot == snapshot)
        }
        store.send(.sequence(["a", "b"]))
        // No await: the state is there when send returns.
        #expect(store.currentState == ["a", "b"])
        #expect(seen.all == [true, true, true])
    }

    @Test("Rule 4: sendAndWait returns once the action's synchronous mutations are reduced")
    func rule4SendAndWait() async {
        let gate = Gate()
        let store = ReactorStore(CounterReactor(delay: { try await gate.wait() }))
        await store.sendAndWait(.increase)
        #expect(store.currentState == CounterReactor.State(value: 0, isLoading: true))
        gate.open()
    }

    @Test("Rule 5: actions sent from a state subscriber run after the current emission reached every subscriber")
    func rule5ReentrantFromSubscriber() {
        let store = ReactorStore(ScriptReactor())
        let log = Log<String>()
        store.observe { [weak store] snapshot in
            log.append("A\(snapshot.sequence)")
            if snapshot.state == ["x"] {
                store?.send(.just("p"))
                store?.send(.just("q"))
            }
        }
        store.observe { snapshot in log.append("B\(snapshot.sequence)") }
        store.send(.just("x"))
        #expect(log.all == ["A0", "B0", "A1", "B1", "A2", "B2", "A3", "B3"])
        #expect(store.currentState == ["x", "p", "q"])
    }

    /// A reducer that (impurely) sends actions back to its store, as ReactorKit users do.
    final class EchoReactor: Reactor {
        typealias Action = String
        typealias Mutation = String
        typealias State = [String]

        let store = Mutex<ReactorStore<EchoReactor>?>(nil)
        var initialState: [String] { [] }

        func reduce(state: [String], mutation: String) -> [String] {
            if mutation == "p" {
                let store = self.store.withLock { $0 }
                store?.send("r")
            }
            return state + [mutation]
        }
    }

    @Test("Rule 5: an action sent from reduce is queued after the actions already waiting (FIFO)")
    func rule5ReentrantFromReduce() {
        let reactor = EchoReactor()
        let store = ReactorStore(reactor)
        reactor.store.withLock { $0 = store }
        defer { reactor.store.withLock { $0 = nil } }
        let log = Log<[String]>()
        store.observe { [weak store] snapshot in
            log.append(snapshot.state)
            if snapshot.state == ["x"] {
                store?.send("p")
                store?.send("q")
            }
        }
        store.send("x")
        #expect(log.all == [[], ["x"], ["x", "p"], ["x", "p", "q"], ["x", "p", "q", "r"]])
    }

    struct AlertReactor: Reactor {
        enum Action: Sendable {
            case alert(String)
            case unrelated
        }

        struct State: Sendable {
            @Pulse var message: String = "none"
            var unrelated = 0
        }

        var initialState: State { State() }

        func reduce(state: State, mutation: Action) -> State {
            var state = state
            switch mutation {
            case .alert(let message): state.message = message
            case .unrelated: state.unrelated += 1
            }
            return state
        }
    }

    @Test(
        "Rule 6: pulse emits on every assignment, even equal values, never on unrelated mutations; late subscribers get it once"
    )
    func rule6Pulse() async {
        let store = ReactorStore(AlertReactor())
        var pulses = store.pulse(\.$message).makeAsyncIterator()
        #expect(await pulses.next() == "none")

        store.send(.alert("hi"))
        store.send(.unrelated)
        store.send(.alert("hi"))
        store.send(.unrelated)
        store.send(.alert("bye"))
        #expect(await pulses.next() == "hi")
        #expect(await pulses.next() == "hi")
        #expect(await pulses.next() == "bye")

        var late = store.pulse(\.$message).makeAsyncIterator()
        #expect(await late.next() == "bye")
        store.send(.unrelated)
        store.send(.alert("again"))
        #expect(await late.next() == "again")
        #expect(await pulses.next() == "again")
        #expect(store.currentState.$message.updateCount == 4)
    }

    @Test(
        "Rule 7: with a stub, mutate and reduce never run, actions are recorded, setting the state updates currentState"
    )
    func rule7Stub() {
        let calls = Log<String>()
        let store = ReactorStore(stubbing: PipelineReactor(calls: calls))
        let seen = Log<StateSnapshot<[String]>>()
        store.observe { seen.append($0) }

        store.send("a")
        store.send("b")
        #expect(store.stub.actions == ["a", "b"])
        #expect(store.stub.lastAction == "b")
        #expect(calls.all.isEmpty)
        #expect(store.currentState == ["initial"])

        store.stub.state = ["stubbed"]
        #expect(store.currentState == ["stubbed"])
        store.stub.setState(["again"])
        #expect(
            seen.all == [
                StateSnapshot(sequence: 0, state: ["initial"]),
                StateSnapshot(sequence: 1, state: ["stubbed"]),
                StateSnapshot(sequence: 2, state: ["again"]),
            ])
        #expect(calls.all.isEmpty)
    }

    @Test("Rule 8: nothing is cancelled automatically; mutation streams are merged")
    func rule8NothingCancelledAutomatically() async throws {
        let gate = Gate()
        let store = ReactorStore(CounterReactor(delay: { try await gate.wait() }))
        var states = store.states().makeAsyncIterator()
        _ = try await take(1, from: &states)
        store.send(.increase)
        store.send(.increase)
        store.send(.decrease)
        #expect(try await take(3, from: &states).map(\.isLoading) == [true, true, true])
        gate.open()
        let rest = try await take(6, from: &states)
        #expect(rest.last == CounterReactor.State(value: 1, isLoading: false))
    }

    @Test("Rule 8: releasing the store ends everything: mutation tasks are cancelled, state streams finish")
    func rule8ReleasingEndsEverything() async throws {
        let gate = Gate()
        let cancelled = Gate()
        let sourceEnded = Gate()
        var store: ReactorStore<ScriptReactor>? = ReactorStore(ScriptReactor())
        weak let weakStore = store
        var states = store!.states().makeAsyncIterator()
        #expect(try await take(1, from: &states) == [[]])

        store!.send(
            .run { send in
                do {
                    try await gate.wait()
                } catch {
                    cancelled.open()
                    throw error
                }
                send("never")
            })
        let (source, input) = AsyncStream<Mutations<String>>.makeStream()
        input.onTermination = { _ in sourceEnded.open() }
        let binding = store!.bind(actions: source)

        store = nil
        #expect(weakStore == nil)
        try await cancelled.wait()
        try await sourceEnded.wait()
        #expect(binding.isCancelled)
        input.finish()
        #expect(await states.next() == nil)
    }

    @Test("Rule 8: shutdown cancels in-flight work and ignores later actions")
    func rule8Shutdown() async throws {
        let gate = Gate()
        let cancelled = Gate()
        let store = ReactorStore(ScriptReactor())
        var states = store.states().makeAsyncIterator()
        _ = try await take(1, from: &states)
        store.send(
            .run { send in
                do { try await gate.wait() } catch {
                    cancelled.open()
                    throw error
                }
                send("never")
            })
        store.shutdown()
        try await cancelled.wait()
        #expect(await states.next() == nil)
        store.send(.just("ignored"))
        await store.sendAndWait(.just("ignored"))
        #expect(store.currentSnapshot == StateSnapshot(sequence: 0, state: []))
        #expect(store.isShutDown)
        var afterShutdown = store.states().makeAsyncIterator()
        #expect(await afterShutdown.next() == nil)
    }

    struct GlobalEventsReactor: Reactor {
        typealias Action = String
        typealias Mutation = String
        typealias State = [String]

        let events: AsyncStream<String>
        var initialState: [String] { [] }

        func transform(mutation: Mutations<String>) -> Mutations<String> {
            .merge(mutation, .sequence(events).map { "global:" + $0 })
        }

        func reduce(state: [String], mutation: String) -> [String] { state + [mutation] }
    }

    @Test("Rule 9: external event streams are merged in transform(mutation:)")
    func rule9GlobalEvents() async throws {
        let (events, input) = AsyncStream<String>.makeStream()
        let store = ReactorStore(GlobalEventsReactor(events: events))
        var states = store.states().makeAsyncIterator()
        _ = try await take(1, from: &states)

        store.send("local")
        input.yield("login")
        #expect(try await take(2, from: &states) == [["local"], ["local", "global:login"]])
        // The global stream's task may still hold the serial queue: wait for this action itself.
        await store.sendAndWait("local2")
        #expect(store.currentState == ["local", "global:login", "local2"])
    }
}
