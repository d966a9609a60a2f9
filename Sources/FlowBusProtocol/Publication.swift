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

    /// A `dropped-hwm` report due: drops since the last report, and in all.
    package struct DropReport: Sendable, Equatable {
        package var unreported: Int
        package var total: Int
    }

    /// The endpoint's name in diagnostics (`events`, `states`).
    package let endpoint: String
    private var prefixes: [[UInt8]] = []
    private var sequence: UInt64 = 0
    private var held = HeldMessages()
    private var reportedDrops = 0
    /// Whether messages are held back (the events of a batch until it is committed).
    package private(set) var isHolding = false
    package private(set) var counters = Counters()

    /// A publication for `endpoint`.
    package init(endpoint: String) {
        self.endpoint = endpoint
    }

    /// The next sequence of this endpoint's own messages (heartbeats, diagnostics, events).
    package mutating func nextSequence() -> UInt64 {
        sequence += 1
        return sequence
    }

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

    /// Counts a message not encoded because nobody wanted its topic.
    package mutating func countUnwanted() {
        counters.unwanted += 1
    }

    /// Decides about a message of `topic` before it is encoded: nothing is encoded for a topic
    /// nobody wants.
    package mutating func offer(topic: String) -> Bool {
        if isWanted(topic) { return true }
        counters.unwanted += 1
        return false
    }

    /// Decides about an encoded message (its frame 0 is the topic).
    package mutating func offer(_ frames: FrameBuffer) -> Decision {
        guard frames.withFrame(0, { isWanted($0) }) else {
            counters.unwanted += 1
            return .unwanted
        }
        return take(frames)
    }

    /// Takes a message whose topic is known to be wanted: held (a copy) while holding, else to send now.
    package mutating func take(_ frames: FrameBuffer) -> Decision {
        guard isHolding else { return .send }
        held.append(frames)
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
    /// so that both stores keep their capacity from batch to batch.
    package mutating func release(into released: inout HeldMessages) {
        isHolding = false
        swap(&held, &released)
    }

    /// Stops holding and forgets what was held (its batch was not committed).
    package mutating func discardHeld() {
        isHolding = false
        held.removeAll()
    }

    /// The drops not reported yet, if any. Call ``reported(_:)`` once the report went out; a
    /// report that is itself dropped is included in the next one.
    package func dueDropReport() -> DropReport? {
        let unreported = counters.dropped - reportedDrops
        return unreported > 0 ? DropReport(unreported: unreported, total: counters.dropped) : nil
    }

    /// Notes that a report covering drops up to `report.total` went out.
    package mutating func reported(_ report: DropReport) {
        if counters.dropped == report.total { reportedDrops = report.total }
    }
}
