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
///
/// To add a scenario: write a type conforming to this protocol and append an instance to
/// ``allScenarios(config:includeSingleFrame:)``. Set ``baseline`` to get ratio columns.
protocol Scenario {
    var id: ScenarioID { get }
    /// One line for the table, e.g. `DEALER → ROUTER/PUB forwarder → SUB`.
    var path: String { get }
    /// The scenario whose figures the ratios divide by, or `nil` for none.
    var baseline: ScenarioID? { get }
    func run(on bench: Bench) throws -> Measurement
    /// Checks what the scenario needs outside flowbench (e.g. the flowd executable) before any
    /// scenario runs, so a missing piece fails the run at once. Default: nothing to check.
    func preflight(config: BenchConfig) throws
}

extension Scenario {
    func preflight(config: BenchConfig) throws {}
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
}

/// The scenarios of a run, in order. Baselines come before the scenarios divided by them.
func allScenarios(includeSingleFrame: Bool) -> [any Scenario] {
    var list: [any Scenario] = [
        RawPathScenario(hops: .one, shape: .step),
        RawPathScenario(hops: .two, shape: .step),
    ]
    if includeSingleFrame {
        list += [RawPathScenario(hops: .one, shape: .single), RawPathScenario(hops: .two, shape: .single)]
    }
    // FlowBus scenarios, with `baseline: .rawTwoHop`.
    list.append(StepsScenario())
    list.append(ReactorScenario())
    return list
}

/// Runs the scenarios and computes the ratios of each to its baseline.
func runScenarios(_ scenarios: [any Scenario], on bench: Bench, progress: (String) -> Void) throws -> [ScenarioResult] {
    for scenario in scenarios { try scenario.preflight(config: bench.config) }
    var results: [ScenarioResult] = []
    for scenario in scenarios {
        progress("\(scenario.id): \(scenario.path)")
        let measurement = try scenario.run(on: bench)
        var result = ScenarioResult(id: scenario.id, path: scenario.path, measurement: measurement, baseline: scenario.baseline)
        if let baselineID = scenario.baseline, let base = results.first(where: { $0.id == baselineID })?.measurement {
            result.throughputRatio = ratio(measurement.throughputPerSecond, base.throughputPerSecond)
            result.p50Ratio = ratio(measurement.latency.map { Double($0.p50Nanoseconds) }, base.latency.map { Double($0.p50Nanoseconds) })
            result.p99Ratio = ratio(measurement.latency.map { Double($0.p99Nanoseconds) }, base.latency.map { Double($0.p99Nanoseconds) })
        }
        results.append(result)
    }
    return results
}

private func ratio(_ value: Double?, _ base: Double?) -> Double? {
    guard let value, let base, base > 0 else { return nil }
    return value / base
}
