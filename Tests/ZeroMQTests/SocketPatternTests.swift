import Foundation
import Synchronization
import Testing
import ZeroMQ

/// The three transports FlowBus runs on.
enum Transport: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case inproc, ipc, tcp

    var testDescription: String { rawValue }

    /// A fresh endpoint to bind; tcp binds an ephemeral port, read back with `lastEndpoint`.
    func bindEndpoint() -> String {
        let unique = UUID().uuidString.prefix(8)
        switch self {
        case .inproc: return "inproc://test-\(unique)"
        case .ipc: return "ipc://\(NSTemporaryDirectory())zmqtest-\(unique).sock"
        case .tcp: return "tcp://127.0.0.1:*"
        }
    }
}

/// Binds `server` on a fresh endpoint of `transport` and connects `client` to it.
func wire(_ server: Socket, _ client: Socket, over transport: Transport) throws {
    try server.bind(transport.bindEndpoint())
    try client.connect(server.lastEndpoint)
}

/// Receives one message or fails the test after two seconds instead of hanging.
func receive(_ socket: Socket, sourceLocation: SourceLocation = #_sourceLocation) throws -> [[UInt8]] {
    let message = try socket.receiveMessage(mode: .timeout(milliseconds: 2000))
    return try #require(message, "no message within 2 s", sourceLocation: sourceLocation)
}

func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

/// Runs blocking socket work on a thread of its own: blocking the few threads of Swift's
/// cooperative pool (two on a two-core machine) would stall every other test.
final class BackgroundThread: Sendable {
    private final class Outcome: Sendable {
        let done = DispatchSemaphore(value: 0)
        let failure = Mutex<(any Error)?>(nil)
    }

    private let outcome = Outcome()

    init(_ body: @escaping @Sendable () throws -> Void) {
        let thread = Thread { [outcome] in
            do { try body() } catch { outcome.failure.withLock { $0 = error } }
            outcome.done.signal()
        }
        thread.start()
    }

    /// Waits for the body to finish and rethrows its error.
    func join() throws {
        outcome.done.wait()
        if let error = outcome.failure.withLock({ $0 }) { throw error }
    }
}

@Suite("Socket patterns over every transport")
struct SocketPatternTests {
    let context: Context

    init() throws {
        context = try Context(defaultLinger: 0)
    }

    @Test("PUSH to PULL delivers multipart messages in order", arguments: Transport.allCases)
    func pushPull(transport: Transport) throws {
        let pull = try context.socket(.pull)
        let push = try context.socket(.push)
        try wire(pull, push, over: transport)
        for index in 0..<100 {
            try push.send(message: [bytes("topic"), bytes("\(index)")])
        }
        for index in 0..<100 {
            #expect(try receive(pull) == [bytes("topic"), bytes("\(index)")])
        }
    }

    @Test("PUB to SUB filters by topic prefix", arguments: Transport.allCases)
    func pubSub(transport: Transport) throws {
        let pub = try context.socket(.pub)
        let sub = try context.socket(.sub)
        try sub.setOption(.subscribe("step/"))
        try wire(pub, sub, over: transport)
        // Slow joiner: publish until the subscription has reached the publisher.
        var first: [[UInt8]]?
        for _ in 0..<200 where first == nil {
            try pub.send(message: [bytes("step/probe"), bytes("x")])
            first = try sub.receiveMessage(mode: .timeout(milliseconds: 10))
        }
        #expect(first?.first == bytes("step/probe"))
        while try sub.receiveMessage(mode: .timeout(milliseconds: 20)) != nil {}
        try pub.send(message: [bytes("state/counter"), bytes("filtered out")])
        try pub.send(message: [bytes("step/login"), bytes("kept")])
        #expect(try receive(sub) == [bytes("step/login"), bytes("kept")])
    }

    @Test("REQ and REP alternate request and reply", arguments: Transport.allCases)
    func reqRep(transport: Transport) throws {
        let rep = try context.socket(.rep)
        let req = try context.socket(.req)
        try wire(rep, req, over: transport)
        for round in 0..<5 {
            try req.send("ping \(round)")
            #expect(try receive(rep) == [bytes("ping \(round)")])
            try rep.send("pong \(round)")
            #expect(try receive(req) == [bytes("pong \(round)")])
        }
    }

    @Test("ROUTER sees a DEALER's routing id and can answer it", arguments: Transport.allCases)
    func dealerRouter(transport: Transport) throws {
        let router = try context.socket(.router)
        let dealer = try context.socket(.dealer)
        try dealer.setOption(.routingID("stepper-1"))
        try wire(router, dealer, over: transport)
        try dealer.send(message: [bytes("step/login"), bytes("envelope")])
        let request = try receive(router)
        #expect(request == [bytes("stepper-1"), bytes("step/login"), bytes("envelope")])
        try router.send(message: [bytes("stepper-1"), bytes("ack")])
        #expect(try receive(dealer) == [bytes("ack")])
    }

    @Test("ROUTER with routerMandatory reports an unknown peer", arguments: Transport.allCases)
    func routerMandatory(transport: Transport) throws {
        let router = try context.socket(.router)
        try router.setOption(.routerMandatory(true))
        try router.bind(transport.bindEndpoint())
        #expect {
            try router.send(message: [bytes("nobody"), bytes("hello")])
        } throws: { error in
            (error as? ZMQError)?.isHostUnreachable == true
        }
    }

    @Test("PAIR sockets talk both ways", arguments: Transport.allCases)
    func pair(transport: Transport) throws {
        let left = try context.socket(.pair)
        let right = try context.socket(.pair)
        try wire(left, right, over: transport)
        try right.send("hello")
        #expect(try receive(left) == [bytes("hello")])
        try left.send("back")
        #expect(try receive(right) == [bytes("back")])
    }

    @Test("XPUB sees subscriptions and XSUB can send them", arguments: Transport.allCases)
    func xpubXsub(transport: Transport) throws {
        let xpub = try context.socket(.xpub)
        try xpub.setOption(.xpubVerbose(true))
        let xsub = try context.socket(.xsub)
        try wire(xpub, xsub, over: transport)
        // An XSUB subscribes by sending 0x01 + prefix.
        try xsub.send([0x01] + bytes("nav/"))
        #expect(try receive(xpub) == [[0x01] + bytes("nav/")])
        try xpub.send(message: [bytes("nav/did/MainFlow"), bytes("event")])
        try xpub.send(message: [bytes("diag/x"), bytes("not subscribed")])
        #expect(try receive(xsub) == [bytes("nav/did/MainFlow"), bytes("event")])
        #expect(try xsub.receiveMessage(mode: .timeout(milliseconds: 50)) == nil)
    }

    @Test("XPUB welcome message reaches each new subscriber", arguments: Transport.allCases)
    func xpubWelcome(transport: Transport) throws {
        let xpub = try context.socket(.xpub)
        try xpub.setOption(.xpubWelcomeMessage(bytes("hb/welcome")))
        let sub = try context.socket(.sub)
        try sub.setOption(.subscribe("hb/"))
        try wire(xpub, sub, over: transport)
        // XPUB attaches new peers when its owner calls into it, here by reading the subscription.
        #expect(try receive(xpub) == [[0x01] + bytes("hb/")])
        #expect(try receive(sub) == [bytes("hb/welcome")])
    }

    @Test("Frames larger than 64 KiB, empty frames and many frames survive", arguments: Transport.allCases)
    func frameShapes(transport: Transport) throws {
        let pull = try context.socket(.pull)
        let push = try context.socket(.push)
        try wire(pull, push, over: transport)
        let large = (0..<(300 * 1024)).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        try push.send(message: [bytes("big"), large])
        #expect(try receive(pull) == [bytes("big"), large])
        try push.send(message: [[], bytes("between"), []])
        #expect(try receive(pull) == [[], bytes("between"), []])
        let many = (0..<200).map { bytes("frame \($0)") }
        try push.send(message: many)
        #expect(try receive(pull) == many)
    }

    @Test("maxMessageSize makes the receiver refuse an over-size message", arguments: [Transport.ipc, .tcp])
    func maxMessageSize(transport: Transport) throws {
        let pull = try context.socket(.pull)
        try pull.setOption(.maxMessageSize(1024))
        let push = try context.socket(.push)
        try wire(pull, push, over: transport)
        try push.send([UInt8](repeating: 7, count: 4096))
        #expect(try pull.receiveMessage(mode: .timeout(milliseconds: 200)) == nil)
    }
}
