import FlowBusWire

/// One committed batch of events (PROTOCOL.md §4.6), packed as a replay reply carries them.
public struct EventBatch: Sendable {
    public var first: UInt64
    public var last: UInt64
    /// When it was committed, in seconds since the Unix epoch.
    public var created: Double
    public var events: PackedEvents

    public init(first: UInt64, last: UInt64, created: Double, events: PackedEvents) {
        self.first = first
        self.last = last
        self.created = created
        self.events = events
    }
}

/// The events a publisher keeps for replays (PROTOCOL.md §4.6): each committed batch of events,
/// packed as a replay reply carries them, oldest first, within a retention (a number of events
/// and, optionally, an age). flowd keeps the newest in memory here and, with a journal, all it
/// retains there too; ``EventReplay`` answers a request from either.
package struct EventLog: Sendable {
    /// Events kept, at most (whole batches: a few more may stay).
    package let retainCount: Int
    /// Events older than this many seconds go; nil: kept whatever their age.
    package let retainSeconds: Double?
    /// Bytes of packed events kept in memory, at most (whole batches: the newest stays): beyond,
    /// the journal serves the older ones.
    package let maxBytes: Int
    /// The default: a topology's burst of navigation stays within a few megabytes of memory.
    package static let defaultMaxBytes = 16 << 20
    private var batches: [EventBatch] = []
    /// The index of the oldest batch kept in ``batches``.
    private var start = 0
    private var eventCount = 0
    private var bytesKept = 0
    /// The sequence of the newest event committed.
    package private(set) var head: UInt64

    package init(
        retainCount: Int, retainSeconds: Double? = nil, maxBytes: Int = EventLog.defaultMaxBytes, head: UInt64 = 0
    ) {
        self.retainCount = max(0, retainCount)
        self.retainSeconds = retainSeconds
        self.maxBytes = maxBytes
        self.head = head
    }

    /// The sequence of the oldest event held here, nil when none is.
    package var oldest: UInt64? { start < batches.count ? batches[start].first : nil }

    /// Events held here.
    package var count: Int { eventCount }

    /// Bytes of packed events held here.
    package var byteCount: Int { bytesKept }

    /// Keeps a committed batch (`events` numbered from `first`), then lets go of what the
    /// retention no longer covers.
    package mutating func append(_ events: PackedEvents, first: UInt64, now: Double) {
        guard !events.isEmpty else { return }
        let last = first + UInt64(events.count) - 1
        head = last
        batches.append(EventBatch(first: first, last: last, created: now, events: events))
        eventCount += events.count
        bytesKept += events.byteCount
        trim(now: now)
    }

    /// Starts again after `head` (a standby that took over: the journal holds what came before).
    package mutating func restart(after head: UInt64) {
        batches.removeAll()
        start = 0
        eventCount = 0
        bytesKept = 0
        self.head = head
    }

    /// Lets go of the batches past the retention.
    package mutating func trim(now: Double) {
        while start < batches.count {
            let batch = batches[start]
            let tooMany = eventCount - batch.events.count >= retainCount
            let tooOld = retainSeconds.map { batch.created < now - $0 } ?? false
            let tooLarge = bytesKept > maxBytes && start + 1 < batches.count
            guard tooMany || tooOld || tooLarge else { break }
            eventCount -= batch.events.count
            bytesKept -= batch.events.byteCount
            // The slot's storage goes now, not when the array is next compacted.
            batches[start].events = PackedEvents()
            start += 1
        }
        if start > 64, start * 2 > batches.count {
            batches.removeFirst(start)
            start = 0
        }
    }

    /// Whether every event after `since` is held here.
    package func holdsEverything(after since: UInt64) -> Bool {
        guard let oldest else { return since >= head }
        return since + 1 >= oldest
    }

    /// The batches holding events after `since`, oldest first.
    package func batches(after since: UInt64) -> ArraySlice<EventBatch> {
        var low = start
        var high = batches.count
        while low < high {
            let middle = (low + high) / 2
            if batches[middle].last <= since { low = middle + 1 } else { high = middle }
        }
        return batches[low...]
    }
}

/// Answers a replay request from batches of kept events (PROTOCOL.md §4.6): the events after
/// `since` whose topic the request asks for, up to its limit and a size, in order.
package struct EventReplay: Sendable {
    /// A reply stays under this many bytes of events (one larger event still goes alone), well
    /// under the 1 MiB frame limit (PROTOCOL.md §6).
    package static let maxReplyBytes = 512 << 10
    /// Events looked at for one reply, at most, whether the request asks for them or not: a
    /// narrow request over a long history is answered in several replies.
    package static let maxScanned = 100_000

    package let request: ReplayRequest
    package private(set) var events = PackedEvents()
    /// The last event looked at: where the requester goes on from.
    package private(set) var last: UInt64
    /// Whether it stopped before the end of what it was given (limit, size, scan, a gap).
    package private(set) var isFull = false
    /// The event it stopped at because it does not follow ``last`` (events that were no longer
    /// kept, or could not be read): a reply never passes over an event it does not hold.
    package private(set) var gap: UInt64?
    private var scanned = 0

    package init(_ request: ReplayRequest) {
        self.request = request
        last = request.since
    }

    /// For a request from 0 (every event kept): the events up to `sequence` are not kept, and are
    /// passed over (up to the request's `until`).
    package mutating func passOver(through sequence: UInt64) {
        guard request.since == 0, sequence > last else { return }
        last = min(sequence, request.until ?? sequence)
        if last == request.until { isFull = true }
    }

    /// Takes the events of `batch` after ``last``, until full or at an event that does not follow.
    package mutating func take(_ batch: PackedEvents) {
        guard !isFull else { return }
        batch.bytes.withUnsafeBytes { raw in
            var offset = 0
            while offset < raw.count, !isFull {
                guard let event = PackedEvents.event(in: raw, at: offset) else { return }
                defer { offset = event.end }
                guard event.sequence > last else { continue }
                if let until = request.until, last >= until {
                    isFull = true
                    return
                }
                guard event.sequence == last + 1 else {
                    gap = event.sequence
                    isFull = true
                    return
                }
                scanned += 1
                let whole = UnsafeRawBufferPointer(rebasing: raw[offset..<event.end])
                if request.includes(topic: event.topic) {
                    if !events.isEmpty, events.byteCount + whole.count > Self.maxReplyBytes {
                        isFull = true
                        return
                    }
                    events.appendPacked(whole)
                }
                last = event.sequence
                if events.count >= request.limit || scanned >= Self.maxScanned || last == request.until {
                    isFull = true
                }
            }
        }
    }
}
