import FlowBusClient
import FlowBusConfiguration
import FlowBusWire
import Foundation
import ZeroMQ

/// Subscriptions to every publisher of a topology, feeding one ``BusRecording``: what
/// `flowctl record` runs, and what a test can run to keep the bus traffic of a scenario.
///
/// Each message is stored with its frames exactly as received and the time it was read.
/// Messages read from several publishers in one go are stored in the order of their senders'
/// timestamps (``BusRecording/interleave(_:)``): two sockets read together say nothing about
/// which message came first. What a reactor host publishes itself names it, and the recorder
/// notes its source id at once, so that ``BusPlayer`` can tell the steps its reactors published.
///
/// Heartbeats are always subscribed, because a heartbeat shows a subscription is live (from then
/// on nothing its publisher sends is missed), and stored only when asked for. flowd's events are
/// resumed when flowd keeps them (a source with a ``Source/resumption``, PROTOCOL.md §4.6): what a
/// full queue dropped, a takeover cut short or a reconnection missed is asked for and stored, in
/// event order, exactly as flowd published it; events no longer kept are reported
/// (``onFallback``, ``Summary/missedEvents``).
///
/// The recorder owns its sockets: it is used from one thread. It stops on its own after
/// `limit` messages, or early when its ``StopRequest`` is made; ``finish()`` then writes what is
/// still queued and closes the file.
public final class BusRecorder {
    /// A publisher to subscribe to.
    public struct Source: Sendable, Hashable {
        /// How the recording names it: `events` (flowd), `reactors.<host>.states`.
        public var name: String
        /// Where it publishes: one endpoint, or flowd's events on each of its instances.
        public var addresses: [String]
        /// ``addresses`` in words, for messages.
        public var address: String { FlowBusConfig.either(addresses) }
        /// Who publishes there, e.g. `flowd`, `reactor host demo`.
        public var owner: String
        /// The command that starts it, for messages saying what to do.
        public var start: String
        /// A reactor host's `states` endpoint: its source ids are noted in the recording.
        public var isReactorHost: Bool
        /// flowd's events when flowd keeps them: resumed from the first heartbeat on, so that
        /// none is missed.
        public var resumption: EventResumption?

        /// A publisher; ``BusRecorder/sources(of:configPath:)`` lists a config's.
        public init(
            name: String, addresses: [String], owner: String, start: String, isReactorHost: Bool = false,
            resumption: EventResumption? = nil
        ) {
            self.name = name
            self.addresses = addresses
            self.owner = owner
            self.start = start
            self.isReactorHost = isReactorHost
            self.resumption = resumption
        }
    }

    /// What was recorded, once finished.
    public struct Summary: Sendable, Hashable {
        /// Messages stored.
        public var messages: Int
        /// Distinct topics among them.
        public var topics: Int
        /// How long the recorder ran, from its start to ``finish()``.
        public var duration: Duration
        /// flowd's events missed because flowd no longer kept them when they were asked for.
        public var missedEvents: UInt64
    }

    /// The recording being written.
    public let recording: BusRecording
    /// Called on the recorder's thread when a publisher is heard for the first time, once set:
    /// flowctl sets it after saying what it records, to announce the publishers that start later.
    public var onSourceLive: ((Source) -> Void)?
    /// Called on the recorder's thread when events of a resumed source could not be replayed
    /// (flowd no longer keeps them): the recording misses them.
    public var onFallback: ((EventFallback) -> Void)?

    /// One source's subscription: a SUB read as it comes, or flowd's events resumed.
    private enum Input {
        case plain(Socket)
        case resumed(BusSubscriber)
    }

    private let context: Context
    private var inputs: [Input] = []
    private var sources: [Source]
    private var live: [Bool]
    private let poller = Poller()
    private let stop: StopRequest?
    private let recordHeartbeats: Bool
    private let limit: Int?
    private let grace: Duration
    private let clock = ContinuousClock()
    private let started: ContinuousClock.Instant
    private var buffer = FrameBuffer()
    /// What each socket gave in the current read, merged into one order before it is written.
    private var batches: [[BusRecording.Message]]
    private var recorded = 0
    private var topicsSeen = Set<String>()
    private var isClosed = false
    private var missedEvents: UInt64 = 0

    /// The publishers of `config`: flowd's events (on each of its instances) and the `states`
    /// endpoint of every reactor host, in the order of their names.
    /// - Parameter configPath: The config's path as the user gave it, for the commands in
    ///   ``Source/start``.
    public static func sources(of config: FlowBusConfig, configPath: String) -> [Source] {
        var sources = [
            Source(
                name: "events", addresses: config.eventsEndpoints, owner: "flowd",
                start: "flowd --config \(configPath)",
                resumption: config.replay.isOn
                    ? .fromNow(control: config.controlEndpoints, heartbeatMilliseconds: config.heartbeatMilliseconds)
                    : nil)
        ]
        for (name, host) in config.reactors.sorted(by: { $0.key < $1.key }) {
            sources.append(
                Source(
                    name: "reactors.\(name).states", addresses: host.statesEndpoints, owner: "reactor host \(name)",
                    start: "reactor-host --config \(configPath) --host \(name)", isReactorHost: true))
        }
        return sources
    }

    /// The metadata of a recording of `sources` with `topics`, to create it with.
    /// - Parameter recorder: What writes it, e.g. `flowctl record`.
    public static func metadata(
        sources: [Source], topics: [String], configPath: String?, recorder: String
    ) -> BusRecording.Metadata {
        BusRecording.Metadata(
            recorder: recorder, configPath: configPath,
            endpoints: sources.map { BusRecording.Endpoint(name: $0.name, address: $0.address) }, topics: topics)
    }

    /// Subscribes to `sources` (connecting; a publisher that is not running yet is recorded once
    /// it starts) and starts the clock of the recording.
    /// - Parameters:
    ///   - recording: A recording just created; the recorder closes it.
    ///   - topics: Topic prefixes to record; empty: every topic. Without them the empty prefix
    ///     also covers `action/`, which makes a reactor host re-publish the actions it applies.
    ///   - recordHeartbeats: Store heartbeats too (also when a prefix of `topics` covers `hb/`).
    ///   - limit: Stop after this many messages.
    ///   - curve: The config's CURVE keys, for tcp endpoints.
    ///   - heartbeatInterval: The config's: once one publisher answered, the others get three
    ///     intervals (at least 2 s) in ``waitUntilLive(timeout:)``.
    ///   - stop: Stops the recorder early; its poll wakes at once.
    public init(
        recording: BusRecording, sources: [Source], topics: [String] = [], recordHeartbeats: Bool = false,
        limit: Int? = nil, curve: CurveKeys = CurveKeys(), heartbeatInterval: Duration = .seconds(1),
        stop: StopRequest? = nil
    ) throws {
        self.recording = recording
        self.sources = sources
        self.stop = stop
        self.recordHeartbeats = recordHeartbeats || topics.contains { "hb/".hasPrefix($0) }
        self.limit = limit
        grace = max(.seconds(2), heartbeatInterval * 3)
        live = Array(repeating: false, count: sources.count)
        batches = Array(repeating: [], count: sources.count)
        context = try Context(defaultLinger: 0)
        for source in sources {
            if let resumption = source.resumption {
                let subscriber = try BusSubscriber(
                    endpoints: source.addresses, topics: topics, includeHeartbeats: true, curve: curve,
                    context: context,
                    resuming: resumption)
                subscriber.keepsFrames = true
                for socket in subscriber.pollableSockets { try poller.add(socket) }
                inputs.append(.resumed(subscriber))
                continue
            }
            let socket = try context.socket(.sub)
            try socket.setOptions([.receiveHighWaterMark(1_000_000), .reconnectInterval(100)])
            try socket.setOptions(BusSubscriber.followingInstances(source.addresses.count))
            for topic in Set(topics.isEmpty ? [""] : topics + ["hb/"]) {
                try socket.setOption(.subscribe(topic))
            }
            for address in source.addresses {
                try curve.secureClient(socket, endpoint: address)
                try socket.connect(address)
            }
            try poller.add(socket)
            inputs.append(.plain(socket))
        }
        if let stop { poller.add(fileDescriptor: stop.fileDescriptor) }
        started = clock.now
        for case .resumed(let subscriber) in inputs {
            subscriber.onFallback = { [unowned self] fallback in
                missedEvents += fallback.head - min(fallback.head, fallback.since)
                onFallback?(fallback)
            }
        }
    }

    /// Whether every publisher was heard.
    public var allLive: Bool { !live.contains(false) }
    /// Whether at least one publisher was heard.
    public var anyLive: Bool { live.contains(true) }
    /// The publishers heard so far.
    public var liveSources: [Source] { sources.indices.filter { live[$0] }.map { sources[$0] } }
    /// The publishers not heard yet.
    public var missingSources: [Source] { sources.indices.filter { !live[$0] }.map { sources[$0] } }
    /// Messages stored so far.
    public var messageCount: Int { recorded }

    private var limitReached: Bool { limit.map { recorded >= $0 } ?? false }

    /// Records until every publisher was heard, for up to `timeout`; once one was heard, the
    /// others get three heartbeat intervals (a host that is not running is recorded when it
    /// starts). Check ``anyLive`` afterwards: with no publisher heard there is nothing to record.
    /// - Returns: false when the recorder stopped meanwhile (stop request or `limit`).
    public func waitUntilLive(timeout: Duration) throws -> Bool {
        var waitUntil = clock.now + timeout
        while !allLive {
            let left = clock.now.duration(to: waitUntil)
            guard left > .zero else { break }
            guard try pump(timeout: min(left, .milliseconds(100))) else { return false }
            if anyLive { waitUntil = min(waitUntil, clock.now + grace) }
        }
        return true
    }

    /// Records until the stop request, `limit` messages, or `duration` (nil: no end of its own).
    public func record(for duration: Duration? = nil) throws {
        let stopAt = duration.map { clock.now + $0 }
        while true {
            var wait = Duration.seconds(1)
            if let stopAt {
                let left = clock.now.duration(to: stopAt)
                guard left > .zero else { return }
                wait = min(wait, left)
            }
            guard try pump(timeout: wait) else { return }
        }
    }

    /// Receives for up to `timeout` and writes what came in one transaction.
    /// - Returns: false once a stop was requested or `limit` messages are recorded.
    package func pump(timeout: Duration) throws -> Bool {
        try poller.poll(timeout: max(0, timeout.wholeMilliseconds))
        if stop?.isRequested == true { return false }
        try drainAll()
        return !limitReached
    }

    /// Reads every socket and writes what came, in one transaction and one order.
    private func drainAll() throws {
        let time = Self.nanoseconds(started.duration(to: clock.now))
        for index in inputs.indices {
            try drain(index, time: time)
        }
        try recording.append(BusRecording.interleave(batches))
        for index in batches.indices { batches[index].removeAll(keepingCapacity: true) }
    }

    private func drain(_ index: Int, time: Int64) throws {
        var taken = 0
        // Bounded, so one busy publisher cannot keep the others and the stop request waiting.
        while taken < 10_000, !limitReached, try receive(from: inputs[index]) {
            taken += 1
            let message = BusRecording.Message(time: time, endpoint: sources[index].name, frames: buffer)
            if !live[index] {
                // Any message proves the subscription is active at the publisher.
                live[index] = true
                onSourceLive?(sources[index])
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

    /// Reads the next message of `input` into ``buffer``, without waiting.
    private func receive(from input: Input) throws -> Bool {
        switch input {
        case .plain(let socket):
            return try socket.receive(into: &buffer, mode: .nonBlocking)
        case .resumed(let subscriber):
            while try subscriber.next(timeout: .zero) != nil {
                guard let frames = subscriber.lastFrames else { continue }
                buffer = frames
                return true
            }
            return false
        }
    }

    /// Writes what is still queued, the end time, and closes the file.
    public func finish() throws -> Summary {
        try drainAll()
        let duration = started.duration(to: clock.now)
        try recording.finish(duration: duration)
        close()
        return Summary(
            messages: recorded, topics: topicsSeen.count, duration: duration, missedEvents: missedEvents)
    }

    /// Closes the file and deletes it: for a recording that never started (no publisher heard).
    public func discard() {
        close()
        let path = recording.path
        for file in [path, path + "-wal", path + "-shm"] { try? FileManager.default.removeItem(atPath: file) }
    }

    private func close() {
        guard !isClosed else { return }
        isClosed = true
        for case .plain(let socket) in inputs { socket.close() }
        // A resumed source's sockets close with its subscriber.
        inputs.removeAll()
        recording.close()
    }

    private static func nanoseconds(_ duration: Duration) -> Int64 {
        let (seconds, attoseconds) = duration.components
        return seconds * 1_000_000_000 + attoseconds / 1_000_000_000
    }
}

@available(*, unavailable, message: "a recorder owns its sockets: one thread")
extension BusRecorder: Sendable {}
