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

    @Test(
        "flowd's events are resumed: what the recorder's full queue lost is asked for and stored, each once, and nothing it did not subscribe to"
    )
    func resumesWhatItsQueueLost() async throws {
        struct Outcome: Sendable {
            var acknowledged = false
            var dropped: Int64 = 0
            var summary: BusRecorder.Summary?
            var ticks: [Int64] = []
            var topics: Set<String> = []
        }
        let count = 3000
        let outcome = try await withTickTopology(limits: "{ highWaterMark: 50 }") { config, directory in
            var outcome = Outcome()
            let path = directory.file("resumed.fbrec")
            let sources = BusRecorder.sources(of: config, configPath: "tick.yaml").filter { $0.name == "events" }
            let topics = ["nav/did/"]
            let recording = try BusRecording.create(
                path: path,
                metadata: BusRecorder.metadata(sources: sources, topics: topics, configPath: nil, recorder: "test"))
            let recorder = try BusRecorder(
                recording: recording, sources: sources, topics: topics, curve: config.curve,
                heartbeatInterval: .milliseconds(config.heartbeatMilliseconds))
            _ = try recorder.waitUntilLive(timeout: .seconds(10))
            // Not read meanwhile: past the recorder's queue (1,000) and flowd's (50), flowd drops.
            let publisher = try StepPublisher(stepperID: "ticker", config: config)
            for n in 1...count { try publisher.publish("tick", ["n": .int(Int64(n))]) }
            outcome.acknowledged = try publisher.waitForAcknowledgement(timeout: .seconds(30))
            outcome.dropped =
                try StatusClient.fetch(endpoint: config.endpoints.control)["events"]?.mapValue?["dropped_hwm"]?
                .intValue ?? 0
            let deadline = ContinuousClock.now + .seconds(30)
            while recorder.messageCount < count, ContinuousClock.now < deadline {
                _ = try recorder.pump(timeout: .milliseconds(100))
            }
            outcome.summary = try recorder.finish()
            let file = try BusRecording.open(path: path)
            defer { file.close() }
            for message in try file.messages(limit: 10_000) {
                let decoded = try message.decode()
                outcome.topics.insert(decoded.topic)
                if case .navigation(let event) = decoded, let n = event.params["n"]?.intValue {
                    outcome.ticks.append(n)
                }
            }
            return outcome
        }
        #expect(outcome.acknowledged)
        #expect(outcome.dropped > 0, "the recorder's queue overflowed")
        let missing = Set(1...Int64(count)).subtracting(outcome.ticks)
        #expect(Set(outcome.ticks).count == outcome.ticks.count, "none recorded twice")
        #expect(
            outcome.ticks.count == count && missing.isEmpty,
            "every tick's didNavigate once: \(outcome.ticks.count) recorded, \(missing.count) missing (\(outcome.dropped) dropped by flowd)"
        )
        #expect(outcome.topics == ["nav/did/TickFlow"], "flowd's drop reports are not recorded: \(outcome.topics)")
        #expect(outcome.summary?.missedEvents == 0)
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
