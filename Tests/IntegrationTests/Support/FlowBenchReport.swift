import FlowBusTesting
import Foundation
import Testing

/// What the tests read of flowbench's `--json` report, and a run of the flowbench built beside them.
struct FlowBenchReport: Decodable {
    struct Config: Decodable {
        var rounds: Int
    }
    struct Journal: Decodable {
        var path: String
        var synchronous: String
        var holdsStates: Bool?
    }
    struct Path: Decodable {
        var throughputPerS: Double?
        var throughputRatio: Double?
        var allocsPerMsg: Double?
        var lost: Int
        var roundThroughputsPerS: [Double?]?
        var remeasuredThroughputsPerS: [[Double?]]?
        var reference: String?
        var referenceThroughputRatio: Double?
        var journal: Journal?
    }
    struct FlowBus: Decodable {
        var steps: Path?
        var reactor: Path?
        var reactorSaved: Path?
    }
    struct Raw: Decodable {
        var twoHop: Path
    }
    var config: Config
    var flowbus: FlowBus
    var raw: Raw

    /// Runs flowbench with `arguments` and `--json` in a temporary directory (its ipc files too)
    /// and decodes its report; fails with its output unless it exits 0 within `timeout`.
    /// - Returns: the report and what flowbench wrote on stderr (its progress).
    static func run(
        _ arguments: [String], timeout: Duration = .seconds(300)
    ) throws -> (
        report: FlowBenchReport, stderr: String
    ) {
        let directory = try TemporaryDirectory()
        let bench = try ManagedProcess(
            name: "flowbench", executable: try BuiltProducts.executable("flowbench"), arguments: arguments + ["--json"],
            environment: ["TMPDIR": directory.url.path], in: directory.url, mayExit: true)
        defer { bench.stop() }
        try #require(bench.exitStatus(within: timeout) == 0, "\(bench.transcript)")
        let decoder = JSONDecoder()
        decoder.keyDecodingStrategy = .convertFromSnakeCase
        return (try decoder.decode(FlowBenchReport.self, from: Data(bench.stdout.utf8)), bench.stderr)
    }
}
