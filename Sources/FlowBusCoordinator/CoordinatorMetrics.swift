import CoreMetrics
import FlowBusClient
import FlowBusConfiguration
import FlowBusDaemon
import FlowBusProtocol
import FlowBusWire
import Flows
import ZeroMQ

/// flowd's metrics, recorded through swift-metrics (names and labels: `docs/METRICS.md`).
///
/// The router counts into plain integers as it applies each item; ``flush(ingress:events:)``
/// hands the differences to swift-metrics once per batch (and per heartbeat, and before a
/// status reply), so the steps path makes no metric call per message. The metric objects are
/// created once, here; a `reason` or `flow` label seen for the first time creates its counter.
@FlowActor
package final class CoordinatorMetrics {
    /// What the status reply shows: totals since the process started.
    package struct Totals {
        package var stepsReceived = 0
        package var stepsRouted = 0
        package var stepsRefused: [DiagnosticReason: Int] = [:]
        package var deepLinks = 0
        package var deepLinksRouted = 0
        package var reports = 0
        package var navigations = 0
        package var batches = 0
        package var latencyBatches = 0
        package var latencyNanoseconds: Int64 = 0
        package var latencyMaxNanoseconds: Int64 = 0
        package var journalCommits = 0
        package var journalNanoseconds: Int64 = 0
    }

    /// What the events publisher counted so far.
    package struct EventCounts {
        package var published = 0
        package var dropped = 0
        package var unwanted = 0
    }

    private(set) var totals = Totals()

    private let ingressMessages = Counter(label: "flowbus_ingress_messages_total")
    private let ingressDuplicates = Counter(label: "flowbus_ingress_duplicates_total")
    private let ingressOutOfOrder = Counter(label: "flowbus_ingress_out_of_order_total")
    private let journalLost = Counter(label: "flowbus_journal_lost_sequences_total")
    private let controlRequests = Counter(label: "flowbus_control_requests_total")
    private let controlRefused = Counter(
        label: "flowbus_control_rate_limited_total", dimensions: [("outcome", "refused")])
    private let controlDropped = Counter(
        label: "flowbus_control_rate_limited_total", dimensions: [("outcome", "dropped")])
    private let controlPeerGone = Counter(label: "flowbus_control_peer_gone_total")
    private var ingressRefused: [DiagnosticReason: Counter] = [:]
    private let stepsReceived = Counter(label: "flowbus_steps_received_total")
    private let stepsRouted = Counter(label: "flowbus_steps_routed_total")
    private var stepsRefused: [DiagnosticReason: Counter] = [:]
    private let deepLinks = Counter(label: "flowbus_deep_links_total")
    private let deepLinksRouted = Counter(label: "flowbus_deep_links_routed_total")
    private let reports = Counter(label: "flowbus_renderer_reports_total")
    private var navigations: [String: Counter] = [:]
    private let eventsPublished = Counter(label: "flowbus_events_published_total")
    private let eventsDropped = Counter(label: "flowbus_events_dropped_total")
    private let eventsUnwanted = Counter(label: "flowbus_events_unsubscribed_total")
    private let batchSize = Recorder(label: "flowbus_batch_size", aggregate: true)
    private let stepLatency = CoreMetrics.Timer(label: "flowbus_step_latency_seconds")
    /// Created with the first commit: a flowd without a journal does not expose it.
    private var journalCommit: CoreMetrics.Timer?

    /// Counted since the last flush (unchecked exclusivity: counted per step, on one thread).
    @exclusivity(unchecked) private var pending = Totals()
    @exclusivity(unchecked) private var pendingNavigations: [String: Int] = [:]
    /// The flow of the last navigations in a row and their count, not yet in `pendingNavigations`:
    /// under load one flow navigates again and again, and comparing its name costs less than hashing it.
    @exclusivity(unchecked) private var navigatingFlow = ""
    @exclusivity(unchecked) private var navigationsInARow = 0
    /// What the ingress loop and the publisher had counted at the last flush.
    private var lastIngress = IngressCounters()
    private var lastEvents = EventCounts()
    /// Whether the batch being applied carries a step or deep link (its latency is recorded).
    @exclusivity(unchecked) private var batchHasSteps = false

    package init() {}

    /// A step applied: routed if a flow navigated to it, else refused for its first reason.
    package func step(_ outcomes: [StepOutcome]) {
        pending.stepsReceived += 1
        batchHasSteps = true
        if let reason = Self.refusal(outcomes) {
            pending.stepsRefused[reason, default: 0] += 1
        } else {
            pending.stepsRouted += 1
        }
    }

    /// A deep link applied: routed if a flow navigated to it, else refused for its first reason.
    package func deepLink(_ outcomes: [StepOutcome]) {
        pending.deepLinks += 1
        batchHasSteps = true
        if let reason = Self.refusal(outcomes) {
            pending.stepsRefused[reason, default: 0] += 1
        } else {
            pending.deepLinksRouted += 1
        }
    }

    package func report() {
        pending.reports += 1
    }

    package func didNavigate(flow: String) {
        if navigationsInARow > 0, flow == navigatingFlow {
            navigationsInARow += 1
            return
        }
        countNavigationsInARow()
        navigatingFlow = flow
        navigationsInARow = 1
    }

    private func countNavigationsInARow() {
        guard navigationsInARow > 0 else { return }
        pendingNavigations[navigatingFlow, default: 0] += navigationsInARow
        navigationsInARow = 0
    }

    /// The reason a step counts as refused: none if a flow navigated to it (or nothing was
    /// refused), else the first refusal's.
    private static func refusal(_ outcomes: [StepOutcome]) -> DiagnosticReason? {
        var first: DiagnosticReason?
        for outcome in outcomes {
            switch outcome {
            case .navigated: return nil
            case .dropped(let reason, _): first = first ?? reason
            }
        }
        return first
    }

    /// A batch was applied, committed (`journal`: how long that took) and published: records its
    /// size and, if it carried steps, the time since the loop read its oldest message.
    package func batchDone(size: Int, receivedAt: ContinuousClock.Instant?, journal: Duration?) {
        pending.batches += 1
        batchSize.record(size)
        if batchHasSteps, let receivedAt {
            let nanoseconds = Self.nanoseconds(receivedAt.duration(to: .now))
            stepLatency.recordNanoseconds(nanoseconds)
            totals.latencyBatches += 1
            totals.latencyNanoseconds += nanoseconds
            totals.latencyMaxNanoseconds = max(totals.latencyMaxNanoseconds, nanoseconds)
        }
        batchHasSteps = false
        if let journal {
            let nanoseconds = Self.nanoseconds(journal)
            let timer = journalCommit ?? CoreMetrics.Timer(label: "flowbus_journal_commit_seconds")
            journalCommit = timer
            timer.recordNanoseconds(nanoseconds)
            totals.journalCommits += 1
            totals.journalNanoseconds += nanoseconds
        }
    }

    /// Hands what was counted since the last flush to swift-metrics.
    package func flush(ingress: IngressCounters, events: EventCounts) {
        let counts = pending
        pending = Totals()
        add(counts.stepsReceived, to: stepsReceived, total: \.stepsReceived)
        add(counts.stepsRouted, to: stepsRouted, total: \.stepsRouted)
        add(counts.deepLinks, to: deepLinks, total: \.deepLinks)
        add(counts.deepLinksRouted, to: deepLinksRouted, total: \.deepLinksRouted)
        add(counts.reports, to: reports, total: \.reports)
        totals.batches += counts.batches
        for (reason, count) in counts.stepsRefused {
            totals.stepsRefused[reason, default: 0] += count
            counter(&stepsRefused, "flowbus_steps_refused_total", [("reason", reason.rawValue)], key: reason).increment(
                by: count)
        }
        countNavigationsInARow()
        if !pendingNavigations.isEmpty {
            for (flow, count) in pendingNavigations {
                totals.navigations += count
                counter(&navigations, "flowbus_navigations_total", [("flow", flow)], key: flow).increment(by: count)
            }
            pendingNavigations.removeAll(keepingCapacity: true)
        }

        increment(ingressMessages, by: ingress.received - lastIngress.received)
        increment(ingressDuplicates, by: ingress.duplicates - lastIngress.duplicates)
        increment(ingressOutOfOrder, by: ingress.outOfOrder - lastIngress.outOfOrder)
        increment(journalLost, by: Int(clamping: ingress.journalLost - lastIngress.journalLost))
        increment(controlRequests, by: ingress.controlRequests - lastIngress.controlRequests)
        increment(controlRefused, by: ingress.controlRateRefused - lastIngress.controlRateRefused)
        increment(controlDropped, by: ingress.controlRateDropped - lastIngress.controlRateDropped)
        increment(controlPeerGone, by: ingress.controlPeerGone - lastIngress.controlPeerGone)
        if ingress.refused != lastIngress.refused {
            for (reason, count) in ingress.refused where count > lastIngress.refused[reason, default: 0] {
                counter(&ingressRefused, "flowbus_ingress_refused_total", [("reason", reason.rawValue)], key: reason)
                    .increment(by: count - lastIngress.refused[reason, default: 0])
            }
        }
        lastIngress = ingress

        increment(eventsPublished, by: events.published - lastEvents.published)
        increment(eventsDropped, by: events.dropped - lastEvents.dropped)
        increment(eventsUnwanted, by: events.unwanted - lastEvents.unwanted)
        lastEvents = events
    }

    private func add(_ count: Int, to counter: Counter, total: WritableKeyPath<Totals, Int>) {
        guard count > 0 else { return }
        totals[keyPath: total] += count
        counter.increment(by: count)
    }

    private func increment(_ counter: Counter, by count: Int) {
        if count > 0 { counter.increment(by: count) }
    }

    private func counter<Key: Hashable>(
        _ cache: inout [Key: Counter], _ label: String, _ dimensions: [(String, String)], key: Key
    ) -> Counter {
        if let existing = cache[key] { return existing }
        let created = Counter(label: label, dimensions: dimensions)
        cache[key] = created
        return created
    }

    private static func nanoseconds(_ duration: Duration) -> Int64 {
        let (seconds, attoseconds) = duration.components
        return seconds * 1_000_000_000 + attoseconds / 1_000_000_000
    }

    /// The key figures for the status reply (`metrics`).
    package func status(endpoint: String?, exposition: MetricsExposition?) -> WireValue {
        func milliseconds(_ nanoseconds: Int64) -> WireValue { .double(Double(nanoseconds) / 1e6) }
        var map: WireParams = [
            "steps_received": .int(Int64(totals.stepsReceived)),
            "steps_routed": .int(Int64(totals.stepsRouted)),
            "steps_refused": .map(
                Dictionary(
                    uniqueKeysWithValues: totals.stepsRefused.map { ($0.key.rawValue, WireValue.int(Int64($0.value))) })
            ),
            "deep_links": .int(Int64(totals.deepLinks)),
            "deep_links_routed": .int(Int64(totals.deepLinksRouted)),
            "navigations": .int(Int64(totals.navigations)),
            "batches": .int(Int64(totals.batches)),
            "step_latency_ms": .map([
                "batches": .int(Int64(totals.latencyBatches)),
                "mean": totals.latencyBatches == 0
                    ? .null : milliseconds(totals.latencyNanoseconds / Int64(totals.latencyBatches)),
                "max": totals.latencyBatches == 0 ? .null : milliseconds(totals.latencyMaxNanoseconds),
            ]),
            "endpoint": endpoint.map { .string($0) } ?? .null,
        ]
        if totals.journalCommits > 0 {
            map["journal_commit_ms"] = .map([
                "commits": .int(Int64(totals.journalCommits)),
                "mean": milliseconds(totals.journalNanoseconds / Int64(totals.journalCommits)),
            ])
        }
        if let exposition { map["prometheus"] = .string(exposition.text) }
        return .map(map)
    }
}
