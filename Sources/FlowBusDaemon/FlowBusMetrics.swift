import FlowBusClient
import FlowBusConfiguration
import FlowBusProtocol
import FlowBusWire
import ZeroMQ

/// Settings for the backend that receives FlowBus's swift-metrics (names: `docs/METRICS.md`).
public enum FlowBusMetrics {
    /// Histogram buckets for FlowBus's timers, by metric name: a step takes tens of microseconds
    /// from ingress to its events, far below the usual defaults (5 ms and up).
    public static let durationBuckets: [String: [Duration]] = [
        "flowbus_step_latency_seconds": fine,
        "flowbus_journal_commit_seconds": fine,
    ]

    /// Histogram buckets for FlowBus's recorders, by metric name.
    public static let valueBuckets: [String: [Double]] = [
        // Up to the ingress loop's limit for a batch that grows while a commit is under way (4,096).
        "flowbus_batch_size": [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]
    ]

    private static let fine: [Duration] = [
        .microseconds(50), .microseconds(100), .microseconds(250), .microseconds(500),
        .milliseconds(1), .milliseconds(2) + .microseconds(500), .milliseconds(5), .milliseconds(10), .milliseconds(25),
        .milliseconds(50), .milliseconds(100), .milliseconds(250), .seconds(1),
    ]
}
