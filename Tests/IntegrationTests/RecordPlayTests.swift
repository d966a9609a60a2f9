import FlowBus
import FlowBusTesting
import FlowBusWire
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Runs a built executable on `topology` to completion and expects `status`; returns its output.
@discardableResult
private func run(
    _ topology: TestTopology, _ arguments: [String], expect status: Int32 = 0, timeout: Duration = .seconds(60),
    sourceLocation: SourceLocation = #_sourceLocation
) throws -> String {
    let result = try topology.run("flowctl", arguments, timeout: timeout)
    #expect(
        result.status == status, "flowctl \(arguments.joined(separator: " ")) exited with \(result.status), \(status) expected:\n\(result.output)",
        sourceLocation: sourceLocation)
    return result.output
}

/// Waits until `process` printed `text` (it fails early if the process exits first).
private func waitForOutput(_ process: ManagedProcess, _ text: String, timeout: Duration = .seconds(30)) throws {
    let deadline = ContinuousClock.now + timeout
    while !process.output.contains(text) {
        guard process.isRunning else { throw HarnessError("\(process.name) exited before printing '\(text)':\n\(process.output)") }
        guard ContinuousClock.now < deadline else { throw HarnessError("\(process.name) did not print '\(text)' within \(timeout):\n\(process.output)") }
        Thread.sleep(forTimeInterval: 0.02)
    }
}

/// Reads the recording at `path` (while it is being written) until `done` holds for its summary.
@discardableResult
private func waitForRecording(_ path: String, timeout: Duration = .seconds(30), until done: (BusRecording.Summary) -> Bool) throws -> BusRecording.Summary {
    let deadline = ContinuousClock.now + timeout
    while true {
        let recording = try BusRecording.open(path: path)
        let summary = try recording.summary()
        recording.close()
        if done(summary) { return summary }
        guard ContinuousClock.now < deadline else {
            throw HarnessError("the recording \(path) did not get there within \(timeout): kinds \(summary.kinds), topics \(summary.topics)")
        }
        Thread.sleep(forTimeInterval: 0.05)
    }
}

/// A didNavigate as flowctl prints it; a diagnostic by reason and stepper (its source ids and
/// sequences name the publishing processes, which differ between runs).
private func traceLine(_ message: WireMessage) -> String {
    if case .diagnostic(let diagnostic) = message {
        return "diagnostic \(diagnostic.reason.rawValue) stepper=\(diagnostic.details["stepper"]?.stringValue ?? "-")"
    }
    return MessageFormatter.line(message)
}

private func isTrace(_ message: WireMessage) -> Bool {
    if case .diagnostic = message { return true }
    return isDidNavigate(message)
}

/// A recording written through the library: one step, as flowd re-publishes it.
private func oneStepRecording(at path: String, events: String) throws {
    let recording = try BusRecording.create(
        path: path, metadata: BusRecording.Metadata(recorder: "test", configPath: nil, endpoints: [BusRecording.Endpoint(name: "events", address: events)], topics: []))
    var frames = FrameBuffer()
    try StepMessage(stepperID: "apikey", envelope: Envelope(kind: .step, sequence: 1, source: "apikey#test"), name: "apiKeyIsComplete").encode(into: &frames)
    try recording.append([BusRecording.Message(time: 0, endpoint: "events", frames: frames)])
    try recording.finish(duration: .milliseconds(5))
    recording.close()
}

@Suite("flowctl record, play and info", .serialized)
struct RecordPlayTests {
    @Test("A recorded demo journey, played into a fresh flowd, reproduces the didNavigate trace exactly")
    func recordThenPlayReproducesTheTrace() throws {
        let files = try TemporaryDirectory()
        let path = files.url.appendingPathComponent("journey.fbrec").path
        let original = try demoTopology()
        let config = ["--config", original.configPath]
        try original.startFlowd()
        try original.start("reactor-host", arguments: ["--host", "demo"] + config)
        let host = try BusSubscriber(endpoint: try #require(original.config.reactors["demo"]).states, topics: ["hb/"])
        try #require(try host.waitUntilConnected(timeout: .seconds(30)), "the reactor host sends heartbeats")
        let seen = try original.subscribe(["nav/did/", "diag/"])
        let recorder = try original.start("flowctl", arguments: ["record", path] + config, name: "record")
        try waitForOutput(recorder, "recording to \(path): flowd events")

        // scripts/demo's journey, each tap a process that waits for flowd's acknowledgement.
        try run(original, ["action", "counter", "increase"] + config)
        try run(original, ["action", "login", "submit", "apiKey=demo-key"] + config)
        // The login reactor publishes apiKeyIsComplete as stepper apikey: wait for what it does.
        let onboarding = try seen.collect(3, timeout: .seconds(30), where: isDidNavigate)
        try #require(onboarding.count == 3, "the login reactor's step navigated: \(lines(onboarding))")
        let taps: [(String, [String])] = [
            ("wishlist/movies", ["moviePicked", "withMovieId=23452"]),
            // JSON params, as scripts/demo's Python client sends: replayed in the same encoding.
            ("wishlist/movie/23452", ["castPicked", "withCastId=2", "--json"]),
            // The Watched tab is not selected yet: dropped and reported.
            ("watched/movies", ["moviePicked", "withMovieId=1"]),
            ("dashboard", ["watchedTab"]),
            ("watched/movies", ["moviePicked", "withMovieId=1"]),
            ("dashboard", ["settings"]),
            ("settings/list", ["apiKey"]),
            ("settings/list", ["about"]),
            ("settings/list", ["settingsDone"]),
        ]
        for (stepper, step) in taps {
            try run(original, ["step"] + step + ["--as", stepper] + config)
        }
        try run(original, ["deeplink", "moviePicked", "withMovieId=42"] + config)
        try run(original, ["step", "moviePicked", "withMovieId=3", "--as", "nobody"] + config)
        let trace = (onboarding + (try seen.collect(15, timeout: .seconds(30), where: isTrace))).map(traceLine)
        #expect(trace.map { $0.replacingOccurrences(of: #" presentable=\S+"#, with: "", options: .regularExpression) } == [
            "did navigate flow=MainFlow step=apiKeyIsComplete",
            "did navigate flow=WishlistFlow step=movieList",
            "did navigate flow=WatchedFlow step=movieList",
            "did navigate flow=WishlistFlow step=moviePicked(withMovieId: 23452)",
            "did navigate flow=WishlistFlow step=castPicked(withCastId: 2)",
            "diagnostic not-visible stepper=watched/movies",
            "did navigate flow=MainFlow step=watchedTab",
            "did navigate flow=WatchedFlow step=moviePicked(withMovieId: 1)",
            "did navigate flow=MainFlow step=settings",
            "did navigate flow=SettingsFlow step=settings",
            "did navigate flow=SettingsFlow step=apiKey",
            "did navigate flow=SettingsFlow step=about",
            "did navigate flow=SettingsFlow step=settingsDone",
            "did navigate flow=MainFlow step=settingsDone",
            "did navigate flow=MainFlow step=moviePicked(withMovieId: 42)",
            "did navigate flow=WishlistFlow step=moviePicked(withMovieId: 42)",
            "did navigate flow=WatchedFlow step=moviePicked(withMovieId: 42)",
            "diagnostic unbound-stepper stepper=nobody",
        ])

        // Stop once the recorder has everything this test saw, then it flushes and exits 0.
        try waitForRecording(path) { summary in
            summary.kinds["didNavigate"] == 16 && summary.kinds["step"] == 11 && summary.kinds["deepLink"] == 1
                && summary.topics["diag/unbound-stepper"] == 1 && summary.topics["state/login"] != nil
        }
        #expect(recorder.terminate(timeout: .seconds(20)) == 0, "record exits 0 on SIGTERM:\n\(recorder.output)")
        #expect(recorder.output.contains("stopped by SIGTERM"), "\(recorder.output)")
        #expect(recorder.output.range(of: #"recorded \d+ message\(s\) on \d+ topic\(s\) in [0-9.]+ s to "#, options: .regularExpression) != nil, "\(recorder.output)")
        original.stopAll()

        // The file holds the trace, the states, and the steps in their recorded encoding.
        let recording = try BusRecording.open(path: path)
        let recordedTrace = try recording.messages(kinds: [.didNavigate, .diagnostic]).map { traceLine(try $0.decode()) }
        #expect(recordedTrace == trace)
        let steps = try recording.messages(kinds: [.step])
        #expect(steps.first?.topic == "step/apikey", "the login reactor's step comes first")
        #expect(try steps.first { $0.topic == "step/wishlist/movie/23452" }.map { try $0.decode().envelope.contentType } == .json)
        #expect(Set(try recording.messages(kinds: [.state]).map(\.endpoint)) == ["reactors.demo.states"])
        recording.close()

        // info, for people and for tools.
        let info = try run(original, ["info", path])
        for line in [
            "format:    flowbus-recording 1, wire protocol 1", "messages:  ", "(12 input(s) for flowctl play: steps and deep links)",
            "  didNavigate: 16", "  deepLink: 1", "  nav/did/SettingsFlow: 4", "  step/apikey: 1", "  diag/not-visible: 1",
        ] {
            #expect(info.contains(line), "\(line) in:\n\(info)")
        }
        #expect(!info.contains("not finished"), "\(info)")
        let json = try #require(try WireJSON.decode(try run(original, ["info", path, "--json"])).mapValue)
        let kinds = try #require(json["kinds"]?.mapValue)
        #expect(json["format_version"] == 1)
        #expect(json["finished"] == true)
        #expect(json["input_count"] == 12)
        #expect(kinds["didNavigate"] == 16)
        #expect(json["message_count"]?.intValue == kinds.values.compactMap(\.intValue).reduce(0, +))
        #expect((json["duration_ns"]?.intValue ?? 0) > 0)
        #expect(json["endpoints"]?.listValue?.compactMap { $0.mapValue?["name"]?.stringValue } == ["events", "reactors.demo.states"])

        // A fresh topology: a new flowd, no journal, no reactor host.
        let fresh = try demoTopology()
        try fresh.startFlowd()
        let replayed = try fresh.subscribe(["nav/did/", "diag/"])
        let played = try run(fresh, ["play", path, "--rate", "0", "--config", fresh.configPath])
        #expect(played.contains("played 11 step(s) and 1 deep link(s) from \(path)"), "\(played)")
        #expect(played.contains("all acknowledged"), "\(played)")
        #expect(try replayed.collect(trace.count, timeout: .seconds(30), where: isTrace).map(traceLine) == trace)
        let extra = try replayed.next(timeout: .milliseconds(500))
        #expect(extra == nil, "nothing beyond the recorded trace: \(String(describing: extra))")
    }

    @Test("play divides the recorded gaps by --rate, and --loop plays again until SIGINT")
    func rateAndLoop() throws {
        let files = try TemporaryDirectory()
        let path = files.url.appendingPathComponent("two-steps.fbrec").path
        let original = try demoTopology()
        try original.startFlowd()
        let recorder = try original.start("flowctl", arguments: ["record", path, "--topics", "step/", "--config", original.configPath], name: "record")
        try waitForOutput(recorder, "recording to")
        try run(original, ["step", "apiKeyIsComplete", "--as", "apikey", "--config", original.configPath])
        // A gap in the recording (its length is read back from the file).
        Thread.sleep(forTimeInterval: 0.5)
        try run(original, ["step", "moviePicked", "withMovieId=7", "--as", "wishlist/movies", "--config", original.configPath])
        try waitForRecording(path) { $0.kinds["step"] == 2 }
        #expect(recorder.terminate(timeout: .seconds(20)) == 0, "\(recorder.output)")
        original.stopAll()
        let recording = try BusRecording.open(path: path)
        let steps = try recording.messages()
        recording.close()
        try #require(steps.count == 2, "only step/ was subscribed: \(steps.map(\.topic))")
        let gap = Duration.nanoseconds(steps[1].time - steps[0].time)

        // At half speed the second step cannot leave before twice the recorded gap.
        let fresh = try demoTopology()
        try fresh.startFlowd()
        let started = ContinuousClock.now
        let slow = try run(fresh, ["play", path, "--rate", "0.5", "--config", fresh.configPath])
        #expect(started.duration(to: .now) >= gap * 2, "played in \(started.duration(to: .now)), recorded gap \(gap)")
        #expect(slow.contains("played 2 step(s) and 0 deep link(s)") && slow.contains("(rate 0.5)"), "\(slow)")

        let stepsSeen = try fresh.subscribe(["step/"])
        let player = try fresh.start("flowctl", arguments: ["play", path, "--rate", "0", "--loop", "--config", fresh.configPath], name: "play")
        let looped = try stepsSeen.collect(6, timeout: .seconds(30)).map(\.topic)
        #expect(looped == ["step/apikey", "step/wishlist/movies", "step/apikey", "step/wishlist/movies", "step/apikey", "step/wishlist/movies"])
        kill(player.processIdentifier, SIGINT)
        player.expectExit(0)
        #expect(player.output.contains("pass 2: played 2 step(s) and 0 deep link(s)"), "\(player.output)")
        #expect(player.output.contains("stopped by SIGINT"), "\(player.output)")

        // Stopped before its end, a play without --loop says how far it got and exits 128 + 15.
        let slowSteps = try fresh.subscribe(["step/"])
        let interrupted = try fresh.start("flowctl", arguments: ["play", path, "--rate", "0.01", "--config", fresh.configPath], name: "interrupted")
        #expect(try slowSteps.collect(1, timeout: .seconds(30)).map(\.topic) == ["step/apikey"])
        #expect(interrupted.terminate(timeout: .seconds(20)) == 143, "\(interrupted.output)")
        #expect(interrupted.output.contains("played 1 step(s) and 0 deep link(s)") && interrupted.output.contains("stopped by SIGTERM"), "\(interrupted.output)")
    }

    @Test("record stops by itself after --count messages or --for seconds, and keeps its topic filter")
    func recordStopsByItself() throws {
        let files = try TemporaryDirectory()
        let topology = try demoTopology()
        let config = ["--config", topology.configPath]
        try topology.startFlowd()
        let counted = files.url.appendingPathComponent("heartbeats.fbrec").path
        let output = try run(topology, ["record", counted, "--heartbeats", "--count", "3"] + config)
        #expect(output.contains("recorded 3 message(s) on 1 topic(s)"), "\(output)")
        let heartbeats = try #require(try WireJSON.decode(try run(topology, ["info", counted, "--json"])).mapValue)
        #expect(heartbeats["kinds"]?.mapValue == ["heartbeat": 3])
        // Without --heartbeats only the other messages count: here there are none.
        let timed = files.url.appendingPathComponent("quiet.fbrec").path
        #expect(try run(topology, ["record", timed, "--for", "0.3", "--topics", "nav/did/", "diag/"] + config).contains("recorded 0 message(s)"))
        let quiet = try #require(try WireJSON.decode(try run(topology, ["info", timed, "--json"])).mapValue)
        #expect(quiet["subscribed_topics"] == ["nav/did/", "diag/"])
        #expect(quiet["message_count"] == 0)
        #expect(quiet["finished"] == true)
        // --messages lists what is in a file, one line each with its time and endpoint.
        let listed = try run(topology, ["info", counted, "--messages"])
        #expect(listed.split(separator: "\n").filter { $0.range(of: #"^\d+\.\d{6} events heartbeat source=flowd#"#, options: .regularExpression) != nil }.count == 3, "\(listed)")
    }

    @Test("info, play and record say what is wrong and how to fix it, with a non-zero exit")
    func errors() throws {
        let files = try TemporaryDirectory()
        let topology = try demoTopology()
        let config = ["--config", topology.configPath]
        let missing = files.url.appendingPathComponent("missing.fbrec").path
        #expect(try run(topology, ["info", missing], expect: 1).contains("recording \(missing) does not exist: record one with `flowctl record \(missing)`"))
        #expect(try run(topology, ["play", missing] + config, expect: 1).contains("does not exist"))
        #expect(try run(topology, ["info", topology.configPath], expect: 1).contains(
            "\(topology.configPath) is not a FlowBus recording (it is not an SQLite database): pass a file written by `flowctl record`"))

        let path = files.url.appendingPathComponent("one-step.fbrec").path
        try oneStepRecording(at: path, events: topology.config.endpoints.events)
        // No flowd: play names the endpoint and the command that starts it.
        let noFlowd = try run(topology, ["play", path, "--timeout", "1"] + config, expect: 1)
        #expect(noFlowd.contains("flowd does not answer on \(topology.config.endpoints.control): start it with `flowd --config \(topology.configPath)`"), "\(noFlowd)")
        // Nothing publishes: record gives up, names each publisher's fix and leaves no file.
        let none = files.url.appendingPathComponent("none.fbrec").path
        let noPublisher = try run(topology, ["record", none, "--timeout", "0.5"] + config, expect: 1)
        #expect(noPublisher.contains("no publisher answered within 0.5 s: flowd on \(topology.config.endpoints.events) (start it with `flowd --config \(topology.configPath)`)"), "\(noPublisher)")
        #expect(noPublisher.contains("(start it with `reactor-host --config \(topology.configPath) --host demo`)"), "\(noPublisher)")
        #expect(!FileManager.default.fileExists(atPath: none))
        // An existing file is not overwritten without --force.
        #expect(try run(topology, ["record", path] + config, expect: 1).contains("\(path) exists: pass --force to replace it"))
        #expect(try run(topology, ["play", path, "--rate=-1"] + config, expect: 64).contains("--rate needs a number ≥ 0"))
        #expect(try run(topology, ["info", path]).contains("(1 input(s) for flowctl play"))
    }

    @Test("A recording of another format version, or another SQLite file, is refused with the fix", .enabled(if: Python.plainTestsEnabled, "needs python3 to edit an SQLite file"))
    func foreignFiles() throws {
        let files = try TemporaryDirectory()
        let topology = try demoTopology()
        let path = files.url.appendingPathComponent("future.fbrec").path
        try oneStepRecording(at: path, events: topology.config.endpoints.events)
        let other = files.url.appendingPathComponent("other.sqlite").path
        let script = """
            import sqlite3, sys
            c = sqlite3.connect(sys.argv[1]); c.execute("UPDATE meta SET value = '99' WHERE key = 'format_version'"); c.commit()
            c = sqlite3.connect(sys.argv[2]); c.execute("CREATE TABLE entry (id INTEGER PRIMARY KEY)"); c.commit()
            """
        let python = try ManagedProcess.python3(name: "edit", arguments: ["-c", script, path, other], in: files.url)
        python.expectExit(0)
        #expect(try run(topology, ["info", path], expect: 1).contains(
            "\(path) is a recording in format version 99; it is newer than this flowctl reads (1): use the flowctl that recorded it, or a newer one"))
        #expect(try run(topology, ["info", other], expect: 1).contains(
            "\(other) is not a FlowBus recording (an SQLite database without a flowbus-recording meta table, e.g. a journal)"))
    }

    @Test("A recording keeps every message byte for byte, malformed ones too, in arrival order")
    func byteExact() throws {
        let files = try TemporaryDirectory()
        let path = files.url.appendingPathComponent("bytes.fbrec").path
        let recording = try BusRecording.create(
            path: path, metadata: BusRecording.Metadata(recorder: "test", configPath: "/x.yaml", endpoints: [BusRecording.Endpoint(name: "events", address: "ipc:///x")], topics: ["step/"]))
        var step = FrameBuffer()
        try StepMessage(
            stepperID: "wishlist/movies", envelope: Envelope(kind: .step, contentType: .json, sequence: 7, source: "s#1"), name: "moviePicked",
            params: ["withMovieId": 23452]
        ).encode(into: &step)
        let malformed = FrameBuffer(frames: [Array("step/x".utf8), [0x09, 0x01], [], Array(repeating: 0xFF, count: 70_000)])
        let stored = try recording.append([
            BusRecording.Message(time: 10, endpoint: "events", frames: step), BusRecording.Message(time: 20, endpoint: "events", frames: malformed),
        ])
        #expect(stored.map(\.id) == [1, 2])
        try recording.finish(duration: .milliseconds(30))
        recording.close()

        let read = try BusRecording.open(path: path)
        let messages = try read.messages()
        #expect(messages.map(\.frames) == [step, malformed])
        #expect(messages.map(\.time) == [10, 20])
        #expect(messages[0].kind == .step && messages[0].source == "s#1" && messages[0].sequence == 7 && messages[0].topic == "step/wishlist/movies")
        #expect(messages[1].kind == nil && messages[1].topic == "step/x" && messages[1].kindName == "malformed")
        #expect(try read.messages(after: 1).map(\.id) == [2])
        #expect(try read.messages(kinds: [.deepLink]).isEmpty)
        let summary = try read.summary()
        #expect(summary.kinds == ["step": 1, "malformed": 1])
        #expect(summary.inputCount == 1)
        #expect(summary.durationNanoseconds == 30_000_000)
        #expect(summary.metadata.configPath == "/x.yaml" && summary.metadata.topics == ["step/"] && summary.isFinished)
        read.close()
    }
}
