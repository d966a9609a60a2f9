import FlowBusWire

/// A subscriber's side of flowd's resumable events (PROTOCOL.md §4.6): every event once, in
/// order, from the position it names, then the live stream with no gap and no duplicate — the
/// Clone pattern over events.
///
/// A pure state machine; its owner has a SUB on `events` (subscribed to its topics and `hb/`) and
/// a DEALER on `control`, and carries out its answers. It starts waiting for a heartbeat (the
/// subscription is then active), asks for the events after its position, holds live messages
/// while replays come, and judges them once the replay reached the head: an event flowd numbered
/// (its envelope sequence, non-zero) is dropped if not past the position; a step or deep link
/// passed on (its sender's envelope) is dropped if a replay delivered it. It asks again from its
/// position when the events come from another flowd instance, or when its owner says the
/// publisher was silent or its subscription connected again. Events flowd reports dropped at its high-water mark (nobody received
/// them) are asked for by their sequences and delivered when they come, after later ones. An
/// answer `gone` (the events are no longer kept) moves it to the head: its owner takes a status
/// snapshot.
package struct EventResume: Sendable {
    package enum Phase: Sendable, Equatable {
        /// No heartbeat yet: the subscription may not be active.
        case awaitingHeartbeat
        /// A replay request is out; live messages are held.
        case replaying
        /// Caught up: live messages are judged as they come.
        case live
    }

    /// What to do with a live message.
    package enum Decision: Sendable, Equatable {
        case deliver
        /// A duplicate of what a replay delivered, or not past the position.
        case drop
        /// Keep it, in order, and judge it again with ``judgeHeld(kind:source:sequence:)`` once
        /// ``phase`` is `.live`.
        case hold
        /// Keep it as for `.hold`, and send a replay request from `since`.
        case holdAndRequest(since: UInt64)
    }

    /// A replay request to send: the events after `since`, up to `until` (events flowd dropped).
    package struct Request: Sendable, Equatable {
        package var since: UInt64
        package var until: UInt64?

        package init(since: UInt64, until: UInt64? = nil) {
            self.since = since
            self.until = until
        }
    }

    /// What a replay reply leads to.
    package struct ReplayOutcome: Sendable {
        /// The replayed events to deliver, in order.
        package var deliver: [(sequence: UInt64, frames: FrameBuffer)] = []
        /// Ask again from here (the reply said there is more), or nil: caught up, judge the held
        /// messages now.
        package var requestSince: UInt64?
        /// The next request for dropped events, if one is due.
        package var fill: Request?
        /// False for a late answer to a request that is no longer the one out (it was sent again
        /// at its timeout, and answered twice), or for a catch-up's reply while none is under way:
        /// it is ignored, and the request out still waits for its own answer.
        package var answered = true
    }

    /// A re-published message's identity: its sender's (source, sequence).
    private struct Passed: Hashable, Sendable {
        var source: String
        var sequence: UInt64
    }

    package private(set) var phase = Phase.awaitingHeartbeat
    /// The sequence of the last event delivered or passed over: a later resume asks from here.
    package private(set) var position: UInt64
    /// The flowd instance whose events are followed.
    package private(set) var source: String?
    /// Replays asked and answered `gone` (the owner fell back to a snapshot).
    package private(set) var replays = 0
    package private(set) var fallbacks = 0
    /// Steps and deep links the replays of this catch-up delivered, and those delivered live since
    /// the last numbered event: a later replay or a held copy of them is dropped.
    private var passedOn = Set<Passed>()
    private static let maxPassedOn = 100_000
    /// Dropped events still to ask for, and the range asked for now.
    private var fills: [ClosedRange<UInt64>] = []
    private var filling: ClosedRange<UInt64>?
    /// Numbered events replays delivered, so that a fill does not deliver them again.
    private var replayed = Set<UInt64>()
    /// Dropped events delivered by fills.
    package private(set) var filled = 0
    /// Reconnected while a replay request was out: its reply may predate the break.
    private var askAgain = false

    /// Starts after event `since` (0: every event kept); nil: from the event sequence of the first heartbeat (a subscriber
    /// that wants every event from the moment it joined, not before).
    package init(since: UInt64?) {
        position = since ?? 0
        startsAtFirstHeartbeat = since == nil
    }

    /// The position is the first heartbeat's (``init(since:)`` with nil).
    private var startsAtFirstHeartbeat: Bool

    /// A heartbeat from flowd instance `source`, carrying its last event `sequence`: caught up
    /// and following that instance, every event up to it that was asked for has arrived (flowd
    /// reports drops), so the position moves to it.
    /// - Returns: the `since` of a replay request to send, if one is due.
    package mutating func heartbeat(source: String, sequence: UInt64 = 0) -> UInt64? {
        switch phase {
        case .awaitingHeartbeat:
            self.source = source
            guard !startsAtFirstHeartbeat else {
                // Nothing before it is wanted: what it carries is the position, and held messages are judged.
                startsAtFirstHeartbeat = false
                position = sequence
                phase = .live
                return nil
            }
            return startReplay()
        case .replaying:
            // A request to the former instance may never be answered: ask the new one.
            if source != self.source {
                self.source = source
                return startReplay()
            }
            return nil
        case .live:
            guard source != self.source else {
                if sequence > position {
                    position = sequence
                    passedOn.removeAll(keepingCapacity: true)
                }
                return nil
            }
            self.source = source
            return startReplay()
        }
    }

    /// A live message: a step or deep link passed on (`passedOn`), or one flowd built (its
    /// envelope `sequence` is its event sequence, 0 for one outside the stream).
    package mutating func live(kind: MessageKind, source: String, sequence: UInt64) -> Decision {
        guard phase == .live else { return .hold }
        if sequence != 0, kind != .step, kind != .deepLink, let followed = self.source, followed != source {
            // Another instance: what the former had not sent is in its journal.
            self.source = source
            return .holdAndRequest(since: startReplay())
        }
        return judge(kind: kind, source: source, sequence: sequence)
    }

    /// Judges a message held during a replay, once caught up: as ``live(kind:source:sequence:)``,
    /// without a change of instance (the replay came from the newest).
    package mutating func judgeHeld(kind: MessageKind, source: String, sequence: UInt64) -> Decision {
        guard phase == .live else { return .hold }
        return judge(kind: kind, source: source, sequence: sequence)
    }

    private mutating func judge(kind: MessageKind, source: String, sequence: UInt64) -> Decision {
        if kind == .step || kind == .deepLink {
            let key = Passed(source: source, sequence: sequence)
            if passedOn.contains(key) { return .drop }
            remember(key)
            return .deliver
        }
        guard sequence != 0 else { return .deliver }
        guard sequence > position else { return .drop }
        position = sequence
        passedOn.removeAll(keepingCapacity: true)
        return .deliver
    }

    /// A replay reply.
    package mutating func replayed(_ reply: ReplayReply) -> ReplayOutcome {
        if let until = reply.until {
            guard answersFill(since: reply.since, until: until) else { return ReplayOutcome(answered: false) }
            return filled(reply)
        }
        // The position moves only with the replies of a catch-up: one from before it moved answers
        // a request already answered, and would end the catch-up the request out is for.
        guard phase == .replaying, reply.since == position else { return ReplayOutcome(answered: false) }
        var outcome = ReplayOutcome()
        for (sequence, frames) in reply.events.decoded() where sequence > position {
            position = sequence
            if replayed.count >= Self.maxPassedOn { replayed.removeAll(keepingCapacity: true) }
            // Delivered already by the reply to a request for dropped events.
            guard replayed.insert(sequence).inserted else { continue }
            if let header = try? RoutedHeader.decode(from: frames),
                header.kind == .step || header.kind == .deepLink
            {
                let key = Passed(source: header.envelope.source, sequence: header.envelope.sequence)
                // Delivered live after the position (its event sequence was not known then).
                guard !passedOn.contains(key) else { continue }
                remember(key)
            }
            outcome.deliver.append((sequence, frames))
        }
        // Events it passed over were not asked for: the position moves past them too.
        position = max(position, reply.last)
        if reply.more || askAgain {
            askAgain = false
            outcome.requestSince = position
        } else {
            phase = .live
        }
        return outcome
    }

    /// flowd reported events it dropped at its high-water mark (PROTOCOL.md §4.6): nobody
    /// received them, so they are asked for by their sequences. `complete` false: the report could
    /// not list them all, and some are missed (counted as a fallback).
    /// - Returns: the request to send, if none for dropped events is out.
    package mutating func dropped(_ ranges: [ClosedRange<UInt64>], complete: Bool) -> Request? {
        if !complete { fallbacks += 1 }
        fills += ranges
        fills.sort { $0.lowerBound < $1.lowerBound }
        return nextFill()
    }

    /// A reply to a request for dropped events: those it holds are delivered, late.
    private mutating func filled(_ reply: ReplayReply) -> ReplayOutcome {
        guard let span = filling else { return ReplayOutcome() }
        var outcome = ReplayOutcome()
        for (sequence, frames) in reply.events.decoded() where isDropped(sequence) {
            guard replayed.insert(sequence).inserted else { continue }
            filled += 1
            outcome.deliver.append((sequence, frames))
        }
        fills.removeAll { $0.upperBound <= reply.last }
        if reply.more, reply.last < span.upperBound {
            filling = (reply.last + 1)...span.upperBound
            outcome.fill = Request(since: reply.last, until: span.upperBound)
        } else {
            fills.removeAll { $0.upperBound <= span.upperBound }
            filling = nil
            outcome.fill = nextFill()
        }
        return outcome
    }

    /// Whether an answer naming `since` and `until` is the one to the request for dropped events
    /// out now. A request is sent again at its timeout, so one may be answered twice: the late
    /// answer must not stand for the next request's, whose events it does not hold.
    package func answersFill(since: UInt64, until: UInt64) -> Bool {
        guard let span = filling else { return false }
        return since == span.lowerBound - 1 && until == span.upperBound
    }

    /// A request for dropped events was answered `gone` (see ``answersFill(since:until:)``): they
    /// are missed.
    package mutating func fillGone() -> Request? {
        if let span = filling { fills.removeAll { $0.upperBound <= span.upperBound } }
        filling = nil
        fallbacks += 1
        return nextFill()
    }

    /// Whether the request out is for dropped events.
    package var isFilling: Bool { filling != nil }

    private func isDropped(_ sequence: UInt64) -> Bool {
        fills.contains { $0.contains(sequence) }
    }

    /// One request for the dropped events from the first still wanted, spanning up to
    /// ``maxFillSpan`` events: a report may name many short runs.
    private mutating func nextFill() -> Request? {
        guard filling == nil, let first = fills.first else { return nil }
        var end = first.upperBound
        for range in fills where range.upperBound <= first.lowerBound + Self.maxFillSpan {
            end = max(end, range.upperBound)
        }
        filling = first.lowerBound...end
        return Request(since: first.lowerBound - 1, until: end)
    }

    /// Events one request for dropped events spans, at most.
    private static let maxFillSpan: UInt64 = 50_000

    /// flowd answered `gone`: the events after the position are no longer kept. Goes on from the
    /// head; the owner takes a status snapshot.
    package mutating func gone(head: UInt64) {
        fallbacks += 1
        position = head
        passedOn.removeAll()
        askAgain = false
        phase = .live
    }

    /// The subscription connected to a publisher again (another instance, or the same one after
    /// a break): what was published meanwhile is missed, and the new connection's messages may
    /// come before that instance's heartbeat (a step passed on does not tell which instance sent
    /// it), so they are held until a replay from the position reached the head.
    /// - Returns: the `since` of a replay request to send, if one is due.
    package mutating func reconnected() -> UInt64? {
        switch phase {
        case .awaitingHeartbeat:
            return nil
        case .replaying:
            // The reply to the request out may have been read before the break.
            askAgain = true
            return nil
        case .live:
            return startReplay()
        }
    }

    /// flowd dropped messages at its high-water mark, or its owner's publisher was silent: some
    /// may be missed.
    /// - Returns: the `since` of a replay request to send, if one is due.
    package mutating func mayHaveMissed() -> UInt64? {
        phase == .live ? startReplay() : nil
    }

    /// The catch-up's request went unanswered for too long (sent to an instance that is gone).
    /// - Returns: the request to send again, if a catch-up is under way.
    package func catchUpTimedOut() -> Request? {
        phase == .replaying ? Request(since: position) : nil
    }

    /// The request for dropped events went unanswered for too long. It has a timer of its own:
    /// it may be out at the same time as the catch-up's, and either reply may come first.
    /// - Returns: the request to send again, if one is out.
    package func fillTimedOut() -> Request? {
        filling.map { Request(since: $0.lowerBound - 1, until: $0.upperBound) }
    }

    private mutating func startReplay() -> UInt64 {
        phase = .replaying
        replays += 1
        return position
    }

    private mutating func remember(_ key: Passed) {
        if passedOn.count >= Self.maxPassedOn { passedOn.removeAll(keepingCapacity: true) }
        passedOn.insert(key)
    }
}
