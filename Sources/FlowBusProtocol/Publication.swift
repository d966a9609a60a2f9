import FlowBusWire

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The publishing side of the protocol for one XPUB endpoint: flowd's `events` and a reactor
/// host's `states` (PROTOCOL.md §4.2, §7).
///
/// A pure state machine; the socket's owner carries out its answers. It knows which topic
/// prefixes subscribers asked for (XPUB reports the first subscription to a prefix and the last
/// unsubscription, so the set is exact), numbers the publisher's own messages with a counter of
/// this endpoint alone, holds messages back while a batch is not committed, and counts what was
/// published, dropped at the high-water mark and not encoded because nobody wanted it, so that
/// drops are reported in band.
package struct Publication: Sendable {
    /// Counts since the publication was created.
    package struct Counters: Sendable, Equatable {
        package var published = 0
        /// Refused by the socket at its high-water mark.
        package var dropped = 0
        /// Not encoded: no subscriber wanted the topic.
        package var unwanted = 0
    }

    /// What to do with a message offered for publishing.
    package enum Decision: Sendable, Equatable {
        /// Send it now.
        case send
        /// Held until ``release(into:)``.
        case held
        /// Nobody subscribed to its topic: not sent (counted).
        case unwanted
    }

    /// A `dropped-hwm` report due: drops since the last report, and in all; in an event stream,
    /// the events dropped since the last report, as ranges of event sequences (complete unless
    /// there were more than ``maxDroppedRanges``).
    package struct DropReport: Sendable, Equatable {
        package var unreported: Int
        package var total: Int
        package var events: [ClosedRange<UInt64>] = []
        package var eventsComplete = true
    }

    /// Ranges of dropped events a report lists, at most.
    package static let maxDroppedRanges = 1_000

    /// The endpoint's name in diagnostics (`events`, `states`).
    package let endpoint: String
    private var prefixes: [[UInt8]] = []
    private var sequence: UInt64 = 0
    @usableFromInline var held = HeldMessages()
    /// What a batch whose commit is under way held (``seal()``), released or discarded with it.
    private var sealed = HeldMessages()
    /// The last event of ``sealed``: the head once its commit is done.
    private var sealedLastEvent: UInt64 = 0
    private var reportedDrops = 0
    /// The events dropped since the last report, and whether some did not fit.
    private var droppedEvents: [ClosedRange<UInt64>] = []
    private var droppedEventsComplete = true
    /// Whether what it publishes while holding is a stream of events (flowd's `events`,
    /// PROTOCOL.md §4.6): numbered, kept, and sent only once committed.
    package private(set) var isEventStream = false
    /// The sequence of the last event numbered (held or committed).
    private var lastEvent: UInt64 = 0
    /// The sequence of the last event committed: what a heartbeat says. The held events follow it.
    package private(set) var headEvent: UInt64 = 0
    /// Whether messages are held back (the events of a batch until it is committed).
    package private(set) var isHolding = false
    package private(set) var counters = Counters()

    /// A publication for `endpoint`.
    package init(endpoint: String) {
        self.endpoint = endpoint
    }

    /// The next sequence of this endpoint's own messages (heartbeats, diagnostics, events).
    ///
    /// In an event stream: a message held is numbered when it is taken (``take(_:own:)``); a
    /// heartbeat carries the last event committed; anything else published past the hold is not
    /// an event, and carries 0.
    package mutating func nextSequence(for kind: MessageKind) -> UInt64 {
        guard isEventStream else {
            sequence += 1
            return sequence
        }
        if isHolding { return lastEvent + 1 }
        return kind == .heartbeat ? headEvent : 0
    }

    /// Makes this publication an event stream whose last event was `last` (from the journal):
    /// from now on it holds everything, numbers what it holds, and sends it once committed.
    package mutating func numberEvents(after last: UInt64) {
        isEventStream = true
        isHolding = true
        lastEvent = last
        headEvent = last
        sealedLastEvent = last
        held.removeAll()
        sealed.removeAll()
    }

    /// Whether messages must be encoded whoever subscribed: an event stream keeps every event.
    package var keepsEverything: Bool { isEventStream && isHolding }

    /// Whether events wait to be committed.
    package var hasHeldEvents: Bool { isEventStream && !held.isEmpty }

    /// Bytes held back for the release, packed.
    // Inlinable: read by the loop before each message, it then reads one field, not a copy of
    // the publication.
    @inlinable package var heldByteCount: Int { held.byteCount }

    /// Takes a message the XPUB socket received: `1` or `0` then a prefix (subscribe,
    /// unsubscribe). Anything else is ignored.
    package mutating func subscriptionMessage(_ frame: UnsafeRawBufferPointer) {
        guard let flag = frame.first else { return }
        let prefix = Array(frame.dropFirst())
        if flag == 1 {
            if !prefixes.contains(prefix) { prefixes.append(prefix) }
        } else if flag == 0 {
            prefixes.removeAll { $0 == prefix }
        }
    }

    /// Whether a subscriber wants messages of `topic`.
    package func isWanted(_ topic: UnsafeRawBufferPointer) -> Bool {
        Self.wants(topic, prefixes: prefixes)
    }

    private static func wants(_ topic: UnsafeRawBufferPointer, prefixes: [[UInt8]]) -> Bool {
        for prefix in prefixes where prefix.count <= topic.count {
            let matches = prefix.withUnsafeBytes { prefix in
                prefix.isEmpty || memcmp(prefix.baseAddress!, topic.baseAddress!, prefix.count) == 0
            }
            if matches { return true }
        }
        return false
    }

    /// Whether a subscriber wants messages of the topic `head` + `id`, without building it.
    package func isWanted(head: StaticString, id: String) -> Bool {
        var id = id
        return id.withUTF8 { id in
            let head = UnsafeRawBufferPointer(start: head.utf8Start, count: head.utf8CodeUnitCount)
            let id = UnsafeRawBufferPointer(id)
            for prefix in prefixes where prefix.count <= head.count + id.count {
                let matches = prefix.withUnsafeBytes { prefix -> Bool in
                    let inHead = min(prefix.count, head.count)
                    if inHead > 0, memcmp(prefix.baseAddress!, head.baseAddress!, inHead) != 0 { return false }
                    let inID = prefix.count - inHead
                    return inID == 0 || memcmp(prefix.baseAddress! + inHead, id.baseAddress!, inID) == 0
                }
                if matches { return true }
            }
            return false
        }
    }

    /// Whether a subscriber wants messages of `topic`.
    package func isWanted(_ topic: String) -> Bool {
        var topic = topic
        return topic.withUTF8 { isWanted(UnsafeRawBufferPointer($0)) }
    }

    /// Whether a subscriber wants the topic `head` + `id` (or the stream keeps everything);
    /// counted as unwanted if not.
    package mutating func offer(head: StaticString, id: String) -> Bool {
        if keepsEverything || isWanted(head: head, id: id) { return true }
        counters.unwanted += 1
        return false
    }

    /// Whether a subscriber wants the released event `sequence` of `topic`; noted as unwanted if not.
    package mutating func offerReleased(topic: UnsafeRawBufferPointer, event sequence: UInt64) -> Bool {
        if isWanted(topic) { return true }
        counters.unwanted += 1
        unwantedEvent(sequence)
        return false
    }

    /// Decides about a message of `topic` before it is encoded: nothing is encoded for a topic
    /// nobody wants (unless the stream keeps it).
    package mutating func offer(topic: String) -> Bool {
        if keepsEverything || isWanted(topic) { return true }
        counters.unwanted += 1
        return false
    }

    /// Decides about an encoded message (its frame 0 is the topic) passed on as it arrived.
    package mutating func offer(_ frames: FrameBuffer) -> Decision {
        // Not `isWanted` in the closure: capturing self in a mutating method copies it whole.
        let prefixes = prefixes
        guard keepsEverything || frames.withFrame(0, { Self.wants($0, prefixes: prefixes) }) else {
            counters.unwanted += 1
            return .unwanted
        }
        return take(frames, own: false)
    }

    /// Takes a message whose topic is known to be wanted (or kept): held (a copy) while holding,
    /// else to send now. In an event stream, a held message is numbered: the publisher's `own`
    /// message carries its event sequence in its envelope.
    package mutating func take(_ frames: FrameBuffer, own: Bool = true) -> Decision {
        guard isHolding else { return .send }
        held.append(frames)
        if isEventStream {
            lastEvent += 1
            held.setLastSequence(lastEvent, patchingEnvelope: own)
        }
        return .held
    }

    /// Counts the outcome of a send.
    /// - Returns: whether a drop should be logged (the first, then one in 10,000).
    @discardableResult
    package mutating func sent(accepted: Bool) -> Bool {
        if accepted {
            counters.published += 1
            return false
        }
        counters.dropped += 1
        return counters.dropped == 1 || counters.dropped % 10_000 == 0
    }

    /// Holds every message back until ``release(into:)``: observers never see an event of a step
    /// that a crash could undo.
    package mutating func hold() {
        isHolding = true
    }

    /// Lets what follows go out at once, past a hold, until ``resumeHold(_:)``: the daemon's own
    /// heartbeat and drop reports while a failed commit holds back everything else.
    /// - Returns: whether it was holding, for ``resumeHold(_:)``.
    package mutating func pauseHold() -> Bool {
        defer { isHolding = false }
        return isHolding
    }

    /// Holds again if it held before ``pauseHold()``.
    package mutating func resumeHold(_ wasHolding: Bool) {
        isHolding = wasHolding
    }

    /// Stops holding, and hands what was held, in order, to send: swapped with `released` (empty),
    /// so that both stores keep their capacity from batch to batch. An event stream goes on
    /// holding: its events are committed, and the next are held.
    package mutating func release(into released: inout HeldMessages) {
        precondition(!hasSealed, "released past a sealed batch whose commit is under way")
        if isEventStream {
            headEvent = lastEvent
        } else {
            isHolding = false
        }
        swap(&held, &released)
    }

    /// Whether a batch's messages wait for a commit under way (``seal()``).
    package var hasSealed: Bool { !sealed.isEmpty || sealedLastEvent > headEvent }

    /// Sets aside what is held, for the commit now under way: what follows is held apart, and
    /// ``releaseSealed(into:)`` hands the sealed messages to send once that commit is done. One
    /// batch at a time: what was sealed before must be released (or discarded) first.
    package mutating func seal() {
        precondition(!hasSealed, "a sealed batch is still waiting for its commit")
        swap(&held, &sealed)
        sealedLastEvent = lastEvent
    }

    /// Hands what ``seal()`` set aside, in order, to send (swapped with `released`, empty); an event
    /// stream's head moves to its last event. Holding goes on for what followed it.
    package mutating func releaseSealed(into released: inout HeldMessages) {
        if isEventStream { headEvent = sealedLastEvent }
        swap(&sealed, &released)
    }

    /// The events held, packed as a replay carries them (PROTOCOL.md §4.6), to keep with the
    /// commit: the first's sequence and the packed bytes.
    package func heldEvents(into packed: inout PackedEvents) {
        // Held as packed, numbered when taken: one copy.
        held.withPacked { packed.appendPacked($0, count: held.count) }
    }

    /// Stops holding and forgets what was held and sealed (their batches were not committed). An
    /// event stream takes the numbers back.
    package mutating func discardHeld() {
        if isEventStream {
            lastEvent = headEvent
            sealedLastEvent = headEvent
        } else {
            isHolding = false
        }
        held.removeAll()
        sealed.removeAll()
    }

    /// Notes that the event `sequence`, the one after the last released, was not sent because no
    /// subscriber wanted it. Nobody received it either, so a run of dropped events just before it
    /// may span it: drops among events of a topic few subscribe to (every didNavigate, not the
    /// willNavigate between) stay one run instead of one per drop.
    package mutating func unwantedEvent(_ sequence: UInt64) {
        guard let last = droppedEvents.last, last.upperBound + 1 == sequence else { return }
        droppedEvents[droppedEvents.count - 1] = last.lowerBound...sequence
    }

    /// Notes that the event `sequence` was dropped at the high-water mark, for the next report.
    package mutating func droppedEvent(_ sequence: UInt64) {
        if let last = droppedEvents.last, last.upperBound + 1 == sequence {
            droppedEvents[droppedEvents.count - 1] = last.lowerBound...sequence
        } else if droppedEvents.count < Self.maxDroppedRanges {
            droppedEvents.append(sequence...sequence)
        } else {
            droppedEventsComplete = false
        }
    }

    /// The drops not reported yet, if any. Call ``reported(_:)`` once the report went out; a
    /// report that is itself dropped is included in the next one.
    package func dueDropReport() -> DropReport? {
        let unreported = counters.dropped - reportedDrops
        return unreported > 0
            ? DropReport(
                unreported: unreported, total: counters.dropped, events: droppedEvents,
                eventsComplete: droppedEventsComplete) : nil
    }

    /// Notes that a report covering drops up to `report.total` went out.
    package mutating func reported(_ report: DropReport) {
        guard counters.dropped == report.total else { return }
        reportedDrops = report.total
        droppedEvents.removeAll()
        droppedEventsComplete = true
    }
}
