import ArgumentParser
import FlowBus
import FlowBusWire
import Foundation
import ZeroMQ
#if canImport(Glibc)
import Glibc
#endif

// `flowctl record`, `play` and `info`: ROS 2's `ros2 bag` for the bus, on ``BusRecording`` files.

private func seconds(_ value: Double) -> Duration { .milliseconds(Int(value * 1000)) }

private func nanoseconds(_ duration: Duration) -> Int64 {
    let (seconds, attoseconds) = duration.components
    return seconds * 1_000_000_000 + attoseconds / 1_000_000_000
}

private func secondsText(_ nanoseconds: Int64) -> String {
    String(format: "%.3f s", Double(nanoseconds) / 1e9)
}

// MARK: Stop signals

/// The write end of the pipe SIGINT and SIGTERM are reported through (set before the handlers).
nonisolated(unsafe) private var stopSignalPipe: Int32 = -1

/// SIGINT and SIGTERM turned into bytes on a pipe: a loop that polls sockets sees them and stops
/// cleanly (the recording flushed and closed) instead of dying mid-write.
private final class StopSignals {
    /// The read end, for a ``Poller``.
    let fileDescriptor: Int32
    private var received: Int32?

    init() throws {
        var fds: [Int32] = [-1, -1]
        guard pipe(&fds) == 0 else { throw ClientError("cannot create a pipe for SIGINT and SIGTERM: errno \(errno)") }
        for fd in fds {
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        }
        fileDescriptor = fds[0]
        stopSignalPipe = fds[1]
        for number in [SIGINT, SIGTERM] {
            _ = signal(number) { number in
                // Only async-signal-safe calls here.
                var byte = UInt8(truncatingIfNeeded: number)
                _ = write(stopSignalPipe, &byte, 1)
            }
        }
        // A process started with them blocked (e.g. by a test runner's thread) could not be stopped.
        var stopSignals = sigset_t()
        sigemptyset(&stopSignals)
        sigaddset(&stopSignals, SIGINT)
        sigaddset(&stopSignals, SIGTERM)
        pthread_sigmask(SIG_UNBLOCK, &stopSignals, nil)
    }

    /// The first stop signal received so far, if any; does not block.
    func check() -> Int32? {
        var byte: UInt8 = 0
        while read(fileDescriptor, &byte, 1) == 1 {
            guard received == nil else { continue }
            received = Int32(byte)
            // A second Ctrl-C ends the process at once, should the clean stop hang.
            _ = signal(SIGINT, SIG_DFL)
            _ = signal(SIGTERM, SIG_DFL)
        }
        return received
    }

    static func name(_ number: Int32) -> String { number == SIGINT ? "SIGINT" : number == SIGTERM ? "SIGTERM" : "signal \(number)" }
}

// MARK: record

/// `flowctl record FILE`: every message on the bus, with its arrival time, into a recording.
struct RecordCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "record",
        abstract: "Record the messages on the bus, with their arrival times, into a file (SQLite), like `ros2 bag record`.",
        discussion: """
            Subscribes to flowd's events endpoint (the steps and deep links flowd accepted, \
            willNavigate, didNavigate, navigation commands, diagnostics) and to the states endpoint of \
            every reactor host in the config (states, the hosts' diagnostics). Each message is stored \
            with its frames exactly as received.

            Not recorded, because no endpoint publishes them: actions and snapshot requests (sent by a \
            view's DEALER to one host's ROUTER), renderer reports (to flowd's ingress), acks, snapshots \
            and status replies (point to point). Their effects are recorded: states, a host's \
            diagnostic for a refused action, the steps reactors publish as steppers (flowd re-publishes \
            them), and the navigation that follows.

            Heartbeats are left out unless --heartbeats is given. flowctl waits until the publishers' \
            heartbeats show the subscriptions are live (one that is not running is recorded once it \
            starts), prints `recording to FILE: ...`, and stops on Ctrl-C (SIGINT), SIGTERM, --for or \
            --count, printing a one-line summary. `flowctl info FILE` \
            summarises the recording; `flowctl play FILE` replays its steps and deep links.
            """
    )

    @OptionGroup var options: ConfigOptions
    @Argument(help: "The recording to write, e.g. journey.fbrec.") var file: String
    @Option(parsing: .upToNextOption, help: "Record only topics starting with one of these prefixes, e.g. step/ nav/did/ state/counter (default: all).")
    var topics: [String] = []
    @Option(name: .customLong("for"), help: "Stop after recording for this many seconds.") var duration: Double?
    @Option(help: "Stop after this many messages.") var count: Int?
    @Flag(help: "Record heartbeats (hb/) too.") var heartbeats = false
    @Flag(help: "Replace FILE if it exists.") var force = false
    @Option(help: "Seconds to wait for a publisher's first heartbeat; once one answered, the others get 3 heartbeat intervals (at least 2 s).")
    var timeout: Double = 10

    func validate() throws {
        if let duration, duration <= 0 { throw ValidationError("--for needs a positive number of seconds") }
        if let count, count <= 0 { throw ValidationError("--count needs a positive number of messages") }
        if timeout <= 0 { throw ValidationError("--timeout needs a positive number of seconds") }
        if topics.contains(where: \.isEmpty) { throw ValidationError("--topics takes non-empty prefixes; leave it out to record every topic") }
    }

    func run() throws {
        let config = try options.load()
        let configPath = FlowBusConfig.resolvePath(options.config)
        let absoluteConfigPath = URL(fileURLWithPath: configPath).standardizedFileURL.path
        var sources = [
            Recorder.Source(name: "events", address: config.endpoints.events, owner: "flowd", start: "flowd --config \(configPath)"),
        ]
        for (name, host) in config.reactors.sorted(by: { $0.key < $1.key }) {
            sources.append(Recorder.Source(
                name: "reactors.\(name).states", address: host.states, owner: "reactor host \(name)",
                start: "reactor-host --config \(configPath) --host \(name)"))
        }
        let metadata = BusRecording.Metadata(
            recorder: "flowctl record", configPath: absoluteConfigPath,
            endpoints: sources.map { BusRecording.Endpoint(name: $0.name, address: $0.address) }, topics: topics)
        let recording = try BusRecording.create(path: file, metadata: metadata, overwrite: force)
        let signals = try StopSignals()
        let recorder = try Recorder(
            recording: recording, sources: sources, topics: topics, curve: config.curve,
            recordHeartbeats: heartbeats || topics.contains { "hb/".hasPrefix($0) }, limit: count, signals: signals)

        // A heartbeat shows a subscription is live: from then on nothing its publisher sends is
        // missed. Once one publisher answered, the others get a few heartbeat intervals (a host
        // that is not running is recorded when it starts).
        var waitUntil = ContinuousClock.now + seconds(timeout)
        let grace = max(.seconds(2), .milliseconds(config.heartbeatMilliseconds) * 3)
        var running = true
        while running, !recorder.allLive {
            let left = ContinuousClock.now.duration(to: waitUntil)
            guard left > .zero else { break }
            running = try recorder.pump(timeout: min(left, .milliseconds(100)))
            if recorder.anyLive { waitUntil = min(waitUntil, ContinuousClock.now + grace) }
        }
        if running, !recorder.anyLive {
            recorder.close()
            for path in [file, file + "-wal", file + "-shm"] { try? FileManager.default.removeItem(atPath: path) }
            let missing = recorder.missing.map { "\($0.owner) on \($0.address) (start it with `\($0.start)`)" }
            throw ClientError("no publisher answered within \(timeout) s: \(missing.joined(separator: "; ")); nothing recorded")
        }
        if running {
            for source in recorder.missing {
                note("no heartbeat from \(source.owner) on \(source.address) yet: its messages are recorded once it runs (`\(source.start)`)")
            }
            let live = recorder.liveSources.map { "\($0.owner) \($0.name == "events" ? "events" : "states") \($0.address)" }
            emit("recording to \(file): \(live.joined(separator: ", ")) (Ctrl-C to stop)")
            recorder.markAnnounced()
            let stopAt = duration.map { ContinuousClock.now + seconds($0) }
            while running {
                var wait = Duration.seconds(1)
                if let stopAt {
                    let left = ContinuousClock.now.duration(to: stopAt)
                    guard left > .zero else { break }
                    wait = min(wait, left)
                }
                running = try recorder.pump(timeout: wait)
            }
        }
        let summary = try recorder.finish()
        let reason = signals.check().map { " (stopped by \(StopSignals.name($0)))" } ?? ""
        emit("recorded \(summary.messages) message(s) on \(summary.topics) topic(s) in \(secondsText(summary.duration)) to \(file)\(reason)")
    }
}

/// Subscriptions to every publisher, feeding one recording. Owns its sockets: one thread.
private final class Recorder {
    struct Source {
        var name: String
        var address: String
        /// Who publishes there, e.g. `flowd`, `reactor host demo`.
        var owner: String
        /// The command that starts it.
        var start: String
        var live = false
    }

    private let recording: BusRecording
    private let context: Context
    private var sockets: [Socket] = []
    private var sources: [Source]
    private let poller = Poller()
    private let signals: StopSignals
    private let recordHeartbeats: Bool
    private let limit: Int?
    private let clock = ContinuousClock()
    private let started: ContinuousClock.Instant
    private var buffer = FrameBuffer()
    private var pending: [BusRecording.Message] = []
    private var recorded = 0
    private var topicsSeen = Set<String>()
    /// Whether the "recording" line was printed (later publishers are then announced).
    private var announced = false

    init(
        recording: BusRecording, sources: [Source], topics: [String], curve: CurveKeys, recordHeartbeats: Bool, limit: Int?,
        signals: StopSignals
    ) throws {
        self.recording = recording
        self.sources = sources
        self.signals = signals
        self.recordHeartbeats = recordHeartbeats
        self.limit = limit
        context = try Context(defaultLinger: 0)
        for source in sources {
            let socket = try context.socket(.sub)
            try socket.setOptions([.receiveHighWaterMark(1_000_000), .reconnectInterval(100), .reconnectIntervalMax(2000)])
            // Heartbeats always: they tell when a subscription is live.
            for topic in Set(topics.isEmpty ? [""] : topics + ["hb/"]) {
                try socket.setOption(.subscribe(topic))
            }
            try curve.secureClient(socket, endpoint: source.address)
            try socket.connect(source.address)
            try poller.add(socket)
            sockets.append(socket)
        }
        poller.add(fileDescriptor: signals.fileDescriptor)
        started = clock.now
    }

    var allLive: Bool { sources.allSatisfy(\.live) }
    var anyLive: Bool { sources.contains(where: \.live) }
    var liveSources: [Source] { sources.filter(\.live) }
    var missing: [Source] { sources.filter { !$0.live } }
    private var limitReached: Bool { limit.map { recorded >= $0 } ?? false }

    /// Receives for up to `timeout` and writes what came in one transaction.
    /// - Returns: false once a stop signal came or `limit` messages are recorded.
    func pump(timeout: Duration) throws -> Bool {
        try poller.poll(timeout: max(0, timeout.wholeMilliseconds))
        if signals.check() != nil { return false }
        for index in sockets.indices {
            try drain(index)
        }
        try recording.append(pending)
        pending.removeAll(keepingCapacity: true)
        return !limitReached
    }

    private func drain(_ index: Int) throws {
        var taken = 0
        // Bounded, so one busy publisher cannot keep the others and the signals waiting.
        while taken < 10_000, !limitReached, try sockets[index].receive(into: &buffer, mode: .nonBlocking) {
            taken += 1
            let message = BusRecording.Message(time: nanoseconds(started.duration(to: clock.now)), endpoint: sources[index].name, frames: buffer)
            if !sources[index].live {
                // Any message proves the subscription is active at the publisher.
                sources[index].live = true
                if announced { note("now recording from \(sources[index].owner) on \(sources[index].address)") }
            }
            if message.kind == .heartbeat, !recordHeartbeats { continue }
            pending.append(message)
            topicsSeen.insert(message.topic)
            recorded += 1
        }
    }

    /// Marks the start of the recording proper: publishers that appear later are announced.
    func markAnnounced() {
        announced = true
    }

    /// Writes what is still queued, the end time, and closes the file.
    func finish() throws -> (messages: Int, topics: Int, duration: Int64) {
        for index in sockets.indices { try drain(index) }
        try recording.append(pending)
        pending.removeAll()
        let duration = started.duration(to: clock.now)
        try recording.finish(duration: duration)
        close()
        return (recorded, topicsSeen.count, nanoseconds(duration))
    }

    func close() {
        for socket in sockets { socket.close() }
        recording.close()
    }
}

// MARK: play

/// `flowctl play FILE`: the recorded inputs, sent again to a running topology.
struct PlayCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "play",
        abstract: "Replay a recording's steps and deep links into a running topology, like `ros2 bag play`.",
        discussion: """
            Sends the recorded inputs to flowd's ingress, in the recorded order and with the recorded \
            gaps divided by --rate: each step as its stepper id (the same topic, name, params and \
            encoding, under a new source id), each deep link as a deep link. A message from another \
            stepper is sent only once flowd acknowledged the previous ones, so flowd applies them \
            in exactly the recorded order; the navigation that follows is the recorded one when the \
            topology starts in the recorded state (e.g. a fresh flowd for a recording started with it).

            What flowd and the reactor hosts published (navigation events, commands, states, \
            diagnostics) is not sent again: the topology produces it from the inputs. Actions and \
            renderer reports are not in recordings (see `flowctl record --help`); steps that reactors \
            published, such as the login reactor's apiKeyIsComplete, are, and are replayed as steps.
            """
    )

    @OptionGroup var options: ConfigOptions
    @Argument(help: "The recording to play.") var file: String
    @Option(help: "Speed: recorded gaps are divided by it (2 plays twice as fast); 0 sends each message as soon as the previous ones are acknowledged.")
    var rate: Double = 1
    @Flag(help: "Play again from the start at the end, until Ctrl-C.") var loop = false
    @Option(help: "Seconds to wait for flowd's acknowledgements.") var timeout: Double = 10

    func validate() throws {
        if !rate.isFinite || rate < 0 { throw ValidationError("--rate needs a number ≥ 0 (1 = recorded speed, 0 = as fast as acknowledged)") }
        if timeout <= 0 { throw ValidationError("--timeout needs a positive number of seconds") }
    }

    func run() throws {
        let recording = try BusRecording.open(path: file)
        var inputs: [(time: Int64, message: WireMessage)] = []
        var after: Int64 = 0
        while true {
            let page = try recording.messages(after: after, kinds: BusRecording.inputKinds)
            guard let last = page.last else { break }
            for message in page {
                do {
                    inputs.append((message.time, try message.decode()))
                } catch {
                    note("message \(message.id) (\(message.topic)) of \(file) does not decode, skipped: \(error)")
                }
            }
            after = last.id
        }
        recording.close()
        guard let first = inputs.first else {
            emit("nothing to play: \(file) has no steps or deep links (`flowctl info \(file)` shows what it has)")
            return
        }
        let config = try options.load()
        let configPath = FlowBusConfig.resolvePath(options.config)
        do {
            _ = try StatusClient.fetch(endpoint: config.endpoints.control, curve: config.curve, timeout: seconds(min(timeout, 3)))
        } catch {
            throw ClientError(
                "flowd does not answer on \(config.endpoints.control): start it with `flowd --config \(configPath)`, then play again (play sends to \(config.endpoints.ingress))")
        }
        let signals = try StopSignals()
        let player = Player(config: config, configPath: configPath, timeout: seconds(timeout), signals: signals)
        let rateText = rate == 0 ? "as fast as acknowledged" : "rate \(rate)"
        var pass = 0
        repeat {
            pass += 1
            let clock = ContinuousClock()
            let began = clock.now
            var steps = 0
            var links = 0
            for input in inputs {
                if rate > 0 {
                    let offset = Double(input.time - first.time) / rate
                    guard try player.idle(until: began + .nanoseconds(Int64(offset))) else { break }
                }
                guard try player.play(input.message) else { break }
                if case .deepLink = input.message { links += 1 } else { steps += 1 }
            }
            let complete = try player.settle()
            let what = "\(steps) step(s) and \(links) deep link(s) from \(file) in \(secondsText(nanoseconds(began.duration(to: clock.now)))) (\(rateText))"
            let passText = loop ? "pass \(pass): " : ""
            if let signal = signals.check() {
                emit("\(passText)played \(what); stopped by \(StopSignals.name(signal))\(complete ? "" : ", the last ones unacknowledged")")
                // The end of a loop; an unfinished play otherwise.
                if loop { return }
                throw ExitCode(128 + signal)
            }
            emit("\(passText)played \(what), all acknowledged")
            if !player.refusals.isEmpty {
                for refusal in player.refusals {
                    note("flowd refused \(refusal.details["topic"]?.stringValue ?? "a message"): \(refusal.reason.rawValue): \(refusal.message)")
                }
                throw ExitCode(1)
            }
        } while loop
    }
}

/// Publishers to flowd's ingress, one per recorded stepper id, sending in the recorded order.
/// Owns sockets: one thread.
private final class Player {
    private let config: FlowBusConfig
    private let configPath: String
    private let timeout: Duration
    private let signals: StopSignals
    private var publishers: [String: StepPublisher] = [:]
    /// The publisher sent to last: the only one that may have unacknowledged messages.
    private var current: (key: String, publisher: StepPublisher)?
    /// Deep links need no stepper id: they go through a publisher of their own.
    private static let deepLinkKey = "deeplink/"

    init(config: FlowBusConfig, configPath: String, timeout: Duration, signals: StopSignals) {
        self.config = config
        self.configPath = configPath
        self.timeout = timeout
        self.signals = signals
    }

    /// What flowd refused on arrival (sent back on ingress), every publisher's.
    var refusals: [DiagnosticMessage] { publishers.values.flatMap(\.refusals) }

    /// Waits until `instant`, reading acks meanwhile.
    /// - Returns: false when a stop signal came.
    func idle(until instant: ContinuousClock.Instant) throws -> Bool {
        while true {
            if signals.check() != nil { return false }
            let left = ContinuousClock.now.duration(to: instant)
            guard left > .zero else { return true }
            let slice = min(left, .milliseconds(50))
            if let current {
                try current.publisher.poll(timeout: slice)
            } else {
                Thread.sleep(forTimeInterval: Double(slice.wholeMilliseconds) / 1000)
            }
        }
    }

    /// Sends one input, after what another publisher sent is acknowledged (flowd applies
    /// messages in the order it receives them, and two sockets are not ordered).
    /// - Returns: false when a stop signal came first.
    func play(_ message: WireMessage) throws -> Bool {
        let key: String
        let contentType: ContentType
        switch message {
        case .step(let step):
            key = step.stepperID
            contentType = step.envelope.contentType
        case .deepLink(let link):
            key = Self.deepLinkKey
            contentType = link.envelope.contentType
        default:
            return true
        }
        if let current, current.key != key {
            guard try acknowledged(current.publisher) else { return false }
        }
        let publisher = try publishers[key] ?? {
            let made = try StepPublisher(stepperID: key == Self.deepLinkKey ? "flowctl-play" : key, config: config)
            publishers[key] = made
            return made
        }()
        // The recorded encoding; a message without params has none, and any will do.
        publisher.contentType = contentType == .none ? .fbv : contentType
        switch message {
        case .step(let step):
            try publisher.publish(step.name, step.params)
        case .deepLink(let link):
            try publisher.publishDeepLink(link.name, link.params)
        default:
            break
        }
        current = (key, publisher)
        return true
    }

    /// Waits for flowd to acknowledge everything sent.
    /// - Returns: false when a stop signal came first; then it waits a little longer for the acks
    ///   of what was sent, without failing.
    func settle() throws -> Bool {
        guard let current else { return true }
        if try acknowledged(current.publisher) { return true }
        return try current.publisher.waitForAcknowledgement(timeout: min(timeout, .seconds(2)))
    }

    private func acknowledged(_ publisher: StepPublisher) throws -> Bool {
        let deadline = ContinuousClock.now + timeout
        while publisher.outstanding > 0 {
            if signals.check() != nil { return false }
            guard ContinuousClock.now < deadline else {
                throw ClientError(
                    "flowd did not acknowledge within \(timeout) on \(config.endpoints.ingress): is it still running? Start it with `flowd --config \(configPath)` and play again")
            }
            _ = try publisher.waitForAcknowledgement(timeout: .milliseconds(100))
        }
        return true
    }
}

// MARK: info

/// `flowctl info FILE`: what a recording holds.
struct InfoCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "info",
        abstract: "Summarise a recording: format, start, end, duration, size, message counts per endpoint, kind and topic (like `ros2 bag info`).")

    @Argument(help: "The recording.") var file: String
    @Flag(help: "Print one JSON object.") var json = false
    @Flag(help: "Then list every message with its arrival time and endpoint (with --json: one object per line).") var messages = false

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
            "messages:  \(summary.messageCount) (\(summary.inputCount) input(s) for flowctl play: steps and deep links)",
            "topics:    \(meta.topics.isEmpty ? "all" : meta.topics.joined(separator: " "))\(summary.kinds["heartbeat"] == nil ? ", heartbeats left out" : "")",
            "endpoints:",
        ]
        let nameWidth = meta.endpoints.map(\.name.count).max() ?? 0
        let countWidth = meta.endpoints.map { String(summary.endpoints[$0.name] ?? 0).count }.max() ?? 0
        for endpoint in meta.endpoints {
            let name = endpoint.name.padding(toLength: nameWidth, withPad: " ", startingAt: 0)
            let count = String(summary.endpoints[endpoint.name] ?? 0)
            lines.append("  \(name)  \(String(repeating: " ", count: countWidth - count.count))\(count)  \(endpoint.address)")
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
            "end_us": meta.endedAt.map(WireValue.int) ?? .null, "end": meta.endedAt.map { .string(timeText($0)) } ?? .null,
            "finished": .bool(summary.isFinished), "duration_ns": .int(summary.durationNanoseconds),
            "message_count": .int(Int64(summary.messageCount)), "input_count": .int(Int64(summary.inputCount)),
            "subscribed_topics": .list(meta.topics.map(WireValue.string)),
            "endpoints": .list(meta.endpoints.map { endpoint in
                .map(["name": .string(endpoint.name), "address": .string(endpoint.address), "messages": .int(Int64(summary.endpoints[endpoint.name] ?? 0))])
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
        var object: WireParams = ["id": .int(message.id), "time_ns": .int(message.time), "endpoint": .string(message.endpoint)]
        do {
            object["message"] = try WireJSON.decode(MessageFormatter.json(try message.decode()))
        } catch {
            object["malformed"] = .string("\(error)")
            object["topic"] = .string(message.topic)
        }
        return try WireJSON.string(.map(object))
    }
}
