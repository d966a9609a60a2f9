import FlowBusWire

/// A token bucket per peer of a ROUTER socket (its routing id), for requests on a control
/// endpoint: a peer may send `burst` requests at once and `rate` per second after that.
///
/// A pure state machine: time is passed in. Past its rate a peer's request is refused (a
/// `rate-limited` reply saying when to retry) at most once per ``refusalInterval``; the others are
/// dropped unanswered, so that even refusals cannot flood. Memory stays bounded: at most
/// ``maxPeers`` buckets are held; a full bucket is the same as none, so those go first, then the
/// least recently used.
package struct RateLimiter: Sendable {
    /// A peer of the ROUTER socket: its routing id.
    package typealias Peer = [UInt8]

    /// What to do with one request.
    package enum Decision: Sendable, Equatable {
        /// Within the peer's rate: answer it.
        case allow
        /// Over the rate: refuse it; a token comes back after `retryAfter`.
        case refuse(retryAfter: Duration)
        /// Over the rate, and refused recently: drop it without a reply.
        case drop
    }

    /// Counts since the limiter was created.
    package struct Counters: Sendable, Equatable {
        package var allowed = 0
        package var refused = 0
        package var dropped = 0
        /// Buckets forgotten to stay within ``maxPeers`` while still not full.
        package var evicted = 0
    }

    /// What was limited since the last ``takeReport()``: one report per interval, never one per request.
    package struct Report: Sendable, Equatable {
        package var refused: Int
        package var dropped: Int
        /// Peers limited, and the one limited most with its count.
        package var peers: Int
        package var busiest: (peer: Peer, count: Int)

        package static func == (lhs: Report, rhs: Report) -> Bool {
            lhs.refused == rhs.refused && lhs.dropped == rhs.dropped && lhs.peers == rhs.peers
                && lhs.busiest.peer == rhs.busiest.peer && lhs.busiest.count == rhs.busiest.count
        }
    }

    private struct Bucket {
        var tokens: Double
        var updated: ContinuousClock.Instant
        var lastRefusal: ContinuousClock.Instant?
    }

    /// Requests per second a peer may send, sustained.
    package let rate: Double
    /// Requests a peer may send at once.
    package let burst: Double
    /// Buckets held at most.
    package let maxPeers: Int
    /// A peer over its rate gets one refusal per interval; its other requests are dropped.
    package let refusalInterval: Duration
    private var buckets: [Peer: Bucket] = [:]
    private var limitedInInterval: [Peer: Int] = [:]
    private var refusedInInterval = 0
    private var droppedInInterval = 0
    package private(set) var counters = Counters()

    /// A limiter allowing `rate` requests per second per peer, `burst` at once.
    package init(rate: Double, burst: Double, maxPeers: Int = 4096, refusalInterval: Duration = .seconds(1)) {
        self.rate = max(rate, 0.001)
        self.burst = max(burst, 1)
        self.maxPeers = max(1, maxPeers)
        self.refusalInterval = refusalInterval
    }

    /// The number of peers whose bucket is held.
    package var peerCount: Int { buckets.count }

    /// Decides about one request from `peer` at `now`.
    package mutating func admit(_ peer: Peer, now: ContinuousClock.Instant) -> Decision {
        var bucket: Bucket
        if let held = buckets[peer] {
            bucket = held
            let elapsed = Self.seconds(now - bucket.updated)
            bucket.tokens = min(burst, bucket.tokens + max(0, elapsed) * rate)
            bucket.updated = now
        } else {
            makeRoom(now: now)
            bucket = Bucket(tokens: burst, updated: now)
        }
        let decision: Decision
        if bucket.tokens >= 1 {
            bucket.tokens -= 1
            counters.allowed += 1
            decision = .allow
        } else if bucket.lastRefusal.map({ now - $0 >= refusalInterval }) ?? true {
            bucket.lastRefusal = now
            counters.refused += 1
            refusedInInterval += 1
            decision = .refuse(retryAfter: .nanoseconds(Int64((1 - bucket.tokens) / rate * 1e9)))
        } else {
            counters.dropped += 1
            droppedInInterval += 1
            decision = .drop
        }
        buckets[peer] = bucket
        if decision != .allow, limitedInInterval[peer] != nil || limitedInInterval.count < maxPeers {
            limitedInInterval[peer, default: 0] += 1
        }
        return decision
    }

    /// What was refused or dropped since the last call; nil when nothing was.
    package mutating func takeReport() -> Report? {
        guard refusedInInterval + droppedInInterval > 0 else { return nil }
        let busiest = limitedInInterval.max { $0.value < $1.value }.map { ($0.key, $0.value) } ?? ([], 0)
        let report = Report(
            refused: refusedInInterval, dropped: droppedInInterval, peers: limitedInInterval.count, busiest: busiest)
        refusedInInterval = 0
        droppedInInterval = 0
        limitedInInterval.removeAll(keepingCapacity: true)
        return report
    }

    /// Before a new bucket: drop those refilled to the full burst (the same as none), then, if
    /// still at the limit, the least recently used.
    private mutating func makeRoom(now: ContinuousClock.Instant) {
        guard buckets.count >= maxPeers else { return }
        let full = buckets.filter { $0.value.tokens + Self.seconds(now - $0.value.updated) * rate >= burst }
        for peer in full.keys { buckets.removeValue(forKey: peer) }
        guard buckets.count >= maxPeers, let oldest = buckets.min(by: { $0.value.updated < $1.value.updated }) else {
            return
        }
        buckets.removeValue(forKey: oldest.key)
        counters.evicted += 1
    }

    private static func seconds(_ duration: Duration) -> Double {
        let (seconds, attoseconds) = duration.components
        return Double(seconds) + Double(attoseconds) / 1e18
    }
}
