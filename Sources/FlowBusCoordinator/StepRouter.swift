import FlowBusClient
import FlowBusConfiguration
import FlowBusDaemon
import FlowBusProtocol
import FlowBusTracing
import FlowBusWire
import Flows
import Foundation
import Logging
import ZeroMQ

/// Routes what flowd's ingress reads to the ``FlowCoordinator``: steps to the flow their stepper
/// is bound to, deep links to every active flow, renderers' reports to their presentable.
///
/// It runs on the loop's thread, synchronously, message by message (the ``CoordinatorRole``
/// hands it each fresh message). What the engine emits goes out through the
/// ``NavigationEventPublisher``, held by the loop until the batch is committed; with a journal, the
/// ``CoordinatorJournal`` records each message and commits the batch in one transaction, and only
/// then does the loop acknowledge: an acknowledged step is on disk, and no observer sees an event
/// of a step a crash could undo.
@FlowActor
package final class StepRouter {
    private var engine: FlowCoordinator
    /// What the engine emits, on flowd's `events` endpoint.
    let events: NavigationEventPublisher
    /// The journal's side, when flowd keeps one.
    let journal: CoordinatorJournal?
    private let logger: Logger
    private let started = Date()
    /// flowd's swift-metrics, fed once per batch (see ``CoordinatorMetrics``).
    private let metrics = CoordinatorMetrics()
    /// The Prometheus text status replies carry, and where it is served.
    private var exposition: MetricsExposition?
    private var metricsAddress: String?
    /// The spans of the batch's traced messages, ended once it is committed.
    private var tracedSpans = StepSpanBatch()
    /// The newest events, for replays (PROTOCOL.md §4.6); nil when none are kept.
    private var eventLog: EventLog?

    package init(
        context: Context, config: FlowBusConfig, sourceID: String, journal: (any Journal)?, logger: Logger
    ) throws {
        let publisher = try BusPublisher(
            context: context, name: "events", endpoint: config.endpoints.events, limits: config.limits,
            curve: config.curve, sourceID: sourceID, contentType: config.wire.publish, logger: logger)
        events = NavigationEventPublisher(publisher: publisher, metrics: metrics, logger: logger)
        self.journal = journal.map {
            CoordinatorJournal(journal: $0, policy: config.persistence?.checkpoint ?? .init(), logger: logger)
        }
        self.logger = logger
        if config.replay.isOn {
            eventLog = EventLog(
                retainCount: config.replay.retain,
                retainSeconds: config.replay.retainSeconds > 0 ? config.replay.retainSeconds : nil)
            publisher.numberEvents(after: 0)
        }
        engine = FlowCoordinator()
        install(engine)
    }

    /// flowd's `events` endpoint: the loop publishes its heartbeats and refusals there too.
    var publisher: BusPublisher { events.publisher }

    /// Binds the events endpoint (a standby does once it holds the lease).
    package func bindEvents() throws {
        try publisher.bind()
    }

    /// Closes the events socket, letting what it still queues leave within `linger` milliseconds,
    /// and lets a checkpoint being written finish.
    package func close(linger: Int32 = 200) {
        publisher.close(linger: linger)
        journal?.close()
    }

    /// The process's Prometheus text, for status replies, and the address serving it.
    package func exportMetrics(_ exposition: MetricsExposition?, servedAt address: String?) {
        self.exposition = exposition
        metricsAddress = address
    }

    /// Makes `engine` the one steps are applied to (a checkpoint restored into a new one).
    func install(_ engine: FlowCoordinator) {
        self.engine.onEvent = nil
        self.engine = engine
        engine.onEvent = { [events] event in events.publish(event) }
    }

    // MARK: Starting

    /// Starts the root flow, or restores the journal (its newest checkpoint and the entries after
    /// it), without publishing what the journal replays.
    /// - Parameter makeFlow: builds a flow by name, to restore a checkpoint; nil when the flows
    ///   are Swift code (no checkpoint is then written).
    /// - Parameter following: a standby's start: it then follows the journal with
    ///   ``catchUp(makeFlow:)``, publishing nothing until ``stopFollowing(makeFlow:)``.
    package func start(
        _ root: CoordinatorService.RootFactory, makeFlow: CoordinatorService.FlowFactory?, following: Bool = false
    ) async throws {
        guard let journal else {
            await startRoot(root)
            return
        }
        // Numbered before the root flow starts: its first events go on from the journal's.
        try continueEvents()
        try await journal.start(self, root: root, makeFlow: makeFlow, following: following)
    }

    /// Numbers events after the newest one the journal keeps: a restarted or another instance
    /// goes on with the same sequence.
    private func continueEvents() throws {
        guard eventLog != nil, let journal else { return }
        let head = try journal.journal.eventRange()?.upperBound ?? 0
        eventLog?.restart(after: head)
        publisher.numberEvents(after: head)
    }

    /// A standby applies what the active instance journaled since the last call.
    package func catchUp(makeFlow: CoordinatorService.FlowFactory?) async throws {
        try await journal?.catchUp(into: self, makeFlow: makeFlow)
    }

    /// The standby took the lease: it applies the last entries and publishes from now on.
    package func stopFollowing(makeFlow: CoordinatorService.FlowFactory?) async throws {
        try await journal?.stopFollowing(into: self, makeFlow: makeFlow)
        try continueEvents()
    }

    func startRoot(_ root: CoordinatorService.RootFactory) async {
        if let (flow, stepper) = root() {
            await engine.coordinate(flow: flow, with: stepper)
        } else {
            logger.warning("no root flow: name one under 'coordinator: { flow: NAME, step: FIRST_STEP }' in the config")
        }
    }

    /// Applies a journal entry as it was first applied: the synchronous path where flows allow it.
    func replay(_ input: Input, _ step: CanonicalStep) async {
        let progress =
            switch input {
            case .step(let stepperID): engine.receiveNow(step, from: stepperID)
            case .deepLink: engine.navigateNow(to: step)
            }
        if case .pending(let pending) = progress { _ = await pending.outcomes() }
    }

    func replayReport(_ event: PresentableEvent, for presentableID: String) {
        engine.report(RendererReport(event), for: presentableID)
    }

    // MARK: Applying

    /// What an ingress message asks the engine to do.
    package enum Input {
        case step(stepperID: String)
        case deepLink
    }

    /// A step or deep link an asynchronous flow is still processing.
    package struct Unfinished {
        package var progress: StepProgress.Pending
        package var input: Input
    }

    /// Applies a step from a stepper or a deep link.
    /// - Parameter trace: the message's trace frame, which its spans continue (or, when flowd does
    ///   not trace, which its events carry on).
    /// - Returns: nil once it is processed; what to ``finish(_:)`` when a flow's asynchronous
    ///   `adapt` took it over (nothing else may be applied before).
    package func apply(
        _ input: Input, _ step: CanonicalStep, frames: FrameBuffer, params: WirePayload, origin: Origin, topic: String,
        envelope: Envelope, trace: TraceContext? = nil
    ) -> Unfinished? {
        var spans: StepSpans?
        if BusTracing.traces(trace) {
            let stepper: String?
            if case .step(let id) = input { stepper = id } else { stepper = nil }
            spans = StepSpans(
                kind: stepper == nil ? .deepLink : .step, topic: topic, envelope: envelope, step: step.name,
                stepper: stepper, remote: trace)
        }
        // Made in place: a copy kept here would cost a retain and a release per field.
        events.applying = MessageBeingApplied(
            origin: origin, topic: topic, step: step, params: params, trace: spans.map { $0.eventsContext } ?? trace,
            spans: spans)
        publisher.publish(frames: frames)
        let progress: StepProgress
        switch input {
        case .step(let stepperID):
            journal?.record(.step, target: stepperID, name: step.name, params: params, origin: origin)
            progress = engine.receiveNow(step, from: stepperID)
        case .deepLink:
            journal?.record(.deepLink, target: "", name: step.name, params: params, origin: origin)
            progress = engine.navigateNow(to: step)
        }
        switch progress {
        case .done(let outcomes):
            count(outcomes, of: input)
            if let spans { tracedSpans.add(spans) }
            events.applying = nil
            return nil
        case .pending(let pending):
            return Unfinished(progress: pending, input: input)
        }
    }

    /// Waits until `unfinished` and what it caused are processed.
    package func finish(_ unfinished: Unfinished) async {
        count(await unfinished.progress.outcomes(), of: unfinished.input)
        if let spans = events.applying?.spans { tracedSpans.add(spans) }
        events.applying = nil
    }

    /// Applies a renderer's report.
    package func applyReport(_ event: PresentableEvent, for presentableID: String, origin: Origin, topic: String) {
        journal?.record(.report, target: presentableID, name: event.rawValue, params: nil, origin: origin)
        metrics.report()
        events.applying = MessageBeingApplied(origin: origin, topic: topic)
        engine.report(RendererReport(event), for: presentableID)
        events.applying = nil
    }

    private func count(_ outcomes: [StepOutcome], of input: Input) {
        if case .deepLink = input { metrics.deepLink(outcomes) } else { metrics.step(outcomes) }
    }

    // MARK: Batches and ticks

    /// Commits the batch's journal records with the sources' last sequences. Throws if the
    /// journal cannot be written: flowd then stops rather than acknowledge what it could not persist.
    /// - Parameter wake: Given, the commit may go on off the loop's thread (not when a checkpoint
    ///   is due): `wake` is called once it is done, and ``finishCommitBatch(waiting:ingress:)`` ends it.
    /// - Returns: whether the commit goes on off the loop's thread.
    package func commitBatch(
        size: Int, receivedAt: ContinuousClock.Instant?, dealtWith: [String: UInt64],
        ingress: @autoclosure () -> IngressCounters, wake: (@Sendable () -> Void)? = nil
    ) throws -> Bool {
        precondition(commitUnderWay == nil, "a commit is under way")
        let events = heldEvents()
        if let wake, let journal, journal.mayCommitAside {
            let spans = tracedSpans.beginCommit(journaled: true, size: size)
            journal.beginCommit(dealtWith: dealtWith, events: events, wake: wake)
            commitUnderWay = CommitUnderWay(size: size, receivedAt: receivedAt, events: events, spans: spans)
            return true
        }
        let commitTime = try tracedSpans.commit(journaled: journal != nil, size: size) {
            try journal?.commit(dealtWith: dealtWith, events: events)
        }
        if let events { eventLog?.append(events.batch.events, first: events.batch.first, now: events.batch.created) }
        metrics.batchDone(size: size, receivedAt: receivedAt, journal: commitTime)
        syncMetrics(ingress: ingress())
        journal?.checkpointIfDue(of: engine)
        return false
    }

    /// A batch whose commit goes on off the loop's thread: what follows once it is durable.
    private struct CommitUnderWay {
        var size: Int
        var receivedAt: ContinuousClock.Instant?
        var events: JournalEvents?
        var spans: CommitSpans?
    }

    private var commitUnderWay: CommitUnderWay?

    /// Ends the commit ``commitBatch(size:receivedAt:dealtWith:ingress:wake:)`` left under way once
    /// it is done (nil: not yet); with `waiting`, waits for it.
    /// - Returns: the journal's error if it failed: flowd then stops without acknowledging.
    /// - Parameter ingress: Read only once the commit is done (the loop asks often while it is not).
    package func finishCommitBatch(
        waiting: Bool, ingress: @autoclosure () -> IngressCounters
    ) -> Result<Void, any Error>? {
        guard let underWay = commitUnderWay, let journal else { return .success(()) }
        guard let outcome = journal.finishCommit(waiting: waiting) else { return nil }
        commitUnderWay = nil
        switch outcome {
        case .success(let took):
            underWay.spans?.end(error: nil)
            if let events = underWay.events {
                eventLog?.append(events.batch.events, first: events.batch.first, now: events.batch.created)
            }
            metrics.batchDone(size: underWay.size, receivedAt: underWay.receivedAt, journal: took)
            syncMetrics(ingress: ingress())
            return .success(())
        case .failure(let error):
            underWay.spans?.end(error: error)
            return .failure(error)
        }
    }

    /// Once per heartbeat interval, before the loop's heartbeat: the lease, the metrics and the
    /// checkpoints. Throws when a shared journal's lease is lost: this instance must stop.
    /// Throws at once if a shared journal's lease is known lost (no statement is run).
    func checkLease() throws {
        try journal?.checkLease()
    }

    func tick(ingress: IngressCounters) throws {
        try journal?.verifyLease()
        trimEvents()
        syncMetrics(ingress: ingress)
        journal?.checkpointIfDue(of: engine)
        journal?.compactWhileIdle()
    }

    // MARK: Events kept

    /// The events the batch published, to commit with it.
    private func heldEvents() -> JournalEvents? {
        guard let eventLog, publisher.hasHeldEvents else { return nil }
        var packed = PackedEvents()
        let first = publisher.heldEvents(into: &packed)
        let last = first + UInt64(packed.count) - 1
        let keep = UInt64(eventLog.retainCount)
        return JournalEvents(
            batch: EventBatch(first: first, last: last, created: Date().timeIntervalSince1970, events: packed),
            keepFrom: last >= keep ? last - keep + 1 : 0)
    }

    /// Lets go of the events older than the retention's age.
    private func trimEvents() {
        guard let seconds = eventLog?.retainSeconds else { return }
        let now = Date().timeIntervalSince1970
        eventLog?.trim(now: now)
        do {
            _ = try journal?.journal.trimEvents(committedBefore: now - seconds)
        } catch {
            logger.error("cannot delete the events past replay.retainSeconds from the journal: \(error)")
        }
    }

    /// What a replay request gets (PROTOCOL.md §4.6): the kept events after its `since` it asks
    /// for, from memory or, for older ones, from the journal.
    package enum ReplayAnswer {
        case events(EventReplay, head: UInt64, oldest: UInt64)
        /// Asked for events no longer kept (or never numbered): the requester takes a snapshot.
        case gone(String, oldest: UInt64, head: UInt64)
        /// The events asked for are kept in the journal, which could not be read: the requester
        /// falls back as for `gone` (a `persistence-failed` diagnostic).
        case unreadable(String, oldest: UInt64, head: UInt64)

        static func noLongerKept(_ since: UInt64, oldest: UInt64, head: UInt64) -> ReplayAnswer {
            .gone(
                "events after \(since) are no longer kept: the oldest is \(oldest) (replay.retain, replay.retainSeconds); take a status snapshot",
                oldest: oldest, head: head)
        }
    }

    package func replay(_ request: ReplayRequest) -> ReplayAnswer {
        guard let eventLog else {
            return .gone("flowd keeps no events (replay.retain is 0): take a status snapshot", oldest: 0, head: 0)
        }
        let head = eventLog.head
        let since = request.since
        if since > head {
            return .gone(
                "event \(since) is past the newest, \(head): this flowd did not publish it (a journal started anew); take a status snapshot",
                oldest: eventLog.oldest ?? head + 1, head: head)
        }
        var replay = EventReplay(request)
        var oldest = eventLog.oldest ?? head + 1
        // From 0 every event kept is asked for; a request with `until` names events that must all be.
        let isGone = { (oldest: UInt64) in since + 1 < oldest && (since > 0 || request.until != nil) }
        var journalError: (any Error)?
        do {
            if let journal, !eventLog.holdsEverything(after: since) {
                oldest = try journal.journal.eventRange()?.lowerBound ?? oldest
                if isGone(oldest) { return .noLongerKept(since, oldest: oldest, head: head) }
                replay.passOver(through: oldest - 1)
                // Older events from the journal, until those memory holds.
                while !replay.isFull, !eventLog.holdsEverything(after: replay.last) {
                    let batches = try journal.journal.eventBatches(after: replay.last, limit: 64)
                    guard !batches.isEmpty else { break }
                    for batch in batches where !replay.isFull { replay.take(batch.events) }
                }
            } else if isGone(oldest) {
                return .noLongerKept(since, oldest: oldest, head: head)
            } else {
                replay.passOver(through: oldest - 1)
            }
        } catch {
            journalError = error
            logger.error("cannot read kept events from the journal: \(error)")
        }
        // Memory's events, from where the journal's ended: a reply stops at an event that does
        // not follow the last it took (one the journal could not give, or deleted meanwhile).
        for batch in eventLog.batches(after: replay.last) where !replay.isFull { replay.take(batch.events) }
        if replay.last == since, replay.gap != nil || journalError != nil {
            if let journalError {
                return .unreadable(
                    "the events after \(since) are kept in the journal, which cannot be read (\(journalError)); take a status snapshot",
                    oldest: oldest, head: head)
            }
            return .noLongerKept(since, oldest: replay.gap ?? oldest, head: head)
        }
        return .events(replay, head: head, oldest: min(oldest, head + 1))
    }

    /// Hands the counts since the last call to swift-metrics.
    private func syncMetrics(ingress: IngressCounters) {
        let events = publisher.counters
        metrics.flush(
            ingress: ingress,
            events: .init(published: events.published, dropped: events.dropped, unwanted: events.unwanted))
    }

    // MARK: Status

    /// The live tree, bindings and counters, as the status query returns them.
    package func status(
        ingress counters: IngressCounters, peers: [String: Intake.Liveness], control: WireValue = .null,
        query: StatusQuery = StatusQuery()
    ) -> WireParams {
        syncMetrics(ingress: counters)
        var status = CoordinatorStatus(
            snapshot: engine.snapshot(
                limit: CoordinatorStatus.listLimit, flows: query.window(of: "flows", query.flows),
                bindings: query.window(of: "bindings", query.bindings),
                steppers: query.window(of: "steppers", query.steppers)),
            started: started, counters: counters,
            peers: peers, events: publisher.counters, control: control,
            metrics: metrics.status(endpoint: metricsAddress, exposition: exposition), journal: journal?.status ?? .null
        )
        if let eventLog {
            status.eventStream = [
                "head": .int(Int64(clamping: eventLog.head)),
                "kept_in_memory": .int(Int64(eventLog.count)),
                "oldest_in_memory": eventLog.oldest.map { .int(Int64(clamping: $0)) } ?? .null,
            ]
        }
        return status.reply(to: query)
    }
}

extension RendererReport {
    package init(_ event: PresentableEvent) {
        switch event {
        case .appeared: self = .appeared
        case .disappeared: self = .disappeared
        case .dismissed: self = .dismissed
        }
    }
}
