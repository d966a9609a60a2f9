import FlowBusCoordinator
import FlowBusTools
import Foundation
import Testing

@Suite("BusRecording: what a caller can tell apart when a recording cannot be written or read")
struct RecordingErrorTests {
    static func metadata() -> BusRecording.Metadata {
        BusRecording.Metadata(recorder: "test", configPath: nil, endpoints: [], topics: [])
    }

    /// The code of the error `body` throws; nil when it throws none, or not a RecordingError.
    static func code(_ body: () throws -> Void) -> RecordingError.Code? {
        do {
            try body()
            return nil
        } catch {
            return (error as? RecordingError)?.code
        }
    }

    @Test("A recording that does not exist is missing; one that exists is not replaced without overwrite")
    func missingAndExists() throws {
        let directory = try ScratchDirectory()
        defer { directory.remove() }
        let path = directory.file("one.fbrec")
        #expect(Self.code { _ = try BusRecording.open(path: path) } == .missing)
        #expect(
            throws: RecordingError(
                .missing, "recording \(path) does not exist: record one with `flowctl record \(path)`")
        ) { _ = try BusRecording.open(path: path) }

        let recording = try BusRecording.create(path: path, metadata: Self.metadata())
        try recording.finish(duration: .milliseconds(1))
        recording.close()
        #expect(Self.code { _ = try BusRecording.create(path: path, metadata: Self.metadata()) } == .exists)
        #expect(
            Self.code {
                try BusRecording.create(path: path, metadata: Self.metadata(), overwrite: true).close()
            } == nil)
    }

    @Test("A file that is not a recording, or a recording of another format version, says so by its code")
    func foreignFiles() throws {
        let directory = try ScratchDirectory()
        defer { directory.remove() }
        let text = directory.file("notes.txt")
        try String(repeating: "not a database\n", count: 100).write(toFile: text, atomically: true, encoding: .utf8)
        #expect(Self.code { _ = try BusRecording.open(path: text) } == .notARecording)

        let journalPath = directory.file("journal.sqlite")
        try StepJournal.open(path: journalPath, synchronous: .normal).close()
        #expect(Self.code { _ = try BusRecording.open(path: journalPath) } == .notARecording)

        let future = directory.file("future.fbrec")
        var metadata = Self.metadata()
        metadata.formatVersion = BusRecording.formatVersion + 1
        let recording = try BusRecording.create(path: future, metadata: metadata)
        try recording.finish(duration: .milliseconds(1))
        recording.close()
        #expect(Self.code { _ = try BusRecording.open(path: future) } == .unsupportedVersion)
        #expect(RecordingError.Code.unsupportedVersion.description == "unsupported-version")
    }
}
