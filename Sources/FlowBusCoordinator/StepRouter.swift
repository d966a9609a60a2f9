import FlowBusClient
import FlowBusConfiguration
import FlowBusDaemon
import FlowBusProtocol
import FlowBusWire
import Flows
import Foundation
import Logging
import ZeroMQ

/// The coordinator's serial heart: applies what the ``CoordinatorLoop`` reads to the
/// ``FlowCoordinator`` and publishes every event, command and diagnostic it produces.
///
/// It runs on the loop's thread, synchronously, message by message. With a ``StepJournal``, a
/// batch's events are held until ``commitBatch(size:receivedAt:dealtWith:ingress:)`` wrote it in
/// one transaction; the loop acknowledges after that: an acknowledged step is on disk, and no
/// observer sees an event of a step a crash could undo.
@FlowActor
package final class StepRouter {
    private var coordinator: FlowCoordinator
    /// flowd's `events` endpoint: the loop publishes its heartbeats and refusals there too.
    let publisher: BusPublisher
    private let logger: Logger
    private let started = Date()
    private let journal: (any Journal)?
    /// False while the journal is replayed: the engine rebuilds its state silently.
    private var isPublishing = true
    /// A standby following the journal: it applies what the active instance journals, and
    /// publishes nothing.
    private var isFollowing = false
    /// The id of the last journal entry the engine applied while restoring or following.
    private var appliedEntry: Int64 = 0
    private var records: [StepJournal.Record] = []
    private var restoredEntries = 0
    private var journaledEntries = 0
    private let checkpointPolicy: FlowBusConfig.CheckpointPolicy
    private var checkpoints = CheckpointState()
    /// Set once a commit failed: flowd is stopping, and its engine is ahead of its journal.
    private var journalFailed = false
    private let checkpointWriter = CheckpointWriter()
    /// flowd's swift-metrics, fed once per batch (see ``CoordinatorMetrics``).
    private let metrics = CoordinatorMetrics()
    /// The Prometheus text status replies carry, and where it is served.
    private var exposition: MetricsExposition?
    private var metricsAddress: String?

    package init(
        context: Context, config: FlowBusConfig, sourceID: String, journal: (any Journal)?, logger: Logger
    ) throws {
        self.journal = journal
        publisher = try BusPublisher(
            context: context, name: "events", endpoint: config.endpoints.events, limits: config.limits,
            curve: config.curve,
            sourceID: sourceID, contentType: config.wire.publish, logger: logger)
        checkpointPolicy = config.persistence?.checkpoint ?? .init()
        self.logger = logger
        coordinator = FlowCoordinator()
        coordinator.onEvent = { [weak self] event in self?.publish(event) }
    }

    /// Binds the events endpoint (a standby does once it holds the lease).
    package func bindEvents() throws {
        try publisher.bind()
    }

    /// Closes the events socket, letting what it still queues leave within `linger` milliseconds,
    /// and lets a checkpoint being written finish.
    package func close(linger: Int32 = 200) {
        publisher.close(linger: linger)
        checkpointWriter.waitUntilIdle()
    }

    /// The process's Prometheus text, for status replies, and the address serving it.
    package func exportMetrics(_ exposition: MetricsExposition?, servedAt address: String?) {
        self.exposition = exposition
        metricsAddress = address
    }

    /// Hands the counts since the last call to swift-metrics.
    private func syncMetrics(ingress: IngressCounters) {
        let events = publisher.counters
        metrics.flush(
            ingress: ingress,
            events: .init(published: events.published, dropped: events.dropped, unwanted: events.unwanted))
    }

    /// Starts the root flow, or restores the journal's newest checkpoint, then replays the
    /// journal's entries after it: the tree, the bindings and the counters become what they were
    /// when the journal was last written, without publishing anything (the events were published
    /// when the steps first happened).
    /// - Parameter makeFlow: builds a flow by name, to restore a checkpoint; nil when the flows
    ///   are Swift code (no checkpoint is then written).
    /// - Parameter following: a standby's start: it then follows the journal with
    ///   ``catchUp(makeFlow:)``, publishing nothing until ``stopFollowing(makeFlow:)``.
    package func start(
        _ root: CoordinatorService.RootFactory, makeFlow: CoordinatorService.FlowFactory?, following: Bool = false
    ) async throws {
        isFollowing = following
        let clock = ContinuousClock()
        let began = clock.now
        var after: Int64 = 0
        var restored = false
        let stored = try journal?.latestCheckpoint()
        if let journal, let stored {
            do {
                try restore(stored, makeFlow: makeFlow)
                after = stored.entry
                restored = true
                checkpoints.stored(stored, bytes: stored.state.count)
                // Entries a crash left uncompacted go now.
                checkpoints.compactBelow =
                    StepJournal.Compaction(
                        checkpointOf: stored.entry, keepEntries: checkpointPolicy.keepEntries, limit: 0
                    ).below
            } catch {
                // Nothing is lost while the journal still has every entry: replay them all.
                guard try !journal.mayHaveCompacted() else {
                    throw JournalError.unrestorable(path: journal.location, cause: "\(error)")
                }
                logger.warning("the journal's checkpoint cannot be restored (\(error)); replaying every entry instead")
            }
        }
        if let journal, stored == nil, try journal.mayHaveCompacted() {
            let first = try journal.entryRange()?.lowerBound ?? 0
            throw JournalError.unrestorable(
                path: journal.location,
                cause: "it has no checkpoint, and its entries before \(first) were compacted away")
        }
        let pending = try journal?.count(after: after) ?? 0
        checkpoints.lastEntry = try journal?.entryRange()?.upperBound ?? 0
        checkpoints.sinceLast = pending
        isPublishing = !restored && pending == 0
        defer { isPublishing = true }
        if !restored {
            if let (flow, stepper) = root() {
                await coordinator.coordinate(flow: flow, with: stepper)
            } else {
                logger.warning(
                    "no root flow: name one under 'coordinator: { flow: NAME, step: FIRST_STEP }' in the config")
            }
        }
        appliedEntry = after
        guard let journal, restored || pending > 0 else { return }
        try await replayEntries(of: journal, makeFlow: makeFlow)
        let from =
            restored
            ? "its checkpoint of entry \(checkpoints.entry) and \(restoredEntries) entries after it"
            : "\(restoredEntries) entries"
        logger.info("restored the journal \(journal.location) from \(from) in \(began.duration(to: clock.now))")
    }

    /// Applies the journal's entries after ``appliedEntry``, silently. A standby checks after
    /// each page it read that the active instance did not compact entries it had not applied
    /// yet away meanwhile; if it did, the standby restores the newest checkpoint, which covers
    /// them, and goes on from there.
    private func replayEntries(of journal: any Journal, makeFlow: CoordinatorService.FlowFactory?) async throws {
        while true {
            let page = try journal.entries(after: appliedEntry, limit: 4096)
            if isFollowing, try compactedPastApplied(journal) {
                // Read again at the next call.
                guard let stored = try journal.latestCheckpoint(), stored.entry > appliedEntry else { break }
                try restore(stored, makeFlow: makeFlow)
                appliedEntry = stored.entry
                checkpoints.stored(stored, bytes: stored.state.count)
                continue
            }
            guard let last = page.last else { break }
            for entry in page { await replay(entry) }
            restoredEntries += page.count
            appliedEntry = last.id
        }
    }

    /// Whether entries after ``appliedEntry`` may have been compacted away: none below the
    /// next one is left, and a checkpoint covers more than was applied.
    private func compactedPastApplied(_ journal: any Journal) throws -> Bool {
        if let first = try journal.entryRange()?.lowerBound, first <= appliedEntry + 1 { return false }
        return (try journal.latestCheckpointEntry() ?? 0) > appliedEntry
    }

    /// A standby applies what the active instance journaled since the last call, so that its
    /// tree is ready when it takes over.
    package func catchUp(makeFlow: CoordinatorService.FlowFactory?) async throws {
        guard let journal, isFollowing else { return }
        try await replayEntries(of: journal, makeFlow: makeFlow)
    }

    /// The standby took the lease: it applies the last entries, takes the journal's checkpoint
    /// state as its own, and publishes from now on.
    package func stopFollowing(makeFlow: CoordinatorService.FlowFactory?) async throws {
        guard let journal, isFollowing else { return }
        try await catchUp(makeFlow: makeFlow)
        if let stored = try journal.latestCheckpoint() {
            checkpoints.stored(stored, bytes: stored.state.count)
            checkpoints.compactBelow =
                StepJournal.Compaction(
                    checkpointOf: stored.entry, keepEntries: checkpointPolicy.keepEntries, limit: 0
                ).below
        }
        checkpoints.lastEntry = try journal.entryRange()?.upperBound ?? 0
        checkpoints.sinceLast = try journal.count(after: checkpoints.entry)
        isFollowing = false
        logger.info("took over the journal \(journal.location) at entry \(appliedEntry), followed while standing by")
    }

    /// Rebuilds the engine from a stored checkpoint, into a new coordinator that replaces the
    /// current one only once it is complete.
    private func restore(_ stored: StepJournal.Checkpoint, makeFlow: CoordinatorService.FlowFactory?) throws {
        guard let makeFlow else {
            throw ClientError("this coordinator runs Swift flows, which are not restored from checkpoints")
        }
        let checkpoint = try JSONDecoder().decode(CoordinatorCheckpoint.self, from: stored.state)
        let restored = FlowCoordinator()
        try restored.restore(checkpoint, makeFlow: makeFlow)
        restored.onEvent = { [weak self] event in self?.publish(event) }
        coordinator.onEvent = nil
        coordinator = restored
    }

    /// Deletes covered entries while no batch comes to carry the deletion, for about 10 ms.
    private func compactWhileIdle() {
        guard let journal, !journalFailed else { return }
        let deadline = ContinuousClock.now + .milliseconds(10)
        while let compaction = checkpoints.compaction(alongside: 0), ContinuousClock.now < deadline {
            do {
                checkpoints.compacted(try journal.compact(compaction), of: compaction)
            } catch {
                logger.error("cannot compact the journal: \(error)")
                return
            }
        }
    }

    /// Writes a checkpoint when the policy says one is due and the engine allows one.
    private func checkpointIfDue() {
        guard let journal, !journalFailed, checkpointPolicy.everyEntries > 0, checkpoints.sinceLast > 0 else { return }
        let now = ContinuousClock.now
        guard now >= checkpoints.notBefore else { return }
        guard
            checkpoints.sinceLast >= checkpointPolicy.everyEntries
                || checkpoints.lastWritten.duration(to: now) >= .seconds(checkpointPolicy.everySeconds)
        else { return }
        if let obstacle = coordinator.checkpointObstacle {
            if obstacle != checkpoints.obstacle {
                logger.notice("no checkpoint for now: \(obstacle); the journal keeps every entry meanwhile")
                checkpoints.obstacle = obstacle
            }
            checkpoints.notBefore = now + .seconds(10)
            return
        }
        checkpoints.obstacle = nil
        let checkpoint: CoordinatorCheckpoint
        do {
            checkpoint = try coordinator.checkpoint()
        } catch {
            logger.error("cannot take a checkpoint: \(error); the journal keeps every entry meanwhile")
            checkpoints.notBefore = now + .seconds(60)
            return
        }
        guard checkpointWriter.write(checkpoint, entry: checkpoints.lastEntry, to: journal) else { return }
        checkpoints.taking = now.duration(to: .now)
        checkpoints.sinceLast = 0
        checkpoints.lastWritten = .now
        // Until the writer reports: it may not start another one before.
        checkpoints.notBefore = .now + checkpoints.taking * 20
    }

    /// Takes note of a checkpoint the writer finished: the entries it covers may go.
    private func collectCheckpoint() {
        guard let outcome = checkpointWriter.takeOutcome() else { return }
        if let error = outcome.error {
            logger.error("cannot write a checkpoint: \(error); the journal keeps every entry meanwhile")
            checkpoints.sinceLast += checkpointPolicy.everyEntries
            checkpoints.notBefore = .now + .seconds(60)
            return
        }
        checkpoints.stored(outcome.stored, bytes: outcome.bytes)
        checkpoints.compactBelow =
            StepJournal.Compaction(
                checkpointOf: outcome.stored.entry, keepEntries: checkpointPolicy.keepEntries, limit: 0
            ).below
        let cost = checkpoints.taking + outcome.took
        checkpoints.lastCost = cost
        // At most about a twentieth of the time goes to checkpoints.
        checkpoints.notBefore = max(checkpoints.notBefore, .now + cost * 20)
        logger.debug(
            "checkpoint of entry \(outcome.stored.entry): state taken in \(checkpoints.taking), written (\(outcome.bytes) bytes) in \(outcome.took)"
        )
    }

    private func replay(_ entry: StepJournal.Entry) async {
        let params: WireParams
        do {
            params = try entry.decodeParams()
        } catch {
            logger.error("journal entry \(entry.id) has unreadable params (\(error)); replayed without them")
            params = [:]
        }
        // The synchronous path where flows allow it, as when the entry was first applied.
        switch entry.kind {
        case .step:
            if case .pending(let pending) = coordinator.receiveNow(
                CanonicalStep(entry.name, params), from: entry.target)
            {
                _ = await pending.outcomes()
            }
        case .deepLink:
            if case .pending(let pending) = coordinator.navigateNow(to: CanonicalStep(entry.name, params)) {
                _ = await pending.outcomes()
            }
        case .report:
            guard let event = PresentableEvent(rawValue: entry.name) else { return }
            coordinator.report(RendererReport(event), for: entry.target)
        }
    }

    /// Commits the batch's journal records with the sources' last sequences, then publishes
    /// what was held. Throws if the journal cannot be written: flowd then stops rather than
    /// acknowledge what it could not persist.
    package func commitBatch(
        size: Int, receivedAt: ContinuousClock.Instant?, dealtWith: [String: UInt64], ingress: IngressCounters
    ) throws {
        var commitTime: Duration?
        if let journal {
            let commitStart = ContinuousClock.now
            do {
                let compaction = checkpoints.compaction(alongside: records.count)
                let (last, compacted) = try journal.append(records, lastSequences: dealtWith, compaction: compaction)
                if !records.isEmpty { checkpoints.lastEntry = last }
                if let compaction { checkpoints.compacted(compacted, of: compaction) }
            } catch {
                // The engine holds what was not written: no checkpoint may be taken of it.
                journalFailed = true
                records.removeAll()
                throw error
            }
            commitTime = commitStart.duration(to: .now)
            journaledEntries += records.count
            checkpoints.sinceLast += records.count
            records.removeAll(keepingCapacity: true)
        }
        metrics.batchDone(size: size, receivedAt: receivedAt, journal: commitTime)
        syncMetrics(ingress: ingress)
        collectCheckpoint()
        checkpointIfDue()
    }

    /// What an ingress message asks the engine to do.
    package enum Input {
        case step(stepperID: String)
        case deepLink
    }

    /// Applies a step from a stepper or a deep link.
    /// - Returns: nil once it is processed; what to ``finish(_:)`` when a flow's asynchronous
    ///   `adapt` took it over (nothing else may be applied before).
    package func apply(
        _ input: Input, _ step: CanonicalStep, frames: FrameBuffer, params: WirePayload, origin: Origin, topic: String
    ) -> Unfinished? {
        let progress: StepProgress
        applying = Applying(origin: origin, topic: topic, step: step, params: params)
        publisher.publish(frames: frames)
        switch input {
        case .step(let stepperID):
            record(.step, target: stepperID, name: step.name, params: params, origin: origin)
            progress = coordinator.receiveNow(step, from: stepperID)
        case .deepLink:
            record(.deepLink, target: "", name: step.name, params: params, origin: origin)
            progress = coordinator.navigateNow(to: step)
        }
        switch progress {
        case .done(let outcomes):
            count(outcomes, of: input)
            applying = nil
            return nil
        case .pending(let pending):
            return Unfinished(progress: pending, input: input)
        }
    }

    private func count(_ outcomes: [StepOutcome], of input: Input) {
        if case .deepLink = input { metrics.deepLink(outcomes) } else { metrics.step(outcomes) }
    }

    /// A step or deep link an asynchronous flow is still processing.
    package struct Unfinished {
        package var progress: StepProgress.Pending
        package var input: Input
    }

    /// Waits until `unfinished` and what it caused are processed.
    package func finish(_ unfinished: Unfinished) async {
        count(await unfinished.progress.outcomes(), of: unfinished.input)
        applying = nil
    }

    /// Applies a renderer's report.
    package func applyReport(_ event: PresentableEvent, for presentableID: String, origin: Origin, topic: String) {
        record(.report, target: presentableID, name: event.rawValue, params: nil, origin: origin)
        metrics.report()
        applying = Applying(origin: origin, topic: topic)
        coordinator.report(RendererReport(event), for: presentableID)
        applying = nil
    }

    /// Journals an applied input; FBV params are kept as the bytes that arrived.
    private func record(_ kind: StepJournal.Kind, target: String, name: String, params: WirePayload?, origin: Origin) {
        guard journal != nil else { return }
        var bytes = Data()
        if let params, !params.isEmpty {
            if params.contentType == .fbv {
                bytes = Data(params.bytes)
            } else {
                do {
                    var encoded: [UInt8] = []
                    try FBV.encode(params: try params.decodeParams(), into: &encoded)
                    bytes = Data(encoded)
                } catch {
                    logger.error("cannot encode the params of \(name) for the journal: \(error)")
                }
            }
        }
        records.append(
            StepJournal.Record(
                kind: kind, target: target, name: name, params: bytes, source: origin.source, sequence: origin.sequence)
        )
    }

    /// Once per heartbeat interval, before the loop's heartbeat: the lease, the metrics and the
    /// checkpoints. Throws when a shared journal's lease is lost: this instance must stop.
    func tick(ingress: IngressCounters) throws {
        try (journal as? any SharedJournal)?.verifyLease()
        syncMetrics(ingress: ingress)
        collectCheckpoint()
        checkpointIfDue()
        compactWhileIdle()
    }

    /// Flows, bindings, stepper ids, children of a node and peers listed in a status reply at most.
    package static let statusListLimit = StatusQuery.maxPageLimit

    /// The message being applied, while the engine handles it: diagnostics name it, and a step
    /// the flow passes through is published with the FBV params frame it arrived with.
    private struct Applying {
        package var origin: Origin
        package var topic: String
        package var step: CanonicalStep?
        package var params: WirePayload?
    }

    private var applying: Applying?

    private func publish(_ event: CoordinatorEvent) {
        guard isPublishing, !isFollowing else { return }
        switch event {
        case .willNavigate(let navigation), .didNavigate(let navigation):
            let phase: NavigationPhase
            if case .willNavigate = event { phase = .will } else { phase = .did }
            if phase == .did {
                metrics.didNavigate(flow: navigation.flow.name)
                logger.debug("did navigate flow=\(navigation.flow.name) step=\(describeStep(navigation.step))")
            }
            guard publisher.wants(head: phase == .will ? "nav/will/" : "nav/did/", id: navigation.flow.name) else {
                return
            }
            var message: NavigationEventMessage
            if let step = navigation.step as? CanonicalStep {
                message = NavigationEventMessage(
                    phase: phase, envelope: publisher.envelope(phase == .will ? .willNavigate : .didNavigate),
                    flow: navigation.flow.name, stepName: step.name, params: step.params,
                    presentableID: navigation.presentableID)
                // A step the flow passes through keeps its params dictionary (== is then O(1)):
                // FBV params go out as the bytes that came in (the message writes JSON again).
                if let received = applying?.step, received.name == step.name, received.params == step.params {
                    message.encodedParams = applying?.params
                }
            } else {
                let (name, params) = canonical(navigation.step)
                message = NavigationEventMessage(
                    phase: phase, envelope: publisher.envelope(phase == .will ? .willNavigate : .didNavigate),
                    flow: navigation.flow.name, stepName: name, params: params, presentableID: navigation.presentableID)
            }
            publisher.publishWanted(message)
        case .command(let command):
            guard let message = wireCommand(command) else { return }
            publisher.publish(message)
        case .diagnostic(let diagnostic):
            var details: WireParams = [:]
            if let stepper = diagnostic.stepperID { details["stepper"] = .string(stepper) }
            if let flow = diagnostic.flow { details["flow"] = .string(flow.name) }
            if let presentable = diagnostic.presentableID { details["presentable"] = .string(presentable) }
            if let step = diagnostic.step { details["step"] = .string(describeStep(step)) }
            logger.notice("\(diagnostic.reason): \(diagnostic.message)")
            guard let applying else {
                publisher.publish(
                    DiagnosticMessage(
                        envelope: publisher.envelope(.diagnostic), reason: diagnostic.reason,
                        message: diagnostic.message, details: details))
                return
            }
            // A refusal of the message being applied, named as every refusal is, so that its sender
            // can match it to its step.
            let refusal = Refusal(
                reason: diagnostic.reason, detail: diagnostic.message, endpoint: "ingress",
                source: applying.origin.source, topic: applying.topic, sequence: applying.origin.sequence,
                extra: details)
            publisher.publish(refusal.diagnostic(publisher.envelope(.diagnostic)))
        case .flowStarted, .flowReady, .flowEnded, .bound, .unbound:
            logger.debug("\(event)")
        }
    }

    /// The wire name and params of a step: canonical steps as they are, Swift enums through Codable.
    private func canonical(_ step: any Step) -> (String, WireParams) {
        if let step = step as? CanonicalStep { return (step.name, step.params) }
        if let encodable = step as? any Encodable, let form = try? canonicalForm(encodable) {
            return (form.name, form.params)
        }
        return (describeStep(step), [:])
    }

    private func wireCommand(_ command: Flows.NavigationCommand) -> NavigationCommandMessage? {
        let verb: NavigationVerb
        switch command.verb {
        case .setRoot: verb = .setRoot
        case .push: verb = .push
        case .pop: verb = .pop
        case .present: verb = .present
        case .dismiss: verb = .dismiss
        case .setTabs: verb = .setTabs
        case .selectTab: verb = .selectTab
        case .end: verb = .end
        }
        let container = command.verb == .setTabs ? command.items.joined(separator: ",") : (command.container ?? "")
        return NavigationCommandMessage(
            envelope: publisher.envelope(.navigationCommand, carriesValues: false),
            flow: command.flow?.name ?? "coordinator",
            verb: verb, target: command.target, container: container, presentableKind: command.kind)
    }

    /// The journal's part of a status reply.
    private func journalStatus() -> WireValue {
        guard let journal else { return .null }
        var map: WireParams = [
            "path": .string(journal.location), "restored": .int(Int64(restoredEntries)),
            "appended": .int(Int64(journaledEntries)), "since_checkpoint": .int(Int64(checkpoints.sinceLast)),
        ]
        if let created = checkpoints.created {
            var checkpoint: WireParams = [
                "entry": .int(checkpoints.entry), "bytes": .int(Int64(checkpoints.bytes)),
                "age_s": .double(Date().timeIntervalSince(created)),
            ]
            if let cost = checkpoints.lastCost {
                checkpoint["took_ms"] = .double(
                    Double(cost.components.seconds) * 1000 + Double(cost.components.attoseconds) / 1e15)
            }
            map["checkpoint"] = .map(checkpoint)
        }
        if let obstacle = checkpoints.obstacle { map["checkpoint_obstacle"] = .string(obstacle) }
        map["compacting"] = .bool(checkpoints.compactBelow != nil)
        if let shared = journal as? any SharedJournal, let history = try? shared.leaseHistory(limit: 10) {
            // The first is this instance: it serves only while it holds the lease.
            map["lease"] = .map([
                "holder": history.first.map { .string($0.instance) } ?? .null,
                "history": .list(
                    history.map { record in
                        .map([
                            "instance": .string(record.instance), "host": .string(record.host),
                            "pid": .int(Int64(record.pid)),
                            "acquired": .double(record.acquired.timeIntervalSince1970),
                        ])
                    }),
            ])
        }
        return .map(map)
    }

    /// What a status request asks for (PROTOCOL.md §4.3): the summary always; of the lists, the
    /// `sections` named (all by default), and one page of `steppers` and of `peers` (sorted by
    /// id; `peers` filtered by id `prefix` and `alive`).
    package struct StatusQuery: Equatable {
        package static let sectionNames: Set<String> = ["flows", "bindings", "steppers", "peers"]
        /// Entries of a paged list returned when the request does not say, and at most.
        package static let defaultPageLimit = 100
        package static let maxPageLimit = 1000

        package struct Page: Equatable {
            package var offset = 0
            package var limit = StatusQuery.defaultPageLimit
            package var prefix: String?
            package var alive: Bool?
        }

        package var sections = StatusQuery.sectionNames
        package var steppers = Page()
        package var peers = Page()

        package init() {}

        /// Reads a request's params; unknown keys are ignored, a wrong value is `bad-params`.
        package init(_ params: WireParams) throws(WireError) {
            if let value = params["sections"] {
                guard case .list(let names) = value, names.allSatisfy({ $0.stringValue != nil }) else {
                    throw WireError(
                        .badParams, "status param 'sections' is a list of section names: \(Self.sectionNames.sorted())")
                }
                let wanted = Set(names.compactMap(\.stringValue))
                if let unknown = wanted.subtracting(Self.sectionNames).sorted().first {
                    throw WireError(
                        .badParams,
                        "status has no section '\(unknown)': \(Self.sectionNames.sorted().joined(separator: ", "))")
                }
                sections = wanted
            }
            steppers = try Self.page(params, "steppers")
            peers = try Self.page(params, "peers")
        }

        private static func page(_ params: WireParams, _ key: String) throws(WireError) -> Page {
            var page = Page()
            guard let value = params[key] else { return page }
            guard case .map(let map) = value else {
                throw WireError(.badParams, "status param '\(key)' is a map: {offset, limit, prefix, alive}")
            }
            if let offset = map["offset"] {
                guard let number = offset.intValue, number >= 0 else {
                    throw WireError(.badParams, "\(key).offset is an int ≥ 0")
                }
                page.offset = Int(clamping: number)
            }
            if let limit = map["limit"] {
                guard let number = limit.intValue, number >= 0, number <= Int64(maxPageLimit) else {
                    throw WireError(.badParams, "\(key).limit is an int from 0 to \(maxPageLimit)")
                }
                page.limit = Int(number)
            }
            if let prefix = map["prefix"] {
                guard let text = prefix.stringValue else { throw WireError(.badParams, "\(key).prefix is a string") }
                page.prefix = text
            }
            if let alive = map["alive"] {
                guard case .bool(let flag) = alive else { throw WireError(.badParams, "\(key).alive is a bool") }
                page.alive = flag
            }
            return page
        }
    }

    /// The live tree, bindings and counters, as the status query returns them.
    package func status(
        ingress counters: IngressCounters, peers: [String: Intake.Liveness], control: WireValue = .null,
        query: StatusQuery = StatusQuery()
    ) -> WireParams {
        syncMetrics(ingress: counters)
        // Bounded: a status flood or a huge topology must not stall the loop (the counts stay complete).
        let snapshot = coordinator.snapshot(limit: Self.statusListLimit)
        func tree(_ node: NodeSnapshot) -> WireValue {
            var map: WireParams = [
                "id": .string(node.id), "kind": .string(node.kind.rawValue), "visible": .bool(node.isVisible),
                "children": .list(node.children.map(tree)),
            ]
            if let flow = node.childFlow { map["flow"] = .string(flow.description) }
            if let selected = node.selectedIndex { map["selected"] = .int(Int64(selected)) }
            if let presented = node.presented { map["presented"] = tree(presented) }
            if let reported = node.reportedVisibility { map["reported"] = .bool(reported) }
            return .map(map)
        }
        func counts(_ counters: StepperCounters) -> WireValue {
            .map([
                "accepted": .int(Int64(counters.accepted)),
                "dropped": .map(
                    Dictionary(
                        uniqueKeysWithValues: counters.dropped.map { ($0.key.rawValue, WireValue.int(Int64($0.value))) }
                    )),
            ])
        }
        var status: WireParams = [
            "uptime_s": .double(Date().timeIntervalSince(started)),
            "flows_total": .int(Int64(snapshot.flowCount)),
            "bindings_total": .int(Int64(snapshot.bindingCount)),
            "steppers_total": .int(Int64(snapshot.stepperCount)),
            "totals": counts(snapshot.totals),
            "ingress": .map([
                "received": .int(Int64(counters.received)), "accepted": .int(Int64(counters.accepted)),
                "duplicates": .int(Int64(counters.duplicates)), "out_of_order": .int(Int64(counters.outOfOrder)),
                "journal_adopted": .int(Int64(counters.journalAdopted)),
                "journal_lost": .int(Int64(clamping: counters.journalLost)),
                "refused": .map(
                    Dictionary(
                        uniqueKeysWithValues: counters.refused.map { ($0.key.rawValue, WireValue.int(Int64($0.value))) }
                    )),
            ]),
            "peers_total": .int(Int64(peers.count)),
            "events": .map([
                "published": .int(Int64(publisher.counters.published)),
                "dropped_hwm": .int(Int64(publisher.counters.dropped)),
                "unsubscribed": .int(Int64(publisher.counters.unwanted)),
            ]),
            "control": control,
            "metrics": metrics.status(endpoint: metricsAddress, exposition: exposition),
            "journal": journalStatus(),
        ]
        var pages: WireParams = [:]
        func page(_ name: String, _ page: StatusQuery.Page, matching: Int, listed: Int) {
            let next = page.offset + listed
            pages[name] = .map([
                "offset": .int(Int64(page.offset)), "limit": .int(Int64(page.limit)), "matching": .int(Int64(matching)),
                "next": next < matching ? .int(Int64(next)) : .null,
            ])
        }
        if query.sections.contains("flows") {
            status["flows"] = .list(
                snapshot.flows.map { flow in
                    .map([
                        "id": .string(flow.id.description), "name": .string(flow.id.name),
                        "parent": flow.parent.map { .string($0.description) } ?? .null,
                        "ready": .bool(flow.isReady), "root": tree(flow.root),
                    ])
                })
        }
        if query.sections.contains("bindings") {
            status["bindings"] = .list(
                snapshot.bindings.map { binding in
                    .map([
                        "stepper": .string(binding.stepperID), "flow": .string(binding.flow.description),
                        "presentable": .string(binding.presentableID), "remote": .bool(binding.isRemote),
                        "allowStepWhenNotPresented": .bool(binding.allowStepWhenNotPresented),
                        "allowStepWhenDismissed": .bool(binding.allowStepWhenDismissed),
                    ])
                })
        }
        if query.sections.contains("steppers") {
            let wanted = query.steppers
            let ids = snapshot.steppers.keys.filter { wanted.prefix.map($0.hasPrefix) ?? true }.sorted()
            let listed = ids.dropFirst(wanted.offset).prefix(wanted.limit)
            status["steppers"] = .map(
                Dictionary(uniqueKeysWithValues: listed.map { ($0, counts(snapshot.steppers[$0]!)) }))
            page("steppers", wanted, matching: ids.count, listed: listed.count)
        }
        if query.sections.contains("peers") {
            // One page, by source id: the reply stays bounded however many sources flowd holds.
            let wanted = query.peers
            let now = ContinuousClock.now
            let ids = peers.compactMap { source, peer -> String? in
                if let prefix = wanted.prefix, !source.hasPrefix(prefix) { return nil }
                if let alive = wanted.alive, alive == peer.isDead { return nil }
                return source
            }.sorted()
            let listed = ids.dropFirst(wanted.offset).prefix(wanted.limit)
            status["peers"] = .map(
                Dictionary(
                    uniqueKeysWithValues: listed.map { source in
                        let peer = peers[source]!
                        return (
                            source,
                            WireValue.map([
                                "alive": .bool(!peer.isDead), "heartbeats": .bool(peer.sendsHeartbeats),
                                "silent_ms": .int(Int64((now - peer.lastHeard).wholeMilliseconds)),
                                "role": .string(peer.role),
                            ])
                        )
                    }))
            page("peers", wanted, matching: ids.count, listed: listed.count)
        }
        status["pages"] = .map(pages)
        return status
    }
}

/// Where the journal's checkpoints stand.
package struct CheckpointState {
    /// The id of the last journaled entry.
    package var lastEntry: Int64 = 0
    /// Entries journaled since the last checkpoint (or, at start, not covered by one).
    package var sinceLast = 0
    package var lastWritten = ContinuousClock.now
    package var notBefore = ContinuousClock.now
    package var lastCost: Duration?
    /// Taking the engine's state for the last checkpoint (on the loop's thread).
    package var taking: Duration = .zero
    /// Why the last attempt was put off, while it still is.
    package var obstacle: String?
    /// The newest stored checkpoint.
    package var entry: Int64 = 0
    package var created: Date?
    package var bytes = 0
    /// Entries below this id are covered by the checkpoint and still to delete; nil when none are.
    package var compactBelow: Int64?

    /// What to delete in the next commit: a few times what it adds, so compaction catches up
    /// with the flow of steps while no commit is much slower than it would be without.
    package func compaction(alongside appended: Int) -> StepJournal.Compaction? {
        compactBelow.map { StepJournal.Compaction(below: $0, limit: 4 * appended + 2048) }
    }

    package mutating func compacted(_ count: Int, of compaction: StepJournal.Compaction) {
        if count < compaction.limit { compactBelow = nil }
    }

    package mutating func stored(_ checkpoint: StepJournal.Checkpoint, bytes: Int) {
        entry = checkpoint.entry
        created = checkpoint.created
        self.bytes = bytes
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
