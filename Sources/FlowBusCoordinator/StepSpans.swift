import FlowBusTracing
import FlowBusWire
import Tracing

/// The spans of one step or deep link in flowd: `process step` (consumer, continuing the sender's
/// trace) and its child `publish events` (producer), whose context the message's willNavigate,
/// navigation commands and didNavigate carry. Both end once the batch holding the message is
/// committed (``StepSpanBatch``).
final class StepSpans {
    let process: any Span
    let publish: any Span
    private var outcome: String?
    private var navigations = 0

    /// Starts the spans of a message, or returns nil when the sampler drops it: its events then
    /// carry what it arrived with.
    init?(kind: MessageKind, topic: String, envelope: Envelope, step: String, stepper: String?, remote: TraceContext?) {
        process = BusTracing.startSpan(
            .process, kind: kind, topic: topic, envelope: envelope,
            parent: BusTracing.serviceContext(continuing: remote))
        guard process.isRecording else { return nil }
        process.attributes["flowbus.step"] = step
        if let stepper { process.attributes["flowbus.stepper"] = stepper }
        publish = BusTracing.startSpan(
            .publish, kind: .didNavigate, topic: "events", destination: "events", parent: process.context)
    }

    /// What the events of this message carry.
    var eventsContext: TraceContext? { BusTracing.traceContext(of: publish.context) }

    /// A flow navigated because of the message.
    func navigated(flow: String, presentable: String?) {
        process.attributes["flowbus.flow"] = flow
        if let presentable { process.attributes["flowbus.presentable"] = presentable }
        navigations += 1
    }

    /// The flows refused the message (the first reason is kept).
    func refused(_ reason: DiagnosticReason, flow: String?, presentable: String?) {
        if outcome == nil { outcome = reason.rawValue }
        if let flow { process.attributes["flowbus.flow"] = flow }
        if let presentable { process.attributes["flowbus.presentable"] = presentable }
    }

    func end() {
        process.attributes["flowbus.outcome"] = outcome ?? "applied"
        publish.attributes["flowbus.navigations"] = navigations
        if let outcome { process.setStatus(.init(code: .error, message: outcome)) }
        publish.end()
        process.end()
    }
}

/// The traced messages of the batch being read, ended after its journal commit; the commit has a
/// span of its own, a child of the first message's, linked to the others'.
struct StepSpanBatch {
    private var pending: [StepSpans] = []

    mutating func add(_ spans: StepSpans) { pending.append(spans) }

    /// Runs the batch's commit inside its span (when a message of the batch is traced), then ends
    /// every message's spans.
    mutating func commit<T>(journaled: Bool, size: Int, _ body: () throws -> T) rethrows -> T {
        guard let first = pending.first else { return try body() }
        defer {
            for spans in pending { spans.end() }
            pending.removeAll(keepingCapacity: true)
        }
        guard journaled else { return try body() }
        let span = InstrumentationSystem.tracer.startAnySpan("commit journal", context: first.process.context)
        span.attributes["messaging.system"] = BusTracing.system
        span.attributes["flowbus.batch.size"] = size
        for other in pending.dropFirst() { span.addLink(SpanLink(context: other.process.context, attributes: [:])) }
        defer { span.end() }
        do {
            return try body()
        } catch {
            span.recordError(error)
            throw error
        }
    }
}
