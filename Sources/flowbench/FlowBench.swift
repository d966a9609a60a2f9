import ArgumentParser
import Foundation

/// `flowbench`: raw libzmq baselines and FlowBus figures measured in one run, on this machine.
///
/// The root only dispatches: `run` (the default) measures; the hidden `peer` is what the child
/// processes run. They are siblings so that their options do not mix.
@main
struct FlowBench: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "flowbench",
        abstract:
            "Measure libzmq one-hop and two-hop paths, steps through flowd, actions through a reactor host, and the FlowBusWire codec with FlowBus's own messages.",
        discussion:
            "`flowbench` alone runs everything and prints a table; `flowbench --json` prints one JSON object. See `flowbench help run` for the options.",
        subcommands: [RunBenchmarks.self, PeerCommand.self],
        defaultSubcommand: RunBenchmarks.self
    )
}

/// `flowbench run`: every scenario, then the codec, then the table or the JSON object.
struct RunBenchmarks: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run",
        abstract:
            "Measure libzmq one-hop and two-hop paths, steps through flowd, actions through a reactor host, and the FlowBusWire codec with FlowBus's own messages.",
        discussion: """
            Every path runs in real processes (flowbench starts copies of itself) and carries a real \
            FlowBus step: 4 frames (topic, envelope, name, FBV params) encoded once with FlowBusWire. \
            Throughput: N messages back to back, timed at the receiver from first to last. Latency: \
            one message in flight, one-way time on the shared CLOCK_MONOTONIC, p50/p99. The steps \
            scenario runs the same step through a real flowd (built beside flowbench: \
            `swift build -c release --product flowd`) to a didNavigate subscriber; \
            the reactor scenario sends actions to a real reactor host, fixture-reactors (built beside \
            flowbench: `swift build -c release --product fixture-reactors`), whose bench reactor answers each with one \
            state (`tick(n:)` in, `{n}` out), to a state subscriber; both with ratios to the raw two-hop \
            path. steps_journaled is the steps scenario with flowd's SQLite journal (synchronous: full) in \
            the temporary directory; steps_journaled_postgres the same with a journal in a PostgreSQL server \
            flowbench starts on 127.0.0.1 with fsync on (where postgresql-15 is installed), with its ratio to \
            steps_journaled; steps_at_scale first builds --scale-flows flows and --scale-bindings \
            stepper bindings in flowd from a declared config, then sends the step from every bound stepper \
            in turn (with its ratio to steps, and flowd's peak RSS); reactor_saved is the reactor \
            scenario with the bench reactor's state saved to a SQLite database (synchronous: full), with \
            its ratio to reactor. cpu µs/msg is the user+system CPU time \
            of the process in the middle (the raw forwarder, flowd, fixture-reactors) over the throughput run \
            per message; ×cpu divides a daemon's by the forwarder's. The raw two-hop path is measured \
            again after the scenarios divided by it, and the faster of its two measurements counts. \
            Compare ratios within one run: figures move with the load of a shared machine.
            """
    )

    @Option(help: "Transport between the processes: ipc (socket files in a temporary directory) or tcp (127.0.0.1).")
    var transport: Transport = .ipc

    @Option(name: .customLong("messages"), help: "Messages per throughput measurement.")
    var messages: Int = 200_000

    @Option(
        name: [.customLong("latency-samples"), .customLong("round-trips")],
        help: "Measured messages per latency measurement (one in flight).")
    var latencySamples: Int = 10_000

    @Option(help: "Unmeasured messages before each latency measurement.")
    var latencyWarmup: Int = 500

    @Option(
        help: ArgumentHelp(
            "High-water mark of every data socket, in messages; the forwarder's PUB drops beyond it (counted as lost).",
            discussion:
                "Default: --messages + 1000 or 100000, whichever is larger, so that a receiver falling behind a throughput run never makes PUB drop."
        ))
    var hwm: Int32?

    @Option(help: "After the last message, how long a receiver waits for more before counting the rest as lost, in ms.")
    var idleTimeout: Int = 2000

    @Option(help: "Seconds spent on each codec operation.")
    var codecSeconds: Double = 0.3

    @Flag(inversion: .prefixedNo, help: "Also measure the step's bytes sent as one frame.")
    var singleFrame = true

    @Flag(inversion: .prefixedNo, help: "Measure the process paths.")
    var paths = true

    @Flag(inversion: .prefixedNo, help: "Measure the FlowBusWire codec.")
    var codec = true

    @Option(
        help: ArgumentHelp(
            "The flowd executable for the steps scenario (default: flowd beside flowbench).",
            discussion: "Build it with `swift build -c release --product flowd`, with the -c of flowbench."))
    var flowd: String?

    @Option(help: "flowd's --log-level in the steps scenario (flowd logs every didNavigate at info).")
    var flowdLogLevel: String = "info"

    @Option(
        help: ArgumentHelp(
            "The fixture-reactors executable for the reactor scenario (default: fixture-reactors beside flowbench).",
            discussion: "Build it with `swift build -c release --product fixture-reactors`."))
    var fixtureReactors: String?

    @Option(
        help: ArgumentHelp(
            "Leaf flows flowd holds in the steps_at_scale scenario.",
            discussion:
                "Built by setup steps before each measurement, in groups of up to 100 (each group is a flow too)."))
    var scaleFlows: Int = 10_000

    @Option(help: "Stepper bindings (screens with a remote stepper) over those flows in the steps_at_scale scenario.")
    var scaleBindings: Int = 100_000

    @Option(
        help: ArgumentHelp(
            "Measure every scenario this many times, one round of all after another.",
            discussion:
                "The table shows each scenario's median round (by throughput) and the medians of its rounds' ratios to the same round's baseline: on a shared machine one measurement moves by 15% from the next."
        ))
    var rounds: Int = 1

    @Option(
        parsing: .upToNextOption,
        help: "Run only these scenarios, by key or id (e.g. two_hop raw.one_hop); default: all.")
    var only: [String] = []

    @Flag(help: "Print one JSON object on stdout (the table goes to stderr).")
    var json = false

    func validate() throws {
        guard (1...21).contains(rounds) else { throw ValidationError("--rounds must be in 1...21, e.g. 3") }
        guard messages >= 1 else { throw ValidationError("--messages must be at least 1; 200000 takes about a second") }
        guard latencySamples >= 1 else { throw ValidationError("--latency-samples must be at least 1, e.g. 10000") }
        guard latencyWarmup >= 0 else { throw ValidationError("--latency-warmup cannot be negative; use 0 for none") }
        if let hwm, hwm < 0 { throw ValidationError("--hwm cannot be negative; 0 means no limit") }
        guard idleTimeout >= 100 else { throw ValidationError("--idle-timeout must be at least 100 ms") }
        guard codecSeconds > 0 && codecSeconds <= 10 else {
            throw ValidationError("--codec-seconds must be in (0, 10]")
        }
        guard scaleFlows >= 1 else { throw ValidationError("--scale-flows must be at least 1, e.g. 10000") }
        guard scaleBindings >= 1 else { throw ValidationError("--scale-bindings must be at least 1, e.g. 100000") }
        let levels = ["trace", "debug", "info", "notice", "warning", "error", "critical"]
        guard levels.contains(flowdLogLevel) else {
            throw ValidationError("--flowd-log-level must be one of \(levels.joined(separator: ", "))")
        }
    }

    func run() throws {
        let config = BenchConfig(
            transport: transport, messages: messages, latencySamples: latencySamples, latencyWarmup: latencyWarmup,
            highWaterMark: hwm ?? Int32(clamping: max(100_000, messages + 1_000)), idleTimeoutMilliseconds: idleTimeout,
            codecSeconds: codecSeconds,
            flowdPath: flowd, flowdLogLevel: flowdLogLevel, fixtureReactorsPath: fixtureReactors,
            scaleFlows: scaleFlows, scaleBindings: scaleBindings, rounds: rounds)
        let progress = { (line: String) in FileHandle.standardError.write(Data("flowbench: \(line)\n".utf8)) }

        var results: [ScenarioResult] = []
        if paths {
            ChildRegistry.shared.installSignalHandlers()
            let bench = try Bench(config: config)
            defer {
                bench.shutdown()
                BenchPostgres.shared.stop()
            }
            do {
                var scenarios = allScenarios(config: config, includeSingleFrame: singleFrame || !only.isEmpty)
                if !only.isEmpty {
                    // A selected scenario's baseline and reference run too (first), for its ratios.
                    let selected = scenarios.filter { only.contains($0.id.key) || only.contains($0.id.description) }
                    var needed = Set(selected.map(\.id))
                    var count = 0
                    while needed.count != count {
                        count = needed.count
                        for scenario in scenarios where needed.contains(scenario.id) {
                            needed.formUnion(scenario.dependencies)
                        }
                    }
                    scenarios = scenarios.filter { needed.contains($0.id) }
                    guard !scenarios.isEmpty else {
                        throw BenchError(
                            "no scenario matches --only \(only.joined(separator: " "))",
                            fix: "use keys from the table, e.g. --only one_hop two_hop")
                    }
                }
                results = try runScenarios(scenarios, rounds: config.rounds, on: bench, progress: progress)
            } catch let error as BenchError {
                bench.shutdown()
                FileHandle.standardError.write(Data("error: \(error)\n".utf8))
                throw ExitCode.failure
            }
        }
        var codecResults: [CodecResult] = []
        if codec {
            progress("codec: FlowBusWire in this process")
            codecResults = try CodecBench(seconds: codecSeconds).run()
        }

        let table = try renderTable(config: config, results: results, codec: codecResults)
        if json {
            FileHandle.standardError.write(Data(table.utf8))
            print(try BenchReport(config: config, results: results, codec: codecResults).json())
        } else {
            print(table, terminator: "")
        }
    }
}
