import ArgumentParser
import FlowBusConfiguration
import FlowBusTracing
import FlowBusWire
import Foundation
import Logging
import ServiceLifecycle
import Tracing

/// flowctl's own `send` span around a step, deep link or action it sends, exported before it
/// exits when the config's `tracing:` or `OTEL_*` ask for it. A `TRACEPARENT` in the environment
/// (as CI systems set) is the span's parent; without tracing, it is sent on as it is.
enum CommandTracing {
    static func send<T>(
        _ kind: MessageKind, topic: String, config: FlowBusConfig, _ body: (TraceContext?) throws -> T
    ) throws -> T {
        let environment = ProcessInfo.processInfo.environment
        var inherited: TraceContext?
        if let parent = environment["TRACEPARENT"] {
            inherited = TraceContext(traceparent: parent, tracestate: environment["TRACESTATE"] ?? "")
            if inherited == nil {
                note(
                    "TRACEPARENT \(parent.prefix(64)) (or TRACESTATE) is not W3C Trace Context: the message is sent without it"
                )
            }
        }
        let logger = Logger(label: "flowctl")
        let exporter: (any Service)?
        do {
            exporter = try TraceExport.bootstrap(config: config.tracing, serviceName: "flowctl", logger: logger)
        } catch {
            FileHandle.standardError.write(Data("Error: \(error)\n".utf8))
            throw ExitCode(64)
        }
        guard let exporter else { return try body(inherited) }
        let group = ServiceGroup(services: [exporter], logger: logger)
        let stopped = DispatchSemaphore(value: 0)
        // The exporter runs on the cooperative pool; this thread is the command's own, so it may wait.
        Task {
            try? await group.run()
            stopped.signal()
        }
        defer {
            Task { await group.triggerGracefulShutdown() }
            stopped.wait()
        }
        return try BusTracing.send(kind, topic: topic, parent: inherited, body)
    }
}
