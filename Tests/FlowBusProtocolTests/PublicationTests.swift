import FlowBusWire
import Testing

@testable import FlowBusProtocol

@Suite("Publication: the publishing side of the protocol")
struct PublicationTests {
    private func subscribe(_ publication: inout Publication, _ prefix: String, _ on: Bool = true) {
        let frame = [UInt8(on ? 1 : 0)] + Array(prefix.utf8)
        frame.withUnsafeBytes { publication.subscriptionMessage($0) }
    }

    private func message(_ topic: String) -> FrameBuffer {
        FrameBuffer(frames: [Array(topic.utf8), [1, 2, 3]])
    }

    @Test("nothing is wanted until subscribed; prefixes match; the last unsubscription removes a prefix")
    func subscriptions() {
        var publication = Publication(endpoint: "events")
        #expect(!publication.isWanted("nav/did/Main"))
        subscribe(&publication, "nav/did/")
        #expect(publication.isWanted("nav/did/Main"))
        #expect(!publication.isWanted("nav/will/Main"))
        subscribe(&publication, "")
        #expect(publication.isWanted("diag/x"), "the empty prefix wants everything")
        subscribe(&publication, "", false)
        subscribe(&publication, "nav/did/", false)
        #expect(!publication.isWanted("nav/did/Main"))
        [UInt8]().withUnsafeBytes { publication.subscriptionMessage($0) }
        [UInt8(7), 65].withUnsafeBytes { publication.subscriptionMessage($0) }
        #expect(!publication.isWanted("A"), "anything but 1 or 0 first is ignored")
    }

    @Test("unwanted topics are counted and never sent; wanted ones are sent")
    func offers() {
        var publication = Publication(endpoint: "events")
        subscribe(&publication, "step/")
        #expect(publication.offer(message("step/home")) == .send)
        #expect(publication.offer(message("diag/x")) == .unwanted)
        let wanted = publication.offer(topic: "nav/did/x")
        #expect(!wanted)
        #expect(publication.counters.unwanted == 2)
        // A topic given as a head and an id matches across the two parts.
        subscribe(&publication, "nav/did/Ma")
        let headAndID = publication.offer(head: "nav/did/", id: "Main")
        let otherID = publication.offer(head: "nav/did/", id: "Menu")
        #expect(headAndID && !otherID)
        #expect(publication.counters.unwanted == 3)
    }

    @Test("an event stream keeps every event; on release, an event nobody wants is counted and noted as unsent")
    func releasedEvents() throws {
        var publication = Publication(endpoint: "events")
        publication.numberEvents(after: 0)
        let kept = publication.offer(head: "nav/did/", id: "Main")
        #expect(kept, "an event stream encodes every event, wanted or not")
        subscribe(&publication, "nav/did/")
        let wanted = Array("nav/did/Main".utf8).withUnsafeBytes { publication.offerReleased(topic: $0, event: 1) }
        #expect(wanted)
        _ = publication.sent(accepted: false)
        publication.droppedEvent(2)
        let unwanted = Array("nav/will/Main".utf8).withUnsafeBytes { publication.offerReleased(topic: $0, event: 3) }
        #expect(!unwanted)
        #expect(publication.counters.unwanted == 1)
        let report = try #require(publication.dueDropReport())
        #expect(report.events == [2...3], "the unwanted event after a drop joins its run")
    }

    @Test("held messages come out in order on release; discarded ones never")
    func holdAndRelease() {
        var publication = Publication(endpoint: "events")
        subscribe(&publication, "")
        publication.hold()
        #expect(publication.offer(message("a")) == .held)
        #expect(publication.offer(message("b")) == .held)
        var released = HeldMessages()
        publication.release(into: &released)
        let topics = (0..<released.count).map { index in
            released.withMessage(index) { message in message.withFrame(0) { Array($0) } }
        }
        #expect(topics == [Array("a".utf8), Array("b".utf8)])
        #expect(!publication.isHolding)
        #expect(publication.offer(message("c")) == .send)
        publication.hold()
        _ = publication.offer(message("d"))
        publication.discardHeld()
        released.removeAll()
        publication.release(into: &released)
        #expect(released.isEmpty)
    }

    @Test(
        "a sealed batch waits for its commit while the next is held apart; its release moves the head to its last event"
    )
    func sealedBatch() {
        var publication = Publication(endpoint: "events")
        publication.numberEvents(after: 10)
        subscribe(&publication, "")
        #expect(publication.offer(message("a")) == .held)
        #expect(publication.offer(message("b")) == .held)
        publication.seal()
        #expect(publication.hasSealed && !publication.hasHeldEvents)
        #expect(publication.offer(message("c")) == .held, "the next batch is held apart")
        #expect(publication.nextSequence(for: .heartbeat) == 14, "numbering goes on after the sealed events")
        var released = HeldMessages()
        publication.releaseSealed(into: &released)
        #expect(released.count == 2 && publication.headEvent == 12 && !publication.hasSealed)
        #expect(publication.hasHeldEvents, "the next batch is still held")
        released.removeAll()
        publication.release(into: &released)
        #expect(released.count == 1 && publication.headEvent == 13)
    }

    @Test("discarding forgets the sealed batch and the held one, and takes their event numbers back")
    func sealedBatchDiscarded() {
        var publication = Publication(endpoint: "events")
        publication.numberEvents(after: 0)
        subscribe(&publication, "")
        _ = publication.offer(message("a"))
        publication.seal()
        _ = publication.offer(message("b"))
        publication.discardHeld()
        #expect(!publication.hasSealed && !publication.hasHeldEvents && publication.headEvent == 0)
        _ = publication.offer(message("c"))
        var released = HeldMessages()
        publication.release(into: &released)
        #expect(released.count == 1 && publication.headEvent == 1, "c is event 1 again")
    }

    @Test("drops are counted, logged at the first and every 10,000th, and reported once")
    func drops() throws {
        var publication = Publication(endpoint: "states")
        let logs = [
            publication.sent(accepted: false), publication.sent(accepted: false), publication.sent(accepted: true),
        ]
        #expect(logs == [true, false, false], "the first drop is logged")
        #expect(publication.counters == .init(published: 1, dropped: 2, unwanted: 0))
        let report = try #require(publication.dueDropReport())
        #expect(report == .init(unreported: 2, total: 2))
        publication.reported(report)
        #expect(publication.dueDropReport() == nil)
        _ = publication.sent(accepted: false)
        let stale = try #require(publication.dueDropReport())
        _ = publication.sent(accepted: false)
        publication.reported(stale)
        #expect(
            publication.dueDropReport() == .init(unreported: 2, total: 4), "a report that was itself dropped is redone")
    }

    @Test(
        "dropped events form runs that span the events nobody wanted: drops of one topic among others stay one run"
    )
    func droppedEventRuns() throws {
        var publication = Publication(endpoint: "events")
        publication.numberEvents(after: 0)
        publication.unwantedEvent(1)  // before any drop: not a run
        for sequence: UInt64 in [2, 5, 8] {
            _ = publication.sent(accepted: false)
            publication.droppedEvent(sequence)
            publication.unwantedEvent(sequence + 1)
            publication.unwantedEvent(sequence + 2)
        }
        // 11 was sent: the run ends at 10 and the next drop starts another.
        _ = publication.sent(accepted: true)
        _ = publication.sent(accepted: false)
        publication.droppedEvent(12)
        publication.unwantedEvent(14)  // not next to the run
        let report = try #require(publication.dueDropReport())
        #expect(report.events == [2...10, 12...12])
        #expect(report.eventsComplete && report.unreported == 4)
    }

    @Test("the endpoint numbers its own messages from 1 with its own counter")
    func ownSequence() {
        var events = Publication(endpoint: "events")
        var states = Publication(endpoint: "states")
        #expect(events.nextSequence(for: .diagnostic) == 1)
        #expect(events.nextSequence(for: .heartbeat) == 2)
        #expect(states.nextSequence(for: .state) == 1)
    }
}
