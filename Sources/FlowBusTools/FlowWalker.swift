import FlowBusClient
import FlowBusConfiguration
import FlowBusCoordinator
import FlowBusWire
import Flows
import Foundation
import ZeroMQ

/// Random walks over declared flows, against a real flowd: `count` messages drawn with `seed`
/// among those worth sending in the model's state (each bound stepper's steps, every step name
/// as a deep link, every action the config's `reactors.*.sampleActions` lists), sent in order to
/// a fresh flowd (and fresh reactor hosts when there are actions), each once the one before is
/// acknowledged.
///
/// The model follows flowd's input order: every step and deep link flowd re-publishes on
/// `events` — the walk's own and those a reactor publishes because of an action — is applied to
/// the engine, and the didNavigate events, navigation commands and diagnostics flowd publishes
/// after it must be the engine's, in order. After every message flowd's status (tree and
/// bindings) must be the model's and well formed (a visible tab bar shows one tab; no stepper is
/// bound to a screen that is in no tree). Reactors have no model: each must acknowledge every
/// action without refusing it, publish its states with no gap in their sequence, and answer a
/// late view's snapshot with a state it published live. Flows written in Swift (no
/// `coordinator:` in the config) are walked with the config's `sampleSteps` and held to the same
/// invariants, and with restarts to a flowd never restarted. A failure is shrunk by delta
/// debugging, each candidate replayed on a fresh topology, to a shortest sequence that still
/// fails, printed with the seed.
public struct FlowWalker: Sendable {
    public var config: FlowBusConfig
    /// The config file flowd runs (copied into each run's directory).
    public var configPath: String
    /// The flowd executable; reactor hosts are found beside it, else beside this tool, else in PATH.
    public var flowd: String
    public var timeout: Double
    /// At most this many replays while shrinking.
    public var maxReplays: Int
    /// Times flowd is stopped (SIGTERM) and started again during the walk, evenly spaced, on a
    /// journal (one in the run directory when the config has no `persistence:`): the restored
    /// flowd must go on publishing what the model does, and end with its tree.
    public var restarts: Int
    /// Restarts kill flowd (SIGKILL) instead of stopping it: what it acknowledged is in its journal.
    public var kill: Bool
    /// Also send what a renderer reports: `appeared` and `disappeared` for every presentable in
    /// the tree, `dismissed` for a pushed screen beyond a stack's first and for a presented one
    /// (a user swiping it away).
    public var renderer: Bool

    public init(
        config: FlowBusConfig, configPath: String, flowd: String, timeout: Double = 10, maxReplays: Int = 200,
        restarts: Int = 0, kill: Bool = false, renderer: Bool = false
    ) {
        self.config = config
        self.configPath = configPath
        self.flowd = flowd
        self.timeout = timeout
        self.maxReplays = maxReplays
        self.restarts = restarts
        self.kill = kill
        self.renderer = renderer
    }

    /// One message of a walk.
    public enum Message: Sendable, Hashable, CustomStringConvertible {
        /// A step from a stepper, or a deep link.
        case flow(FlowExplorer.Message)
        /// An action sent to a reactor.
        case action(reactorID: String, action: CanonicalStep)
        /// A renderer's report about a presentable.
        case report(presentableID: String, event: PresentableEvent)

        public var description: String {
            switch self {
            case .flow(let message): message.description
            case .action(let reactorID, let action): "action \(reactorID): \(action)"
            case .report(let presentableID, let event): "renderer: \(event.rawValue) \(presentableID)"
            }
        }
    }

    /// What a walk found.
    public struct Report: Sendable {
        /// Messages asked for; ``messages`` ends at the first failure, or when nothing was left
        /// to send.
        public var length: Int
        public var seed: UInt64
        /// The options that draw and run the walk again, besides `--walk` and `--seed`.
        public var options = ""
        /// Times flowd was stopped and started again during the walk.
        public var restarts = 0
        /// Restarts were SIGKILLs.
        public var killed = false
        public var messages: [Message] = []
        /// Events (didNavigate, navigation commands and diagnostics) compared.
        public var events = 0
        /// Steps reactors published because of the walk's actions, applied by the model as flowd did.
        public var reactorSteps = 0
        /// Reactor states checked for gaps.
        public var states = 0
        /// The flows are Swift code: flowd was held to invariants, and (with restarts) to a
        /// flowd never restarted, instead of a model.
        public var modelFree = false
        /// The first failure, if any.
        public var failure: String?
        /// The shortest sequence found that still fails, and how it fails.
        public var minimal: [Message]?
        public var minimalFailure: String?
        public var replays = 0
        public var seconds = 0.0

        public var text: String {
            let actions = messages.count { if case .action = $0 { true } else { false } }
            let reports = messages.count { if case .report = $0 { true } else { false } }
            let kinds = [(actions, "actions"), (reports, "renderer reports")].filter { $0.0 > 0 }.map {
                "\($0.0) \($0.1)"
            }
            let head =
                "walk of \(plural(length, "message"))"
                + (kinds.isEmpty ? "" : " (\(kinds.joined(separator: ", ")))") + ", seed \(seed)"
                + (restarts > 0
                    ? ", flowd \(killed ? "killed" : "stopped") and restarted \(plural(restarts, "time")) on its journal"
                    : "")
            guard let failure else {
                var text: String
                let ended = messages.count < length ? " (nothing was left to send after \(messages.count))" : ""
                if modelFree {
                    text = "\(head)\(ended): flowd applied every message (\(events) events published)"
                    if reactorSteps > 0 { text += " and \(reactorSteps) steps from reactors" }
                    text += "; its tree was well formed after every message"
                    if restarts > 0 {
                        text +=
                            ", restored as it was before each stop, and it published what a flowd never restarted does"
                    }
                } else {
                    text =
                        "\(head)\(ended): flowd published every didNavigate, navigation command and diagnostic the model did (\(events)), in order"
                    if reactorSteps > 0 { text += ", \(reactorSteps) steps from reactors included" }
                    text += "; its tree and bindings were the model's and well formed after every message"
                }
                if actions > 0 {
                    text += "; the reactors acknowledged every action and published \(states) states with no gap"
                }
                return text + " (" + String(format: "%.1f", seconds) + " s)"
            }
            var lines = ["\(head): \(failure)"]
            if let minimal, let minimalFailure {
                lines.append(
                    "shrunk to \(plural(minimal.count, "message")) in \(plural(replays, "replay")) "
                        + "(replay the walk with --walk \(length) --seed \(seed)\(options)):")
                lines += minimal.enumerated().map { "  \($0.offset + 1). \($0.element)" }
                lines.append("which fails as: \(minimalFailure)")
            }
            return lines.joined(separator: "\n")
        }
    }

    /// The options that draw and run this walk again, besides `--walk` and `--seed`.
    var replayOptions: String {
        (restarts > 0 ? " --restarts \(restarts)" : "") + (kill ? " --kill" : "") + (renderer ? " --renderer" : "")
            + (URL(fileURLWithPath: flowd).lastPathComponent == "flowd" ? "" : " --flowd \(flowd)")
    }

    /// The actions the config lists, by reactor id, with the host serving each.
    var sampleActions: [(host: String, message: Message)] {
        config.reactors.sorted { $0.key < $1.key }.flatMap { host, spec in
            (spec.sampleActions ?? [:]).sorted { $0.key < $1.key }.flatMap { reactorID, actions in
                actions.map { (host, Message.action(reactorID: reactorID, action: $0.step)) }
            }
        }
    }

    /// Draws the walk, runs it, and shrinks what fails.
    public func walk(count: Int, seed: UInt64) async throws -> Report {
        let started = ContinuousClock.now
        var report = Report(length: count, seed: seed, options: replayOptions)
        report.modelFree = !hasModel
        report.killed = kill
        let first = try await check(.drawn(count: count, seed: seed))
        report.messages = first.messages
        report.events = first.events
        report.restarts = first.restarts
        report.reactorSteps = first.reactorSteps
        report.states = first.states
        if let failure = first.failure {
            report.failure = failure.text
            // Messages after the one where it showed do not matter, unless flowd restarts: where it
            // restarts depends on how many messages there are.
            func trimmed(_ messages: [Message], _ failure: Failure) -> [Message] {
                restarts > 0 ? messages : Array(messages.prefix(failure.message + 1))
            }
            var current = trimmed(report.messages, failure)
            var last = failure
            var replays = 0
            func fails(_ candidate: [Message]) async throws -> Failure? {
                replays += 1
                return try await check(.fixed(candidate)).failure
            }
            var granularity = 2
            shrinking: while current.count > 1 && replays < maxReplays {
                let size = (current.count + granularity - 1) / granularity
                for start in stride(from: 0, to: current.count, by: size) {
                    guard replays < maxReplays else { break shrinking }
                    let complement = Array(current[..<start] + current[min(current.count, start + size)...])
                    if !complement.isEmpty, let failure = try await fails(complement) {
                        current = trimmed(complement, failure)
                        last = failure
                        granularity = max(granularity - 1, 2)
                        continue shrinking
                    }
                }
                guard granularity < current.count else { break }
                granularity = min(granularity * 2, current.count)
            }
            report.minimal = current
            report.minimalFailure = last.text
            report.replays = replays
        }
        let elapsed = ContinuousClock.now - started
        report.seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        return report
    }

    struct Failure: Error {
        /// The index of the message where it shows.
        var message: Int
        var text: String
    }

    /// Where a run's messages come from.
    enum Messages {
        /// Drawn one by one from what is worth sending in the model's state.
        case drawn(count: Int, seed: UInt64)
        /// As given (a candidate while shrinking).
        case fixed([Message])
    }

    struct Outcome {
        var messages: [Message] = []
        /// Times flowd was restarted.
        var restarts = 0
        var events = 0
        var reactorSteps = 0
        var states = 0
        var failure: Failure?
        /// Without a model: each input flowd applied, with the walk's message at the time and what
        /// flowd published after it.
        var recorded: [(message: Int, input: String, published: [String])] = []
    }

    /// Whether the config declares the flows, which are then the model; otherwise they are Swift
    /// code and a walk holds flowd to invariants, and to what a flowd never restarted publishes.
    var hasModel: Bool { config.coordinator != nil }

    /// Runs a walk; without a model and with restarts, runs its messages again on a flowd that is
    /// never restarted, which must publish the same after every input.
    func check(_ source: Messages) async throws -> Outcome {
        var outcome = try await run(source, restarts: restarts)
        guard !hasModel, restarts > 0, outcome.failure == nil else { return outcome }
        let reference = try await run(.fixed(outcome.messages), restarts: 0)
        if let failure = reference.failure {
            outcome.failure = Failure(
                message: failure.message, text: "on a flowd never restarted, \(failure.text)")
            return outcome
        }
        for (restarted, steady) in zip(outcome.recorded, reference.recorded)
        where restarted.input != steady.input || restarted.published != steady.published {
            outcome.failure = Failure(
                message: restarted.message,
                text: "at message \(restarted.message + 1) the flowd restarted on its journal published "
                    + (restarted.input == steady.input
                        ? "\(Self.list(restarted.published)) after \(restarted.input), one never restarted \(Self.list(steady.published))"
                        : "after \(restarted.input), one never restarted after \(steady.input) (the same messages, applied in another order)")
            )
            return outcome
        }
        if outcome.recorded.count != reference.recorded.count {
            outcome.failure = Failure(
                message: outcome.messages.count - 1,
                text:
                    "the flowd restarted on its journal applied \(plural(outcome.recorded.count, "message")), one never restarted \(reference.recorded.count)"
            )
        }
        return outcome
    }

    private static func list(_ published: [String]) -> String {
        published.isEmpty ? "nothing" : published.joined(separator: ", ")
    }

    /// How long the walk waits for steps a reactor publishes because of an action before it draws
    /// the next message: a seed draws the same walk when the reactors' steps come sooner.
    static let actionSettle = Duration.milliseconds(10)

    /// Runs one walk on a fresh topology and checks it as it goes; stops at the first failure.
    /// `name` labels what fails before the walk can start (`walk`, `plan 3`).
    func run(_ source: Messages, restarts: Int, name: String = "walk") async throws -> Outcome {
        var outcome = Outcome()
        let model = hasModel ? try await ModelRun(config: config) : nil
        let actions = sampleActions
        let hostOf = Dictionary(actions.map { ($0.message, $0.host) }) { first, _ in first }
        let hosts: [String] =
            switch source {
            case .drawn: Array(Set(actions.map(\.host))).sorted()
            case .fixed(let list): Array(Set(list.compactMap { hostOf[$0] })).sorted()
            }
        let topology = try FreshFlowd(
            configPath: configPath, flowd: flowd, timeout: timeout, name: name, journaled: restarts > 0, hosts: hosts)
        defer { topology.stop() }
        let config = topology.config
        let wait = Duration.milliseconds(Int(timeout * 1000))
        let heartbeat = Duration.milliseconds(config.heartbeatMilliseconds)
        let events = try BusSubscriber(
            endpoints: config.eventsEndpoints, topics: ["step/", "deeplink/", "nav/did/", "cmd/", "diag/"],
            includeHeartbeats: true, curve: config.curve)
        guard try events.waitUntilConnected(timeout: wait) else {
            throw ClientError(
                .noAnswer, "walk: no heartbeat from the fresh flowd within \(timeout) s\(topology.output)")
        }
        var states: [String: BusSubscriber] = [:]
        for host in hosts {
            guard let spec = config.reactors[host] else { continue }
            let subscriber = try BusSubscriber(
                endpoint: spec.states, topics: ["state/"], curve: config.curve)
            guard try subscriber.waitUntilConnected(timeout: wait) else {
                throw ClientError(
                    .noAnswer, "walk: no heartbeat from reactor host \(host) within \(timeout) s\(topology.output)")
            }
            states[host] = subscriber
        }

        // The model's side: what it expects flowd to publish next, and the inputs it applied.
        var expected: [String] = []
        var expectedHead = 0
        var inputs: [String] = []
        var seen: Set<String> = []
        var heartbeatSource: String?
        var current = 0
        var ownSources: Set<String> = []
        var lastAction: ContinuousClock.Instant?
        func divergence(model: String, flowd: String) -> Failure {
            Failure(
                message: current,
                text:
                    "at message \(current + 1) (… \(inputs.suffix(3).joined(separator: " → "))) the model publishes \(model), flowd \(flowd)"
            )
        }
        /// Applies what flowd published to the model's side; throws the first difference.
        func handle(_ message: WireMessage) async throws {
            let input: FlowExplorer.Message
            switch message {
            case .heartbeat(let beat):
                heartbeatSource = beat.envelope.source
                return
            case .step(let step):
                input = .init(stepperID: step.stepperID, step: CanonicalStep(name: step.name, params: step.params))
            case .deepLink(let link):
                input = .init(stepperID: nil, step: CanonicalStep(name: link.name, params: link.params))
            case .navigation(let event) where event.phase == .did:
                return try compare(
                    "did \(event.flow.split(separator: "#").first ?? "").\(MessageFormatter.step(event.stepName, event.params))"
                )
            case .navigationCommand(let command):
                return try compare(
                    FlowWalker.command(
                        flow: String(command.flow.split(separator: "#").first ?? ""), verb: command.verb.rawValue,
                        target: command.target, container: command.container ?? "",
                        kind: command.presentableKind?.rawValue ?? ""))
            case .diagnostic(let diagnostic):
                return try compare("diagnostic \(diagnostic.reason.rawValue)")
            default:
                return
            }
            if expectedHead < expected.count { throw divergence(model: expected[expectedHead], flowd: "nothing more") }
            let envelope = message.envelope
            let own = ownSources.contains(envelope.source)
            if !own { outcome.reactorSteps += 1 }
            // A reactor's source id ends in a random instance tag; its stepper id names it.
            inputs.append(
                own ? input.description : "\(input) (from \(envelope.source.split(separator: "#").first ?? ""))")
            if let model {
                expected = await model.apply(input)
                expectedHead = 0
            } else {
                outcome.recorded.append((current, inputs[inputs.count - 1], []))
            }
            seen.insert("\(envelope.source)#\(envelope.sequence)")
        }
        func compare(_ got: String) throws {
            outcome.events += 1
            guard model != nil else {
                if outcome.recorded.isEmpty { outcome.recorded.append((current, "the first message", [])) }
                outcome.recorded[outcome.recorded.count - 1].published.append(got)
                return
            }
            guard expectedHead < expected.count else { throw divergence(model: "nothing more", flowd: got) }
            let want = expected[expectedHead]
            expectedHead += 1
            if want != got { throw divergence(model: want, flowd: got) }
        }
        /// Handles what arrives until `done` holds, or for `quiet` after the last message that
        /// was not a heartbeat; false when `deadline` passed first.
        @discardableResult
        func pump(
            until done: () -> Bool = { false }, quiet: Duration? = nil, deadline: ContinuousClock.Instant
        ) async throws -> Bool {
            var lastHeard = ContinuousClock.now
            while !done() {
                let now = ContinuousClock.now
                if let quiet, now - lastHeard >= quiet { return true }
                guard now < deadline else { return false }
                let limit = min(deadline, quiet.map { lastHeard + $0 } ?? deadline)
                guard let next = try events.next(timeout: now.duration(to: limit)) else { continue }
                guard case .message(let message) = next else { continue }
                if case .heartbeat = message {} else { lastHeard = ContinuousClock.now }
                try await handle(message)
            }
            return true
        }

        // One context for every status request: without a model there is one after each message.
        let statusContext = try Context(defaultLinger: 0)
        func fetchStatus() throws -> (tree: WireValue, bindings: WireValue) {
            let status = try StatusClient.fetch(
                endpoints: config.controlEndpoints, curve: config.curve, timeout: wait,
                params: ["sections": .list([.string("flows"), .string("bindings")])], context: statusContext)
            return (status["flows"] ?? .null, status["bindings"] ?? .null)
        }
        /// flowd's tree and bindings against the model's, or (no model) against flowd's own
        /// before it was restarted.
        var beforeRestart: (tree: WireValue, bindings: WireValue)?
        func compareTrees(_ when: String) async throws {
            let (flows, bound) = try fetchStatus()
            let expected: (tree: WireValue, bindings: WireValue)
            let (whose, who, flowd): (String, String, String)
            if let model {
                expected = await model.status()
                (whose, who, flowd) = ("the model's", "the model", "flowd")
            } else if let beforeRestart {
                expected = beforeRestart
                (whose, who, flowd) = ("the one it had before it stopped", "flowd before it stopped", "restored")
            } else {
                beforeRestart = (flows, bound)
                return
            }
            if flows != expected.tree {
                throw Failure(
                    message: current,
                    text:
                        "flowd's tree \(when) differs from \(whose): \(try WireJSON.string(expected.tree)), \(flowd) \(try WireJSON.string(flows))"
                )
            }
            guard bound != expected.bindings else { return }
            let (expectedOnly, flowdOnly) = Self.difference(expected.bindings, bound)
            throw Failure(
                message: current,
                text: "flowd's bindings \(when) differ from \(whose): "
                    + [
                        ("only \(who) has", expectedOnly),
                        ("only \(flowd == "flowd" ? "flowd" : "the restored flowd") has", flowdOnly),
                    ].filter { !$0.1.isEmpty }
                    .map { "\($0.0) \($0.1.joined(separator: ", "))" }.joined(separator: "; "))
        }

        // The reactors' side: each one's states, checked for gaps.
        var lastState: [String: (source: String, sequence: UInt64)] = [:]
        var history: [String: [UInt64: WireValue]] = [:]
        func takeStates(_ subscriber: BusSubscriber, until deadline: ContinuousClock.Instant? = nil) throws {
            while let next = try subscriber.next(
                timeout: deadline.map { max(.zero, ContinuousClock.now.duration(to: $0)) } ?? .zero)
            {
                guard case .message(.state(let state)) = next else {
                    if deadline != nil { return }
                    continue
                }
                outcome.states += 1
                let (source, sequence) = (state.envelope.source, state.envelope.sequence)
                if let last = lastState[state.reactorID] {
                    if last.source != source {
                        throw Failure(
                            message: current,
                            text:
                                "after message \(current + 1) reactor \(state.reactorID)'s host restarted (source \(last.source), then \(source))\(topology.output)"
                        )
                    }
                    if sequence != last.sequence + 1 {
                        throw Failure(
                            message: current,
                            text:
                                "after message \(current + 1) the states of reactor \(state.reactorID) go from sequence \(last.sequence) to \(sequence)"
                        )
                    }
                }
                lastState[state.reactorID] = (source, sequence)
                history[state.reactorID, default: [:]][sequence] = state.state
                if deadline != nil { return }
            }
        }

        /// Sends the messages and checks each; throws the first failure.
        func walk() async throws {
            var publishers: [String: StepPublisher] = [:]
            var views: [String: ReactorView] = [:]
            var random: SplitMix64?
            var count = 0
            var list: [Message] = []
            switch source {
            case .drawn(let drawn, let seed):
                random = SplitMix64(seed: seed)
                count = drawn
            case .fixed(let fixed):
                list = fixed
                count = fixed.count
            }
            let restartAfter = Set((1...max(1, restarts)).map { count * $0 / (restarts + 1) })
            // flowd's status after each message: what is checked, and without a model what is bound,
            // so what to draw.
            var status = try fetchStatus()
            for index in 0..<count {
                current = index
                let message: Message
                if var generator = random {
                    let steps =
                        if let model { await model.candidates() } else {
                            SampleCandidates(config: config).messages(bound: status.bindings)
                        }
                    let reports = renderer ? Self.reports(in: status.tree) : []
                    let choices = steps.map(Message.flow) + actions.map(\.message) + reports
                    guard !choices.isEmpty else {
                        if index == 0 {
                            throw Failure(
                                message: 0,
                                text:
                                    "nothing to send: no stepper is bound in a flow that sampleSteps lists, and there are no "
                                    + "sample steps or actions (is --flowd your coordinator?)")
                        }
                        break
                    }
                    message = choices[Int(generator.next() % UInt64(choices.count))]
                    random = generator
                } else {
                    message = list[index]
                }
                outcome.messages.append(message)
                switch message {
                case .flow(let flowMessage):
                    let sender = flowMessage.stepperID ?? "flowctl-walk"
                    let publisher = try publishers[sender] ?? StepPublisher(stepperID: sender, config: config)
                    publishers[sender] = publisher
                    ownSources.insert(publisher.sourceID)
                    let sequence =
                        flowMessage.stepperID == nil
                        ? try publisher.publishDeepLink(flowMessage.step.name, flowMessage.step.params)
                        : try publisher.publish(flowMessage.step.name, flowMessage.step.params)
                    // The next message leaves once this one is applied: one order, whatever the sender.
                    guard try publisher.waitForAcknowledgement(timeout: wait) else {
                        throw Failure(
                            message: index, text: "flowd did not acknowledge \(message)\(topology.output)")
                    }
                    let key = "\(publisher.sourceID)#\(sequence)"
                    let arrived = try await pump(
                        until: { seen.contains(key) }, deadline: ContinuousClock.now + wait)
                    guard arrived else {
                        throw Failure(
                            message: index,
                            text:
                                "flowd acknowledged \(message) but did not re-publish it on events within \(timeout) s")
                    }
                case .report(let presentableID, let event):
                    // Reports are not re-published, so the model takes this one when it is sent. A
                    // reactor's step still on its way could reach flowd first: after a recent action,
                    // wait until events are quiet again.
                    if let lastAction, ContinuousClock.now - lastAction < Self.actionSettle * 10 {
                        try await pump(quiet: Self.actionSettle, deadline: ContinuousClock.now + wait)
                    }
                    let publisher = try publishers["renderer"] ?? StepPublisher(stepperID: "renderer", config: config)
                    publishers["renderer"] = publisher
                    _ = try publisher.report(event, for: presentableID)
                    // flowd publishes what it causes after what it published before: its outputs go
                    // on the queue after those still expected.
                    inputs.append(message.description)
                    if let model {
                        expected = Array(expected[expectedHead...]) + (await model.report(event, for: presentableID))
                        expectedHead = 0
                    }
                    guard try publisher.waitForAcknowledgement(timeout: wait) else {
                        throw Failure(
                            message: index, text: "flowd did not acknowledge \(message)\(topology.output)")
                    }
                case .action(let reactorID, let action):
                    guard let host = hostOf[message], let spec = config.reactors[host] else { break }
                    let view =
                        try views[reactorID]
                        ?? ReactorView(
                            reactorID: reactorID, actionsEndpoints: spec.actionsEndpoints,
                            statesEndpoints: spec.statesEndpoints, curve: config.curve,
                            heartbeatMilliseconds: config.heartbeatMilliseconds)
                    views[reactorID] = view
                    let sequence = try view.send(action.name, action.params)
                    lastAction = ContinuousClock.now
                    guard try view.waitForAcknowledgement(timeout: wait) else {
                        throw Failure(
                            message: index,
                            text:
                                "reactor host \(host) did not acknowledge \(message) within \(timeout) s\(topology.output)"
                        )
                    }
                    if let refusal = view.refusal(for: sequence) {
                        throw Failure(
                            message: index,
                            text:
                                "reactor host \(host) refused \(message), which reactors.\(host).sampleActions lists: "
                                + "\(refusal.reason.rawValue): \(refusal.message)")
                    }
                    // Steps the reactor publishes because of it reach the model before the next draw.
                    try await pump(quiet: Self.actionSettle, deadline: ContinuousClock.now + wait)
                }
                for subscriber in states.values {
                    try takeStates(subscriber)
                }
                // flowd published what this message caused before acknowledging it: read it now, so
                // that a difference is named at the message that caused it.
                let drained = try await pump(
                    until: { expectedHead >= expected.count }, deadline: ContinuousClock.now + wait)
                if !drained {
                    throw divergence(model: expected[expectedHead], flowd: "nothing more")
                }
                // flowd's own tree and bindings after every message: well formed, and the model's.
                status = try fetchStatus()
                if let model, status != (await model.status()) {
                    // A reactor's step flowd applied before the walk read it: read on, then compare.
                    try await pump(quiet: heartbeat * 2, deadline: ContinuousClock.now + wait)
                    try await compareTrees("after message \(index + 1)")
                    status = try fetchStatus()
                }
                if let problem = Self.malformed(status.tree, bindings: status.bindings) {
                    throw Failure(message: index, text: "after message \(index + 1) (\(message)): \(problem)")
                }
                if restarts > 0, restartAfter.contains(index + 1), index + 1 < count {
                    // Whatever the reactors still publish reaches flowd before it stops.
                    try await pump(quiet: heartbeat * 4, deadline: ContinuousClock.now + wait)
                    beforeRestart = nil
                    try await compareTrees("before the restart after message \(index + 1)")
                    let before = heartbeatSource
                    do {
                        try topology.restart(kill: kill)
                    } catch {
                        throw Failure(
                            message: index, text: "flowd did not come back after message \(index + 1): \(error)")
                    }
                    outcome.restarts += 1
                    // Send on once the subscriber hears the new instance: nothing it publishes is missed.
                    let heard = try await pump(
                        until: { heartbeatSource != before && heartbeatSource != nil },
                        deadline: ContinuousClock.now + wait
                    )
                    guard heard else {
                        throw Failure(
                            message: index,
                            text: "no heartbeat from flowd restarted after message \(index + 1)\(topology.output)")
                    }
                    try await compareTrees("restored from its journal after message \(index + 1)")
                }
            }
            current = max(0, outcome.messages.count - 1)
            // Every message was applied before its ack; once nothing but heartbeats comes for two
            // intervals, all flowd published (and any step a reactor still sent) is here.
            try await pump(quiet: heartbeat * 2, deadline: ContinuousClock.now + wait)
            if expectedHead < expected.count {
                throw divergence(model: expected[expectedHead], flowd: "nothing more")
            }
            if model != nil { try await compareTrees("at the end") }
            // A view joining now gets, as its snapshot, a state the reactor published live.
            for (reactorID, view) in views.sorted(by: { $0.key < $1.key }) {
                let late = try ReactorView(
                    reactorID: reactorID, actionsEndpoints: view.actionsEndpoints,
                    statesEndpoints: view.statesEndpoints,
                    curve: config.curve, heartbeatMilliseconds: config.heartbeatMilliseconds)
                guard let snapshot = try late.next(timeout: wait) else {
                    throw Failure(
                        message: current,
                        text: "reactor \(reactorID) sent no snapshot to a late view within \(timeout) s")
                }
                let sequence = snapshot.envelope.sequence
                let host = config.reactorHost(for: reactorID)?.name
                let deadline = ContinuousClock.now + wait
                while history[reactorID]?[sequence] == nil, (lastState[reactorID]?.sequence ?? 0) < sequence,
                    ContinuousClock.now < deadline, let host, let subscriber = states[host]
                {
                    try takeStates(subscriber, until: deadline)
                }
                guard let live = history[reactorID]?[sequence] else {
                    guard let last = lastState[reactorID] else { continue }  // it never published a state
                    throw Failure(
                        message: current,
                        text: last.sequence > sequence
                            ? "reactor \(reactorID)'s snapshot has sequence \(sequence), but its live states went on to \(last.sequence) without it"
                            : "reactor \(reactorID)'s snapshot has sequence \(sequence), but its live states stopped at \(last.sequence)"
                    )
                }
                if live != snapshot.state {
                    throw Failure(
                        message: current,
                        text:
                            "reactor \(reactorID)'s snapshot (sequence \(sequence)) is \(try WireJSON.string(snapshot.state)), "
                            + "the state it published live with that sequence \(try WireJSON.string(live))")
                }
            }
        }
        do {
            try await walk()
        } catch let failure as Failure {
            outcome.failure = failure
        }
        return outcome
    }

    /// The bindings (status entries) only one of two lists has, described.
    static func difference(_ model: WireValue, _ flowd: WireValue) -> (modelOnly: [String], flowdOnly: [String]) {
        func entries(_ list: WireValue) -> [WireValue] { if case .list(let items) = list { items } else { [] } }
        func text(_ entry: WireValue) -> String {
            guard case .map(let map) = entry else { return "\(entry)" }
            let flags =
                ["allowStepWhenNotPresented", "allowStepWhenDismissed"].filter { map[$0] == .bool(true) }
                + (map["remote"] == .bool(false) ? ["the flow's own"] : [])
            return "stepper \(map["stepper"]?.stringValue ?? "?") bound to \(map["presentable"]?.stringValue ?? "?") "
                + "in \(map["flow"]?.stringValue ?? "?")" + (flags.isEmpty ? "" : " (\(flags.joined(separator: ", ")))")
        }
        let (a, b) = (entries(model), entries(flowd))
        return (a.filter { !b.contains($0) }.map(text), b.filter { !a.contains($0) }.map(text))
    }

    /// What a renderer may report about the presentables of a status tree.
    package static func reports(in flows: WireValue) -> [Message] {
        var shown: Set<String> = []
        var swipeable: Set<String> = []
        func visit(_ node: WireValue, swipeable canSwipe: Bool) {
            guard case .map(let map) = node, case .string(let id)? = map["id"] else { return }
            shown.insert(id)
            if canSwipe { swipeable.insert(id) }
            let children: [WireValue] = if case .list(let list)? = map["children"] { list } else { [] }
            let isStack = map["kind"] == .string("stack")
            for (index, child) in children.enumerated() { visit(child, swipeable: isStack && index > 0) }
            if let presented = map["presented"] { visit(presented, swipeable: true) }
        }
        if case .list(let list) = flows {
            for flow in list { if case .map(let map) = flow, let root = map["root"] { visit(root, swipeable: false) } }
        }
        return shown.sorted().flatMap { id in
            [PresentableEvent.appeared, .disappeared].map { Message.report(presentableID: id, event: $0) }
                + (swipeable.contains(id) ? [.report(presentableID: id, event: .dismissed)] : [])
        }
    }

    /// A navigation command as the walk compares it.
    static func command(flow: String, verb: String, target: String, container: String, kind: String) -> String {
        "command \(verb) \(target.isEmpty ? "-" : target)" + (container.isEmpty ? "" : " in \(container)")
            + (kind.isEmpty ? "" : " (\(kind))") + " of \(flow)"
    }

    /// What is wrong with a status tree, if anything: a visible tab bar that does not show
    /// exactly one tab (unless a renderer reported on it or its tabs), or a remote stepper bound to
    /// a presentable in no tree.
    package static func malformed(_ flows: WireValue, bindings: WireValue) -> String? {
        var present: Set<String> = []
        var problem: String?
        func visit(_ node: WireValue) {
            guard case .map(let map) = node else { return }
            if case .string(let id)? = map["id"] { present.insert(id) }
            let children: [WireValue] = if case .list(let list)? = map["children"] { list } else { [] }
            // Tabs a renderer reported on are its to show: only a tab bar the tree alone governs
            // must show one tab.
            let reported = ([node] + children).contains {
                if case .map(let map) = $0 { map["reported"] != nil } else { false }
            }
            if map["kind"] == .string("tabs"), map["visible"] == .bool(true), !reported {
                let shown = children.filter {
                    if case .map(let child) = $0 { child["visible"] == .bool(true) } else { false }
                }
                if shown.count != 1, problem == nil {
                    problem = "tab bar \(map["id"]?.stringValue ?? "?") is visible with \(shown.count) visible tabs"
                }
            }
            children.forEach(visit)
            if let presented = map["presented"] { visit(presented) }
        }
        if case .list(let list) = flows {
            for flow in list { if case .map(let map) = flow, let root = map["root"] { visit(root) } }
        }
        if let problem { return problem }
        guard case .list(let list) = bindings else { return nil }
        for binding in list {
            guard case .map(let map) = binding, map["remote"] == .bool(true),
                case .string(let presentable)? = map["presentable"], !present.contains(presentable)
            else { continue }
            return "stepper \(map["stepper"]?.stringValue ?? "?") is bound to \(presentable), which is in no tree"
        }
        return nil
    }
}

/// What a walk may send to flows written in Swift: each remote stepper bound in a flow that
/// `sampleSteps` lists sends each of its sample steps; every sample step goes as a deep link.
package struct SampleCandidates {
    let config: FlowBusConfig

    package init(config: FlowBusConfig) {
        self.config = config
    }

    /// The messages worth sending, given the `bindings` of flowd's status.
    package func messages(bound bindings: WireValue) -> [FlowExplorer.Message] {
        let samples = config.sampleSteps ?? [:]
        var messages: [FlowExplorer.Message] = []
        let entries: [WireParams] =
            if case .list(let list) = bindings {
                list.compactMap { if case .map(let map) = $0, map["remote"] == .bool(true) { map } else { nil } }
            } else { [] }
        // A stepper bound to several screens (the same screen pushed again) counts once.
        var senders: Set<[String]> = []
        for binding in entries {
            guard case .string(let stepper)? = binding["stepper"], case .string(let flow)? = binding["flow"] else {
                continue
            }
            senders.insert([stepper, String(flow.split(separator: "#").first ?? "")])
        }
        for sender in senders.sorted(by: { $0.lexicographicallyPrecedes($1) }) {
            messages += (samples[sender[1]] ?? []).map { .init(stepperID: sender[0], step: $0.step) }
        }
        var deepLinks: Set<FlowExplorer.Message> = []
        for (_, steps) in samples {
            deepLinks.formUnion(steps.map { .init(stepperID: nil, step: $0.step) })
        }
        return messages + deepLinks.sorted { $0.description < $1.description }
    }
}

/// The model side of a walk: one engine, applying messages in order.
@FlowActor
final class ModelRun {
    private let engine: FlowCoordinator
    private let log: EventLog
    private let candidatesOf: StepCandidates

    init(config: FlowBusConfig) async throws {
        let log = EventLog()
        guard let engine = await FlowCoordinator.started(config, DeclaredFlowCatalog(flows: config.flows), log: log)
        else {
            throw ClientError(.failed, "a walk needs coordinator: { flow, step } naming a declared flow")
        }
        self.engine = engine
        self.log = log
        candidatesOf = StepCandidates(config: config)
    }

    func candidates() -> [FlowExplorer.Message] {
        candidatesOf.messages(in: engine.snapshot())
    }

    /// What flowd publishes for `message`: its didNavigate events, navigation commands and
    /// diagnostics, in order.
    func apply(_ message: FlowExplorer.Message) async -> [String] {
        log.events = []
        _ = await engine.apply(message)
        return published()
    }

    /// What flowd publishes for a renderer's report.
    func report(_ event: PresentableEvent, for presentableID: String) -> [String] {
        log.events = []
        engine.report(RendererReport(event), for: presentableID)
        return published()
    }

    private func published() -> [String] {
        log.events.compactMap { event in
            switch event {
            case .didNavigate(let navigation):
                guard let step = navigation.step as? CanonicalStep else { return nil }
                return "did \(navigation.flow.name).\(MessageFormatter.step(step.name, step.params))"
            case .command(let command):
                return FlowWalker.command(
                    flow: command.flow?.name ?? "coordinator", verb: command.verb.rawValue, target: command.target,
                    container: command.wireContainer,
                    kind: command.kind.rawValue)
            case .diagnostic(let diagnostic):
                return "diagnostic \(diagnostic.reason.rawValue)"
            default:
                return nil
            }
        }
    }

    /// Its tree and bindings as flowd's status reply lists them.
    func status() -> (tree: WireValue, bindings: WireValue) {
        let snapshot = engine.snapshot()
        return (.list(snapshot.flows.map(\.statusEntry)), .list(snapshot.bindings.map(\.statusEntry)))
    }
}

/// `count` and the noun, in the plural unless one.
func plural(_ count: Int, _ noun: String) -> String {
    "\(count) \(noun)\(count == 1 ? "" : "s")"
}

/// A small seeded generator (SplitMix64): the same seed draws the same walk on every machine.
package struct SplitMix64 {
    private var state: UInt64

    package init(seed: UInt64) {
        state = seed
    }

    package mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
