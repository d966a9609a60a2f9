import FlowBusClient
import FlowBusConfiguration
import FlowBusProtocol
import FlowBusWire
import ZeroMQ

/// The text a process's metrics endpoint serves and `flowctl status --metrics` prints: the
/// Prometheus exposition of the registry its `MetricsSystem` was bootstrapped with.
///
/// FlowBus records its metrics through swift-metrics only; the executable bootstraps a
/// Prometheus registry and hands its rendering here, in one call from `FlowBusPrometheus`:
///
/// ```swift
/// let exposition = MetricsExposition.bootstrapPrometheus()
/// ```
public struct MetricsExposition: Sendable {
    /// The HTTP content type of ``render()``'s output.
    public let contentType: String
    private let renderer: @Sendable () -> [UInt8]

    /// - Parameters:
    ///   - contentType: Prometheus text format 0.0.4 unless given.
    ///   - render: Renders the registry; called on the endpoint's thread and on flowd's actor.
    public init(
        contentType: String = "text/plain; version=0.0.4; charset=utf-8", render: @escaping @Sendable () -> [UInt8]
    ) {
        self.contentType = contentType
        renderer = render
    }

    /// The metrics as the endpoint serves them.
    public func render() -> [UInt8] {
        renderer()
    }

    /// The metrics as text.
    public var text: String {
        String(decoding: render(), as: UTF8.self)
    }
}
