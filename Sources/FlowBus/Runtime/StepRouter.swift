import FlowBusWire
import Flows
import Foundation
import Logging
import ZeroMQ

/// The coordinator's serial heart: applies ingress batches to the ``FlowCoordinator`` and
/// publishes every event, command and diagnostic it produces.
///
/// With a ``StepJournal``, each batch is applied, then committed in one transaction, then its
/// events are published and its acks handed back to the ingress thread: an acknowledged step
/// is on disk, and no observer sees an event of a step a crash could undo.
@FlowActor
final class StepRouter {
    private let coordinator: FlowCoordinator
    private let publisher: EventPublisher
    private let ingress: IngressLoop
    private let logger: Logger
    private let started = Date()
    private let heartbeatInterval: Duration
    private let journal: StepJournal?
    /// False while the journal is replayed: the engine rebuilds its state silently.
    private var isPublishing = true
    private var records: [StepJournal.Record] = []
    private var restoredEntries = 0
    private var journaledEntries = 0
    /// flowd's swift-metrics, fed once per batch (see ``CoordinatorMetrics``).
    private let metrics = CoordinatorMetrics()
    /// The Prometheus text status replies carry, and where it is served.
    private var exposition: MetricsExposition?
    private var metricsAddress: String?

    init(context: Context, config: FlowBusConfig, sourceID: String, ingress: IngressLoop, journal: StepJournal?, logger: Logger) throws {
        self.journal = journal
        publisher = try EventPublisher(
            context: context, endpoint: config.endpoints.events, limits: config.limits, curve: config.curve, sourceID: sourceID, logger: logger)
        coordinator = FlowCoordinator()
        self.ingress = ingress
        self.logger = logger
        heartbeatInterval = .milliseconds(config.heartbeatMilliseconds)
        coordinator.onEvent = { [weak self] event in self?.publish(event) }
    }

    /// Closes the events socket, letting what it still queues leave within `linger` milliseconds.
    func close(linger: Int32 = 200) {
        publisher.close(linger: linger)
    }

    /// The process's Prometheus text, for status replies, and the address serving it.
    func exportMetrics(_ exposition: MetricsExposition?, servedAt address: String?) {
        self.exposition = exposition
        metricsAddress = address
    }

    /// Hands the counts since the last call to swift-metrics.
    private func syncMetrics() {
        metrics.flush(
            ingress: ingress.counters,
            events: .init(published: publisher.published, dropped: publisher.dropped, unwanted: publisher.unwanted))
    }

    /// Starts the root flow, and replays the journal if there is one: the tree, the bindings and
    /// the counters become what they were when the journal was last written, without
    /// publishing anything (the events were published when the steps first happened).
    func start(_ root: CoordinatorService.RootFactory) async throws {
        let entries = try journal?.count() ?? 0
        isPublishing = entries == 0
        defer { isPublishing = true }
        if let (flow, stepper) = root() {
            await coordinator.coordinate(flow: flow, with: stepper)
        } else {
            logger.warning("no root flow: name one under 'coordinator: { flow: NAME, step: FIRST_STEP }' in the config")
        }
        guard let journal, entries > 0 else { return }
        let clock = ContinuousClock()
        let began = clock.now
        var after: Int64 = 0
        while true {
            let page = try journal.entries(after: after, limit: 4096)
            guard let last = page.last else { break }
            for entry in page { await replay(entry) }
            restoredEntries += page.count
            after = last.id
        }
        logger.info("restored \(restoredEntries) journal entries from \(journal.path) in \(began.duration(to: clock.now))")
    }

    private func replay(_ entry: StepJournal.Entry) async {
        let params: WireParams
        do {
            params = try entry.decodeParams()
        } catch {
            logger.error("journal entry \(entry.id) has unreadable params (\(error)); replayed without them")
            params = [:]
        }
        switch entry.kind {
        case .step:
            await coordinator.receive(CanonicalStep(entry.name, params), from: entry.target)
        case .deepLink:
            await coordinator.navigate(to: CanonicalStep(entry.name, params))
        case .report:
            guard let event = PresentableEvent(rawValue: entry.name) else { return }
            coordinator.report(RendererReport(event), for: entry.target)
        }
    }

    /// Applies batches until the ingress loop stops accepting and every batch handed over is
    /// done. Throws if the journal cannot be written: flowd then stops rather than acknowledge
    /// what it could not persist.
    func consume(_ batches: AsyncStream<IngressBatch>) async throws {
        for await batch in batches {
            publisher.drainSubscriptions()
            if journal != nil { publisher.hold() }
            for item in batch.items { await apply(item) }
            var commitTime: Duration?
            if let journal {
                let commitStart = ContinuousClock.now
                do {
                    try await journal.append(records, lastSequences: batch.dealtWith)
                } catch {
                    publisher.discardHeld()
                    logger.critical("cannot write the journal \(journal.path): \(error); stopping without acknowledging the last batch")
                    throw error
                }
                commitTime = commitStart.duration(to: .now)
                journaledEntries += records.count
                records.removeAll(keepingCapacity: true)
                publisher.releaseHeld()
            }
            metrics.batchDone(size: batch.items.count, receivedAt: batch.receivedAt, journal: commitTime)
            syncMetrics()
            ingress.acknowledge(batch.acks)
            publisher.drainSubscriptions()
            ingress.batchProcessed()
        }
    }

    private func record(_ kind: StepJournal.Kind, target: String, name: String, params: WireParams, origin: Origin) {
        guard journal != nil else { return }
        var bytes: [UInt8] = []
        if !params.isEmpty {
            do {
                try FBV.encode(params: params, into: &bytes)
            } catch {
                logger.error("cannot encode the params of \(name) for the journal: \(error)")
            }
        }
        records.append(StepJournal.Record(
            kind: kind, target: target, name: name, params: Data(bytes), source: origin.source, sequence: origin.sequence))
    }

    func heartbeat() async {
        while !Task.isCancelled {
            // Subscriptions first: a subscriber that sees this heartbeat is known from now on.
            publisher.drainSubscriptions()
            publisher.reportDrops()
            publisher.publish(Heartbeat(envelope: publisher.envelope(.heartbeat)))
            publisher.drainSubscriptions()
            syncMetrics()
            try? await Task.sleep(for: heartbeatInterval)
        }
    }

    /// Applies one item completely before the next: a remote step is gated against the tree as
    /// every earlier step left it, whatever the batching.
    private func apply(_ item: IngressItem) async {
        switch item {
        case .step(let stepperID, let step, let frames, let origin):
            record(.step, target: stepperID, name: step.name, params: step.params, origin: origin)
            publisher.publish(frames: frames)
            applying = (origin, Topic.step(stepperID))
            metrics.step(await coordinator.receive(step, from: stepperID))
            applying = nil
        case .deepLink(let step, let frames, let origin):
            record(.deepLink, target: "", name: step.name, params: step.params, origin: origin)
            publisher.publish(frames: frames)
            applying = (origin, Topic.deepLink(step.name))
            metrics.deepLink(await coordinator.navigate(to: step))
            applying = nil
        case .report(let presentableID, let event, let origin):
            record(.report, target: presentableID, name: event.rawValue, params: [:], origin: origin)
            metrics.report()
            coordinator.report(RendererReport(event), for: presentableID)
        case .status(let routingID):
            answerStatus(to: routingID)
        case .peerDead(let source, let silentFor, let role):
            let milliseconds = Int64(silentFor.wholeMilliseconds)
            publisher.publish(DiagnosticMessage(
                envelope: publisher.envelope(.diagnostic), reason: .peerDead,
                message: "\(role) \(source) sent nothing for \(milliseconds) ms (its heartbeats stopped)",
                details: ["source": .string(source), "silent_ms": .int(milliseconds), "role": .string(role)]))
        case .refused(let refusal):
            var details: WireParams = ["endpoint": .string(refusal.endpoint)]
            if let source = refusal.source { details["source"] = .string(source) }
            if let topic = refusal.topic { details["topic"] = .string(topic) }
            if let sequence = refusal.sequence { details["sequence"] = .int(Int64(clamping: sequence)) }
            logger.warning("refused message: \(refusal.reason): \(refusal.detail)", metadata: ["source": "\(refusal.source ?? "?")"])
            publisher.publish(DiagnosticMessage(
                envelope: publisher.envelope(.diagnostic), reason: refusal.reason, message: refusal.detail, details: details))
        }
    }

    /// The message being applied, while the engine handles it.
    private var applying: (origin: Origin, topic: String)?

    private func publish(_ event: CoordinatorEvent) {
        guard isPublishing else { return }
        switch event {
        case .willNavigate(let navigation), .didNavigate(let navigation):
            let phase: NavigationPhase
            if case .willNavigate = event { phase = .will } else { phase = .did }
            let (name, params) = canonical(navigation.step)
            if phase == .did {
                metrics.didNavigate(flow: navigation.flow.name)
                logger.debug("did navigate flow=\(navigation.flow.name) step=\(describeStep(navigation.step))")
            }
            publisher.publish(NavigationEventMessage(
                phase: phase, envelope: publisher.envelope(phase == .will ? .willNavigate : .didNavigate),
                flow: navigation.flow.name, stepName: name, params: params, presentableID: navigation.presentableID))
        case .command(let command):
            guard let message = wireCommand(command) else { return }
            publisher.publish(message)
        case .diagnostic(let diagnostic):
            var details: WireParams = [:]
            if let stepper = diagnostic.stepperID { details["stepper"] = .string(stepper) }
            if let flow = diagnostic.flow { details["flow"] = .string(flow.name) }
            if let presentable = diagnostic.presentableID { details["presentable"] = .string(presentable) }
            if let step = diagnostic.step { details["step"] = .string(describeStep(step)) }
            // Name the message that caused it, so its sender can match the refusal to its step.
            if let (origin, topic) = applying {
                details["source"] = .string(origin.source)
                details["sequence"] = .int(Int64(clamping: origin.sequence))
                details["topic"] = .string(topic)
            }
            logger.notice("\(diagnostic.reason): \(diagnostic.message)")
            publisher.publish(DiagnosticMessage(
                envelope: publisher.envelope(.diagnostic), reason: diagnostic.reason, message: diagnostic.message, details: details))
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
            envelope: publisher.envelope(.navigationCommand, contentType: .none), flow: command.flow?.name ?? "coordinator",
            verb: verb, target: command.target, container: container, presentableKind: command.kind)
    }

    private func answerStatus(to routingID: [UInt8]) {
        let reply = StatusReply(envelope: publisher.envelope(.statusReply, contentType: .json), status: status())
        do {
            ingress.send(control: try reply.encoded(), to: routingID)
        } catch {
            logger.error("cannot encode status: \(error)")
        }
    }

    /// The live tree, bindings and counters, as the status query returns them.
    func status() -> WireParams {
        syncMetrics()
        let snapshot = coordinator.snapshot()
        let counters = ingress.counters
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
                "dropped": .map(Dictionary(uniqueKeysWithValues: counters.dropped.map { ($0.key.rawValue, WireValue.int(Int64($0.value))) })),
            ])
        }
        return [
            "uptime_s": .double(Date().timeIntervalSince(started)),
            "flows": .list(snapshot.flows.map { flow in
                .map([
                    "id": .string(flow.id.description), "name": .string(flow.id.name),
                    "parent": flow.parent.map { .string($0.description) } ?? .null,
                    "ready": .bool(flow.isReady), "root": tree(flow.root),
                ])
            }),
            "bindings": .list(snapshot.bindings.map { binding in
                .map([
                    "stepper": .string(binding.stepperID), "flow": .string(binding.flow.description),
                    "presentable": .string(binding.presentableID), "remote": .bool(binding.isRemote),
                    "allowStepWhenNotPresented": .bool(binding.allowStepWhenNotPresented),
                    "allowStepWhenDismissed": .bool(binding.allowStepWhenDismissed),
                ])
            }),
            "steppers": .map(snapshot.steppers.mapValues(counts)),
            "totals": counts(snapshot.totals),
            "ingress": .map([
                "received": .int(Int64(counters.received)), "accepted": .int(Int64(counters.accepted)),
                "duplicates": .int(Int64(counters.duplicates)), "out_of_order": .int(Int64(counters.outOfOrder)),
                "refused": .map(Dictionary(uniqueKeysWithValues: counters.refused.map { ($0.key.rawValue, WireValue.int(Int64($0.value))) })),
            ]),
            "peers": .map(Dictionary(uniqueKeysWithValues: ingress.liveness.map { source, peer in
                let silent = ContinuousClock.now - peer.lastHeard
                return (source, WireValue.map([
                    "alive": .bool(!peer.isDead), "heartbeats": .bool(peer.sendsHeartbeats),
                    "silent_ms": .int(Int64(silent.wholeMilliseconds)), "role": .string(peer.role),
                ]))
            })),
            "events": .map([
                "published": .int(Int64(publisher.published)), "dropped_hwm": .int(Int64(publisher.dropped)),
                "unsubscribed": .int(Int64(publisher.unwanted)),
            ]),
            "metrics": metrics.status(endpoint: metricsAddress, exposition: exposition),
            "journal": journal.map { journal in
                .map([
                    "path": .string(journal.path), "restored": .int(Int64(restoredEntries)),
                    "appended": .int(Int64(journaledEntries)),
                ])
            } ?? .null,
        ]
    }
}

extension RendererReport {
    init(_ event: PresentableEvent) {
        switch event {
        case .appeared: self = .appeared
        case .disappeared: self = .disappeared
        case .dismissed: self = .dismissed
        }
    }
}
