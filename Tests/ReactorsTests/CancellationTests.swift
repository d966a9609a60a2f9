import Reactors
import Testing

@Suite("Cancellation", .timeLimit(.minutes(1)))
struct CancellationTests {
    @Test("a later action cancels an in-flight stream by id; what it still sends is dropped")
    func cancelByLaterAction() async throws {
        let gate = Gate()
        let sentLate = Gate()
        let store = ReactorStore(ScriptReactor())
        var states = store.states().makeAsyncIterator()
        _ = try await take(1, from: &states)

        store.send(
            Mutations.concat(
                .just("loading"),
                .run { send in
                    // Ignores cancellation on purpose: the store must drop its mutations.
                    await gate.waitIgnoringCancellation()
                    send("late")
                    sentLate.open()
                }
            ).cancellable(id: "load"))
        store.send(.cancel(id: "load"))
        gate.open()
        try await sentLate.wait()
        store.send(.just("after"))
        #expect(try await take(2, from: &states) == [["loading"], ["loading", "after"]])
    }

    @Test("cancelInFlight: the latest stream with an id wins")
    func cancelInFlight() async throws {
        let firstGate = Gate()
        let secondGate = Gate()
        let firstSent = Gate()
        let store = ReactorStore(ScriptReactor())
        var states = store.states().makeAsyncIterator()
        _ = try await take(1, from: &states)

        store.send(
            Mutations.run { send in
                await firstGate.waitIgnoringCancellation()
                send("first")
                firstSent.open()
            }.cancellable(id: "search", cancelInFlight: true))
        store.send(
            Mutations.run { send in
                try await secondGate.wait()
                send("second")
            }.cancellable(id: "search", cancelInFlight: true))
        firstGate.open()
        try await firstSent.wait()
        secondGate.open()
        #expect(try await take(1, from: &states) == [["second"]])
    }

    @Test("store.cancel(id:) cancels from outside; the task sees cancellation")
    func cancelFromOutside() async throws {
        let gate = Gate()
        let cancelled = Gate()
        let store = ReactorStore(ScriptReactor())
        store.send(
            Mutations.run { send in
                do { try await gate.wait() } catch {
                    cancelled.open()
                    throw error
                }
                send("never")
            }.cancellable(id: 42))
        store.cancel(id: 42)
        try await cancelled.wait()
        await store.sendAndWait(.just("after"))
        #expect(store.currentState == ["after"])
    }

    @Test("a cancellable part nested in an async stream ends alone; the stream goes on")
    func nestedCancellable() async throws {
        let started = Gate()
        let gate = Gate()
        let store = ReactorStore(ScriptReactor())
        var states = store.states().makeAsyncIterator()
        _ = try await take(1, from: &states)

        store.send(
            .concat(
                .run { send in send("a") },
                Mutations.run { send in
                    started.open()
                    try await gate.wait()
                    send("b")
                }.cancellable(id: "inner"),
                .just("c")))
        try await started.wait()
        store.cancel(id: "inner")
        #expect(try await take(2, from: &states) == [["a"], ["a", "c"]])
    }

    @Test("cancelling one id leaves other streams running")
    func otherStreamsUnaffected() async throws {
        let gate = Gate()
        let store = ReactorStore(ScriptReactor())
        var states = store.states().makeAsyncIterator()
        _ = try await take(1, from: &states)
        store.send(
            Mutations.run { send in
                try await gate.wait()
                send("kept")
            }.cancellable(id: "kept"))
        store.send(
            Mutations.run { send in
                try await gate.wait()
                send("gone")
            }.cancellable(id: "gone"))
        store.send(.cancel(ids: ["gone", "unknown"]))
        gate.open()
        #expect(try await take(1, from: &states) == [["kept"]])
        store.send(.just("end"))
        #expect(try await take(1, from: &states) == [["kept", "end"]])
    }
}
