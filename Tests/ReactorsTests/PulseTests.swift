import Foundation
import Reactors
import Testing

@Suite("Pulse and snapshots")
struct PulseTests {
    struct Alert: Codable, Equatable {
        @Pulse var message: String?
    }

    @Test("every assignment counts, even of an equal value")
    func assignmentsCount() {
        var alert = Alert(message: nil)
        #expect(alert.$message.updateCount == 0)
        alert.message = "a"
        alert.message = "a"
        #expect(alert.$message.updateCount == 2)
        #expect(alert.$message.value == "a")
    }

    @Test("a pulse encodes its update count so another process can tell repeats from assignments")
    func codable() throws {
        var alert = Alert(message: nil)
        alert.message = "saved"
        let data = try JSONEncoder().encode(alert)
        let decoded = try JSONDecoder().decode(Alert.self, from: data)
        #expect(decoded == alert)
        #expect(decoded.$message.updateCount == 1)
    }

    @Test("stub states reach pulse subscribers")
    func stubbedPulse() async {
        let store = ReactorStore(stubbing: RuleTests.AlertReactor())
        var pulses = store.pulse(\.$message).makeAsyncIterator()
        #expect(await pulses.next() == "none")
        var state = store.stub.state
        state.message = "from stub"
        store.stub.state = state
        #expect(await pulses.next() == "from stub")
        store.stub.state = state
        store.send(.alert("recorded only"))
        state.message = "again"
        store.stub.state = state
        #expect(await pulses.next() == "again")
        #expect(store.stub.actions.count == 1)
    }
}
