import FlowBusWire
import Flows
import Foundation
import Logging
import ZeroMQ

/// The coordinator's serial heart: applies ingress batches to the ``FlowCoordinator`` and
/// publishes every event, command and diagnostic it produces.
@FlowActor
final class StepRouter {
    private let coordinator: FlowCoordinator
    private let publisher: EventPublisher
    private let ingress: IngressLoop
    private let logger: Logger
    private let started = Date()
    private let heartbeatInterval: Duration

    init(context: Context, config: FlowBusConfig, sourceID: String, ingress: IngressLoop, logger: Logger) throws {
        publisher = try EventPublisher(
            context: context, endpoint: config.endpoints.events, limits: config.limits, curve: config.curve, sourceID: sourceID, logger: logger)
        coordinator = FlowCoordinator()
        self.ingress = ingress
        self.logger = logger
        heartbeatInterval = .milliseconds(config.heartbeatMilliseconds)
        coordinator.onEvent = { [weak self] event in self?.publish(event) }
    }

    func close() {
        publisher.close()
    }

    func start(_ root: CoordinatorService.RootFactory) async {
        guard let (flow, stepper) = root() else {
            logger.warning("no root flow: name one under 'coordinator: { flow: NAME, step: FIRST_STEP }' in the config")
            return
        }
        await coordinator.coordinate(flow: flow, with: stepper)
    }

    func consume(_ batches: AsyncStream<[IngressItem]>) async {
        for await batch in batches {
            publisher.drainSubscriptions()
            for item in batch { await apply(item) }
            publisher.drainSubscriptions()
            ingress.batchProcessed()
        }
    }

    func heartbeat() async {
        while !Task.isCancelled {
            // Subscriptions first: a subscriber that sees this heartbeat is known from now on.
            publisher.drainSubscriptions()
            publisher.publish(Heartbeat(envelope: publisher.envelope(.heartbeat)))
            publisher.drainSubscriptions()
            try? await Task.sleep(for: heartbeatInterval)
        }
    }

    /// Applies one item completely before the next: a remote step is gated against the tree as
    /// every earlier step left it, whatever the batching.
    private func apply(_ item: IngressItem) async {
        switch item {
        case .step(let stepperID, let step, let frames):
            publisher.publish(frames: frames)
            _ = await coordinator.receive(step, from: stepperID)
        case .deepLink(let step, let frames):
            publisher.publish(frames: frames)
            _ = await coordinator.navigate(to: step)
        case .report(let presentableID, let event):
            coordinator.report(RendererReport(event), for: presentableID)
        case .status(let routingID):
            answerStatus(to: routingID)
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

    private func publish(_ event: CoordinatorEvent) {
        switch event {
        case .willNavigate(let navigation), .didNavigate(let navigation):
            let phase: NavigationPhase
            if case .willNavigate = event { phase = .will } else { phase = .did }
            let (name, params) = canonical(navigation.step)
            if phase == .did {
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
                "duplicates": .int(Int64(counters.duplicates)),
                "refused": .map(Dictionary(uniqueKeysWithValues: counters.refused.map { ($0.key.rawValue, WireValue.int(Int64($0.value))) })),
            ]),
            "events": .map([
                "published": .int(Int64(publisher.published)), "dropped_hwm": .int(Int64(publisher.dropped)),
                "unsubscribed": .int(Int64(publisher.unwanted)),
            ]),
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
