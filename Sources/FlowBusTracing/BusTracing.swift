public import FlowBusWire
import Synchronization
public import Tracing

/// Spans for FlowBus messages, after OpenTelemetry's messaging semantic conventions: a sender's
/// `send` span (producer) whose context travels in the message's trace frame, a receiver's
/// `process` span (consumer) continuing it.
public enum BusTracing {
    /// True once ``TraceExport/bootstrap(config:serviceName:environment:logger:)`` installed a
    /// tracer; until then a process makes no span and only passes trace frames on. Written once,
    /// at start-up, before any message is read; read for every message without a lock.
    nonisolated(unsafe) public private(set) static var isActive = false

    /// Which messages to trace; set with ``isActive`` by ``TraceExport`` from `tracing.sampler` or
    /// `OTEL_TRACES_SAMPLER`.
    nonisolated(unsafe) public private(set) static var sampler = SpanSampler.default

    /// The tracer and propagator ``TraceExport`` installed, read once: `InstrumentationSystem`'s
    /// getters take a lock and cast every instrument each time.
    nonisolated(unsafe) private static var installed: (tracer: any Tracer, instrument: any Instrument)?

    /// Turns tracing on with the instruments just bootstrapped; called once, before any message is read.
    static func activate(sampler: SpanSampler) {
        self.sampler = sampler
        installed = (InstrumentationSystem.tracer, InstrumentationSystem.instrument)
        isActive = true
    }

    /// The tracer spans are started with.
    package static var tracer: any Tracer { installed?.tracer ?? InstrumentationSystem.tracer }

    /// What reads and writes trace frames.
    private static var instrument: any Instrument { installed?.instrument ?? InstrumentationSystem.instrument }

    /// Whether to make spans for a message that arrived with `remote`: tracing is on and the
    /// sampler keeps it.
    public static func traces(_ remote: TraceContext?) -> Bool {
        isActive && sampler.samples(remote)
    }

    /// The trace of the message being processed, for what it causes: a reactor's states and steps
    /// (also from its asynchronous mutations, which inherit it) carry it on.
    @TaskLocal public static var messageTrace: TraceContext?

    /// `messaging.system`.
    public static let system = "flowbus"

    /// The most attributes a FlowBus span has (flowd's `process step`): room for them all at once.
    static let attributeCapacity = 12

    /// The context a message's trace frame carries, as a parent for the receiver's spans.
    public static func serviceContext(continuing trace: TraceContext?) -> ServiceContext {
        var context = ServiceContext.topLevel
        if let trace {
            instrument.extract(trace, into: &context, using: TraceFrameExtractor())
        }
        return context
    }

    /// The trace frame for a message sent within `context` (a span's), or nil when it has no trace.
    public static func traceContext(of context: ServiceContext) -> TraceContext? {
        var headers = TraceHeaders()
        instrument.inject(context, into: &headers, using: TraceHeaders.Writer())
        guard let parent = headers.traceparent else { return nil }
        return TraceContext(traceparent: parent, tracestate: headers.tracestate ?? "")
    }

    /// Starts a span for a message: `process` (consumer) for one received, `send` or `publish`
    /// (producer) for one sent, named `<operation> <topic prefix>` (e.g. `process step`), with the
    /// messaging attributes when the span is recorded (a span the sampler drops costs no text).
    /// - Parameter destination: the span name's destination, by default the topic's prefix.
    /// - Parameter describe: the caller's own attributes, set with the messaging ones.
    public static func startSpan(
        _ operation: Operation, kind: MessageKind, topic: @autoclosure () -> String, envelope: Envelope? = nil,
        destination: StaticString? = nil, parent: ServiceContext, describe: (inout SpanAttributes) -> Void = { _ in }
    ) -> any Span {
        let span = tracer.startAnySpan(
            spanName(operation, kind: kind, destination: destination), context: parent,
            ofKind: operation == .process ? .consumer : .producer)
        guard span.isRecording else { return span }
        // All at once, with room for all: a recording span's attributes are read and written whole
        // under its lock, so setting them one by one copies them once for each. `set` stores the
        // value as it is, where the subscript boxes it first.
        span.updateAttributes { attributes in
            attributes.reserveCapacity(attributeCapacity)
            attributes.set("messaging.system", value: .string(system))
            attributes.set("messaging.operation.name", value: .string(operation.rawValue))
            attributes.set("messaging.operation.type", value: .string(operation.type))
            attributes.set("messaging.destination.name", value: .string(topic()))
            if let envelope {
                attributes.set("messaging.message.id", value: .string(envelope.messageID.description))
                attributes.set("messaging.client.id", value: .string(envelope.source))
                attributes.set("flowbus.sequence", value: .int64(Int64(truncatingIfNeeded: envelope.sequence)))
            }
            describe(&attributes)
        }
        return span
    }

    /// Runs `body`, which sends one message, inside a `send` span (producer) continuing `parent`,
    /// and gives it the trace frame to send: the span's context, or `parent` as it is when the
    /// message is not traced.
    public static func send<T>(
        _ kind: MessageKind, topic: @autoclosure () -> String, parent: TraceContext?,
        _ body: (TraceContext?) throws -> T
    ) rethrows -> T {
        guard traces(parent) else { return try body(parent) }
        let span = startSpan(.send, kind: kind, topic: topic(), parent: serviceContext(continuing: parent))
        defer { span.end() }
        do {
            return try body(traceContext(of: span.context))
        } catch {
            span.recordError(error)
            throw error
        }
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

/// Which messages a process traces, decided before any span is made: a message the sampler
/// drops costs one random draw, no span, no context (the exporter's own sampler is then always
/// on, for the spans of messages kept). The rules are OpenTelemetry's samplers'.
public struct SpanSampler: Sendable, Hashable {
    /// What is decided for a message without a trace frame (a new trace).
    public enum Root: Sendable, Hashable {
        case always, never
        /// This share of new traces, 0…1.
        case ratio(Double)
    }

    public var root: Root
    /// Whether a message with a trace frame follows its sender's decision (the `parentbased_` samplers).
    public var followsParent: Bool

    public init(root: Root, followsParent: Bool) {
        self.root = root
        self.followsParent = followsParent
    }

    /// `parentbased_always_on`, OpenTelemetry's default.
    public static let `default` = SpanSampler(root: .always, followsParent: true)

    /// The sampler an `OTEL_TRACES_SAMPLER` name (and its `…_ARG` ratio) stands for; nil for a name
    /// FlowBus does not know.
    public init?(name: String, ratio: Double?) {
        let ratio = ratio ?? 1
        switch name {
        case "always_on": self.init(root: .always, followsParent: false)
        case "always_off": self.init(root: .never, followsParent: false)
        case "traceidratio": self.init(root: .ratio(ratio), followsParent: false)
        case "parentbased_always_on": self.init(root: .always, followsParent: true)
        case "parentbased_always_off": self.init(root: .never, followsParent: true)
        case "parentbased_traceidratio": self.init(root: .ratio(ratio), followsParent: true)
        default: return nil
        }
    }

    /// Whether to trace a message that arrived with `remote` (nil: none).
    public func samples(_ remote: TraceContext?) -> Bool {
        if followsParent, let remote { return remote.sampled }
        switch root {
        case .always: return true
        case .never: return false
        case .ratio(let ratio):
            return Double(SamplingDraw.next() >> 11) * 0x1p-53 < ratio
        }
    }
}

/// A cheap shared random stream for sampling (splitmix64 over an atomic counter): a draw per
/// message, no system call, no lock.
private enum SamplingDraw {
    static let state = Atomic<UInt64>(UInt64.random(in: .min ... .max))

    static func next() -> UInt64 {
        var z = state.wrappingAdd(0x9E37_79B9_7F4A_7C15, ordering: .relaxed).newValue
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
