import FlowBusTracing
import FlowBusWire
import Tracing

/// The spans of one step or deep link in flowd: `process step` (consumer, continuing the sender's
/// trace), whose context the message's willNavigate, navigation commands and didNavigate carry,
/// and its child `publish events` (producer), made when the batch's events are released after its
/// journal commit (``StepSpanBatch``): made and ended there with the batch's others, in one burst
/// for the exporter's queue.
final class StepSpans {
    let process: any Span
    private var outcome: DiagnosticReason?
    private var flow: String?
    private var presentable: String?
    private var navigations = 0

    /// Starts the span of a message, or returns nil when the tracer does not record it: its events
    /// then carry what it arrived with.
    init?(kind: MessageKind, topic: String, envelope: Envelope, step: String, stepper: String?, remote: TraceContext?) {
        process = BusTracing.startSpan(
            .process, kind: kind, topic: topic, envelope: envelope,
            parent: BusTracing.serviceContext(continuing: remote)
        ) { attributes in
            attributes.set("flowbus.step", value: .string(step))
            if let stepper { attributes.set("flowbus.stepper", value: .string(stepper)) }
        }
        guard process.isRecording else { return nil }
    }

    /// What the events of this message carry.
    var eventsContext: TraceContext? { BusTracing.traceContext(of: process.context) }

    /// A flow navigated because of the message.
    func navigated(flow: String, presentable: String?) {
        self.flow = flow
        if let presentable { self.presentable = presentable }
        navigations += 1
    }

    /// The flows refused the message (the first reason is kept).
    func refused(_ reason: DiagnosticReason, flow: String?, presentable: String?) {
        if outcome == nil { outcome = reason }
        if let flow { self.flow = flow }
        if let presentable { self.presentable = presentable }
    }

    /// Its events are released: `publish events`, then the end of `process step`.
    func end() {
        if navigations > 0 {
            let publish = BusTracing.startSpan(
                .publish, kind: .didNavigate, topic: "events", destination: "events", parent: process.context
            ) { [navigations] in $0.set("flowbus.navigations", value: .int64(Int64(navigations))) }
            publish.end()
        }
        process.updateAttributes { attributes in
            if let flow { attributes.set("flowbus.flow", value: .string(flow)) }
            if let presentable { attributes.set("flowbus.presentable", value: .string(presentable)) }
            attributes.set("flowbus.outcome", value: .string(outcome?.rawValue ?? "applied"))
        }
        if let outcome { process.setStatus(.init(code: .error, message: outcome.rawValue)) }
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
        let spans = beginCommit(journaled: journaled, size: size)
        do {
            let result = try body()
            spans?.end(error: nil)
            return result
        } catch {
            spans?.end(error: error)
            throw error
        }
    }

    /// The batch's commit begins (when a message of the batch is traced): its span starts, and
    /// the messages' spans wait with it for ``CommitSpans/end(error:)``.
    mutating func beginCommit(journaled: Bool, size: Int) -> CommitSpans? {
        guard let first = pending.first else { return nil }
        defer { pending.removeAll(keepingCapacity: true) }
        guard journaled else { return CommitSpans(commit: nil, messages: pending) }
        let span = BusTracing.tracer.startAnySpan("commit journal", context: first.process.context)
        span.updateAttributes { attributes in
            attributes.set("messaging.system", value: .string(BusTracing.system))
            attributes.set("flowbus.batch.size", value: .int64(Int64(size)))
        }
        for other in pending.dropFirst() { span.addLink(SpanLink(context: other.process.context, attributes: [:])) }
        return CommitSpans(commit: span, messages: pending)
    }
}

/// A batch's spans while its commit goes on.
struct CommitSpans {
    let commit: (any Span)?
    let messages: [StepSpans]

    /// The commit is done (or failed): its span ends, then every message's.
    func end(error: (any Error)?) {
        if let commit {
            if let error { commit.recordError(error) }
            commit.end()
        }
        for spans in messages { spans.end() }
    }
}
