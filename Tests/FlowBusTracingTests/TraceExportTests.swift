import FlowBusConfiguration
import FlowBusWire
import Logging
import Testing

@testable import FlowBusTracing

@Suite("When a process exports spans")
struct TraceExportTests {
    @Test("Off unless a tracing: section or an OTEL_* variable asks; OTEL_SDK_DISABLED and exporter none win")
    func requested() {
        let section = TracingSpec(endpoint: "http://127.0.0.1:4318")
        #expect(!TraceExport.isRequested(by: nil, environment: [:]))
        #expect(TraceExport.isRequested(by: section, environment: [:]))
        #expect(TraceExport.isRequested(by: nil, environment: ["OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"]))
        #expect(TraceExport.isRequested(by: nil, environment: ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c"]))
        #expect(TraceExport.isRequested(by: nil, environment: ["OTEL_TRACES_EXPORTER": "otlp"]))
        #expect(!TraceExport.isRequested(by: section, environment: ["OTEL_TRACES_EXPORTER": "none"]))
        #expect(!TraceExport.isRequested(by: section, environment: ["OTEL_SDK_DISABLED": "true"]))
        #expect(TraceExport.isRequested(by: section, environment: ["OTEL_SDK_DISABLED": "false"]))
    }

    @Test("Not requested: nothing is bootstrapped and no span is made")
    func notRequested() throws {
        let service = try TraceExport.bootstrap(
            config: nil, serviceName: "test", environment: [:], logger: Logger(label: "test"))
        #expect(service == nil)
        #expect(!BusTracing.isActive)
    }

    @Test("Without a tracer, a message's trace frame is passed on as the context of what it causes")
    func passesTraceOn() throws {
        let trace = TraceContext(traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
        BusTracing.$messageTrace.withValue(trace) {
            #expect(BusTracing.messageTrace == trace)
        }
        #expect(BusTracing.messageTrace == nil)
    }
}

@Suite("Which messages are traced")
struct SpanSamplerTests {
    static let sampled = TraceContext(traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
    static let dropped = TraceContext(traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00")

    @Test("OpenTelemetry's sampler names; an unknown one is nil")
    func names() {
        #expect(SpanSampler(name: "parentbased_always_on", ratio: nil) == .default)
        #expect(SpanSampler(name: "traceidratio", ratio: 0.25) == SpanSampler(root: .ratio(0.25), followsParent: false))
        #expect(SpanSampler(name: "jaeger_remote", ratio: nil) == nil)
    }

    @Test("parentbased_* follow the sender's sampled flag; the others decide alone")
    func parents() {
        let parentBased = SpanSampler(root: .never, followsParent: true)
        #expect(parentBased.samples(Self.sampled))
        #expect(!parentBased.samples(Self.dropped))
        #expect(!parentBased.samples(nil))
        let alwaysOn = SpanSampler(root: .always, followsParent: false)
        #expect(alwaysOn.samples(Self.dropped) && alwaysOn.samples(nil))
    }

    @Test("A ratio keeps about that share of new traces")
    func ratio() {
        let sampler = SpanSampler(root: .ratio(0.1), followsParent: true)
        let kept = (0..<100_000).filter { _ in sampler.samples(nil) }.count
        #expect((9_000...11_000).contains(kept), "\(kept) of 100,000 kept at 10%")
        #expect(!(0..<1000).contains { _ in SpanSampler(root: .ratio(0), followsParent: false).samples(nil) })
    }
}
