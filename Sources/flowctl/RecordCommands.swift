import ArgumentParser
import FlowBusClient
import FlowBusConfiguration
import FlowBusTools
import FlowBusWire
import Foundation

// `flowctl record`, `play` and `info`: ROS 2's `ros2 bag` for the bus, on ``BusRecording`` files.
// The recorder and the player are FlowBusTools' ``BusRecorder`` and ``BusPlayer``; these commands
// parse, call them and print.

private func seconds(_ value: Double) -> Duration { .milliseconds(Int(value * 1000)) }

private func nanoseconds(_ duration: Duration) -> Int64 {
    let (seconds, attoseconds) = duration.components
    return seconds * 1_000_000_000 + attoseconds / 1_000_000_000
}

private func secondsText(_ nanoseconds: Int64) -> String {
    String(format: "%.3f s", Double(nanoseconds) / 1e9)
}

// MARK: record

/// `flowctl record FILE`: every message on the bus, with its arrival time, into a recording.
struct RecordCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "record",
        abstract:
            "Record the messages on the bus, with their arrival times, into a file (SQLite), like `ros2 bag record`.",
        discussion: """
            Subscribes to flowd's events endpoint (the steps and deep links flowd accepted, \
            willNavigate, didNavigate, navigation commands, diagnostics) and to the states endpoint of \
            every reactor host in the config (states, the hosts' diagnostics, and the actions each host \
            applied, which a host re-publishes as received while a subscription covers action/). Each \
            message is stored with its frames exactly as received; the source ids of the reactor hosts \
            heard are noted, so that `flowctl play` can tell the steps their reactors published.

            Not recorded, because no endpoint publishes them: snapshot requests (sent by a view's \
            DEALER to one host's ROUTER), renderer reports (to flowd's ingress), acks, snapshots and \
            status replies (point to point), and actions a host refused. --topics without a prefix \
            covering action/ (e.g. step/ nav/did/) leaves actions out too.

            Heartbeats are left out unless --heartbeats is given. flowctl waits until the publishers' \
            heartbeats show the subscriptions are live (one that is not running is recorded once it \
            starts), prints `recording to FILE: ...`, and stops on Ctrl-C (SIGINT), SIGTERM, --for or \
            --count, printing a one-line summary. Messages read from several endpoints at once are \
            stored in the order of their senders' timestamps (each endpoint's own order kept). \
            When flowd keeps events (replay.retain above 0), its events are resumed: those a full \
            queue dropped, a takeover cut short or a reconnection missed are asked for and stored \
            in order, each once; events flowd no longer keeps are reported as missed. \
            `flowctl info FILE` summarises the recording; `flowctl play FILE` replays its steps, \
            actions and deep links.
            """
    )

    @OptionGroup var options: ConfigOptions
    @Argument(help: "The recording to write, e.g. journey.fbrec.") var file: String
    @Option(
        parsing: .upToNextOption,
        help:
            "Record only topics starting with one of these prefixes, e.g. step/ nav/did/ state/counter (default: all).")
    var topics: [String] = []
    @Option(name: .customLong("for"), help: "Stop after recording for this many seconds.") var duration: Double?
    @Option(help: "Stop after this many messages.") var count: Int?
    @Flag(help: "Record heartbeats (hb/) too.") var heartbeats = false
    @Flag(help: "Replace FILE if it exists.") var force = false
    @Option(
        help:
            "Seconds to wait for a publisher's first heartbeat; once one answered, the others get 3 heartbeat intervals (at least 2 s)."
    )
    var timeout: Double = 10

    func validate() throws {
        if let duration, duration <= 0 { throw ValidationError("--for needs a positive number of seconds") }
        if let count, count <= 0 { throw ValidationError("--count needs a positive number of messages") }
        if timeout <= 0 { throw ValidationError("--timeout needs a positive number of seconds") }
        if topics.contains(where: \.isEmpty) {
            throw ValidationError("--topics takes non-empty prefixes; leave it out to record every topic")
        }
    }

    func run() throws {
        let config = try options.load()
        let configPath = FlowBusConfig.resolvePath(options.config)
        let absoluteConfigPath = URL(fileURLWithPath: configPath).standardizedFileURL.path
        let sources = BusRecorder.sources(of: config, configPath: configPath)
        let recording = try BusRecording.create(
            path: file,
            metadata: BusRecorder.metadata(
                sources: sources, topics: topics, configPath: absoluteConfigPath, recorder: "flowctl record"),
            overwrite: force)
        let stop = try StopRequest.catchingStopSignals()
        let recorder = try BusRecorder(
            recording: recording, sources: sources, topics: topics, recordHeartbeats: heartbeats, limit: count,
            curve: config.curve, heartbeatInterval: .milliseconds(config.heartbeatMilliseconds), stop: stop)
        let running = try recorder.waitUntilLive(timeout: seconds(timeout))
        if running, !recorder.anyLive {
            recorder.discard()
            let missing = recorder.missingSources.map { "\($0.owner) on \($0.address) (start it with `\($0.start)`)" }
            throw ClientError(
                .failed,
                "no publisher answered within \(timeout) s: \(missing.joined(separator: "; ")); nothing recorded")
        }
        if running {
            for source in recorder.missingSources {
                note(
                    "no heartbeat from \(source.owner) on \(source.address) yet: its messages are recorded once it runs (`\(source.start)`)"
                )
            }
            let live = recorder.liveSources.map {
                "\($0.owner) \($0.name == "events" ? "events" : "states") \($0.address)"
            }
            emit("recording to \(file): \(live.joined(separator: ", ")) (Ctrl-C to stop)")
            recorder.onSourceLive = { source in note("now recording from \(source.owner) on \(source.address)") }
            recorder.onFallback = { fallback in
                note(
                    "missed flowd's events \(fallback.since + 1)…\(fallback.head): \(fallback.reason); the recording goes on from \(fallback.head)"
                )
            }
            try recorder.record(for: duration.map(seconds))
        }
        let summary = try recorder.finish()
        let reason = stop.reason.map { " (stopped by \($0.name))" } ?? ""
        let missed = summary.missedEvents > 0 ? "; \(summary.missedEvents) of flowd's events missed (see above)" : ""
        emit(
            "recorded \(summary.messages) message(s) on \(summary.topics) topic(s) in \(secondsText(nanoseconds(summary.duration))) to \(file)\(reason)\(missed)"
        )
    }
}

// MARK: play

/// `flowctl play FILE`: the recorded inputs, sent again to a running topology.
struct PlayCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "play",
        abstract: "Replay a recording's steps, actions and deep links into a running topology, like `ros2 bag play`.",
        discussion: """
            Sends the recorded inputs in the recorded order and with the recorded gaps divided by \
            --rate: each step to flowd's ingress as its stepper id (the same topic, name, params and \
            encoding, under a new source id), each deep link as a deep link, and each action to the \
            reactor host of the config that serves its reactor id (one view per reactor id, under a \
            new source id). A message for another stepper, reactor or flowd is sent only once the \
            previous ones are acknowledged, so flowd and the hosts apply them in exactly the recorded \
            interleaving; the outcome is the recorded one when the topology starts in the recorded \
            state (e.g. a fresh flowd and fresh reactor hosts for a recording started with them).

            Steps that a reactor host published as a stepper (such as the login reactor's \
            apiKeyIsComplete, source <stepperId>#<suffix> where the host's source is \
            <hostName>#<suffix>) are not sent when the recording holds actions from that host: \
            the replayed actions make the live host publish them again. Play waits, before its next \
            step or deep link, until flowd has re-published each of them from a live host, so flowd \
            sees them where they were recorded. A recording without actions from a host (made with \
            --topics leaving action/ out, or before hosts re-published actions) has its reactors' \
            steps replayed as steps.

            What flowd and the reactor hosts published (navigation events, commands, states, \
            diagnostics) is not sent again: the topology produces it from the inputs. Renderer \
            reports are not in recordings (see `flowctl record --help`).
            """
    )

    @OptionGroup var options: ConfigOptions
    @Argument(help: "The recording to play.") var file: String
    @Option(
        help:
            "Speed: recorded gaps are divided by it (2 plays twice as fast); 0 sends each message as soon as the previous ones are acknowledged."
    )
    var rate: Double = 1
    @Flag(help: "Play again from the start at the end, until Ctrl-C.") var loop = false
    @Option(
        help:
            "Seconds to wait for flowd's and the reactor hosts' acknowledgements, and for the steps the reactors publish."
    )
    var timeout: Double = 10

    func validate() throws {
        if !rate.isFinite || rate < 0 {
            throw ValidationError("--rate needs a number ≥ 0 (1 = recorded speed, 0 = as fast as acknowledged)")
        }
        if timeout <= 0 { throw ValidationError("--timeout needs a positive number of seconds") }
    }

    func run() throws {
        let recording = try BusRecording.open(path: file)
        let playlist: BusPlayer.Playlist
        do {
            defer { recording.close() }
            playlist = try BusPlayer.Playlist(recording: recording)
        }
        for skipped in playlist.skipped {
            note("message \(skipped.id) (\(skipped.topic)) of \(file) does not decode, skipped: \(skipped.error)")
        }
        guard !playlist.isEmpty else {
            emit(
                "nothing to play: \(file) has no steps, actions or deep links (`flowctl info \(file)` shows what it has)"
            )
            return
        }
        let config = try options.load()
        let configPath = FlowBusConfig.resolvePath(options.config)
        let player = try BusPlayer(
            playlist: playlist, config: config, configPath: configPath, timeout: seconds(timeout))
        let stop = try StopRequest.catchingStopSignals()
        let rateText = rate == 0 ? "as fast as acknowledged" : "rate \(rate)"
        var number = 0
        repeat {
            number += 1
            let pass = try player.play(rate: rate, stop: stop)
            var what =
                "\(pass.steps) step(s), \(pass.actions) action(s) and \(pass.deepLinks) deep link(s) from \(file)"
            what += " in \(secondsText(nanoseconds(pass.duration))) (\(rateText))"
            let passText = loop ? "pass \(number): " : ""
            if let reason = pass.stoppedBy {
                emit(
                    "\(passText)played \(what); stopped by \(reason.name)\(pass.isComplete ? "" : ", the last ones unacknowledged")"
                )
                // The end of a loop; an unfinished play otherwise.
                if loop { return }
                guard case .signal(let signal) = reason else { throw ExitCode(1) }
                throw ExitCode(128 + signal)
            }
            let fromReactors =
                pass.reactorSteps == 0
                ? "" : "; \(pass.reactorSteps) step(s) from reactors came again through their actions"
            emit("\(passText)played \(what), all acknowledged\(fromReactors)")
            if !pass.refusals.isEmpty {
                for refusal in pass.refusals { note("\(refusal)") }
                throw ExitCode(1)
            }
        } while loop
    }
}

// MARK: info

/// `flowctl info FILE`: what a recording holds.
struct InfoCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "info",
        abstract:
            "Summarise a recording: format, start, end, duration, size, message counts per endpoint, kind and topic (like `ros2 bag info`).",
        discussion: """
            The inputs are what `flowctl play` sends: steps, actions and deep links, without the steps \
            reactors published while the recording holds their hosts' actions (those come again \
            through the actions; see `flowctl play --help`).
            """)

    @Argument(help: "The recording.") var file: String
    @Flag(help: "Print one JSON object.") var json = false
    @Flag(help: "Then list every message with its arrival time and endpoint (with --json: one object per line).")
    var messages = false

    func run() throws {
        let recording = try BusRecording.open(path: file)
        defer { recording.close() }
        let summary = try recording.summary()
        emit(json ? try Self.json(summary) : Self.text(summary))
        guard messages else { return }
        var after: Int64 = 0
        while true {
            let page = try recording.messages(after: after)
            guard let last = page.last else { break }
            for message in page { emit(json ? try Self.json(message) : Self.text(message)) }
            after = last.id
        }
    }

    private static func timeText(_ microseconds: Int64) -> String {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return formatter.string(from: Date(timeIntervalSince1970: Double(microseconds) / 1e6))
    }

    private static func sizeText(_ bytes: Int64) -> String {
        if bytes < 1024 { return "\(bytes) B" }
        if bytes < 1 << 20 { return String(format: "%.1f KiB", Double(bytes) / 1024) }
        return String(format: "%.1f MiB", Double(bytes) / Double(1 << 20))
    }

    /// Counts, largest first, then by name.
    private static func ranked(_ counts: [String: Int]) -> [(String, Int)] {
        counts.sorted { $0.value != $1.value ? $0.value > $1.value : $0.key < $1.key }
    }

    static func text(_ summary: BusRecording.Summary) -> String {
        let meta = summary.metadata
        var lines = [
            "file:      \(summary.path) (\(sizeText(summary.fileBytes)))",
            "format:    \(BusRecording.format) \(meta.formatVersion), wire protocol \(meta.protocolVersion)",
            "recorder:  \(meta.recorder)\(meta.configPath.map { ", config \($0)" } ?? "")",
            "start:     \(timeText(meta.startedAt))",
            "end:       \(meta.endedAt.map(timeText) ?? "not finished (still recording, or the recorder was killed): times up to the last message")",
            "duration:  \(secondsText(summary.durationNanoseconds))",
            "messages:  \(summary.messageCount) (\(summary.inputCount) input(s) for flowctl play: steps, actions and deep links)",
            "topics:    \(meta.topics.isEmpty ? "all" : meta.topics.joined(separator: " "))\(summary.kinds["heartbeat"] == nil ? ", heartbeats left out" : "")",
        ]
        if !meta.reactorHosts.isEmpty {
            lines.append(
                "hosts:     \(meta.reactorHosts.map { "\($0.source) (\($0.endpoint))" }.joined(separator: ", "))")
        }
        if summary.reactorStepCount > 0 {
            lines.append("reactors:  \(summary.reactorStepCount) step(s) from reactors, replayed through their actions")
        }
        lines.append("endpoints:")
        let nameWidth = meta.endpoints.map(\.name.count).max() ?? 0
        let countWidth = meta.endpoints.map { String(summary.endpoints[$0.name] ?? 0).count }.max() ?? 0
        for endpoint in meta.endpoints {
            let name = endpoint.name.padding(toLength: nameWidth, withPad: " ", startingAt: 0)
            let count = String(summary.endpoints[endpoint.name] ?? 0)
            lines.append(
                "  \(name)  \(String(repeating: " ", count: countWidth - count.count))\(count)  \(endpoint.address)")
        }
        lines.append("kinds:")
        for (kind, count) in ranked(summary.kinds) { lines.append("  \(kind): \(count)") }
        lines.append("per topic:")
        for (topic, count) in summary.topics.sorted(by: { $0.key < $1.key }) { lines.append("  \(topic): \(count)") }
        return lines.joined(separator: "\n")
    }

    static func json(_ summary: BusRecording.Summary) throws -> String {
        let meta = summary.metadata
        let object: WireParams = [
            "file": .string(summary.path), "bytes": .int(summary.fileBytes),
            "format": .string(BusRecording.format), "format_version": .int(Int64(meta.formatVersion)),
            "protocol_version": .int(Int64(meta.protocolVersion)), "recorder": .string(meta.recorder),
            "config": meta.configPath.map(WireValue.string) ?? .null,
            "start_us": .int(meta.startedAt), "start": .string(timeText(meta.startedAt)),
            "end_us": meta.endedAt.map(WireValue.int) ?? .null,
            "end": meta.endedAt.map { .string(timeText($0)) } ?? .null,
            "finished": .bool(summary.isFinished), "duration_ns": .int(summary.durationNanoseconds),
            "message_count": .int(Int64(summary.messageCount)), "input_count": .int(Int64(summary.inputCount)),
            "reactor_step_count": .int(Int64(summary.reactorStepCount)),
            "reactor_hosts": .list(
                meta.reactorHosts.map { .map(["endpoint": .string($0.endpoint), "source": .string($0.source)]) }),
            "subscribed_topics": .list(meta.topics.map(WireValue.string)),
            "endpoints": .list(
                meta.endpoints.map { endpoint in
                    .map([
                        "name": .string(endpoint.name), "address": .string(endpoint.address),
                        "messages": .int(Int64(summary.endpoints[endpoint.name] ?? 0)),
                    ])
                }),
            "kinds": .map(summary.kinds.mapValues { .int(Int64($0)) }),
            "topics": .map(summary.topics.mapValues { .int(Int64($0)) }),
        ]
        return try WireJSON.string(.map(object))
    }

    static func text(_ message: BusRecording.Message) -> String {
        let time = String(format: "%.6f", Double(message.time) / 1e9)
        let body: String
        do {
            body = MessageFormatter.line(try message.decode())
        } catch {
            body = "malformed topic=\(message.topic): \(error)"
        }
        return "\(time) \(message.endpoint) \(body)"
    }

    static func json(_ message: BusRecording.Message) throws -> String {
        var object: WireParams = [
            "id": .int(message.id), "time_ns": .int(message.time), "endpoint": .string(message.endpoint),
        ]
        do {
            object["message"] = try WireJSON.decode(MessageFormatter.json(try message.decode()))
        } catch {
            object["malformed"] = .string("\(error)")
            object["topic"] = .string(message.topic)
        }
        return try WireJSON.string(.map(object))
    }
}
