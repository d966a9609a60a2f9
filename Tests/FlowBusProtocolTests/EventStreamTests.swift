import FlowBusWire
import Testing

@testable import FlowBusProtocol

/// An event as a publisher holds it: a topic and an envelope of `source` numbered `sequence`.
private func event(
    _ topic: String, source: String = "flowd#1", sequence: UInt64 = 0, kind: MessageKind = .didNavigate
)
    -> FrameBuffer
{
    let envelope = Envelope(kind: kind, sequence: sequence, source: source)
    return FrameBuffer(frames: [Array(topic.utf8), (try? envelope.encoded()) ?? []])
}

private func envelopeSequence(_ frames: FrameBuffer) -> UInt64? {
    try? RoutedHeader.decode(from: frames).envelope.sequence
}

@Suite("Event streams: numbering, keeping and replaying flowd's events (PROTOCOL.md §4.6)")
struct EventStreamTests {
    @Test(
        "held messages are kept packed: frames whole and in order, numbered; a frame too short for an envelope is left as it is"
    )
    func heldMessagesPacked() throws {
        var held = HeldMessages()
        held.append(FrameBuffer(frames: [Array("a".utf8), [7]]))
        held.setLastSequence(5, patchingEnvelope: true)
        held.append(event("nav/did/Main", sequence: 1))
        held.setLastSequence(6, patchingEnvelope: true)
        held.append(FrameBuffer(frames: [Array("b".utf8), [1, 2, 3], [], Array(repeating: 9, count: 300)]))
        held.setLastSequence(7, patchingEnvelope: true)
        let packed = try PackedEvents(bytes: held.withPacked { Array($0) })
        let events = packed.decoded()
        #expect(events.map(\.sequence) == [5, 6, 7])
        #expect(Array(events[0].frames.frameBytes(1)) == [7], "a frame too short for an envelope is not written into")
        #expect(envelopeSequence(events[1].frames) == 6)
        #expect(Array(events[2].frames.frameBytes(1)) == [1, 2, 3] && events[2].frames.frameBytes(2).isEmpty)
        #expect(events[2].frames.frameBytes(3).count == 300)
        var visited: [Int] = []
        held.forEach { index, message in
            visited.append(index)
            #expect(message.frameCount == events[index].frames.count)
        }
        #expect(visited == [0, 1, 2])
        held.removeAll()
        #expect(held.isEmpty && held.withPacked { $0.isEmpty })
    }

    @Test("held messages are numbered from the journal's last event; the publisher's own carry it in their envelope")
    func numbering() {
        var publication = Publication(endpoint: "events")
        publication.numberEvents(after: 41)
        #expect(publication.keepsEverything, "an event stream keeps what nobody subscribed to")
        #expect(publication.nextSequence(for: .didNavigate) == 42)
        #expect(publication.take(event("nav/did/Main", sequence: 999)) == .held)
        #expect(publication.offer(event("step/movies", source: "stepper#1", sequence: 7, kind: .step)) == .held)
        #expect(publication.hasHeldEvents)
        var packed = PackedEvents()
        publication.heldEvents(into: &packed)
        let events = packed.decoded()
        #expect(events.map(\.sequence) == [42, 43])
        #expect(envelopeSequence(events[0].frames) == 42, "its own message carries its event sequence")
        #expect(envelopeSequence(events[1].frames) == 7, "a step passed on keeps its sender's envelope")
        var released = HeldMessages()
        publication.release(into: &released)
        #expect(released.count == 2)
        #expect(publication.headEvent == 43)
        #expect(publication.isHolding, "an event stream holds the next batch at once")
        #expect(!publication.hasHeldEvents)
    }

    @Test("a heartbeat carries the last event committed; a message past the hold is outside the stream")
    func outsideTheStream() {
        var publication = Publication(endpoint: "events")
        publication.numberEvents(after: 0)
        _ = publication.take(event("nav/did/Main"))
        var released = HeldMessages()
        publication.release(into: &released)
        let wasHolding = publication.pauseHold()
        #expect(publication.nextSequence(for: .heartbeat) == 1)
        #expect(publication.nextSequence(for: .heartbeat) == 1, "heartbeats repeat it")
        #expect(publication.nextSequence(for: .diagnostic) == 0, "a drop report is not an event")
        #expect(publication.take(event("diag/dropped-hwm")) == .send)
        publication.resumeHold(wasHolding)
        #expect(publication.nextSequence(for: .didNavigate) == 2)
    }

    @Test("a batch that is not committed gives its numbers back")
    func discarded() {
        var publication = Publication(endpoint: "events")
        publication.numberEvents(after: 10)
        _ = publication.take(event("nav/did/Main"))
        _ = publication.take(event("nav/did/Main"))
        publication.discardHeld()
        #expect(!publication.hasHeldEvents)
        _ = publication.take(event("nav/did/Main"))
        var packed = PackedEvents()
        publication.heldEvents(into: &packed)
        #expect(packed.decoded().map(\.sequence) == [11])
    }

    @Test("without numbering, a publication numbers its own messages and sends at once when not holding")
    func plainPublication() {
        var publication = Publication(endpoint: "states")
        #expect(!publication.keepsEverything)
        #expect(publication.nextSequence(for: .heartbeat) == 1)
        #expect(publication.nextSequence(for: .heartbeat) == 2)
        #expect(publication.take(event("state/x", kind: .state)) == .send)
        #expect(!publication.hasHeldEvents)
    }

    private func batch(_ first: UInt64, _ topics: [String]) -> PackedEvents {
        var packed = PackedEvents()
        for (index, topic) in topics.enumerated() {
            packed.append(sequence: first + UInt64(index), frames: event(topic, sequence: first + UInt64(index)))
        }
        return packed
    }

    @Test("the log keeps the newest batches within the retention and finds those after a sequence")
    func retention() {
        var log = EventLog(retainCount: 4)
        log.append(batch(1, ["a/1", "a/2"]), first: 1, now: 0)
        log.append(batch(3, ["a/3", "a/4"]), first: 3, now: 0)
        log.append(batch(5, ["a/5"]), first: 5, now: 0)
        #expect(log.oldest == 1, "without the first batch, fewer than four would stay")
        log.append(batch(6, ["a/6"]), first: 6, now: 0)
        #expect(log.head == 6)
        #expect(log.oldest == 3, "the first batch went: four events stay")
        #expect(log.count == 4)
        #expect(log.holdsEverything(after: 2))
        #expect(!log.holdsEverything(after: 1))
        #expect(log.batches(after: 3).map(\.first) == [3, 5, 6])
        #expect(log.batches(after: 4).map(\.first) == [5, 6])
        #expect(log.batches(after: 6).isEmpty)
        var small = EventLog(retainCount: 100, maxBytes: 200)
        small.append(batch(1, ["a/1", "a/2"]), first: 1, now: 0)
        small.append(batch(3, ["a/3", "a/4"]), first: 3, now: 0)
        #expect(small.oldest == 3, "over its bytes, the older batch went")
        #expect(small.byteCount == batch(3, ["a/3", "a/4"]).byteCount)
        var aged = EventLog(retainCount: 100, retainSeconds: 10)
        aged.append(batch(1, ["a/1"]), first: 1, now: 100)
        aged.append(batch(2, ["a/2"]), first: 2, now: 105)
        aged.trim(now: 112)
        #expect(aged.oldest == 2, "older than ten seconds: gone")
    }

    @Test("a replay takes the events after since whose topic is asked for, and stops at its limit")
    func replay() {
        let envelope = Envelope(kind: .replayRequest, sequence: 1, source: "t")
        var replay = EventReplay(ReplayRequest(envelope: envelope, since: 2, topics: ["nav/did/"], limit: 2))
        var packed = PackedEvents()
        for (sequence, topic) in [
            (1, "nav/did/A"), (2, "nav/did/B"), (3, "cmd/A"), (4, "nav/did/C"), (5, "nav/did/D"),
            (6, "nav/did/E"),
        ] as [(UInt64, String)] {
            packed.append(sequence: sequence, frames: event(topic, sequence: sequence))
        }
        replay.take(packed)
        #expect(replay.events.decoded().map(\.sequence) == [4, 5])
        #expect(replay.last == 5, "it looked at 3 and passed it over")
        #expect(replay.isFull)
        var all = EventReplay(ReplayRequest(envelope: envelope, since: 0))
        all.take(packed)
        #expect(all.events.count == 6)
        #expect(all.last == 6)
        #expect(!all.isFull)
    }

    @Test(
        "a replay never passes over an event it does not hold; from 0 it passes over those no longer kept, up to its until"
    )
    func replayStopsAtGap() {
        let envelope = Envelope(kind: .replayRequest, sequence: 1, source: "t")
        func packed(_ sequences: [UInt64]) -> PackedEvents {
            var packed = PackedEvents()
            for sequence in sequences {
                packed.append(sequence: sequence, frames: event("nav/did/A", sequence: sequence))
            }
            return packed
        }
        // The journal gave 3 and 4; memory holds from 7 on (5 and 6 could not be read).
        var replay = EventReplay(ReplayRequest(envelope: envelope, since: 2))
        replay.take(packed([3, 4]))
        replay.take(packed([7, 8]))
        #expect(replay.events.decoded().map(\.sequence) == [3, 4])
        #expect(replay.last == 4 && replay.gap == 7 && replay.isFull, "more: asked again from 4")
        // A request for dropped events beyond a gap stops at it too.
        var fill = EventReplay(ReplayRequest(envelope: envelope, since: 2, until: 8))
        fill.take(packed([5, 6]))
        #expect(fill.last == 2 && fill.gap == 5 && fill.events.isEmpty)

        // Every event kept, from 0: the oldest kept is 7.
        var all = EventReplay(ReplayRequest(envelope: envelope, since: 0))
        all.passOver(through: 6)
        all.take(packed([7, 8]))
        #expect(all.events.decoded().map(\.sequence) == [7, 8] && all.last == 8 && all.gap == nil)
        // None kept: the reply reaches the head, and the requester does not ask again.
        var none = EventReplay(ReplayRequest(envelope: envelope, since: 0))
        none.passOver(through: 8)
        #expect(none.last == 8 && none.events.isEmpty)
        var upTo = EventReplay(ReplayRequest(envelope: envelope, since: 0, until: 5))
        upTo.passOver(through: 8)
        #expect(upTo.last == 5 && upTo.isFull, "not past its until")
        var later = EventReplay(ReplayRequest(envelope: envelope, since: 3))
        later.passOver(through: 8)
        #expect(later.last == 3, "only a request from 0 passes over")
    }

    @Test("a packed events frame that is cut short is malformed")
    func packedIsChecked() throws {
        var packed = PackedEvents()
        packed.append(sequence: 9, frames: event("nav/did/A"))
        #expect(try PackedEvents(bytes: packed.bytes).count == 1)
        #expect(throws: WireError.self) { try PackedEvents(bytes: packed.bytes.dropLast()) }
    }
}

@Suite("EventResume: a subscriber's catch-up (PROTOCOL.md §4.6)")
struct EventResumeTests {
    private func reply(
        _ events: [(UInt64, FrameBuffer)], since: UInt64, until: UInt64? = nil, last: UInt64, head: UInt64,
        more: Bool = false
    )
        -> ReplayReply
    {
        var packed = PackedEvents()
        for (sequence, frames) in events { packed.append(sequence: sequence, frames: frames) }
        return ReplayReply(
            envelope: Envelope(kind: .replay, sequence: 1, source: "flowd#1"), since: since, until: until, last: last,
            head: head, oldest: 1, more: more, events: packed)
    }

    @Test("it asks from its position at the first heartbeat, holds live messages, then drops what the replay had")
    func catchUp() {
        var resume = EventResume(since: 3)
        #expect(resume.live(kind: .didNavigate, source: "flowd#1", sequence: 5) == .hold, "before a heartbeat")
        #expect(resume.heartbeat(source: "flowd#1") == 3)
        #expect(resume.phase == .replaying)
        #expect(resume.live(kind: .didNavigate, source: "flowd#1", sequence: 6) == .hold)
        let step = event("step/s", source: "stepper#1", sequence: 9, kind: .step)
        let first = resume.replayed(
            reply([(4, event("nav/did/A", sequence: 4)), (5, step)], since: 3, last: 5, head: 6, more: true))
        #expect(first.deliver.map(\.sequence) == [4, 5])
        #expect(first.requestSince == 5)
        let second = resume.replayed(reply([(6, event("nav/did/B", sequence: 6))], since: 5, last: 6, head: 6))
        #expect(second.deliver.map(\.sequence) == [6])
        #expect(second.requestSince == nil)
        #expect(resume.phase == .live)
        #expect(resume.judgeHeld(kind: .didNavigate, source: "flowd#1", sequence: 5) == .drop)
        #expect(resume.judgeHeld(kind: .didNavigate, source: "flowd#1", sequence: 6) == .drop)
        #expect(resume.live(kind: .step, source: "stepper#1", sequence: 9) == .drop, "the replay delivered it")
        #expect(resume.live(kind: .didNavigate, source: "flowd#1", sequence: 7) == .deliver)
        #expect(resume.live(kind: .diagnostic, source: "flowd#1", sequence: 0) == .deliver, "outside the stream")
        #expect(resume.position == 7)
    }

    @Test("another instance's event or heartbeat makes it ask again from its position")
    func takeover() {
        var resume = EventResume(since: 0)
        _ = resume.heartbeat(source: "flowd#1")
        _ = resume.replayed(reply([], since: 0, last: 10, head: 10))
        #expect(resume.live(kind: .didNavigate, source: "flowd#2", sequence: 14) == .holdAndRequest(since: 10))
        #expect(resume.heartbeat(source: "flowd#2") == nil, "already asking that instance")
        let outcome = resume.replayed(
            reply(
                [(11, event("nav/did/A", sequence: 11)), (14, event("nav/did/A", source: "flowd#2", sequence: 14))],
                since: 10, last: 14, head: 14))
        #expect(outcome.deliver.map(\.sequence) == [11, 14])
        #expect(resume.judgeHeld(kind: .didNavigate, source: "flowd#2", sequence: 14) == .drop)
        #expect(resume.heartbeat(source: "flowd#3") == 14)
    }

    @Test("a step delivered live is not delivered again by a replay from a position before it")
    func liveStepNotReplayed() {
        var resume = EventResume(since: 0)
        _ = resume.heartbeat(source: "flowd#1")
        _ = resume.replayed(reply([], since: 0, last: 10, head: 10))
        // Events 11 and 12, whose event sequences are not known live.
        #expect(resume.live(kind: .step, source: "stepper#1", sequence: 7) == .deliver)
        #expect(resume.live(kind: .step, source: "stepper#1", sequence: 8) == .deliver)
        #expect(resume.heartbeat(source: "flowd#2") == 10)
        let outcome = resume.replayed(
            reply(
                (11...13).map { ($0, event("step/s", source: "stepper#1", sequence: $0 - 4, kind: .step)) },
                since: 10, last: 13, head: 13))
        #expect(outcome.deliver.map(\.sequence) == [13])
        #expect(resume.position == 13)
    }

    @Test("a new connection's messages are held until a replay from the position reached the head")
    func reconnection() {
        var resume = EventResume(since: 0)
        #expect(resume.reconnected() == nil, "the first connection: it waits for a heartbeat anyway")
        _ = resume.heartbeat(source: "flowd#1")
        _ = resume.replayed(reply([], since: 0, last: 10, head: 10))
        #expect(resume.live(kind: .step, source: "stepper#1", sequence: 7) == .deliver, "event 11")
        // flowd#1 is lost after event 12; flowd#2 published 13 before the SUB reached it, then 14.
        #expect(resume.reconnected() == 10)
        #expect(resume.live(kind: .step, source: "stepper#1", sequence: 10) == .hold, "event 14, before its heartbeat")
        let outcome = resume.replayed(
            reply(
                (11...14).map { ($0, event("step/s", source: "stepper#1", sequence: $0 - 4, kind: .step)) },
                since: 10, last: 14, head: 14))
        #expect(outcome.deliver.map(\.sequence) == [12, 13, 14])
        #expect(resume.phase == .live)
        #expect(resume.judgeHeld(kind: .step, source: "stepper#1", sequence: 10) == .drop)
        #expect(resume.live(kind: .step, source: "stepper#1", sequence: 11) == .deliver)

        // A break while a request is out: its reply may have been read before the break.
        #expect(resume.mayHaveMissed() == 14)
        #expect(resume.reconnected() == nil)
        let first = resume.replayed(reply([], since: 14, last: 15, head: 15))
        #expect(first.requestSince == 15)
        #expect(resume.phase == .replaying)
        let second = resume.replayed(reply([], since: 15, last: 15, head: 15))
        #expect(second.requestSince == nil)
        #expect(resume.phase == .live)
    }

    @Test("gone moves it to the head; drops and silence make it ask again; an unanswered request is resent")
    func fallbacks() {
        var resume = EventResume(since: 5)
        #expect(resume.mayHaveMissed() == nil, "nothing to ask before the first heartbeat")
        _ = resume.heartbeat(source: "flowd#1")
        #expect(resume.catchUpTimedOut() == EventResume.Request(since: 5))
        resume.gone(head: 100)
        #expect(resume.position == 100)
        #expect(resume.fallbacks == 1)
        #expect(resume.phase == .live)
        #expect(resume.catchUpTimedOut() == nil)
        #expect(resume.mayHaveMissed() == 100)
        #expect(resume.replays == 2)
    }

    @Test(
        "events dropped at the high-water mark are asked for beside a catch-up, and each request is resent on its own")
    func droppedEventsBesideACatchUp() {
        var resume = EventResume(since: 0)
        _ = resume.heartbeat(source: "flowd#1", sequence: 0)
        _ = resume.replayed(reply([], since: 0, last: 0, head: 0))
        #expect(resume.phase == .live)
        #expect(resume.live(kind: .didNavigate, source: "flowd#1", sequence: 1) == .deliver)
        // flowd reports 2 … 4 and 7 dropped, then 9.
        #expect(resume.dropped([2...4, 7...7], complete: true) == EventResume.Request(since: 1, until: 7))
        #expect(resume.dropped([9...9], complete: true) == nil, "one request for dropped events at a time")
        #expect(resume.mayHaveMissed() == 1, "a silence: the catch-up asks too")
        #expect(resume.catchUpTimedOut() == EventResume.Request(since: 1))
        #expect(resume.fillTimedOut() == EventResume.Request(since: 1, until: 7), "still out during the catch-up")
        // The catch-up's reply first: it delivers what the fill asks for too.
        let caughtUp = resume.replayed(
            reply(
                [(2, event("nav/did/A", sequence: 2)), (3, event("nav/did/A", sequence: 3))], since: 1, last: 3,
                head: 9))
        #expect(caughtUp.deliver.map(\.sequence) == [2, 3])
        #expect(resume.phase == .live)
        #expect(resume.catchUpTimedOut() == nil)
        #expect(resume.fillTimedOut() == EventResume.Request(since: 1, until: 7), "its reply has not come")
        let filled = resume.replayed(
            reply(
                [
                    (3, event("nav/did/A", sequence: 3)), (4, event("nav/did/A", sequence: 4)),
                    (7, event("nav/did/A", sequence: 7)),
                ], since: 1, until: 7, last: 7, head: 9))
        #expect(filled.deliver.map(\.sequence) == [4, 7], "3 was delivered by the catch-up")
        #expect(filled.fill == EventResume.Request(since: 8, until: 9), "then the next report's")
        #expect(resume.fillTimedOut() == EventResume.Request(since: 8, until: 9))
        let last = resume.replayed(reply([(9, event("nav/did/A", sequence: 9))], since: 8, until: 9, last: 9, head: 9))
        #expect(last.deliver.map(\.sequence) == [9])
        #expect(last.fill == nil)
        #expect(resume.fillTimedOut() == nil)
        #expect(resume.filled == 3)
    }

    @Test("a catch-up does not deliver again the dropped events a fill's reply delivered first")
    func fillBeforeTheCatchUp() {
        var resume = EventResume(since: 0)
        _ = resume.heartbeat(source: "flowd#1", sequence: 0)
        _ = resume.replayed(reply([], since: 0, last: 0, head: 0))
        #expect(resume.dropped([2...3], complete: true) == EventResume.Request(since: 1, until: 3))
        #expect(resume.mayHaveMissed() == 0)
        let filled = resume.replayed(
            reply(
                [(2, event("nav/did/A", sequence: 2)), (3, event("nav/did/A", sequence: 3))], since: 1, until: 3,
                last: 3, head: 4))
        #expect(filled.deliver.map(\.sequence) == [2, 3])
        let caughtUp = resume.replayed(
            reply(
                [
                    (1, event("nav/did/A", sequence: 1)), (2, event("nav/did/A", sequence: 2)),
                    (3, event("nav/did/A", sequence: 3)), (4, event("nav/did/A", sequence: 4)),
                ], since: 0, last: 4,
                head: 4))
        #expect(caughtUp.deliver.map(\.sequence) == [1, 4])
        #expect(resume.position == 4)
        #expect(resume.phase == .live)
    }
    @Test(
        "a request for dropped events sent again at its timeout and answered twice: the late answer does not stand for the next request's"
    )
    func lateAnswerToAFill() {
        var resume = EventResume(since: 0)
        _ = resume.heartbeat(source: "flowd#1", sequence: 0)
        _ = resume.replayed(reply([], since: 0, last: 0, head: 0))
        #expect(resume.dropped([2...3], complete: true) == EventResume.Request(since: 1, until: 3))
        #expect(resume.dropped([6...7], complete: true) == nil, "one request for dropped events at a time")
        // No answer in time: the same request goes again, and both are answered.
        #expect(resume.fillTimedOut() == EventResume.Request(since: 1, until: 3))
        let answer = reply(
            [(2, event("nav/did/A", sequence: 2)), (3, event("nav/did/A", sequence: 3))], since: 1, until: 3, last: 3,
            head: 8)
        let first = resume.replayed(answer)
        #expect(first.answered)
        #expect(first.deliver.map(\.sequence) == [2, 3])
        #expect(first.fill == EventResume.Request(since: 5, until: 7), "then the next report's")
        let late = resume.replayed(answer)
        #expect(!late.answered, "the answer to the request sent first comes again")
        #expect(late.deliver.isEmpty)
        #expect(late.fill == nil)
        #expect(resume.fillTimedOut() == EventResume.Request(since: 5, until: 7), "6 and 7 are still asked for")
        #expect(!resume.answersFill(since: 1, until: 3), "nor would a late gone stand for the request out")
        #expect(resume.answersFill(since: 5, until: 7))
        let second = resume.replayed(
            reply(
                [(6, event("nav/did/A", sequence: 6)), (7, event("nav/did/A", sequence: 7))], since: 5, until: 7,
                last: 7, head: 8))
        #expect(second.deliver.map(\.sequence) == [6, 7])
        #expect(resume.filled == 4)
        #expect(resume.fillTimedOut() == nil)
    }
    @Test(
        "a catch-up's late reply to a request sent again does not end a later catch-up, whose events it does not hold")
    func lateAnswerToACatchUp() {
        var resume = EventResume(since: 0)
        #expect(resume.heartbeat(source: "flowd#1", sequence: 2) == 0)
        #expect(resume.catchUpTimedOut() == EventResume.Request(since: 0), "no answer in time: asked again")
        let answer = reply(
            [(1, event("nav/did/A", sequence: 1)), (2, event("nav/did/A", sequence: 2))], since: 0, last: 2, head: 2)
        #expect(resume.replayed(answer).deliver.map(\.sequence) == [1, 2])
        #expect(resume.phase == .live)
        // The publisher goes silent: a new catch-up from 2; then the first request's second answer comes.
        #expect(resume.mayHaveMissed() == 2)
        let late = resume.replayed(answer)
        #expect(!late.answered)
        #expect(late.deliver.isEmpty)
        #expect(resume.phase == .replaying, "the catch-up from 2 still waits for its answer")
        #expect(resume.catchUpTimedOut() == EventResume.Request(since: 2))
        let caughtUp = resume.replayed(
            reply(
                [(3, event("nav/did/A", sequence: 3)), (4, event("nav/did/A", sequence: 4))], since: 2, last: 4,
                head: 4))
        #expect(caughtUp.answered)
        #expect(caughtUp.deliver.map(\.sequence) == [3, 4])
        #expect(resume.phase == .live)
    }
}
