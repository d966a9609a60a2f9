import FlowBusWire
import Foundation
import ZeroMQ

/// Facts about the machine, so figures from different runs can be told apart.
struct MachineInfo: Encodable {
    var cores: Int
    var cpu: String
    var libzmq: String
    var os: String

    static func current() -> MachineInfo {
        let cpuinfo = (try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8)) ?? ""
        let model =
            cpuinfo.split(separator: "\n").first { $0.hasPrefix("model name") }
            .flatMap { $0.split(separator: ":", maxSplits: 1).last }
            .map { $0.trimmingCharacters(in: .whitespaces) } ?? "unknown"
        return MachineInfo(
            cores: ProcessInfo.processInfo.activeProcessorCount, cpu: model,
            libzmq: ZeroMQLibrary.versionString, os: ProcessInfo.processInfo.operatingSystemVersionString)
    }
}

/// The whole run as one JSON object (`--json`).
struct BenchReport: Encodable {
    struct Config: Encodable {
        var transport: String
        var messages: Int
        var latencySamples: Int
        var latencyWarmup: Int
        var hwm: Int32
        /// flowd's `--log-level` in the steps scenario (at `info` flowd logs every didNavigate).
        var flowdLogLevel: String
        /// Leaf flows and leaf stepper bindings the scale scenario asks for.
        var scaleFlows: Int
        var scaleBindings: Int
        /// Measurements of each scenario (`--rounds`): a path shows its median round.
        var rounds: Int
        var throughputMethod = "sender sends N messages back to back; receiver times its first to its last message"
        var latencyMethod =
            "one message in flight; one-way time from the sender's CLOCK_MONOTONIC before send to the receiver's after receive (returned in an ack); nearest-rank percentiles"
        var cpuMethod =
            "utime + stime from /proc/PID/stat of the middle process (raw forwarder, flowd, "
            + "fixture-reactors), read before the throughput run's first message and after the receiver's report, "
            + "divided by the messages received"
    }
    struct MessageInfo: Encodable {
        var topic: String
        var step: String
        var params: String
        var frameBytes: [Int]
        var bytes: Int
    }
    struct Path: Encodable {
        var path: String
        var messageBytes: Int
        var frames: Int
        var throughputPerS: Double?
        var sentPerS: Double?
        var p50Us: Double?
        var p99Us: Double?
        var maxUs: Double?
        var latencySamples: Int?
        var lost: Int
        var latencyLost: Int
        /// User + system CPU time of the middle process (forwarder or daemon) per message moved
        /// in the throughput run.
        var cpuUsPerMsg: Double?
        /// Its heap allocations per message moved in the throughput run (libzmq's included).
        var allocsPerMsg: Double?
        /// Its peak resident set size (VmHWM) at the end of the throughput run, in 10^6 bytes.
        var peakRssMb: Double?
        var baseline: String?
        var throughputRatio: Double?
        var p50Ratio: Double?
        var p99Ratio: Double?
        var cpuRatio: Double?
        var reference: String?
        var referenceThroughputRatio: Double?
        var journal: JournalInfo?
        var setup: SetupFigures?
        /// Each round's throughput, with `--rounds` above 1 (the path's figures are the median round's).
        var roundThroughputsPerS: [Double?]? = nil
        /// A baseline's throughput in each round as first measured and as measured again after the
        /// scenarios divided by it: the faster is the one shown, and divides their ratios.
        var remeasuredThroughputsPerS: [[Double?]]? = nil
    }

    /// The headline figures of one FlowBus scenario beside its baseline, at the top level of
    /// the report: `steps` (stepper → flowd → didNavigate receiver), `steps_journaled`,
    /// `steps_at_scale` and `reactor` (view → reactor host → state receiver).
    /// Ratios are FlowBus ÷ raw two-hop (`cpu_ratio`: the daemon's CPU time per message ÷ the
    /// forwarder's, `baseline_cpu_us_per_msg`). Every key is always written (`null` when not measured); the scenarios
    /// compared with `steps` add `throughput_ratio_to_steps`, the scale scenario what it built.
    struct Headline: Encodable {
        var throughputPerS: Double?
        var p50Us: Double?
        var p99Us: Double?
        var throughputRatio: Double?
        var p50Ratio: Double?
        var p99Ratio: Double?
        var cpuUsPerMsg: Double?
        /// The raw forwarder's, which ``cpuRatio`` divides by.
        var baselineCpuUsPerMsg: Double?
        var cpuRatio: Double?
        var allocsPerMsg: Double?
        /// The raw forwarder's: what libzmq and a minimal loop allocate per message.
        var baselineAllocsPerMsg: Double?
        var peakRssMb: Double?
        var hasReference: Bool
        var throughputRatioToSteps: Double?
        var setup: SetupFigures?

        enum CodingKeys: String, CodingKey {
            case throughputPerS, p50Us, p99Us, throughputRatio, p50Ratio, p99Ratio
            case cpuUsPerMsg, baselineCpuUsPerMsg, cpuRatio, allocsPerMsg, baselineAllocsPerMsg, peakRssMb
            case throughputRatioToSteps, flows, bindings, remoteBindings, setupSteps, setupS, rssAfterSetupMb
        }

        init(_ path: Path, baseline: Path?) {
            throughputPerS = path.throughputPerS
            p50Us = path.p50Us
            p99Us = path.p99Us
            throughputRatio = path.throughputRatio
            p50Ratio = path.p50Ratio
            p99Ratio = path.p99Ratio
            cpuUsPerMsg = path.cpuUsPerMsg
            baselineCpuUsPerMsg = baseline?.cpuUsPerMsg
            cpuRatio = path.cpuRatio
            allocsPerMsg = path.allocsPerMsg
            baselineAllocsPerMsg = baseline?.allocsPerMsg
            peakRssMb = path.peakRssMb
            hasReference = path.reference != nil
            throughputRatioToSteps = path.referenceThroughputRatio
            setup = path.setup
        }

        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(throughputPerS, forKey: .throughputPerS)
            try container.encode(p50Us, forKey: .p50Us)
            try container.encode(p99Us, forKey: .p99Us)
            try container.encode(throughputRatio, forKey: .throughputRatio)
            try container.encode(p50Ratio, forKey: .p50Ratio)
            try container.encode(p99Ratio, forKey: .p99Ratio)
            try container.encode(cpuUsPerMsg, forKey: .cpuUsPerMsg)
            try container.encode(baselineCpuUsPerMsg, forKey: .baselineCpuUsPerMsg)
            try container.encode(cpuRatio, forKey: .cpuRatio)
            try container.encode(allocsPerMsg, forKey: .allocsPerMsg)
            try container.encode(baselineAllocsPerMsg, forKey: .baselineAllocsPerMsg)
            try container.encode(peakRssMb, forKey: .peakRssMb)
            if hasReference { try container.encode(throughputRatioToSteps, forKey: .throughputRatioToSteps) }
            if let setup {
                try container.encode(setup.census?.flows, forKey: .flows)
                try container.encode(setup.census?.bindings, forKey: .bindings)
                try container.encode(setup.census?.remoteBindings, forKey: .remoteBindings)
                try container.encode(setup.steps, forKey: .setupSteps)
                try container.encode(rounded(setup.seconds, 2), forKey: .setupS)
                try container.encode(setup.residentBytes.map { rounded(Double($0) / 1e6, 1) }, forKey: .rssAfterSetupMb)
            }
        }
    }

    var machine: MachineInfo
    var config: Config
    var message: MessageInfo
    /// The key ratios are computed against, e.g. `raw.two_hop`.
    var baseline: String
    var raw: [String: Path]
    var flowbus: [String: Path]
    /// `flowbus.steps` in short; absent when the steps scenario did not run.
    var steps: Headline?
    /// `flowbus.steps_journaled` in short; absent when it did not run.
    var stepsJournaled: Headline?
    /// `flowbus.steps_at_scale` in short; absent when it did not run.
    var stepsAtScale: Headline?
    /// `flowbus.reactor` in short; absent when the reactor scenario did not run.
    var reactor: Headline?
    /// Operations per second.
    var codec: [String: Double]

    init(config: BenchConfig, results: [ScenarioResult], codec: [CodecResult]) throws {
        machine = .current()
        self.config = Config(
            transport: config.transport.rawValue, messages: config.messages, latencySamples: config.latencySamples,
            latencyWarmup: config.latencyWarmup, hwm: config.highWaterMark,
            flowdLogLevel: config.flowdLogLevel, scaleFlows: config.scaleFlows, scaleBindings: config.scaleBindings,
            rounds: config.rounds)
        let frames = try BenchMessage.stepFrames()
        message = MessageInfo(
            topic: String(decoding: frames.frameBytes(0), as: UTF8.self), step: BenchMessage.stepName,
            params: WireValueText.params(BenchMessage.params),
            frameBytes: (0..<frames.count).map(frames.frameSize), bytes: frames.byteCount)
        baseline = ScenarioID.rawTwoHop.description
        var groups: [ScenarioGroup: [String: Path]] = [:]
        for result in results {
            let m = result.measurement
            groups[result.id.group, default: [:]][result.id.key] = Path(
                path: result.path, messageBytes: m.messageBytes, frames: m.frames,
                throughputPerS: m.throughputPerSecond.map { $0.rounded() },
                sentPerS: m.senderPerSecond.map { $0.rounded() },
                p50Us: m.latency.map { rounded($0.p50Microseconds, 1) },
                p99Us: m.latency.map { rounded($0.p99Microseconds, 1) },
                maxUs: m.latency.map { rounded(Double($0.maxNanoseconds) / 1000, 1) },
                latencySamples: m.latency?.samples, lost: m.lost, latencyLost: m.latencyLost,
                cpuUsPerMsg: m.cpuMicrosecondsPerMessage.map { rounded($0, 2) },
                allocsPerMsg: m.allocationsPerMessage.map { rounded($0, 2) },
                peakRssMb: m.usage?.peakResidentBytes.map { rounded(Double($0) / 1e6, 1) },
                baseline: result.baseline?.description,
                throughputRatio: result.throughputRatio.map { rounded($0, 3) },
                p50Ratio: result.p50Ratio.map { rounded($0, 3) },
                p99Ratio: result.p99Ratio.map { rounded($0, 3) },
                cpuRatio: result.cpuRatio.map { rounded($0, 3) },
                reference: result.reference?.description,
                referenceThroughputRatio: result.referenceThroughputRatio.map { rounded($0, 3) },
                journal: m.journal, setup: m.setup,
                roundThroughputsPerS: result.roundThroughputs.isEmpty
                    ? nil : result.roundThroughputs.map { $0?.rounded() },
                remeasuredThroughputsPerS: result.remeasuredThroughputs.isEmpty
                    ? nil : result.remeasuredThroughputs.map { [$0.first?.rounded(), $0.again?.rounded()] })
        }
        raw = groups[.raw] ?? [:]
        flowbus = groups[.flowbus] ?? [:]
        let headline = { [raw, flowbus] (key: String) in
            flowbus[key].map { Headline($0, baseline: raw[ScenarioID.rawTwoHop.key]) }
        }
        steps = headline(StepsScenario.plainKey)
        stepsJournaled = headline(StepsScenario.journaledKey)
        stepsAtScale = headline(ScaleScenario.key)
        reactor = headline(ReactorScenario.key)
        self.codec = Dictionary(uniqueKeysWithValues: codec.map { ($0.key, $0.opsPerSecond.rounded()) })
    }

    func json() throws -> String {
        let encoder = JSONEncoder()
        encoder.keyEncodingStrategy = .convertToSnakeCase
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return String(decoding: try encoder.encode(self), as: UTF8.self)
    }
}

/// `{withMovieId: 23452}` as the table shows it.
enum WireValueText {
    static func params(_ params: WireParams) -> String {
        "{" + params.keys.sorted().map { "\($0): \(params[$0]!.displayText)" }.joined(separator: ", ") + "}"
    }
}

func rounded(_ value: Double, _ digits: Int) -> Double {
    let scale = pow(10, Double(digits))
    return (value * scale).rounded() / scale
}

// MARK: - Table

/// The human-readable table.
func renderTable(config: BenchConfig, results: [ScenarioResult], codec: [CodecResult]) throws -> String {
    let machine = MachineInfo.current()
    let frames = try BenchMessage.stepFrames()
    var out = """
        flowbench — libzmq \(machine.libzmq), \(machine.cores) cores (\(machine.cpu)), transport \(config.transport.rawValue)
        message: \(BenchMessage.stepName)\(WireValueText.params(BenchMessage.params)) on \
        \(String(decoding: frames.frameBytes(0), as: UTF8.self)), frames \((0..<frames.count).map { String(frames.frameSize($0)) }.joined(separator: "+")) = \(frames.byteCount) B
        throughput: \(config.messages) messages back to back; latency: one-way, one in flight, \
        \(config.latencySamples) samples after \(config.latencyWarmup) warm-up

        """
    if results.contains(where: { $0.id.key == ReactorScenario.key }) {
        // The reactor scenario sends an action, not the step; its bytes column is the state it gets.
        let action = try BenchMessage.action().encoded()
        out += """
            reactor: action \(BenchMessage.actionName)\(WireValueText.params(BenchMessage.actionParams)) on \
            \(String(decoding: action.frameBytes(0), as: UTF8.self)), frames \((0..<action.count).map { String(action.frameSize($0)) }.joined(separator: "+")) \
            = \(action.byteCount) B; each gives one state {n} on \(Topic.state(BenchMessage.reactorID)) (bytes column)

            """
    }
    if !results.isEmpty {
        let header = [
            "scenario", "path", "bytes", "msg/s", "p50 µs", "p99 µs", "lost", "cpu µs/msg", "allocs/msg", "peak MB",
            "×msg/s", "×p50", "×p99", "×cpu",
        ]
        var rows: [[String]] = []
        for result in results {
            let m = result.measurement
            let figures: [String] = [
                m.throughputPerSecond.map { grouped($0) } ?? "-",
                m.latency.map { String(format: "%.1f", $0.p50Microseconds) } ?? "-",
                m.latency.map { String(format: "%.1f", $0.p99Microseconds) } ?? "-",
                m.latencyLost == 0 ? String(m.lost) : "\(m.lost)+\(m.latencyLost)",
                m.cpuMicrosecondsPerMessage.map { String(format: "%.2f", $0) } ?? "-",
                m.allocationsPerMessage.map { String(format: "%.2f", $0) } ?? "-",
                m.usage?.peakResidentBytes.map { String(format: "%.1f", Double($0) / 1e6) } ?? "-",
            ]
            let ratios: [Double?] = [result.throughputRatio, result.p50Ratio, result.p99Ratio, result.cpuRatio]
            rows.append(
                [result.id.description, result.path, String(m.messageBytes)] + figures
                    + ratios.map { $0.map { String(format: "%.2f", $0) } ?? "" })
        }
        out += table(header: header, rows: rows, rightAligned: Set(2..<header.count))
        if results.contains(where: { $0.measurement.usage != nil }) {
            out +=
                "cpu µs/msg: user+system CPU time of the middle process (raw forwarder, flowd, fixture-reactors) "
                + "over the throughput run ÷ messages received; allocs/msg: its heap allocations (malloc, calloc, realloc, "
                + "aligned) ÷ messages received, libzmq's included (the raw forwarder's are libzmq's and a minimal loop's); "
                + "peak MB: its VmHWM (10^6 bytes)\n"
        }
        if results.contains(where: { $0.baseline != nil }) {
            out += "ratios: scenario ÷ \(ScenarioID.rawTwoHop) (×cpu: daemon ÷ forwarder, goal ≤ 2)\n"
        }
        if config.rounds > 1 {
            out +=
                "\(config.rounds) rounds: each path shows its median round (by msg/s); each ratio is the median of the rounds' ratios to the same round's baseline\n"
        }
        for result in results {
            out += notes(for: result).map { "\(result.id): \($0)\n" }.joined()
        }
        out += "\n"
    }
    if !codec.isEmpty {
        out += table(
            header: ["codec", "operation", "ops/s"],
            rows: codec.map { [$0.key, $0.what, grouped($0.opsPerSecond)] }, rightAligned: [2])
    }
    return out
}

/// What the table's columns do not say about a result: its journal, what its setup built, its
/// ratio to the scenario it varies.
private func notes(for result: ScenarioResult) -> [String] {
    let m = result.measurement
    var notes: [String] = []
    if result.roundThroughputs.count > 1 {
        let each = result.roundThroughputs.map { $0.map(grouped) ?? "-" }.joined(separator: " / ")
        notes.append("rounds: \(each) msg/s")
    }
    if !result.remeasuredThroughputs.isEmpty {
        let each = result.remeasuredThroughputs.map {
            "\($0.first.map(grouped) ?? "-") then \($0.again.map(grouped) ?? "-")"
        }
        var line =
            "measured first and again after the scenarios divided by it: \(each.joined(separator: " / ")) msg/s; the faster counts"
        // Two measurements far apart: something else used the machine during one.
        if result.remeasuredThroughputs.contains(where: { pair in
            guard let first = pair.first, let again = pair.again, min(first, again) > 0 else { return false }
            return max(first, again) / min(first, again) > 1.15
        }) {
            line +=
                result.remeasuredThroughputs.count > 1
                ? " (more than 15% apart in a round: the machine was busy with something else)"
                : " (more than 15% apart: the machine was busy with something else; run again, or with --rounds 3)"
        }
        notes.append(line)
    }
    if let journal = m.journal {
        let fileSystem = journal.fileSystem ?? "an unknown file system"
        let what = journal.holdsStates == true ? "state database" : "journal"
        notes.append("\(what) \(journal.path) on \(fileSystem), synchronous: \(journal.synchronous)")
    }
    if let setup = m.setup {
        var built = "built by \(setup.steps) setup steps in \(String(format: "%.1f", setup.seconds)) s"
        if let census = setup.census {
            built =
                "flowd's status: \(grouped(census.flows)) live flows, \(grouped(census.bindings)) bindings "
                + "(\(grouped(census.remoteBindings)) of remote steppers), " + built
                + "; the status reply took \(String(format: "%.1f", census.statusSeconds)) s"
        }
        notes.append(built)
    }
    if let reference = result.reference {
        let ratio = result.referenceThroughputRatio.map { String(format: "%.2f", $0) } ?? "-"
        var line = "throughput ÷ \(reference) = \(ratio)"
        if m.setup != nil {
            let peak = m.usage?.peakResidentBytes.map { String(format: "%.1f MB", Double($0) / 1e6) } ?? "-"
            let settled = m.setup?.residentBytes.map { String(format: "%.1f MB", Double($0) / 1e6) } ?? "-"
            line += " (goal ≥ 0.8); flowd peak RSS \(peak) (goal ≤ 100 MB; \(settled) resident after the setup)"
        }
        notes.append(line)
    }
    return notes
}

private func table(header: [String], rows: [[String]], rightAligned: Set<Int>) -> String {
    var widths = header.map(\.count)
    for row in rows { for (index, cell) in row.enumerated() { widths[index] = max(widths[index], cell.count) } }
    func line(_ cells: [String]) -> String {
        cells.enumerated().map { index, cell in
            let padding = String(repeating: " ", count: widths[index] - cell.count)
            return rightAligned.contains(index) ? padding + cell : cell + padding
        }.joined(separator: "  ").replacingOccurrences(of: "\\s+$", with: "", options: .regularExpression) + "\n"
    }
    return line(header) + rows.map(line).joined()
}

/// 1234567 → "1,234,567".
func grouped(_ value: Int) -> String {
    grouped(Double(value))
}

/// 1234567 → "1,234,567".
func grouped(_ value: Double) -> String {
    let digits = String(Int(value.rounded()))
    var out = ""
    for (index, character) in digits.reversed().enumerated() {
        if index > 0 && index % 3 == 0 { out.append(",") }
        out.append(character)
    }
    return String(out.reversed())
}
