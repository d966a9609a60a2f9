import FlowBusClient
import FlowBusWire
import Foundation
import Yams

/// A FlowBus topology: where the coordinator listens, which flows it runs, and their limits.
///
/// Loaded from one YAML file (``load(path:environment:expandingLaunch:)``); `${VAR}` and `${VAR:-default}` in it
/// are replaced from the environment, so one file serves a temporary demo directory and a
/// system path alike.
public struct FlowBusConfig: Codable, Sendable, Hashable {
    /// The endpoints of this flowd instance: the one it binds (``selectInstance(_:)``), or, for
    /// a client, the first of ``flowdInstances``.
    public var endpoints: Endpoints {
        get { flowdInstances[selectedInstance] }
        set { flowdInstances[selectedInstance] = newValue }
    }
    /// Every flowd instance's endpoints, in the order the file lists them. One, or several
    /// sharing a PostgreSQL journal (`endpoints:` as a list): one of them is active, the others
    /// stand by, and clients connect to all of them to follow the active one.
    public private(set) var flowdInstances: [Endpoints]
    /// The index in ``flowdInstances`` of ``endpoints``.
    private var selectedInstance = 0
    /// Size and queue limits.
    public var limits: Limits
    /// Which flow the coordinator starts with, and its first step.
    public var coordinator: Coordinator?
    /// Flows declared in the file, by name.
    public var flows: [String: DeclaredFlowSpec]
    /// How often daemons publish a heartbeat (`hb/<source>`), in milliseconds.
    public var heartbeatMilliseconds: Int
    /// How many heartbeat intervals of silence mark a peer that sends heartbeats as dead.
    public var heartbeatLiveness: Int = 3
    /// Reactor hosts, by name: where each listens and which reactor ids it serves.
    public var reactors: [String: ReactorHostSpec]
    /// Steps a tool may send to flows written in Swift, by flow name: any stepper bound in the
    /// flow may send them, and each goes as a deep link too (`flowctl explore --walk`). Declared
    /// flows need none: their steps are in `flows:`.
    public var sampleSteps: [String: [SampleMessage]]?
    /// CURVE settings, as written in the file.
    public var security: SecurityConfig?
    /// The keys `security` names, loaded when the file is (relative to its directory).
    public var curve = CurveKeys()
    /// Where the coordinator journals what it applies, so a restart loses nothing acknowledged;
    /// nil: nothing is persisted. See `docs/RELIABILITY.md`.
    public var persistence: Persistence?
    /// The processes `flowctl launch FILE` starts, in the order written; nil: no `launch:` section.
    /// Nothing else reads it. See ``LaunchSpec``.
    public var launch: [LaunchSpec]?
    /// How the daemons encode what they publish.
    public var wire = Wire()
    /// How the daemons write their logs when their command line does not say (`--log-format`);
    /// nil: as text.
    public var logFormat: LogFormat?
    /// Where spans are exported, if anywhere (``TracingSpec``).
    public var tracing: TracingSpec?
    /// The events flowd keeps for subscribers that resume (``Replay``).
    public var replay = Replay()

    package enum CodingKeys: String, CodingKey {
        case endpoints, limits, coordinator, flows, heartbeatMilliseconds, reactors, security
        case persistence, heartbeatLiveness
        case launch, wire, logFormat, sampleSteps, tracing, replay
    }

    /// `wire: { publish: json | fbv }`: the content type of the values flowd and reactor hosts
    /// publish and reply with (params of navigation events, diagnostics' details, states and
    /// snapshots). JSON by default, so that any reader follows the bus without an FBV decoder;
    /// flowbench's codec rows show what it costs (about 0.05 µs per re-encoded didNavigate).
    public struct Wire: Codable, Sendable, Hashable {
        public var publish: ContentType = .json

        public init(publish: ContentType = .json) {
            self.publish = publish
        }

        package enum CodingKeys: String, CodingKey { case publish }

        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            guard let name = try container.decodeIfPresent(String.self, forKey: .publish) else { return }
            switch name {
            case "fbv": publish = .fbv
            case "json": publish = .json
            default:
                throw DecodingError.dataCorruptedError(
                    forKey: .publish, in: container,
                    debugDescription: "'\(name)' is not a content type to publish with: json or fbv")
            }
        }

        public func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(publish == .json ? "json" : "fbv", forKey: .publish)
        }
    }

    /// The endpoints of one instance of a reactor host (an entry of `reactors.<host>.instances`).
    public struct ReactorHostEndpoints: Codable, Sendable, Hashable {
        /// ROUTER where views send actions and snapshot requests (acks and snapshots come back).
        public var actions: String
        /// PUB where the host publishes every state with its sequence, and heartbeats.
        public var states: String
        /// A `tcp://` address for Prometheus (`GET /metrics`); nil: none.
        public var metrics: String?

        public init(actions: String, states: String, metrics: String? = nil) {
            self.actions = actions
            self.states = states
            self.metrics = metrics
        }
    }

    /// A reactor host process's endpoints and the reactor ids it serves.
    ///
    /// A host is one instance (`actions:`, `states:`), or several that share their states in
    /// PostgreSQL, one of them active (`instances: [{ actions, states }, …]` with
    /// `persistence.postgres`): only the active instance binds its endpoints; views connect to
    /// every instance and follow the active one (docs/DEPLOYMENT.md).
    public struct ReactorHostSpec: Codable, Sendable, Hashable {
        /// ROUTER where views send actions and snapshot requests (acks and snapshots come back):
        /// this instance's (the first, or the one ``selectInstance(_:host:)`` chose).
        public var actions: String { instances[selected].actions }
        /// PUB where the host publishes every state with its sequence, and heartbeats: this instance's.
        public var states: String { instances[selected].states }
        /// Reactor ids served, exactly (`counter`) or as a family with a trailing slash (`movie/`).
        public var serves: [String]
        /// Which reactors keep their state (and the host its de-duplication table) across
        /// restarts, and where; nil: nothing is persisted. See `docs/RELIABILITY.md`.
        public var persistence: ReactorPersistenceSpec?
        /// A `tcp://` address where this instance serves its metrics to Prometheus (`GET /metrics`);
        /// nil: none. See `docs/METRICS.md`.
        public var metrics: String? { instances[selected].metrics }
        /// Actions a tool may send to these reactors, by exact reactor id (`counter`, `movie/42`):
        /// `flowctl explore --walk` draws from them. A reactor's actions are Swift types, so the
        /// config is the only place a tool learns them.
        public var sampleActions: [String: [SampleMessage]]?
        /// Every instance of the host, in the order of `instances:` (one when the host has
        /// `actions:` and `states:`).
        public private(set) var instances: [ReactorHostEndpoints]
        /// Which of ``instances`` this process is (``selectInstance(_:host:)``).
        private var selected = 0
        /// Whether the file listed `instances:` (kept so that the config encodes as it was written).
        private var listsInstances: Bool

        public init(
            actions: String, states: String, serves: [String], persistence: ReactorPersistenceSpec? = nil,
            metrics: String? = nil, sampleActions: [String: [SampleMessage]]? = nil
        ) {
            self.serves = serves
            self.persistence = persistence
            self.sampleActions = sampleActions
            instances = [ReactorHostEndpoints(actions: actions, states: states, metrics: metrics)]
            listsInstances = false
        }

        /// A host of several instances (at least one), the first one selected.
        public init(
            instances: [ReactorHostEndpoints], serves: [String], persistence: ReactorPersistenceSpec? = nil,
            sampleActions: [String: [SampleMessage]]? = nil
        ) {
            precondition(!instances.isEmpty, "a reactor host has at least one instance")
            self.init(
                actions: instances[0].actions, states: instances[0].states, serves: serves, persistence: persistence,
                metrics: instances[0].metrics, sampleActions: sampleActions)
            self.instances = instances
            listsInstances = true
        }

        private enum CodingKeys: String, CodingKey {
            case actions, states, serves, persistence, metrics, sampleActions, instances
        }

        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            let serves = try container.decode([String].self, forKey: .serves)
            let persistence = try container.decodeIfPresent(ReactorPersistenceSpec.self, forKey: .persistence)
            let sampleActions = try container.decodeIfPresent([String: [SampleMessage]].self, forKey: .sampleActions)
            if let instances = try container.decodeIfPresent([ReactorHostEndpoints].self, forKey: .instances) {
                guard !instances.isEmpty else {
                    throw DecodingError.dataCorruptedError(
                        forKey: .instances, in: container, debugDescription: "lists no instance: list one or more")
                }
                for key in [CodingKeys.actions, .states, .metrics] where container.contains(key) {
                    throw DecodingError.dataCorruptedError(
                        forKey: key, in: container,
                        debugDescription:
                            "a host with instances: has its \(key.stringValue) in each instance; remove it here")
                }
                self.init(instances: instances, serves: serves, persistence: persistence, sampleActions: sampleActions)
            } else {
                self.init(
                    actions: try container.decode(String.self, forKey: .actions),
                    states: try container.decode(String.self, forKey: .states), serves: serves,
                    persistence: persistence, metrics: try container.decodeIfPresent(String.self, forKey: .metrics),
                    sampleActions: sampleActions)
            }
        }

        public func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            if listsInstances {
                try container.encode(instances, forKey: .instances)
            } else {
                try container.encode(actions, forKey: .actions)
                try container.encode(states, forKey: .states)
                try container.encodeIfPresent(metrics, forKey: .metrics)
            }
            try container.encode(serves, forKey: .serves)
            try container.encodeIfPresent(persistence, forKey: .persistence)
            try container.encodeIfPresent(sampleActions, forKey: .sampleActions)
        }

        /// Every instance's `actions`: a view's DEALER connects to all of them.
        public var actionsEndpoints: [String] { instances.map(\.actions) }
        /// Every instance's `states`: a view subscribes to all of them (only the active one publishes).
        public var statesEndpoints: [String] { instances.map(\.states) }

        /// Makes instance `number` (from 1, in the order of `instances:`) the one whose endpoints
        /// ``actions``, ``states`` and ``metrics`` hold: what `reactor-host --instance N` binds.
        public mutating func selectInstance(_ number: Int, host: String) throws(ConfigError) {
            guard (1...instances.count).contains(number) else {
                throw ConfigError(
                    .unknownName,
                    "reactor host \(host) has \(instances.count == 1 ? "one instance" : "instances 1 to \(instances.count)"), not \(number)"
                )
            }
            selected = number - 1
        }

        /// Whether this host serves `reactorID`.
        public func serves(_ reactorID: String) -> Bool {
            serves.contains { $0.hasSuffix("/") ? reactorID.hasPrefix($0) : reactorID == $0 }
        }
    }

    /// One step under `sampleSteps` or action under `sampleActions`: its name alone (`increase`),
    /// or a map of the name to its params (`{ submit: { apiKey: demo } }`), as the canonical form
    /// of a Swift enum case.
    public struct SampleMessage: Codable, Sendable, Hashable {
        public var step: CanonicalStep

        public init(name: String, params: WireParams = [:]) {
            step = CanonicalStep(name: name, params: params)
        }

        public init(from decoder: any Decoder) throws {
            if let name = try? decoder.singleValueContainer().decode(String.self) {
                self.init(name: name)
                return
            }
            let map = try decoder.singleValueContainer().decode([String: WireParams].self)
            guard map.count == 1, let (name, params) = map.first else {
                throw DecodingError.dataCorrupted(
                    .init(
                        codingPath: decoder.codingPath,
                        debugDescription:
                            "a sample step or action is its name (increase) or one name with its params ({ submit: { apiKey: demo } }), not \(map.count) names"
                    ))
            }
            self.init(name: name, params: params)
        }

        public func encode(to encoder: any Encoder) throws {
            var container = encoder.singleValueContainer()
            if step.params.isEmpty {
                try container.encode(step.name)
            } else {
                try container.encode([step.name: step.params])
            }
        }
    }

    /// The host serving `reactorID`, with its name.
    public func reactorHost(for reactorID: String) -> (name: String, spec: ReactorHostSpec)? {
        reactors.sorted { $0.key < $1.key }.first { $0.value.serves(reactorID) }.map { ($0.key, $0.value) }
    }

    public struct Endpoints: Codable, Sendable, Hashable {
        /// ROUTER where steppers and tools send steps, deep links and renderer reports.
        public var ingress: String
        /// PUB where the coordinator publishes steps, navigation events, commands and diagnostics.
        public var events: String
        /// ROUTER answering status requests.
        public var control: String
        /// A `tcp://` address where flowd serves its metrics to Prometheus (`GET /metrics`);
        /// nil: none. See `docs/METRICS.md`.
        public var metrics: String?

        public init(ingress: String, events: String, control: String, metrics: String? = nil) {
            self.ingress = ingress
            self.events = events
            self.control = control
            self.metrics = metrics
        }
    }

    public struct Limits: Codable, Sendable, Hashable {
        /// Largest frame accepted from a peer; bigger ones are refused by libzmq before allocation.
        public var maxMessageBytes: Int
        /// Messages queued per peer for sending before a counted drop (events, states) or a wait
        /// (replies).
        public var highWaterMark: Int
        /// Messages a ROUTER (ingress, actions, control) queues per peer before the peer's sends
        /// wait: a short queue keeps a daemon's memory bounded when a sender outruns it, while the
        /// sender's own queue and outbox hold the rest.
        public var receiveHighWaterMark: Int
        /// Sources (sender process instances) a daemon holds in memory; beyond it the least
        /// recently heard are forgotten (their ledger entries stay in a journal or state database).
        public var maxSources: Int
        /// Seconds of silence after which a source is forgotten.
        public var sourceIdleSeconds: Int
        /// Control requests (status) per second one peer may send, sustained; beyond it and its
        /// burst, requests are refused as `rate-limited` or dropped.
        public var controlRate: Double
        /// Control requests one peer may send at once.
        public var controlBurst: Int

        public init(
            maxMessageBytes: Int = 1 << 20, highWaterMark: Int = 100_000, receiveHighWaterMark: Int = 1000,
            maxSources: Int = 100_000, sourceIdleSeconds: Int = 3600, controlRate: Double = 100,
            controlBurst: Int = 200
        ) {
            self.maxMessageBytes = maxMessageBytes
            self.highWaterMark = highWaterMark
            self.receiveHighWaterMark = receiveHighWaterMark
            self.maxSources = maxSources
            self.sourceIdleSeconds = sourceIdleSeconds
            self.controlRate = controlRate
            self.controlBurst = controlBurst
        }

        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            let defaults = Limits()
            maxMessageBytes =
                try container.decodeIfPresent(Int.self, forKey: .maxMessageBytes) ?? defaults.maxMessageBytes
            highWaterMark = try container.decodeIfPresent(Int.self, forKey: .highWaterMark) ?? defaults.highWaterMark
            receiveHighWaterMark =
                try container.decodeIfPresent(Int.self, forKey: .receiveHighWaterMark) ?? defaults.receiveHighWaterMark
            maxSources = try container.decodeIfPresent(Int.self, forKey: .maxSources) ?? defaults.maxSources
            sourceIdleSeconds =
                try container.decodeIfPresent(Int.self, forKey: .sourceIdleSeconds) ?? defaults.sourceIdleSeconds
            controlRate = try container.decodeIfPresent(Double.self, forKey: .controlRate) ?? defaults.controlRate
            controlBurst = try container.decodeIfPresent(Int.self, forKey: .controlBurst) ?? defaults.controlBurst
        }
    }

    public struct Coordinator: Codable, Sendable, Hashable {
        /// The root flow's name, a key of `flows`.
        public var flow: String
        /// The step the root flow starts with.
        public var step: String

        public init(flow: String, step: String) {
            self.flow = flow
            self.step = step
        }
    }

    public init(
        endpoints: Endpoints, limits: Limits = Limits(), coordinator: Coordinator? = nil,
        flows: [String: DeclaredFlowSpec] = [:],
        heartbeatMilliseconds: Int = 1000, reactors: [String: ReactorHostSpec] = [:]
    ) {
        flowdInstances = [endpoints]
        self.limits = limits
        self.coordinator = coordinator
        self.flows = flows
        self.heartbeatMilliseconds = heartbeatMilliseconds
        self.reactors = reactors
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        let listed: [Endpoints]?
        do {
            listed = try container.decode([Endpoints].self, forKey: .endpoints)
        } catch DecodingError.typeMismatch(_, let context) where context.codingPath.count <= 1 {
            // Not a list: one instance's map. An error inside a listed instance is reported as is.
            listed = nil
        }
        if let listed {
            guard !listed.isEmpty else {
                throw DecodingError.dataCorruptedError(
                    forKey: .endpoints, in: container,
                    debugDescription: "lists no flowd instance: give one map of endpoints, or one per instance")
            }
            flowdInstances = listed
        } else {
            flowdInstances = [try container.decode(Endpoints.self, forKey: .endpoints)]
        }
        limits = try container.decodeIfPresent(Limits.self, forKey: .limits) ?? Limits()
        coordinator = try container.decodeIfPresent(Coordinator.self, forKey: .coordinator)
        flows = try container.decodeIfPresent([String: DeclaredFlowSpec].self, forKey: .flows) ?? [:]
        heartbeatMilliseconds = try container.decodeIfPresent(Int.self, forKey: .heartbeatMilliseconds) ?? 1000
        heartbeatLiveness = try container.decodeIfPresent(Int.self, forKey: .heartbeatLiveness) ?? 3
        reactors = try container.decodeIfPresent([String: ReactorHostSpec].self, forKey: .reactors) ?? [:]
        security = try container.decodeIfPresent(SecurityConfig.self, forKey: .security)
        persistence = try container.decodeIfPresent(Persistence.self, forKey: .persistence)
        launch = try container.decodeIfPresent([LaunchSpec].self, forKey: .launch)
        wire = try container.decodeIfPresent(Wire.self, forKey: .wire) ?? Wire()
        logFormat = try container.decodeIfPresent(LogFormat.self, forKey: .logFormat)
        sampleSteps = try container.decodeIfPresent([String: [SampleMessage]].self, forKey: .sampleSteps)
        tracing = try container.decodeIfPresent(TracingSpec.self, forKey: .tracing)
        replay = try container.decodeIfPresent(Replay.self, forKey: .replay) ?? Replay()
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        if flowdInstances.count > 1 {
            try container.encode(flowdInstances, forKey: .endpoints)
        } else {
            try container.encode(endpoints, forKey: .endpoints)
        }
        try container.encode(limits, forKey: .limits)
        try container.encodeIfPresent(coordinator, forKey: .coordinator)
        try container.encode(flows, forKey: .flows)
        try container.encode(heartbeatMilliseconds, forKey: .heartbeatMilliseconds)
        try container.encode(heartbeatLiveness, forKey: .heartbeatLiveness)
        try container.encode(reactors, forKey: .reactors)
        try container.encodeIfPresent(security, forKey: .security)
        try container.encodeIfPresent(persistence, forKey: .persistence)
        try container.encodeIfPresent(launch, forKey: .launch)
        try container.encode(wire, forKey: .wire)
        try container.encodeIfPresent(logFormat, forKey: .logFormat)
        try container.encodeIfPresent(sampleSteps, forKey: .sampleSteps)
        try container.encodeIfPresent(tracing, forKey: .tracing)
        try container.encode(replay, forKey: .replay)
    }

    // MARK: flowd instances

    /// Every instance's ingress: a client's DEALER connects to all of them.
    public var ingressEndpoints: [String] { flowdInstances.map(\.ingress) }
    /// Every instance's events: a subscriber connects to all of them (only the active one publishes).
    public var eventsEndpoints: [String] { flowdInstances.map(\.events) }
    /// Every instance's control endpoint.
    public var controlEndpoints: [String] { flowdInstances.map(\.control) }

    /// Makes instance `number` of reactor host `host` (from 1; nil when it has one) the one its
    /// spec's ``ReactorHostSpec/actions`` and ``ReactorHostSpec/states`` hold: what
    /// `reactor-host --host H --instance N` binds.
    public mutating func selectReactorInstance(_ number: Int?, of host: String) throws(ConfigError) {
        guard var spec = reactors[host] else { return }
        if let number {
            try spec.selectInstance(number, host: host)
            reactors[host] = spec
        } else if spec.instances.count > 1 {
            throw ConfigError(
                .invalid,
                "reactors.\(host) lists \(spec.instances.count) instances: say which this one is with --instance 1…\(spec.instances.count)"
            )
        }
    }

    /// Makes instance `number` (from 1, in the order of `endpoints:`) the one whose endpoints
    /// ``endpoints`` holds: what `flowd --instance N` binds.
    public mutating func selectInstance(_ number: Int) throws(ConfigError) {
        guard (1...flowdInstances.count).contains(number) else {
            let range = flowdInstances.count == 1 ? "1 (endpoints: is a single map)" : "1 to \(flowdInstances.count)"
            throw ConfigError(
                .unknownName,
                "--instance \(number): endpoints lists \(flowdInstances.count) flowd instance(s): give \(range)")
        }
        selectedInstance = number - 1
    }

    /// `endpoints` in words for a message: one, or "a, or b" when several instances may answer.
    public static func either(_ endpoints: [String]) -> String {
        describeEither(endpoints)
    }
}

/// Why a configuration could not be used, with what to do about it.
public struct ConfigError: Error, CustomStringConvertible, Sendable, Hashable {
    /// What is wrong, so that a caller can match it; new codes do not break callers.
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        private enum Value: String {
            case missingFile = "missing-file"
            case unreadable
            case syntax
            case unknownKey = "unknown-key"
            case unsetVariable = "unset-variable"
            case invalid
            case unknownName = "unknown-name"
            case endpointInUse = "endpoint-in-use"
        }

        private let value: Value

        private init(_ value: Value) {
            self.value = value
        }

        /// The config file does not exist.
        public static let missingFile = Code(.missingFile)
        /// A file the config needs (itself, a key, a database) cannot be read or opened.
        public static let unreadable = Code(.unreadable)
        /// The file is not YAML, or a value has the wrong type.
        public static let syntax = Code(.syntax)
        /// A key the config does not know (a typo, or a setting of another version).
        public static let unknownKey = Code(.unknownKey)
        /// `${NAME}` names an environment variable that is not set and has no default.
        public static let unsetVariable = Code(.unsetVariable)
        /// A value is out of range, or values contradict each other.
        public static let invalid = Code(.invalid)
        /// A name given on the command line (a host, an instance, a launch entry) is not in the config.
        public static let unknownName = Code(.unknownName)
        /// An endpoint to bind is already served by another process.
        public static let endpointInUse = Code(.endpointInUse)

        public var description: String { value.rawValue }
    }

    /// What is wrong, to match.
    public var code: Code
    /// What is wrong and how to fix it, in words.
    public var description: String

    public init(_ code: Code, _ description: String) {
        self.code = code
        self.description = description
    }
}

extension FlowBusConfig {
    /// The environment variable naming the config file when no `--config` is given.
    public static let pathVariable = "FLOWBUS_CONFIG"
    /// The file used when neither `--config` nor ``pathVariable`` names one.
    public static let defaultPath = "config/flowbus.yaml"

    /// The config path to use: the explicit one, else ``pathVariable``, else ``defaultPath``.
    public static func resolvePath(
        _ explicit: String?, environment: [String: String] = ProcessInfo.processInfo.environment
    ) -> String {
        explicit ?? environment[pathVariable] ?? defaultPath
    }

    /// Reads, expands and validates the config at `path`. `${…}` in the `launch:` section is
    /// expanded only with `expandingLaunch` (by `flowctl launch`, which sets what it names), so
    /// every other tool reads the same file without those variables.
    public static func load(
        path: String, environment: [String: String] = ProcessInfo.processInfo.environment, expandingLaunch: Bool = false
    ) throws(ConfigError) -> FlowBusConfig {
        guard FileManager.default.fileExists(atPath: path) else {
            throw ConfigError(
                .missingFile,
                "config file \(path) does not exist: pass --config FILE or set \(pathVariable) (the demo's is config/demo.yaml)"
            )
        }
        let text: String
        do {
            text = try String(contentsOfFile: path, encoding: .utf8)
        } catch {
            throw ConfigError(.unreadable, "cannot read config file \(path): \(error.localizedDescription)")
        }
        return try parse(yaml: text, source: path, environment: environment, expandingLaunch: expandingLaunch)
    }

    /// Parses YAML text (after `${VAR}` expansion; in `launch:` only with `expandingLaunch`) and validates it.
    public static func parse(
        yaml: String, source: String = "config", environment: [String: String] = ProcessInfo.processInfo.environment,
        expandingLaunch: Bool = false
    ) throws(ConfigError) -> FlowBusConfig {
        var expanded = ""
        for (text, isLaunch) in topLevelSections(yaml, named: "launch") {
            expanded +=
                isLaunch && !expandingLaunch
                ? text : try expandVariables(text, environment: environment, source: source)
        }
        var config: FlowBusConfig
        do {
            config = try YAMLDecoder().decode(FlowBusConfig.self, from: expanded)
        } catch let error as DecodingError {
            throw ConfigError(.syntax, "\(source): \(describe(error))")
        } catch let error as YamlError {
            throw ConfigError(.syntax, "\(source): \(describe(error))")
        } catch {
            throw ConfigError(.syntax, "\(source): \(error)")
        }
        try config.validate(source: source)
        let unknown: [(path: String, suggestion: String?)]
        do {
            unknown = try UnknownKeys.find(in: expanded, understood: config)
        } catch {
            throw ConfigError(.syntax, "\(source): \(error)")
        }
        if !unknown.isEmpty {
            let list = unknown.map { key in key.suggestion.map { "\(key.path) (did you mean '\($0)'?)" } ?? key.path }
            let one = unknown.count == 1
            throw ConfigError(
                .unknownKey,
                "\(source): unknown key\(one ? "" : "s"): \(list.joined(separator: ", ")); remove or correct \(one ? "it" : "them")"
            )
        }
        config.persistence?.resolveJournal(relativeToConfigAt: source)
        let configDirectory =
            source.contains("/")
            ? (source as NSString).deletingLastPathComponent : FileManager.default.currentDirectoryPath
        for name in config.reactors.keys {
            config.reactors[name]?.persistence?.resolveDatabase(relativeTo: configDirectory)
        }
        if let security = config.security {
            let directory = configDirectory
            config.curve = try CurveKeys.load(security, relativeTo: directory)
        }
        return config
    }

    /// Checks references between sections, so a mistake is reported at load, not at the first step.
    public func validate(source: String = "config") throws(ConfigError) {
        try tracing?.validate(source: source)
        let reactorEndpoints = reactors.sorted { $0.key < $1.key }.flatMap { name, host in
            host.instances.enumerated().flatMap { index, instance in
                let prefix = host.instances.count > 1 ? "reactors.\(name).instances[\(index)]" : "reactors.\(name)"
                return [("\(prefix).actions", instance.actions), ("\(prefix).states", instance.states)]
            }
        }
        let several = flowdInstances.count > 1
        let instanceEndpoints = flowdInstances.enumerated().flatMap { index, instance in
            let prefix = several ? "endpoints[\(index)]" : "endpoints"
            return [
                ("\(prefix).ingress", instance.ingress), ("\(prefix).events", instance.events),
                ("\(prefix).control", instance.control),
            ]
        }
        for (name, endpoint) in instanceEndpoints + reactorEndpoints {
            guard endpoint.hasPrefix("ipc://") || endpoint.hasPrefix("tcp://") || endpoint.hasPrefix("inproc://") else {
                throw ConfigError(
                    .invalid, "\(source): \(name) '\(endpoint)' is not an ipc://, tcp:// or inproc:// endpoint")
            }
        }
        if several {
            guard persistence?.postgres != nil else {
                throw ConfigError(
                    .invalid,
                    "\(source): endpoints lists \(flowdInstances.count) flowd instances, which must share one journal to take over from each other: "
                        + "set persistence.postgres (see docs/DEPLOYMENT.md), or list one instance")
            }
            var seen: [String: String] = [:]
            for (name, endpoint) in instanceEndpoints {
                if let other = seen[endpoint] {
                    throw ConfigError(
                        .invalid,
                        "\(source): \(name) and \(other) are both '\(endpoint)': each instance needs its own endpoints "
                            + "(instances that take over the same endpoints on one machine are listed once)")
                }
                seen[endpoint] = name
            }
        }
        for (name, host) in reactors.sorted(by: { $0.key < $1.key }) where host.instances.count > 1 {
            guard host.persistence?.postgres != nil else {
                throw ConfigError(
                    .invalid,
                    "\(source): reactors.\(name) lists \(host.instances.count) instances, which must share their states to take over from each other: "
                        + "set reactors.\(name).persistence.postgres (see docs/DEPLOYMENT.md), or list one instance")
            }
        }
        var seenEndpoints: [String: String] = [:]
        for (name, endpoint) in instanceEndpoints + reactorEndpoints {
            if let other = seenEndpoints[endpoint] {
                throw ConfigError(
                    .invalid,
                    "\(source): \(name) and \(other) are both '\(endpoint)': every endpoint is bound by one socket")
            }
            seenEndpoints[endpoint] = name
        }
        let metricsEndpoints: [(String, String?)] =
            flowdInstances.enumerated().map { index, instance in
                (several ? "endpoints[\(index)].metrics" : "endpoints.metrics", instance.metrics)
            }
            + reactors.sorted { $0.key < $1.key }.flatMap { name, host in
                host.instances.enumerated().map { index, instance in
                    (
                        host.instances.count > 1
                            ? "reactors.\(name).instances[\(index)].metrics" : "reactors.\(name).metrics",
                        instance.metrics
                    )
                }
            }
        for case let (name, endpoint?) in metricsEndpoints where !endpoint.hasPrefix("tcp://") {
            throw ConfigError(
                .invalid,
                "\(source): \(name) '\(endpoint)' is not a tcp:// address (Prometheus scrapes over TCP, e.g. tcp://127.0.0.1:9464)"
            )
        }
        for flow in (sampleSteps ?? [:]).keys.sorted() where flows[flow] != nil {
            throw ConfigError(
                .invalid,
                "\(source): sampleSteps.\(flow) lists steps of a declared flow, whose steps flows.\(flow).steps declares already: remove it"
            )
        }
        for (name, host) in reactors.sorted(by: { $0.key < $1.key }) {
            for reactorID in (host.sampleActions ?? [:]).keys.sorted() {
                let path = "reactors.\(name).sampleActions.\(reactorID)"
                guard !reactorID.hasSuffix("/") else {
                    throw ConfigError(
                        .invalid,
                        "\(source): \(path) names the family \(reactorID), not a reactor: name members of it (e.g. \(reactorID)42)"
                    )
                }
                guard host.serves(reactorID) else {
                    throw ConfigError(
                        .invalid,
                        "\(source): \(path): host \(name) does not serve \(reactorID) (serves: \(host.serves.joined(separator: ", "))): "
                            + "add it to reactors.\(name).serves, or move its actions to the host that serves it")
                }
            }
        }
        guard limits.maxSources >= 1, limits.sourceIdleSeconds >= 1 else {
            throw ConfigError(.invalid, "\(source): limits.maxSources and limits.sourceIdleSeconds must be at least 1")
        }
        guard limits.receiveHighWaterMark >= 1 else {
            throw ConfigError(
                .invalid,
                "\(source): limits.receiveHighWaterMark is \(limits.receiveHighWaterMark): at least 1 expected (default 1000; libzmq's 0, no limit, would let a fast sender fill the daemon's memory)"
            )
        }
        guard limits.controlRate > 0, limits.controlBurst >= 1 else {
            throw ConfigError(
                .invalid,
                "\(source): limits.controlRate is \(limits.controlRate) and limits.controlBurst \(limits.controlBurst): the rate must be above 0 and the burst at least 1 (defaults: 100 and 200)"
            )
        }
        guard heartbeatMilliseconds >= 10 else {
            throw ConfigError(
                .invalid, "\(source): heartbeatMilliseconds is \(heartbeatMilliseconds), at least 10 expected")
        }
        if let coordinator {
            guard let root = flows[coordinator.flow] else {
                throw ConfigError(
                    .invalid,
                    "\(source): coordinator.flow '\(coordinator.flow)' is not declared under flows (declared: \(flows.keys.sorted().joined(separator: ", ")))"
                )
            }
            guard root.steps[coordinator.step] != nil else {
                throw ConfigError(
                    .invalid,
                    "\(source): coordinator.step '\(coordinator.step)' is not a step of flows.\(coordinator.flow).steps (\(Self.list(root.steps.keys))): "
                        + "add it there, or name one of those\(Self.suggestion(coordinator.step, among: root.steps.keys))"
                )
            }
        }
        for (name, flow) in flows.sorted(by: { $0.key < $1.key }) {
            for child in flow.childFlowNames where flows[child] == nil {
                throw ConfigError(
                    .invalid,
                    "\(source): flow '\(name)' starts flow '\(child)', which is not declared under flows (\(Self.list(flows.keys))): "
                        + "declare it under flows.\(child), or correct the name\(Self.suggestion(child, among: flows.keys))"
                )
            }
            for (step, rules) in flow.steps.sorted(by: { $0.key < $1.key }) {
                for (index, rule) in rules.enumerated() {
                    for case .child(let child, let first) in rule.handoffs {
                        guard let steps = flows[child]?.steps, steps[first] == nil else { continue }
                        throw ConfigError(
                            .invalid,
                            "\(source): flows.\(name).steps.\(step)[\(index)] starts \(child) with step '\(first)', which flows.\(child).steps lacks "
                                + "(\(Self.list(steps.keys))): add it there, or name one of those\(Self.suggestion(first, among: steps.keys))"
                        )
                    }
                }
            }
            for step in (flow.params ?? [:]).keys.sorted() where flow.steps[step] == nil {
                throw ConfigError(
                    .invalid,
                    "\(source): flows.\(name).params.\(step) declares params of a step flows.\(name).steps lacks (\(Self.list(flow.steps.keys))): "
                        + "add the step, or correct the name\(Self.suggestion(step, among: flow.steps.keys))")
            }
        }
        try checkPlaceholders(source: source)
    }

    private static func list(_ names: some Collection<String>) -> String {
        names.isEmpty ? "none declared" : names.sorted().joined(separator: ", ")
    }

    private static func suggestion(_ name: String, among names: some Collection<String>) -> String {
        UnknownKeys.suggestion(for: name, among: Array(names)).map { " (did you mean '\($0)'?)" } ?? ""
    }

    /// Steps whose params are known at start-up — the coordinator's first step carries none, and
    /// rules pass a step's params on unchanged (a child flow's first step, a forward, an end) —
    /// must not use a `{param}` they lack: such a rule would be refused every time it runs.
    package func checkPlaceholders(source: String) throws(ConfigError) {
        guard let start = coordinator else { return }
        var parents: [String: [String]] = [:]
        for (name, flow) in flows.sorted(by: { $0.key < $1.key }) {
            for child in flow.childFlowNames { parents[child, default: []].append(name) }
        }
        struct Visit: Hashable {
            package var flow: String
            package var step: String
        }
        var seen: Set<Visit> = []
        // Each visit: a (flow, step), how it is reached, and the param keys it certainly has.
        var pending: [(Visit, String, Set<String>)] = [
            (Visit(flow: start.flow, step: start.step), "as coordinator.step, which carries no params", [])
        ]
        while let (visit, how, keys) = pending.popLast() {
            guard seen.insert(visit).inserted, let rules = flows[visit.flow]?.steps[visit.step] else { continue }
            for (index, rule) in rules.enumerated() {
                let path = "flows.\(visit.flow).steps.\(visit.step)[\(index)]"
                for (key, template) in rule.templatePaths {
                    guard let missing = Template.placeholders(template).first(where: { !keys.contains($0) }) else {
                        continue
                    }
                    throw ConfigError(
                        .invalid,
                        "\(source): \(path).\(key) '\(template)' uses {\(missing)}, but step '\(visit.step)' of \(visit.flow) is reached "
                            + "\(how): it would be refused as bad-params every time. Write the id without {\(missing)}, "
                            + "or reach this step from a stepper's step that carries '\(missing)'")
                }
                for handoff in rule.handoffs {
                    let passed = "with the params of \(path) (reached \(how))"
                    switch handoff {
                    case .child(let flow, let step):
                        pending.append((Visit(flow: flow, step: step), "as the first step of \(flow) " + passed, keys))
                    case .current(let step):
                        pending.append((Visit(flow: visit.flow, step: step), "forwarded " + passed, keys))
                    case .parent(let step):
                        for parent in parents[visit.flow] ?? [] {
                            pending.append((Visit(flow: parent, step: step), "forwarded to the parent " + passed, keys))
                        }
                    }
                }
            }
        }
    }

    /// `text` cut at its top-level keys, each piece marked whether it is the section `name`
    /// (its key line and the indented lines, comments and blank lines under it).
    package static func topLevelSections(_ text: String, named name: String) -> [(String, Bool)] {
        var pieces: [(String, Bool)] = []
        var current = ""
        var inside = false
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        for (index, line) in lines.enumerated() {
            if let first = line.first, !first.isWhitespace, first != "#" {
                let starts = line.hasPrefix(name) && line.dropFirst(name.count).drop(while: { $0 == " " }).first == ":"
                if starts != inside {
                    pieces.append((current, inside))
                    current = ""
                    inside = starts
                }
            }
            current += line + (index < lines.count - 1 ? "\n" : "")
        }
        pieces.append((current, inside))
        return pieces
    }

    package static func expandVariables(
        _ text: String, environment: [String: String], source: String
    ) throws(ConfigError) -> String {
        var result = ""
        var rest = Substring(text)
        while let start = rest.range(of: "${") {
            result += rest[..<start.lowerBound]
            guard let end = rest[start.upperBound...].firstIndex(of: "}") else {
                throw ConfigError(.syntax, "\(source): unterminated ${ in '\(rest.prefix(40))'")
            }
            let body = rest[start.upperBound..<end]
            let parts = body.split(separator: ":-", maxSplits: 1, omittingEmptySubsequences: false)
            let name = String(parts[0])
            if let value = environment[name], !value.isEmpty {
                result += value
            } else if parts.count == 2 {
                result += parts[1]
            } else {
                throw ConfigError(
                    .unsetVariable,
                    "\(source): environment variable \(name) is not set and ${\(name)} has no default (write ${\(name):-value})"
                )
            }
            rest = rest[rest.index(after: end)...]
        }
        return result + rest
    }

    /// Where the YAML is broken and what the parser expected there, with the line it is on:
    /// `line 3, column 1: did not find expected ',' or ']' (while parsing a flow sequence that
    /// started at line 2, column 12)`.
    static func describe(_ error: YamlError) -> String {
        switch error {
        case .scanner(let context, let problem, let mark, let yaml),
            .parser(let context, let problem, let mark, let yaml),
            .composer(let context, let problem, let mark, let yaml):
            let lines = yaml.split(separator: "\n", omittingEmptySubsequences: false).count
            let atEnd = mark.line >= lines && mark.column == 1
            var text =
                atEnd
                ? "YAML syntax error at the end of the file: \(problem)"
                : "YAML syntax error at line \(mark.line), column \(mark.column): \(problem)"
            if let context {
                text += " (\(context.text), which started at line \(context.mark.line), column \(context.mark.column))"
            }
            return atEnd ? text : text + "\n" + mark.snippet(from: yaml)
        default:
            return "YAML syntax error: \(error)"
        }
    }

    package static func describe(_ error: DecodingError) -> String {
        func path(_ codingPath: [any CodingKey]) -> String {
            codingPath.map { $0.intValue.map { "[\($0)]" } ?? ".\($0.stringValue)" }.joined().trimmingCharacters(in: [
                "."
            ])
        }
        switch error {
        case .keyNotFound(let key, let context):
            let at = path(context.codingPath)
            return "missing key '\(key.stringValue)'\(at.isEmpty ? "" : " in \(at)")"
        case .dataCorrupted(let context) where context.underlyingError is YamlError:
            return describe(context.underlyingError as! YamlError)
        case .typeMismatch(_, let context), .valueNotFound(_, let context), .dataCorrupted(let context):
            return "\(path(context.codingPath)): \(context.debugDescription)"
        @unknown default:
            return "\(error)"
        }
    }
}
