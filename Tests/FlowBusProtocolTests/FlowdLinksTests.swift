import Testing

@testable import FlowBusProtocol

@Suite("A client's connections to flowd instances")
struct FlowdLinksTests {
    let a = "tcp://10.0.0.1:5560"
    let b = "tcp://10.0.0.2:5560"

    @Test("The first connection counts; a second instance's makes the first stale; losing the last one counts")
    func followTheActiveInstance() {
        var links = FlowdLinks(endpoints: [a, b])
        #expect(links.connected(a) == .init(isNew: true))
        #expect(links.connected(a) == .init(), "a repeated event changes nothing")
        // b binds only once it holds the lease: a's machine is gone, whatever its connection says.
        #expect(links.connected(b) == .init(stale: [a], isNew: true))
        #expect(links.connected == [b])
        #expect(links.disconnected(a) == .init(), "the dropped connection was already uncounted")
        #expect(links.disconnected(b) == .init(isLost: true))
        #expect(links.connected.isEmpty)
    }

    @Test("One endpoint (instances taking over the same ipc path): reconnections only")
    func oneEndpoint() {
        let path = "ipc:///run/flowbus/ingress.sock"
        var links = FlowdLinks(endpoints: [path])
        #expect(links.connected(path) == .init(isNew: true))
        #expect(links.disconnected(path) == .init(isLost: true))
        #expect(links.connected(path) == .init(isNew: true))
    }
}
