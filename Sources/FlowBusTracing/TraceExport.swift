public import FlowBusConfiguration
import Foundation
public import Logging
public import ServiceLifecycle
import Tracing

#if Tracing
import OTel
#endif

/// Starts exporting spans over OTLP/HTTP when the config's `tracing:` section or the standard
/// `OTEL_*` environment variables ask for it: the one place a FlowBus process turns tracing on.
public enum TraceExport {
    /// Whether the spans of `config` and `environment` are to be exported: a `tracing:` section, or
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_TRACES_EXPORTER=otlp`;
    /// never with `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none`.
    public static func isRequested(by config: TracingSpec?, environment: [String: String]) -> Bool {
        if environment["OTEL_SDK_DISABLED"]?.lowercased() == "true" { return false }
        if let exporter = environment["OTEL_TRACES_EXPORTER"]?.lowercased() {
            if exporter == "none" { return false }
            if exporter == "otlp" { return true }
        }
        return config != nil || environment["OTEL_EXPORTER_OTLP_ENDPOINT"] != nil
            || environment["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] != nil
    }

    /// Bootstraps the process's tracer when tracing is requested, and returns the service that
    /// exports its spans: run it first in the process's `ServiceGroup`, so that it stops last and
    /// sends every span on SIGTERM. Returns nil when tracing is not requested.
    /// - Parameter serviceName: `service.name` unless the config or `OTEL_SERVICE_NAME` names one.
    /// - Throws: ``TraceExportError`` when tracing is requested but this build cannot export, or
    ///   the configuration is refused.
    public static func bootstrap(
        config: TracingSpec?, serviceName: String, environment: [String: String] = ProcessInfo.processInfo.environment,
        logger: Logger
    ) throws -> (any Service)? {
        guard isRequested(by: config, environment: environment) else { return nil }
        #if Tracing
        var configuration = OTel.Configuration.default
        configuration.serviceName = config?.serviceName ?? serviceName
        configuration.logs.enabled = false
        configuration.metrics.enabled = false
        configuration.traces.enabled = true
        configuration.propagators = [.traceContext]
        configuration.traces.otlpExporter.protocol = config?.encoding == "json" ? .httpJSON : .httpProtobuf
        if let endpoint = config?.endpoint {
            configuration.traces.otlpExporter.endpoint =
                endpoint.hasSuffix("/v1/traces")
                ? endpoint : endpoint.trimmingSuffix("/") + "/v1/traces"
        }
        // FlowBus decides which messages to trace before making any span (BusTracing.sampler); the
        // exporter then records every span it is given.
        let samplerName = environment["OTEL_TRACES_SAMPLER"] ?? config?.sampler ?? "parentbased_always_on"
        let ratio = environment["OTEL_TRACES_SAMPLER_ARG"].flatMap(Double.init) ?? config?.ratio
        guard let sampler = SpanSampler(name: samplerName, ratio: ratio) else {
            throw TraceExportError(
                "OTEL_TRACES_SAMPLER \(samplerName) is not one FlowBus supports: use one of \(TracingSpec.samplers.joined(separator: ", "))"
            )
        }
        if let ratio, !(0...1).contains(ratio) {
            throw TraceExportError("OTEL_TRACES_SAMPLER_ARG \(ratio) is outside 0…1")
        }
        configuration.traces.sampler = .alwaysOn
        var environment = environment
        environment["OTEL_TRACES_SAMPLER"] = nil
        environment["OTEL_TRACES_SAMPLER_ARG"] = nil
        // Spans leave in batches, soon enough that a short-lived flowctl or a test sees them.
        configuration.traces.batchSpanProcessor.scheduleDelay = .milliseconds(200)
        configuration.diagnosticLogger = .custom(logger)
        configuration.diagnosticLogLevel = .warning
        let service: any Service
        do {
            service = try OTel.bootstrap(configuration: configuration, environment: environment)
        } catch {
            throw TraceExportError("tracing could not start: \(error); check the tracing: section and OTEL_* variables")
        }
        BusTracing.activate(sampler: sampler)
        let endpoint =
            environment["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] ?? environment["OTEL_EXPORTER_OTLP_ENDPOINT"]
            ?? configuration.traces.otlpExporter.endpoint
        logger.info(
            "exporting spans over OTLP/HTTP",
            metadata: [
                "service": "\(environment["OTEL_SERVICE_NAME"] ?? configuration.serviceName)",
                "endpoint": "\(endpoint)",
            ])
        return service
        #else
        throw TraceExportError(
            "tracing is configured (tracing: or OTEL_*) but this build has no exporter: build with --traits Tracing, or remove the tracing: section and unset OTEL_EXPORTER_OTLP_ENDPOINT"
        )
        #endif
    }
}

/// Why tracing cannot start.
public struct TraceExportError: Error, CustomStringConvertible {
    public var description: String
    init(_ description: String) { self.description = description }
}

extension String {
    fileprivate func trimmingSuffix(_ suffix: String) -> String {
        hasSuffix(suffix) ? String(dropLast(suffix.count)) : self
    }
}
