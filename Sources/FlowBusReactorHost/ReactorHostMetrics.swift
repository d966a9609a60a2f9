import CoreMetrics
import FlowBusClient
import FlowBusConfiguration
import FlowBusDaemon
import FlowBusProtocol
import FlowBusWire
import Reactors
import Synchronization
import ZeroMQ

/// A reactor host's metrics, recorded through swift-metrics with a `host` label (names:
/// `docs/METRICS.md`).
///
/// The host already keeps ``ReactorHostCounters``; its I/O thread calls ``report(_:)`` once per
/// loop turn (a batch of actions, a flush of states), which hands the differences since the
/// last call to swift-metrics: no metric call per action or state.
package final class ReactorHostMetrics: Sendable {
    private let host: String
    private let received: Counter
    private let actions: Counter
    private let snapshots: Counter
    private let statesPublished: Counter
    private let statesDropped: Counter
    private let statesUnsubscribed: Counter
    private let statesUnencodable: Counter
    private let stepsSent: Counter
    private let stepsDropped: Counter
    private let mutationFailures: Counter
    private let saves: Counter
    private let saveFailures: Counter
    private let instances: Gauge
    private let state = Mutex<(last: ReactorHostCounters, refused: [DiagnosticReason: Counter])>(
        (ReactorHostCounters(), [:]))

    package init(host: String) {
        self.host = host
        let dimensions = [("host", host)]
        received = Counter(label: "flowbus_reactor_messages_total", dimensions: dimensions)
        actions = Counter(label: "flowbus_reactor_actions_total", dimensions: dimensions)
        snapshots = Counter(label: "flowbus_reactor_snapshots_total", dimensions: dimensions)
        statesPublished = Counter(label: "flowbus_reactor_states_published_total", dimensions: dimensions)
        statesDropped = Counter(label: "flowbus_reactor_states_dropped_total", dimensions: dimensions)
        statesUnsubscribed = Counter(label: "flowbus_reactor_states_unsubscribed_total", dimensions: dimensions)
        statesUnencodable = Counter(label: "flowbus_reactor_states_unencodable_total", dimensions: dimensions)
        stepsSent = Counter(label: "flowbus_reactor_steps_sent_total", dimensions: dimensions)
        stepsDropped = Counter(label: "flowbus_reactor_steps_dropped_total", dimensions: dimensions)
        mutationFailures = Counter(label: "flowbus_reactor_mutation_failures_total", dimensions: dimensions)
        saves = Counter(label: "flowbus_reactor_saves_total", dimensions: dimensions)
        saveFailures = Counter(label: "flowbus_reactor_save_failures_total", dimensions: dimensions)
        instances = Gauge(label: "flowbus_reactor_instances", dimensions: dimensions)
    }

    /// Hands what `counters` gained since the last call to swift-metrics.
    package func report(_ counters: ReactorHostCounters) {
        state.withLock { state in
            let last = state.last
            guard counters != last else { return }
            // Plain field reads: this runs once per loop turn of the host's I/O thread.
            func add(_ counter: Counter, _ delta: Int) {
                if delta > 0 { counter.increment(by: delta) }
            }
            add(received, counters.received - last.received)
            add(actions, counters.actionsApplied - last.actionsApplied)
            add(snapshots, counters.snapshotsAnswered - last.snapshotsAnswered)
            add(statesPublished, counters.statesPublished - last.statesPublished)
            add(statesDropped, counters.statesDropped - last.statesDropped)
            add(statesUnsubscribed, counters.statesUnsubscribed - last.statesUnsubscribed)
            add(statesUnencodable, counters.statesUnencodable - last.statesUnencodable)
            add(stepsSent, counters.stepsSent - last.stepsSent)
            add(stepsDropped, counters.stepsDropped - last.stepsDropped)
            add(mutationFailures, counters.mutationFailures - last.mutationFailures)
            add(saves, counters.saves - last.saves)
            add(saveFailures, counters.saveFailures - last.saveFailures)
            if counters.reactors != last.reactors { instances.record(counters.reactors) }
            if counters.refused != last.refused {
                for (reason, count) in counters.refused where count > last.refused[reason, default: 0] {
                    let counter =
                        state.refused[reason]
                        ?? Counter(
                            label: "flowbus_reactor_refused_total",
                            dimensions: [("host", host), ("reason", reason.rawValue)])
                    state.refused[reason] = counter
                    counter.increment(by: count - last.refused[reason, default: 0])
                }
            }
            state.last = counters
        }
    }
}
