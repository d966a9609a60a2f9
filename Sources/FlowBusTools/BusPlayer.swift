import FlowBusClient
import FlowBusConfiguration
import FlowBusWire
import Foundation
import ZeroMQ

/// Sends a recording's inputs again into a running topology: what `flowctl play` runs, and what
/// a test can run to replay a recorded scenario.
///
/// Each step goes to flowd's ingress as its stepper id (same topic, name, params and encoding,
/// under a new source id), each deep link as a deep link, and each action to the reactor host of
/// the config that serves its reactor id (one view per reactor id). A message for another
/// stepper, reactor or flowd is sent only once the previous ones are acknowledged: flowd and the
/// hosts apply messages in the order they receive them, and two sockets are not ordered, so this
/// keeps the recorded interleaving.
///
/// Steps that a reactor host published as a stepper (``BusRecording/Input/isFromReactor``) are
/// not sent: the replayed actions make the live host publish them again. The player waits,
/// before its next step or deep link, until flowd has re-published each of them from a live
/// host, so that flowd sees them where they were recorded.
///
/// The outcome is the recorded one when the topology starts in the recorded state (e.g. a
/// fresh flowd and fresh reactor hosts for a recording started with them). The player owns its
/// sockets: it is used from one thread. Its publishers and views live across passes, so a
/// second ``play(rate:stop:)`` continues their sequences and flowd applies its steps again.
public final class BusPlayer {
    /// A recorded input, decoded.
    public struct Input: Sendable, Hashable {
        /// Nanoseconds since the recording started, when it was recorded.
        public var time: Int64
        /// A step, an action or a deep link.
        public var message: WireMessage
        /// A step a reactor host published: replayed through the host's actions, not sent.
        public var isFromReactor: Bool

        /// An input made in code, e.g. by a test.
        public init(time: Int64, message: WireMessage, isFromReactor: Bool = false) {
            self.time = time
            self.message = message
            self.isFromReactor = isFromReactor
        }
    }

    /// A recorded message that does not decode, left out of a ``Playlist``.
    public struct Skipped: Sendable, Hashable {
        /// Its id in the recording.
        public var id: Int64
        /// Its raw topic.
        public var topic: String
        /// Why it does not decode.
        public var error: WireError
    }

    /// What a player sends, in recorded order.
    public struct Playlist: Sendable, Hashable {
        /// The inputs, steps from reactors included (they are expected, not sent).
        public var inputs: [Input]
        /// The recorded inputs that do not decode (not in ``inputs``).
        public var skipped: [Skipped]
        /// The recording's path, for messages.
        public var path: String?

        /// A playlist made in code, e.g. by a test.
        public init(inputs: [Input], path: String? = nil) {
            self.inputs = inputs
            skipped = []
            self.path = path
        }

        /// The steps, actions and deep links of `recording` (``BusRecording/inputs()``).
        public init(recording: BusRecording) throws(RecordingError) {
            inputs = []
            skipped = []
            path = recording.path
            for input in try recording.inputs() {
                do {
                    inputs.append(
                        Input(
                            time: input.message.time, message: try input.message.decode(),
                            isFromReactor: input.isFromReactor))
                } catch {
                    skipped.append(Skipped(id: input.message.id, topic: input.message.topic, error: error))
                }
            }
        }

        /// Whether there is nothing to send: no input, or only steps from reactors.
        public var isEmpty: Bool { !inputs.contains { !$0.isFromReactor } }
    }

    /// A message flowd or a reactor host refused while playing.
    public struct Refusal: Sendable, Hashable, CustomStringConvertible {
        /// `flowd`, or `the reactor host at <actions endpoint>`.
        public var refusedBy: String
        /// The refused message's topic.
        public var topic: String
        /// The refusal as sent: its reason and message.
        public var diagnostic: DiagnosticMessage

        public var description: String {
            "\(refusedBy) refused \(topic): \(diagnostic.reason.rawValue): \(diagnostic.message)"
        }
    }

    /// What one pass through the playlist did.
    public struct Pass: Sendable, Hashable {
        /// Steps sent.
        public var steps = 0
        /// Actions sent.
        public var actions = 0
        /// Deep links sent.
        public var deepLinks = 0
        /// Steps from reactors that came again through their actions (not sent).
        public var reactorSteps = 0
        /// From the start of the pass until everything was acknowledged (or it stopped).
        public var duration: Duration = .zero
        /// Why the pass stopped before its end; nil when it played everything.
        public var stoppedBy: StopRequest.Reason?
        /// Whether everything sent was acknowledged; false only for a stopped pass.
        public var isComplete = true
        /// What flowd and the hosts refused during the pass.
        public var refusals: [Refusal] = []
    }

    /// Where a message goes; only the sender used last may have unacknowledged messages.
    private enum Sender {
        case flowd(StepPublisher)
        case host(ReactorView, sent: [UInt64])
    }

    /// What it plays.
    public let playlist: Playlist
    private let config: FlowBusConfig
    private let configPath: String
    private let timeout: Duration
    private let viewContext: Context
    /// Whether the playlist holds steps from reactors, which flowd must be seen re-publishing.
    private let watchesReactorSteps: Bool
    /// The stop request of the pass in progress.
    private var stop: StopRequest?
    /// By key: `step/<stepperId>`, `deeplink/`, `action/<reactorId>`.
    private var senders: [String: Sender] = [:]
    /// The key of the sender used last.
    private var currentKey: String?
    /// flowd's re-published steps, to see the steps the reactors publish again.
    private var events: BusSubscriber?
    /// Recorded steps from reactors that flowd has not re-published from a live host yet.
    private var expected: [StepMessage] = []
    /// Steps flowd re-published that no expectation took yet.
    private var seen: [StepMessage] = []
    /// How many refusals of each sender were reported already.
    private var reportedRefusals: [String: Int] = [:]

    /// A player of `playlist` into the topology of `config`. Checks, before anything is sent,
    /// that a host of the config serves every recorded action and that flowd answers (when there
    /// are steps or deep links).
    /// - Parameters:
    ///   - configPath: The config's path as the user gave it, for the commands in errors.
    ///   - timeout: How long to wait for each acknowledgement, and for each step a reactor
    ///     publishes again.
    /// - Throws: ``BusToolError`` (``BusToolError/Code/unservedReactor``,
    ///   ``BusToolError/Code/flowdNotAnswering``) saying what to do.
    public init(
        playlist: Playlist, config: FlowBusConfig, configPath: String, timeout: Duration = .seconds(10)
    )
        throws
    {
        self.playlist = playlist
        self.config = config
        self.configPath = configPath
        self.timeout = timeout
        watchesReactorSteps = playlist.inputs.contains(where: \.isFromReactor)
        let reactorIDs = Set(
            playlist.inputs.compactMap { input -> String? in
                if case .action(let action) = input.message { return action.reactorID }
                return nil
            })
        let unserved = reactorIDs.filter { config.reactorHost(for: $0) == nil }.sorted()
        guard unserved.isEmpty else {
            throw BusToolError(
                .unservedReactor,
                "no reactor host of \(configPath) serves \(unserved.joined(separator: ", ")), whose actions "
                    + "\(playlist.path ?? "the playlist") holds: list them (or their family, e.g. movie/) "
                    + "under reactors.<host>.serves"
            )
        }
        if playlist.inputs.contains(where: { input in
            if case .action = input.message { return false }
            return true
        }) {
            do {
                _ = try StatusClient.fetch(
                    endpoints: config.controlEndpoints, curve: config.curve, timeout: min(timeout, .seconds(3)))
            } catch {
                throw BusToolError(
                    .flowdNotAnswering,
                    "flowd does not answer on \(FlowBusConfig.either(config.controlEndpoints)): start it with "
                        + "`flowd --config \(configPath)`, then play again "
                        + "(play sends to \(FlowBusConfig.either(config.ingressEndpoints)))"
                )
            }
        }
        viewContext = try Context(defaultLinger: 0)
    }

    /// Plays the playlist once, in recorded order, with the recorded gaps divided by `rate`,
    /// then waits until everything sent is acknowledged and flowd re-published the steps
    /// expected from the reactors.
    /// - Parameters:
    ///   - rate: Speed: 2 plays twice as fast; 0 sends each message as soon as the previous
    ///     ones are acknowledged.
    ///   - stop: Ends the pass early (``Pass/stoppedBy``); it then waits a little for the acks
    ///     of what was sent, without failing.
    /// - Throws: ``BusToolError`` when flowd or a host does not acknowledge, or a step from a
    ///   reactor does not come again, within the timeout.
    public func play(rate: Double = 1, stop: StopRequest? = nil) throws -> Pass {
        precondition(rate.isFinite && rate >= 0, "a rate is a finite number ≥ 0")
        self.stop = stop
        defer { self.stop = nil }
        if watchesReactorSteps, events == nil { try subscribeToEvents() }
        let clock = ContinuousClock()
        let began = clock.now
        var pass = Pass()
        let first = playlist.inputs.first { !$0.isFromReactor }
        for input in playlist.inputs {
            if input.isFromReactor, case .step(let step) = input.message {
                expected.append(step)
                pass.reactorSteps += 1
                continue
            }
            if rate > 0, let first {
                let offset = Double(input.time - first.time) / rate
                guard try idle(until: began + .nanoseconds(Int64(offset))) else { break }
            }
            guard try send(input.message) else { break }
            switch input.message {
            case .deepLink: pass.deepLinks += 1
            case .action: pass.actions += 1
            default: pass.steps += 1
            }
        }
        pass.isComplete = try settle()
        pass.duration = began.duration(to: clock.now)
        pass.stoppedBy = stop?.reason
        pass.refusals = takeRefusals()
        return pass
    }

    /// Subscribes to flowd's steps before anything is sent, so that no step a reactor publishes
    /// is missed.
    private func subscribeToEvents() throws {
        let events = try BusSubscriber(
            endpoints: config.eventsEndpoints, topics: [Topic.Prefix.step.subscription], curve: config.curve)
        guard try events.waitUntilConnected(timeout: timeout) else {
            throw BusToolError(
                .flowdNotAnswering,
                "no heartbeat from flowd's events endpoint \(FlowBusConfig.either(config.eventsEndpoints)) "
                    + "within \(timeout): play watches it for the steps the reactors publish; start flowd with "
                    + "`flowd --config \(configPath)`"
            )
        }
        self.events = events
    }

    private var isStopped: Bool { stop?.isRequested == true }

    /// Waits until `instant`, reading acks meanwhile.
    /// - Returns: false when a stop was requested.
    private func idle(until instant: ContinuousClock.Instant) throws -> Bool {
        while true {
            if isStopped { return false }
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

    /// Sends one input, after what another sender sent is acknowledged; a step or deep link also
    /// waits for the steps from reactors recorded before it.
    /// - Returns: false when a stop was requested first.
    private func send(_ message: WireMessage) throws -> Bool {
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
    /// - Returns: false when a stop was requested first; then it waits a little longer for the
    ///   acks of what was sent, without failing.
    private func settle() throws -> Bool {
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

    /// What flowd and the hosts refused since the last call.
    private func takeRefusals() -> [Refusal] {
        var all: [Refusal] = []
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
                all.append(
                    Refusal(refusedBy: who, topic: refusal.details["topic"]?.stringValue ?? key, diagnostic: refusal))
            }
            reportedRefusals[key] = refusals.count
        }
        return all
    }

    private func publisher(_ key: String, stepperID: String) throws -> StepPublisher {
        if case .flowd(let publisher)? = senders[key] { return publisher }
        let made = try StepPublisher(stepperID: stepperID, config: config)
        senders[key] = .flowd(made)
        return made
    }

    /// Waits until what the sender of `key` sent is acknowledged.
    /// - Returns: false when a stop was requested first.
    private func acknowledged(_ key: String) throws -> Bool {
        let deadline = ContinuousClock.now + timeout
        switch senders[key] {
        case .flowd(let publisher)?:
            while publisher.outstanding > 0 {
                if isStopped { return false }
                guard ContinuousClock.now < deadline else {
                    throw BusToolError(
                        .notAcknowledged,
                        "flowd did not acknowledge within \(timeout) on "
                            + "\(FlowBusConfig.either(config.ingressEndpoints)): is it still running? Start it with "
                            + "`flowd --config \(configPath)` and play again"
                    )
                }
                _ = try publisher.waitForAcknowledgement(timeout: .milliseconds(100))
            }
        case .host(let view, _)?:
            while view.unacknowledgedCount > 0 {
                if isStopped { return false }
                guard ContinuousClock.now < deadline else {
                    let host = config.reactorHost(for: view.reactorID)?.name ?? "NAME"
                    throw BusToolError(
                        .notAcknowledged,
                        "the reactor host serving \(view.reactorID) did not acknowledge within \(timeout) on "
                            + "\(view.actionsEndpoint): is it running? Start it with "
                            + "`reactor-host --config \(configPath) --host \(host)` and play again"
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
    /// - Returns: false when a stop was requested first.
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
            if isStopped { return false }
            let left = ContinuousClock.now.duration(to: deadline)
            guard left > .zero else {
                var names = Set<String>()
                for case .host(let view, _) in senders.values {
                    names.insert(config.reactorHost(for: view.reactorID)?.name ?? "NAME")
                }
                let start = names.sorted().map { "`reactor-host --config \(configPath) --host \($0)`" }.joined(
                    separator: ", ")
                throw BusToolError(
                    .reactorStepMissing,
                    "flowd did not receive step \(MessageFormatter.step(missing.name, missing.params)) of stepper "
                        + "\(missing.stepperID) from a reactor host within \(timeout) (in the recording a reactor "
                        + "published it after the actions played so far): is each host fresh, or in the state it had "
                        + "when the recording started? Start it with \(start)"
                )
            }
            try drainEvents(waiting: min(left, .milliseconds(100)))
        }
    }
}

@available(*, unavailable, message: "a player owns its sockets: one thread")
extension BusPlayer: Sendable {}
