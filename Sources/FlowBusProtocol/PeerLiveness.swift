/// Whether one peer is heard, judged by its silence: a daemon's view of a peer that sends
/// heartbeats, a client's view of the daemon whose heartbeats it hears. Time is passed in.
///
/// The peer is silent once nothing was heard from it for longer than ``silenceLimit``; that is
/// reported once (``check(now:)``), and its return once (``heard(now:)``).
package struct PeerLiveness: Sendable, Equatable {
    /// Silence past this is reported.
    package var silenceLimit: Duration
    /// When the peer was last heard.
    package private(set) var lastHeard: ContinuousClock.Instant
    /// Whether the peer is silent past the limit now (reported, and not heard since).
    package private(set) var isSilent = false

    /// A peer heard `now` (or, for a daemon not heard yet, whose silence is timed from `now`).
    package init(silenceLimit: Duration, now: ContinuousClock.Instant) {
        self.silenceLimit = silenceLimit
        lastHeard = now
    }

    /// Something arrived from the peer.
    /// - Returns: whether it had been reported silent: it is back.
    @discardableResult
    package mutating func heard(now: ContinuousClock.Instant) -> Bool {
        lastHeard = now
        defer { isSilent = false }
        return isSilent
    }

    /// - Returns: how long the peer was silent, when it went silent past the limit since the last
    ///   check; nil otherwise (heard in time, or reported already).
    package mutating func check(now: ContinuousClock.Instant) -> Duration? {
        guard !isSilent, now - lastHeard > silenceLimit else { return nil }
        isSilent = true
        return now - lastHeard
    }

    /// When a check would find the peer silent; nil while it is reported silent.
    package var silentAt: ContinuousClock.Instant? {
        isSilent ? nil : lastHeard + silenceLimit
    }
}
