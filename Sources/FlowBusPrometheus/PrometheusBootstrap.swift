import CoreMetrics
import FlowBusDaemon
import Prometheus

extension MetricsExposition {
    /// Bootstraps swift-metrics, once per process, with a Prometheus registry using FlowBus's
    /// histogram buckets, and returns the registry's text for the metrics endpoint and status.
    public static func bootstrapPrometheus() -> MetricsExposition {
        let registry = PrometheusCollectorRegistry()
        var factory = PrometheusMetricsFactory(registry: registry)
        factory.durationHistogramBuckets = FlowBusMetrics.durationBuckets
        factory.valueHistogramBuckets = FlowBusMetrics.valueBuckets
        MetricsSystem.bootstrap(factory)
        return MetricsExposition { registry.emitToBuffer() }
    }
}
