import Foundation
import Testing
import ZeroMQ

@Suite("Socket behaviour: modes, errors, lifetime")
struct SocketBehaviourTests {
    let context: Context

    init() throws {
        context = try Context(defaultLinger: 0)
    }

    @Test("A non-blocking receive with nothing queued returns nil, not an error")
    func nonBlockingReceive() throws {
        let pull = try context.socket(.pull)
        try pull.bind(Transport.inproc.bindEndpoint())
        #expect(try pull.receiveMessage(mode: .nonBlocking) == nil)
    }

    @Test("A timed receive gives up after its timeout")
    func timedReceive() throws {
        let pull = try context.socket(.pull)
        try pull.bind(Transport.inproc.bindEndpoint())
        let start = ContinuousClock.now
        #expect(try pull.receiveMessage(mode: .timeout(milliseconds: 50)) == nil)
        #expect(ContinuousClock.now - start >= .milliseconds(40))
    }

    @Test("A non-blocking send with no peer reports would-block as false")
    func nonBlockingSendWithoutPeer() throws {
        let push = try context.socket(.push)
        try push.bind(Transport.inproc.bindEndpoint())
        #expect(try push.send(bytes("nobody listens"), mode: .nonBlocking) == false)
    }

    @Test("Errors carry errno and libzmq's text")
    func typedErrors() throws {
        let socket = try context.socket(.pull)
        do {
            try socket.bind("nonsense://where")
            Issue.record("binding a nonsense endpoint succeeded")
        } catch {
            #expect(error.code == EPROTONOSUPPORT)
            #expect(error.message == "Protocol not supported")
            #expect(error.description.contains("nonsense://where"))
        }
    }

    @Test("Every socket gives up a TCP connect after its context's connect timeout, 2 s unless told otherwise")
    func connectTimeout() throws {
        let dealer = try context.socket(.dealer)
        #expect(try dealer.connectTimeout == Context.flowBusConnectTimeout && Context.flowBusConnectTimeout == 2000)
        let kernels = try Context(defaultLinger: 0, defaultConnectTimeout: 0)
        #expect(try kernels.socket(.sub).connectTimeout == 0)
        try dealer.setOption(.connectTimeout(500))
        #expect(try dealer.connectTimeout == 500)
    }

    @Test("close() is idempotent and later use throws instead of crashing")
    func checkedClose() throws {
        let socket = try context.socket(.push)
        socket.close()
        socket.close()
        #expect(socket.isClosed)
        #expect(throws: ZMQError.self) { try socket.send(bytes("after close")) }
        #expect(throws: ZMQError.self) { try socket.receiveMessage(mode: .nonBlocking) }
    }

    @Test("A poller reports which of several sockets is readable")
    func poller() throws {
        let first = try context.socket(.pull)
        let second = try context.socket(.pull)
        let sender = try context.socket(.push)
        try first.bind(Transport.inproc.bindEndpoint())
        try second.bind(Transport.inproc.bindEndpoint())
        try sender.connect(second.lastEndpoint)
        let poller = Poller()
        let firstIndex = try poller.add(first)
        let secondIndex = try poller.add(second)
        #expect(try poller.poll(timeout: 0) == 0)
        try sender.send("wake")
        #expect(try poller.poll(timeout: 2000) == 1)
        #expect(!poller.isReadable(firstIndex))
        #expect(poller.isReadable(secondIndex))
    }

    @Test("Context shutdown wakes a blocked receive with ETERM")
    func shutdownWakesBlockedReceive() throws {
        let context = try Context(defaultLinger: 0)
        let endpoint = Transport.inproc.bindEndpoint()
        let ready = DispatchSemaphore(value: 0)
        let receiver = BackgroundThread {
            let pull = try context.socket(.pull)
            try pull.bind(endpoint)
            ready.signal()
            _ = try pull.receiveMessage()
        }
        ready.wait()
        context.shutdown()
        #expect { try receiver.join() } throws: { ($0 as? ZMQError)?.isContextTerminated == true }
    }

    @Test("Closing with pending messages and bounded linger does not hang", arguments: Transport.allCases)
    func cleanShutdownWithPendingMessages(transport: Transport) throws {
        let start = ContinuousClock.now
        do {
            let context = try Context(defaultLinger: 100)
            let push = try context.socket(.push)
            // Nobody will ever receive these: the endpoint has no listener.
            let endpoint = transport == .tcp ? "tcp://127.0.0.1:1" : transport.bindEndpoint()
            if transport == .inproc {
                let pull = try context.socket(.pull)
                try pull.bind(endpoint)
                try push.connect(endpoint)
                pull.close()
            } else {
                try push.connect(endpoint)
            }
            for _ in 0..<10 { _ = try push.send(bytes("pending"), mode: .nonBlocking) }
        }
        // Sockets and context are gone here: context termination waited at most the linger.
        #expect(ContinuousClock.now - start < .seconds(5))
    }

    @Test("Proxy forwards PUSH traffic to PULL and copies it to a capture socket")
    func proxy() throws {
        let context = try Context(defaultLinger: 0)
        let front = Transport.inproc.bindEndpoint()
        let back = Transport.inproc.bindEndpoint()
        let tap = Transport.inproc.bindEndpoint()
        let control = Transport.inproc.bindEndpoint()
        let capture = try context.socket(.pull)
        try capture.bind(tap)
        let controller = try context.socket(.pair)
        try controller.bind(control)
        let started = DispatchSemaphore(value: 0)
        let proxyThread = BackgroundThread {
            let frontend = try context.socket(.pull)
            try frontend.bind(front)
            let backend = try context.socket(.push)
            try backend.bind(back)
            let captureOut = try context.socket(.push)
            try captureOut.connect(tap)
            let steer = try context.socket(.pair)
            try steer.connect(control)
            started.signal()
            try Proxy.run(frontend: frontend, backend: backend, capture: captureOut, control: steer)
        }
        started.wait()
        let producer = try context.socket(.push)
        try producer.connect(front)
        let consumer = try context.socket(.pull)
        try consumer.connect(back)
        try producer.send(message: [bytes("step/a"), bytes("1")])
        #expect(try receive(consumer) == [bytes("step/a"), bytes("1")])
        #expect(try receive(capture) == [bytes("step/a"), bytes("1")])
        try controller.send("TERMINATE")
        try proxyThread.join()
    }
}
