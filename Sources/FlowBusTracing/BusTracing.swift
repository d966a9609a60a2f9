public import FlowBusWire
public import Tracing

/// Spans for FlowBus messages, after OpenTelemetry's messaging semantic conventions: a sender's
/// `send` span (producer) whose context travels in the message's trace frame, a receiver's
/// `process` span (consumer) continuing it.
public enum BusTracing {
    /// True once ``TraceExport/bootstrap(config:serviceName:environment:logger:)`` installed a
    /// tracer; until then a process makes no span and only passes trace frames on.
    nonisolated(unsafe) public static var isActive = false

    /// The trace of the message being processed, for what it causes: a reactor's states and steps
    /// (also from its asynchronous mutations, which inherit it) carry it on.
    @TaskLocal public static var messageTrace: TraceContext?

    /// `messaging.system`.
    public static let system = "flowbus"

    /// The context a message's trace frame carries, as a parent for the receiver's spans.
    public static func serviceContext(continuing trace: TraceContext?) -> ServiceContext {
        var context = ServiceContext.topLevel
        if let trace {
            InstrumentationSystem.instrument.extract(trace, into: &context, using: TraceFrameExtractor())
        }
        return context
    }

    /// The trace frame for a message sent within `context` (a span's), or nil when it has no trace.
    public static func traceContext(of context: ServiceContext) -> TraceContext? {
        var headers = TraceHeaders()
        InstrumentationSystem.instrument.inject(context, into: &headers, using: TraceHeaders.Writer())
        guard let parent = headers.traceparent else { return nil }
        return TraceContext(traceparent: parent, tracestate: headers.tracestate ?? "")
    }

    /// Starts a span for a message: `process` (consumer) for one received, `send` or `publish`
    /// (producer) for one sent, named `<operation> <topic prefix>` (e.g. `process step`), with the
    /// messaging attributes when the span is recorded (a span the sampler drops costs no text).
    /// - Parameter destination: the span name's destination, by default the topic's prefix.
    public static func startSpan(
        _ operation: Operation, kind: MessageKind, topic: @autoclosure () -> String, envelope: Envelope? = nil,
        destination: StaticString? = nil, parent: ServiceContext
    ) -> any Span {
        let span = InstrumentationSystem.tracer.startAnySpan(
            spanName(operation, kind: kind, destination: destination), context: parent,
            ofKind: operation == .process ? .consumer : .producer)
        guard span.isRecording else { return span }
        span.attributes["messaging.system"] = system
        span.attributes["messaging.operation.name"] = operation.rawValue
        span.attributes["messaging.operation.type"] = operation.type
        span.attributes["messaging.destination.name"] = topic()
        if let envelope {
            span.attributes["messaging.message.id"] = envelope.messageID.description
            span.attributes["messaging.client.id"] = envelope.source
            span.attributes["flowbus.sequence"] = Int(truncatingIfNeeded: envelope.sequence)
        }
        return span
    }

    /// The names of the spans FlowBus makes, as constants: one is made for every message.
    private static func spanName(_ operation: Operation, kind: MessageKind, destination: StaticString?) -> String {
        if let destination { return "\(operation.rawValue) \(destination)" }
        switch (operation, kind) {
        case (.process, .step): return "process step"
        case (.process, .deepLink): return "process deeplink"
        case (.process, .action): return "process action"
        case (.send, .step): return "send step"
        case (.send, .deepLink): return "send deeplink"
        case (.send, .action): return "send action"
        case (.publish, .state): return "publish state"
        default: return "\(operation.rawValue) \(kind.topicPrefix.rawValue)"
        }
    }

    /// A messaging operation, as the semantic conventions name them: `send` by a client,
    /// `publish` of events by a daemon, `process` of a message received.
    public enum Operation: String, Sendable {
        case send, process, publish

        var type: String { self == .process ? "process" : "send" }
    }
}

extension Topic.Prefix {
    init(kind: MessageKind) { self = kind.topicPrefix }
}

/// Reads `traceparent` and `tracestate` out of a trace frame for the installed propagator.
struct TraceFrameExtractor: Extractor {
    func extract(key: String, from carrier: TraceContext) -> String? {
        switch key.lowercased() {
        case "traceparent": carrier.traceparent
        case "tracestate": carrier.tracestate.isEmpty ? nil : carrier.tracestate
        default: nil
        }
    }
}

/// What a propagator writes for a message being sent.
struct TraceHeaders {
    var traceparent: String?
    var tracestate: String?

    struct Writer: Injector {
        func inject(_ value: String, forKey key: String, into carrier: inout TraceHeaders) {
            switch key.lowercased() {
            case "traceparent": carrier.traceparent = value
            case "tracestate": carrier.tracestate = value
            default: break
            }
        }
    }
}
