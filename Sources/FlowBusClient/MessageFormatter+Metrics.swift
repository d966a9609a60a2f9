import FlowBusProtocol
import FlowBusWire
import Foundation
import ZeroMQ

extension MessageFormatter {
    /// The key figures of a status reply's `metrics` field, as lines for `flowctl status`; none
    /// when the reply has no such field (an older flowd).
    public static func metricsSummary(_ status: WireParams) -> [String] {
        guard let metrics = status["metrics"]?.mapValue else { return [] }
        func number(_ key: String) -> String { metrics[key]?.displayText ?? "0" }
        func milliseconds(_ value: Double) -> String { String(format: "%.3f ms", value) }
        let refused = (metrics["steps_refused"]?.mapValue ?? [:]).sorted { $0.key < $1.key }
            .map { "\($0.key) \($0.value.displayText)" }.joined(separator: ", ")
        var lines = [
            "metrics: steps received \(number("steps_received")), routed \(number("steps_routed")), refused "
                + (refused.isEmpty ? "0" : "{\(refused)}")
                + "; deep links \(number("deep_links")) (routed \(number("deep_links_routed"))); navigations \(number("navigations")); batches \(number("batches"))"
        ]
        if let latency = metrics["step_latency_ms"]?.mapValue, let mean = latency["mean"]?.doubleValue,
            let max = latency["max"]?.doubleValue
        {
            lines.append(
                "  step latency: mean \(milliseconds(mean)), max \(milliseconds(max)) over \(latency["batches"]?.displayText ?? "0") batch(es)"
            )
        }
        if let journal = metrics["journal_commit_ms"]?.mapValue, let mean = journal["mean"]?.doubleValue {
            lines.append(
                "  journal commit: mean \(milliseconds(mean)) over \(journal["commits"]?.displayText ?? "0") commit(s)")
        }
        if let endpoint = metrics["endpoint"]?.stringValue {
            lines.append(
                "  Prometheus: http://\(endpoint.dropFirst("tcp://".count))/metrics (or flowctl status --metrics)")
        } else if metrics["prometheus"] != nil {
            lines.append("  Prometheus text: flowctl status --metrics")
        }
        return lines
    }
}
