/// Which table a scenario belongs to; also its key in the JSON report.
enum ScenarioGroup: String, Codable, CaseIterable, Sendable {
    /// Plain libzmq paths with FlowBus-sized messages: the baselines.
    case raw
    /// FlowBus's own paths (steps through flowd, actions through a reactor).
    case flowbus
}

/// Names a scenario's result, e.g. `raw.two_hop`.
struct ScenarioID: Hashable, Sendable, CustomStringConvertible {
    var group: ScenarioGroup
    var key: String
    var description: String { "\(group.rawValue).\(key)" }

    /// The raw two-hop path (process → forwarder → process): the baseline FlowBus scenarios are
    /// divided by, since they have the same shape (stepper → flowd → receiver).
    static let rawTwoHop = ScenarioID(group: .raw, key: "two_hop")
    /// The one-flow steps scenario: the reference of the scenarios that vary its flowd.
    static let steps = ScenarioID(group: .flowbus, key: StepsScenario.plainKey)
}

/// One measured path. A scenario starts its processes through ``Bench``, measures throughput
/// and latency with the same method as every other scenario, and stops them.
///
/// The common method, so that figures compare:
/// - throughput: the sender sends `config.messages` messages as fast as it can; the receiving
///   process counts them and times its first to its last one (msg/s).
/// - latency: one message in flight; the receiving process acknowledges each with the
///   CLOCK_MONOTONIC time it got it; the sending process subtracts its own send time (one-way,
///   both processes read the same clock). p50/p99 over `config.latencySamples` messages after
///   `config.latencyWarmup` unmeasured ones.
/// - CPU: a path with a process in the middle (the raw forwarder, a daemon) reads its utime +
///   stime from /proc before the throughput run's first message and after the receiver's
///   report, and divides by the messages received (µs/msg); its VmHWM is the peak memory.
///
/// To add a scenario: write a type conforming to this protocol and append an instance to
/// ``allScenarios(config:includeSingleFrame:)``. Set ``baseline`` to get ratio columns.
protocol Scenario {
    var id: ScenarioID { get }
    /// One line for the table, e.g. `DEALER → ROUTER/PUB forwarder → SUB`.
    var path: String { get }
    /// The scenario whose figures the ratios divide by, or `nil` for none.
    var baseline: ScenarioID? { get }
    /// A second scenario this one's throughput is divided by (e.g. `flowbus.steps` for the steps
    /// at scale), or `nil` for none.
    var reference: ScenarioID? { get }
    func run(on bench: Bench) throws -> Measurement
    /// Checks what the scenario needs outside flowbench (e.g. the flowd executable) before any
    /// scenario runs, so a missing piece fails the run at once. Default: nothing to check.
    func preflight(config: BenchConfig) throws
}

extension Scenario {
    func preflight(config: BenchConfig) throws {}
    var reference: ScenarioID? { nil }
    /// The scenarios that must run before this one for its ratios.
    var dependencies: [ScenarioID] { [baseline, reference].compactMap { $0 } }
}

/// What a scenario measured.
struct Measurement: Sendable {
    /// Bytes of one message on the wire (all frames, routing ids excluded).
    var messageBytes: Int
    var frames: Int
    var throughputPerSecond: Double?
    /// How fast the sending process got its messages out (a hint at where the bottleneck is).
    var senderPerSecond: Double?
    var latency: LatencySummary?
    /// Messages sent but not received in the throughput run.
    var lost: Int
    /// Messages whose acknowledgement did not come within a second in the latency run.
    var latencyLost: Int
    /// The process in the middle of the path (forwarder or daemon) over the throughput run.
    var usage: ProcessUsage? = nil
    /// Messages the throughput run moved through that process (what ``usage`` is divided by).
    var throughputMessages = 0
    /// The daemon's journal, if it has one.
    var journal: JournalInfo? = nil
    /// What a setup phase built in the daemon before the throughput run.
    var setup: SetupFigures? = nil

    /// Heap allocations of the middle process per message moved (libzmq's included).
    var allocationsPerMessage: Double? {
        guard let allocations = usage?.allocations, throughputMessages > 0 else { return nil }
        return Double(allocations) / Double(throughputMessages)
    }

    /// User + system CPU time of the middle process per message moved, in microseconds.
    var cpuMicrosecondsPerMessage: Double? {
        guard let usage, throughputMessages > 0 else { return nil }
        return usage.cpuSeconds * 1e6 / Double(throughputMessages)
    }

    /// The figures of a path measured once for throughput and once for latency.
    init(throughput: PathRun, latency: PathRun, frames: Int) {
        let elapsed = Double(throughput.receiver.firstToLastNanoseconds) / 1e9
        messageBytes = throughput.receiver.bytesPerMessage
        self.frames = frames
        throughputPerSecond = elapsed > 0 ? Double(throughput.receiver.received) / elapsed : nil
        senderPerSecond = throughput.sender.elapsedNanoseconds.map {
            Double(throughput.sender.sent) / (Double($0) / 1e9)
        }
        self.latency = latency.sender.latency
        lost = throughput.receiver.lost
        latencyLost = latency.sender.lost
        usage = throughput.usage
        throughputMessages = throughput.receiver.received
    }
}

/// What one measurement (throughput or latency) of a path returned.
struct PathRun {
    var sender: SenderReport
    var receiver: ReceiverReport
    /// The middle process over the measurement, if the path has one and it was metered.
    var usage: ProcessUsage?
}

/// A daemon's journal in a journaled scenario.
struct JournalInfo: Codable, Sendable {
    var path: String
    /// `full` or `normal` (flowd's `persistence.synchronous`).
    var synchronous: String
    /// The file system holding it (e.g. `ext4`, `tmpfs`): what a commit's flush costs depends on it.
    var fileSystem: String?
    /// `path` is a PostgreSQL URL.
    var isPostgres: Bool? = nil
    /// A reactor host's state database, not flowd's journal.
    var holdsStates: Bool? = nil
}

/// What a scenario's setup phase built in a daemon, and how long it took.
struct SetupFigures: Codable, Sendable {
    /// Steps sent to build it.
    var steps: Int
    /// From the first setup step sent to flowd's acknowledgement of the last.
    var seconds: Double
    /// The daemon's resident set size right after the setup: what holding the tree costs, before
    /// the measurement queues messages in its sockets.
    var residentBytes: Int?
    /// The live tree's size, from the daemon's status reply after the throughput run.
    var census: Census?

    struct Census: Codable, Sendable {
        var flows: Int
        /// Every binding in the status reply: remote steppers, and each flow's own stepper.
        var bindings: Int
        /// Bindings of remote stepper ids (what a stepper process can publish as).
        var remoteBindings: Int
        /// How long the status request took, reply decoded.
        var statusSeconds: Double
    }
}

extension Bench {
    /// Primes a path whose peers are started (probes until the receiver has one), measures, and
    /// collects both reports. `middle` (the forwarder's or daemon's process id) is metered from
    /// just before `go` to the reports.
    /// - Parameter middle: The name of the process in the middle of the path, whose CPU time,
    ///   memory and allocations are metered over the run.
    func primeAndMeasure(sender: String, receiver: String, timeout: Double, middle: String?) throws -> PathRun {
        // Slow joiner: probes flow until the receiver has one, so its subscription is in place
        // end to end before the first measured message.
        try send(sender, "prime")
        _ = try waitFor("primed", from: receiver, timeout: 15)
        let pid = middle.flatMap(processID(of:))
        let meter = pid.map(ProcessUsage.Meter.init(pid:))
        var allocations = middle.flatMap { name in
            pid.map { AllocationCounter.Meter(pid: $0, file: allocationsFile(of: name)) }
        }
        let allocationsBefore = allocations?.read()
        try send(sender, "go")
        let senderReport = try result(SenderReport.self, from: sender, timeout: timeout)
        let receiverReport = try result(ReceiverReport.self, from: receiver, timeout: timeout)
        var usage = meter?.finish()
        if let allocationsBefore, let allocationsAfter = allocations?.read() {
            usage?.allocations = allocationsAfter - allocationsBefore
        }
        return PathRun(sender: senderReport, receiver: receiverReport, usage: usage)
    }
}

/// A measurement with its scenario and, if it has a baseline, the ratios to it.
struct ScenarioResult: Sendable {
    var id: ScenarioID
    var path: String
    var measurement: Measurement
    var baseline: ScenarioID?
    var throughputRatio: Double?
    var p50Ratio: Double?
    var p99Ratio: Double?
    /// CPU time per message of this path's middle process ÷ the baseline's.
    var cpuRatio: Double?
    var reference: ScenarioID?
    /// Throughput ÷ the reference scenario's.
    var referenceThroughputRatio: Double?
    /// Each round's throughput, when the run had more than one (`--rounds`).
    var roundThroughputs: [Double?] = []
    /// A baseline's throughput in each round as first measured and as measured again after the
    /// scenarios divided by it (the faster is shown, and divides their ratios).
    var remeasuredThroughputs: [(first: Double?, again: Double?)] = []
}

/// The scenarios of a run, in order. Baselines come before the scenarios divided by them.
func allScenarios(config: BenchConfig, includeSingleFrame: Bool) -> [any Scenario] {
    var list: [any Scenario] = [
        RawPathScenario(hops: .one, shape: .step),
        RawPathScenario(hops: .two, shape: .step),
    ]
    if includeSingleFrame {
        list += [RawPathScenario(hops: .one, shape: .single), RawPathScenario(hops: .two, shape: .single)]
    }
    // FlowBus scenarios, with `baseline: .rawTwoHop`; the plain steps first, the reference of the others.
    list.append(StepsScenario(journal: .none))
    list.append(StepsScenario(journal: .sqlite))
    // Built with the PostgreSQL trait (flowd too, in the same build), where PostgreSQL is installed
    // (scripts/bootstrap installs it).
    #if PostgreSQL
    if BenchPostgres.isAvailable { list.append(StepsScenario(journal: .postgres)) }
    #endif
    // Built with the Tracing trait (flowd too): spans exported to a local OTLP/HTTP sink.
    #if Tracing
    list.append(StepsScenario(journal: .none, tracing: .all))
    list.append(StepsScenario(journal: .none, tracing: .onePercent))
    #endif
    list.append(ScaleScenario(tree: ScaleTree(flows: config.scaleFlows, bindings: config.scaleBindings)))
    list.append(ReactorScenario())
    list.append(ReactorScenario(saved: true))
    return list
}

/// Runs every scenario `rounds` times, all of them in each round, so that a baseline and the
/// scenarios divided by it are measured close together. A scenario shows its median round
/// (by throughput); its ratios to its baseline and reference are the medians of each round's.
///
/// A baseline is measured again at the end of each round, after the scenarios divided by it, and
/// the faster of its two measurements counts: a baseline slowed by a passing disturbance of the
/// machine would flatter every ratio to it.
func runScenarios(
    _ scenarios: [any Scenario], rounds: Int = 1, on bench: Bench, progress: (String) -> Void
) throws -> [ScenarioResult] {
    for scenario in scenarios { try scenario.preflight(config: bench.config) }
    let dividing = Set(scenarios.compactMap(\.baseline))
    let baselines = scenarios.indices.filter { dividing.contains(scenarios[$0].id) }
    var measured: [[Measurement]] = Array(repeating: [], count: scenarios.count)
    var remeasured: [[(first: Double?, again: Double?)]] = Array(repeating: [], count: scenarios.count)
    for round in 1...max(1, rounds) {
        let which = rounds > 1 ? " (round \(round) of \(rounds))" : ""
        for (index, scenario) in scenarios.enumerated() {
            progress("\(scenario.id)\(which): \(scenario.path)")
            measured[index].append(try scenario.run(on: bench))
        }
        for index in baselines {
            let scenario = scenarios[index]
            progress("\(scenario.id)\(which), again: \(scenario.path)")
            let again = try scenario.run(on: bench)
            let first = measured[index][round - 1]
            remeasured[index].append((first.throughputPerSecond, again.throughputPerSecond))
            if (again.throughputPerSecond ?? 0) > (first.throughputPerSecond ?? 0) {
                measured[index][round - 1] = again
            }
        }
    }
    let index = { (id: ScenarioID?) in id.flatMap { id in scenarios.firstIndex { $0.id == id } } }
    return scenarios.enumerated().map { position, scenario in
        let own = measured[position]
        var result = ScenarioResult(
            id: scenario.id, path: scenario.path, measurement: own[medianRound(own)],
            baseline: scenario.baseline, reference: scenario.reference)
        if own.count > 1 { result.roundThroughputs = own.map(\.throughputPerSecond) }
        result.remeasuredThroughputs = remeasured[position]
        // The median over the rounds of `figure` ÷ the same round's in `other`.
        func ratio(to other: [Measurement], _ figure: (Measurement) -> Double?) -> Double? {
            median(zip(own, other).compactMap { ratioOf(figure($0), figure($1)) })
        }
        if let base = index(scenario.baseline).map({ measured[$0] }) {
            result.throughputRatio = ratio(to: base) { $0.throughputPerSecond }
            result.p50Ratio = ratio(to: base) { $0.latency.map { Double($0.p50Nanoseconds) } }
            result.p99Ratio = ratio(to: base) { $0.latency.map { Double($0.p99Nanoseconds) } }
            result.cpuRatio = ratio(to: base) { $0.cpuMicrosecondsPerMessage }
        }
        if let reference = index(scenario.reference).map({ measured[$0] }) {
            result.referenceThroughputRatio = ratio(to: reference) { $0.throughputPerSecond }
        }
        return result
    }
}

/// The round whose throughput is the median (the lower of the middle two); the last when none
/// has a throughput.
func medianRound(_ rounds: [Measurement]) -> Int {
    let ranked = rounds.indices.filter { rounds[$0].throughputPerSecond != nil }
        .sorted { rounds[$0].throughputPerSecond! < rounds[$1].throughputPerSecond! }
    guard !ranked.isEmpty else { return rounds.count - 1 }
    return ranked[(ranked.count - 1) / 2]
}

/// The median of `values` (the mean of the middle two when there is an even number); nil when empty.
func median(_ values: [Double]) -> Double? {
    guard !values.isEmpty else { return nil }
    let sorted = values.sorted()
    let middle = sorted.count / 2
    return sorted.count % 2 == 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2
}

private func ratioOf(_ value: Double?, _ base: Double?) -> Double? {
    guard let value, let base, base > 0 else { return nil }
    return value / base
}
