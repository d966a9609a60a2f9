import FlowBusClient
import FlowBusConfiguration
import FlowBusDaemon
import FlowBusProtocol
import FlowBusTracing
import FlowBusWire
import Foundation
import Logging
import Synchronization
import ZeroMQ

/// A reactor host's part of the ``DaemonLoop``: actions and snapshot requests from `actions` go to
/// the hosted reactors; what the reactors make (states, steps) is committed — persisted states and
/// the de-duplication entries saved in one transaction — then published.
///
/// A save that fails publishes and acknowledges nothing: the states wait, no action is read, and
/// the save is tried again until it succeeds (``DaemonCommit/retry(after:)``); the failure is
/// logged, counted and published as `persistence-failed`. So no view ever sees a state a restarted
/// host does not have, and no view hears an action acknowledged whose state was not saved.
///
/// Used by the host's own thread only.
final class ReactorHostRole: DaemonRole {
    private let host: ReactorHostLoop
    private let settings: ReactorHostLoop.Settings
    private let logger: Logger
    private let outlet: ReactorHostOutlet
    private let context: Context
    private let data: RouterEndpoint
    private var publisher: BusPublisher { data.replier.publisher }
    private let wireLimits: WireLimits
    /// Action names and reactor ids, made once each.
    private let texts = TextInterner()
    private var instances: [String: HostedReactor] = [:]
    private var latest: [String: (sequence: UInt64, state: WireValue)] = [:]
    /// Snapshot requests waiting for the first state of a reactor created for them.
    private var pendingSnapshots: [String: [[UInt8]]] = [:]
    private var steppers: [String: HostStepOutlet] = [:]
    /// A stepper with ``HostStepOutlet/backlogLimit`` steps or more waiting for flowd's ack.
    private var backedUpStepper: String?
    /// What the reactors made that is not committed yet (a save failed), oldest first.
    private var uncommitted: [ReactorHostOutboxItem] = []
    /// The last sequence dealt with per source, not saved yet (a host that persists).
    private var unsavedSources: [String: UInt64] = [:]
    private let database: (any ReactorStateStore)?
    /// The store, when the host's instances share it: its lease is checked every turn.
    private let shared: (any SharedReactorStateStore)?
    /// Saved states not yet handed to their reactor (consumed when the reactor is created).
    private var saved: [String: PersistedReactorState] = [:]
    /// The sequence saved last per persisted reactor.
    private var savedSequence: [String: UInt64] = [:]
    private var persistedIDs: [String: Bool] = [:]
    /// Whether the store keeps the reactors' steps until flowd acknowledges them: their steppers
    /// then keep their source ids and sequences across restarts.
    private let keepsSteps: Bool
    /// Each kept stepper's source id and last sequence saved.
    private var keptSteppers: [String: (source: String, last: UInt64)] = [:]
    /// Per kept stepper's source, the last sequence flowd acknowledged whose steps the store forgot.
    private var forgottenSteps: [String: UInt64] = [:]
    /// The sequences the last save gave the steps of the items it saved, in order, for ``publish(_:)``.
    private var savedStepSequences: [UInt64?] = []
    /// A failing save is tried again this often.
    private static let saveRetry: Duration = .milliseconds(200)

    init(host: ReactorHostLoop, data: RouterEndpoint, database: (any ReactorStateStore)?, context: Context) throws {
        self.host = host
        settings = host.settings
        logger = host.logger
        outlet = host.outlet
        self.data = data
        self.database = database
        shared = database as? any SharedReactorStateStore
        self.context = context
        wireLimits = WireLimits(maxFrameBytes: settings.limits.maxMessageBytes)
        keepsSteps = database?.keepsSteps ?? false
        if let database {
            let loaded = try database.load()
            saved = loaded.states
            savedSequence = loaded.states.mapValues(\.sequence)
            logger.info(
                "reactor states in \(database.location)",
                metadata: ["states": "\(loaded.states.count)", "sources": "\(loaded.sources)"])
            if keepsSteps { try resumeSteppers(database.loadSteppers()) }
        }
    }

    /// Takes up the steppers the store kept, and sends again the steps flowd had not
    /// acknowledged when the host (or the instance before it) stopped: flowd applies each once.
    private func resumeSteppers(_ kept: [String: SavedStepper]) throws {
        for (stepperID, stepper) in kept {
            keptSteppers[stepperID] = (stepper.source, stepper.lastSequence)
            // Sequences start at 1: a 0 read from a damaged store is not one to continue after.
            guard let first = stepper.unacknowledged.first, first.sequence > 0 else { continue }
            forgottenSteps[stepper.source] = first.sequence - 1
            let stepOutlet = try HostStepOutlet(
                stepperID: stepperID, sourceID: stepper.source, continuingAfter: first.sequence - 1,
                endpoints: settings.stepIngress, contentType: settings.contentType, curve: settings.curve,
                heartbeatMilliseconds: settings.heartbeat.wholeMilliseconds, context: context, logger: logger)
            steppers[stepperID] = stepOutlet
            var resent = 0
            for step in stepper.unacknowledged {
                let params = (try? FBV.decode(step.params))?.mapValue ?? [:]
                let trace = step.traceparent.flatMap {
                    TraceContext(traceparent: $0, tracestate: step.tracestate ?? "")
                }
                if stepOutlet.sendKept(
                    name: step.name, params: params, trace: trace, sequence: step.sequence, logger: logger)
                {
                    resent += 1
                }
            }
            outlet.count { $0.stepsSent += resent }
            logger.notice(
                "sending again \(resent) step(s) of stepper \(stepperID) that flowd had not acknowledged (\(stepper.source) \(first.sequence)…\(stepper.unacknowledged.last?.sequence ?? first.sequence))"
            )
        }
    }

    func createExactReactors() {
        for reactorID in host.registry.exactIDs {
            _ = instance(for: reactorID)
        }
        for (reactorID, state) in saved where host.registry.registration(for: reactorID) == nil {
            logger.warning(
                "the state database has a state of \(reactorID) (sequence \(state.sequence)), which this host does not run"
            )
        }
    }

    func shutDownReactors() {
        for instance in instances.values { instance.shutdown() }
    }

    func close() {
        instances.removeAll()
        for stepper in steppers.values { stepper.close() }
        steppers.removeAll()
        outlet.count { $0.reactors = 0 }
        reportMetrics()
    }

    // MARK: DaemonRole

    func beginTurn(now: ContinuousClock.Instant) throws {
        try stoppingOnLostLease { try shared?.checkLease() }
    }

    func beginBatch() {}

    func apply(_ message: InboundMessage) -> DaemonApplied {
        let header = message.header
        do {
            switch header.kind {
            case .action:
                let view = try NamedMessageView.decode(
                    from: message.frames, header: header, limits: wireLimits, texts: texts)
                let params = try view.params.decodeParams()
                let reactorID = texts.text(header.topicID)
                guard let instance = instance(for: reactorID) else {
                    data.refuse(
                        .unknownReactor, "no reactor \(reactorID) on reactor host \(settings.hostName)",
                        message: message)
                    return .done
                }
                // What the action causes (states, steps) carries its trace, even from its async mutations.
                let spans = ReactorSpans(
                    reactorID: reactorID, action: view.name, topic: header.topic, envelope: header.envelope,
                    remote: view.traceContext)
                func send() -> HostedReactor.Refused? {
                    do throws(HostedReactor.Refused) {
                        try instance.send(name: view.name, params: params)
                        return nil
                    } catch {
                        return error
                    }
                }
                // Bound only for a traced action: binding a task-local allocates.
                let trace = spans?.context ?? view.traceContext
                let refusal = trace == nil ? send() : BusTracing.$messageTrace.withValue(trace, operation: send)
                spans?.end(refusal: refusal?.reason)
                if let refusal {
                    data.refuse(refusal.reason, refusal.detail, message: message)
                    return .done
                }
                outlet.count { $0.actionsApplied += 1 }
                // Observers (`flowctl record`, audits) see each applied action, as received.
                publisher.publish(frames: message.frames)
            case .snapshotRequest:
                _ = try WireMessage.decode(from: message.frames, header: header)
                let reactorID = String(header.topicID)
                guard instance(for: reactorID) != nil else {
                    data.refuse(
                        .unknownReactor, "no reactor \(reactorID) on reactor host \(settings.hostName)",
                        message: message)
                    return .done
                }
                answerSnapshot(reactorID, to: message.peer)
            default:
                data.refuse(
                    .unknownKind,
                    "a reactor host's actions endpoint accepts action, snapshotRequest and heartbeat, not \(header.kind)",
                    message: message)
            }
        } catch {
            data.refuse(error.reason, error.detail, message: message)
        }
        return .done
    }

    func answer(_ request: InboundMessage) {}

    /// While a stepper's steps back up (flowd down or slow), no action is read: they wait in the
    /// actions socket and the views' outboxes, and the steps in memory stay bounded.
    var isSuspended: Bool { backedUpStepper != nil }

    // Acks of the steppers come on sockets the loop does not poll: it looks at them this often.
    var suspendedRecheck: Duration? { .milliseconds(20) }

    var hasOutput: Bool { !uncommitted.isEmpty || outlet.hasItems }

    /// Saves what the reactors made since the last commit, with the batch's de-duplication
    /// entries, in one transaction; then publishes it.
    func commit(_ batch: DaemonBatch) -> DaemonCommit {
        if database != nil { unsavedSources.merge(batch.dealtWith) { max($0, $1) } }
        outlet.take(into: &uncommitted)
        guard save(uncommitted) else {
            coalesceUncommitted()
            return .retry(after: Self.saveRetry)
        }
        publish(uncommitted)
        uncommitted.removeAll(keepingCapacity: true)
        return .committed
    }

    func tick(now: ContinuousClock.Instant) throws {
        try stoppingOnLostLease { try shared?.verifyLease() }
    }

    /// Runs `check`; its error (the shared store's lease is gone) stops the host, and says why.
    private func stoppingOnLostLease(_ check: () throws -> Void) throws {
        do {
            try check()
        } catch {
            logger.critical("lost the reactor host's lease: \(error); stopping so that the standby takes over")
            throw error
        }
    }

    func endTurn(now: ContinuousClock.Instant) {
        for stepper in steppers.values { stepper.service(now: now, logger: logger) }
        if let stepperID = backedUpStepper {
            // Well below the mark again: a slow flowd does not make the host stop and go at every batch.
            if steppers.values.allSatisfy({ $0.waiting < HostStepOutlet.backlogResume }) {
                logger.notice("reading actions again: flowd acknowledged the steps of \(stepperID)")
                backedUpStepper = nil
            }
        } else if let backedUp = steppers.values.first(where: \.isBackedUp) {
            logger.warning(
                "reading no actions: \(backedUp.waiting) steps of \(backedUp.stepperID) wait for flowd's ack (is flowd running?)"
            )
            backedUpStepper = backedUp.stepperID
        }
        reportMetrics()
    }

    // A source whose entry is not saved yet stays: forgotten, its resend would be judged by the
    // database's older entry.
    func isUnsaved(_ source: String) -> Bool { unsavedSources[source] != nil }

    var hasWorkInFlight: Bool { instances.values.contains(where: \.hasWorkInFlight) }

    // MARK: Reactors

    private func isPersisted(_ reactorID: String) -> Bool {
        guard let spec = settings.spec.persistence else { return false }
        if let known = persistedIDs[reactorID] { return known }
        let persisted = spec.persists(reactorID)
        persistedIDs[reactorID] = persisted
        return persisted
    }

    /// The running instance for `reactorID`, created from its registration on first use.
    private func instance(for reactorID: String) -> HostedReactor? {
        if let instance = instances[reactorID] { return instance }
        guard let (registration, familyPrefix) = host.registry.registration(for: reactorID) else { return nil }
        var reactorLogger = logger
        reactorLogger[metadataKey: "reactor"] = "\(reactorID)"
        let context = ReactorContext(
            reactorID: reactorID, familyPrefix: familyPrefix, logger: reactorLogger, outlet: outlet)
        let restoring = isPersisted(reactorID) ? saved[reactorID] : nil
        guard let instance = registration.make(context, restoring) else { return nil }
        if let restoring {
            saved.removeValue(forKey: reactorID)
            logger.info("reactor \(reactorID) restored at sequence \(restoring.sequence)")
        }
        instances[reactorID] = instance
        outlet.count { $0.reactors = instances.count }
        logger.debug("reactor \(reactorID) started")
        return instance
    }

    // MARK: Snapshots

    /// Answers with the latest *published* state: every later state follows it on the socket.
    /// A reactor just created whose first state is not out yet is answered when it is.
    private func answerSnapshot(_ reactorID: String, to peer: [UInt8]) {
        guard let current = latest[reactorID] else {
            // Once per peer: one that asks again while no state is out does not grow the list.
            if pendingSnapshots[reactorID]?.contains(peer) != true {
                pendingSnapshots[reactorID, default: []].append(peer)
            }
            return
        }
        let message = SnapshotMessage(
            reactorID: reactorID,
            envelope: Envelope(
                kind: .snapshot, contentType: settings.contentType, sequence: current.sequence, messageID: .none,
                source: settings.sourceID),
            state: current.state)
        data.replier.send(message, to: peer)
        outlet.count { $0.snapshotsAnswered += 1 }
    }

    // MARK: Committing

    /// Saves the last state of each persisted reactor among `items` and the changed
    /// de-duplication entries, in one transaction.
    /// - Returns: false when it failed (logged, counted and published as `persistence-failed`).
    private func save(_ items: [ReactorHostOutboxItem]) -> Bool {
        guard let database else { return true }
        var states: [String: (sequence: UInt64, state: WireValue)] = [:]
        for case .state(let reactorID, let sequence, let state, _) in items
        where isPersisted(reactorID) && savedSequence[reactorID].map({ sequence > $0 }) ?? true {
            states[reactorID] = (sequence, state)
        }
        let sources = unsavedSources
        let (steps, stepSequences, lastKept) = keepsSteps ? stepsToKeep(items) : ([], [], [:])
        let acknowledged = keepsSteps ? acknowledgedSteps() : [:]
        guard !states.isEmpty || !sources.isEmpty || !steps.isEmpty || !acknowledged.isEmpty else {
            savedStepSequences = stepSequences
            return true
        }
        do {
            let records = try states.map {
                ReactorStateRecord(
                    reactorID: $0.key, sequence: $0.value.sequence, bytes: try FBV.encode($0.value.state))
            }
            try database.save(states: records, sources: sources, steps: steps, acknowledged: acknowledged)
            for (reactorID, state) in states { savedSequence[reactorID] = state.sequence }
            keptSteppers.merge(lastKept) { $1 }
            forgottenSteps.merge(acknowledged) { max($0, $1) }
            savedStepSequences = stepSequences
            outlet.count { $0.saves += 1 }
            unsavedSources.removeAll(keepingCapacity: true)
            return true
        } catch {
            let failures = outlet.counters.withLock { counters in
                counters.saveFailures += 1
                return counters.saveFailures
            }
            let text =
                "cannot save reactor states to \(database.location): \(error) (nothing is published or acknowledged, and no action read, until a save succeeds)"
            if failures == 1 || failures % 1000 == 0 {
                logger.error("\(text)")
                // Past the hold: a failing save holds back everything else the host publishes.
                publisher.pastHold {
                    publisher.publishDiagnostic(.persistenceFailed, text, details: ["host": .string(settings.hostName)])
                }
            }
            return false
        }
    }

    /// The steps among `items`, numbered after what each stepper's source saved last (a stepper's
    /// first step makes its source id), and, for each item, the sequence of its step if it is one
    /// that is kept (nil: not a step, or one that cannot be encoded, which is not sent).
    private func stepsToKeep(
        _ items: [ReactorHostOutboxItem]
    ) -> (steps: [SavedStep], sequences: [UInt64?], last: [String: (source: String, last: UInt64)]) {
        var steps: [SavedStep] = []
        var sequences: [UInt64?] = []
        var last: [String: (source: String, last: UInt64)] = [:]
        for item in items {
            guard case .step(let stepperID, let name, let params, let trace) = item else {
                sequences.append(nil)
                continue
            }
            let (source, previous) =
                last[stepperID] ?? keptSteppers[stepperID]
                ?? (HostStepOutlet.sourceID(stepperID, suffix: Self.sourceSuffix(settings.sourceID)), 0)
            let sequence = previous + 1
            do {
                // Encoded now: a step that cannot be (a bad name) must not hold a sequence.
                _ = try StepMessage(
                    stepperID: stepperID,
                    envelope: Envelope(
                        kind: .step, contentType: settings.contentType, sequence: sequence, source: source),
                    name: name, params: params, traceContext: trace
                ).encoded()
                steps.append(
                    SavedStep(
                        stepperID: stepperID, source: source, sequence: sequence, name: name,
                        params: try FBV.encode(.map(params)), traceparent: trace?.traceparent,
                        tracestate: trace.map(\.tracestate)))
                last[stepperID] = (source, sequence)
                sequences.append(sequence)
            } catch {
                outlet.count { $0.stepsDropped += 1 }
                logger.error("step \(name) as \(stepperID) not sent: \(error)")
                sequences.append(nil)
            }
        }
        return (steps, sequences, last)
    }

    /// Per kept stepper's source, the sequence flowd acknowledged last, when the store still has
    /// steps up to it.
    private func acknowledgedSteps() -> [String: UInt64] {
        var acknowledged: [String: UInt64] = [:]
        for stepper in steppers.values where keptSteppers[stepper.stepperID]?.source == stepper.sourceID {
            let sequence = stepper.acknowledged
            if sequence > forgottenSteps[stepper.sourceID] ?? 0 { acknowledged[stepper.sourceID] = sequence }
        }
        return acknowledged
    }

    /// The part of a source id after its `#`.
    private static func sourceSuffix(_ sourceID: String) -> String {
        String(sourceID.split(separator: "#").last ?? "0")
    }

    /// While saves fail, keeps of each reactor's states only the last (views resynchronise from a
    /// snapshot on the gap) and every step, so that a long outage does not grow without bound.
    private func coalesceUncommitted() {
        var lastState: [String: Int] = [:]
        for (index, item) in uncommitted.enumerated() {
            if case .state(let reactorID, _, _, _) = item { lastState[reactorID] = index }
        }
        var index = 0
        uncommitted.removeAll { item in
            defer { index += 1 }
            guard case .state(let reactorID, _, _, _) = item else { return false }
            return lastState[reactorID] != index
        }
    }

    /// Publishes what the reactors made, in order, once it is committed.
    private func publish(_ items: [ReactorHostOutboxItem]) {
        guard !items.isEmpty else { return }
        var published = 0
        var unsubscribed = 0
        for (index, item) in items.enumerated() {
            switch item {
            case .state(let reactorID, let sequence, let state, let trace):
                latest[reactorID] = (sequence, state)
                let message = StateMessage(
                    reactorID: reactorID,
                    envelope: Envelope(
                        kind: .state, contentType: settings.contentType, sequence: sequence, messageID: .none,
                        source: settings.sourceID),
                    state: state,
                    traceContext: trace.flatMap { ReactorSpans.publishState(reactorID, sequence: sequence, in: $0) })
                let unwantedBefore = publisher.counters.unwanted
                if publisher.publish(message) {
                    published += 1
                } else if publisher.counters.unwanted > unwantedBefore {
                    unsubscribed += 1
                }
                if !pendingSnapshots.isEmpty, let waiting = pendingSnapshots.removeValue(forKey: reactorID) {
                    for peer in waiting { answerSnapshot(reactorID, to: peer) }
                }
            case .unencodableState(let reactorID, let sequence, let detail):
                outlet.count { $0.statesUnencodable += 1 }
                let text = "state \(sequence) of \(reactorID) cannot be encoded: \(detail)"
                logger.error("\(text)")
                publisher.publishDiagnostic(
                    "bad-state", text,
                    details: [
                        "topic": .string(Topic.state(reactorID)), "sequence": .int(Int64(clamping: sequence)),
                        "host": .string(settings.hostName),
                    ])
            case .step(let stepperID, let name, let params, let trace):
                let kept = keepsSteps ? savedStepSequences[index] : nil
                // A kept step that could not be encoded was counted and logged by the save.
                if keepsSteps, kept == nil { continue }
                sendStep(
                    stepperID: stepperID, name: name, params: params,
                    trace: trace.flatMap { ReactorSpans.sendStep(stepperID, name: name, in: $0) }, kept: kept)
            }
        }
        if published > 0 || unsubscribed > 0 {
            outlet.count {
                $0.statesPublished += published
                $0.statesUnsubscribed += unsubscribed
            }
        }
    }

    /// Hands the counters to swift-metrics, with what the endpoints counted.
    private func reportMetrics() {
        let intake = data.intake.counters
        let received = data.counters.received
        let refused = data.replier.refused
        let dropped = publisher.counters.dropped
        outlet.count {
            $0.received = received
            $0.duplicates = intake.duplicates
            $0.outOfOrder = intake.outOfOrder
            $0.refused = refused
            $0.statesDropped = dropped
        }
        outlet.reportMetrics()
    }

    // MARK: Steps

    /// Sends a step as `stepperID`; `kept`: the sequence the store saved it with.
    private func sendStep(
        stepperID: String, name: String, params: WireParams, trace: TraceContext?, kept: UInt64? = nil
    ) {
        let stepper: HostStepOutlet
        if let existing = steppers[stepperID] {
            stepper = existing
        } else {
            do {
                if let kept, let source = keptSteppers[stepperID]?.source {
                    stepper = try HostStepOutlet(
                        stepperID: stepperID, sourceID: source, continuingAfter: kept - 1,
                        endpoints: settings.stepIngress, contentType: settings.contentType, curve: settings.curve,
                        heartbeatMilliseconds: settings.heartbeat.wholeMilliseconds, context: context, logger: logger)
                } else {
                    stepper = try HostStepOutlet(
                        stepperID: stepperID, sourceSuffix: Self.sourceSuffix(settings.sourceID),
                        endpoints: settings.stepIngress, contentType: settings.contentType, curve: settings.curve,
                        heartbeatMilliseconds: settings.heartbeat.wholeMilliseconds, context: context, logger: logger)
                }
            } catch {
                outlet.count { $0.stepsDropped += 1 }
                logger.error(
                    "cannot connect stepper \(stepperID) to \(FlowBusConfig.either(settings.stepIngress)): \(error)")
                return
            }
            steppers[stepperID] = stepper
        }
        let sent =
            if let kept {
                stepper.sendKept(name: name, params: params, trace: trace, sequence: kept, logger: logger)
            } else {
                stepper.send(name: name, params: params, trace: trace, logger: logger)
            }
        if sent {
            outlet.count { $0.stepsSent += 1 }
            logger.info("step \(MessageFormatter.step(name, params)) published as \(stepperID)")
        } else {
            outlet.count { $0.stepsDropped += 1 }
        }
    }
}
