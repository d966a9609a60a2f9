import FlowBusClient
import FlowBusConfiguration
import FlowBusCoordinator
import FlowBusReactorHost
import FlowBusTesting
import FlowBusTools
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
        result.status == status,
        "flowctl \(arguments.joined(separator: " ")) exited with \(result.status), \(status) expected:\n\(result.output)",
        sourceLocation: sourceLocation)
    return result.output
}

/// Waits until `process` printed `text` (it fails early if the process exits first).
private func waitForOutput(_ process: ManagedProcess, _ text: String, timeout: Duration = .seconds(30)) throws {
    let deadline = ContinuousClock.now + timeout
    while !process.output.contains(text) {
        guard process.isRunning else {
            throw HarnessError(.exited, "\(process.name) exited before printing '\(text)':\n\(process.output)")
        }
        guard ContinuousClock.now < deadline else {
            throw HarnessError(
                .timedOut, "\(process.name) did not print '\(text)' within \(timeout):\n\(process.output)")
        }
        Thread.sleep(forTimeInterval: 0.02)
    }
}

/// Reads the recording at `path` (while it is being written) until `done` holds for its summary.
@discardableResult
private func waitForRecording(
    _ path: String, timeout: Duration = .seconds(30), until done: (BusRecording.Summary) -> Bool
) throws -> BusRecording.Summary {
    let deadline = ContinuousClock.now + timeout
    while true {
        let recording = try BusRecording.open(path: path)
        let summary = try recording.summary()
        recording.close()
        if done(summary) { return summary }
        guard ContinuousClock.now < deadline else {
            throw HarnessError(
                .timedOut,
                "the recording \(path) did not get there within \(timeout): kinds \(summary.kinds), topics \(summary.topics)"
            )
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
        path: path,
        metadata: BusRecording.Metadata(
            recorder: "test", configPath: nil, endpoints: [BusRecording.Endpoint(name: "events", address: events)],
            topics: []))
    var frames = FrameBuffer()
    try StepMessage(
        stepperID: "apikey", envelope: Envelope(kind: .step, sequence: 1, source: "apikey#test"),
        name: "apiKeyIsComplete"
    ).encode(into: &frames)
    try recording.append([BusRecording.Message(time: 0, endpoint: "events", frames: frames)])
    try recording.finish(duration: .milliseconds(5))
    recording.close()
}

/// One message as a publisher sends it, for recordings written through the library.
private func recorded(
    _ message: some WireMessageEncodable, at time: Int64 = 0, on endpoint: String
) throws -> BusRecording.Message {
    var frames = FrameBuffer()
    try message.encode(into: &frames)
    return BusRecording.Message(time: time, endpoint: endpoint, frames: frames)
}

private func envelope(
    _ kind: MessageKind, _ source: String, sequence: UInt64 = 1, timestamp: Int64 = Envelope.now()
) -> Envelope {
    Envelope(kind: kind, contentType: .fbv, sequence: sequence, timestamp: timestamp, source: source)
}

/// The counter's states in a recording or on a host: sequence and state.
private func counterStates(_ messages: [WireMessage]) -> [String] {
    messages.compactMap { message in
        guard case .state(let state) = message, state.reactorID == "counter" else { return nil }
        return "\(state.envelope.sequence) \((try? WireJSON.string(state.state)) ?? "?")"
    }
}

@Suite("flowctl record, play and info", .serialized)
struct RecordPlayTests {
    @Test(
        "A recorded demo journey with actions, played into a fresh flowd and reactor host, reproduces the didNavigate trace and the states exactly"
    )
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
        let taps: [(String, [String], OutcomeExit)] = [
            ("wishlist/movies", ["moviePicked", "withMovieId=23452"], .applied),
            // JSON params, as scripts/demo's Python client sends: replayed in the same encoding.
            ("wishlist/movie/23452", ["castPicked", "withCastId=2", "--json"], .applied),
            // The Watched tab is not selected yet: dropped, reported, and flowctl says so.
            ("watched/movies", ["moviePicked", "withMovieId=1"], .notVisible),
            ("dashboard", ["watchedTab"], .applied),
            ("watched/movies", ["moviePicked", "withMovieId=1"], .applied),
            ("dashboard", ["settings"], .applied),
            ("settings/list", ["apiKey"], .applied),
            ("settings/list", ["about"], .applied),
            ("settings/list", ["settingsDone"], .applied),
        ]
        for (stepper, step, outcome) in taps {
            try run(original, ["step"] + step + ["--as", stepper] + config, expect: outcome.rawValue)
        }
        try run(original, ["deeplink", "moviePicked", "withMovieId=42"] + config)
        try run(
            original, ["step", "moviePicked", "withMovieId=3", "--as", "nobody"] + config,
            expect: OutcomeExit.unboundStepper.rawValue)
        let trace = (onboarding + (try seen.collect(15, timeout: .seconds(30), where: isTrace))).map(traceLine)
        #expect(
            trace.map { $0.replacingOccurrences(of: #" presentable=\S+"#, with: "", options: .regularExpression) } == [
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

        // Stop once the recorder has everything this test saw (the counter's last state comes
        // after its simulated delay), then it flushes and exits 0.
        try waitForRecording(path) { summary in
            summary.kinds["didNavigate"] == 16 && summary.kinds["step"] == 11 && summary.kinds["deepLink"] == 1
                && summary.kinds["action"] == 2
                && summary.topics["diag/unbound-stepper"] == 1 && summary.topics["state/login"] != nil
                && summary.topics["state/counter"] == 3
        }
        #expect(recorder.terminate(timeout: .seconds(20)) == 0, "record exits 0 on SIGTERM:\n\(recorder.output)")
        #expect(recorder.output.contains("stopped by SIGTERM"), "\(recorder.output)")
        #expect(
            recorder.output.range(
                of: #"recorded \d+ message\(s\) on \d+ topic\(s\) in [0-9.]+ s to "#, options: .regularExpression)
                != nil, "\(recorder.output)")
        original.stopAll()

        // The file holds the trace, the states, and the steps in their recorded encoding.
        let recording = try BusRecording.open(path: path)
        let recordedTrace = try recording.messages(kinds: [.didNavigate, .diagnostic]).map {
            traceLine(try $0.decode())
        }
        #expect(recordedTrace == trace)
        let steps = try recording.messages(kinds: [.step])
        #expect(steps.first?.topic == "step/apikey", "the login reactor's step comes first")
        #expect(
            try steps.first { $0.topic == "step/wishlist/movie/23452" }.map { try $0.decode().envelope.contentType }
                == .json)
        #expect(Set(try recording.messages(kinds: [.state]).map(\.endpoint)) == ["reactors.demo.states"])
        // The actions, as the host re-published them: the views' own envelopes, in the order sent.
        let actions = try recording.messages(kinds: [.action])
        #expect(actions.map(\.topic) == ["action/counter", "action/login"])
        #expect(actions.map(\.endpoint) == ["reactors.demo.states", "reactors.demo.states"])
        #expect(
            actions.map { $0.source.hasPrefix("view:\($0.topic.dropFirst("action/".count))#") } == [true, true],
            "\(actions.map(\.source))")
        let hostSource = try #require(recording.metadata.reactorHosts.first?.source)
        #expect(
            recording.metadata.reactorHosts == [
                BusRecording.ReactorHost(endpoint: "reactors.demo.states", source: hostSource)
            ])
        #expect(hostSource.hasPrefix("demo#"))
        // The login reactor's step is told by its host's source suffix, and is not sent again.
        let inputs = try recording.inputs()
        #expect(inputs.filter(\.isFromReactor).map(\.message.topic) == ["step/apikey"])
        #expect(
            inputs.filter(\.isFromReactor).map(\.message.source) == ["apikey#\(hostSource.dropFirst("demo#".count))"])
        #expect(inputs.count == 14)
        let recordedCounter = counterStates(try recording.messages(kinds: [.state]).map { try $0.decode() })
        #expect(
            recordedCounter.map { $0.drop { $0 != " " } } == [
                #" {"isLoading":true,"value":0}"#, #" {"isLoading":true,"value":1}"#,
                #" {"isLoading":false,"value":1}"#,
            ])
        let recordedSteps = try recording.messages(kinds: [.step]).map(\.topic)
        recording.close()

        // info, for people and for tools.
        let info = try run(original, ["info", path])
        for line in [
            "format:    flowbus-recording 1, wire protocol 1", "messages:  ",
            "(13 input(s) for flowctl play: steps, actions and deep links)",
            "reactors:  1 step(s) from reactors, replayed through their actions",
            "hosts:     \(hostSource) (reactors.demo.states)",
            "  didNavigate: 16", "  deepLink: 1", "  action: 2", "  action/counter: 1", "  action/login: 1",
            "  nav/did/SettingsFlow: 4",
            "  step/apikey: 1", "  diag/not-visible: 1",
        ] {
            #expect(info.contains(line), "\(line) in:\n\(info)")
        }
        #expect(!info.contains("not finished"), "\(info)")
        let json = try #require(try WireJSON.decode(try run(original, ["info", path, "--json"])).mapValue)
        let kinds = try #require(json["kinds"]?.mapValue)
        #expect(json["format_version"] == 1)
        #expect(json["finished"] == true)
        #expect(json["input_count"] == 13)
        #expect(json["reactor_step_count"] == 1)
        #expect(kinds["didNavigate"] == 16)
        #expect(kinds["action"] == 2)
        #expect(json["message_count"]?.intValue == kinds.values.compactMap(\.intValue).reduce(0, +))
        #expect((json["duration_ns"]?.intValue ?? 0) > 0)
        #expect(
            json["endpoints"]?.listValue?.compactMap { $0.mapValue?["name"]?.stringValue } == [
                "events", "reactors.demo.states",
            ])

        // A fresh topology: a new flowd and a new reactor host, no journal.
        let fresh = try demoTopology()
        try fresh.startFlowd()
        try fresh.startReactorHost("demo")
        let replayed = try fresh.subscribe(["nav/did/", "diag/"])
        let replayedSteps = try fresh.subscribe(["step/"])
        let freshStates = try BusSubscriber(
            endpoint: try #require(fresh.config.reactors["demo"]).states, topics: ["state/counter", "hb/"],
            includeHeartbeats: true, curve: fresh.config.curve)
        try #require(
            try freshStates.waitUntilConnected(timeout: .seconds(30)), "the fresh reactor host sends heartbeats")
        let freshHost = try #require(
            try freshStates.collect(1, timeout: .seconds(10)) { if case .heartbeat = $0 { true } else { false } }.first?
                .envelope.source)
        let played = try run(fresh, ["play", path, "--rate", "0", "--config", fresh.configPath])
        #expect(played.contains("played 10 step(s), 2 action(s) and 1 deep link(s) from \(path)"), "\(played)")
        #expect(
            played.contains("all acknowledged; 1 step(s) from reactors came again through their actions"), "\(played)")
        let replayedTrace = try replayed.collect(trace.count, timeout: .seconds(30), where: isTrace).map(traceLine)
        #expect(replayedTrace == trace)
        #expect(replayedTrace.filter { $0.contains("step=apiKeyIsComplete") }.count == 1)
        let extra = try replayed.next(timeout: .milliseconds(500))
        #expect(extra == nil, "nothing beyond the recorded trace: \(String(describing: extra))")

        // flowd got the steps in the recorded order, the login reactor's once, from the fresh host.
        let stepsAgain = try replayedSteps.collect(recordedSteps.count, timeout: .seconds(30))
        #expect(stepsAgain.map(\.topic) == recordedSteps)
        #expect(
            stepsAgain.filter { $0.topic == "step/apikey" }.map(\.envelope.source) == [
                "apikey#\(freshHost.dropFirst("demo#".count))"
            ])
        // The counter went through the recorded states, with the recorded sequences.
        let freshCounter = counterStates(
            try freshStates.collect(recordedCounter.count, timeout: .seconds(30)) { message in
                if case .state(let state) = message { state.reactorID == "counter" } else { false }
            })
        #expect(freshCounter == recordedCounter)
    }

    @Test("play divides the recorded gaps by --rate, and --loop plays again until SIGINT")
    func rateAndLoop() throws {
        let files = try TemporaryDirectory()
        let path = files.url.appendingPathComponent("two-steps.fbrec").path
        let original = try demoTopology()
        try original.startFlowd()
        let recorder = try original.start(
            "flowctl", arguments: ["record", path, "--topics", "step/", "--config", original.configPath], name: "record"
        )
        try waitForOutput(recorder, "recording to")
        try run(original, ["step", "apiKeyIsComplete", "--as", "apikey", "--config", original.configPath])
        // A gap in the recording (its length is read back from the file).
        Thread.sleep(forTimeInterval: 0.5)
        try run(
            original,
            ["step", "moviePicked", "withMovieId=7", "--as", "wishlist/movies", "--config", original.configPath])
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
        #expect(
            slow.contains("played 2 step(s), 0 action(s) and 0 deep link(s)") && slow.contains("(rate 0.5)"), "\(slow)")

        let stepsSeen = try fresh.subscribe(["step/"])
        let player = try fresh.start(
            "flowctl", arguments: ["play", path, "--rate", "0", "--loop", "--config", fresh.configPath], name: "play")
        let looped = try stepsSeen.collect(6, timeout: .seconds(30)).map(\.topic)
        #expect(
            looped == [
                "step/apikey", "step/wishlist/movies", "step/apikey", "step/wishlist/movies", "step/apikey",
                "step/wishlist/movies",
            ])
        kill(player.processIdentifier, SIGINT)
        player.expectExit(0)
        #expect(player.output.contains("pass 2: played 2 step(s), 0 action(s) and 0 deep link(s)"), "\(player.output)")
        #expect(player.output.contains("stopped by SIGINT"), "\(player.output)")

        // Stopped before its end, a play without --loop says how far it got and exits 128 + 15.
        let slowSteps = try fresh.subscribe(["step/"])
        let interrupted = try fresh.start(
            "flowctl", arguments: ["play", path, "--rate", "0.01", "--config", fresh.configPath], name: "interrupted")
        #expect(try slowSteps.collect(1, timeout: .seconds(30)).map(\.topic) == ["step/apikey"])
        #expect(interrupted.terminate(timeout: .seconds(20)) == 143, "\(interrupted.output)")
        #expect(
            interrupted.output.contains("played 1 step(s), 0 action(s) and 0 deep link(s)")
                && interrupted.output.contains("stopped by SIGTERM"), "\(interrupted.output)")
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
        #expect(
            try run(topology, ["record", timed, "--for", "0.3", "--topics", "nav/did/", "diag/"] + config).contains(
                "recorded 0 message(s)"))
        let quiet = try #require(try WireJSON.decode(try run(topology, ["info", timed, "--json"])).mapValue)
        #expect(quiet["subscribed_topics"] == ["nav/did/", "diag/"])
        #expect(quiet["message_count"] == 0)
        #expect(quiet["finished"] == true)
        // --messages lists what is in a file, one line each with its time and endpoint.
        let listed = try run(topology, ["info", counted, "--messages"])
        #expect(
            listed.split(separator: "\n").filter {
                $0.range(of: #"^\d+\.\d{6} events heartbeat source=flowd#"#, options: .regularExpression) != nil
            }.count == 3, "\(listed)")
    }

    @Test("info, play and record say what is wrong and how to fix it, with a non-zero exit")
    func errors() throws {
        let files = try TemporaryDirectory()
        let topology = try demoTopology()
        let config = ["--config", topology.configPath]
        let missing = files.url.appendingPathComponent("missing.fbrec").path
        #expect(
            try run(topology, ["info", missing], expect: 1).contains(
                "recording \(missing) does not exist: record one with `flowctl record \(missing)`"))
        #expect(try run(topology, ["play", missing] + config, expect: 1).contains("does not exist"))
        #expect(
            try run(topology, ["info", topology.configPath], expect: 1).contains(
                "\(topology.configPath) is not a FlowBus recording (it is not an SQLite database): pass a file written by `flowctl record`"
            ))

        let path = files.url.appendingPathComponent("one-step.fbrec").path
        try oneStepRecording(at: path, events: topology.config.endpoints.events)
        // No flowd: play names the endpoint and the command that starts it.
        let noFlowd = try run(topology, ["play", path, "--timeout", "1"] + config, expect: 1)
        #expect(
            noFlowd.contains(
                "flowd does not answer on \(topology.config.endpoints.control): start it with `flowd --config \(topology.configPath)`"
            ), "\(noFlowd)")
        // Nothing publishes: record gives up, names each publisher's fix and leaves no file.
        let none = files.url.appendingPathComponent("none.fbrec").path
        let noPublisher = try run(topology, ["record", none, "--timeout", "0.5"] + config, expect: 1)
        #expect(
            noPublisher.contains(
                "no publisher answered within 0.5 s: flowd on \(topology.config.endpoints.events) (start it with `flowd --config \(topology.configPath)`)"
            ), "\(noPublisher)")
        #expect(
            noPublisher.contains("(start it with `reactor-host --config \(topology.configPath) --host demo`)"),
            "\(noPublisher)")
        #expect(!FileManager.default.fileExists(atPath: none))
        // An existing file is not overwritten without --force.
        #expect(
            try run(topology, ["record", path] + config, expect: 1).contains(
                "\(path) exists: pass --force to replace it"))
        #expect(
            try run(topology, ["play", path, "--rate=-1"] + config, expect: 64).contains("--rate needs a number ≥ 0"))
        #expect(try run(topology, ["info", path]).contains("(1 input(s) for flowctl play"))
        // An action for a reactor no host of the config serves is refused before anything is sent.
        let unserved = files.url.appendingPathComponent("unserved.fbrec").path
        let recording = try BusRecording.create(
            path: unserved,
            metadata: BusRecording.Metadata(recorder: "test", configPath: nil, endpoints: [], topics: []))
        try recording.append([
            try recorded(
                ActionMessage(reactorID: "nowhere", envelope: envelope(.action, "view#1"), name: "go"),
                on: "reactors.demo.states")
        ])
        try recording.finish(duration: .milliseconds(1))
        recording.close()
        #expect(
            try run(topology, ["play", unserved] + config, expect: 1).contains(
                "no reactor host of \(topology.configPath) serves nowhere, whose actions \(unserved) holds: list them"))
    }

    @Test(
        "A recording of another format version, or another SQLite file, is refused with the fix",
        .enabled(if: Python.plainTestsEnabled, "needs python3 to edit an SQLite file"))
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
        #expect(
            try run(topology, ["info", path], expect: 1).contains(
                "\(path) is a recording in format version 99; it is newer than this flowctl reads (1): use the flowctl that recorded it, or a newer one"
            ))
        #expect(
            try run(topology, ["info", other], expect: 1).contains(
                "\(other) is not a FlowBus recording (an SQLite database without a flowbus-recording meta table, e.g. a journal)"
            ))
    }

    @Test("A recording keeps every message byte for byte, malformed ones too, in arrival order")
    func byteExact() throws {
        let files = try TemporaryDirectory()
        let path = files.url.appendingPathComponent("bytes.fbrec").path
        let recording = try BusRecording.create(
            path: path,
            metadata: BusRecording.Metadata(
                recorder: "test", configPath: "/x.yaml",
                endpoints: [BusRecording.Endpoint(name: "events", address: "ipc:///x")], topics: ["step/"]))
        var step = FrameBuffer()
        try StepMessage(
            stepperID: "wishlist/movies",
            envelope: Envelope(kind: .step, contentType: .json, sequence: 7, source: "s#1"), name: "moviePicked",
            params: ["withMovieId": 23452]
        ).encode(into: &step)
        let malformed = FrameBuffer(frames: [
            Array("step/x".utf8), [0x09, 0x01], [], Array(repeating: 0xFF, count: 70_000),
        ])
        let stored = try recording.append([
            BusRecording.Message(time: 10, endpoint: "events", frames: step),
            BusRecording.Message(time: 20, endpoint: "events", frames: malformed),
        ])
        #expect(stored.map(\.id) == [1, 2])
        try recording.finish(duration: .milliseconds(30))
        recording.close()

        let read = try BusRecording.open(path: path)
        let messages = try read.messages()
        #expect(messages.map(\.frames) == [step, malformed])
        #expect(messages.map(\.time) == [10, 20])
        #expect(
            messages[0].kind == .step && messages[0].source == "s#1" && messages[0].sequence == 7
                && messages[0].topic == "step/wishlist/movies")
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

    @Test("A step a reactor host published is replayed through the host's actions only when the recording holds them")
    func reactorStepsAndActions() throws {
        let files = try TemporaryDirectory()
        let topology = try demoTopology()
        let states = "reactors.demo.states"
        func write(
            _ name: String, hosts: [BusRecording.ReactorHost] = [], _ messages: [BusRecording.Message]
        ) throws -> String {
            let path = files.url.appendingPathComponent(name).path
            let recording = try BusRecording.create(
                path: path,
                metadata: BusRecording.Metadata(
                    recorder: "test", configPath: nil,
                    endpoints: [
                        BusRecording.Endpoint(name: "events", address: "ipc:///e"),
                        BusRecording.Endpoint(name: states, address: "ipc:///s"),
                    ], topics: []))
            for host in hosts { try recording.noteReactorHost(host) }
            try recording.append(messages)
            try recording.finish(duration: .milliseconds(5))
            recording.close()
            return path
        }
        let hostState = try recorded(
            StateMessage(reactorID: "login", envelope: envelope(.state, "demo#h1"), state: ["isSubmitting": true]),
            on: states)
        let action = try recorded(
            ActionMessage(
                reactorID: "login", envelope: envelope(.action, "view:login#v1"), name: "submit",
                params: ["apiKey": "k"]), on: states)
        let reactorStep = try recorded(
            StepMessage(stepperID: "apikey", envelope: envelope(.step, "apikey#h1"), name: "apiKeyIsComplete"),
            on: "events")
        let userStep = try recorded(
            StepMessage(stepperID: "apikey", envelope: envelope(.step, "apikey#u1"), name: "apiKeyIsComplete"),
            on: "events")

        // Without actions (recorded with --topics leaving action/ out, or before hosts
        // re-published them) the reactor's step is an input like any other.
        let withoutActions = try BusRecording.open(
            path: try write("without.fbrec", [hostState, reactorStep, userStep]))
        #expect(try withoutActions.inputs().map(\.isFromReactor) == [false, false])
        #expect(try withoutActions.summary().reactorStepCount == 0)
        #expect(try withoutActions.summary().inputCount == 2)
        withoutActions.close()

        // With the host's actions, the step whose source shares the host's suffix comes from them;
        // a stepper of the same id in another process does not.
        let withActionsPath = try write("with.fbrec", [action, hostState, reactorStep, userStep])
        let withActions = try BusRecording.open(path: withActionsPath)
        #expect(try withActions.inputs().map(\.message.topic) == ["action/login", "step/apikey", "step/apikey"])
        #expect(try withActions.inputs().map(\.isFromReactor) == [false, true, false])
        let summary = try withActions.summary()
        #expect(summary.reactorStepCount == 1)
        #expect(summary.inputCount == 2)
        withActions.close()
        let info = try run(topology, ["info", withActionsPath])
        #expect(info.contains("(2 input(s) for flowctl play: steps, actions and deep links)"), "\(info)")
        #expect(info.contains("reactors:  1 step(s) from reactors, replayed through their actions"), "\(info)")

        // The host is known from the meta entry the recorder writes when it hears the host, even
        // without any state of it.
        let noted = try BusRecording.open(
            path: try write(
                "noted.fbrec", hosts: [BusRecording.ReactorHost(endpoint: states, source: "demo#h1")],
                [action, reactorStep]))
        #expect(try noted.inputs().map(\.isFromReactor) == [false, true])
        #expect(noted.metadata.reactorHosts == [BusRecording.ReactorHost(endpoint: states, source: "demo#h1")])
        noted.close()

        // Actions from another host's endpoint say nothing about this one's steps.
        let otherAction = BusRecording.Message(time: 0, endpoint: "reactors.other.states", frames: action.frames)
        let other = try BusRecording.open(path: try write("other.fbrec", [otherAction, hostState, reactorStep]))
        #expect(try other.inputs().map(\.isFromReactor) == [false, false])
        other.close()
    }

    @Test("play waits for the steps reactors published to come again from the live host, and says which one did not")
    func missingReactorStep() throws {
        let files = try TemporaryDirectory()
        let path = files.url.appendingPathComponent("empty-key.fbrec").path
        let states = "reactors.demo.states"
        let recording = try BusRecording.create(
            path: path,
            metadata: BusRecording.Metadata(
                recorder: "test", configPath: nil,
                endpoints: [
                    BusRecording.Endpoint(name: "events", address: "ipc:///e"),
                    BusRecording.Endpoint(name: states, address: "ipc:///s"),
                ], topics: []))
        try recording.noteReactorHost(BusRecording.ReactorHost(endpoint: states, source: "demo#h1"))
        // An empty api key does not complete the onboarding, so the live host publishes no step.
        try recording.append([
            try recorded(
                ActionMessage(
                    reactorID: "login", envelope: envelope(.action, "view:login#v1"), name: "submit",
                    params: ["apiKey": ""]), on: states),
            try recorded(
                StepMessage(stepperID: "apikey", envelope: envelope(.step, "apikey#h1"), name: "apiKeyIsComplete"),
                on: "events"),
            try recorded(
                StepMessage(
                    stepperID: "wishlist/movies", envelope: envelope(.step, "wishlist/movies#u1"), name: "moviePicked",
                    params: ["withMovieId": 1]), on: "events"),
        ])
        try recording.finish(duration: .milliseconds(5))
        recording.close()

        let topology = try demoTopology()
        try topology.startFlowd()
        try topology.startReactorHost("demo")
        let steps = try topology.subscribe(["step/"])
        let output = try run(
            topology, ["play", path, "--rate", "0", "--timeout", "3", "--config", topology.configPath], expect: 1)
        #expect(
            output.contains("flowd did not receive step apiKeyIsComplete of stepper apikey from a reactor host within"),
            "\(output)")
        // The step recorded after it was held back.
        let sent = try steps.next(timeout: .milliseconds(500))
        #expect(sent == nil, "nothing reached flowd: \(String(describing: sent))")
    }

    @Test(
        "Messages read from several endpoints at once are ordered by their senders' timestamps, each endpoint's order kept"
    )
    func interleaving() throws {
        func step(_ stepperID: String, at timestamp: Int64) throws -> BusRecording.Message {
            try recorded(
                StepMessage(
                    stepperID: stepperID, envelope: envelope(.step, "\(stepperID)#1", timestamp: timestamp), name: "go"),
                on: "events")
        }
        func action(_ reactorID: String, at timestamp: Int64) throws -> BusRecording.Message {
            try recorded(
                ActionMessage(
                    reactorID: reactorID, envelope: envelope(.action, "view#1", timestamp: timestamp), name: "go"),
                on: "reactors.demo.states")
        }
        let malformed = BusRecording.Message(
            time: 0, endpoint: "events", frames: FrameBuffer(frames: [Array("step/x".utf8)]))
        let merged = BusRecording.interleave([
            [try step("a", at: 20), try step("b", at: 40), malformed, try step("c", at: 10)],
            [try action("x", at: 10), try action("y", at: 30), try action("z", at: 50)],
        ])
        // c is older than z but stays after what its endpoint delivered before it.
        #expect(merged.map(\.topic) == ["action/x", "step/a", "action/y", "step/b", "step/x", "step/c", "action/z"])
        #expect(BusRecording.interleave([[], [try step("a", at: 1)]]).map(\.topic) == ["step/a"])
    }
}
