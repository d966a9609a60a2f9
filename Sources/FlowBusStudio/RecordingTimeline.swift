#if Studio
import FlowBusClient
import FlowBusConfiguration
import FlowBusTools
import FlowBusWire

/// A `flowctl record` file as a page scrubs it: every message a page shows, with its time since
/// the start, and the navigation tree rebuilt (``NavigationReplay``) after each command.
public enum RecordingTimeline {
    /// Messages read at most; a longer recording is cut, and says so (`truncated`).
    public static let maxMessages = 50_000

    /// The JSON a page loads: `{"duration_ns", "truncated", "events": [...], "trees": [{"after", "flows"}]}`;
    /// each event has `time_ns` and the recording's message id as `id`.
    public static func json(path: String) throws -> String {
        let recording = try BusRecording.open(path: path)
        defer { recording.close() }
        let summary = try recording.summary()
        var events: [WireValue] = []
        var trees: [WireValue] = []
        var replay = NavigationReplay()
        var after: Int64 = 0
        var truncated = false
        while true {
            let page = try recording.messages(after: after, limit: 4096)
            guard let last = page.last else { break }
            after = last.id
            for message in page {
                guard let decoded = try? message.decode(),
                    var event = StudioEvent.describe(decoded, endpoint: message.endpoint)
                else { continue }
                event["id"] = .int(message.id)
                event["time_ns"] = .int(message.time)
                events.append(.map(event))
                if case .navigationCommand(let command) = decoded {
                    replay.apply(command)
                    trees.append(.map(["after": .int(message.id), "flows": replay.flows]))
                }
            }
            if events.count >= maxMessages {
                truncated = true
                break
            }
        }
        let document: WireParams = [
            "duration_ns": .int(summary.durationNanoseconds), "truncated": .bool(truncated), "events": .list(events),
            "trees": .list(trees), "path": .string(path),
        ]
        return try WireJSON.string(.map(document), maxDepth: 128)
    }
}
#endif
