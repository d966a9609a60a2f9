import Dispatch
import FlowBusProtocol
import FlowBusWire
import Logging
import Synchronization
import ZeroMQ

/// What a daemon does with what its ``DaemonLoop`` reads: flowd applies steps to its flows, a
/// reactor host actions to its reactors. The loop calls it on its own thread, one call at a time.
package protocol DaemonRole: AnyObject {
    /// At each turn's start: what the role's own sockets hold (flowd hears reactor hosts'
    /// heartbeats there, even while saturated).
    /// - Throws: to stop the daemon with that failure at once (a shared journal's lease was lost).
    func beginTurn(now: ContinuousClock.Instant) throws
    /// A batch of messages begins.
    func beginBatch()
    /// Applies a fresh message of the data endpoint, or refuses it with
    /// ``RouterEndpoint/refuse(_:_:message:)``.
    func apply(_ message: InboundMessage) -> DaemonApplied
    /// Answers a request of the query endpoint (or refuses it).
    func answer(_ request: InboundMessage)
    /// While true the loop reads no data messages (a step an asynchronous flow still holds, a
    /// reactor host's steps backed up); the role wakes the loop when it turns false, or sets
    /// ``suspendedRecheck``.
    var isSuspended: Bool { get }
    /// While suspended, how often the loop turns to see whether it still is, when the role
    /// cannot wake it; nil: it does.
    var suspendedRecheck: Duration? { get }
    /// Whether the role made something outside a batch that waits to be committed and published
    /// (a reactor's states from an asynchronous mutation).
    var hasOutput: Bool { get }
    /// Makes what was dealt with durable (a journal, a state database) and publishes what the
    /// role made. The loop holds everything published until it succeeds, then sends the acks.
    /// A commit left ``DaemonCommit/underWay`` ends with ``finishCommit(waiting:)``.
    func commit(_ batch: DaemonBatch) -> DaemonCommit
    /// How the commit left under way went, once it is done (nil: not yet); with `waiting`, waits
    /// until it is. The role wakes the loop when it is done.
    func finishCommit(waiting: Bool) -> Result<Void, any Error>?
    /// Once per heartbeat interval, before the loop's heartbeat goes out.
    /// - Throws: to stop the daemon with that failure (a shared journal's lease was lost).
    func tick(now: ContinuousClock.Instant) throws
    /// At each turn's end (a reactor host's steppers, metrics).
    func endTurn(now: ContinuousClock.Instant)
    /// Whether the last sequence dealt with of `source` is not durable yet: it stays in memory.
    func isUnsaved(_ source: String) -> Bool
    /// Work a graceful stop waits for (a reactor's mutations in flight).
    var hasWorkInFlight: Bool { get }
}

extension DaemonRole {
    // A role that commits on the loop's thread never leaves a commit under way.
    package func finishCommit(waiting: Bool) -> Result<Void, any Error>? { .success(()) }
}

/// The thread-safe handle of a ``DaemonLoop``: stop it, wake it, wait for it to finish.
package final class DaemonControl: Sendable {
    /// Where other threads leave work for the loop, and its wake-up.
    package let inbox: LoopInbox
    /// Signalled once the loop finished (stopped, or failed): its owner then closes it.
    package let finished = ReadinessSignal()
    private let accepting = Atomic<Bool>(true)
    private let graceful = Atomic<Bool>(false)
    private let failed = Mutex<(any Error)?>(nil)

    package init(inbox: LoopInbox = LoopInbox()) {
        self.inbox = inbox
    }

    /// Stops reading; the batch in progress is still applied, committed and acknowledged, then
    /// ``finished`` is signalled. A `graceful` stop first reads what is queued and waits for work in
    /// flight, up to ``DaemonLoop/Settings/drain``.
    package func stopAccepting(graceful: Bool = false) {
        if graceful { self.graceful.store(true, ordering: .releasing) }
        if accepting.exchange(false, ordering: .acquiringAndReleasing) { wake() }
    }

    /// Interrupts a waiting turn.
    package func wake() {
        inbox.wake.signal()
    }

    /// Whether the loop still reads its endpoints.
    package var isAccepting: Bool { accepting.load(ordering: .acquiring) }
    var isGraceful: Bool { graceful.load(ordering: .acquiring) }

    /// Why the loop stopped, if it failed.
    package var failure: (any Error)? { failed.withLock { $0 } }

    package func finish(failure: (any Error)?) {
        failed.withLock { $0 = failure }
        accepting.store(false, ordering: .releasing)
        finished.signal()
    }
}

/// What applying a message left to do.
package enum DaemonApplied: Sendable, Equatable {
    /// It is applied.
    case done
    /// An asynchronous flow holds it: the batch ends here, and data messages wait while
    /// ``DaemonRole/isSuspended``.
    case suspended
}

/// What a commit covers.
package struct DaemonBatch: Sendable {
    /// Messages read in the batch (dealt with here or applied).
    package var size: Int
    /// When its first message was read.
    package var startedAt: ContinuousClock.Instant?
    /// The highest sequence dealt with per source in the batch.
    package var dealtWith: [String: UInt64]
    /// Whether the batch ended at its size or held bytes limit, not because nothing more was
    /// queued: the next one is there to apply while this one commits.
    package var endedAtLimit = false
}

/// How a commit went.
package enum DaemonCommit {
    /// Durable: what was held is published and the acks go out.
    case committed
    /// Not durable, and the daemon must stop: what was held is dropped and nothing acknowledged
    /// (flowd, whose engine is ahead of its journal).
    case stop(any Error)
    /// Not durable yet: nothing is published or acknowledged and no data message is read until
    /// a commit succeeds, tried again after `retryAfter` (a reactor host's state database).
    case retry(after: Duration)
    /// Going on off the loop's thread (flowd's journal): the loop reads and applies the next
    /// batch meanwhile, holding what it publishes apart, and ends this commit
    /// (``DaemonRole/finishCommit(waiting:)``) before it commits again, ticks or stops. Only then
    /// is what this batch published released and its acks sent.
    case underWay
}

/// The loop every FlowBus daemon runs: poll, wake, read a batch, apply it, commit, publish, acknowledge,
/// heartbeat, stop and drain — carried out once, for flowd and reactor hosts alike.
///
/// Each turn (``turn(mayWait:)``) polls the endpoints, takes what other threads left in the
/// ``LoopInbox`` (ZAP refusals, the durable ledger's answers), answers a bounded number of
/// queries, reads up to ``Settings/maxBatchSize`` data messages and hands the fresh ones to the
/// ``DaemonRole``, then ends the batch: the intake's refusals and heartbeat answers go out, the
/// role commits, and only then is what the batch published released and the acks sent
/// (hold/release: an acknowledged message is durable, and no observer sees an event a crash could
/// undo). The sources a batch must look up in the durable ledger are read once per batch, off the
/// loop's thread, and their held messages judged when the answer is in. Once per heartbeat
/// interval the loop publishes its heartbeat, reports drops and forgets idle sources.
///
/// The loop is driven: flowd's ``FlowLoop`` gives it turns on the engine's thread, a reactor host
/// runs it on a thread of its own (``DaemonThread``), a test turns it by hand with time passed in
/// (``EmbeddedDaemon``). It is used by that one thread; ``stopAccepting(graceful:)`` and ``wake()``
/// may be called from any.
package final class DaemonLoop {
    package struct Settings: Sendable {
        /// Heartbeats, liveness checks and the forgetting of idle sources, this often.
        package var heartbeat: Duration
        /// Data messages read before a batch is committed and acknowledged.
        package var maxBatchSize: Int
        /// While the previous batch's commit is still under way, a batch may grow past
        /// ``maxBatchSize`` up to this many (a group commit: the loop would only wait for that
        /// commit, and one larger commit costs less than two); ``maxHeldBytes`` still bounds it.
        package var maxGroupedBatchSize: Int
        /// A batch also ends once what it publishes holds this many bytes: a burst of events (a
        /// large tree built by a few steps) is committed and released in parts, not held whole.
        package var maxHeldBytes = 1 << 20
        /// Queries answered and read per turn, at most.
        package var maxQueriesAnswered = 16
        package var maxQueriesRead = 256
        /// On a graceful stop, how long queued data messages are still read and in-flight work
        /// awaited; zero: reading stops at once.
        package var drain: Duration = .zero
        /// On a stop, how long a step an asynchronous flow holds may still take.
        package var suspendedStopLimit: Duration = .seconds(10)
        /// Why subscribers miss messages, in the `dropped-hwm` report, and its extra details.
        package var dropReason = "a subscriber is too slow"
        package var dropDetails: WireParams = [:]
        /// Reads the durable ledger's last sequence of sources the intake does not hold.
        package var lookUp: (@Sendable ([String]) -> [LedgerAnswer])?
        /// Whether look-ups run on the loop's thread at the batch's end (deterministic tests)
        /// instead of on a queue of their own.
        package var looksUpInline = false

        package init(heartbeat: Duration, maxBatchSize: Int) {
            self.heartbeat = heartbeat
            self.maxBatchSize = max(1, maxBatchSize)
            maxGroupedBatchSize = self.maxBatchSize
        }
    }

    package let data: RouterEndpoint
    package let query: QueryEndpoint?
    package let publisher: BusPublisher
    package let control: DaemonControl
    package let settings: Settings
    private let role: any DaemonRole
    private let logger: Logger
    private let clock: () -> ContinuousClock.Instant
    private let lookUpQueue = DispatchQueue(label: "flowbus.ledger-look-up")
    package private(set) var isFinished = false
    private var inbox: LoopInbox { control.inbox }

    private var poller: Poller?
    private var wakeIndex = -1
    private var batchSize = 0
    private var batchEndedAtLimit = false
    private var batchStartedAt: ContinuousClock.Instant?
    private var nextTick: ContinuousClock.Instant
    /// A commit that failed and is tried again: the acks it owes, and when.
    private var retry: (acks: [Intake.Ack], at: ContinuousClock.Instant)?
    /// The acks a commit under way owes (``DaemonCommit/underWay``).
    private var committing: [Intake.Ack]?
    /// A graceful stop's end, and whether the data endpoint was read empty since it began.
    private var drainDeadline: ContinuousClock.Instant?
    private var drainedQueue = false

    /// A loop over `data` (and `query`), publishing on `publisher`.
    /// - Parameters:
    ///   - sockets: Sockets of the role's own to poll too (flowd's subscriptions to reactor hosts).
    ///   - clock: Now; a test passes its own (``EmbeddedDaemon``).
    package init(
        data: RouterEndpoint, query: QueryEndpoint? = nil, publisher: BusPublisher, control: DaemonControl,
        role: any DaemonRole, sockets: [Socket] = [], settings: Settings, logger: Logger,
        clock: @escaping () -> ContinuousClock.Instant = { .now }
    ) throws(ZMQError) {
        self.data = data
        self.query = query
        self.publisher = publisher
        self.control = control
        self.role = role
        self.settings = settings
        self.logger = logger
        self.clock = clock
        nextTick = clock()
        let sockets =
            [data.replier.transport.pollable, query?.replier.transport.pollable, publisher.transport.pollable]
            .compactMap { $0 } + sockets
        guard !sockets.isEmpty else { return }
        let poller = Poller()
        for socket in sockets { _ = try poller.add(socket) }
        wakeIndex = poller.add(fileDescriptor: inbox.wake.fileDescriptor)
        self.poller = poller
    }

    /// Closes the ROUTER endpoints, letting what they still queue leave within `linger` milliseconds.
    package func closeEndpoints(linger: Int32) {
        data.replier.transport.close(linger: linger)
        query?.replier.transport.close(linger: linger)
    }

    /// Closes the endpoints and the publisher, letting what they still queue leave within `linger`
    /// milliseconds.
    package func close(linger: Int32) {
        closeEndpoints(linger: linger)
        publisher.close(linger: linger)
    }

    // MARK: A turn

    /// Reads and handles what is ready. With `mayWait`, first waits until something is, ``wake()``
    /// is called, or the next heartbeat is due.
    package func turn(mayWait: Bool) {
        if isFinished {
            if mayWait, let poller, (try? poller.poll(timeout: 1000)) != nil, poller.isReadable(wakeIndex) {
                inbox.wake.clear()
            }
            return
        }
        let isAccepting = control.isAccepting
        if !isAccepting, drainDeadline == nil {
            drainDeadline = clock() + (control.isGraceful ? settings.drain : .zero)
        }
        let draining = drainDeadline.map { clock() < $0 } ?? false
        let readsData = (isAccepting || (draining && !drainedQueue)) && !role.isSuspended && retry == nil
        do {
            try wait(mayWait: mayWait, readsData: readsData, readsQueries: isAccepting, draining: draining)
        } catch {
            stop(after: error, doing: "poll")
            return
        }
        let now = clock()
        // A commit that finished meanwhile releases its batch before anything else goes out.
        _ = finishCommit(waiting: false)
        if isFinished { return }
        // XPUB hands subscriptions to its owner: reading them attaches new subscribers.
        publisher.drainSubscriptions()
        let (refusals, answers) = inbox.take()
        for refusal in refusals { data.replier.refuse(refusal, to: nil) }
        if !answers.isEmpty { data.lookedUp(answers) }
        do {
            try role.beginTurn(now: now)
        } catch {
            stop(failure: error)
            return
        }
        if retry == nil { publisher.hold() }
        do {
            if isAccepting, let query {
                try query.read(
                    now: now, maxAnswered: settings.maxQueriesAnswered, maxRead: settings.maxQueriesRead,
                    answer: { role.answer($0) })
                query.reportRateLimited(now: now)
            }
            if readsData { try readBatch(now: now) }
        } catch {
            stop(after: error, doing: "receive")
            return
        }
        endBatch(now: now, readData: readsData)
        // A failed commit stopped the loop: nothing more may be published.
        if isFinished { return }
        if now >= nextTick {
            nextTick = now + settings.heartbeat
            // What the role checks and the heartbeat says are of committed batches only.
            _ = finishCommit(waiting: true)
            if isFinished { return }
            do {
                try role.tick(now: now)
            } catch {
                stop(failure: error)
                return
            }
            heartbeat(now: now)
        }
        role.endTurn(now: now)
        guard !isAccepting, batchSize == 0 else { return }
        // Nothing stops before the commit under way is done and its acks are sent.
        _ = finishCommit(waiting: true)
        if isFinished { return }
        if role.isSuspended {
            // A step an asynchronous flow holds is committed and acknowledged already (replayed from
            // the journal at the next start), and a reactor host's steps are kept or were never
            // durable: a flow that never finishes, or a flowd that never answers, does not keep the
            // daemon up.
            guard let drainDeadline, now >= drainDeadline + settings.suspendedStopLimit else { return }
            logger.warning(
                "stopping while still suspended (a flow holds a step, or a reactor's steps wait for flowd), after \(settings.suspendedStopLimit)"
            )
            stop(failure: nil)
            return
        }
        // A graceful stop reads what is queued, then waits for the work in flight, up to its deadline.
        if draining, !drainedQueue || role.hasWorkInFlight { return }
        if role.hasWorkInFlight {
            logger.warning("stopping with work in flight after \(settings.drain): the rest of that work is lost")
        }
        stop(failure: nil)
    }

    /// Commits what the role made since the last turn (work that finished as it shut down) and
    /// sends the acks it owes, after the loop finished.
    package func flush() {
        guard control.failure == nil else { return }
        if retry == nil { publisher.hold() }
        endBatch(now: clock(), readData: false, retryNow: true)
        // Nothing turns the loop after this: a commit left under way ends here.
        _ = finishCommit(waiting: true)
        // A commit still failing publishes nothing of what it held.
        if retry != nil { publisher.discardHeld() }
    }

    /// Turns until the loop finished (a daemon's own thread).
    package func runUntilFinished() {
        while !isFinished { turn(mayWait: true) }
    }

    private func wait(mayWait: Bool, readsData: Bool, readsQueries: Bool, draining: Bool) throws(ZMQError) {
        guard let poller else { return }
        var index = 0
        if data.replier.transport.pollable != nil {
            poller.setEvents(readsData ? .readable : [], at: index)
            index += 1
        }
        if query?.replier.transport.pollable != nil {
            poller.setEvents(readsQueries ? .readable : [], at: index)
            index += 1
        }
        var milliseconds = 0
        if mayWait {
            var until = nextTick
            if let retry { until = min(until, retry.at) }
            milliseconds = max(0, clock().duration(to: until).wholeMilliseconds)
            // While draining, in-flight work reports through the inbox; look again soon regardless.
            if draining { milliseconds = min(milliseconds, 20) }
            if role.isSuspended, let recheck = role.suspendedRecheck {
                milliseconds = min(milliseconds, recheck.wholeMilliseconds)
            }
        }
        try poller.poll(timeout: milliseconds)
        if poller.isReadable(wakeIndex) { inbox.wake.clear() }
    }

    private func readBatch(now: ContinuousClock.Instant) throws(ZMQError) {
        while batchMayGrow() {
            let read = try data.read()
            if case .none = read {
                if drainDeadline != nil { drainedQueue = true }
                return
            }
            if batchSize == 0 {
                batchStartedAt = now
                // A subscriber that saw a heartbeat is known before anything that follows it.
                publisher.drainSubscriptions()
                role.beginBatch()
            }
            batchSize += 1
            guard case .fresh(let message) = read else { continue }
            if role.apply(message) == .suspended { return }
        }
        batchEndedAtLimit = true
    }

    /// Whether the batch may take another message: below its size and held-bytes limits, or past
    /// the size limit up to ``Settings/maxGroupedBatchSize`` while the previous commit is still
    /// under way (one that finished meanwhile releases its batch here).
    private func batchMayGrow() -> Bool {
        guard publisher.heldByteCount < settings.maxHeldBytes else { return false }
        if batchSize < settings.maxBatchSize { return true }
        guard committing != nil, batchSize < settings.maxGroupedBatchSize else { return false }
        return !finishCommit(waiting: false) && !isFinished
    }

    /// Ends the batch: the intake's replies, then the commit, then what was held and the acks.
    /// - Parameters:
    ///   - readData: Whether the turn read the data endpoint: peers are judged dead only then.
    ///   - retryNow: Try a failed commit again even before it is due (a final flush).
    private func endBatch(now: ContinuousClock.Instant, readData: Bool, retryNow: Bool = false) {
        let end = data.endBatch(now: now, checkEvery: settings.heartbeat, checksLiveness: readData)
        if !end.lookUps.isEmpty { lookUp(end.lookUps) }
        var acks = end.acks
        if let retry {
            // No data is read while a commit is held back: nothing new waits but these acks.
            guard now >= retry.at || retryNow else {
                self.retry?.acks += acks
                return
            }
            acks = retry.acks + acks
        }
        let hasWork = batchSize > 0 || !acks.isEmpty || role.hasOutput || retry != nil || publisher.hasHeldEvents
        // The commit under way ends before another begins or anything else is released; with
        // nothing to commit, the loop does not wait for it.
        guard finishCommit(waiting: hasWork) else { return }
        guard hasWork else {
            publisher.releaseHeld()
            return
        }
        let batch = DaemonBatch(
            size: batchSize, startedAt: batchStartedAt, dealtWith: end.dealtWith, endedAtLimit: batchEndedAtLimit)
        batchSize = 0
        batchEndedAtLimit = false
        batchStartedAt = nil
        switch role.commit(batch) {
        case .committed:
            retry = nil
            publisher.releaseHeld()
            data.acknowledge(acks)
        case .stop(let error):
            publisher.discardHeld()
            stop(failure: error)
        case .retry(let after):
            // Held back, and no new data read, until a commit succeeds.
            retry = (acks, now + after)
        case .underWay:
            retry = nil
            publisher.sealHeld()
            committing = acks
        }
    }

    /// Ends the commit under way, if any: once it is done, what its batch published is released
    /// and its acks sent; if it failed, the loop stops.
    /// - Returns: whether the loop may go on past it: false while it is still under way (only
    ///   without `waiting`), or when it failed.
    private func finishCommit(waiting: Bool) -> Bool {
        guard let acks = committing else { return true }
        guard let outcome = role.finishCommit(waiting: waiting) else { return false }
        committing = nil
        switch outcome {
        case .success:
            publisher.releaseSealed()
            data.acknowledge(acks)
        case .failure(let error):
            publisher.discardHeld()
            stop(failure: error)
            return false
        }
        return true
    }

    private func heartbeat(now: ContinuousClock.Instant) {
        publisher.drainSubscriptions()
        // Past a failed commit's hold: subscribers and flowd must still hear the daemon is alive.
        publisher.pastHold {
            publisher.reportDrops(why: settings.dropReason, details: settings.dropDetails)
            publisher.publish(Heartbeat(envelope: publisher.envelope(.heartbeat, carriesValues: false)))
        }
        publisher.drainSubscriptions()
        // Once what was dealt with is durable: a source whose entry is not saved yet stays.
        data.forgetSources(now: now, keeping: role.isUnsaved)
    }

    /// Reads the durable ledger for `sources`, off this thread unless told otherwise; the answers
    /// come back through the inbox.
    private func lookUp(_ sources: [String]) {
        guard let lookUp = settings.lookUp else {
            inbox.deliver(sources.map { LedgerAnswer(source: $0, last: .success(nil)) })
            return
        }
        if settings.looksUpInline {
            inbox.deliver(lookUp(sources))
            return
        }
        let inbox = self.inbox
        lookUpQueue.async { inbox.deliver(lookUp(sources)) }
    }

    // MARK: Stopping

    /// A terminated context is a normal stop; any other socket error fails the daemon.
    private func stop(after error: ZMQError, doing operation: String) {
        if error.isContextTerminated {
            stop(failure: nil)
        } else {
            logger.error("\(operation) failed: \(error)")
            stop(failure: error)
        }
    }

    private func stop(failure: (any Error)?) {
        guard !isFinished else { return }
        isFinished = true
        if let poller {
            for index in 0..<wakeIndex { poller.setEvents([], at: index) }
        }
        control.finish(failure: failure)
    }
}
