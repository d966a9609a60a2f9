import ArgumentParser
import FlowBusClient
import FlowBusConfiguration
import FlowBusCoordinator
import FlowBusDaemon
import FlowBusTools
import FlowBusWire
import Foundation
import Logging
import Synchronization
import Yams
import ZeroMQ

/// The FlowBus command line: publish steps and deep links, watch the bus, query flowd.
@main
struct Flowctl: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "flowctl",
        abstract: "Drive and watch a FlowBus topology.",
        subcommands: [
            StepCommand.self, DeepLinkCommand.self, ReportCommand.self, EchoCommand.self, StatusCommand.self,
            ReactorActionCommand.self, ReactorStateCommand.self, ReactorEchoStateCommand.self,
            LaunchCommand.self, GraphCommand.self, ExploreCommand.self, DoctorCommand.self, KeygenCommand.self,
            RecordCommand.self,
            PlayCommand.self, InfoCommand.self,
            JournalCommand.self, ConfigCommand.self,
        ]
    )

    /// `--config FILE` (or `-c FILE`, `--config=FILE`) before the subcommand applies to it, as
    /// if given after it: it becomes `$FLOWBUS_CONFIG` for this run.
    static func main() {
        var arguments = FlowctlLog.arguments
        if FlowctlLog.format == .json {
            // Library loggers too (a PostgreSQL journal's), on standard error with the notes.
            FlowBusHost.bootstrapLogging(level: .notice, format: .json)
        }
        for path in takeOption("--config", short: "-c", from: &arguments, leadingOnly: true) {
            setenv(FlowBusConfig.pathVariable, path, 1)
        }
        do {
            var command = try parseAsRoot(arguments)
            try command.run()
        } catch let error as ClientError where error.code == .noAnswer {
            exit(withError: noAnswer(error.description))
        } catch {
            if FlowctlLog.format == .json {
                let message = fullMessage(for: error)
                let text = message.hasPrefix("Error: ") ? String(message.dropFirst("Error: ".count)) : message
                if !text.isEmpty { note(text, level: .error) }
                Foundation.exit(exitCode(for: error).rawValue)
            }
            exit(withError: error)
        }
    }
}

/// How flowctl writes its notes and errors on standard error: `--log-format text|json`, taken
/// out of the arguments wherever it is, as every command has it.
enum FlowctlLog {
    static let (format, arguments): (LogFormat, [String]) = {
        var arguments = Array(CommandLine.arguments.dropFirst())
        var format = LogFormat.text
        for name in takeOption("--log-format", from: &arguments, leadingOnly: false) {
            guard let given = LogFormat(rawValue: name) else {
                FileHandle.standardError.write(Data("Error: '\(name)' is not a log format: use text or json\n".utf8))
                exit(64)
            }
            format = given
        }
        return (format, arguments)
    }()
}

/// Takes each `name VALUE`, `short VALUE` or `name=VALUE` out of `arguments`, in order, and
/// returns the values: among the leading options only (before the subcommand) when
/// `leadingOnly`, else anywhere before `--`.
func takeOption(_ name: String, short: String? = nil, from arguments: inout [String], leadingOnly: Bool) -> [String] {
    var values: [String] = []
    var index = 0
    while index < arguments.count {
        let argument = arguments[index]
        if argument == "--" || (leadingOnly && !argument.hasPrefix("-")) { break }
        if argument == name || argument == short, index + 1 < arguments.count {
            values.append(arguments[index + 1])
            arguments.removeSubrange(index...(index + 1))
        } else if argument.hasPrefix(name + "=") {
            values.append(String(argument.dropFirst(name.count + 1)))
            arguments.remove(at: index)
        } else {
            index += 1
        }
    }
    return values
}

/// Where to find the topology: every command takes it.
struct ConfigOptions: ParsableArguments {
    @Option(
        name: .shortAndLong,
        help:
            "The topology file (default: $\(FlowBusConfig.pathVariable), else \(FlowBusConfig.defaultPath)); also accepted before the subcommand."
    )
    var config: String?

    func load() throws -> FlowBusConfig {
        do {
            return try FlowBusConfig.load(path: FlowBusConfig.resolvePath(config))
        } catch {
            throw ClientError(.failed, error.description)
        }
    }
}

/// Parses `key=value` / `key:=JSON` arguments into typed params (see ``CommandLineParams``).
func parseParams(_ arguments: [String]) throws -> WireParams {
    do {
        return try CommandLineParams.parse(arguments)
    } catch {
        throw ValidationError("\(error.description) (e.g. withMovieId=23452)")
    }
}

/// Writes one line to standard output at once, so a pipe reader sees each message as it comes.
func emit(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

/// Writes one line to standard error at once, prefixed with `flowctl: `.
func note(_ line: String, level: Logger.Level = .notice) {
    guard FlowctlLog.format == .json else {
        FileHandle.standardError.write(Data(("flowctl: " + line + "\n").utf8))
        return
    }
    JSONLogHandler(label: "flowctl") { FileHandle.standardError.write(Data($0.utf8)) }.log(
        event: LogEvent(
            level: level, message: "\(line)", metadata: nil, source: "flowctl", file: #fileID, function: #function,
            line: #line))
}

/// Waits for flowd's acknowledgement or says what to check.
func requireAcknowledgement(_ publisher: StepPublisher, endpoint: String, timeout: Double) throws {
    guard try publisher.waitForAcknowledgement(timeout: .milliseconds(Int(timeout * 1000))) else {
        throw noAnswer(endpoint: endpoint, timeout: timeout)
    }
    if let refusal = publisher.refusals.first {
        note("refused: \(refusal.reason.rawValue): \(refusal.details["message"]?.stringValue ?? "")")
        throw ExitCode(OutcomeExit(refusal: refusal.reason).rawValue)
    }
}

private func noAnswer(endpoint: String, timeout: Double) -> ExitCode {
    noAnswer(
        "flowd did not acknowledge within \(timeout) s on \(endpoint): is it running? Start it with `flowd --config FILE`"
    )
}

/// Says that a daemon did not answer, and what to check: every command exits 2 then
/// (``OutcomeExit/noAnswer``), as `step` and `action` do.
func noAnswer(_ message: String) -> ExitCode {
    note(message, level: .error)
    return ExitCode(OutcomeExit.noAnswer.rawValue)
}

/// The exit statuses of a command that asks a daemon.
let queryExitStatus =
    "Exit status: 0 answered; 1 an error (the config, the reply); 2 no answer in time (is the daemon running?); 64 a usage error."

/// How `step` and `deeplink` wait: for the outcome (default), the ack only, or the navigation too.
struct OutcomeOptions: ParsableArguments {
    @Flag(
        help:
            "Return once flowd acknowledged the message, without waiting to see whether the flows applied it (exit 0 even if they drop it)."
    )
    var noWait = false
    @Flag(
        help: "Also wait for the didNavigate events the message causes and print them (exit 9 if none comes in time).")
    var waitNav = false
    @Option(help: "Seconds to wait for flowd's acknowledgement and the outcome.") var timeout: Double = 5

    func validate() throws {
        if noWait && waitNav { throw ValidationError("--no-wait and --wait-nav exclude each other") }
    }

    /// Publishes through `send` and reports what became of it: prints `what` and `applied`, or
    /// says `refused: REASON: …` on standard error and exits with the class's status.
    func publish(
        as stepperID: String, config: FlowBusConfig, what: String, _ send: (StepPublisher) throws -> UInt64
    ) throws {
        let publisher = try StepPublisher(stepperID: stepperID, config: config)
        let wait = Duration.milliseconds(Int(timeout * 1000))
        if noWait {
            _ = try send(publisher)
            try requireAcknowledgement(
                publisher, endpoint: FlowBusConfig.either(config.ingressEndpoints), timeout: timeout)
            print("\(what), acknowledged")
            return
        }
        // Subscribed before sending: what flowd does with the message cannot be missed.
        let watcher: OutcomeWatcher
        do {
            watcher = try OutcomeWatcher(stepperID: stepperID, config: config, timeout: wait)
        } catch let error as ClientError {
            note(error.description)
            throw ExitCode(OutcomeExit.noAnswer.rawValue)
        }
        let sequence = try send(publisher)
        guard let outcome = try watcher.outcome(of: sequence, from: publisher, navigation: waitNav, timeout: wait)
        else {
            throw noAnswer(endpoint: FlowBusConfig.either(config.ingressEndpoints), timeout: timeout)
        }
        switch outcome {
        case .applied(let navigations):
            print("\(what), applied")
            for event in navigations { print(MessageFormatter.line(.navigation(event))) }
        case .refused(let diagnostic):
            note("\(what), refused: \(diagnostic.reason.rawValue): \(diagnostic.details["message"]?.stringValue ?? "")")
            throw ExitCode(OutcomeExit(refusal: diagnostic.reason).rawValue)
        case .noNavigation:
            note("\(what), applied, but no didNavigate followed within \(timeout) s")
            throw ExitCode(OutcomeExit.noNavigation.rawValue)
        }
    }
}

/// The typing rules of `key=value` parameters, for every command that takes them.
let paramsHelp = """
    Parameters: key=value guesses the type: true or false is a bool, an integer (23452) an int, \
    a number with a fraction or exponent (1.5) a double, anything else a string (key=hello). \
    key:=JSON gives the type exactly: zip:='"75001"' is the string "75001" (zip=75001 would be \
    an int), ids:='[1,2]' a list, filter:='{"new":true}' a map, note:=null a null.
    """

struct StepCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "step", abstract: "Publish a step as a stepper and say what flowd did with it.",
        discussion: paramsHelp + "\n\n" + OutcomeExit.table)

    @OptionGroup var options: ConfigOptions
    @Argument(help: "The step's name, e.g. moviePicked.") var name: String
    @Argument(help: "The step's parameters as key=value or key:=JSON, e.g. withMovieId=23452 zip:='\"75001\"'.")
    var params: [String] = []
    @Option(name: .customLong("as"), help: "The stepper id to publish as (bound by a flow, e.g. wishlist/movies).")
    var stepperID: String
    @Flag(help: "Encode params as JSON instead of the binary form.") var json = false
    @OptionGroup var outcome: OutcomeOptions

    func run() throws {
        let parsed = try parseParams(params)
        let config = try options.load()
        let what = "step \(MessageFormatter.step(name, parsed)) as \(stepperID)"
        try CommandTracing.send(.step, topic: Topic.step(stepperID), config: config) { trace in
            try outcome.publish(as: stepperID, config: config, what: what) { publisher in
                publisher.contentType = json ? .json : .fbv
                return try publisher.publish(name, parsed, traceContext: trace)
            }
        }
    }
}

struct DeepLinkCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "deeplink", abstract: "Send a step to every active flow and say what flowd did with it.",
        discussion: paramsHelp + "\n\n" + OutcomeExit.table)

    @OptionGroup var options: ConfigOptions
    @Argument(help: "The step's name.") var name: String
    @Argument(help: "The step's parameters as key=value or key:=JSON.") var params: [String] = []
    @OptionGroup var outcome: OutcomeOptions

    func run() throws {
        let parsed = try parseParams(params)
        let config = try options.load()
        let what = "deep link \(MessageFormatter.step(name, parsed))"
        try CommandTracing.send(.deepLink, topic: Topic.deepLink(name), config: config) { trace in
            try outcome.publish(as: "flowctl", config: config, what: what) { publisher in
                try publisher.publishDeepLink(name, parsed, traceContext: trace)
            }
        }
    }
}

struct ReportCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "report",
        abstract: "Report, as a renderer, that a presentable appeared, disappeared or was dismissed.")

    @OptionGroup var options: ConfigOptions
    @Argument(help: "appeared, disappeared or dismissed.") var event: String
    @Argument(help: "The presentable's id, e.g. watched/movies.") var presentableID: String
    @Option(help: "Seconds to wait for flowd's acknowledgement.") var timeout: Double = 5

    func run() throws {
        guard let kind = PresentableEvent(rawValue: event) else {
            throw ValidationError("'\(event)' is not a report: use appeared, disappeared or dismissed")
        }
        let config = try options.load()
        let publisher = try StepPublisher(stepperID: "renderer", config: config)
        try publisher.report(kind, for: presentableID)
        try requireAcknowledgement(publisher, endpoint: FlowBusConfig.either(config.ingressEndpoints), timeout: timeout)
        print("\(presentableID) \(event), acknowledged")
    }
}

struct EchoCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "echo", abstract: "Print messages from flowd's events endpoint.")

    enum Stream: String, ExpressibleByArgument, CaseIterable {
        case nav, did, steps, diagnostics, commands, all, state

        var topics: [String] {
            switch self {
            case .nav: ["nav/"]
            case .did: ["nav/did/"]
            case .steps: ["step/", "deeplink/"]
            case .diagnostics: ["diag/"]
            case .commands: ["cmd/"]
            case .all: [""]
            case .state: []
            }
        }
    }

    @OptionGroup var options: ConfigOptions
    @Argument(
        help:
            "What to watch: \(Stream.allCases.map(\.rawValue).joined(separator: ", ")) (state takes a reactor id and prints its snapshot, then each state as it changes)."
    ) var stream: Stream
    @Argument(help: "For state: the reactor id, e.g. counter.") var reactorID: String?
    @Option(help: "Stop after this many messages (with --stats: this many one-second reports).") var count: Int?
    @Option(help: "Stop after this many seconds without a message.") var idleTimeout: Double?
    @Flag(help: "Print one JSON object per line.") var json = false
    @Flag(help: "Print message rates per topic every second instead of the messages (like `ros2 topic hz`).")
    var stats = false
    @Option(
        help: ArgumentHelp(
            "Print every event after this event sequence first (0: all flowd keeps), then the live ones, none missed or twice, across flowd restarts and takeovers; the last one printed is said on exit.",
            valueName: "SEQ"))
    var since: UInt64?

    func validate() throws {
        if stream == .state, reactorID == nil {
            throw ValidationError("echo state needs a reactor id, e.g. `flowctl echo state counter`")
        }
        if since != nil, stream == .state || stats {
            throw ValidationError("--since resumes flowd's events; it does not apply to echo state or --stats")
        }
    }

    func run() throws {
        if stream == .state, let reactorID {
            // A reactor's states come from its host with the snapshot first: the same as echo-state.
            var arguments = [reactorID] + (options.config.map { ["--config", $0] } ?? [])
            if let count { arguments += ["--count", String(count)] }
            if let idleTimeout { arguments += ["--idle-timeout", String(idleTimeout)] }
            if json { arguments.append("--json") }
            try ReactorEchoStateCommand.parse(arguments).run()
            return
        }
        let config = try options.load()
        let subscriber = try BusSubscriber(
            endpoints: config.eventsEndpoints, topics: stream.topics, curve: config.curve,
            resuming: since.map {
                EventResumption(
                    control: config.controlEndpoints, since: $0, heartbeatMilliseconds: config.heartbeatMilliseconds)
            })
        subscriber.onFallback = { fallback in
            note(
                "events after \(fallback.since) are no longer kept (\(fallback.reason)): going on from \(fallback.head); run `flowctl status` for the state now"
            )
        }
        // Messages from the first heartbeat on are all received: say so, for scripts to wait on.
        if try subscriber.waitUntilConnected(timeout: .seconds(10)) {
            note("listening on \(FlowBusConfig.either(config.eventsEndpoints)) (\(stream.rawValue))")
        } else {
            note(
                "no heartbeat from flowd on \(FlowBusConfig.either(config.eventsEndpoints)) yet: is it running? (start it with `flowd --config FILE`); still listening"
            )
        }
        reportOutages(of: subscriber, config: config)
        if stats {
            try printRates(subscriber)
            return
        }
        var printed = 0
        defer {
            if let position = subscriber.position { note("last event: \(position) (resume with --since \(position))") }
        }
        while count.map({ printed < $0 }) ?? true {
            guard let received = try subscriber.next(timeout: idleTimeout.map { .milliseconds(Int($0 * 1000)) }) else {
                throw noAnswer(
                    "no message within \(idleTimeout ?? 0) s on \(FlowBusConfig.either(config.eventsEndpoints)): is flowd running?"
                )
            }
            switch received {
            case .message(let message):
                if case .heartbeat = message { continue }
                emit(json ? MessageFormatter.json(message) : MessageFormatter.line(message))
            case .malformed(let error):
                emit(json ? "{\"malformed\":\"\(error.reason.rawValue)\"}" : "malformed message: \(error)")
            }
            printed += 1
        }
    }
}

extension EchoCommand {
    /// Says on standard error when flowd's heartbeats stop and when it is back, while still
    /// listening: a dead daemon and a quiet one look different.
    func reportOutages(of subscriber: BusSubscriber, config: FlowBusConfig) {
        let endpoint = FlowBusConfig.either(config.eventsEndpoints)
        subscriber.silenceLimit = .milliseconds(config.heartbeatMilliseconds * max(1, config.heartbeatLiveness))
        subscriber.onLiveness = { change in
            switch change {
            case .silent(let silentFor):
                note(
                    "flowd silent for \(silentFor.wholeMilliseconds) ms (no heartbeat on \(endpoint)): it is down or unreachable; still listening"
                )
            case .back(let source):
                note("flowd heard again (\(source))")
            }
        }
    }

    /// Counts messages per topic (up to the id) and prints their rates each second.
    func printRates(_ subscriber: BusSubscriber) throws {
        var windowStart = ContinuousClock.now
        var counts: [String: Int] = [:]
        var windows = 0
        while count.map({ windows < $0 }) ?? true {
            let left = ContinuousClock.now.duration(to: windowStart + .seconds(1))
            if left > .zero, let received = try subscriber.next(timeout: left) {
                guard case .message(let message) = received else {
                    counts["malformed", default: 0] += 1
                    continue
                }
                if case .heartbeat = message { continue }
                counts[message.topic, default: 0] += 1
                continue
            }
            let elapsed = windowStart.duration(to: .now)
            let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
            windowStart = .now
            windows += 1
            let total = counts.values.reduce(0, +)
            var lines = [
                "\(String(format: "%.0f", Double(total) / seconds)) msg/s over \(String(format: "%.2f", seconds)) s"
            ]
            for (topic, n) in counts.sorted(by: { $0.value > $1.value }) {
                lines.append("  \(topic): \(n) (\(String(format: "%.1f", Double(n) / seconds))/s)")
            }
            emit(lines.joined(separator: "\n"))
            counts.removeAll()
        }
    }
}

struct StatusCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status", abstract: "Show flowd's flows, navigation tree, bindings and counters.",
        discussion: queryExitStatus)

    @OptionGroup var options: ConfigOptions
    @Flag(help: "Print the status as JSON.") var json = false
    @Flag(help: "Print flowd's metrics in Prometheus text format instead (what endpoints.metrics serves).")
    var metrics = false
    @Option(help: "Seconds to wait for flowd.") var timeout: Double = 3
    @Flag(help: "List the peers flowd holds (sources heard on ingress, reactor hosts), a page at a time, by source id.")
    var peers = false
    @Flag(help: "List the flows, a page at a time, in pre-order (parents before children).") var flows = false
    @Flag(help: "List the stepper bindings, a page at a time, by stepper id.") var bindings = false
    @Flag(help: "List the bound stepper ids with their counters, a page at a time, by id.") var steppers = false
    @Option(help: "With a list: the first entry of the page (flowd says the next page's in its footer).") var offset = 0
    @Option(help: "With a list: entries per page, at most 1000.") var limit = 100
    @Option(help: "With a list: only ids starting with this (source ids, flow ids, stepper ids).") var prefix: String?
    @Flag(help: "With a list: every page, one request each.") var all = false

    func validate() throws {
        guard [peers, flows, bindings, steppers].filter({ $0 }).count <= 1 else {
            throw ValidationError("--peers, --flows, --bindings and --steppers list one thing each: give one of them")
        }
    }

    func run() throws {
        let config = try options.load()
        if peers {
            try listPages(of: "peers", config)
            return
        }
        if flows {
            try listPages(of: "flows", config)
            return
        }
        if bindings {
            try listPages(of: "bindings", config)
            return
        }
        if steppers {
            try listPages(of: "steppers", config)
            return
        }
        // Every instance is asked: the active one answers, a standby binds nothing.
        let answers = try StatusClient.survey(
            endpoints: config.controlEndpoints, curve: config.curve, timeout: .milliseconds(Int(timeout * 1000)))
        guard let active = answers.firstIndex(where: { $0.outcome != nil }), let outcome = answers[active].outcome
        else {
            throw noAnswer(
                "flowd did not answer on \(FlowBusConfig.either(config.controlEndpoints)) within \(timeout) s: is it running? Start it with `flowd --config FILE`"
            )
        }
        var status = try outcome.get()
        if metrics {
            guard let text = status["metrics"]?.mapValue?["prometheus"]?.stringValue else {
                throw ClientError(
                    .failed,
                    "flowd on \(answers[active].endpoint) returned no Prometheus text (it was started without a metrics registry)"
                )
            }
            print(text, terminator: "")
            return
        }
        let several = answers.count > 1
        if several {
            // Which configured instance answered: flowd itself knows only its own endpoints.
            status["instances"] = .list(
                answers.enumerated().map { index, answer in
                    .map([
                        "instance": .int(Int64(index + 1)), "control": .string(answer.endpoint),
                        "state": .string(answer.outcome == nil ? "silent" : index == active ? "active" : "answered"),
                    ])
                })
        }
        guard !json else {
            print(try WireJSON.string(.map(status)))
            return
        }
        var lines: [String] = []
        if several {
            for (index, answer) in answers.enumerated() {
                let state =
                    answer.outcome == nil
                    ? "no answer (standing by, or down)"
                    : index == active ? "active" : "answered too (two active instances: check their journals)"
                lines.append("flowd instance \(index + 1) of \(answers.count) (\(answer.endpoint)): \(state)")
            }
        }
        print(
            (lines + [MessageFormatter.status(status)] + MessageFormatter.metricsSummary(status)).joined(
                separator: "\n"))
    }
}

extension StatusCommand {
    /// Peers page by page: each request asks for the `peers` section only, so that a flowd holding
    /// 100,000 sources answers each page cheaply.
    /// Lists one of the status reply's paged lists (`peers`, `flows`, `bindings`), page by page.
    private func listPages(of section: String, _ config: FlowBusConfig) throws {
        var page: WireParams = ["offset": .int(Int64(offset)), "limit": .int(Int64(limit))]
        if let prefix { page["prefix"] = .string(prefix) }
        while true {
            let status = try StatusClient.fetch(
                endpoints: config.controlEndpoints, curve: config.curve, timeout: .milliseconds(Int(timeout * 1000)),
                params: ["sections": [.string(section)], section: .map(page)])
            let listed = status[section] ?? .null
            let info = status["pages"]?.mapValue?[section]?.mapValue ?? [:]
            let lines = Self.lines(of: section, listed)
            let first = info["offset"]?.intValue ?? 0
            let matching = info["matching"]?.intValue ?? Int64(lines.count)
            if json {
                print(try WireJSON.string(.map([section: listed, "page": .map(info)])))
            } else {
                for line in lines { print(line) }
                let next = info["next"]?.intValue
                let range = lines.isEmpty ? "none" : "\(first + 1)–\(first + Int64(lines.count))"
                print(
                    "\(section) \(range) of \(matching)\(next.map { all ? "" : "; next page: --offset \($0)" } ?? "")")
            }
            guard all, let next = info["next"]?.intValue else { return }
            page["offset"] = .int(next)
        }
    }

    /// One line per entry of a page, in the page's order.
    private static func lines(of section: String, _ listed: WireValue) -> [String] {
        switch section {
        case "peers":
            return (listed.mapValue ?? [:]).sorted(by: { $0.key < $1.key }).map { source, peer in
                let entry = peer.mapValue ?? [:]
                let alive = entry["alive"]?.boolValue == false ? "dead " : "alive"
                return
                    "\(alive) \(source)  \(entry["role"]?.stringValue ?? "?")  silent \(entry["silent_ms"]?.intValue ?? 0) ms\(entry["heartbeats"]?.boolValue == true ? "  heartbeats" : "")"
            }
        case "steppers":
            return (listed.mapValue ?? [:]).sorted(by: { $0.key < $1.key }).map { stepperID, counters in
                let entry = counters.mapValue ?? [:]
                let dropped = (entry["dropped"]?.mapValue ?? [:]).sorted(by: { $0.key < $1.key })
                    .map { "\($0.key) \($0.value.displayText)" }.joined(separator: ", ")
                return
                    "\(stepperID)  accepted \(entry["accepted"]?.displayText ?? "0")\(dropped.isEmpty ? "" : "  dropped: \(dropped)")"
            }
        case "flows":
            return (listed.listValue ?? []).map { flow in
                let entry = flow.mapValue ?? [:]
                let parent = entry["parent"]?.stringValue.map { "  in \($0)" } ?? ""
                let ready = entry["ready"]?.boolValue == true ? "  ready" : ""
                return
                    "\(entry["id"]?.stringValue ?? "?")\(parent)  root \(entry["root"]?.mapValue?["id"]?.stringValue ?? "?")\(ready)"
            }
        default:
            return (listed.listValue ?? []).map { binding in
                let entry = binding.mapValue ?? [:]
                let remote = entry["remote"]?.boolValue == true ? "  remote" : ""
                return
                    "\(entry["stepper"]?.stringValue ?? "?") -> \(entry["flow"]?.stringValue ?? "?") @ \(entry["presentable"]?.stringValue ?? "?")\(remote)"
            }
        }
    }
}

struct KeygenCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "keygen", abstract: "Write a CURVE key pair: NAME.key (secret, mode 0600) and NAME.pub.")

    @Argument(help: "The key's name, e.g. flowd or a client's name.") var name: String
    @Option(help: "The directory to write into.") var dir: String = "."
    @Flag(help: "Replace existing files.") var force = false

    func run() throws {
        let pair = try CurveKeyPair.generate()
        let directory = URL(fileURLWithPath: dir)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let secretPath = directory.appendingPathComponent("\(name).key").path
        let publicPath = directory.appendingPathComponent("\(name).pub").path
        for path in [secretPath, publicPath] where FileManager.default.fileExists(atPath: path) && !force {
            throw ClientError(.failed, "\(path) exists: pass --force to replace it")
        }
        // Created private before the secret is written into it.
        guard FileManager.default.createFile(atPath: secretPath, contents: nil, attributes: [.posixPermissions: 0o600])
        else {
            throw ClientError(.failed, "cannot create \(secretPath)")
        }
        try "# FlowBus CURVE secret key of \(name): keep it private\n\(pair.secretKey)\n".write(
            toFile: secretPath, atomically: false, encoding: .utf8)
        try "# FlowBus CURVE public key of \(name)\n\(pair.publicKey)\n".write(
            toFile: publicPath, atomically: true, encoding: .utf8)
        print("wrote \(secretPath) (secret) and \(publicPath): public key \(pair.publicKey)")
    }
}

/// `flowctl config [--json]`: the topology as every daemon loads it.
struct ConfigCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "config",
        abstract: "Print the topology as the daemons load it: variables expanded, defaults filled in, checked.",
        discussion:
            "For scripts and test harnesses in other languages (the Python plugin reads the endpoints this way): --json prints one JSON object with every key the daemons read."
    )

    @OptionGroup var options: ConfigOptions
    @Flag(help: "Print one JSON object instead of YAML.") var json = false

    func run() throws {
        let config = try options.load()
        if json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
            emit(String(decoding: try encoder.encode(config), as: UTF8.self))
        } else {
            print(try YAMLEncoder().encode(config), terminator: "")
        }
    }
}

struct ExploreCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "explore",
        abstract: "Explore the declared flows with flowd's engine and report what can never happen.",
        discussion:
            "From the coordinator's first step, every state the flows can reach is searched (no daemon runs): in each, every bound stepper sends every step its flow declares, and every step name goes as a deep link. Screens never presented, steps never applied (deep links aside) with the reason, rules never taken, flows never started and steppers left bound to a screen that is gone are named with their config path. Exit status 1 with --strict when there is any."
    )

    @OptionGroup var options: ConfigOptions
    @Option(help: "At most this many messages from the first state.") var depth = 8
    @Option(help: "At most this many distinct states.") var maxStates = 1_000
    @Flag(help: "Exit with status 1 when anything declared is unreachable.") var strict = false
    @Flag(help: "Print one JSON object instead of the report.") var json = false
    @Flag(help: "Also print the plans: the fewest paths from a fresh start that take every kind of transition met.")
    var plans = false
    @Option(help: "Write the plans as a pytest module (the flowbus plugin) to this file.") var writePytest: String?
    @Option(help: "Write the plans as a Swift Testing file (FlowBusTesting) to this file.") var writeSwift: String?
    @Flag(
        name: .customLong("run"),
        help:
            "Run the plans through a fresh flowd each (the config's ${FLOWBUS_RUN_DIR} set to a directory of its own) and report the first outcome, event or tree that differs from the model."
    )
    var runPlans = false
    @Option(
        help:
            "The coordinator for --run and --walk (default: flowd beside flowctl, else in PATH); a walk over flows written in Swift names the app's own."
    )
    var flowd: String?
    @Option(
        help:
            "Instead of the search: a random walk of this many messages (steps, deep links, the reactors' sampleActions) through a fresh flowd, fresh reactor hosts and the model, compared event by event; a failure is shrunk to a shortest sequence."
    )
    var walk: Int?
    @Option(help: "The walk's seed (default: a random one, printed): the same seed draws the same walk.")
    var seed: UInt64?
    @Option(help: "Stop and start flowd this many times during the walk, on a journal; nothing it does may change.")
    var restarts = 0
    @Flag(help: "Restarts kill flowd (SIGKILL) instead of stopping it (SIGTERM).") var kill = false
    @Flag(
        help:
            "The walk also sends renderer reports: appeared and disappeared for presentables in the tree, dismissed for pushed and presented ones."
    )
    var renderer = false

    func run() throws {
        let config = try options.load()
        guard !config.flows.isEmpty || (walk != nil && config.sampleSteps != nil) else {
            throw ClientError(
                .failed,
                "\(FlowBusConfig.resolvePath(options.config)) declares no flows: they are Swift code, which explore cannot read; "
                    + "a walk (--walk N --flowd YOUR-COORDINATOR) can still drive them with the steps the config lists under sampleSteps"
            )
        }
        guard depth > 0, maxStates > 0 else {
            throw ValidationError("--depth and --max-states must be at least 1")
        }
        guard walk != nil || (seed == nil && restarts == 0 && !kill && !renderer) else {
            throw ValidationError("--seed, --restarts, --kill and --renderer are options of a walk: add --walk N")
        }
        guard !kill || restarts > 0 else { throw ValidationError("--kill makes restarts SIGKILLs: add --restarts K") }
        if let walk {
            guard walk > 0 else { throw ValidationError("--walk must be at least 1") }
            guard restarts >= 0 else { throw ValidationError("--restarts must be 0 or more") }
            guard config.coordinator != nil || flowd != nil else {
                throw ValidationError(
                    "\(FlowBusConfig.resolvePath(options.config)) names no coordinator: flowd would run no flow. "
                        + "Name the app's own coordinator with --flowd (its flows are Swift code)")
            }
            let walker = FlowWalker(
                config: config, configPath: FlowBusConfig.resolvePath(options.config), flowd: try flowdExecutable(),
                restarts: restarts, kill: kill, renderer: renderer)
            let seed = seed ?? UInt64.random(in: 1...999_999)
            let report: FlowWalker.Report
            do {
                report = try waitFor { try await walker.walk(count: walk, seed: seed) }
            } catch {
                note("the walk with --seed \(seed) could not go on: \(error)")
                throw ExitCode(1)
            }
            print(report.text)
            if report.failure != nil { throw ExitCode(1) }
            return
        }
        let explorer = FlowExplorer(config: config)
        let limits = FlowExplorer.Limits(depth: depth, states: maxStates)
        let exploration = try waitFor { try await explorer.explore(limits: limits) }
        print(json ? try WireJSON.string(exploration.json) : exploration.text)
        if plans && !json { print(exploration.planText) }
        let path = FlowBusConfig.resolvePath(options.config)
        for (file, text) in [
            (writePytest, { PlanWriter.pytest(exploration, config: path) }),
            (writeSwift, { PlanWriter.swiftTesting(exploration, config: path) }),
        ] {
            guard let file else { continue }
            do {
                try text().write(toFile: file, atomically: true, encoding: .utf8)
            } catch {
                throw ClientError(.failed, "cannot write \(file): \(error.localizedDescription)")
            }
            FileHandle.standardError.write(Data("wrote \(exploration.plans.count) plans to \(file)\n".utf8))
        }
        if runPlans {
            let runner = PlanRunner(config: config, configPath: path, flowd: try flowdExecutable())
            let report = try waitFor { try await runner.run(exploration) }
            if let divergence = report.divergence {
                note("the real flowd differs from the model at \(divergence)")
                throw ExitCode(1)
            }
            print(
                "ran \(report.plans) plans (\(report.messages) messages) through a fresh flowd each in "
                    + String(format: "%.1f", report.seconds)
                    + " s: every didNavigate, navigation command, refusal and tree as the model says")
        }
        if strict && !exploration.unreachable.isEmpty { throw ExitCode(1) }
    }

    /// Runs `work` (the flows' actor) and waits for it: this command is synchronous.
    private func waitFor<T: Sendable>(_ work: @escaping @Sendable () async throws -> T) throws -> T {
        let outcome = Mutex<Result<T, any Error>?>(nil)
        let done = DispatchSemaphore(value: 0)
        Task.detached {
            let result: Result<T, any Error>
            do {
                result = .success(try await work())
            } catch {
                result = .failure(error)
            }
            outcome.withLock { $0 = result }
            done.signal()
        }
        done.wait()
        return try outcome.withLock { $0! }.get()
    }

    private func flowdExecutable() throws -> String {
        if let flowd { return flowd }
        let beside = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
            .deletingLastPathComponent()
            .appendingPathComponent("flowd").path
        if FileManager.default.isExecutableFile(atPath: beside) { return beside }
        for directory in (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":") {
            let candidate = "\(directory)/flowd"
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        throw ClientError(.failed, "--run needs flowd: build it (swift build --product flowd) or pass --flowd PATH")
    }
}

struct GraphCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "graph",
        abstract:
            "Draw the declared flows (or, with --live, flowd's current navigation tree) as Graphviz DOT or Mermaid.")

    enum Format: String, ExpressibleByArgument, CaseIterable {
        case dot, mermaid
    }

    @OptionGroup var options: ConfigOptions
    @Flag(help: "Draw flowd's live navigation tree instead of the declared flows.") var live = false
    @Option(help: "Output format: dot or mermaid.") var format: Format = .dot
    @Option(help: "Render to this SVG file through Graphviz's `dot` (apt-get install graphviz).") var svg: String?

    func run() throws {
        let config = try options.load()
        if !live && config.flows.isEmpty {
            throw ClientError(
                .failed,
                "\(FlowBusConfig.resolvePath(options.config)) declares no flows: they are Swift code in your coordinator, so there is no table to draw. "
                    + "Draw the live navigation tree with `flowctl graph --live` while it runs")
        }
        let graph =
            live
            ? FlowGraph.live(try StatusClient.fetch(endpoints: config.controlEndpoints, curve: config.curve))
            : FlowGraph.declared(config)
        guard let svg else {
            print(format == .dot ? graph.dot : graph.mermaid)
            return
        }
        guard
            let dot = ["/usr/bin/dot", "/usr/local/bin/dot"].first(where: FileManager.default.isExecutableFile(atPath:))
        else {
            throw ClientError(
                .failed,
                "--svg needs Graphviz's `dot`: install it with `apt-get install graphviz`, or print DOT without --svg")
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: dot)
        process.arguments = ["-Tsvg", "-o", svg]
        let input = Pipe()
        process.standardInput = input
        try process.run()
        input.fileHandleForWriting.write(Data(graph.dot.utf8))
        try input.fileHandleForWriting.close()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw ClientError(.failed, "dot failed (exit \(process.terminationStatus)) rendering \(svg)")
        }
        print("wrote \(svg)")
    }
}

extension DoctorCommand {
    /// The `launch:` entries as `flowctl launch` would run them (${FLOWBUS_CONFIG} is the file),
    /// so that a fix names the command this topology really uses (a user's own host, say).
    func launchCommands(path: String) -> [LaunchSpec] {
        var environment = ProcessInfo.processInfo.environment
        environment[FlowBusConfig.pathVariable] = path
        return (try? FlowBusConfig.load(path: path, environment: environment, expandingLaunch: true).launch) ?? []
    }
}

struct DoctorCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "doctor",
        abstract: "Check libzmq, the config, endpoints, permissions, keys and the daemons, and say what to fix.",
        discussion:
            "The config is loaded as every daemon loads it (unknown keys, missing flows and steps, {param} placeholders); each ipc endpoint's run directory must exist and be served by one process at most; a daemon that does not answer is named with the command the config's launch: section starts it with."
    )

    @OptionGroup var options: ConfigOptions

    func run() throws {
        var problems = 0
        func check(_ ok: Bool, _ what: String, fix: @autoclosure () -> String) {
            emit("\(ok ? "ok  " : "FAIL") \(what)\(ok ? "" : ": " + fix())")
            if !ok { problems += 1 }
        }
        let version = ZeroMQLibrary.version
        check(
            version.major > 4 || (version.major == 4 && version.minor >= 2),
            "libzmq \(ZeroMQLibrary.versionString) (4.2 or later needed)",
            fix: "install libzmq3-dev 4.3 (scripts/bootstrap)")
        check(
            ZeroMQLibrary.has("curve"), "libzmq has CURVE",
            fix: "install Debian's libzmq3-dev, which is built with CURVE")
        let path = FlowBusConfig.resolvePath(options.config)
        let config: FlowBusConfig
        do {
            config = try FlowBusConfig.load(path: path)
            check(true, "config \(path) loads", fix: "")
        } catch {
            check(false, "config \(path) loads", fix: error.description)
            throw ExitCode(1)
        }
        let several = config.flowdInstances.count > 1
        let endpoints =
            config.flowdInstances.enumerated().flatMap { index, instance in
                let prefix = several ? "flowd \(index + 1) " : ""
                return [
                    ("\(prefix)ingress", instance.ingress), ("\(prefix)events", instance.events),
                    ("\(prefix)control", instance.control),
                ]
            }
            + config.reactors.sorted { $0.key < $1.key }.flatMap { name, host in
                host.instances.flatMap { [("\(name) actions", $0.actions), ("\(name) states", $0.states)] }
            }
        let launch = launchCommands(path: path)
        var missing: Set<String> = []
        for (name, endpoint) in endpoints where endpoint.hasPrefix("ipc://") {
            let file = String(endpoint.dropFirst("ipc://".count))
            let directory = (file as NSString).deletingLastPathComponent
            guard FileManager.default.fileExists(atPath: directory) else {
                guard missing.insert(directory).inserted else { continue }
                check(
                    false, "\(name): run directory \(directory) exists",
                    fix:
                        "nothing runs there yet: a daemon creates it (mode 0700) when it starts; if yours run, they use another FLOWBUS_RUN_DIR (export the same one here)"
                )
                continue
            }
            check(
                FileManager.default.isWritableFile(atPath: directory), "\(name): directory \(directory) is writable",
                fix: "make it yours (chown/chmod 700 \(directory)) or point FLOWBUS_RUN_DIR elsewhere")
            let listeners = unixSocketListeners(boundTo: file)
            let pids = Set(listeners.flatMap(\.pids)).sorted().map(String.init).joined(separator: ", ")
            check(
                listeners.count <= 1, "\(name): one process serves \(file)",
                fix:
                    "\(listeners.count) sockets are bound to it (pids \(pids.isEmpty ? "not readable" : pids)): a second daemon on the same endpoints; stop all but one"
            )
            if !listeners.isEmpty, !FileManager.default.fileExists(atPath: file) {
                check(
                    false, "\(name): \(file) exists while pid \(pids) serves it",
                    fix:
                        "the socket file was removed (by another daemon stopping?): nothing can connect; restart pid \(pids)"
                )
            }
            check(
                file.utf8.count < 108, "\(name): ipc path fits a unix socket (\(file.utf8.count) < 108 bytes)",
                fix: "use a shorter directory")
            if let mode = (try? FileManager.default.attributesOfItem(atPath: file))?[.posixPermissions] as? NSNumber {
                check(
                    mode.intValue & 0o077 == 0, "\(name): \(file) is private (mode \(String(mode.intValue, radix: 8)))",
                    fix: "chmod 600 \(file), or restart the daemon that owns it")
            }
        }
        if config.security != nil {
            check(
                config.curve.server != nil || config.curve.serverPublicKey != nil, "security: keys load",
                fix: "run `flowctl keygen NAME --dir DIR` and name the files in security:")
            for secret in [config.security?.serverKey, config.security?.clientKey].compactMap({ $0 }) {
                let file =
                    secret.hasPrefix("/")
                    ? secret : ((path as NSString).deletingLastPathComponent as NSString).appendingPathComponent(secret)
                if let mode = (try? FileManager.default.attributesOfItem(atPath: file))?[.posixPermissions] as? NSNumber
                {
                    check(
                        mode.intValue & 0o077 == 0, "security: \(file) is readable by its owner only",
                        fix: "chmod 600 \(file)")
                }
            }
            if config.curve.server != nil {
                check(
                    !config.curve.allowedClients.isEmpty, "security: allowedClients lists at least one key",
                    fix: "add client .pub files to security.allowedClients")
            }
            let tcp = endpoints.contains { $0.1.hasPrefix("tcp://") }
            check(
                tcp, "security applies to tcp endpoints",
                fix: "CURVE protects tcp:// only; ipc:// relies on file permissions")
        }
        do {
            let status = try StatusClient.fetch(
                endpoints: config.controlEndpoints, curve: config.curve, timeout: .seconds(2))
            let flows = status["flows_total"]?.intValue.map(Int.init) ?? status["flows"]?.listValue?.count ?? 0
            check(
                true,
                "flowd answers on \(FlowBusConfig.either(config.controlEndpoints)) (\(flows) flow(s), protocol v\(Envelope.currentVersion))",
                fix: "")
        } catch {
            let command =
                launch.first { $0.ready?.control == true }.map { $0.command.joined(separator: " ") }
                ?? "flowd --config \(path)"
            check(
                false, "flowd answers on \(FlowBusConfig.either(config.controlEndpoints))",
                fix: "start it: \(command) (or flowctl launch \(path))")
        }
        for (name, host) in config.reactors.sorted(by: { $0.key < $1.key }) {
            let subscriber = try BusSubscriber(endpoints: host.statesEndpoints, topics: ["hb/"], curve: config.curve)
            let command =
                launch.first { $0.ready?.heartbeat == name }.map { $0.command.joined(separator: " ") }
                ?? "reactor-host --config \(path) --host \(name)"
            check(
                try subscriber.waitUntilConnected(timeout: .seconds(2)),
                "reactor host \(name) sends heartbeats on \(FlowBusConfig.either(host.statesEndpoints))",
                fix: "start it: \(command)")
        }
        emit(problems == 0 ? "all checks passed" : "\(problems) problem(s) found")
        if problems > 0 { throw ExitCode(1) }
    }
}
