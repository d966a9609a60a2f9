import FlowBusClient
import FlowBusProtocol
import FlowBusWire
import Foundation
import Testing
import ZeroMQ

/// A daemon's ROUTER played by the test, and a ``ReliableDealer`` talking to it.
private struct Pair {
    let context: Context
    let router: Socket
    let dealer: ReliableDealer
    var peer: [UInt8] = []

    init(followsConnections: Bool = false) throws {
        context = try Context(defaultLinger: 0)
        let endpoint = "inproc://reliable-dealer-\(UUID().uuidString)"
        router = try context.socket(.router)
        try router.bind(endpoint)
        dealer = try ReliableDealer(
            sourceID: "tester#1", endpoints: [endpoint], curve: CurveKeys(), context: context,
            heartbeatMilliseconds: 1000, linger: 0, followsConnections: followsConnections)
    }

    /// The sequences the router receives within `timeout`.
    mutating func receivedSequences(_ count: Int, timeout: Duration = .seconds(5)) throws -> [UInt64] {
        var sequences: [UInt64] = []
        let deadline = ContinuousClock.now + timeout
        var frames: [[UInt8]] = []
        while sequences.count < count, ContinuousClock.now < deadline {
            guard try router.receive(into: &frames, mode: .within(.milliseconds(100))) else { continue }
            peer = frames[0]
            let message = try WireMessage.decode(from: FrameBuffer(frames: Array(frames.dropFirst())))
            sequences.append(message.envelope.sequence)
        }
        return sequences
    }

    func reply(_ message: some WireMessageEncodable) throws {
        try router.send(peer, more: true)
        try router.send(message: try message.encoded())
    }

    /// Services the dealer until `done` holds or `timeout` passes.
    func service(until done: () -> Bool, timeout: Duration = .seconds(5)) throws {
        let deadline = ContinuousClock.now + timeout
        while !done(), ContinuousClock.now < deadline {
            try dealer.service(now: .now)
            Thread.sleep(forTimeInterval: 0.005)
        }
    }
}

@Suite("The reliable DEALER every sender shares")
struct ReliableDealerTests {
    private func step(_ sequence: UInt64) throws(WireError) -> FrameBuffer {
        try StepMessage(
            stepperID: "home",
            envelope: Envelope(kind: .step, contentType: .fbv, sequence: sequence, source: "tester#1"),
            name: "go", params: [:]
        ).encoded()
    }

    @Test("messages are numbered from 1, kept until a cumulative ack, and sent again from the gap a refusal names")
    func acksAndGaps() throws {
        var pair = try Pair()
        for _ in 1...3 { try pair.dealer.enqueue(step) }
        #expect(try pair.receivedSequences(3) == [1, 2, 3])
        try pair.reply(
            Ack(
                envelope: Envelope(kind: .ack, sequence: 1, messageID: .none, source: "daemon#1"),
                acknowledgedSource: "tester#1", acknowledgedSequence: 2))
        try pair.service { pair.dealer.outbox.outstanding == 1 }
        #expect(pair.dealer.outbox.lastAcknowledged == 2)
        try pair.reply(
            DiagnosticMessage(
                envelope: Envelope(
                    kind: .diagnostic, contentType: .json, sequence: 2, messageID: .none, source: "daemon#1"),
                reason: .outOfOrder, message: "resend from 3",
                details: ["source": "tester#1", "sequence": 4, "expected": 3, "endpoint": "ingress"]))
        try pair.service { pair.dealer.outbox.resentCount > 0 }
        #expect(try pair.receivedSequences(1) == [3], "the unacknowledged one, with its own sequence")
    }

    @Test("a refusal is recorded against its message; a new daemon source sends what it did not acknowledge again")
    func refusalsAndRestarts() throws {
        var pair = try Pair()
        var resends: [String] = []
        pair.dealer.didResend = { reason, count in resends.append("\(reason) \(count)") }
        try pair.dealer.enqueue(step)
        try pair.dealer.enqueue(step)
        #expect(try pair.receivedSequences(2) == [1, 2])
        try pair.reply(
            DiagnosticMessage(
                envelope: Envelope(
                    kind: .diagnostic, contentType: .json, sequence: 1, messageID: .none, source: "daemon#1"),
                reason: .unknownStep, message: "no step go",
                details: ["source": "tester#1", "sequence": 1, "endpoint": "ingress"]))
        try pair.reply(
            Ack(
                envelope: Envelope(kind: .ack, sequence: 2, messageID: .none, source: "daemon#1"),
                acknowledgedSource: "tester#1", acknowledgedSequence: 1))
        try pair.service { pair.dealer.outbox.lastAcknowledged == 1 }
        #expect(pair.dealer.outbox.refusal(for: 1)?.reason == .unknownStep)
        // Heard from another instance: it lost what the first one had not committed.
        try pair.dealer.heard(from: "daemon#2")
        #expect(try pair.receivedSequences(1) == [2])
        #expect(resends == ["a new daemon instance answers 1"])
    }

    @Test("replies it cannot decode or does not use are skipped, not failed on: the ack after them is taken (§3.2)")
    func skipsRepliesItDoesNotUse() throws {
        var pair = try Pair()
        try pair.dealer.enqueue(step)
        #expect(try pair.receivedSequences(1) == [1])
        // An envelope of an unknown kind (99), then frames that are no message at all.
        var unknown = try Envelope(kind: .ack, sequence: 1, messageID: .none, source: "daemon#1").encoded()
        unknown[1] = 99
        try pair.router.send(pair.peer, more: true)
        try pair.router.send(Array("ack/tester#1".utf8), more: true)
        try pair.router.send(unknown)
        try pair.router.send(pair.peer, more: true)
        try pair.router.send(Array("garbage".utf8))
        try pair.reply(
            Ack(
                envelope: Envelope(kind: .ack, sequence: 2, messageID: .none, source: "daemon#1"),
                acknowledgedSource: "tester#1", acknowledgedSequence: 1))
        try pair.service { pair.dealer.outbox.lastAcknowledged == 1 }
        #expect(pair.dealer.outbox.lastAcknowledged == 1)
    }

    @Test(
        "a message queued is numbered whatever the socket says then: the caller is not told to send it again, and a failing socket fails the next call"
    )
    func queuedDespiteSocketFailure() throws {
        let pair = try Pair()
        #expect(try pair.dealer.enqueue(step) == 1)
        pair.context.shutdown()
        #expect(try pair.dealer.enqueue(step) == 2, "queued, not thrown")
        #expect(pair.dealer.outbox.outstanding == 2)
        #expect(throws: ZMQError.self) { try pair.dealer.service(now: .now) }
    }
}

@Suite("A stepper's publisher")
struct StepPublisherTests {
    @Test("a socket error after a step was queued returns its sequence, and the next publish throws it")
    func socketErrorAfterQueueing() throws {
        let context = try Context(defaultLinger: 0)
        let publisher = try StepPublisher(
            stepperID: "home", endpoints: ["inproc://publisher-\(UUID().uuidString)"], context: context)
        #expect(try publisher.publish("go") == 1)
        context.shutdown()
        #expect(try publisher.publish("go") == 2, "queued: not to be sent again under another sequence")
        #expect(throws: ZMQError.self) { try publisher.publish("go") }
    }
}

@Suite("A view's subscription to its host's states")
struct ReactorViewSubscriptionTests {
    @Test("following several instances, its SUB sends ZMTP heartbeats and looks for a new one every quarter second")
    func followsInstances() {
        let one = ReactorView.subscriberOptions(reactorID: "cart", instances: 1)
        let two = ReactorView.subscriberOptions(reactorID: "cart", instances: 2)
        #expect(!one.contains(.heartbeatInterval(1000)))
        #expect(two.contains(.heartbeatInterval(1000)) && two.contains(.heartbeatTimeout(3000)))
        #expect(two.contains(.reconnectIntervalMax(250)))
        #expect(two.contains(.subscribe(Topic.state("cart"))) && two.contains(.subscribe("hb/")))
    }
}
