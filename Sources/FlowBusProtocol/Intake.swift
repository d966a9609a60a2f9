import FlowBusWire

/// The receiving side of the protocol for one endpoint that takes numbered messages from
/// DEALERs: flowd's `ingress` and a reactor host's `actions` (PROTOCOL.md §4).
///
/// A pure state machine: the daemon's loop hands it what each message's envelope says
/// (``receive(source:sequence:topic:peer:)``, ``heartbeat(source:sequence:topic:peer:)``) and carries
/// out what ``endBatch(now:checkEvery:checksLiveness:)`` returns. It owns the per-source sequence ledger (one policy for
/// both daemons), the cumulative acks, the `out-of-order` refusals and their details, heartbeat
/// answers and the liveness of peers that send heartbeats. It does no I/O and reads no clock.
///
/// The ledger's rule: a source's messages are dealt with once each, in sequence order, with no
/// gap. A message at the next sequence is ``Verdict/fresh``: the daemon applies or refuses it,
/// and either way it is acknowledged. An earlier one is a ``Verdict/duplicate``: acknowledged
/// again, not applied. A later one is ``Verdict/outOfOrder(expected:)``: neither applied nor
/// acknowledged, and its sender is told once per batch to resend from the sequence expected.
/// A source the ledger does not hold is first looked up in the receiver's durable ledger
/// (``Policy/hasDurableLedger``: flowd's journal, a reactor host's state database), so evicting a
/// source from memory is safe. The look-up is an action, not a call: the message is judged
/// ``Verdict/lookUp`` and held by the caller, ``BatchEnd/lookUps`` names the sources to read (once per
/// batch, off the loop thread: with PostgreSQL it is a network round trip), and the answer given to
/// ``lookedUp(_:last:)`` or ``lookUpFailed(_:)`` lets the held messages be judged again, in order. One found nowhere starts at 1 when the receiver remembers every source
/// it ever dealt with (``Policy/remembersSources``: flowd with a journal); otherwise its first
/// sequence is adopted, since the receiver cannot tell a new source from one it forgot.
///
/// The durable ledger can be behind a sender (a journal that lost its newest entries): the sender
/// had sequences acknowledged that the ledger no longer has, released them, and cannot resend
/// them. A source whose last sequence came from the durable ledger and whose sender, refused as
/// out of order, goes back to a sequence it sent before (it holds nothing older) is
/// ``Verdict/ledgerBehind``: refused as `journal-behind` until the receiver is started accepting
/// the loss (``Policy/acceptsLedgerLoss``), which then adopts the sender's sequence.
///
/// Memory stays bounded: sources silent for ``Policy/idleTimeout`` are forgotten, and beyond
/// ``Policy/maxSources`` the least recently heard are, at the liveness checks.
package struct Intake: Sendable {
    /// A peer of the ROUTER socket: its routing id.
    package typealias Peer = [UInt8]

    /// How the ledger treats new sources and how liveness is judged.
    package struct Policy: Sendable {
        /// Whether every source ever dealt with is remembered across restarts.
        package var remembersSources: Bool
        /// Silence after which a peer that sent heartbeats is reported dead.
        package var deadAfter: Duration
        /// Silence after which a source is forgotten (its ledger entry, if any, is in the
        /// durable ledger).
        package var idleTimeout: Duration
        /// Sources held in memory at most; beyond it the least recently heard are forgotten.
        package var maxSources: Int
        /// Whether the receiver keeps a durable ledger, in which a source the intake does not hold
        /// is looked up (``Verdict/lookUp``) before its message is judged.
        package var hasDurableLedger: Bool
        /// Whether a sender found ahead of the durable ledger has its sequence adopted (the lost
        /// sequences are reported) rather than refused as `journal-behind`.
        package var acceptsLedgerLoss: Bool
        /// What an operator does to get past a `journal-behind` refusal, for its message.
        package var ledgerLossRemedy: String

        /// A policy.
        package init(
            remembersSources: Bool, deadAfter: Duration, idleTimeout: Duration = .seconds(3600),
            maxSources: Int = 100_000,
            hasDurableLedger: Bool = false, acceptsLedgerLoss: Bool = false,
            ledgerLossRemedy: String = "start the receiver accepting the loss"
        ) {
            self.remembersSources = remembersSources
            self.deadAfter = deadAfter
            self.idleTimeout = idleTimeout
            self.maxSources = max(1, maxSources)
            self.hasDurableLedger = hasDurableLedger
            self.acceptsLedgerLoss = acceptsLedgerLoss
            self.ledgerLossRemedy = ledgerLossRemedy
        }
    }

    /// What to do with one numbered message.
    package enum Verdict: Sendable, Equatable {
        /// The next sequence of its source: apply it or refuse it; it is acknowledged either way.
        case fresh
        /// Already dealt with: acknowledged again, not applied.
        case duplicate
        /// A sequence after the next one: earlier ones are missing. Not applied, not acknowledged.
        case outOfOrder(expected: UInt64)
        /// Sequence 0 on a message that must be numbered: refuse it as `malformed`, without an ack.
        case unnumbered
        /// The source must first be looked up in the durable ledger (``BatchEnd/lookUps``): hold the
        /// message and judge it again once ``lookedUp(_:last:)`` or ``lookUpFailed(_:)`` answered;
        /// later messages of the source meanwhile are held too, behind it.
        case lookUp
        /// The sender is ahead of the durable ledger and holds nothing older: not applied, not
        /// acknowledged; refused as `journal-behind` at the batch's end.
        case ledgerBehind
    }

    /// A source found ahead of the durable ledger: refused (`journal-behind`), or adopted.
    package struct LedgerBehind: Sendable {
        package var peer: Peer
        /// The refusal to send to the peer (when not adopted) and to publish.
        package var refusal: Refusal
        package var source: String
        /// The last sequence the durable ledger had of the source.
        package var ledgerLast: UInt64
        /// The sequence the sender went back to: the oldest it holds.
        package var received: UInt64
        /// Whether the sender's sequence was adopted (``Policy/acceptsLedgerLoss``).
        package var adopted: Bool
        /// Whether this is the first report about the source: log and publish it once.
        package var isFirstReport: Bool
        /// The sequences lost: those between the ledger's last and the one received.
        package var lost: UInt64 { received - ledgerLast - 1 }
    }

    /// A cumulative ack to send: `sequence` and everything before it of `source`, to `peer`.
    package struct Ack: Sendable, Equatable {
        package var peer: Peer
        package var source: String
        package var sequence: UInt64
    }

    /// A peer that sent heartbeats and went silent.
    package struct DeadPeer: Sendable, Equatable {
        package var source: String
        package var role: String
        package var silentFor: Duration
    }

    /// What the loop carries out once a batch of messages is dealt with.
    package struct BatchEnd: Sendable {
        /// One `out-of-order` refusal per source that skipped ahead, each to send to its peer
        /// (before the acks) and to publish.
        package var refusals: [(peer: Peer, refusal: Refusal)] = []
        /// The acks, to send once the batch is applied (and, with a journal, committed).
        package var acks: [Ack] = []
        /// Peers whose heartbeats are answered (flowd answers, so that senders can tell it is alive).
        package var heartbeatAnswers: [Peer] = []
        /// The highest sequence dealt with per source in this batch (what a journal records).
        package var dealtWith: [String: UInt64] = [:]
        /// Peers judged dead since the last batch, each to report (at most ``maxDeadPeersListed``).
        package var deadPeers: [DeadPeer] = []
        /// More peers judged dead at the same check: reported together, in one diagnostic, so
        /// that churn cannot flood the logs and the bus.
        package var moreDeadPeers: [DeadPeer] = []
        /// Sources found ahead of the durable ledger in this batch, one entry per source: each
        /// refusal goes to its peer before the acks unless adopted; log and publish the first
        /// report about a source only.
        package var ledgerBehind: [LedgerBehind] = []
        /// Sources to look up in the durable ledger, in the order first heard: read them off the
        /// loop thread, then answer with ``lookedUp(_:last:)`` or ``lookUpFailed(_:)``.
        package var lookUps: [String] = []
    }

    /// Dead peers reported one by one per liveness check; the rest go into one report.
    package static let maxDeadPeersListed = 3

    /// What is known of a peer's liveness.
    package struct Liveness: Sendable, Equatable {
        /// Its silence, timed from when it was last heard.
        package var heard: PeerLiveness
        /// Only peers that send heartbeats can be judged dead by their silence.
        package var sendsHeartbeats = false
        /// What the peer is, for diagnostics: `stepper`, `view`, `reactor-host <name>`.
        package var role: String

        package var lastHeard: ContinuousClock.Instant { heard.lastHeard }
        package var isDead: Bool { heard.isSilent }
    }

    /// Counts since the intake was created.
    package struct Counters: Sendable, Equatable {
        package var received = 0
        package var fresh = 0
        package var duplicates = 0
        package var outOfOrder = 0
        package var heartbeats = 0
        /// Sources forgotten: idle, or beyond the limit.
        package var evicted = 0
        /// Sources looked up in the durable ledger.
        package var lookedUp = 0
        /// Look-ups that failed (the held messages were dropped: their senders resend them).
        package var lookUpFailures = 0
        /// Messages held while their source was looked up.
        package var heldForLookUp = 0
        /// Messages refused because their sender is ahead of the durable ledger.
        package var ledgerBehind = 0
        /// Sources whose sequence was adopted past the durable ledger, and the sequences lost so.
        package var adoptedSources = 0
        package var lostSequences: UInt64 = 0
    }

    private struct Skip {
        var peer: Peer
        var topic: String
        var expected: UInt64
        var first: UInt64
        var count = 0
    }

    private struct PendingAck {
        var peer: Peer
        var sequence: UInt64
    }

    /// Fresh messages of one source in a row: what they change in the ledger, the batch's dealt
    /// with and its pending ack is written once the run ends, not per message (four hashes of
    /// the source each). `sequence` is the run's last; `pending`: not yet written.
    private struct FreshRun {
        var source: String
        var sequence: UInt64
        var peer: Peer
        var pending = false
    }

    /// The policy in force.
    package let policy: Policy
    /// The endpoint named in refusals (`ingress`, `actions`).
    package let endpoint: String
    /// The role given to peers first heard on this endpoint.
    package let defaultRole: String
    /// Last sequence dealt with per source; 0: none yet (the next expected is 1).
    private var lastSequence: [String: UInt64]
    /// Sources being looked up, or whose look-up failed, by the lowest sequence seen of each since:
    /// found nowhere, a receiver that adopts adopts that one, so that a message it had to drop
    /// unacknowledged (its look-up failed, or there was no room to hold it) is resent, not skipped.
    private var lowestSeen: [String: UInt64] = [:]
    /// Sources whose last sequence came from the durable ledger and no message of theirs matched
    /// it since: the highest sequence received of each meanwhile (0: none).
    private var unconfirmed: [String: UInt64] = [:]
    /// Sources judged ahead of the durable ledger, and those already reported.
    private var behind: Set<String> = []
    private var reportedBehind: Set<String> = []
    private var behindInBatch: [String: LedgerBehind] = [:]
    private var behindOrder: [String] = []
    private var pendingAcks: [String: PendingAck] = [:]
    private var skips: [String: Skip] = [:]
    private var skipOrder: [String] = []
    private var heartbeatAnswers: [Peer] = []
    private var dealtWith: [String: UInt64] = [:]
    private var heard: [String: Bool] = [:]
    /// Sources being looked up in the durable ledger, and those not yet handed out for it.
    private var lookingUp: Set<String> = []
    private var lookUpOrder: [String] = []
    private var lastLivenessCheck: ContinuousClock.Instant?
    private var run: FreshRun?
    /// Peers heard, by source id.
    package private(set) var peers: [String: Liveness] = [:]
    package private(set) var counters = Counters()

    /// An intake for `endpoint`, resuming from `lastSequences` (restored from a journal).
    package init(endpoint: String, policy: Policy, defaultRole: String, lastSequences: [String: UInt64] = [:]) {
        self.endpoint = endpoint
        self.policy = policy
        self.defaultRole = defaultRole
        lastSequence = lastSequences
        for source in lastSequences.keys { unconfirmed[source] = 0 }
    }

    /// The last sequence dealt with of `source`, if it is held.
    package func lastSequence(of source: String) -> UInt64? {
        if let run, run.pending, run.source == source { return run.sequence }
        return lastSequence[source].flatMap { $0 == 0 ? nil : $0 }
    }

    /// The number of sources whose ledger entry is held in memory.
    package var sourceCount: Int { lastSequence.count }

    /// Judges a numbered message (anything but a heartbeat) whose envelope could be read.
    package mutating func receive(source: String, sequence: UInt64, topic: String, peer: Peer) -> Verdict {
        counters.received += 1
        guard sequence > 0 else { return .unnumbered }
        if run != nil {
            // The next of the run's source is fresh, as below: the run began with a fresh message
            // of it, which confirmed it, and whatever could look it up, leave it unconfirmed or
            // judge it behind the ledger ends the run first.
            if run?.sequence == sequence &- 1, run?.source == source {
                counters.fresh += 1
                run?.sequence = sequence
                if run?.peer != peer { run?.peer = peer }
                run?.pending = true
                return .fresh
            }
            endRun()
        }
        if heard[source] == nil { heard[source] = false }
        if !lookingUp.isEmpty, lookingUp.contains(source) {
            counters.heldForLookUp += 1
            lowestSeen[source] = min(lowestSeen[source] ?? sequence, sequence)
            return .lookUp
        }
        // The source's entry is found once, and updated through its index (one hash, not two).
        let entry = lastSequence.index(forKey: source)
        let last = entry.map { lastSequence.values[$0] }
        if last == nil, policy.hasDurableLedger {
            counters.lookedUp += 1
            counters.heldForLookUp += 1
            lookingUp.insert(source)
            lookUpOrder.append(source)
            lowestSeen[source] = min(lowestSeen[source] ?? sequence, sequence)
            return .lookUp
        }
        if let last, sequence <= last {
            counters.duplicates += 1
            confirm(source)
            // Acknowledging the last one dealt with tells the sender everything up to it arrived.
            recordAck(source: source, sequence: last, peer: peer)
            return .duplicate
        }
        let expected = last.map { $0 + 1 } ?? (policy.remembersSources ? 1 : sequence)
        if sequence != expected, let last, isAheadOfLedger(source, sequence: sequence) {
            noteBehind(source, last: last, sequence: sequence, topic: topic, peer: peer)
            if !policy.acceptsLedgerLoss {
                counters.ledgerBehind += 1
                if last > 0 { recordAck(source: source, sequence: last, peer: peer) }
                return .ledgerBehind
            }
            counters.adoptedSources += 1
            counters.lostSequences += sequence - last - 1
        } else if sequence != expected {
            counters.outOfOrder += 1
            if let highest = unconfirmed[source] { unconfirmed[source] = max(highest, sequence) }
            if let last, last > 0 { recordAck(source: source, sequence: last, peer: peer) }
            if skips[source] == nil {
                skipOrder.append(source)
                skips[source] = Skip(peer: peer, topic: topic, expected: expected, first: sequence)
            }
            skips[source]?.count += 1
            return .outOfOrder(expected: expected)
        }
        confirm(source)
        counters.fresh += 1
        if let entry {
            lastSequence.values[entry] = sequence
        } else {
            lastSequence[source] = sequence
        }
        dealtWith[source] = sequence
        recordAck(source: source, sequence: sequence, peer: peer)
        run = FreshRun(source: source, sequence: sequence, peer: peer)
        return .fresh
    }

    /// Writes what the run of fresh messages changed, and ends it.
    private mutating func endRun() {
        guard let run else { return }
        self.run = nil
        guard run.pending else { return }
        lastSequence[run.source] = run.sequence
        dealtWith[run.source] = run.sequence
        recordAck(source: run.source, sequence: run.sequence, peer: run.peer)
    }

    /// Judges a message whose header did not decode (`error`). When its envelope can still be read
    /// (`ReadableEnvelope`) and names a numbered message, the ledger judges it like any other:
    /// the next one of its source is refused and acknowledged, a duplicate or a gap is dealt with
    /// as such. Otherwise nothing of it can be trusted: it is refused and not acknowledged.
    /// - Returns: the refusal, and the ledger's verdict (nil: unreadable, refuse it without an
    ///   ack): send the refusal when the verdict is ``Verdict/fresh`` or nil, hold it with the
    ///   message on ``Verdict/lookUp``, drop it otherwise.
    package mutating func refuse(
        _ error: WireError, frames: FrameBuffer, peer: Peer, limits: WireLimits
    ) -> (refusal: Refusal, verdict: Verdict?) {
        let refusal = Refusal(error, frames: frames, endpoint: endpoint, limits: limits)
        guard let source = refusal.source, let sequence = refusal.sequence, sequence > 0 else {
            counters.received += 1
            return (refusal, nil)
        }
        return (refusal, receive(source: source, sequence: sequence, topic: refusal.topic ?? "", peer: peer))
    }

    /// Notes a heartbeat: proof of life, answered at the end of the batch. With sequence 0 it is
    /// not numbered; with another it is a numbered no-op, judged by the ledger like any message
    /// (a sender fills with it a sequence it no longer wants to send, e.g. a view's stale
    /// snapshot request): acknowledged when fresh, nothing to apply.
    /// - Returns: the ledger's verdict on a numbered heartbeat (hold it on ``Verdict/lookUp``);
    ///   nil for an unnumbered one.
    @discardableResult
    package mutating func heartbeat(source: String, sequence: UInt64 = 0, topic: String = "", peer: Peer) -> Verdict? {
        counters.heartbeats += 1
        heartbeatAnswers.append(peer)
        // Only an unnumbered heartbeat is a liveness signal; a numbered one (a view's filler for a
        // request it no longer wants) says nothing of the heartbeats to come.
        guard sequence > 0 else {
            heard[source] = true
            return nil
        }
        return receive(source: source, sequence: sequence, topic: topic, peer: peer)
    }

    /// Notes a heartbeat heard elsewhere (flowd subscribes to reactor hosts' `states`).
    package mutating func heard(source: String, role: String, now: ContinuousClock.Instant) {
        note(source, heartbeat: true, role: role, now: now)
    }

    /// Ends a batch: the acks, refusals and answers to send, and the peers found dead (checked at
    /// most once per `checkEvery`).
    /// `checksLiveness`: false in a batch that read nothing (the daemon is suspended), so that peers
    /// whose heartbeats wait unread are not judged dead.
    package mutating func endBatch(
        now: ContinuousClock.Instant, checkEvery: Duration, checksLiveness: Bool = true
    ) -> BatchEnd {
        endRun()
        var end = BatchEnd()
        for source in skipOrder {
            guard let skip = skips[source] else { continue }
            let refusal = Refusal(
                reason: .outOfOrder,
                detail: "\(skip.count) message(s) of \(source) skipped ahead of sequence \(skip.expected) "
                    + "(first \(skip.first)): not applied; resend from \(skip.expected)",
                endpoint: endpoint, source: source, topic: skip.topic, sequence: skip.first,
                extra: ["expected": .int(Int64(clamping: skip.expected)), "count": .int(Int64(skip.count))])
            end.refusals.append((skip.peer, refusal))
        }
        skips.removeAll(keepingCapacity: true)
        skipOrder.removeAll(keepingCapacity: true)
        end.ledgerBehind = behindOrder.compactMap { behindInBatch[$0] }
        behindInBatch.removeAll(keepingCapacity: true)
        behindOrder.removeAll(keepingCapacity: true)
        end.acks = pendingAcks.map { Ack(peer: $0.value.peer, source: $0.key, sequence: $0.value.sequence) }
        pendingAcks.removeAll(keepingCapacity: true)
        end.heartbeatAnswers = heartbeatAnswers
        heartbeatAnswers.removeAll(keepingCapacity: true)
        end.dealtWith = dealtWith
        dealtWith.removeAll(keepingCapacity: true)
        end.lookUps = lookUpOrder
        lookUpOrder.removeAll(keepingCapacity: true)
        for (source, heartbeat) in heard { note(source, heartbeat: heartbeat, role: nil, now: now) }
        heard.removeAll(keepingCapacity: true)
        if checksLiveness, lastLivenessCheck.map({ now - $0 >= checkEvery }) ?? true {
            lastLivenessCheck = now
            let dead = checkLiveness(now: now)
            end.deadPeers = Array(dead.prefix(Self.maxDeadPeersListed))
            end.moreDeadPeers = Array(dead.dropFirst(Self.maxDeadPeersListed))
        }
        return end
    }

    /// The durable ledger's answer for `source` (one of ``BatchEnd/lookUps``): its last sequence
    /// there, nil when it has none. Judge the messages held for it again, in order.
    package mutating func lookedUp(_ source: String, last found: UInt64?) {
        endRun()
        guard lookingUp.remove(source) != nil else { return }
        let lowest = lowestSeen.removeValue(forKey: source)
        if let found {
            lastSequence[source] = found
            unconfirmed[source] = 0
        } else if policy.remembersSources {
            lastSequence[source] = 0
            unconfirmed[source] = 0
        } else {
            // Adopted: the lowest seen is the next expected.
            lastSequence[source] = (lowest ?? 1) - 1
        }
    }

    /// The durable ledger could not be read for `source`: drop the messages held for it, neither
    /// applied nor acknowledged (their sender resends them); nothing is assumed about the source,
    /// whose next message is looked up again (the lowest sequence seen is kept for it).
    package mutating func lookUpFailed(_ source: String) {
        guard lookingUp.remove(source) != nil else { return }
        counters.lookUpFailures += 1
    }

    /// Whether `source`, refused as out of order, is ahead of the durable ledger: judged so
    /// before, or its sender went back to `sequence` after sending it or a later one — a sender
    /// resends from its oldest unacknowledged message, so it holds nothing older (PROTOCOL.md §4.4).
    private func isAheadOfLedger(_ source: String, sequence: UInt64) -> Bool {
        if behind.contains(source) { return true }
        guard let highest = unconfirmed[source] else { return false }
        return highest > 0 && sequence <= highest
    }

    /// The ledger matched the sender: nothing lost.
    private mutating func confirm(_ source: String) {
        if unconfirmed.isEmpty && behind.isEmpty { return }
        unconfirmed.removeValue(forKey: source)
        behind.remove(source)
    }

    private mutating func noteBehind(_ source: String, last: UInt64, sequence: UInt64, topic: String, peer: Peer) {
        if var noted = behindInBatch[source] {
            noted.refusal.extra["count"] = .int((noted.refusal.extra["count"]?.intValue ?? 0) + 1)
            behindInBatch[source] = noted
            return
        }
        let lost = sequence - last - 1
        let adopted = policy.acceptsLedgerLoss
        let detail =
            adopted
            ? "\(source) is ahead of the durable ledger, whose last sequence of it is \(last): sequence \(sequence) adopted, "
                + "\(lost) sequence(s) lost (\(last + 1)...\(sequence - 1))"
            : "\(source) is ahead of the durable ledger, whose last sequence of it is \(last), and holds nothing older than "
                + "\(sequence): \(lost) acknowledged sequence(s) were lost with the ledger's newest entries; not applied. "
                + "To adopt the sender's sequence and accept the loss, \(policy.ledgerLossRemedy)"
        let refusal = Refusal(
            reason: .journalBehind, detail: detail, endpoint: endpoint, source: source, topic: topic,
            sequence: sequence,
            extra: [
                "journal_last": .int(Int64(clamping: last)), "received": .int(Int64(clamping: sequence)),
                "lost": .int(Int64(clamping: lost)), "adopted": .bool(adopted), "count": 1,
            ])
        let first = reportedBehind.insert(source).inserted
        behindOrder.append(source)
        behindInBatch[source] = LedgerBehind(
            peer: peer, refusal: refusal, source: source, ledgerLast: last, received: sequence, adopted: adopted,
            isFirstReport: first)
        if adopted {
            unconfirmed.removeValue(forKey: source)
            behind.remove(source)
        } else {
            behind.insert(source)
        }
    }

    private mutating func recordAck(source: String, sequence: UInt64, peer: Peer) {
        if let entry = pendingAcks.index(forKey: source) {
            guard sequence > pendingAcks.values[entry].sequence else { return }
            pendingAcks.values[entry].sequence = sequence
            if pendingAcks.values[entry].peer != peer { pendingAcks.values[entry].peer = peer }
        } else {
            pendingAcks[source] = PendingAck(peer: peer, sequence: sequence)
        }
    }

    private mutating func note(_ source: String, heartbeat: Bool, role: String?, now: ContinuousClock.Instant) {
        var peer =
            peers[source]
            ?? Liveness(heard: PeerLiveness(silenceLimit: policy.deadAfter, now: now), role: role ?? defaultRole)
        peer.heard.heard(now: now)
        if heartbeat { peer.sendsHeartbeats = true }
        if let role { peer.role = role }
        peers[source] = peer
    }

    private mutating func checkLiveness(now: ContinuousClock.Instant) -> [DeadPeer] {
        var dead: [DeadPeer] = []
        for (source, peer) in peers where peer.sendsHeartbeats {
            guard let silentFor = peers[source]?.heard.check(now: now) else { continue }
            dead.append(DeadPeer(source: source, role: peer.role, silentFor: silentFor))
        }
        return dead.sorted { $0.source < $1.source }
    }

    /// Forgets sources idle past the time-out, then the least recently heard beyond the limit
    /// (down to nine tenths of it, so that eviction runs seldom). Call it once what was dealt
    /// with is durable (after a journal commit): a source whose entry is not on disk yet
    /// (`isUnsaved`) is kept, and so are those with an ack pending.
    package mutating func forgetSources(
        now: ContinuousClock.Instant, keeping isUnsaved: (String) -> Bool = { _ in false }
    ) {
        endRun()
        func mayForget(_ source: String) -> Bool { pendingAcks[source] == nil && !isUnsaved(source) }
        var forgotten: [String] = []
        for (source, peer) in peers where now - peer.lastHeard > policy.idleTimeout && mayForget(source) {
            forgotten.append(source)
        }
        for source in forgotten { forget(source) }
        let held = max(peers.count, lastSequence.count)
        guard held > policy.maxSources else { return }
        let keep = policy.maxSources - policy.maxSources / 10
        var oldestFirst = peers.filter { mayForget($0.key) }.sorted { $0.value.lastHeard < $1.value.lastHeard }
        oldestFirst.removeLast(min(oldestFirst.count, keep))
        for (source, _) in oldestFirst { forget(source) }
        // Entries restored without being heard since go too.
        if lastSequence.count > policy.maxSources {
            let unheard = lastSequence.keys.filter { peers[$0] == nil && mayForget($0) }
            for source in unheard.prefix(lastSequence.count - keep) { forget(source) }
        }
    }

    private mutating func forget(_ source: String) {
        counters.evicted += 1
        peers.removeValue(forKey: source)
        lastSequence.removeValue(forKey: source)
        lowestSeen.removeValue(forKey: source)
        unconfirmed.removeValue(forKey: source)
        behind.remove(source)
        reportedBehind.remove(source)
    }
}

/// A message a daemon refused, with what could be read of it: the one place its diagnostic
/// details are built (PROTOCOL.md §7).
package struct Refusal: Sendable, Equatable {
    package var reason: DiagnosticReason
    package var detail: String
    /// The endpoint it arrived on (`ingress`, `control`, `actions`, `zap`).
    package var endpoint: String
    /// Its envelope's source, topic and sequence, when the envelope could be read.
    package var source: String?
    package var topic: String?
    package var sequence: UInt64?
    /// Reason-specific keys (`expected` for `out-of-order`, `host` on a reactor host).
    package var extra: WireParams

    /// A refusal.
    package init(
        reason: DiagnosticReason, detail: String, endpoint: String, source: String? = nil, topic: String? = nil,
        sequence: UInt64? = nil, extra: WireParams = [:]
    ) {
        self.reason = reason
        self.detail = detail
        self.endpoint = endpoint
        self.source = source
        self.topic = topic
        self.sequence = sequence
        self.extra = extra
    }

    /// A refusal of a message whose header did not decode (`error`), naming what can still be read
    /// of it: its envelope's source, topic and sequence when the envelope is readable
    /// (`ReadableEnvelope`) and numbered, else its topic if any.
    package init(_ error: WireError, frames: FrameBuffer, endpoint: String, limits: WireLimits) {
        if let readable = ReadableEnvelope(salvaging: frames, limits: limits), readable.sequence > 0 {
            self.init(
                reason: error.reason, detail: error.detail, endpoint: endpoint, source: readable.source,
                topic: readable.topic, sequence: readable.sequence)
        } else {
            self.init(
                reason: error.reason, detail: error.detail, endpoint: endpoint,
                topic: ReadableEnvelope.topic(of: frames))
        }
    }

    /// A refusal naming the message `header` describes.
    package init(
        _ reason: DiagnosticReason, _ detail: String, endpoint: String, header: RoutedHeader, extra: WireParams = [:]
    ) {
        self.init(
            reason: reason, detail: detail, endpoint: endpoint, source: header.envelope.source, topic: header.topic,
            sequence: header.envelope.sequence, extra: extra)
    }

    /// The diagnostic's details map: `endpoint`, then `source`, `topic`, `sequence` when known,
    /// then the reason-specific keys. The topic is quoted input: cut (``quoted(_:)``).
    package var details: WireParams {
        var details: WireParams = ["endpoint": .string(endpoint)]
        if let source { details["source"] = .string(source) }
        if let topic { details["topic"] = .string(Self.quoted(topic)) }
        if let sequence { details["sequence"] = .int(Int64(clamping: sequence)) }
        details.merge(extra) { _, reasonSpecific in reasonSpecific }
        return details
    }

    /// The most of a refused message's text its details quote, in Unicode code points.
    package static let quotedLimit = 64

    /// `text` cut to its first ``quotedLimit`` code points (PROTOCOL.md §8): a diagnostic echoes
    /// neither a message's secrets nor its size (a topic over the limit may be 1 KiB). The source
    /// is not cut: at most 255 bytes, it is what a sender matches its refusals by.
    package static func quoted(_ text: String) -> String {
        if text.utf8.count <= quotedLimit { return text }
        let scalars = text.unicodeScalars
        guard let end = scalars.index(scalars.startIndex, offsetBy: quotedLimit, limitedBy: scalars.endIndex) else {
            return text
        }
        return String(scalars[..<end])
    }

    /// The diagnostic message a daemon sends back and publishes.
    package func diagnostic(_ envelope: Envelope) -> DiagnosticMessage {
        DiagnosticMessage(envelope: envelope, reason: reason, message: detail, details: details)
    }
}
