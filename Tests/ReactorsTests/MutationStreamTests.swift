import Reactors
import Testing

@Suite("Mutation streams", .timeLimit(.minutes(1)))
struct MutationStreamTests {
    @Test("two slow mutation streams are merged: their mutations interleave in arrival order")
    func slowStreamsInterleave() async throws {
        let a1 = Gate()
        let a2 = Gate()
        let b1 = Gate()
        let b2 = Gate()
        let store = ReactorStore(ScriptReactor())
        var states = store.states().makeAsyncIterator()
        _ = try await take(1, from: &states)

        store.send(
            .run { send in
                try await a1.wait()
                send("a1")
                try await a2.wait()
                send("a2")
            })
        store.send(
            .run { send in
                try await b1.wait()
                send("b1")
                try await b2.wait()
                send("b2")
            })
        b1.open()
        #expect(try await take(1, from: &states) == [["b1"]])
        a1.open()
        #expect(try await take(1, from: &states) == [["b1", "a1"]])
        b2.open()
        #expect(try await take(1, from: &states) == [["b1", "a1", "b2"]])
        a2.open()
        #expect(try await take(1, from: &states) == [["b1", "a1", "b2", "a2"]])
    }

    @Test("concat: synchronous prefix within send, the rest in order after the async part")
    func concatOrder() async throws {
        let gate = Gate()
        let store = ReactorStore(ScriptReactor())
        var states = store.states().makeAsyncIterator()
        _ = try await take(1, from: &states)
        store.send(
            .concat(
                .just("1"), .sequence(["2", "3"]),
                .run { send in
                    try await gate.wait()
                    send("4")
                },
                .just("5")))
        #expect(store.currentState == ["1", "2", "3"])
        store.send(.just("x"))
        gate.open()
        #expect(try await take(6, from: &states).last == ["1", "2", "3", "x", "4", "5"])
    }

    @Test("merge: synchronous members within send, asynchronous ones concurrently")
    func mergeMembers() async throws {
        let first = Gate()
        let second = Gate()
        let store = ReactorStore(ScriptReactor())
        var states = store.states().makeAsyncIterator()
        _ = try await take(1, from: &states)
        store.send(
            .merge(
                .run { send in
                    try await first.wait()
                    send("slow")
                },
                .just("now"),
                .run { send in
                    try await second.wait()
                    send("fast")
                }))
        #expect(store.currentState == ["now"])
        second.open()
        #expect(try await take(2, from: &states).last == ["now", "fast"])
        first.open()
        #expect(try await take(1, from: &states) == [["now", "fast", "slow"]])
    }

    @Test("map and compactMap transform mutations, synchronous and asynchronous")
    func mapMutations() async throws {
        let store = ReactorStore(ScriptReactor())
        var states = store.states().makeAsyncIterator()
        _ = try await take(1, from: &states)
        let numbers = Mutations<Int>.concat(.sequence([1, 2, 3]), .run { send in send(4) })
        store.send(numbers.compactMap { $0 % 2 == 0 ? "n\($0)" : nil })
        #expect(try await take(2, from: &states).last == ["n2", "n4"])
    }

    struct EchoReactor: Reactor {
        typealias Action = Int
        typealias State = Int
        var initialState: Int { 0 }
        func reduce(state: Int, mutation: Int) -> Int { state + mutation }
    }

    @Test("default mutate is the action itself when Action == Mutation")
    func defaultMutate() {
        let store = ReactorStore(EchoReactor())
        store.send(2)
        store.send(3)
        #expect(store.currentSnapshot == StateSnapshot(sequence: 2, state: 5))
    }

    struct SilentReactor: Reactor {
        enum Action: Sendable { case tap }
        enum Mutation: Sendable { case never }
        var initialState: Int { 0 }
    }

    @Test("default mutate is empty when Action != Mutation; default reduce keeps the state")
    func defaults() {
        let store = ReactorStore(SilentReactor())
        store.send(.tap)
        #expect(store.currentSnapshot == StateSnapshot(sequence: 0, state: 0))
    }
}

@Suite("transform(mutation:) placeholder", .timeLimit(.minutes(1)))
struct TransformMutationTests {
    struct TaggingReactor: Reactor {
        typealias Action = Mutations<String>
        typealias Mutation = String
        typealias State = [String]

        var initialState: [String] { [] }

        func mutate(action: Mutations<String>) -> Mutations<String> { action }

        func transform(mutation: Mutations<String>) -> Mutations<String> {
            .merge(.just("boot"), mutation.compactMap { $0 == "skip" ? nil : "<\($0)>" })
        }

        func reduce(state: [String], mutation: String) -> [String] { state + [mutation] }
    }

    @Test("map on the placeholder applies to every mutate stream, sync and async; sync external parts run at creation")
    func placeholderMap() async throws {
        let store = ReactorStore(TaggingReactor())
        #expect(store.currentSnapshot == StateSnapshot(sequence: 1, state: ["boot"]))
        var states = store.states().makeAsyncIterator()
        _ = try await take(1, from: &states)
        store.send(.sequence(["a", "skip"]))
        store.send(
            .run { send in
                send("skip")
                send("b")
            })
        #expect(try await take(2, from: &states) == [["boot", "<a>"], ["boot", "<a>", "<b>"]])
    }

    struct DisconnectedReactor: Reactor {
        typealias Action = String
        typealias Mutation = String
        typealias State = [String]

        let calls: Log<String>
        var initialState: [String] { [] }

        func mutate(action: String) -> Mutations<String> {
            calls.append(action)
            return .just(action)
        }

        func transform(mutation: Mutations<String>) -> Mutations<String> { .none }

        func reduce(state: [String], mutation: String) -> [String] { state + [mutation] }
    }

    @Test("leaving the placeholder out drops mutate's output, as in ReactorKit")
    func placeholderLeftOut() {
        let calls = Log<String>()
        let store = ReactorStore(DisconnectedReactor(calls: calls))
        store.send("a")
        #expect(calls.all.isEmpty)
        #expect(store.currentSnapshot.sequence == 0)
    }
}
