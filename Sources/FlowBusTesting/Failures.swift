import FlowBusWire
import Foundation
import Testing

/// An assertion of the kit did not hold: a trace differs from the expected one, an expected
/// event did not arrive in time, or something arrived that nobody asserted.
///
/// Thrown, so it fails a Swift Testing test (and an XCTest `throws` test) where it happens; the
/// message says what was expected and what came, as a diff, and where the assertion was written.
public struct ExpectationFailure: Error, CustomStringConvertible, Sendable {
    /// What went wrong, with the diff.
    public var message: String
    /// The assertion that failed.
    public var sourceLocation: SourceLocation

    public init(_ message: String, sourceLocation: SourceLocation) {
        self.message = message
        self.sourceLocation = sourceLocation
    }

    public var description: String {
        "\(message)\n(expectation at \(sourceLocation.fileID):\(sourceLocation.line))"
    }
}

/// A process of the topology ended while the test still needed it: it was not stopped by the
/// test and not started as a one-shot.
public struct ProcessDied: Error, CustomStringConvertible, Sendable {
    /// The process's name, e.g. `flowd`.
    public var name: String
    /// Its process id.
    public var processIdentifier: Int32
    /// How it ended: exit status or signal.
    public var termination: ManagedProcess.Termination
    /// The last lines it printed.
    public var outputTail: String
    /// What the test was doing when the death was noticed.
    public var context: String

    public var description: String {
        "\(name) (pid \(processIdentifier)) \(termination) \(context); its last output:\n\(outputTail.isEmpty ? "(nothing)" : outputTail)"
    }
}

/// A step or action the daemon refused (it acknowledged it and sent back a diagnostic).
public struct Refused: Error, CustomStringConvertible, Sendable {
    /// What was refused, e.g. `action submit to login`.
    public var what: String
    /// The daemon's diagnostic: reason code and details.
    public var diagnostic: DiagnosticMessage

    public var description: String {
        "\(what) was refused: \(diagnostic.reason.rawValue): \(diagnostic.message)"
    }
}

/// Whether `expected` occurs in `actual`: as the next items (exhaustive), or in order with
/// others in between (relaxed). `skip` items never count.
enum MatchOutcome: Equatable {
    /// All matched; the last one is `actual[through]` (-1 when nothing was expected).
    case matched(through: Int)
    /// No contradiction yet: more items may complete the match.
    case incomplete
    /// An item contradicts an exhaustive expectation.
    case mismatch
}

func match<Expected, Actual>(
    _ expected: [Expected], in actual: [Actual], exhaustive: Bool, skip: (Actual) -> Bool,
    matches: (Expected, Actual) -> Bool
) -> MatchOutcome {
    guard !expected.isEmpty else { return .matched(through: -1) }
    var next = 0
    for (index, item) in actual.enumerated() where !skip(item) {
        if matches(expected[next], item) {
            next += 1
            if next == expected.count { return .matched(through: index) }
        } else if exhaustive {
            return .mismatch
        }
    }
    return .incomplete
}

/// A line diff of expected against actual items, from their longest common subsequence:
/// `  ` both, `- ` expected but not received, `+ ` received but not expected (exhaustive) or
/// `~ ` received and skipped (relaxed, or ignored).
func renderDiff<Expected, Actual>(
    expected: [Expected], actual: [Actual], exhaustive: Bool, skip: (Actual) -> Bool,
    matches: (Expected, Actual) -> Bool,
    describeExpected: (Expected) -> String, describeActual: (Actual) -> String
) -> String {
    let kept = actual.indices.filter { !skip(actual[$0]) }
    let (n, m) = (expected.count, kept.count)
    // lengths[i][j]: the longest common subsequence of expected[i...] and kept[j...].
    var lengths = Array(repeating: Array(repeating: 0, count: m + 1), count: n + 1)
    if n > 0, m > 0 {
        for i in stride(from: n - 1, through: 0, by: -1) {
            for j in stride(from: m - 1, through: 0, by: -1) {
                lengths[i][j] =
                    matches(expected[i], actual[kept[j]])
                    ? lengths[i + 1][j + 1] + 1 : max(lengths[i + 1][j], lengths[i][j + 1])
            }
        }
    }
    var lines: [String] = []
    var (i, j, position) = (0, 0, 0)
    func flushSkipped(upTo end: Int) {
        while position < end {
            if skip(actual[position]) { lines.append("  ~ \(describeActual(actual[position]))  (ignored)") }
            position += 1
        }
    }
    let extra = exhaustive ? "+" : "~"
    while i < n || j < m {
        if i < n, j < m, matches(expected[i], actual[kept[j]]) {
            flushSkipped(upTo: kept[j])
            lines.append("    \(describeActual(actual[kept[j]]))")
            position = kept[j] + 1
            i += 1
            j += 1
        } else if j < m, i == n || lengths[i][j + 1] >= lengths[i + 1][j] {
            flushSkipped(upTo: kept[j])
            lines.append("  \(extra) \(describeActual(actual[kept[j]]))")
            position = kept[j] + 1
            j += 1
        } else {
            lines.append("  - \(describeExpected(expected[i]))")
            i += 1
        }
    }
    flushSkipped(upTo: actual.count)
    let legend =
        exhaustive
        ? "(- expected but not received, + received but not expected)"
        : "(- expected but not received, ~ received and skipped)"
    return legend + "\n" + (lines.isEmpty ? "    (nothing)" : lines.joined(separator: "\n"))
}

/// `Duration` as people read it in messages: `10 s`, `250 ms`.
func readable(_ duration: Duration) -> String {
    let milliseconds = wholeMilliseconds(duration)
    return milliseconds % 1000 == 0 ? "\(milliseconds / 1000) s" : "\(milliseconds) ms"
}

func wholeMilliseconds(_ duration: Duration) -> Int64 {
    duration.components.seconds * 1000 + duration.components.attoseconds / 1_000_000_000_000_000
}
