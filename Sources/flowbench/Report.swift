import Foundation
import FlowBusWire
import ZeroMQ

/// Facts about the machine, so figures from different runs can be told apart.
struct MachineInfo: Encodable {
    var cores: Int
    var cpu: String
    var libzmq: String
    var os: String

    static func current() -> MachineInfo {
        let cpuinfo = (try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8)) ?? ""
        let model = cpuinfo.split(separator: "\n").first { $0.hasPrefix("model name") }
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
        var throughputMethod = "sender sends N messages back to back; receiver times its first to its last message"
        var latencyMethod = "one message in flight; one-way time from the sender's CLOCK_MONOTONIC before send to the receiver's after receive (returned in an ack); nearest-rank percentiles"
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
        var baseline: String?
        var throughputRatio: Double?
        var p50Ratio: Double?
        var p99Ratio: Double?
    }

    /// The headline figures of one FlowBus scenario beside its baseline: `steps` (stepper →
    /// flowd → didNavigate receiver) and `reactor` (view → reactor host → state receiver), at the
    /// top level of the report.
    /// Ratios are FlowBus ÷ raw two-hop. Every key is always written (`null` when not measured).
    struct Headline: Encodable {
        var throughputPerS: Double?
        var p50Us: Double?
        var p99Us: Double?
        var throughputRatio: Double?
        var p50Ratio: Double?
        var p99Ratio: Double?

        enum CodingKeys: String, CodingKey {
            case throughputPerS, p50Us, p99Us, throughputRatio, p50Ratio, p99Ratio
        }

        init(_ path: Path) {
            throughputPerS = path.throughputPerS
            p50Us = path.p50Us
            p99Us = path.p99Us
            throughputRatio = path.throughputRatio
            p50Ratio = path.p50Ratio
            p99Ratio = path.p99Ratio
        }

        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(throughputPerS, forKey: .throughputPerS)
            try container.encode(p50Us, forKey: .p50Us)
            try container.encode(p99Us, forKey: .p99Us)
            try container.encode(throughputRatio, forKey: .throughputRatio)
            try container.encode(p50Ratio, forKey: .p50Ratio)
            try container.encode(p99Ratio, forKey: .p99Ratio)
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
    /// `flowbus.reactor` in short; absent when the reactor scenario did not run.
    var reactor: Headline?
    /// Operations per second.
    var codec: [String: Double]

    init(config: BenchConfig, results: [ScenarioResult], codec: [CodecResult]) throws {
        machine = .current()
        self.config = Config(
            transport: config.transport.rawValue, messages: config.messages, latencySamples: config.latencySamples,
            latencyWarmup: config.latencyWarmup, hwm: config.highWaterMark,
            flowdLogLevel: config.flowdLogLevel)
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
                baseline: result.baseline?.description,
                throughputRatio: result.throughputRatio.map { rounded($0, 3) },
                p50Ratio: result.p50Ratio.map { rounded($0, 3) },
                p99Ratio: result.p99Ratio.map { rounded($0, 3) })
        }
        raw = groups[.raw] ?? [:]
        flowbus = groups[.flowbus] ?? [:]
        steps = flowbus[StepsScenario.key].map(Headline.init)
        reactor = flowbus[ReactorScenario.key].map(Headline.init)
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

private func rounded(_ value: Double, _ digits: Int) -> Double {
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
        let header = ["scenario", "path", "bytes", "msg/s", "p50 µs", "p99 µs", "lost", "×msg/s", "×p50", "×p99"]
        var rows: [[String]] = []
        for result in results {
            let m = result.measurement
            rows.append([
                result.id.description, result.path, String(m.messageBytes),
                m.throughputPerSecond.map { grouped($0) } ?? "-",
                m.latency.map { String(format: "%.1f", $0.p50Microseconds) } ?? "-",
                m.latency.map { String(format: "%.1f", $0.p99Microseconds) } ?? "-",
                m.latencyLost == 0 ? String(m.lost) : "\(m.lost)+\(m.latencyLost)",
                result.throughputRatio.map { String(format: "%.2f", $0) } ?? "",
                result.p50Ratio.map { String(format: "%.2f", $0) } ?? "",
                result.p99Ratio.map { String(format: "%.2f", $0) } ?? "",
            ])
        }
        out += table(header: header, rows: rows, rightAligned: Set(2..<header.count))
        if results.contains(where: { $0.baseline != nil }) {
            out += "ratios: scenario ÷ \(ScenarioID.rawTwoHop)\n"
        }
        out += "\n"
    }
    if !codec.isEmpty {
        out += table(header: ["codec", "operation", "ops/s"],
                     rows: codec.map { [$0.key, $0.what, grouped($0.opsPerSecond)] }, rightAligned: [2])
    }
    return out
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
private func grouped(_ value: Double) -> String {
    let digits = String(Int(value.rounded()))
    var out = ""
    for (index, character) in digits.reversed().enumerated() {
        if index > 0 && index % 3 == 0 { out.append(",") }
        out.append(character)
    }
    return String(out.reversed())
}
