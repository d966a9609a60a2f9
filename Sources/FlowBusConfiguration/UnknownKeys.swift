import FlowBusClient
import FlowBusWire
import Foundation
import Yams

/// Finds keys of a config file that nothing reads: a misspelt key (`heartbeatMilisecond:`,
/// `steper:`) would otherwise be ignored and its setting silently lost.
///
/// The decoded config is encoded again; a key the file has and the re-encoded config lacks was
/// not understood. Keys whose value is null are left alone (an empty setting decodes to nothing).
package enum UnknownKeys {
    /// The paths of the unknown keys (`flows.Main.steps.start[0].push.steper`), each with the
    /// known key it is probably a misspelling of, if any.
    package static func find(
        in yaml: String, understood: some Encodable
    ) throws -> [(path: String, suggestion: String?)] {
        guard let original = try Yams.compose(yaml: yaml),
            let reencoded = try Yams.compose(yaml: try YAMLEncoder().encode(understood))
        else { return [] }
        var found: [(String, String?)] = []
        walk(original, reencoded, path: "", into: &found)
        return found
    }

    private static func walk(_ original: Node, _ understood: Node, path: String, into found: inout [(String, String?)])
    {
        if let mapping = original.mapping {
            guard let known = understood.mapping else { return }
            let knownKeys = known.keys.compactMap(\.string)
            for (key, value) in mapping {
                guard let name = key.string else { continue }
                let here = path.isEmpty ? name : "\(path).\(name)"
                if let match = known[name] {
                    walk(value, match, path: here, into: &found)
                } else if value.null == nil {
                    found.append((here, suggestion(for: name, among: knownKeys + vocabulary)))
                }
            }
        } else if let sequence = original.sequence, let known = understood.sequence {
            for (index, element) in sequence.enumerated() where index < known.count {
                walk(element, known[index], path: "\(path)[\(index)]", into: &found)
            }
        }
    }

    /// Every key a topology file may have; optional ones are absent from a re-encoded config that
    /// does not set them, so suggestions also come from here.
    private static let vocabulary = [
        "endpoints", "ingress", "events", "control", "metrics", "limits", "maxMessageBytes", "highWaterMark",
        "receiveHighWaterMark", "maxSources", "sourceIdleSeconds", "controlRate", "controlBurst", "coordinator", "flow",
        "step", "flows",
        "root", "id", "steps", "push",
        "setRoot", "present", "tabs", "selectTab", "pop", "popToRoot", "dismiss", "forwardToParent", "forwardToCurrent",
        "end", "none", "screen", "stepper", "allowStepWhenNotPresented", "allowStepWhenDismissed", "selected",
        "heartbeatMilliseconds", "heartbeatLiveness", "reactors", "actions", "states", "serves", "persistence",
        "database", "synchronous", "journal", "security", "serverKey", "serverPublicKey", "clientKey", "allowedClients",
        "launch", "name", "command", "ready", "restart", "after", "oneShot", "env", "optional", "heartbeat", "logLine",
        "delayMs", "timeoutMs", "maxRetries", "backoffMs", "maxBackoffMs", "resetAfterMs", "wire", "publish",
        "checkpoint", "postgres", "sampleActions", "sampleSteps", "everyEntries", "everySeconds", "keepEntries",
        "lease", "keepAliveMs", "logFormat", "tracing", "sampler", "ratio", "serviceName", "encoding", "replay",
        "retain", "retainSeconds", "instances",
    ]

    /// The closest known key, when it is close enough to be a misspelling.
    package static func suggestion(for key: String, among candidates: [String]) -> String? {
        let lowered = key.lowercased()
        var best: (String, Int)?
        for candidate in Set(candidates) {
            let distance = editDistance(lowered, candidate.lowercased())
            if distance <= max(1, candidate.count / 4), distance < best?.1 ?? .max { best = (candidate, distance) }
        }
        return best?.0
    }

    private static func editDistance(_ a: String, _ b: String) -> Int {
        let a = Array(a.utf8)
        let b = Array(b.utf8)
        var previous = Array(0...b.count)
        for (i, x) in a.enumerated() {
            var current = [i + 1] + Array(repeating: 0, count: b.count)
            for (j, y) in b.enumerated() {
                current[j + 1] = min(previous[j + 1] + 1, current[j] + 1, previous[j] + (x == y ? 0 : 1))
            }
            previous = current
        }
        return previous[b.count]
    }
}
