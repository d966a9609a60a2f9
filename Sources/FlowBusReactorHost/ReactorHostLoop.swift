import FlowBusClient
import FlowBusConfiguration
import FlowBusDaemon
import FlowBusProtocol
import FlowBusWire
import Foundation
import Logging
import Reactors
import Synchronization
import ZeroMQ

/// The thread that owns every socket of a reactor host: the `actions` ROUTER, the `states` XPUB
/// and one DEALER per stepper id its reactors publish as.
///
/// Actions are decoded on this thread and handed to their ``HostedReactor`` at once (no task, no
/// stream hop: the store's drain runs the synchronous part of the action right here). States come
/// back through the ``ReactorHostOutlet`` in each store's serial context and are published by this
/// thread, which also keeps the latest published state of every reactor and answers snapshot
/// requests from it: a snapshot with sequence N is always the last state of that reactor that
/// went to the `states` socket, so every later state follows it on the socket (Clone pattern).
package final class ReactorHostLoop: Sendable {
    package struct Settings: Sendable {
        package var hostName: String
        package var spec: FlowBusConfig.ReactorHostSpec
        /// flowd's ingress on each of its instances: the active one gets the hosted steppers' steps.
        package var stepIngress: [String]
        package var limits: FlowBusConfig.Limits
        package var heartbeat: Duration
        package var contentType: ContentType
        package var sourceID: String
        /// How long a graceful stop waits for in-flight actions to finish (their asynchronous
        /// mutations reduced, published and saved) before the reactors are shut down.
        package var drain: Duration = .seconds(2)
        /// CURVE keys for tcp endpoints: a server key makes the host admit only allowed clients.
        package var curve = CurveKeys()
    }

    package let settings: Settings
    package let registry: ReactorRegistry
    package let outlet: ReactorHostOutlet
    package let logger: Logger
    private let stopping = Atomic<Bool>(false)
    private let graceful = Atomic<Bool>(false)
    private let finished = ReadinessSignal()

    /// Messages drained from the ROUTER before the loop publishes and acknowledges.
    package static let maxBatchSize = 256

    package init(settings: Settings, registry: ReactorRegistry, outlet: ReactorHostOutlet, logger: Logger) {
        self.settings = settings
        self.registry = registry
        self.outlet = outlet
        self.logger = logger
    }

    package var isStopping: Bool { stopping.load(ordering: .acquiring) }

    /// Starts the thread; returns once the endpoints are bound and the exact reactors created.
    /// - Throws: when an endpoint cannot be bound.
    package func start() async throws {
        try await withCheckedThrowingContinuation { (started: CheckedContinuation<Void, any Error>) in
            let thread = Thread { [self] in
                defer { finished.signal() }
                outlet.ioThreadStarted()
                let io: ReactorHostIO
                do {
                    io = try ReactorHostIO(loop: self)
                } catch {
                    started.resume(throwing: error)
                    return
                }
                io.createExactReactors()
                started.resume()
                io.run()
                io.close()
            }
            thread.name = "reactor-host-io"
            thread.start()
        }
    }

    /// Asks the thread to stop; it shuts the reactors down and closes its sockets. A graceful
    /// stop first deals with queued messages and waits (up to `settings.drain`) for in-flight
    /// actions to finish.
    package func requestStop(graceful: Bool) {
        if graceful { self.graceful.store(true, ordering: .releasing) }
        stopping.store(true, ordering: .releasing)
        outlet.wake.signal()
    }

    package var isGraceful: Bool { graceful.load(ordering: .acquiring) }

    /// Returns once the thread has closed its sockets.
    package func waitUntilFinished() async {
        await finished.wait()
    }
}

/// A snapshot request waiting for the first state of a reactor created for it.
private struct PendingSnapshot {
    package var routingID: [UInt8]
}

/// The thread-confined part of the loop: sockets, reactor instances, latest states.
private final class ReactorHostIO {
    private let loop: ReactorHostLoop
    private let settings: ReactorHostLoop.Settings
    private let logger: Logger
    private let outlet: ReactorHostOutlet
    private let context: Context
    private let authenticator: ZAPHandler?
    private let actions: Socket
    private let states: BusPublisher
    private let poller = Poller()
    private let wakeIndex: Int
    private var instances: [String: HostedReactor] = [:]
    private var latest: [String: (sequence: UInt64, state: WireValue)] = [:]
    private var pendingSnapshots: [String: [PendingSnapshot]] = [:]
    private var steppers: [String: HostStepOutlet] = [:]
    private var intake: Intake
    /// Acks of what was dealt with, held back until the batch's states and sources are saved.
    private var heldAcks: [Intake.Ack] = []
    /// The last sequence dealt with per source, not saved yet (a host that persists).
    private var unsavedSources: [String: UInt64] = [:]
    private let database: ReactorStateDatabase?
    /// Saved states not yet handed to their reactor (consumed when the reactor is created).
    private var saved: [String: PersistedReactorState] = [:]
    /// The sequence saved last per persisted reactor.
    private var savedSequence: [String: UInt64] = [:]
    private var persistedIDs: [String: Bool] = [:]
    /// The sequence of what the host sends on `actions` (acks, refusals, heartbeat answers).
    private var actionsSequence: UInt64 = 0
    private let wireLimits: WireLimits
    private var received = RoutedFrames()
    private var scratch = FrameBuffer()
    private var nextHeartbeat = ContinuousClock.now

    package init(loop: ReactorHostLoop) throws {
        self.loop = loop
        settings = loop.settings
        logger = loop.logger
        outlet = loop.outlet
        wireLimits = WireLimits(maxFrameBytes: settings.limits.maxMessageBytes)
        if let spec = settings.spec.persistence {
            let database = try ReactorStateDatabase(spec: spec)
            let loaded = try database.load()
            self.database = database
            saved = loaded.states
            savedSequence = loaded.states.mapValues(\.sequence)
            intake = Self.makeIntake(settings, database: database, logger: loop.logger)
            logger.info(
                "reactor state database \(database.path) open",
                metadata: [
                    "states": "\(loaded.states.count)", "sources": "\(loaded.sources)",
                ])
        } else {
            database = nil
            intake = Self.makeIntake(settings, database: nil, logger: loop.logger)
        }
        context = try Context(defaultLinger: 0)
        // The ZAP handler must exist before any CURVE socket binds: without it CURVE admits everyone.
        if settings.curve.requiresAuthentication {
            let outlet = self.outlet
            authenticator = try ZAPHandler(context: context, policy: settings.curve.decide) { request, decision in
                guard case .deny(let reason) = decision else { return }
                outlet.push(.unauthorized(address: request.address, reason: reason))
            }
        } else {
            authenticator = nil
        }
        actions = try context.socket(.router)
        try actions.setOptions([
            // Frames between the configured limit and this ceiling are refused as `oversize` with a
            // diagnostic; only larger ones are cut off by libzmq before they are allocated.
            .maxMessageSize(settings.limits.socketCeiling),
            .receiveHighWaterMark(Int32(clamping: settings.limits.highWaterMark)),
            .sendHighWaterMark(Int32(clamping: settings.limits.highWaterMark)),
            // The last acks of a graceful stop still go out.
            .linger(200),
        ])
        try settings.curve.secureServer(actions, endpoint: settings.spec.actions)
        try prepareToBind(settings.spec.actions, what: "reactors.\(settings.hostName).actions")
        try actions.bind(settings.spec.actions)
        restrictPermissions(ofIPCEndpoint: settings.spec.actions)
        states = try BusPublisher(
            context: context, name: "states", endpoint: settings.spec.states, limits: settings.limits,
            curve: settings.curve,
            sourceID: settings.sourceID, contentType: settings.contentType, logger: logger)
        try states.bind()
        try poller.add(actions)
        try poller.add(states.socket)
        wakeIndex = poller.add(fileDescriptor: outlet.wake.fileDescriptor)
    }

    /// The host's receiving ledger. Its state database keeps sources for a retention period, not
    /// for ever, so a source found nowhere is adopted at its first sequence; one it holds (across
    /// a restart, or after being forgotten in memory) is looked up there.
    private static func makeIntake(
        _ settings: ReactorHostLoop.Settings, database: ReactorStateDatabase?, logger: Logger
    ) -> Intake {
        var lookUp: (@Sendable (String) throws -> UInt64?)?
        if let database {
            lookUp = { @Sendable (source: String) throws -> UInt64? in
                do {
                    return try database.lastSequence(of: source)
                } catch {
                    logger.error(
                        "cannot read source \(source) from \(database.path): \(error); its message waits for a resend")
                    throw error
                }
            }
        }
        return Intake(
            endpoint: "actions",
            policy: .init(
                remembersSources: false, deadAfter: settings.heartbeat * 3,
                idleTimeout: .seconds(settings.limits.sourceIdleSeconds), maxSources: settings.limits.maxSources,
                lookUp: lookUp),
            defaultRole: "view")
    }

    /// Hands the counters to swift-metrics, with the `states` publisher's drops.
    private func reportMetrics() {
        let dropped = states.counters.dropped
        outlet.count { $0.statesDropped = dropped }
        outlet.reportMetrics()
    }

    package func createExactReactors() {
        for reactorID in loop.registry.exactIDs {
            _ = instance(for: reactorID)
        }
        flushOutbox()
        for (reactorID, state) in saved where loop.registry.registration(for: reactorID) == nil {
            logger.warning(
                "the state database has a state of \(reactorID) (sequence \(state.sequence)), which this host does not run"
            )
        }
    }

    package func run() {
        while !loop.isStopping {
            let wait = ContinuousClock.now.duration(to: nextHeartbeat)
            let milliseconds = max(0, wait.wholeMilliseconds)
            do {
                try poller.poll(timeout: milliseconds)
            } catch {
                if !error.isContextTerminated { logger.error("reactor host poll failed: \(error)") }
                return
            }
            if poller.isReadable(wakeIndex) { outlet.wake.clear() }
            if loop.isStopping { break }
            if flushOutbox() { sendAcks() }
            do {
                try receiveBatch()
            } catch {
                if !error.isContextTerminated { logger.error("reactor host receive failed: \(error)") }
                return
            }
            for stepper in steppers.values { stepper.service(now: .now, logger: logger) }
            reportMetrics()
            heartbeatIfDue()
        }
        if loop.isGraceful { drainForStop() }
    }

    private func heartbeatIfDue() {
        guard ContinuousClock.now >= nextHeartbeat else { return }
        states.reportDrops(
            why: "a view is too slow; views resynchronise from a snapshot on a gap",
            details: ["host": .string(settings.hostName)])
        states.publish(Heartbeat(envelope: states.envelope(.heartbeat, carriesValues: false)))
        nextHeartbeat = ContinuousClock.now + settings.heartbeat
        // A source whose entry is not saved yet stays: forgotten, its resend would be judged by
        // the database's older entry.
        intake.forgetSources(now: .now) { unsavedSources[$0] != nil }
    }

    /// A graceful stop (SIGTERM): deals with the messages already queued on `actions` (applied and
    /// acknowledged), then waits up to `settings.drain` for the actions' asynchronous mutations to
    /// finish, publishing and saving their states as they come. Messages arriving meanwhile are not
    /// read: they are not acknowledged, so their senders resend them to the next host.
    private func drainForStop() {
        let deadline = ContinuousClock.now + settings.drain
        do {
            while ContinuousClock.now < deadline, try receiveBatch() > 0 {}
        } catch {
            if !error.isContextTerminated { logger.error("reactor host receive failed while stopping: \(error)") }
            return
        }
        while ContinuousClock.now < deadline, instances.values.contains(where: \.hasWorkInFlight) {
            let left = ContinuousClock.now.duration(to: deadline)
            let milliseconds = max(1, min(20, left.wholeMilliseconds))
            do {
                try poller.poll(timeout: milliseconds)
            } catch {
                return
            }
            if poller.isReadable(wakeIndex) { outlet.wake.clear() }
            if flushOutbox() { sendAcks() }
            states.drainSubscriptions()
            heartbeatIfDue()
        }
        let unfinished = instances.values.filter(\.hasWorkInFlight).map(\.reactorID).sorted()
        if !unfinished.isEmpty {
            logger.warning(
                "stopping with work in flight after \(settings.drain): \(unfinished.joined(separator: ", ")) (their last states are saved; the rest of that work is lost)"
            )
        }
    }

    package func close() {
        for instance in instances.values { instance.shutdown() }
        // Steps already produced still go out (the stepper sockets linger); states are saved.
        if flushOutbox() { sendAcks() }
        instances.removeAll()
        actions.close()
        states.close()
        for stepper in steppers.values { stepper.close() }
        steppers.removeAll()
        authenticator?.stop()
        outlet.count { $0.reactors = 0 }
        reportMetrics()
    }

    // MARK: Receiving

    /// Reads and deals with up to a batch of messages; returns how many.
    @discardableResult
    private func receiveBatch() throws(ZMQError) -> Int {
        // A subscriber that saw a heartbeat is known before any action that follows it is routed.
        states.drainSubscriptions()
        var count = 0
        while count < ReactorHostLoop.maxBatchSize, try actions.receive(into: &received, mode: .nonBlocking) {
            count += 1
            route()
        }
        guard count > 0 else { return 0 }
        endBatch()
        // Acknowledge once the batch is dealt with and saved (its states and de-duplication
        // entries in one transaction); diagnostics to a peer went out before. The metrics count
        // an action before its sender hears it was acknowledged.
        if flushOutbox() {
            reportMetrics()
            sendAcks()
        }
        return count
    }

    /// Ends the batch in the intake: refusals and heartbeat answers go out now; acks wait for
    /// the save (``sendAcks()``).
    private func endBatch() {
        let end = intake.endBatch(now: .now, checkEvery: settings.heartbeat)
        for (peer, refusal) in end.refusals { refuse(refusal, to: peer) }
        for behind in end.ledgerBehind { refuseBehind(behind) }
        for peer in end.heartbeatAnswers {
            actionsSequence += 1
            reply(
                Heartbeat(
                    envelope: Envelope(
                        kind: .heartbeat, sequence: actionsSequence, messageID: .none, source: settings.sourceID)),
                to: peer)
        }
        if database != nil { unsavedSources.merge(end.dealtWith) { max($0, $1) } }
        heldAcks += end.acks
    }

    /// Sends the acks of what was dealt with (held back while saving fails).
    private func sendAcks() {
        for ack in heldAcks {
            actionsSequence += 1
            let message = Ack(
                envelope: Envelope(kind: .ack, sequence: actionsSequence, messageID: .none, source: settings.sourceID),
                acknowledgedSource: ack.source, acknowledgedSequence: ack.sequence)
            reply(message, to: ack.peer)
        }
        heldAcks.removeAll(keepingCapacity: true)
    }

    private func isPersisted(_ reactorID: String) -> Bool {
        guard let spec = settings.spec.persistence else { return false }
        if let known = persistedIDs[reactorID] { return known }
        let persisted = spec.persists(reactorID)
        persistedIDs[reactorID] = persisted
        return persisted
    }

    private func route() {
        outlet.count { $0.received += 1 }
        let frames = received.frames
        let routingID = received.routingID
        let header: RoutedHeader
        do {
            header = try RoutedHeader.decode(from: frames, limits: wireLimits)
        } catch {
            if let refusal = intake.refuse(error, frames: frames, peer: routingID, limits: wireLimits) {
                refuse(refusal, to: routingID)
            }
            return
        }
        let envelope = header.envelope
        if header.kind == .heartbeat {
            intake.heartbeat(source: envelope.source, sequence: envelope.sequence, topic: header.topic, peer: routingID)
            return
        }
        switch intake.receive(
            source: envelope.source, sequence: envelope.sequence, topic: header.topic, peer: routingID)
        {
        case .fresh:
            break
        case .duplicate:
            // A resend whose first copy got through: acknowledged again, not applied, no refusal.
            outlet.count { $0.duplicates += 1 }
            return
        case .outOfOrder:
            // Reported once per source with the batch's end (``endBatch()``).
            outlet.count { $0.outOfOrder += 1 }
            return
        case .ledgerUnavailable, .ledgerBehind:
            // A sender ahead of the state database is refused with the batch's end.
            return
        case .unnumbered:
            refuse(
                .malformed, "\(header.kind) with sequence 0: only a heartbeat may be unnumbered", routingID: routingID,
                header: header)
            return
        }
        do {
            switch header.kind {
            case .action:
                let view = try NamedMessageView.decode(from: frames, header: header, limits: wireLimits)
                let params = try view.params.decodeParams()
                let reactorID = String(header.topicID)
                guard let instance = instance(for: reactorID) else {
                    refuse(
                        .unknownReactor, "no reactor \(reactorID) on reactor host \(settings.hostName)",
                        routingID: routingID, header: header)
                    return
                }
                do {
                    try instance.send(name: view.name, params: params)
                    outlet.count { $0.actionsApplied += 1 }
                    // Observers (`flowctl record`, audits) see each applied action, as received.
                    states.publish(frames: frames)
                } catch {
                    refuse(error.reason, error.detail, routingID: routingID, header: header)
                }
            case .snapshotRequest:
                _ = try WireMessage.decode(from: frames, header: header)
                let reactorID = String(header.topicID)
                guard instance(for: reactorID) != nil else {
                    refuse(
                        .unknownReactor, "no reactor \(reactorID) on reactor host \(settings.hostName)",
                        routingID: routingID, header: header)
                    return
                }
                answerSnapshot(reactorID, to: routingID)
            default:
                refuse(
                    .unknownKind,
                    "a reactor host's actions endpoint accepts action, snapshotRequest and heartbeat, not \(header.kind)",
                    routingID: routingID, header: header)
            }
        } catch {
            refuse(error.reason, error.detail, routingID: routingID, header: header)
        }
    }

    /// The running instance for `reactorID`, created from its registration on first use.
    private func instance(for reactorID: String) -> HostedReactor? {
        if let instance = instances[reactorID] { return instance }
        guard let (registration, familyPrefix) = loop.registry.registration(for: reactorID) else { return nil }
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

    private func answerSnapshot(_ reactorID: String, to routingID: [UInt8]) {
        // Publish what is queued first, so the answer is as fresh as possible; correctness does
        // not depend on it: the answer is the latest *published* state.
        flushOutbox()
        guard let current = latest[reactorID] else {
            // A reactor just created whose first state is not out yet: answered when it is.
            pendingSnapshots[reactorID, default: []].append(PendingSnapshot(routingID: routingID))
            return
        }
        let message = SnapshotMessage(
            reactorID: reactorID,
            envelope: Envelope(
                kind: .snapshot, contentType: settings.contentType, sequence: current.sequence, messageID: .none,
                source: settings.sourceID),
            state: current.state)
        reply(message, to: routingID)
        outlet.count { $0.snapshotsAnswered += 1 }
    }

    // MARK: Publishing

    /// Saves, then publishes, what the reactors produced, with the de-duplication entries of the
    /// messages dealt with so far: one transaction. A persisted reactor's state is saved before it
    /// goes to the `states` socket, so no view ever sees a state a restarted host does not have.
    /// - Returns: false when saving failed (the acks are then held back; the states are still
    ///   published, and the failure is logged, counted and published as `persistence-failed`).
    @discardableResult
    private func flushOutbox() -> Bool {
        let items = outlet.take()
        let durable = save(items)
        guard !items.isEmpty else { return durable }
        var published = 0
        var unsubscribed = 0
        for item in items {
            switch item {
            case .state(let reactorID, let sequence, let state):
                latest[reactorID] = (sequence, state)
                let message = StateMessage(
                    reactorID: reactorID,
                    envelope: Envelope(
                        kind: .state, contentType: settings.contentType, sequence: sequence, messageID: .none,
                        source: settings.sourceID),
                    state: state)
                let unwantedBefore = states.counters.unwanted
                if publish(message) {
                    published += 1
                } else if states.counters.unwanted > unwantedBefore {
                    unsubscribed += 1
                }
                if let waiting = pendingSnapshots.removeValue(forKey: reactorID) {
                    for request in waiting { answerSnapshot(reactorID, to: request.routingID) }
                }
            case .unencodableState(let reactorID, let sequence, let detail):
                outlet.count { $0.statesUnencodable += 1 }
                let text = "state \(sequence) of \(reactorID) cannot be encoded: \(detail)"
                logger.error("\(text)")
                publishDiagnostic(
                    "bad-state", text,
                    details: ["topic": .string(Topic.state(reactorID)), "sequence": .int(Int64(clamping: sequence))])
            case .step(let stepperID, let name, let params):
                sendStep(stepperID: stepperID, name: name, params: params)
            case .unauthorized(let address, let reason):
                outlet.count { $0.refused[.unauthorized, default: 0] += 1 }
                let text = "connection from \(address) refused: \(reason)"
                logger.warning("\(text)")
                publishDiagnostic(
                    .unauthorized, text, details: ["endpoint": "zap", "host": .string(settings.hostName)])
            }
        }
        if published > 0 || unsubscribed > 0 {
            outlet.count {
                $0.statesPublished += published
                $0.statesUnsubscribed += unsubscribed
            }
        }
        return durable
    }

    /// Saves the last state of each persisted reactor among `items` and the changed
    /// de-duplication entries, in one transaction.
    private func save(_ items: [ReactorHostOutboxItem]) -> Bool {
        guard let database else { return true }
        var states: [String: (sequence: UInt64, state: WireValue)] = [:]
        for case .state(let reactorID, let sequence, let state) in items
        where isPersisted(reactorID) && savedSequence[reactorID].map({ sequence > $0 }) ?? true {
            states[reactorID] = (sequence, state)
        }
        let sources = unsavedSources
        guard !states.isEmpty || !sources.isEmpty else { return true }
        do {
            try database.save(states: states.map { ($0.key, $0.value.sequence, $0.value.state) }, sources: sources)
            for (reactorID, state) in states { savedSequence[reactorID] = state.sequence }
            outlet.count { $0.saves += 1 }
            unsavedSources.removeAll(keepingCapacity: true)
            return true
        } catch {
            let failures = outlet.counters.withLock { counters in
                counters.saveFailures += 1
                return counters.saveFailures
            }
            let text = "cannot save reactor states to \(database.path): \(error) (acks held back until a save succeeds)"
            if failures == 1 || failures % 1000 == 0 {
                logger.error("\(text)")
                publishDiagnostic(.persistenceFailed, text, details: ["host": .string(settings.hostName)])
            }
            return false
        }
    }

    /// Sends a message on the `states` socket; false when it was not sent.
    @discardableResult
    private func publish(_ message: some WireMessageEncodable) -> Bool {
        states.publish(message)
    }

    /// Sends a message to one peer of the `actions` socket.
    private func reply(_ message: some WireMessageEncodable, to routingID: [UInt8]) {
        actions.send(message, to: routingID, using: &scratch, logger: logger)
    }

    private func refuse(_ reason: DiagnosticReason, _ detail: String, routingID: [UInt8], header: RoutedHeader) {
        refuse(Refusal(reason, detail, endpoint: "actions", header: header), to: routingID)
    }

    /// Counts, logs and publishes a refusal; its sender hears it too, before the ack that covers it.
    private func refuse(_ refusal: Refusal, to peer: [UInt8]) {
        var refusal = refusal
        refusal.extra["host"] = .string(settings.hostName)
        outlet.count { $0.refused[refusal.reason, default: 0] += 1 }
        logger.warning(
            "refused message: \(refusal.reason): \(refusal.detail)", metadata: ["source": "\(refusal.source ?? "?")"])
        publish(refusal.diagnostic(states.envelope(.diagnostic)))
        actionsSequence += 1
        reply(
            refusal.diagnostic(
                Envelope(
                    kind: .diagnostic, contentType: settings.contentType, sequence: actionsSequence, messageID: .none,
                    source: settings.sourceID)), to: peer)
    }

    /// A view ahead of the state database: told each time, logged and published once per source.
    private func refuseBehind(_ behind: Intake.LedgerBehind) {
        var refusal = behind.refusal
        refusal.extra["host"] = .string(settings.hostName)
        if behind.isFirstReport {
            logger.error("\(refusal.reason): \(refusal.detail)", metadata: ["source": "\(behind.source)"])
            publish(refusal.diagnostic(states.envelope(.diagnostic)))
        }
        guard !behind.adopted else { return }
        outlet.count { $0.refused[refusal.reason, default: 0] += refusal.extra["count"]?.intValue.map(Int.init) ?? 1 }
        actionsSequence += 1
        reply(
            refusal.diagnostic(
                Envelope(
                    kind: .diagnostic, contentType: settings.contentType, sequence: actionsSequence, messageID: .none,
                    source: settings.sourceID)), to: behind.peer)
    }

    private func publishDiagnostic(_ reason: DiagnosticReason, _ detail: String, details: WireParams) {
        publish(
            DiagnosticMessage(
                envelope: states.envelope(.diagnostic), reason: reason, message: detail,
                details: details))
    }

    // MARK: Steps

    private func sendStep(stepperID: String, name: String, params: WireParams) {
        let stepper: HostStepOutlet
        if let existing = steppers[stepperID] {
            stepper = existing
        } else {
            do {
                stepper = try HostStepOutlet(
                    stepperID: stepperID, sourceSuffix: String(settings.sourceID.split(separator: "#").last ?? "0"),
                    endpoints: settings.stepIngress, contentType: settings.contentType, curve: settings.curve,
                    heartbeatMilliseconds: settings.heartbeat.wholeMilliseconds,
                    context: context)
            } catch {
                outlet.count { $0.stepsDropped += 1 }
                logger.error(
                    "cannot connect stepper \(stepperID) to \(FlowBusConfig.either(settings.stepIngress)): \(error)")
                return
            }
            steppers[stepperID] = stepper
        }
        if stepper.send(name: name, params: params, logger: logger) {
            outlet.count { $0.stepsSent += 1 }
            logger.info("step \(MessageFormatter.step(name, params)) published as \(stepperID)")
        } else {
            outlet.count { $0.stepsDropped += 1 }
        }
    }
}
