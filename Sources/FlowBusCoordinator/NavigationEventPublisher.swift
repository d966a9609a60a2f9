import FlowBusDaemon
import FlowBusProtocol
import FlowBusWire
import Flows
import Logging

/// The message the engine is applying, while it does: a diagnostic the engine makes names it, and
/// a step a flow passes through is published with the FBV params frame it arrived with.
struct MessageBeingApplied {
    var origin: Origin
    var topic: String
    var step: CanonicalStep?
    var params: WirePayload?
    /// What the events it causes carry: the context of its `process` span, or when flowd does not
    /// trace it, the context it arrived with.
    var trace: TraceContext?
    /// Its spans, when flowd traces.
    var spans: StepSpans?
}

/// Writes what the ``FlowCoordinator`` emits on flowd's `events` endpoint: will/didNavigate with
/// the step's wire name and params, navigation commands, and the engine's diagnostics — a refusal
/// of the message being applied named as every refusal is (``Refusal``), so that its sender can
/// match it.
@FlowActor
final class NavigationEventPublisher {
    /// flowd's `events` endpoint.
    let publisher: BusPublisher
    private let logger: Logger
    private let metrics: CoordinatorMetrics
    /// True while the journal is replayed or followed: the engine rebuilds its state silently (its
    /// events were published when the steps first happened).
    // Unchecked exclusivity for what each step touches: used on the engine's thread alone.
    @exclusivity(unchecked) var isSilent = false
    /// The message being applied, set by the router around each one.
    @exclusivity(unchecked) var applying: MessageBeingApplied?
    /// The last willNavigate encoded, and its navigation's number (0: none): its didNavigate is the
    /// same message but for the topic and envelope, and is written from it.
    @exclusivity(unchecked) private var will = FrameBuffer()
    @exclusivity(unchecked) private var willNumber: UInt64 = 0
    @exclusivity(unchecked) private var did = FrameBuffer()

    init(publisher: BusPublisher, metrics: CoordinatorMetrics, logger: Logger) {
        self.publisher = publisher
        self.metrics = metrics
        self.logger = logger
    }

    func publish(_ event: CoordinatorEvent) {
        guard !isSilent else { return }
        switch event {
        case .willNavigate(let navigation):
            publishNavigation(navigation, phase: .will)
        case .didNavigate(let navigation):
            publishNavigation(navigation, phase: .did)
        case .command(let command):
            guard let message = wireCommand(command) else { return }
            publisher.publish(message)
        case .diagnostic(let diagnostic):
            var details: WireParams = [:]
            if let stepper = diagnostic.stepperID { details["stepper"] = .string(stepper) }
            if let flow = diagnostic.flow { details["flow"] = .string(flow.name) }
            if let presentable = diagnostic.presentableID { details["presentable"] = .string(presentable) }
            if let step = diagnostic.step { details["step"] = .string(describeStep(step)) }
            applying?.spans?.refused(
                diagnostic.reason, flow: diagnostic.flow?.name, presentable: diagnostic.presentableID)
            // The refused message's trace, where a log pipeline joins the line to its spans.
            logger.notice(
                "\(diagnostic.reason): \(diagnostic.message)",
                metadata: applying?.trace.map { ["trace_id": "\($0.traceID)", "span_id": "\($0.spanID)"] })
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

    private func publishNavigation(_ navigation: NavigationEvent, phase: NavigationPhase) {
        if phase == .did {
            applying?.spans?.navigated(flow: navigation.flow.name, presentable: navigation.presentableID)
            metrics.didNavigate(flow: navigation.flow.name)
            logger.debug("did navigate flow=\(navigation.flow.name) step=\(describeStep(navigation.step))")
        } else {
            // A will not encoded now must not lend its frames to a later did of the same number.
            willNumber = 0
        }
        guard publisher.wants(head: phase == .will ? "nav/will/" : "nav/did/", id: navigation.flow.name) else {
            return
        }
        if phase == .did, navigation.number != 0, navigation.number == willNumber {
            do {
                try NavigationEventMessage.encodeDid(
                    ofWill: will, flow: navigation.flow.name, envelope: publisher.envelope(.didNavigate), into: &did)
                publisher.publishWanted(encoded: did)
            } catch {
                logger.error("cannot encode didNavigate for the events endpoint: \(error)")
            }
            return
        }
        let stepName: String
        let params: WireParams
        var encodedParams: WirePayload?
        if let step = navigation.step.canonicalStep {
            (stepName, params) = (step.name, step.params)
            // A step the flow passes through keeps its params dictionary (== is then O(1)): FBV
            // params go out as the bytes that came in (the message writes JSON again).
            if let received = applying?.step, received.name == step.name, received.params == step.params {
                encodedParams = applying?.params
            }
        } else {
            (stepName, params) = canonical(navigation.step)
        }
        if phase == .will {
            let published = encodeAndPublish(
                navigation, phase: phase, stepName: stepName, params: params, encodedParams: encodedParams,
                into: &will)
            willNumber = published ? navigation.number : 0
        } else {
            encodeAndPublish(
                navigation, phase: phase, stepName: stepName, params: params, encodedParams: encodedParams, into: &did)
        }
    }

    /// Encodes a navigation event into `frames` (which keep it after) and sends or holds it.
    @discardableResult
    private func encodeAndPublish(
        _ navigation: NavigationEvent, phase: NavigationPhase, stepName: String, params: WireParams,
        encodedParams: WirePayload?, into frames: inout FrameBuffer
    ) -> Bool {
        let kind: MessageKind = phase == .will ? .willNavigate : .didNavigate
        let envelope = publisher.envelope(kind)
        return publisher.publishWanted(kind, encodingInto: &frames) { (frames) throws(WireError) in
            try NavigationEventMessage.encode(
                phase: phase, envelope: envelope, flow: navigation.flow.name,
                stepName: stepName, params: params, encodedParams: encodedParams,
                presentableID: navigation.presentableID, traceContext: applying?.trace, into: &frames)
        }
    }

    /// The wire name and params of a step that is not a canonical step: Swift enums through Codable.
    private func canonical(_ step: any Step) -> (String, WireParams) {
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
        return NavigationCommandMessage(
            envelope: publisher.envelope(.navigationCommand, carriesValues: false),
            flow: command.flow?.name ?? "coordinator",
            verb: verb, target: command.target, container: command.wireContainer, presentableKind: command.kind,
            traceContext: applying?.trace)
    }
}

extension Flows.NavigationCommand {
    /// Frame 4 of its NAVIGATION-COMMAND (PROTOCOL.md §4.3): the container, or for `setTabs` the
    /// tabs' ids joined by `,`.
    package var wireContainer: String {
        verb == .setTabs ? items.joined(separator: ",") : (container ?? "")
    }
}
