import FlowBusClient
import FlowBusConfiguration
import FlowBusTools
import FlowBusWire
import Foundation
import Testing

// One coordinator per process: the suite runs its tests one after the other.
@Suite("BusRecorder: the bus traffic of a topology into a recording", .serialized)
struct BusRecorderTests {
    @Test("It records what flowd publishes, frames as sent, and stops by itself after its limit")
    func recordsUntilLimit() async throws {
        struct Outcome: Sendable {
            var wasLive = false
            var live: [String] = []
            var missing: [String] = []
            var acknowledged = false
            var heardLater: [String] = []
            var summary: BusRecorder.Summary?
            var file: BusRecording.Summary?
            var steps: [WireParams] = []
        }
        let outcome = try await withTickTopology { config, directory in
            var outcome = Outcome()
            let path = directory.file("ticks.fbrec")
            let sources = BusRecorder.sources(of: config, configPath: "tick.yaml")
            let topics = ["step/", "nav/did/"]
            let recording = try BusRecording.create(
                path: path,
                metadata: BusRecorder.metadata(sources: sources, topics: topics, configPath: nil, recorder: "test"))
            let recorder = try BusRecorder(
                recording: recording, sources: sources, topics: topics, limit: 6, curve: config.curve,
                heartbeatInterval: .milliseconds(config.heartbeatMilliseconds))
            // flowd answers; the reactor host, not running, gets the grace of a few heartbeats.
            outcome.wasLive = try recorder.waitUntilLive(timeout: .seconds(10))
            outcome.live = recorder.liveSources.map(\.name)
            outcome.missing = recorder.missingSources.map(\.start)
            var heardLater: [String] = []
            recorder.onSourceLive = { heardLater.append($0.name) }
            let publisher = try StepPublisher(stepperID: "ticker", config: config)
            for n in 1...3 { try publisher.publish("tick", ["n": .int(Int64(n))]) }
            outcome.acknowledged = try publisher.waitForAcknowledgement(timeout: .seconds(5))
            try recorder.record(for: .seconds(20))
            outcome.heardLater = heardLater
            outcome.summary = try recorder.finish()
            let file = try BusRecording.open(path: path)
            defer { file.close() }
            outcome.file = try file.summary()
            for message in try file.messages(kinds: [.step]) {
                if case .step(let step) = try message.decode() { outcome.steps.append(step.params) }
            }
            return outcome
        }
        #expect(outcome.wasLive && outcome.acknowledged)
        #expect(outcome.live == ["events"])
        #expect(outcome.missing == ["reactor-host --config tick.yaml --host test"])
        #expect(outcome.heardLater.isEmpty, "no publisher started later")
        #expect(outcome.summary?.messages == 6)
        #expect(outcome.summary?.topics == 2, "step/ticker and nav/did/TickFlow")
        #expect(outcome.file?.kinds == ["step": 3, "didNavigate": 3], "heartbeats are left out")
        #expect(outcome.file?.isFinished == true)
        #expect(outcome.steps == [["n": 1], ["n": 2], ["n": 3]])
    }

    @Test("With no publisher heard there is nothing to record: the recording can be discarded")
    func nothingAnswers() throws {
        let directory = try ScratchDirectory()
        defer { directory.remove() }
        let config = try tickConfig(in: directory)
        let path = directory.file("none.fbrec")
        let sources = BusRecorder.sources(of: config, configPath: "tick.yaml")
        let recording = try BusRecording.create(
            path: path, metadata: BusRecorder.metadata(sources: sources, topics: [], configPath: nil, recorder: "test"))
        let recorder = try BusRecorder(recording: recording, sources: sources, curve: config.curve)
        #expect(try recorder.waitUntilLive(timeout: .milliseconds(300)), "no stop, no limit")
        #expect(!recorder.anyLive)
        #expect(recorder.missingSources.map(\.owner) == ["flowd", "reactor host test"])
        recorder.discard()
        #expect(!FileManager.default.fileExists(atPath: path))
    }

    @Test("A stop request wakes the recorder at once, and the recording is finished")
    func stopRequest() throws {
        let directory = try ScratchDirectory()
        defer { directory.remove() }
        let path = directory.file("stopped.fbrec")
        let source = BusRecorder.Source(
            name: "events", addresses: ["ipc://\(directory.path)/nobody.sock"], owner: "nobody", start: "nothing")
        let recording = try BusRecording.create(
            path: path, metadata: BusRecorder.metadata(sources: [source], topics: [], configPath: nil, recorder: "test")
        )
        let stop = try StopRequest()
        let recorder = try BusRecorder(recording: recording, sources: [source], stop: stop)
        #expect(!stop.isRequested)
        Thread.detachNewThread {
            Thread.sleep(forTimeInterval: 0.2)
            stop.request()
        }
        let started = ContinuousClock.now
        try recorder.record()
        // The recorder polls in one-second slices: only the request's byte wakes it sooner.
        #expect(started.duration(to: .now) < .milliseconds(900))
        #expect(stop.reason == .requested)
        let summary = try recorder.finish()
        #expect(summary.messages == 0)
        let file = try BusRecording.open(path: path)
        defer { file.close() }
        #expect(try file.summary().isFinished)
    }
}
