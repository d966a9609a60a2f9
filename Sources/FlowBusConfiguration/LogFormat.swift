/// How a FlowBus process writes its logs: `--log-format text|json`, or `logFormat:` in the
/// topology file for the daemons.
public enum LogFormat: String, Codable, Sendable, CaseIterable {
    /// One line a record, for a person: swift-log's standard format.
    case text
    /// One JSON object a line, for a log pipeline: `time`, `level`, `logger`, `message`, `source`,
    /// `metadata`, and `trace_id` / `span_id` when the record carries them.
    case json

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        let name = try container.decode(String.self)
        guard let format = LogFormat(rawValue: name) else {
            throw DecodingError.dataCorruptedError(
                in: container, debugDescription: "'\(name)' is not a log format: text or json")
        }
        self = format
    }
}
