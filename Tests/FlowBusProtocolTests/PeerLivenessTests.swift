import Testing

@testable import FlowBusProtocol

@Suite("Peer liveness: the one silence rule of clients and daemons")
struct PeerLivenessTests {
    @Test("silent once past the limit, reported once; back once heard")
    func silenceAndReturn() {
        let start = ContinuousClock.now
        var peer = PeerLiveness(silenceLimit: .seconds(3), now: start)
        #expect(peer.check(now: start + .seconds(3)) == nil, "at the limit: not yet")
        #expect(peer.check(now: start + .seconds(4)) == .seconds(4))
        #expect(peer.check(now: start + .seconds(5)) == nil, "reported once")
        #expect(peer.silentAt == nil && peer.isSilent)
        let back = peer.heard(now: start + .seconds(6))
        #expect(back)
        let again = peer.heard(now: start + .seconds(7))
        #expect(!again, "back only once")
        #expect(peer.silentAt == start + .seconds(10))
    }
}
