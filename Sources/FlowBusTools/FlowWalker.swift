import FlowBusClient
import FlowBusConfiguration
import FlowBusCoordinator
import FlowBusWire
import Flows
import Foundation

/// Random walks over declared flows, against a real flowd: `count` messages drawn with `seed`
/// among those worth sending in the model's state (each bound stepper's steps, every step name
/// as a deep link), sent in order to a fresh flowd, each once the one before is acknowledged.
/// Every didNavigate and diagnostic flowd publishes must be the model's, in order; its tree at
/// the end must be the model's and well formed (a visible tab bar shows one tab; no stepper is
/// bound to a screen that is in no tree). A failure is shrunk by delta debugging, each candidate
/// replayed on a fresh flowd, to a shortest sequence that still fails, printed with the seed.
public struct FlowWalker: Sendable {
    public var config: FlowBusConfig
    /// The config file flowd runs (copied into each run's directory).
    public var configPath: String
    /// The flowd executable.
    public var flowd: String
    public var timeout: Double
    /// At most this many replays while shrinking.
    public var maxReplays: Int
    /// Times flowd is stopped (SIGTERM) and started again during the walk, evenly spaced, on a
    /// journal (one in the run directory when the config has no `persistence:`): the restored
    /// flowd must go on publishing what the model does, and end with its tree.
    public var restarts: Int

    public init(
        config: FlowBusConfig, configPath: String, flowd: String, timeout: Double = 10, maxReplays: Int = 200,
        restarts: Int = 0
    ) {
        self.config = config
        self.configPath = configPath
        self.flowd = flowd
        self.timeout = timeout
        self.maxReplays = maxReplays
        self.restarts = restarts
    }

    /// What a walk found.
    public struct Report: Sendable {
        public var seed: UInt64
        /// Times flowd was stopped and started again during the walk.
        public var restarts = 0
        public var messages: [FlowExplorer.Message] = []
        /// Events (didNavigate and diagnostics) compared.
        public var events = 0
        /// The first failure, if any.
        public var failure: String?
        /// The shortest sequence found that still fails, and how it fails.
        public var minimal: [FlowExplorer.Message]?
        public var minimalFailure: String?
        public var replays = 0
        public var seconds = 0.0

        public var text: String {
            let head =
                "walk of \(messages.count) messages, seed \(seed)"
                + (restarts > 0 ? ", flowd restarted \(restarts) times on its journal" : "")
            guard let failure else {
                return "\(head): flowd published every didNavigate and diagnostic the model did (\(events)), in order; "
                    + "the final tree is the model's and well formed ("
                    + String(format: "%.1f", seconds) + " s)"
            }
            var lines = ["\(head): \(failure)"]
            if let minimal, let minimalFailure {
                lines.append(
                    "shrunk to \(minimal.count) messages in \(replays) replays (replay the walk with --walk \(messages.count) --seed \(seed)):"
                )
                lines += minimal.enumerated().map { "  \($0.offset + 1). \($0.element)" }
                lines.append("which fails as: \(minimalFailure)")
            }
            return lines.joined(separator: "\n")
        }
    }

    /// Draws the walk, runs it, and shrinks what fails.
    public func walk(count: Int, seed: UInt64) async throws -> Report {
        let started = ContinuousClock.now
        var report = Report(seed: seed, restarts: restarts)
        let model = try await ModelRun(config: config)
        var random = SplitMix64(seed: seed)
        var expected: [[String]] = []
        for _ in 0..<count {
            let choices = await model.candidates()
            guard !choices.isEmpty else { break }
            let message = choices[Int(random.next() % UInt64(choices.count))]
            report.messages.append(message)
            expected.append(await model.apply(message))
        }
        report.events = expected.reduce(0) { $0 + $1.count }
        let tree = await model.tree()
        if let failure = try replay(report.messages, expected: expected, tree: tree) {
            report.failure = failure.text
            // Messages after the first that differs do not matter.
            var current = Array(report.messages.prefix(failure.message + 1))
            var last = failure
            var replays = 0
            func fails(_ candidate: [FlowExplorer.Message]) async throws -> Failure? {
                replays += 1
                let run = try await ModelRun(config: config)
                var expected: [[String]] = []
                for message in candidate { expected.append(await run.apply(message)) }
                return try replay(candidate, expected: expected, tree: await run.tree())
            }
            var granularity = 2
            shrinking: while current.count > 1 && replays < maxReplays {
                let size = (current.count + granularity - 1) / granularity
                for start in stride(from: 0, to: current.count, by: size) {
                    guard replays < maxReplays else { break shrinking }
                    let complement = Array(current[..<start] + current[min(current.count, start + size)...])
                    if !complement.isEmpty, let failure = try await fails(complement) {
                        current = complement
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

    struct Failure {
        /// The index of the message where it shows.
        var message: Int
        var text: String
    }

    /// Sends `messages` to a fresh flowd, in order, and compares what it publishes and its tree
    /// with `expected` and `tree`; the first difference, or nil.
    func replay(_ messages: [FlowExplorer.Message], expected: [[String]], tree: WireValue) throws -> Failure? {
        let flowd = try FreshFlowd(
            configPath: configPath, flowd: self.flowd, timeout: timeout, name: "walk", journaled: restarts > 0)
        defer { flowd.stop() }
        let config = flowd.config
        let wait = Duration.milliseconds(Int(timeout * 1000))
        let subscriber = try BusSubscriber(
            endpoints: config.eventsEndpoints, topics: ["nav/did/", "diag/"], includeHeartbeats: true,
            curve: config.curve)
        guard try subscriber.waitUntilConnected(timeout: wait) else {
            throw ClientError(.noAnswer, "walk: no heartbeat from the fresh flowd within \(timeout) s\(flowd.output)")
        }
        var received: [String] = []
        var heartbeats = 0
        var heartbeatSource: String?
        /// Takes what arrived; with `until`, waits up to it for each next message.
        func take(until deadline: ContinuousClock.Instant?) throws {
            while let next = try subscriber.next(
                timeout: deadline.map { ContinuousClock.now.duration(to: $0) } ?? .zero)
            {
                guard case .message(let message) = next else { continue }
                switch message {
                case .heartbeat:
                    heartbeats += 1
                    heartbeatSource = message.envelope.source
                case .navigation(let event) where event.phase == .did:
                    received.append(
                        "did \(event.flow.split(separator: "#").first ?? "").\(MessageFormatter.step(event.stepName, event.params))"
                    )
                case .diagnostic(let diagnostic): received.append("diagnostic \(diagnostic.reason.rawValue)")
                default: continue
                }
                if let deadline, heartbeats >= 2 || ContinuousClock.now >= deadline { return }
            }
        }
        let restartAfter = Set((1...max(1, restarts)).map { messages.count * $0 / (restarts + 1) })
        var publishers: [String: StepPublisher] = [:]
        for (index, message) in messages.enumerated() {
            let sender = message.stepperID ?? "flowctl-walk"
            let publisher = try publishers[sender] ?? StepPublisher(stepperID: sender, config: config)
            publishers[sender] = publisher
            _ =
                message.stepperID == nil
                ? try publisher.publishDeepLink(message.step.name, message.step.params)
                : try publisher.publish(message.step.name, message.step.params)
            // The next message leaves once this one is applied: one order, whatever the sender.
            guard try publisher.waitForAcknowledgement(timeout: wait) else {
                return Failure(message: messages.count - 1, text: "flowd did not acknowledge \(message)\(flowd.output)")
            }
            try take(until: nil)  // read as we go: what waits in the sockets is bounded (high-water marks)
            if restarts > 0, restartAfter.contains(index + 1), index + 1 < messages.count {
                let before = heartbeatSource
                try flowd.restart()
                // Send on once the subscriber hears the new instance: nothing it publishes is missed.
                let deadline = ContinuousClock.now + wait
                while heartbeatSource == before || heartbeatSource == nil {
                    heartbeats = 0
                    try take(until: min(deadline, ContinuousClock.now + .milliseconds(200)))
                    guard ContinuousClock.now < deadline else {
                        return Failure(
                            message: index,
                            text: "no heartbeat from flowd restarted after message \(index + 1)\(flowd.output)")
                    }
                }
            }
        }
        // Everything was applied before its ack; two heartbeats later all it published is here.
        heartbeats = 0
        try take(until: ContinuousClock.now + wait)
        let flat = expected.flatMap { $0 }
        let firstDifference =
            zip(flat, received).enumerated().first(where: { $0.element.0 != $0.element.1 })?.offset
            ?? (flat.count != received.count ? min(flat.count, received.count) : nil)
        if let index = firstDifference {
            var message = 0
            var seen = 0
            while message < expected.count - 1 && seen + expected[message].count <= index {
                seen += expected[message].count
                message += 1
            }
            let context = messages[...message].suffix(3).map(\.description).joined(separator: " → ")
            return Failure(
                message: message,
                text: "at message \(message + 1) (… \(context)) the model publishes "
                    + (index < flat.count ? flat[index] : "nothing more") + ", flowd "
                    + (index < received.count ? received[index] : "nothing more"))
        }
        let status = try StatusClient.fetch(endpoints: config.controlEndpoints, curve: config.curve, timeout: wait)
        let flows = status["flows"] ?? .null
        if flows != tree {
            return Failure(
                message: messages.count - 1,
                text: "the final tree differs: model \(try WireJSON.string(tree)), flowd \(try WireJSON.string(flows))")
        }
        if let problem = Self.malformed(flows, bindings: status["bindings"] ?? .null) {
            return Failure(message: messages.count - 1, text: problem)
        }
        return nil
    }

    /// What is wrong with a status tree, if anything: a visible tab bar that does not show
    /// exactly one tab, or a remote stepper bound to a presentable in no tree.
    package static func malformed(_ flows: WireValue, bindings: WireValue) -> String? {
        var present: Set<String> = []
        var problem: String?
        func visit(_ node: WireValue) {
            guard case .map(let map) = node else { return }
            if case .string(let id)? = map["id"] { present.insert(id) }
            let children: [WireValue] = if case .list(let list)? = map["children"] { list } else { [] }
            if map["kind"] == .string("tabs"), map["visible"] == .bool(true) {
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

    /// What flowd publishes for `message`: its didNavigate events and diagnostics, in order.
    func apply(_ message: FlowExplorer.Message) async -> [String] {
        log.events = []
        _ = await engine.apply(message)
        return log.events.compactMap { event in
            switch event {
            case .didNavigate(let navigation):
                guard let step = navigation.step as? CanonicalStep else { return nil }
                return "did \(navigation.flow.name).\(MessageFormatter.step(step.name, step.params))"
            case .diagnostic(let diagnostic):
                return "diagnostic \(diagnostic.reason.rawValue)"
            default:
                return nil
            }
        }
    }

    func tree() -> WireValue {
        .list(engine.snapshot().flows.map(\.statusEntry))
    }
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
