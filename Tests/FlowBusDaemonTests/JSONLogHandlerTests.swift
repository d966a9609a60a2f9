import FlowBusDaemon
import FlowBusWire
import Foundation
import Logging
import Synchronization
import Testing

@Suite("Structured logs: one JSON object a line")
struct JSONLogHandlerTests {
    private func records(level: Logger.Level = .info, _ body: (Logger) -> Void) throws -> [WireParams] {
        let lines = Mutex<[String]>([])
        var handler = JSONLogHandler(label: "flowd") { line in lines.withLock { $0.append(line) } }
        handler.logLevel = level
        handler[metadataKey: "instance"] = "flowd#1"
        body(Logger(label: "flowd", factory: { _ in handler }))
        return try lines.withLock { $0 }.map { line in
            #expect(line.hasSuffix("\n") && line.dropLast().allSatisfy { $0 != "\n" }, "one line a record: \(line)")
            guard case .map(let record) = try WireJSON.decode(String(line.dropLast())) else {
                Issue.record("not a JSON object: \(line)")
                return [:]
            }
            return record
        }
    }

    @Test("A record holds time, level, logger, message, source and its metadata; trace and span ids sit at the top")
    func record() throws {
        let logged = try records { logger in
            logger.info(
                "flowd listening",
                metadata: [
                    "events": "ipc:///run/ev", "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
                    "span_id": "00f067aa0ba902b7", "peers": ["a", "b"],
                ])
        }
        let record = try #require(logged.first)
        #expect(record["level"] == "info" && record["logger"] == "flowd" && record["message"] == "flowd listening")
        #expect(record["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736" && record["span_id"] == "00f067aa0ba902b7")
        #expect(
            record["metadata"] == .map(["events": "ipc:///run/ev", "instance": "flowd#1", "peers": .list(["a", "b"])]))
        let time = try #require(record["time"]?.stringValue)
        #expect(time.hasSuffix("Z") && time.contains("T") && time.contains("."), "RFC 3339, UTC, milliseconds: \(time)")
        #expect(record["source"] != nil)
    }

    @Test("Below the level nothing is written; a message with a newline or quotes stays one line")
    func levelAndEscaping() throws {
        let logged = try records(level: .warning) { logger in
            logger.info("not written")
            logger.error("two\nlines \"quoted\"")
        }
        #expect(logged.count == 1 && logged.first?["message"] == "two\nlines \"quoted\"")
        #expect(logged.first?["metadata"] == .map(["instance": "flowd#1"]))
    }
}
