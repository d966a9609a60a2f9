import ArgumentParser
import FlowBusClient
import FlowBusConfiguration
import FlowBusCoordinator
import FlowBusDaemon
import FlowBusTools
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

    static func name(_ number: Int32) -> String {
        number == SIGINT ? "SIGINT" : number == SIGTERM ? "SIGTERM" : "signal \(number)"
    }
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
        var sources = [
            Recorder.Source(
                name: "events", addresses: config.eventsEndpoints, owner: "flowd", start: "flowd --config \(configPath)"
            )
        ]
        for (name, host) in config.reactors.sorted(by: { $0.key < $1.key }) {
            sources.append(
                Recorder.Source(
                    name: "reactors.\(name).states", addresses: [host.states], owner: "reactor host \(name)",
                    start: "reactor-host --config \(configPath) --host \(name)", isReactorHost: true))
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
            throw ClientError(
                "no publisher answered within \(timeout) s: \(missing.joined(separator: "; ")); nothing recorded")
        }
        if running {
            for source in recorder.missing {
                note(
                    "no heartbeat from \(source.owner) on \(source.address) yet: its messages are recorded once it runs (`\(source.start)`)"
                )
            }
            let live = recorder.liveSources.map {
                "\($0.owner) \($0.name == "events" ? "events" : "states") \($0.address)"
            }
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
        emit(
            "recorded \(summary.messages) message(s) on \(summary.topics) topic(s) in \(secondsText(summary.duration)) to \(file)\(reason)"
        )
    }
}

/// Subscriptions to every publisher, feeding one recording. Owns its sockets: one thread.
private final class Recorder {
    struct Source {
        var name: String
        /// Where it publishes: one endpoint, or flowd's events on each of its instances.
        var addresses: [String]
        var address: String { FlowBusConfig.either(addresses) }
        /// Who publishes there, e.g. `flowd`, `reactor host demo`.
        var owner: String
        /// The command that starts it.
        var start: String
        /// A reactor host's `states` endpoint (its source ids are noted in the recording).
        var isReactorHost = false
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
    /// What each socket gave in the current read, merged into one order before it is written.
    private var batches: [[BusRecording.Message]]
    private var recorded = 0
    private var topicsSeen = Set<String>()
    /// Whether the "recording" line was printed (later publishers are then announced).
    private var announced = false

    init(
        recording: BusRecording, sources: [Source], topics: [String], curve: CurveKeys, recordHeartbeats: Bool,
        limit: Int?,
        signals: StopSignals
    ) throws {
        self.recording = recording
        self.sources = sources
        self.signals = signals
        self.recordHeartbeats = recordHeartbeats
        self.limit = limit
        batches = Array(repeating: [], count: sources.count)
        context = try Context(defaultLinger: 0)
        for source in sources {
            let socket = try context.socket(.sub)
            try socket.setOptions([.receiveHighWaterMark(1_000_000), .reconnectInterval(100)])
            try socket.setOptions(BusSubscriber.followingInstances(source.addresses.count))
            // Heartbeats always: they tell when a subscription is live. Without --topics the
            // empty prefix also covers `action/`, which makes a reactor host re-publish the
            // actions it applies.
            for topic in Set(topics.isEmpty ? [""] : topics + ["hb/"]) {
                try socket.setOption(.subscribe(topic))
            }
            for address in source.addresses {
                try curve.secureClient(socket, endpoint: address)
                try socket.connect(address)
            }
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
        try drainAll()
        return !limitReached
    }

    /// Reads every socket and writes what came, in one transaction and one order.
    private func drainAll() throws {
        let time = nanoseconds(started.duration(to: clock.now))
        for index in sockets.indices {
            try drain(index, time: time)
        }
        try recording.append(BusRecording.interleave(batches))
        for index in batches.indices { batches[index].removeAll(keepingCapacity: true) }
    }

    private func drain(_ index: Int, time: Int64) throws {
        var taken = 0
        // Bounded, so one busy publisher cannot keep the others and the signals waiting.
        while taken < 10_000, !limitReached, try sockets[index].receive(into: &buffer, mode: .nonBlocking) {
            taken += 1
            let message = BusRecording.Message(time: time, endpoint: sources[index].name, frames: buffer)
            if !sources[index].live {
                // Any message proves the subscription is active at the publisher.
                sources[index].live = true
                if announced { note("now recording from \(sources[index].owner) on \(sources[index].address)") }
            }
            if sources[index].isReactorHost, let kind = message.kind, kind != .action {
                // What the host publishes itself names it: play tells its steps by this source.
                try recording.noteReactorHost(
                    BusRecording.ReactorHost(endpoint: message.endpoint, source: message.source))
            }
            if message.kind == .heartbeat, !recordHeartbeats { continue }
            batches[index].append(message)
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
        try drainAll()
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
        var inputs: [(time: Int64, message: WireMessage, isFromReactor: Bool)] = []
        for input in try recording.inputs() {
            do {
                inputs.append((input.message.time, try input.message.decode(), input.isFromReactor))
            } catch {
                note(
                    "message \(input.message.id) (\(input.message.topic)) of \(file) does not decode, skipped: \(error)"
                )
            }
        }
        recording.close()
        guard let first = inputs.first(where: { !$0.isFromReactor }) else {
            emit(
                "nothing to play: \(file) has no steps, actions or deep links (`flowctl info \(file)` shows what it has)"
            )
            return
        }
        let config = try options.load()
        let configPath = FlowBusConfig.resolvePath(options.config)
        let reactorIDs = Set(
            inputs.compactMap { input -> String? in
                if case .action(let action) = input.message { return action.reactorID }
                return nil
            })
        let unserved = reactorIDs.filter { config.reactorHost(for: $0) == nil }.sorted()
        guard unserved.isEmpty else {
            throw ClientError(
                "no reactor host of \(configPath) serves \(unserved.joined(separator: ", ")), whose actions \(file) holds: list them (or their family, e.g. movie/) under reactors.<host>.serves"
            )
        }
        if inputs.contains(where: { input in
            if case .action = input.message { return false }
            return true
        }) {
            do {
                _ = try StatusClient.fetch(
                    endpoints: config.controlEndpoints, curve: config.curve, timeout: seconds(min(timeout, 3)))
            } catch {
                throw ClientError(
                    "flowd does not answer on \(FlowBusConfig.either(config.controlEndpoints)): start it with `flowd --config \(configPath)`, then play again (play sends to \(FlowBusConfig.either(config.ingressEndpoints)))"
                )
            }
        }
        let signals = try StopSignals()
        let player = try Player(
            config: config, configPath: configPath, timeout: seconds(timeout), signals: signals,
            watchReactorSteps: inputs.contains(where: \.isFromReactor))
        let rateText = rate == 0 ? "as fast as acknowledged" : "rate \(rate)"
        var pass = 0
        repeat {
            pass += 1
            let clock = ContinuousClock()
            let began = clock.now
            var counts = (steps: 0, actions: 0, links: 0, reactorSteps: 0)
            for input in inputs {
                if input.isFromReactor, case .step(let step) = input.message {
                    player.expect(step)
                    counts.reactorSteps += 1
                    continue
                }
                if rate > 0 {
                    let offset = Double(input.time - first.time) / rate
                    guard try player.idle(until: began + .nanoseconds(Int64(offset))) else { break }
                }
                guard try player.play(input.message) else { break }
                switch input.message {
                case .deepLink: counts.links += 1
                case .action: counts.actions += 1
                default: counts.steps += 1
                }
            }
            let complete = try player.settle()
            var what =
                "\(counts.steps) step(s), \(counts.actions) action(s) and \(counts.links) deep link(s) from \(file)"
            what += " in \(secondsText(nanoseconds(began.duration(to: clock.now)))) (\(rateText))"
            let passText = loop ? "pass \(pass): " : ""
            if let signal = signals.check() {
                emit(
                    "\(passText)played \(what); stopped by \(StopSignals.name(signal))\(complete ? "" : ", the last ones unacknowledged")"
                )
                // The end of a loop; an unfinished play otherwise.
                if loop { return }
                throw ExitCode(128 + signal)
            }
            let fromReactors =
                counts.reactorSteps == 0
                ? "" : "; \(counts.reactorSteps) step(s) from reactors came again through their actions"
            emit("\(passText)played \(what), all acknowledged\(fromReactors)")
            let refusals = player.takeRefusals()
            if !refusals.isEmpty {
                for refusal in refusals { note(refusal) }
                throw ExitCode(1)
            }
        } while loop
    }
}

/// Publishers to flowd's ingress, one per recorded stepper id, and views of the reactor hosts,
/// one per reactor id, sending in the recorded order. Owns sockets: one thread.
private final class Player {
    /// Where a message goes; only the sender used last may have unacknowledged messages.
    private enum Sender {
        case flowd(StepPublisher)
        case host(ReactorView, sent: [UInt64])
    }

    private let config: FlowBusConfig
    private let configPath: String
    private let timeout: Duration
    private let signals: StopSignals
    private let viewContext: Context
    /// By key: `step/<stepperId>`, `deeplink/`, `action/<reactorId>`.
    private var senders: [String: Sender] = [:]
    /// The key of the sender used last.
    private var currentKey: String?
    /// flowd's re-published steps, to see the steps the reactors publish again.
    private let events: BusSubscriber?
    /// Recorded steps from reactors that flowd has not re-published from a live host yet.
    private var expected: [StepMessage] = []
    /// Steps flowd re-published that no expectation took yet.
    private var seen: [StepMessage] = []
    /// How many refusals of each sender were reported already.
    private var reportedRefusals: [String: Int] = [:]

    init(
        config: FlowBusConfig, configPath: String, timeout: Duration, signals: StopSignals, watchReactorSteps: Bool
    ) throws {
        self.config = config
        self.configPath = configPath
        self.timeout = timeout
        self.signals = signals
        viewContext = try Context(defaultLinger: 0)
        if watchReactorSteps {
            let events = try BusSubscriber(
                endpoints: config.eventsEndpoints, topics: [Topic.Prefix.step.subscription], curve: config.curve)
            // Subscribed before anything is sent, so no step a reactor publishes is missed.
            guard try events.waitUntilConnected(timeout: timeout) else {
                throw ClientError(
                    "no heartbeat from flowd's events endpoint \(FlowBusConfig.either(config.eventsEndpoints)) within \(timeout): play watches it for the steps the reactors publish; start flowd with `flowd --config \(configPath)`"
                )
            }
            self.events = events
        } else {
            events = nil
        }
    }

    /// Waits until `instant`, reading acks meanwhile.
    /// - Returns: false when a stop signal came.
    func idle(until instant: ContinuousClock.Instant) throws -> Bool {
        while true {
            if signals.check() != nil { return false }
            let left = ContinuousClock.now.duration(to: instant)
            guard left > .zero else { return true }
            let slice = min(left, .milliseconds(50))
            switch currentKey.flatMap({ senders[$0] }) {
            case .flowd(let publisher)?:
                try publisher.poll(timeout: slice)
            case .host(let view, _)? where view.unacknowledgedCount > 0:
                _ = try view.waitForAcknowledgement(timeout: slice)
            default:
                Thread.sleep(forTimeInterval: Double(slice.wholeMilliseconds) / 1000)
            }
        }
    }

    /// A recorded step a reactor published: the live host publishes it again from the replayed
    /// actions, and the next step or deep link waits for it.
    func expect(_ step: StepMessage) {
        expected.append(step)
    }

    /// Sends one input, after what another sender sent is acknowledged (flowd and the hosts apply
    /// messages in the order they receive them, and two sockets are not ordered); a step or deep
    /// link also waits for the steps from reactors recorded before it.
    /// - Returns: false when a stop signal came first.
    func play(_ message: WireMessage) throws -> Bool {
        let key: String
        switch message {
        case .step(let step): key = step.topic
        case .deepLink: key = Topic.Prefix.deepLink.subscription
        case .action(let action): key = action.topic
        default: return true
        }
        try drainEvents()
        if let currentKey, currentKey != key {
            guard try acknowledged(currentKey) else { return false }
        }
        if case .action = message {
        } else {
            guard try reactorStepsArrived() else { return false }
        }
        switch message {
        case .step(let step):
            let publisher = try publisher(key, stepperID: step.stepperID)
            // The recorded encoding; a message without params has none, and any will do.
            publisher.contentType = step.envelope.contentType == .none ? .fbv : step.envelope.contentType
            try publisher.publish(step.name, step.params)
        case .deepLink(let link):
            let publisher = try publisher(key, stepperID: "flowctl-play")
            publisher.contentType = link.envelope.contentType == .none ? .fbv : link.envelope.contentType
            try publisher.publishDeepLink(link.name, link.params)
        case .action(let action):
            let view: ReactorView
            var sent: [UInt64] = []
            if case .host(let existing, let earlier)? = senders[key] {
                view = existing
                sent = earlier
            } else {
                view = try ReactorView(reactorID: action.reactorID, config: config, context: viewContext)
            }
            view.contentType = action.envelope.contentType == .none ? .fbv : action.envelope.contentType
            sent.append(try view.send(action.name, action.params))
            senders[key] = .host(view, sent: sent)
        default:
            break
        }
        currentKey = key
        return true
    }

    /// Waits until everything sent is acknowledged and flowd re-published the steps expected
    /// from the reactors.
    /// - Returns: false when a stop signal came first; then it waits a little longer for the acks
    ///   of what was sent, without failing.
    func settle() throws -> Bool {
        if let currentKey {
            guard try acknowledged(currentKey) else {
                if case .flowd(let publisher)? = senders[currentKey] {
                    return try publisher.waitForAcknowledgement(timeout: min(timeout, .seconds(2)))
                }
                if case .host(let view, _)? = senders[currentKey] {
                    return try view.waitForAcknowledgement(timeout: min(timeout, .seconds(2)))
                }
                return false
            }
        }
        return try reactorStepsArrived()
    }

    /// What flowd and the hosts refused since the last call, one line each.
    func takeRefusals() -> [String] {
        var lines: [String] = []
        for (key, sender) in senders.sorted(by: { $0.key < $1.key }) {
            let refusals: [DiagnosticMessage]
            let who: String
            switch sender {
            case .flowd(let publisher):
                refusals = publisher.refusals
                who = "flowd"
            case .host(let view, let sent):
                refusals = sent.compactMap(view.refusal(for:))
                who = "the reactor host at \(view.actionsEndpoint)"
            }
            for refusal in refusals.dropFirst(reportedRefusals[key] ?? 0) {
                lines.append(
                    "\(who) refused \(refusal.details["topic"]?.stringValue ?? key): \(refusal.reason.rawValue): \(refusal.message)"
                )
            }
            reportedRefusals[key] = refusals.count
        }
        return lines
    }

    private func publisher(_ key: String, stepperID: String) throws -> StepPublisher {
        if case .flowd(let publisher)? = senders[key] { return publisher }
        let made = try StepPublisher(stepperID: stepperID, config: config)
        senders[key] = .flowd(made)
        return made
    }

    private func acknowledged(_ key: String) throws -> Bool {
        let deadline = ContinuousClock.now + timeout
        switch senders[key] {
        case .flowd(let publisher)?:
            while publisher.outstanding > 0 {
                if signals.check() != nil { return false }
                guard ContinuousClock.now < deadline else {
                    throw ClientError(
                        "flowd did not acknowledge within \(timeout) on \(FlowBusConfig.either(config.ingressEndpoints)): is it still running? Start it with `flowd --config \(configPath)` and play again"
                    )
                }
                _ = try publisher.waitForAcknowledgement(timeout: .milliseconds(100))
            }
        case .host(let view, _)?:
            while view.unacknowledgedCount > 0 {
                if signals.check() != nil { return false }
                guard ContinuousClock.now < deadline else {
                    let host = config.reactorHost(for: view.reactorID)?.name ?? "NAME"
                    throw ClientError(
                        "the reactor host serving \(view.reactorID) did not acknowledge within \(timeout) on \(view.actionsEndpoint): is it running? Start it with `reactor-host --config \(configPath) --host \(host)` and play again"
                    )
                }
                // The view resends meanwhile if acks stall.
                _ = try view.waitForAcknowledgement(timeout: view.retransmitInterval + .milliseconds(100))
            }
        case nil:
            break
        }
        return true
    }

    /// Keeps the steps flowd re-published that are not this player's own, so its subscription
    /// never fills up however long the play.
    private func drainEvents(waiting wait: Duration = .zero) throws {
        guard let events, var received = try events.next(timeout: wait) else { return }
        var own = Set<String>()
        for case .flowd(let publisher) in senders.values { own.insert(publisher.sourceID) }
        while true {
            if case .message(.step(let step)) = received, !own.contains(step.envelope.source) { seen.append(step) }
            guard let next = try events.next(timeout: .zero) else { return }
            received = next
        }
    }

    /// Waits until flowd re-published, from a live reactor host, each expected step (same stepper
    /// id and name; params may differ, e.g. a generated id).
    /// - Returns: false when a stop signal came first.
    private func reactorStepsArrived() throws -> Bool {
        guard events != nil, !expected.isEmpty else { return true }
        let deadline = ContinuousClock.now + timeout
        while true {
            // Every view sent to so far has its ack, so it knows its host's source.
            var hosts = Set<Substring>()
            for case .host(let view, _) in senders.values {
                if let suffix = view.hostSource.flatMap(BusRecording.sourceSuffix) { hosts.insert(suffix) }
            }
            seen.removeAll { step in BusRecording.sourceSuffix(step.envelope.source).map { !hosts.contains($0) } ?? true
            }
            while let step = expected.first,
                let index = seen.firstIndex(where: { $0.stepperID == step.stepperID && $0.name == step.name })
            {
                seen.remove(at: index)
                expected.removeFirst()
            }
            guard let missing = expected.first else { return true }
            if signals.check() != nil { return false }
            let left = ContinuousClock.now.duration(to: deadline)
            guard left > .zero else {
                var names = Set<String>()
                for case .host(let view, _) in senders.values {
                    names.insert(config.reactorHost(for: view.reactorID)?.name ?? "NAME")
                }
                let start = names.sorted().map { "`reactor-host --config \(configPath) --host \($0)`" }.joined(
                    separator: ", ")
                throw ClientError(
                    "flowd did not receive step \(MessageFormatter.step(missing.name, missing.params)) of stepper \(missing.stepperID) from a reactor host within \(timeout) (in the recording a reactor published it after the actions played so far): is each host fresh, or in the state it had when the recording started? Start it with \(start)"
                )
            }
            try drainEvents(waiting: min(left, .milliseconds(100)))
        }
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
