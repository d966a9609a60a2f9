import FlowBusWire
import Synchronization
import Testing

@testable import FlowBusProtocol

/// An ``Intake`` whose durable ledger answers each look-up at once, as a daemon's loop does a
/// batch later: the tests of the ledger's rules read as if the look-up were a call.
private struct TestIntake {
    var intake: Intake
    let lookUp: ((String) throws -> UInt64?)?

    init(
        endpoint: String, policy: Intake.Policy, defaultRole: String, lastSequences: [String: UInt64] = [:],
        lookUp: ((String) throws -> UInt64?)? = nil
    ) {
        var policy = policy
        policy.hasDurableLedger = lookUp != nil
        intake = Intake(endpoint: endpoint, policy: policy, defaultRole: defaultRole, lastSequences: lastSequences)
        self.lookUp = lookUp
    }

    mutating func receive(source: String, sequence: UInt64, topic: String, peer: [UInt8]) -> Intake.Verdict {
        let verdict = intake.receive(source: source, sequence: sequence, topic: topic, peer: peer)
        guard verdict == .lookUp, let lookUp else { return verdict }
        do {
            intake.lookedUp(source, last: try lookUp(source))
        } catch {
            intake.lookUpFailed(source)
            return .lookUp
        }
        return intake.receive(source: source, sequence: sequence, topic: topic, peer: peer)
    }

    mutating func refuse(
        _ error: WireError, frames: FrameBuffer, peer: [UInt8], limits: WireLimits
    ) -> (refusal: Refusal, verdict: Intake.Verdict?) {
        intake.refuse(error, frames: frames, peer: peer, limits: limits)
    }

    @discardableResult
    mutating func heartbeat(source: String, sequence: UInt64 = 0, topic: String = "", peer: [UInt8]) -> Intake.Verdict?
    {
        intake.heartbeat(source: source, sequence: sequence, topic: topic, peer: peer)
    }

    mutating func heard(source: String, role: String, now: ContinuousClock.Instant) {
        intake.heard(source: source, role: role, now: now)
    }

    mutating func endBatch(now: ContinuousClock.Instant, checkEvery: Duration) -> Intake.BatchEnd {
        intake.endBatch(now: now, checkEvery: checkEvery)
    }

    mutating func forgetSources(now: ContinuousClock.Instant, keeping isUnsaved: (String) -> Bool = { _ in false }) {
        intake.forgetSources(now: now, keeping: isUnsaved)
    }

    func lastSequence(of source: String) -> UInt64? { intake.lastSequence(of: source) }
    var sourceCount: Int { intake.sourceCount }
    var counters: Intake.Counters { intake.counters }
    var peers: [String: Intake.Liveness] { intake.peers }
}

@Suite("Intake: the receiving side of the protocol")
struct IntakeTests {
    private let start = ContinuousClock.now

    private func intake(remembersSources: Bool = false, last: [String: UInt64] = [:]) -> TestIntake {
        TestIntake(
            endpoint: "ingress", policy: .init(remembersSources: remembersSources, deadAfter: .seconds(3)),
            defaultRole: "stepper", lastSequences: last)
    }

    @Test("the next sequence of a source is fresh; one cumulative ack per source per batch, to its latest peer")
    func freshMessagesAreAcknowledgedCumulatively() {
        var intake = intake(remembersSources: true)
        #expect(intake.receive(source: "a", sequence: 1, topic: "step/x", peer: Array("p1".utf8)) == .fresh)
        #expect(intake.receive(source: "a", sequence: 2, topic: "step/x", peer: Array("p2".utf8)) == .fresh)
        #expect(intake.receive(source: "b", sequence: 1, topic: "step/y", peer: Array("p3".utf8)) == .fresh)
        let end = intake.endBatch(now: start, checkEvery: .seconds(1))
        #expect(
            Set(end.acks.map { "\($0.source)@\($0.sequence)->\(String(decoding: $0.peer, as: UTF8.self))" }) == [
                "a@2->p2", "b@1->p3",
            ])
        #expect(end.dealtWith == ["a": 2, "b": 1])
        #expect(end.refusals.isEmpty)
        let next = intake.endBatch(now: start, checkEvery: .seconds(1))
        #expect(next.acks.isEmpty && next.dealtWith.isEmpty, "a batch's acks go out once")
    }

    @Test(
        "a run of one source's messages is judged message by message: a duplicate or a gap inside it, another source between"
    )
    func runsOfOneSource() {
        var intake = intake(remembersSources: true)
        let p1 = Array("p1".utf8)
        let p2 = Array("p2".utf8)
        for sequence in UInt64(1)...5 {
            #expect(intake.receive(source: "a", sequence: sequence, topic: "step/x", peer: p1) == .fresh)
        }
        #expect(intake.lastSequence(of: "a") == 5)
        #expect(intake.receive(source: "a", sequence: 5, topic: "step/x", peer: p1) == .duplicate)
        #expect(intake.receive(source: "a", sequence: 6, topic: "step/x", peer: p2) == .fresh)
        #expect(intake.receive(source: "a", sequence: 7, topic: "step/x", peer: p2) == .fresh)
        #expect(intake.receive(source: "a", sequence: 9, topic: "step/x", peer: p2) == .outOfOrder(expected: 8))
        #expect(intake.receive(source: "b", sequence: 1, topic: "step/y", peer: p1) == .fresh)
        #expect(intake.receive(source: "a", sequence: 8, topic: "step/x", peer: p2) == .fresh)
        let end = intake.endBatch(now: start, checkEvery: .seconds(1))
        #expect(
            Set(end.acks.map { "\($0.source)@\($0.sequence)->\(String(decoding: $0.peer, as: UTF8.self))" }) == [
                "a@8->p2", "b@1->p1",
            ])
        #expect(end.dealtWith == ["a": 8, "b": 1])
        #expect(end.refusals.map(\.refusal.sequence) == [9])
        #expect(intake.counters.fresh == 9 && intake.counters.duplicates == 1 && intake.counters.outOfOrder == 1)
        // The next batch goes on from the ledger.
        #expect(intake.receive(source: "a", sequence: 9, topic: "step/x", peer: p1) == .fresh)
        #expect(intake.receive(source: "a", sequence: 10, topic: "step/x", peer: p1) == .fresh)
        let next = intake.endBatch(now: start, checkEvery: .seconds(1))
        #expect(next.acks.map(\.sequence) == [10] && next.dealtWith == ["a": 10])
    }

    @Test("a duplicate is acknowledged again with the last sequence dealt with, not applied, not refused")
    func duplicatesAreAcknowledgedAgain() {
        var intake = intake(last: ["a": 10])
        #expect(intake.receive(source: "a", sequence: 7, topic: "step/x", peer: Array("p".utf8)) == .duplicate)
        #expect(intake.receive(source: "a", sequence: 10, topic: "step/x", peer: Array("p".utf8)) == .duplicate)
        let end = intake.endBatch(now: start, checkEvery: .seconds(1))
        #expect(end.acks == [.init(peer: Array("p".utf8), source: "a", sequence: 10)])
        #expect(end.refusals.isEmpty && end.dealtWith.isEmpty)
        #expect(intake.counters.duplicates == 2)
    }

    @Test("a gap is refused once per source and batch, naming the first refused sequence and the one expected")
    func gapsAreRefusedOncePerBatch() throws {
        var intake = intake(last: ["a": 4])
        #expect(
            intake.receive(source: "a", sequence: 6, topic: "step/x", peer: Array("p".utf8)) == .outOfOrder(expected: 5)
        )
        #expect(
            intake.receive(source: "a", sequence: 7, topic: "step/x", peer: Array("p".utf8)) == .outOfOrder(expected: 5)
        )
        let end = intake.endBatch(now: start, checkEvery: .seconds(1))
        #expect(end.refusals.count == 1)
        let (peer, refusal) = try #require(end.refusals.first)
        #expect(peer == Array("p".utf8))
        #expect(refusal.reason == .outOfOrder)
        #expect(
            refusal.details == [
                "endpoint": "ingress", "source": "a", "topic": "step/x", "sequence": 6, "expected": 5, "count": 2,
            ])
        #expect(
            end.acks == [.init(peer: Array("p".utf8), source: "a", sequence: 4)],
            "the last ack is repeated: resend from 5")
        #expect(intake.receive(source: "a", sequence: 5, topic: "step/x", peer: Array("p".utf8)) == .fresh)
        #expect(intake.receive(source: "a", sequence: 6, topic: "step/x", peer: Array("p".utf8)) == .fresh)
        #expect(intake.counters.outOfOrder == 2)
    }

    @Test("first contact: a receiver that remembers every source requires 1; one that forgets adopts the first")
    func firstContact() {
        var remembering = intake(remembersSources: true)
        #expect(
            remembering.receive(source: "new", sequence: 5, topic: "step/x", peer: Array("p".utf8))
                == .outOfOrder(expected: 1))
        let end = remembering.endBatch(now: start, checkEvery: .seconds(1))
        #expect(end.acks.isEmpty, "nothing of an unknown source is acknowledged")
        #expect(end.refusals.first?.refusal.details["expected"] == 1)
        #expect(remembering.receive(source: "new", sequence: 1, topic: "step/x", peer: Array("p".utf8)) == .fresh)

        var forgetting = intake(remembersSources: false)
        #expect(forgetting.receive(source: "new", sequence: 5, topic: "step/x", peer: Array("p".utf8)) == .fresh)
        #expect(
            forgetting.receive(source: "new", sequence: 7, topic: "step/x", peer: Array("p".utf8))
                == .outOfOrder(expected: 6))
    }

    @Test("heartbeats are answered, make a peer judged by its silence, and never touch the ledger")
    func heartbeatsAndLiveness() {
        var intake = intake()
        intake.heartbeat(source: "a", peer: Array("p".utf8))
        var end = intake.endBatch(now: start, checkEvery: .seconds(1))
        #expect(end.heartbeatAnswers == [Array("p".utf8)])
        #expect(end.acks.isEmpty && intake.lastSequence(of: "a") == nil)
        #expect(intake.peers["a"]?.sendsHeartbeats == true)

        end = intake.endBatch(now: start + .seconds(2), checkEvery: .seconds(1))
        #expect(end.deadPeers.isEmpty, "2 s of silence is under the 3 s limit")
        end = intake.endBatch(now: start + .seconds(4), checkEvery: .seconds(1))
        #expect(end.deadPeers == [.init(source: "a", role: "stepper", silentFor: .seconds(4))])
        end = intake.endBatch(now: start + .seconds(6), checkEvery: .seconds(1))
        #expect(end.deadPeers.isEmpty, "a dead peer is reported once")

        intake.heartbeat(source: "a", peer: Array("p".utf8))
        _ = intake.endBatch(now: start + .seconds(7), checkEvery: .seconds(1))
        #expect(intake.peers["a"]?.isDead == false, "heard again: alive")
    }

    @Test("a heartbeat with a sequence fills it: judged by the ledger, acknowledged when fresh")
    func numberedHeartbeatFillsItsSequence() {
        var intake = intake(last: ["a": 4])
        let peer = Array("p".utf8)
        intake.heartbeat(source: "a", sequence: 5, topic: "hb/a", peer: peer)
        #expect(intake.receive(source: "a", sequence: 6, topic: "action/x", peer: peer) == .fresh, "5 was filled")
        let end = intake.endBatch(now: start, checkEvery: .seconds(1))
        #expect(end.acks == [.init(peer: peer, source: "a", sequence: 6)])
        #expect(end.heartbeatAnswers == [peer])
    }

    @Test(
        "a peer that never sent a heartbeat is not judged by its silence; liveness is checked at most once per interval"
    )
    func livenessOnlyForHeartbeatSenders() {
        var intake = intake()
        _ = intake.receive(source: "quiet", sequence: 1, topic: "step/x", peer: Array("p".utf8))
        intake.heard(source: "host#1", role: "reactor-host demo", now: start)
        _ = intake.endBatch(now: start, checkEvery: .seconds(10))
        let early = intake.endBatch(now: start + .seconds(5), checkEvery: .seconds(10))
        #expect(early.deadPeers.isEmpty, "the last check was under 10 s ago")
        let late = intake.endBatch(now: start + .seconds(11), checkEvery: .seconds(10))
        #expect(late.deadPeers.map(\.source) == ["host#1"])
        #expect(late.deadPeers.first?.role == "reactor-host demo")
    }

    @Test("refusal details name endpoint, source, topic and sequence, then the reason's own keys")
    func refusalDetails() throws {
        let header = try RoutedHeader.decode(
            from: StepMessage(
                stepperID: "home", envelope: Envelope(kind: .step, contentType: .fbv, sequence: 3, source: "s#1"),
                name: "go", params: [:]
            ).encoded())
        let refusal = Refusal(.badParams, "no", endpoint: "actions", header: header, extra: ["host": "demo"])
        #expect(
            refusal.details == [
                "endpoint": "actions", "source": "s#1", "topic": "step/home", "sequence": 3, "host": "demo",
            ])
        let unreadable = Refusal(reason: .malformed, detail: "short", endpoint: "ingress")
        #expect(unreadable.details == ["endpoint": "ingress"])
        let diagnostic = refusal.diagnostic(
            Envelope(kind: .diagnostic, contentType: .fbv, sequence: 9, source: "flowd#1"))
        var expected = refusal.details
        expected["message"] = "no"
        #expect(diagnostic.reason == .badParams && diagnostic.details == expected)
    }

    @Test("a message refused before its header decoded is acknowledged when its v1 envelope names source and sequence")
    func refusalsOfReadableEnvelopes() throws {
        var intake = intake(remembersSources: true)
        let peer = Array("p".utf8)
        var frames = try StepMessage(
            stepperID: "home", envelope: Envelope(kind: .step, contentType: .fbv, sequence: 1, source: "s#1"),
            name: "go", params: [:]
        ).encoded()
        // Kind 99: the envelope's layout is sound, its kind unknown.
        var envelope = Array(frames.frameBytes(1))
        envelope[1] = 99
        frames = FrameBuffer(frames: [Array(frames.frameBytes(0)), envelope, Array(frames.frameBytes(2)), []])
        let error = WireError(.unknownKind, "kind 99")
        let first = intake.refuse(error, frames: frames, peer: peer, limits: .default)
        #expect(first.verdict == .fresh)
        #expect(first.refusal.details == ["endpoint": "ingress", "source": "s#1", "topic": "step/home", "sequence": 1])
        let resent = intake.refuse(error, frames: frames, peer: peer, limits: .default)
        #expect(resent.verdict == .duplicate, "a resend is a duplicate")
        let end = intake.endBatch(now: start, checkEvery: .seconds(1))
        #expect(end.acks == [.init(peer: peer, source: "s#1", sequence: 1)], "refused, dealt with, acknowledged")
        #expect(
            intake.receive(source: "s#1", sequence: 2, topic: "step/home", peer: peer) == .fresh, "no stall after it")

        // A source with U+0000 is no source id (§4.2): the message is not judged under it.
        var nul = envelope
        nul[nul.count - 1] = 0
        let nulSource = FrameBuffer(frames: [Array("step/home".utf8), nul, Array(frames.frameBytes(2)), []])
        let unnamed = intake.refuse(WireError(.malformed, "NUL"), frames: nulSource, peer: peer, limits: .default)
        #expect(unnamed.verdict == nil && unnamed.refusal.details["source"] == nil)

        envelope[0] = 2
        let wrongVersion = FrameBuffer(frames: [Array("step/home".utf8), envelope])
        let untrusted = intake.refuse(
            WireError(.unsupportedVersion, "v2"), frames: wrongVersion, peer: peer, limits: .default)
        #expect(untrusted.verdict == nil, "refused, not judged by the ledger")
        #expect(
            untrusted.refusal.details == ["endpoint": "ingress", "topic": "step/home"],
            "another version's envelope is not read")
        #expect(intake.endBatch(now: start, checkEvery: .seconds(1)).acks.allSatisfy { $0.sequence == 2 })
    }

    @Test("a refusal quotes at most 64 code points of the refused message's topic (§8); its source whole")
    func refusalsCutQuotedInput() throws {
        var intake = intake(remembersSources: true)
        let source = String(repeating: "s", count: 200) + "#1"
        let frames = try StepMessage(
            stepperID: "home", envelope: Envelope(kind: .step, contentType: .fbv, sequence: 1, source: source),
            name: "go", params: [:]
        ).encoded()
        // A topic over the limit, as it arrived: 300 bytes, `é` (2 bytes) across the 64th code point.
        let topic = "step/" + String(repeating: "é", count: 100) + String(repeating: "x", count: 95)
        #expect(topic.utf8.count == 300)
        let oversize = FrameBuffer(frames: [Array(topic.utf8)] + frames.frames.dropFirst())
        let refused = intake.refuse(
            WireError(.oversize, "topic is 300 bytes, at most 255 allowed"), frames: oversize, peer: Array("p".utf8),
            limits: .default)
        let refusal = refused.refusal
        #expect(refusal.details["topic"] == .string("step/" + String(repeating: "é", count: 59)))
        #expect(refusal.details["source"] == .string(source), "a sender matches its refusals by its source")
        let unreadable = Refusal(reason: .malformed, detail: "no", endpoint: "ingress", topic: topic)
        #expect(unreadable.details["topic"]?.stringValue?.unicodeScalars.count == 64, "every refusal is cut alike")
        #expect(
            Refusal(reason: .malformed, detail: "no", endpoint: "ingress", topic: "step/home").details["topic"]
                == "step/home")
    }

    @Test("a source not held in memory is looked up in the durable ledger, once")
    func lookUpInTheDurableLedger() {
        let durable = ["known": UInt64(7)]
        let lookUps = Mutex(0)
        var intake = TestIntake(
            endpoint: "ingress",
            policy: .init(remembersSources: true, deadAfter: .seconds(3)), defaultRole: "stepper",
            lookUp: { source in
                lookUps.withLock { $0 += 1 }
                return durable[source]
            })
        let peer = Array("p".utf8)
        #expect(intake.receive(source: "known", sequence: 7, topic: "step/x", peer: peer) == .duplicate)
        #expect(intake.receive(source: "known", sequence: 8, topic: "step/x", peer: peer) == .fresh)
        #expect(intake.receive(source: "new", sequence: 3, topic: "step/x", peer: peer) == .outOfOrder(expected: 1))
        #expect(intake.receive(source: "new", sequence: 1, topic: "step/x", peer: peer) == .fresh)
        #expect(lookUps.withLock { $0 } == 2, "one look-up per source")
        #expect(
            intake.endBatch(now: start, checkEvery: .seconds(1)).acks.contains {
                $0.source == "new" && $0.sequence == 1
            })

        var adopting = TestIntake(
            endpoint: "actions", policy: .init(remembersSources: false, deadAfter: .seconds(3)), defaultRole: "view",
            lookUp: { _ in nil })
        #expect(
            adopting.receive(source: "new", sequence: 40, topic: "action/x", peer: peer) == .fresh,
            "found nowhere: adopted")
        #expect(
            adopting.receive(source: "new", sequence: 42, topic: "action/x", peer: peer) == .outOfOrder(expected: 41))
    }

    @Test(
        "idle sources and the least recently heard beyond the limit are forgotten; a forgotten one is judged by the durable ledger"
    )
    func evictionIsBoundedAndSafe() {
        let durable = Mutex<[String: UInt64]>([:])
        var intake = TestIntake(
            endpoint: "ingress",
            policy: .init(remembersSources: true, deadAfter: .seconds(3), idleTimeout: .seconds(60), maxSources: 10),
            defaultRole: "stepper", lookUp: { source in durable.withLock { $0[source] } })
        let peer = Array("p".utf8)
        for index in 0..<30 {
            let source = "s\(index)"
            _ = intake.receive(source: source, sequence: 1, topic: "step/x", peer: peer)
            // What a journal commits with the batch; then sources may be forgotten.
            let end = intake.endBatch(now: start + .seconds(index), checkEvery: .zero)
            durable.withLock { $0.merge(end.dealtWith) { max($0, $1) } }
            intake.forgetSources(now: start + .seconds(index))
        }
        #expect(intake.sourceCount <= 10, "held: \(intake.sourceCount)")
        #expect(intake.counters.evicted >= 20)
        #expect(intake.lastSequence(of: "s29") == 1, "the most recent stay")
        #expect(intake.lastSequence(of: "s0") == nil, "the oldest went")
        // s0 returns with a resend and then its next message: applied once, never stuck.
        #expect(intake.receive(source: "s0", sequence: 1, topic: "step/x", peer: peer) == .duplicate)
        #expect(intake.receive(source: "s0", sequence: 2, topic: "step/x", peer: peer) == .fresh)

        _ = intake.endBatch(now: start + .seconds(100), checkEvery: .zero)
        intake.forgetSources(now: start + .seconds(100)) { $0 == "s29" }
        #expect(intake.lastSequence(of: "s0") == 2, "heard just now: held")
        #expect(intake.lastSequence(of: "s29") == 1, "idle, but its entry is not saved yet: kept")
        #expect(intake.lastSequence(of: "s28") == nil, "idle past the time-out: forgotten")
        intake.forgetSources(now: start + .seconds(200))
        #expect(intake.sourceCount == 0, "all idle past the time-out: \(intake.sourceCount)")
    }

    @Test(
        "sequence 0 on a numbered message is refused unacknowledged; an unreadable durable ledger makes the sender resend"
    )
    func unnumberedAndUnavailable() {
        struct Unreadable: Error {}
        let fails = Mutex(true)
        var intake = TestIntake(
            endpoint: "ingress",
            policy: .init(remembersSources: true, deadAfter: .seconds(3)), defaultRole: "stepper",
            lookUp: { _ in
                if fails.withLock({ $0 }) { throw Unreadable() }
                return 3
            })
        let peer = Array("p".utf8)
        #expect(intake.receive(source: "a", sequence: 0, topic: "step/x", peer: peer) == .unnumbered)
        #expect(
            intake.receive(source: "a", sequence: 4, topic: "step/x", peer: peer) == .lookUp,
            "held, then dropped: the look-up failed")
        #expect(
            intake.endBatch(now: start, checkEvery: .seconds(1)).acks.isEmpty, "nothing assumed, nothing acknowledged")
        fails.withLock { $0 = false }
        #expect(
            intake.receive(source: "a", sequence: 4, topic: "step/x", peer: peer) == .fresh,
            "the resend is judged by the ledger")
        #expect(intake.counters.lookUpFailures == 1)
    }

    @Test(
        "a look-up is an action: messages of a source not held wait for it, in order; a failed one drops them unacknowledged"
    )
    func lookUpIsAnAction() {
        var intake = Intake(
            endpoint: "ingress", policy: .init(remembersSources: true, deadAfter: .seconds(3), hasDurableLedger: true),
            defaultRole: "stepper")
        let peer = Array("p".utf8)
        #expect(intake.receive(source: "a", sequence: 8, topic: "step/x", peer: peer) == .lookUp)
        #expect(intake.receive(source: "a", sequence: 9, topic: "step/x", peer: peer) == .lookUp, "held behind it")
        #expect(intake.receive(source: "b", sequence: 1, topic: "step/x", peer: peer) == .lookUp)
        var end = intake.endBatch(now: start, checkEvery: .seconds(1))
        #expect(end.lookUps == ["a", "b"], "once per source, in the order first heard")
        #expect(end.acks.isEmpty, "nothing judged, nothing acknowledged")
        #expect(intake.receive(source: "a", sequence: 10, topic: "step/x", peer: peer) == .lookUp, "still waiting")
        #expect(intake.endBatch(now: start, checkEvery: .seconds(1)).lookUps.isEmpty, "not asked twice")

        intake.lookedUp("a", last: 7)
        intake.lookUpFailed("b")
        #expect(intake.receive(source: "a", sequence: 8, topic: "step/x", peer: peer) == .fresh)
        #expect(intake.receive(source: "a", sequence: 9, topic: "step/x", peer: peer) == .fresh)
        #expect(intake.receive(source: "b", sequence: 1, topic: "step/x", peer: peer) == .lookUp, "asked again")
        end = intake.endBatch(now: start, checkEvery: .seconds(1))
        #expect(end.lookUps == ["b"])
        #expect(end.acks == [.init(peer: peer, source: "a", sequence: 9)])
        #expect(intake.counters.lookUpFailures == 1 && intake.counters.lookedUp == 3)
    }

    @Test(
        "found nowhere after a failed look-up, a receiver that adopts takes the lowest sequence it saw, so that what it dropped is resent"
    )
    func adoptsTheLowestSeen() {
        var intake = Intake(
            endpoint: "actions", policy: .init(remembersSources: false, deadAfter: .seconds(3), hasDurableLedger: true),
            defaultRole: "view")
        let peer = Array("p".utf8)
        #expect(intake.receive(source: "v", sequence: 1, topic: "action/x", peer: peer) == .lookUp)
        #expect(intake.receive(source: "v", sequence: 2, topic: "action/x", peer: peer) == .lookUp)
        intake.lookUpFailed("v")
        // 1 and 2 were dropped, unacknowledged; 3 comes before their resend.
        #expect(intake.receive(source: "v", sequence: 3, topic: "action/x", peer: peer) == .lookUp)
        intake.lookedUp("v", last: nil)
        #expect(intake.receive(source: "v", sequence: 3, topic: "action/x", peer: peer) == .outOfOrder(expected: 1))
        var end = intake.endBatch(now: start, checkEvery: .seconds(1))
        #expect(end.acks.isEmpty, "nothing acknowledged past what was dropped")
        for sequence: UInt64 in 1...3 {
            #expect(intake.receive(source: "v", sequence: sequence, topic: "action/x", peer: peer) == .fresh)
        }
        end = intake.endBatch(now: start, checkEvery: .seconds(1))
        #expect(end.acks == [.init(peer: peer, source: "v", sequence: 3)])

        // Without a failure, the first held is the lowest: adopted as before.
        #expect(intake.receive(source: "w", sequence: 40, topic: "action/x", peer: peer) == .lookUp)
        #expect(intake.receive(source: "w", sequence: 41, topic: "action/x", peer: peer) == .lookUp)
        intake.lookedUp("w", last: nil)
        #expect(intake.receive(source: "w", sequence: 40, topic: "action/x", peer: peer) == .fresh)
        #expect(intake.receive(source: "w", sequence: 41, topic: "action/x", peer: peer) == .fresh)
    }

    private func journaled(_ durable: [String: UInt64], acceptsLoss: Bool = false) -> TestIntake {
        TestIntake(
            endpoint: "ingress",
            policy: .init(
                remembersSources: true, deadAfter: .seconds(3), acceptsLedgerLoss: acceptsLoss,
                ledgerLossRemedy: "restart flowd with --accept-journal-loss"),
            defaultRole: "stepper", lookUp: { durable[$0] })
    }

    @Test(
        "a sender ahead of the durable ledger that goes back to what it sent is refused as journal-behind, each batch, reported first once"
    )
    func journalBehindIsRefused() throws {
        var intake = journaled(["s": 5])
        let peer = Array("p".utf8)
        // The journal lost 6...10; the sender had them acknowledged and sends 11, 12.
        #expect(intake.receive(source: "s", sequence: 11, topic: "step/x", peer: peer) == .outOfOrder(expected: 6))
        #expect(intake.receive(source: "s", sequence: 12, topic: "step/x", peer: peer) == .outOfOrder(expected: 6))
        var end = intake.endBatch(now: start, checkEvery: .seconds(1))
        #expect(end.refusals.first?.refusal.reason == .outOfOrder)
        #expect(end.ledgerBehind.isEmpty, "one refusal is not proof: the sender may still hold 6")
        // It resends from 11: it holds nothing older.
        #expect(intake.receive(source: "s", sequence: 11, topic: "step/x", peer: peer) == .ledgerBehind)
        #expect(intake.receive(source: "s", sequence: 12, topic: "step/x", peer: peer) == .ledgerBehind)
        end = intake.endBatch(now: start, checkEvery: .seconds(1))
        #expect(end.refusals.isEmpty, "not out-of-order any more")
        let report = try #require(end.ledgerBehind.first)
        #expect(end.ledgerBehind.count == 1)
        #expect(report.isFirstReport && !report.adopted)
        #expect(report.ledgerLast == 5 && report.received == 11 && report.lost == 5)
        #expect(report.refusal.reason == .journalBehind)
        #expect(
            report.refusal.details == [
                "endpoint": "ingress", "source": "s", "topic": "step/x", "sequence": 11, "journal_last": 5,
                "received": 11,
                "lost": 5, "adopted": false, "count": 2,
            ])
        #expect(report.refusal.detail.contains("--accept-journal-loss"), "the refusal names the way forward")
        #expect(end.acks == [.init(peer: peer, source: "s", sequence: 5)], "nothing past the ledger is acknowledged")
        #expect(intake.counters.ledgerBehind == 2)
        // Later resends: refused again, to the sender, without a new first report.
        #expect(intake.receive(source: "s", sequence: 11, topic: "step/x", peer: peer) == .ledgerBehind)
        end = intake.endBatch(now: start, checkEvery: .seconds(1))
        #expect(end.ledgerBehind.count == 1 && end.ledgerBehind.first?.isFirstReport == false)
        // A sender that does hold 6 gets it applied: nothing was lost after all.
        #expect(intake.receive(source: "s", sequence: 6, topic: "step/x", peer: peer) == .fresh)
        #expect(intake.receive(source: "s", sequence: 8, topic: "step/x", peer: peer) == .outOfOrder(expected: 7))
    }

    @Test("accepting the loss, the sender's sequence is adopted once it goes back, and the sequences lost are counted")
    func journalBehindIsAdoptedWhenAccepted() throws {
        var intake = journaled(["s": 5, "t": 3], acceptsLoss: true)
        let peer = Array("p".utf8)
        #expect(intake.receive(source: "s", sequence: 11, topic: "step/x", peer: peer) == .outOfOrder(expected: 6))
        _ = intake.endBatch(now: start, checkEvery: .seconds(1))
        #expect(intake.receive(source: "s", sequence: 11, topic: "step/x", peer: peer) == .fresh)
        #expect(intake.receive(source: "s", sequence: 12, topic: "step/x", peer: peer) == .fresh)
        let end = intake.endBatch(now: start, checkEvery: .seconds(1))
        let report = try #require(end.ledgerBehind.first)
        #expect(report.adopted && report.lost == 5 && report.isFirstReport)
        #expect(report.refusal.details["adopted"] == true)
        #expect(end.acks == [.init(peer: peer, source: "s", sequence: 12)])
        #expect(end.dealtWith == ["s": 12], "the journal records the adopted sequence")
        // A source that was never ahead is judged as always: a gap filled in order is no loss.
        #expect(intake.receive(source: "t", sequence: 5, topic: "step/x", peer: peer) == .outOfOrder(expected: 4))
        #expect(intake.receive(source: "t", sequence: 4, topic: "step/x", peer: peer) == .fresh)
        #expect(intake.counters.adoptedSources == 1 && intake.counters.lostSequences == 5)
    }

    @Test("a source the ledger lost entirely is behind with journal_last 0; a new source starting at 1 never is")
    func sourceLostEntirely() throws {
        var intake = journaled([:])
        let peer = Array("p".utf8)
        #expect(intake.receive(source: "gone", sequence: 4, topic: "step/x", peer: peer) == .outOfOrder(expected: 1))
        _ = intake.endBatch(now: start, checkEvery: .seconds(1))
        #expect(intake.receive(source: "gone", sequence: 4, topic: "step/x", peer: peer) == .ledgerBehind)
        let report = try #require(intake.endBatch(now: start, checkEvery: .seconds(1)).ledgerBehind.first)
        #expect(report.ledgerLast == 0 && report.lost == 3)
        #expect(intake.receive(source: "new", sequence: 1, topic: "step/x", peer: peer) == .fresh)
        #expect(intake.receive(source: "new", sequence: 3, topic: "step/x", peer: peer) == .outOfOrder(expected: 2))
        #expect(
            intake.receive(source: "new", sequence: 3, topic: "step/x", peer: peer) == .outOfOrder(expected: 2),
            "a source confirmed in step with the ledger has a gap, not a loss")
    }

    @Test("messages in flight after a refusal, later than any sent before, are out of order, not behind")
    func inFlightIsNotBehind() {
        var intake = journaled(["s": 5])
        let peer = Array("p".utf8)
        #expect(intake.receive(source: "s", sequence: 11, topic: "step/x", peer: peer) == .outOfOrder(expected: 6))
        _ = intake.endBatch(now: start, checkEvery: .seconds(1))
        #expect(intake.receive(source: "s", sequence: 12, topic: "step/x", peer: peer) == .outOfOrder(expected: 6))
        #expect(
            intake.receive(source: "s", sequence: 6, topic: "step/x", peer: peer) == .fresh, "the resend from expected")
    }

    @Test("when many peers die at one check, three are reported one by one and the rest together")
    func deadPeersAreAggregated() {
        var intake = intake()
        for index in 0..<50 { intake.heartbeat(source: "s\(index)", peer: Array("p".utf8)) }
        _ = intake.endBatch(now: start, checkEvery: .seconds(1))
        let end = intake.endBatch(now: start + .seconds(10), checkEvery: .seconds(1))
        #expect(end.deadPeers.count == Intake.maxDeadPeersListed)
        #expect(end.moreDeadPeers.count == 50 - Intake.maxDeadPeersListed)
    }
}
