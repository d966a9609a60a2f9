import FlowBusTracing
import FlowBusWire
import Tracing

/// A reactor host's spans: `process action` (consumer, continuing the view's trace) around handing
/// an action to its reactor, then a `mutate` for each mutation, a `publish state` for each state and
/// a `send step` for each step it causes, children of that span; the state and step carry theirs.
struct ReactorSpans {
    private let span: any Span

    /// Starts `process action`, or returns nil when the host does not trace or the sampler drops it.
    init?(reactorID: String, action: String, topic: String, envelope: Envelope, remote: TraceContext?) {
        guard BusTracing.traces(remote) else { return nil }
        span = BusTracing.startSpan(
            .process, kind: .action, topic: topic, envelope: envelope,
            parent: BusTracing.serviceContext(continuing: remote)
        ) { attributes in
            attributes.set("flowbus.reactor", value: .string(reactorID))
            attributes.set("flowbus.action", value: .string(action))
        }
        guard span.isRecording else { return nil }
    }

    /// What the action's states and steps continue.
    var context: TraceContext? { BusTracing.traceContext(of: span.context) }

    func end(refusal: DiagnosticReason?) {
        span.updateAttributes { $0.set("flowbus.outcome", value: .string(refusal?.rawValue ?? "applied")) }
        if let refusal { span.setStatus(.init(code: .error, message: refusal.rawValue)) }
        span.end()
    }

    /// The trace frame of a state caused by an action traced as `trace`: a `publish state` span's
    /// when the host traces, else `trace` as it came.
    static func publishState(_ reactorID: String, sequence: UInt64, in trace: TraceContext) -> TraceContext? {
        child(.publish, kind: .state, topic: Topic.state(reactorID), of: trace) { attributes in
            attributes.set("flowbus.reactor", value: .string(reactorID))
            attributes.set("flowbus.state_sequence", value: .int64(Int64(truncatingIfNeeded: sequence)))
        }
    }

    /// A `mutate` span (internal, a child of the action's) for each mutation the action caused,
    /// named by the mutation's case (`flowbus.mutation`).
    static func mutation(_ mutation: some Any, of reactorID: String, in trace: TraceContext) {
        guard BusTracing.traces(trace) else { return }
        let span = BusTracing.tracer.startAnySpan(
            "mutate", context: BusTracing.serviceContext(continuing: trace), ofKind: .internal)
        guard span.isRecording else { return }
        let described = String(describing: mutation)
        span.updateAttributes { attributes in
            attributes.set("flowbus.reactor", value: .string(reactorID))
            attributes.set("flowbus.mutation", value: .string(String(described.prefix { $0 != "(" })))
        }
        span.end()
    }

    /// The trace frame of a step a reactor publishes because of an action traced as `trace`.
    static func sendStep(_ stepperID: String, name: String, in trace: TraceContext) -> TraceContext? {
        child(.send, kind: .step, topic: Topic.step(stepperID), of: trace) { attributes in
            attributes.set("flowbus.step", value: .string(name))
        }
    }

    /// A span of `trace` made and ended at once, and the trace frame of what it sends: its
    /// context, or `trace` as it came when it is not recorded.
    private static func child(
        _ operation: BusTracing.Operation, kind: MessageKind, topic: @autoclosure () -> String,
        of trace: TraceContext, _ describe: (inout SpanAttributes) -> Void
    ) -> TraceContext? {
        guard BusTracing.traces(trace) else { return trace }
        let span = BusTracing.startSpan(
            operation, kind: kind, topic: topic(), parent: BusTracing.serviceContext(continuing: trace),
            describe: describe)
        guard span.isRecording else { return trace }
        defer { span.end() }
        return BusTracing.traceContext(of: span.context)
    }
}
