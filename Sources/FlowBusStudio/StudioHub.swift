#if Studio
import FlowBusWire
import Synchronization

/// The studio's fan-out: what the bus readers saw, kept in bounded memory, and a queue per
/// connected page that is drained at a fixed pace.
///
/// Bus threads call ``record(_:)`` and ``recordStatus(_:)``; page connections call
/// ``connect()``, ``drain(_:)`` and ``disconnect(_:)``. Nothing here waits: every call takes a
/// short lock. Memory is bounded by ``Limits``: a page that cannot keep up (or a flood) loses the
/// oldest queued events and is told how many (``Batch/dropped``), instead of the studio falling
/// behind or growing.
public final class StudioHub: Sendable {
    /// How much the hub keeps.
    public struct Limits: Sendable {
        /// Recent events kept for pages that connect later.
        public var recentEvents = 2000
        /// Status replies kept, for the tree as it was right after an event.
        public var statuses = 200
        /// Events queued per page between two drains; past it the oldest are dropped.
        public var pendingPerClient = 2000
        /// Events sent to a page per drain; the rest are dropped and counted.
        public var eventsPerDrain = 250

        public init() {}
    }

    /// One event as pages receive it.
    public struct Event: Sendable {
        /// The studio's order, from 1.
        public var id: Int64
        /// ``StudioEvent`` kind name.
        public var kind: String
        /// The reactor id of a state, snapshot or action.
        public var reactor: String?
        /// The event as a JSON object (with its `id`).
        public var json: String
    }

    /// A status reply and the last event read before it was fetched.
    public struct Status: Sendable {
        public var afterEvent: Int64
        public var json: String
    }

    /// What a page gets at one drain.
    public struct Batch: Sendable {
        public var events: [Event] = []
        /// Events dropped for this page since its last drain (throttled).
        public var dropped = 0
        /// A newer status, if any.
        public var status: Status?

        public var isEmpty: Bool { events.isEmpty && dropped == 0 && status == nil }
    }

    /// What a page gets when it connects.
    public struct Welcome: Sendable {
        public var clientID: Int
        public var recent: [Event]
        public var statuses: [Status]
        /// The latest state event of each reactor seen.
        public var states: [String: Event]
    }

    private struct Client {
        var pending: [Event] = []
        var head = 0
        var dropped = 0
        var status: Status?
    }

    private struct Core {
        var nextEventID: Int64 = 1
        var recent: [Event] = []
        var statuses: [Status] = []
        var states: [String: Event] = [:]
        var clients: [Int: Client] = [:]
        var nextClientID = 1
        var throttledTotal = 0
    }

    public let limits: Limits
    private let core = Mutex(Core())

    public init(limits: Limits = Limits()) {
        self.limits = limits
    }

    /// Records one described message (``StudioEvent/describe(_:endpoint:)``).
    /// - Returns: the id given to it.
    @discardableResult
    public func record(_ described: WireParams) -> Int64 {
        core.withLock { core in
            let id = core.nextEventID
            core.nextEventID += 1
            var map = described
            map["id"] = .int(id)
            let json = (try? WireJSON.string(.map(map), maxDepth: 128)) ?? "{\"id\":\(id),\"kind\":\"unprintable\"}"
            let event = Event(
                id: id, kind: map["kind"]?.stringValue ?? "", reactor: map["reactor"]?.stringValue, json: json)
            core.recent.append(event)
            if core.recent.count > limits.recentEvents {
                core.recent.removeFirst(core.recent.count - limits.recentEvents)
            }
            if event.kind == "state" || event.kind == "snapshot", let reactor = event.reactor {
                core.states[reactor] = event
            }
            for key in core.clients.keys {
                core.clients[key]?.pending.append(event)
                guard var client = core.clients[key], client.pending.count - client.head > limits.pendingPerClient
                else { continue }
                core.clients[key] = nil
                client.head += 1
                client.dropped += 1
                // Compacting once the dropped part is as long as the kept part keeps it amortised O(1).
                if client.head >= limits.pendingPerClient {
                    client.pending.removeFirst(client.head)
                    client.head = 0
                }
                core.clients[key] = client
                core.throttledTotal += 1
            }
            return id
        }
    }

    /// The id of the last event recorded (0 before any).
    public var lastEventID: Int64 { core.withLock { $0.nextEventID - 1 } }

    /// Records a status reply, unless it says what the previous one said with no event since:
    /// an unchanged tree read after new events is the tree after them too (the previous reply may
    /// have been read before the events that led to it arrived).
    public func recordStatus(_ json: String) {
        core.withLock { core in
            let after = core.nextEventID - 1
            if let last = core.statuses.last, last.json == json, last.afterEvent == after { return }
            let status = Status(afterEvent: after, json: json)
            core.statuses.append(status)
            if core.statuses.count > limits.statuses {
                core.statuses.removeFirst(core.statuses.count - limits.statuses)
            }
            for key in core.clients.keys { core.clients[key]?.status = status }
        }
    }

    /// Registers a page.
    public func connect() -> Welcome {
        core.withLock { core in
            let id = core.nextClientID
            core.nextClientID += 1
            core.clients[id] = Client()
            return Welcome(clientID: id, recent: core.recent, statuses: core.statuses, states: core.states)
        }
    }

    /// Takes what is queued for page `clientID`: at most ``Limits/eventsPerDrain`` events, the
    /// newest; older ones are dropped and counted.
    public func drain(_ clientID: Int) -> Batch {
        core.withLock { core in
            guard var client = core.clients[clientID] else { return Batch() }
            var batch = Batch(dropped: client.dropped, status: client.status)
            let waiting = client.pending.count - client.head
            let skipped = max(0, waiting - limits.eventsPerDrain)
            batch.dropped += skipped
            core.throttledTotal += skipped
            batch.events = Array(client.pending[(client.head + skipped)...])
            client = Client()
            core.clients[clientID] = client
            return batch
        }
    }

    /// Events dropped for slow pages or floods since the studio started.
    public var throttledTotal: Int { core.withLock { $0.throttledTotal } }

    /// Forgets a page.
    public func disconnect(_ clientID: Int) {
        _ = core.withLock { $0.clients.removeValue(forKey: clientID) }
    }
}
#endif
