import FlowBusConfiguration
import FlowBusWire
import Foundation
import Logging
import Synchronization

/// A swift-log handler writing each record as one JSON object a line (`--log-format json`):
///
///     {"level":"info","logger":"flowd","message":"flowd listening","metadata":{"events":"ipc:///run/ev"},
///      "source":"FlowBusCoordinator","time":"2026-11-26T10:20:31.042Z"}
///
/// `trace_id` and `span_id` are lifted from the record's metadata to the top level, where log
/// pipelines look for them to join a record to its trace.
public struct JSONLogHandler: LogHandler {
    public var logLevel: Logger.Level = .info
    public var metadata: Logger.Metadata = [:]
    public var metadataProvider: Logger.MetadataProvider?
    private let label: String
    private let write: @Sendable (String) -> Void

    /// Keys lifted from the metadata to the top level of each record.
    public static let traceKeys = ["trace_id", "span_id"]

    /// A handler writing to standard error.
    public static func standardError(label: String, metadataProvider: Logger.MetadataProvider? = nil) -> JSONLogHandler
    {
        JSONLogHandler(label: label, metadataProvider: metadataProvider) { line in
            standardErrorLock.withLock { _ in FileHandle.standardError.write(Data(line.utf8)) }
        }
    }

    /// A handler giving each line (ending in a newline) to `write`.
    public init(
        label: String, metadataProvider: Logger.MetadataProvider? = nil, write: @escaping @Sendable (String) -> Void
    ) {
        self.label = label
        self.metadataProvider = metadataProvider
        self.write = write
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        var merged = metadata
        if let provided = metadataProvider?.get() { merged.merge(provided) { _, new in new } }
        if let given = event.metadata { merged.merge(given) { _, new in new } }
        var record: WireParams = [
            "time": .string(Self.timestamp(Date())), "level": .string(event.level.rawValue), "logger": .string(label),
            "message": .string(event.message.description), "source": .string(event.source),
        ]
        for key in Self.traceKeys {
            if let value = merged.removeValue(forKey: key) { record[key] = Self.value(value) }
        }
        if !merged.isEmpty { record["metadata"] = .map(merged.mapValues(Self.value)) }
        let line = (try? WireJSON.string(.map(record))) ?? #"{"level":"error","message":"unencodable log record"}"#
        write(line + "\n")
    }

    private static func value(_ value: Logger.Metadata.Value) -> WireValue {
        switch value {
        case .string(let text): .string(text)
        case .stringConvertible(let convertible): .string(convertible.description)
        case .array(let values): .list(values.map(Self.value))
        case .dictionary(let values): .map(values.mapValues(Self.value))
        }
    }

    /// RFC 3339 in UTC with milliseconds.
    static func timestamp(_ date: Date) -> String {
        date.formatted(Date.ISO8601FormatStyle(includingFractionalSeconds: true))
    }
}

/// Lines from several threads never interleave.
private let standardErrorLock = Mutex<Void>(())
