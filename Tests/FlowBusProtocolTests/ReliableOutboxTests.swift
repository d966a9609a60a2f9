import FlowBusWire
import Testing

@testable import FlowBusProtocol

private let sender = "stepper#1"

/// A message whose single frame names its sequence, so a test can tell what was sent.
private func payload(_ sequence: UInt64, _ text: String = "message") -> FrameBuffer {
    FrameBuffer(frames: [Array("\(text) \(sequence)".utf8)])
}

private func ack(_ sequence: UInt64, from daemon: String = "flowd#1", for source: String = sender) -> Ack {
    Ack(
        envelope: Envelope(kind: .ack, sequence: 1, source: daemon), acknowledgedSource: source,
        acknowledgedSequence: sequence)
}

private func refusal(
    _ reason: DiagnosticReason, sequence: UInt64?, expected: UInt64? = nil, source: String = sender,
    from daemon: String = "flowd#1"
) -> DiagnosticMessage {
    var details: WireParams = ["source": .string(source)]
    if let sequence { details["sequence"] = .int(Int64(sequence)) }
    if let expected { details["expected"] = .int(Int64(expected)) }
    return DiagnosticMessage(
        envelope: Envelope(kind: .diagnostic, contentType: .fbv, sequence: 1, source: daemon), reason: reason,
        message: "refused", details: details)
}

/// The sequences an action sends, and why (nil: none, or only first sends).
private func sent(_ action: ReliableOutbox.Action) -> (sequences: [UInt64], reason: ReliableOutbox.ResendReason?) {
    guard case .send(let transmission) = action else { return ([], nil) }
    return (Array(transmission.sequences), transmission.reason)
}

private func connectedOutbox(retransmit: Duration = .seconds(1), cap: Duration = .seconds(30)) -> ReliableOutbox {
    var outbox = ReliableOutbox(sourceID: sender, retransmitInterval: retransmit, maxRetransmitInterval: cap)
    #expect(outbox.connected() == .none)
    return outbox
}

extension ReliableOutbox {
    /// Enqueues a test message; returns what to send.
    fileprivate mutating func add() -> Action {
        enqueue { sequence in payload(sequence) }.action
    }
}

@Suite("Reliable outbox: the sending side of the protocol")
struct ReliableOutboxTests {
    @Test("Messages are numbered from 1 without a gap and sent at once while connected")
    func numbering() {
        var outbox = connectedOutbox()
        for expected: UInt64 in 1...3 {
            let (sequence, action) = outbox.enqueue { payload($0) }
            #expect(sequence == expected)
            guard case .send(let transmission) = action else {
                Issue.record("message \(expected) not sent")
                return
            }
            #expect(transmission.sequences == expected...expected)
            #expect(transmission.reason == nil && !transmission.isResend(expected))
            #expect(outbox.frames(of: expected, in: transmission) == payload(expected))
        }
        struct Unencodable: Error {}
        do {
            _ = try outbox.enqueue { _ throws(Unencodable) in throw Unencodable() }
            Issue.record("no error")
        } catch {}
        #expect(outbox.enqueue { payload($0) }.sequence == 4, "a message that failed to encode takes no sequence")
        #expect(outbox.lastSequence == 4 && outbox.outstanding == 4)
    }

    @Test("An outbox continuing a kept source numbers after its last sequence and resends from there at the most")
    func continuingAfterAKeptSequence() {
        var outbox = ReliableOutbox(sourceID: sender, continuingAfter: 41)
        #expect(outbox.lastSequence == 41 && outbox.lastAcknowledged == 41 && outbox.outstanding == 0)
        #expect(outbox.add() == .none, "not connected yet: it waits")
        #expect(sent(outbox.connected()) == ([42], nil), "sent for the first time once connected")
        for _ in 1...2 { _ = outbox.add() }
        #expect(outbox.received(ack: ack(40)) == .none, "an ack below what it continues from changes nothing")
        _ = outbox.received(ack: ack(42))
        #expect(outbox.lastAcknowledged == 42 && outbox.outstanding == 2)
        outbox.disconnected()
        guard case .send(let transmission) = outbox.connected() else {
            Issue.record("nothing resent on reconnection")
            return
        }
        #expect(transmission.sequences == 43...44)
        #expect(outbox.frames(of: 44, in: transmission) == payload(44))
    }

    @Test("A cumulative ack releases every message it covers; the others stay, with their frames")
    func cumulativeAckRelease() {
        var outbox = connectedOutbox()
        let count: UInt64 = 5000
        for _ in 1...count { _ = outbox.add() }
        var acknowledged: UInt64 = 0
        for step: UInt64 in [1, 700, 1300, 2, 999, 1] {
            acknowledged += step
            _ = outbox.received(ack: ack(acknowledged))
            #expect(outbox.lastAcknowledged == acknowledged)
            #expect(outbox.outstanding == Int(count - acknowledged))
            // The remaining ones are resent with their own frames (released in bulk, not shifted).
            outbox.disconnected()
            guard case .send(let transmission) = outbox.connected() else {
                Issue.record("nothing resent after ack \(acknowledged)")
                return
            }
            #expect(transmission.sequences == acknowledged + 1...count)
            #expect(outbox.frames(of: acknowledged + 1, in: transmission) == payload(acknowledged + 1))
            #expect(outbox.frames(of: count, in: transmission) == payload(count))
        }
        _ = outbox.received(ack: ack(count))
        #expect(outbox.outstanding == 0)
        #expect(outbox.add() == .send(ReliableOutbox.Transmission(sequences: 5001...5001, firstNew: 5001, reason: nil)))
    }

    @Test("Stale and duplicate acks change nothing; acks for another source are ignored")
    func staleAcksIgnored() {
        var outbox = connectedOutbox()
        for _ in 1...5 { _ = outbox.add() }
        #expect(outbox.received(ack: ack(4)) == .none)
        #expect(outbox.received(ack: ack(2)) == .none)
        #expect(outbox.received(ack: ack(4)) == .none)
        #expect(outbox.lastAcknowledged == 4 && outbox.outstanding == 1)
        #expect(outbox.received(ack: ack(5, for: "someone-else#9")) == .none)
        #expect(outbox.lastAcknowledged == 4)
        _ = outbox.received(ack: ack(99))
        #expect(outbox.lastAcknowledged == 5, "an ack past the last sequence covers what was sent, no more")
    }

    @Test("A reconnection resends what is unacknowledged, and what waited; the first connection resends nothing")
    func resendOnReconnect() {
        var outbox = ReliableOutbox(sourceID: sender)
        #expect(outbox.add() == .none, "not connected yet: it waits")
        #expect(sent(outbox.connected()) == ([1], nil))
        _ = outbox.add()
        _ = outbox.add()
        _ = outbox.received(ack: ack(1))
        outbox.disconnected()
        #expect(!outbox.isConnected)
        #expect(outbox.add() == .none, "disconnected: message 4 waits")
        #expect(outbox.tick(now: .now) == .none)
        guard case .send(let transmission) = outbox.connected() else {
            Issue.record("nothing resent on reconnection")
            return
        }
        #expect(transmission.sequences == 2...4)
        #expect(transmission.reason == .reconnected)
        #expect(transmission.isResend(3) && !transmission.isResend(4))
        #expect(outbox.resentCount == 2)
        #expect(outbox.connected() == .none, "a repeated connected event resends nothing")
    }

    @Test(
        "Connections to several daemon instances: messages wait once none is left; the new active one's first ack resends"
    )
    func severalInstances() {
        var outbox = ReliableOutbox(sourceID: sender)
        #expect(outbox.add() == .none, "no instance reached yet: it waits")
        #expect(sent(outbox.connected()) == ([1], nil), "the active instance is reached")
        _ = outbox.received(ack: ack(1, from: "flowd#a"))
        #expect(sent(outbox.add()).sequences == [2])
        // The active one's host is cut off: its connection is not yet known dead when the
        // standby takes over and is reached too.
        #expect(outbox.connected() == .none, "a second connection resends nothing by itself")
        #expect(sent(outbox.add()).sequences == [3])
        guard case .send(let resend) = outbox.received(ack: ack(1, from: "flowd#b")) else {
            Issue.record("the new instance's first ack resent nothing")
            return
        }
        #expect(resend.sequences == 2...3 && resend.reason == .daemonRestarted)
        outbox.disconnected()
        #expect(outbox.isConnected, "the dead instance's connection dropped; the new one's remains")
        #expect(sent(outbox.add()).sequences == [4], "messages still go out")
        outbox.disconnected()
        #expect(!outbox.isConnected && outbox.add() == .none, "no connection left: messages wait")
        #expect(sent(outbox.connected()) == ([2, 3, 4, 5], .reconnected))
    }

    @Test("A socket that queues before its first connection takes messages at once; that connection resends nothing")
    func socketQueuesUntilConnected() {
        var outbox = ReliableOutbox(sourceID: sender)
        outbox.socketQueuesUntilConnected()
        #expect(sent(outbox.add()).sequences == [1])
        #expect(outbox.connected() == .none)
        outbox.disconnected()
        #expect(!outbox.isConnected)
        #expect(sent(outbox.connected()) == ([1], .reconnected))
    }

    @Test("Acks from a new daemon instance resend what is unacknowledged, once")
    func resendOnNewDaemon() {
        var outbox = connectedOutbox()
        for _ in 1...3 { _ = outbox.add() }
        #expect(outbox.received(ack: ack(1, from: "flowd#1")) == .none)
        #expect(outbox.daemonSource == "flowd#1")
        let restarted = sent(outbox.received(ack: ack(1, from: "flowd#2")))
        #expect(restarted.sequences == [2, 3] && restarted.reason == .daemonRestarted)
        #expect(outbox.received(ack: ack(2, from: "flowd#2")) == .none, "not again on the next ack")
        #expect(outbox.heard(from: "flowd#2") == .none)
        #expect(sent(outbox.heard(from: "flowd#3")).sequences == [3], "any message naming a new instance counts")
        _ = outbox.received(ack: ack(3, from: "flowd#3"))
        #expect(outbox.received(ack: ack(3, from: "flowd#4")) == .none, "nothing unacknowledged: nothing to resend")
    }

    @Test("After a resend on reconnection, the new daemon's first ack does not resend again")
    func reconnectThenNewDaemon() {
        var outbox = connectedOutbox()
        for _ in 1...3 { _ = outbox.add() }
        _ = outbox.received(ack: ack(1, from: "flowd#1"))
        outbox.disconnected()
        #expect(sent(outbox.connected()).sequences == [2, 3])
        #expect(outbox.received(ack: ack(2, from: "flowd#2")) == .none)
        #expect(outbox.resentCount == 2)
    }

    @Test(
        "Without ack progress unacknowledged messages are resent; the interval doubles to its cap, resets on progress")
    func backoffResend() {
        var outbox = connectedOutbox(retransmit: .seconds(1), cap: .seconds(4))
        let start = ContinuousClock.now
        func at(_ milliseconds: Int64) -> ContinuousClock.Instant { start + .milliseconds(milliseconds) }
        _ = outbox.add()
        _ = outbox.add()
        #expect(outbox.tick(now: at(0)) == .none, "the first tick starts timing")
        #expect(outbox.tick(now: at(999)) == .none)
        #expect(sent(outbox.tick(now: at(1000))) == ([1, 2], .noAckProgress))
        #expect(outbox.currentRetransmitInterval == .seconds(2))
        #expect(outbox.tick(now: at(2999)) == .none)
        #expect(sent(outbox.tick(now: at(3000))).sequences == [1, 2])
        #expect(outbox.currentRetransmitInterval == .seconds(4))
        #expect(outbox.tick(now: at(6999)) == .none)
        #expect(sent(outbox.tick(now: at(7000))).sequences == [1, 2])
        #expect(outbox.currentRetransmitInterval == .seconds(4), "capped")
        #expect(sent(outbox.tick(now: at(11000))).sequences == [1, 2])

        _ = outbox.received(ack: ack(1))
        #expect(outbox.currentRetransmitInterval == .seconds(1), "progress resets the interval")
        #expect(outbox.tick(now: at(11500)) == .none, "progress restarts the timing")
        #expect(outbox.tick(now: at(12499)) == .none)
        #expect(sent(outbox.tick(now: at(12500))).sequences == [2])

        outbox.disconnected()
        #expect(outbox.tick(now: at(60000)) == .none, "no resend while disconnected")
        _ = outbox.received(ack: ack(2))
        #expect(outbox.tick(now: at(61000)) == .none, "nothing unacknowledged: nothing to time")
    }

    @Test("An out-of-order refusal resends from the expected sequence, once for the refusals a resend already covers")
    func outOfOrderResend() {
        var outbox = connectedOutbox()
        for _ in 1...5 { _ = outbox.add() }
        _ = outbox.received(ack: ack(2))
        let gap = outbox.received(refusal: refusal(.outOfOrder, sequence: 4, expected: 3))
        #expect(sent(gap) == ([3, 4, 5], .outOfOrder))
        #expect(
            outbox.received(refusal: refusal(.outOfOrder, sequence: 5, expected: 3)) == .none,
            "message 5 was sent before that resend: its refusal is not news")
        _ = outbox.add()
        let again = outbox.received(refusal: refusal(.outOfOrder, sequence: 6, expected: 3))
        #expect(
            sent(again).sequences == [3, 4, 5, 6],
            "a message sent after the resend was refused: the resend did not get through")
        _ = outbox.received(ack: ack(3))
        #expect(
            sent(outbox.received(refusal: refusal(.outOfOrder, sequence: 6, expected: 5))).sequences == [5, 6],
            "after progress a refusal is news again; messages the daemon has are not resent")
        #expect(outbox.received(refusal: refusal(.outOfOrder, sequence: 6, expected: 5, source: "other#2")) == .none)
        #expect(outbox.refusal(for: 6) == nil, "out-of-order is not recorded: the message goes again")
    }

    @Test(
        "An out-of-order asking for acknowledged messages resends what is held at once, once per daemon and gap; journal-behind is a refusal"
    )
    func daemonLedgerBehind() {
        var outbox = connectedOutbox()
        for _ in 1...12 { _ = outbox.add() }
        _ = outbox.received(ack: ack(10))
        // A resend since the last progress covers 11...12: refusals of them would not be news...
        #expect(sent(outbox.received(refusal: refusal(.outOfOrder, sequence: 12, expected: 11))).sequences == [11, 12])
        // ...but a daemon whose ledger lost 6...10 asks for what this sender no longer holds.
        let behind = outbox.received(refusal: refusal(.outOfOrder, sequence: 11, expected: 6, from: "flowd#2"))
        #expect(
            sent(behind) == ([11, 12], .outOfOrder),
            "going back to the oldest held tells the daemon nothing older comes")
        #expect(
            outbox.received(refusal: refusal(.outOfOrder, sequence: 12, expected: 6, from: "flowd#2")) == .none,
            "once per daemon instance and gap")
        #expect(
            sent(outbox.received(refusal: refusal(.outOfOrder, sequence: 11, expected: 6, from: "flowd#3"))).sequences
                == [11, 12])
        let refused = refusal(.journalBehind, sequence: 11, from: "flowd#3")
        #expect(outbox.received(refusal: refused) == .none)
        #expect(outbox.refusal(for: 11)?.reason == .journalBehind, "journal-behind is recorded against the message")
    }

    @Test("An out-of-order refusal without `expected` resends everything unacknowledged")
    func outOfOrderWithoutExpected() {
        var outbox = connectedOutbox()
        for _ in 1...4 { _ = outbox.add() }
        _ = outbox.received(ack: ack(1))
        // flowd names the expected sequence in `sequence` and has no `expected`.
        #expect(
            sent(outbox.received(refusal: refusal(.outOfOrder, sequence: 3, expected: nil))).sequences == [2, 3, 4])
    }

    @Test("Refusals are matched to this source's messages by sequence; duplicates and other sources are not refusals")
    func refusalMatching() {
        var outbox = ReliableOutbox(sourceID: sender, maxRecordedRefusals: 2)
        _ = outbox.connected()
        for _ in 1...4 { _ = outbox.add() }
        let badParams = refusal(.badParams, sequence: 2)
        #expect(outbox.received(refusal: badParams) == .none)
        #expect(outbox.refusal(for: 2) == badParams)
        #expect(outbox.refusal(for: 1) == nil)
        _ = outbox.received(refusal: refusal(.malformed, sequence: 3, source: "other#2"))
        #expect(outbox.refusal(for: 3) == nil, "another source's refusal")
        _ = outbox.received(refusal: refusal(.duplicate, sequence: 3))
        #expect(outbox.refusal(for: 3) == nil, "a duplicate was dealt with before: not a refusal")
        _ = outbox.received(refusal: refusal(.malformed, sequence: 9))
        #expect(outbox.refusal(for: 9) == nil, "a sequence never sent")
        _ = outbox.received(refusal: refusal(.badParams, sequence: nil))
        #expect(outbox.refusals == [badParams], "a refusal naming no sequence matches no message")
        _ = outbox.received(refusal: refusal(.unknownKind, sequence: 3))
        _ = outbox.received(refusal: refusal(.malformed, sequence: 4))
        #expect(outbox.refusals.map(\.reason) == [.unknownKind, .malformed], "the oldest go first beyond the limit")
        #expect(outbox.refusal(for: 2) == nil)
        #expect(outbox.refusal(for: 4)?.reason == .malformed)
    }

    @Test("Messages wait, in order, while not connected or not taken by the socket, and go out on the next chance")
    func waitingMessages() {
        var outbox = ReliableOutbox(sourceID: sender)
        for _ in 1...3 { #expect(outbox.add() == .none) }
        #expect(outbox.waiting == 3)
        #expect(outbox.tick(now: .now) == .none)
        #expect(sent(outbox.connected()) == ([1, 2, 3], nil))
        #expect(outbox.waiting == 0)

        guard case .send(let fourth) = outbox.add() else {
            Issue.record("message 4 not sent")
            return
        }
        outbox.notTaken(from: fourth.sequences.lowerBound)
        #expect(outbox.waiting == 1)
        guard case .send(let next) = outbox.add() else {
            Issue.record("message 5 not sent")
            return
        }
        #expect(next.sequences == 4...5, "the one not taken goes first")
        #expect(!next.isResend(4) && next.reason == nil, "it was never sent: a first send")
        outbox.notTaken(from: 5)
        #expect(sent(outbox.tick(now: .now)) == ([5], nil))
    }

    @Test("A resend the socket does not take entirely goes on later with its reason; counts only what went")
    func resendNotTaken() {
        var outbox = connectedOutbox()
        for _ in 1...4 { _ = outbox.add() }
        outbox.disconnected()
        #expect(sent(outbox.connected()).sequences == [1, 2, 3, 4])
        outbox.notTaken(from: 3)
        #expect(outbox.resentCount == 2)
        guard case .send(let rest) = outbox.tick(now: .now) else {
            Issue.record("the rest of the resend not sent")
            return
        }
        #expect(rest.sequences == 3...4 && rest.isResend(4) && rest.reason == .reconnected)
        #expect(outbox.resentCount == 4)
    }

    @Test("A message can give other frames for its resends")
    func resendFrames() {
        var outbox = connectedOutbox()
        let (sequence, first) = outbox.enqueue({ payload($0, "request") }, resentAs: { payload($0, "filler") })
        guard case .send(let transmission) = first else {
            Issue.record("not sent")
            return
        }
        #expect(outbox.frames(of: sequence, in: transmission) == payload(1, "request"))
        outbox.disconnected()
        guard case .send(let resend) = outbox.connected() else {
            Issue.record("not resent")
            return
        }
        #expect(outbox.frames(of: sequence, in: resend) == payload(1, "filler"))
    }

    @Test("Back-pressure: no room once maxOutstanding messages wait for their ack")
    func maxOutstanding() {
        var outbox = ReliableOutbox(sourceID: sender, maxOutstanding: 2)
        #expect(outbox.hasRoom)
        _ = outbox.add()
        _ = outbox.add()
        #expect(!outbox.hasRoom, "waiting messages count too")
        _ = outbox.connected()
        _ = outbox.received(ack: ack(1))
        #expect(outbox.hasRoom)
        outbox.maxOutstanding = 1
        #expect(!outbox.hasRoom)
    }
}
