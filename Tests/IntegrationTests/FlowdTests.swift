import FlowBusClient
import FlowBusConfiguration
import FlowBusCoordinator
import FlowBusReactorHost
import FlowBusTesting
import FlowBusTools
import FlowBusWire
import Flows
import Foundation
import Testing
import ZeroMQ

/// The repository's root, found from this file's path.
let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent()

/// The movie demo's config with a fast heartbeat, so subscribers connect quickly.
func demoTopology() throws -> TestTopology {
    let yaml = try String(contentsOf: packageRoot.appendingPathComponent("config/demo.yaml"), encoding: .utf8)
    return try TestTopology(configYAML: yaml + "\nheartbeatMilliseconds: 50\n")
}

/// Publishes one step as `stepperID` and waits for flowd's acknowledgement, so steps from
/// different steppers reach flowd in the order the test sends them.
func tap(
    _ topology: TestTopology, _ stepperID: String, _ name: String, _ params: WireParams = [:],
    sourceLocation: SourceLocation = #_sourceLocation
) throws {
    let stepper = try topology.stepper(stepperID)
    try stepper.publish(name, params)
    #expect(
        try stepper.waitForAcknowledgement(timeout: .seconds(10)), "flowd acknowledged \(name) from \(stepperID)",
        sourceLocation: sourceLocation)
}

func lines(_ messages: [WireMessage]) -> [String] { messages.map(MessageFormatter.line) }

func isDidNavigate(_ message: WireMessage) -> Bool {
    if case .navigation(let event) = message { return event.phase == .did }
    return false
}

/// The movie demo's config, run by the tests below through FlowBusTesting's `withTopology`.
let demoConfig = packageRoot.appendingPathComponent("config/demo.yaml").path

/// The demo's Counter (seed 001) and login reactor states, as the reactor host publishes them.
struct DemoCounter: Decodable, Equatable {
    var value: Int
    var isLoading: Bool
}

struct DemoLogin: Decodable, Equatable {
    var isSubmitting: Bool
    var error: String?
}

enum DemoLoginAction: Encodable {
    case submit(apiKey: String)
}

/// The three navigations of leaving the api key screen: the dashboard and its two tabs.
let dashboardShown: [Navigation] = [
    "MainFlow.apiKeyIsComplete @ apikey", "WishlistFlow.movieList", "WatchedFlow.movieList",
]

@Suite("flowd with real processes", .serialized)
struct FlowdTests {
    @Test("The movie demo journey produces the exact didNavigate trace")
    func demoJourney() throws {
        try withTopology(configFile: demoConfig) { topology in
            // At debug level flowd logs each navigation.
            let flowd = try topology.startFlowd(arguments: ["--log-level", "debug"])
            let trace = try topology.navigationTrace()

            try topology.step("apiKeyIsComplete", as: "apikey")
            try topology.step("moviePicked", ["withMovieId": 23452], as: "wishlist/movies")
            try topology.step("castPicked", ["withCastId": 2], as: "wishlist/movie/23452")
            try topology.step("watchedTab", as: "dashboard")
            try topology.step("moviePicked", ["withMovieId": 1], as: "watched/movies")
            try topology.step("settings", as: "dashboard")
            try topology.step("apiKey", as: "settings/list")
            try topology.step("about", as: "settings/list")
            try topology.step("settingsDone", as: "settings/list")
            try topology.deepLink("moviePicked", ["withMovieId": 42])

            try trace.expect([
                "MainFlow.apiKeyIsComplete",
                "WishlistFlow.movieList",
                "WatchedFlow.movieList",
                "WishlistFlow.moviePicked(withMovieId: 23452)",
                "WishlistFlow.castPicked(withCastId: 2)",
                "MainFlow.watchedTab",
                "WatchedFlow.moviePicked(withMovieId: 1)",
                "MainFlow.settings",
                "SettingsFlow.settings",
                "SettingsFlow.apiKey",
                "SettingsFlow.about",
                "SettingsFlow.settingsDone",
                "MainFlow.settingsDone",
                "MainFlow.moviePicked(withMovieId: 42)",
                "WishlistFlow.moviePicked(withMovieId: 42)",
                "WatchedFlow.moviePicked(withMovieId: 42)",
            ])
            try trace.expectNothingMore()
            // The root flow's first step happened before anyone could subscribe; flowd logged it.
            #expect(
                try flowd.waitForOutput(matching: "did navigate flow=MainFlow step=apiKey$"), "\(flowd.outputTail())")
            #expect(flowd.terminate() == 0, "flowd exits 0 on SIGTERM")
        }
    }

    @Test(
        "The whole demo as scripts/demo plays it: launched from the config, the login reactor moves the app on, drops are reported"
    )
    func wholeDemo() throws {
        try withTopology(configFile: demoConfig) { topology in
            // The launch: section: flowd, then the reactor host once flowd answers.
            let processes = try topology.launch()
            #expect(processes.map(\.name) == ["flowd", "reactors"])
            let trace = try topology.navigationTrace()

            // The Counter of seed 001, driven by actions while its states are watched.
            let counter = try topology.stateTrace(of: "counter", as: DemoCounter.self)
            #expect(counter.initial == DemoCounter(value: 0, isLoading: false))
            try topology.send("increase", to: "counter")
            try counter.expect([
                DemoCounter(value: 0, isLoading: true), DemoCounter(value: 1, isLoading: true),
                DemoCounter(value: 1, isLoading: false),
            ])

            // The api key screen's login reactor publishes the step that leaves it, as stepper apikey.
            let login = try topology.stateTrace(of: "login", as: DemoLogin.self)
            try topology.send(DemoLoginAction.submit(apiKey: "demo-key"), to: "login")
            try login.expect([DemoLogin(isSubmitting: true), DemoLogin(isSubmitting: false)])
            try trace.expect(dashboardShown)

            try topology.step("moviePicked", ["withMovieId": 23452], as: "wishlist/movies")
            try topology.step("castPicked", ["withCastId": 2], as: "wishlist/movie/23452")
            // The Watched tab is not selected yet: this tap is dropped and reported, as RxFlow drops it.
            try topology.step("moviePicked", ["withMovieId": 1], as: "watched/movies")
            try trace.expectDiagnostic(.notVisible, stepper: "watched/movies")
            try topology.step("watchedTab", as: "dashboard")
            try topology.step("moviePicked", ["withMovieId": 1], as: "watched/movies")
            try topology.step("settings", as: "dashboard")
            try topology.step("apiKey", as: "settings/list")
            try topology.step("about", as: "settings/list")
            try topology.step("settingsDone", as: "settings/list")
            try topology.deepLink("moviePicked", ["withMovieId": 42])
            try topology.step("moviePicked", ["withMovieId": 3], as: "nobody")
            let refusal = try trace.expectDiagnostic(.unboundStepper, stepper: "nobody")
            #expect(refusal.details["step"] == "moviePicked(withMovieId: 3)")

            try trace.expect([
                "WishlistFlow.moviePicked(withMovieId: 23452) @ wishlist/movies",
                "WishlistFlow.castPicked(withCastId: 2) @ wishlist/movie/23452",
                "MainFlow.watchedTab @ dashboard",
                "WatchedFlow.moviePicked(withMovieId: 1) @ watched/movies",
                "MainFlow.settings @ dashboard",
                "SettingsFlow.settings",
                "SettingsFlow.apiKey @ settings/list",
                "SettingsFlow.about @ settings/list",
                "SettingsFlow.settingsDone @ settings/list",
                "MainFlow.settingsDone",
                "MainFlow.moviePicked(withMovieId: 42)",
                "WishlistFlow.moviePicked(withMovieId: 42)",
                "WatchedFlow.moviePicked(withMovieId: 42)",
            ])
            try trace.expectNothingMore()
            // flowd first: it then has no stepper of the reactor host to report silent.
            #expect(topology.process(named: "flowd")?.terminate() == 0, "flowd exits 0 on SIGTERM")
            #expect(topology.process(named: "reactors")?.terminate() == 0, "the reactor host exits 0 on SIGTERM")
        }
    }

    @Test(
        "Once replay.retainSeconds let every event go, a subscriber resuming from 0 catches up at the head instead of asking again and again"
    )
    func resumeWhenNothingIsKept() throws {
        let demo = try String(contentsOf: packageRoot.appendingPathComponent("config/demo.yaml"), encoding: .utf8)
        let topology = try TestTopology(
            configYAML: demo + "\nheartbeatMilliseconds: 100\nreplay: { retain: 100000, retainSeconds: 0.2 }\n")
        try topology.startFlowd()
        func events() throws -> [String: WireValue] { try topology.status()["events"]?.mapValue ?? [:] }
        let deadline = ContinuousClock.now + .seconds(10)
        while try events()["kept_in_memory"]?.intValue != 0, ContinuousClock.now < deadline {
            Thread.sleep(forTimeInterval: 0.1)
        }
        #expect(try events()["kept_in_memory"]?.intValue == 0, "the flows' start events aged out")
        let head = try #require(try events()["head"]?.intValue)
        #expect(head > 0)
        let resuming = try BusSubscriber(
            endpoints: [topology.config.endpoints.events], topics: [""],
            resuming: EventResumption(control: [topology.config.endpoints.control], since: 0))
        #expect(try resuming.waitUntilCaughtUp(timeout: .seconds(10)))
    }

    @Test("A step from a screen that is not visible is dropped and reported, not buffered")
    func invisiblePresentableDrop() throws {
        try withTopology(configFile: demoConfig) { topology in
            try topology.startFlowd()
            let trace = try topology.navigationTrace()
            try topology.step("apiKeyIsComplete", as: "apikey")
            try trace.expect(dashboardShown)
            // The Watched tab is not selected: its movie list is hidden.
            try topology.step("moviePicked", ["withMovieId": 7], as: "watched/movies")
            let drop = try trace.expectDiagnostic(.notVisible, stepper: "watched/movies")
            #expect(drop.details["flow"] == "WatchedFlow")
            // Dropped, not buffered: selecting the tab later does not replay it.
            try topology.step("watchedTab", as: "dashboard")
            try trace.expect(["MainFlow.watchedTab @ dashboard"])
            try trace.expectNothingMore()
            let counters = try topology.status()["steppers"]?.mapValue?["watched/movies"]?.mapValue
            #expect(counters?["dropped"]?.mapValue?["not-visible"] == 1)
        }
    }

    @Test("A step from an unbound stepper is refused with a diagnostic")
    func unboundStepper() throws {
        try withTopology(configFile: demoConfig) { topology in
            try topology.startFlowd()
            let trace = try topology.navigationTrace()
            try topology.step("moviePicked", ["withMovieId": 1], as: "nobody")
            try trace.expectDiagnostic(.unboundStepper, stepper: "nobody")
            try trace.expectNothingMore()
            #expect(try topology.status()["totals"]?.mapValue?["dropped"]?.mapValue?["unbound-stepper"] == 1)
        }
    }

    @Test("A deep link reaches every active flow")
    func deepLinkReachesEveryFlow() throws {
        try withTopology(configFile: demoConfig) { topology in
            try topology.startFlowd()
            let trace = try topology.navigationTrace()
            try topology.step("apiKeyIsComplete", as: "apikey")
            try trace.expect(dashboardShown)
            // An outside tool sends it.
            let result = try topology.run(
                "flowctl", ["deeplink", "moviePicked", "withMovieId=99", "--config", topology.configPath])
            #expect(result.status == 0, "\(result.output)")
            try trace.expect([
                "MainFlow.moviePicked(withMovieId: 99)", "WishlistFlow.moviePicked(withMovieId: 99)",
                "WatchedFlow.moviePicked(withMovieId: 99)",
            ])
            let bound = try topology.status()["bindings"]?.listValue?.compactMap {
                $0.mapValue?["stepper"]?.stringValue
            }
            #expect(bound?.contains("wishlist/movie/99") == true)
            #expect(bound?.contains("watched/movie/99") == true)
        }
    }

    @Test(".end removes the child flow and its bindings")
    func endRemovesChildFlow() throws {
        try withTopology(configFile: demoConfig) { topology in
            try topology.startFlowd()
            let trace = try topology.navigationTrace()
            try topology.step("apiKeyIsComplete", as: "apikey")
            try topology.step("settings", as: "dashboard")
            try trace.expect(dashboardShown + ["MainFlow.settings", "SettingsFlow.settings"])
            #expect(
                try topology.status()["flows"]?.listValue?.contains { $0.mapValue?["name"] == "SettingsFlow" } == true)

            try topology.step("settingsDone", as: "settings/list")
            try trace.expect(["SettingsFlow.settingsDone", "MainFlow.settingsDone"])
            let after = try topology.status()
            #expect(after["flows"]?.listValue?.contains { $0.mapValue?["name"] == "SettingsFlow" } == false)
            #expect(after["bindings"]?.listValue?.contains { $0.mapValue?["stepper"] == "settings/list" } == false)
            // Its screen was dismissed with the flow: a late step is reported, not lost.
            try topology.step("about", as: "settings/list")
            let late = try trace.expectDiagnostic(.dismissed, stepper: "settings/list")
            #expect(late.details["flow"] == "SettingsFlow")
        }
    }

    @Test("With wire.publish: json, flowd publishes navigation params and diagnostics' details as JSON")
    func publishesJSON() throws {
        let yaml = try String(contentsOf: packageRoot.appendingPathComponent("config/demo.yaml"), encoding: .utf8)
        let topology = try TestTopology(configYAML: yaml + "\nheartbeatMilliseconds: 50\nwire: { publish: json }\n")
        try topology.startFlowd()
        let events = try topology.subscribe(["diag/", "nav/did/MainFlow"])
        // Sent as FBV: the params are published in JSON all the same.
        _ = try topology.deepLink("moviePicked", ["withMovieId": 3])
        _ = try topology.step("settings", as: "nobody")
        let received = try events.collect(2)
        guard received.count == 2, case .navigation(let navigation) = received[0],
            case .diagnostic(let diagnostic) = received[1]
        else {
            Issue.record("expected a didNavigate and a diagnostic, got \(lines(received))")
            return
        }
        #expect(navigation.envelope.contentType == .json)
        #expect(navigation.params == ["withMovieId": 3])
        #expect(diagnostic.envelope.contentType == .json)
        #expect(diagnostic.reason == .unboundStepper)
        #expect(diagnostic.details["stepper"] == "nobody")
    }

    @Test(
        "A second flowd on the same endpoints refuses to start, and the first keeps serving; missing ipc directories are made"
    )
    func secondFlowdRefused() throws {
        let yaml = try String(contentsOf: packageRoot.appendingPathComponent("config/demo.yaml"), encoding: .utf8)
            .replacingOccurrences(of: "${FLOWBUS_RUN_DIR:-/tmp/flowbus}/", with: "${FLOWBUS_RUN_DIR}/not/yet/")
        try withTopology(try TestTopology(configYAML: yaml + "\nheartbeatMilliseconds: 50\n")) { topology in
            try topology.startFlowd()
            let second = try topology.run("flowd", ["--config", topology.configPath])
            #expect(second.status == 1)
            #expect(second.output.contains("is already served by another process"), "\(second.output)")
            _ = try topology.step("apiKeyIsComplete", as: "apikey")
            #expect(try topology.status()["flows_total"]?.intValue == 3, "the first flowd still serves")
        }
    }

    @Test("A malformed message is refused with a diagnostic and flowd keeps serving")
    func malformedInput() throws {
        let topology = try demoTopology()
        try topology.startFlowd()
        let events = try topology.subscribe(["diag/", "nav/did/"])
        let context = try ZeroMQ.Context(defaultLinger: 500)
        let raw = try context.socket(.dealer)
        try raw.connect(topology.config.endpoints.ingress)
        try raw.send(message: [Array("step/apikey".utf8), [0x09, 0x01]])
        guard case .diagnostic(let diagnostic)? = try events.collect(1).first else {
            Issue.record("no diagnostic for a malformed envelope")
            return
        }
        #expect(diagnostic.reason == .malformed)
        try tap(topology, "apikey", "apiKeyIsComplete")
        #expect(lines(try events.collect(1)) == ["did navigate flow=MainFlow step=apiKeyIsComplete presentable=apikey"])
        #expect(try topology.status()["ingress"]?.mapValue?["refused"]?.mapValue?["malformed"] == 1)
    }

    @Test("status pages flows and bindings; flowctl status --flows and --bindings list them page by page")
    func statusTreePages() throws {
        let topology = try demoTopology()
        try topology.startFlowd()
        try tap(topology, "apikey", "apiKeyIsComplete")
        let control = topology.config.endpoints.control
        let whole = try StatusClient.fetch(endpoint: control)
        let flowIDs = whole["flows"]?.listValue?.compactMap { $0.mapValue?["id"]?.stringValue } ?? []
        #expect(flowIDs.count == 3 && whole["flows_total"] == 3, "\(flowIDs)")
        let second = try StatusClient.fetch(
            endpoint: control, params: ["sections": ["flows"], "flows": ["offset": 1, "limit": 1]])
        #expect(second["flows"]?.listValue?.first?.mapValue?["id"]?.stringValue == flowIDs[1])
        #expect(second["pages"]?.mapValue?["flows"]?.mapValue?["next"] == 2)
        #expect(second["bindings"] == nil, "only the sections asked for")
        let bindings = try StatusClient.fetch(
            endpoint: control, params: ["sections": ["bindings"], "bindings": ["prefix": "w", "offset": 1]])
        #expect(
            bindings["bindings"]?.listValue?.compactMap { $0.mapValue?["stepper"]?.stringValue } == ["wishlist/movies"])
        #expect(bindings["pages"]?.mapValue?["bindings"]?.mapValue?["matching"] == 2)
        #expect(bindings["pages"]?.mapValue?["bindings"]?.mapValue?["next"] == .null)

        let listed = try topology.run(
            "flowctl", ["status", "--bindings", "--prefix", "w", "--limit", "1", "--config", topology.configPath])
        #expect(listed.status == 0, "\(listed.output)")
        #expect(listed.output.contains("watched/movies -> WatchedFlow#1 @ watched/movies"), "\(listed.output)")
        #expect(listed.output.contains("bindings 1–1 of 2; next page: --offset 1"), "\(listed.output)")
        let steppers = try topology.run(
            "flowctl", ["status", "--steppers", "--prefix", "w", "--config", topology.configPath])
        #expect(
            steppers.output.contains("watched/movies  accepted 0\nwishlist/movies  accepted 0"), "\(steppers.output)")
        #expect(steppers.output.contains("steppers 1–2 of 2"), "\(steppers.output)")
        let everyFlow = try topology.run(
            "flowctl", ["status", "--flows", "--all", "--limit", "1", "--config", topology.configPath])
        #expect(flowIDs.allSatisfy { id in everyFlow.output.contains(id) }, "\(everyFlow.output)")
        #expect(
            everyFlow.output.split(separator: "\n").filter { $0.hasPrefix("flows 1") || $0.hasPrefix("flows ") }.count
                == 3)
    }

    @Test("--log-format json: flowd and flowctl write one JSON object a line")
    func structuredLogs() throws {
        let topology = try demoTopology()
        let silent = try topology.run(
            "flowctl", ["status", "--timeout", "0.3", "--log-format", "json", "--config", topology.configPath])
        #expect(silent.status == 2, "\(silent.output)")
        let note = try #require(silent.output.split(separator: "\n").first.map(String.init))
        guard case .map(let record) = try WireJSON.decode(note) else {
            Issue.record("not a JSON object: \(note)")
            return
        }
        #expect(record["level"] == "error" && record["logger"] == "flowctl", "\(record)")
        #expect(record["message"]?.stringValue?.contains("is it running?") == true, "\(record)")

        let flowd = try topology.startFlowd(arguments: ["--log-format", "json"])
        try tap(topology, "apikey", "apiKeyIsComplete")
        let lines = flowd.output.split(separator: "\n").map(String.init)
        #expect(lines.contains { $0.contains("flowd listening") }, "\(flowd.output)")
        for line in lines {
            guard case .map(let record) = try WireJSON.decode(line), record["level"] != nil, record["message"] != nil
            else {
                Issue.record("not a log record: \(line)")
                continue
            }
        }
    }

    @Test("flowctl config prints the topology as the daemons load it, variables expanded, as YAML or JSON")
    func flowctlConfig() throws {
        let topology = try demoTopology()
        let json = try topology.run("flowctl", ["config", "--json", "--config", topology.configPath])
        #expect(json.status == 0, "\(json.output)")
        guard case .map(let config) = try WireJSON.decode(json.output.trimmingCharacters(in: .whitespacesAndNewlines))
        else {
            Issue.record("not a JSON object: \(json.output)")
            return
        }
        #expect(config["endpoints"]?.mapValue?["ingress"]?.stringValue == topology.config.endpoints.ingress)
        #expect(config["heartbeatMilliseconds"] == 50 && config["reactors"]?.mapValue?["demo"] != nil)
        let yaml = try topology.run("flowctl", ["config", "--config", topology.configPath])
        #expect(
            yaml.status == 0 && yaml.output.contains("ingress: \(topology.config.endpoints.ingress)"), "\(yaml.output)")
    }

    @Test("flowctl names the problem and the fix")
    func flowctlErrors() throws {
        let topology = try demoTopology()
        let missing = try topology.run("flowctl", ["status", "--config", "/nonexistent.yaml"])
        #expect(missing.status != 0)
        #expect(missing.output.contains("/nonexistent.yaml does not exist"))
        let noDaemon = try topology.run(
            "flowctl",
            ["step", "apiKeyIsComplete", "--as", "apikey", "--timeout", "0.5", "--config", topology.configPath])
        #expect(noDaemon.status != 0)
        #expect(noDaemon.output.contains("is it running?"))
        let badParam = try topology.run(
            "flowctl", ["step", "moviePicked", "withMovieId", "--as", "x", "--config", topology.configPath])
        #expect(badParam.status != 0)
        #expect(badParam.output.contains("is not key=value"))
        #expect(badParam.output.contains("Usage:"), "a usage error shows the usage")
        #expect(!missing.output.contains("Usage:"), "a config error is not a usage error: \(missing.output)")
        #expect(noDaemon.status == 2, "no answer: \(noDaemon.output)")
        // Every "no answer" exits 2, as --help says.
        let noStatus = try topology.run("flowctl", ["status", "--timeout", "0.5", "--config", topology.configPath])
        #expect(noStatus.status == 2 && noStatus.output.contains("is it running?"), "\(noStatus.output)")
        let noState = try topology.run(
            "flowctl", ["state", "counter", "--timeout", "0.5", "--config", topology.configPath])
        #expect(noState.status == 2 && noState.output.contains("is the reactor host running?"), "\(noState.output)")
        // A huge parameter is quoted, not echoed whole.
        let huge = try topology.run(
            "flowctl",
            [
                "step", "moviePicked", "n=" + String(repeating: "7", count: 300), "--as", "x", "--config",
                topology.configPath,
            ])
        #expect(huge.status == 64 && huge.output.contains("(300 digits)"), "\(huge.output)")
        #expect(!huge.output.contains(String(repeating: "7", count: 65)), "\(huge.output)")
        // --config before the subcommand applies to it.
        let before = try topology.run("flowctl", ["--config", "/nonexistent.yaml", "action", "counter", "increase"])
        #expect(before.status != 0 && before.output.contains("/nonexistent.yaml does not exist"), "\(before.output)")
        #expect(!before.output.contains("Unknown option"), "\(before.output)")
    }
}

@Suite("A Python stepper against flowd", .serialized)
struct PythonStepperTests {
    @Test("publish_step.py publishes a step as a stepper and receives its didNavigate")
    func pythonStepperRoundTrip() throws {
        let topology = try demoTopology()
        try topology.startFlowd()
        let script = packageRoot.appendingPathComponent("docs/examples/publish_step.py").path
        let python = Process()
        python.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        python.arguments = [
            "python3", script, "ipc://\(topology.directory.path)/ingress.sock", "apikey", "apiKeyIsComplete",
            "--watch", "ipc://\(topology.directory.path)/events.sock", "--timeout", "10",
        ]
        let output = Pipe()
        python.standardOutput = output
        python.standardError = output
        try python.run()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        python.waitUntilExit()
        #expect(python.terminationStatus == 0, "\(text)")
        #expect(text.contains("ack from flowd#"))
        #expect(text.contains("did navigate flow=MainFlow step=apiKeyIsComplete presentable=apikey"))
    }
}

@Suite("A coordinator with flows written in Swift", .serialized)
struct SwiftFlowsTests {
    @Test("movie-app runs typed Swift flows on the same coordinator service")
    func typedFlows() throws {
        try withTopology(configFile: demoConfig) { topology in
            let app = try topology.start(
                "movie-app", arguments: ["--config", topology.configPath], ready: .init(control: true))
            let trace = try topology.navigationTrace()
            try topology.step("apiKeyIsComplete", as: "apikey")
            try topology.step("moviePicked", ["withMovieId": 23452], as: "wishlist/movies")
            // adapt turns an invalid movie id into the list, as the flow's Swift code says.
            try topology.step("moviePicked", ["withMovieId": 0], as: "wishlist/movie/23452")
            try trace.expect([
                "MainFlow.apiKeyIsComplete @ apikey",
                "WishlistFlow.movieList @ wishlist",
                "WatchedFlow.movieList @ watched",
                "WishlistFlow.moviePicked(withMovieId: 23452) @ wishlist/movies",
                "WishlistFlow.movieList @ wishlist/movie/23452",
            ])
            // A step AppStep cannot decode is refused, with the decoding error.
            try topology.step("moviePicked", ["withMovieId": "not a number"], as: "dashboard")
            let refusal = try trace.expectDiagnostic(.unknownStep)
            #expect(
                refusal.message.contains("expected Int for withMovieId, got string \"not a number\""),
                "\(refusal.message)")
            // flowctl says so, with the class's exit status.
            let cli = try topology.run(
                "flowctl",
                ["step", "moviePicked", "withMovieId=abc", "--as", "dashboard", "--config", topology.configPath])
            #expect(cli.status == 7, "\(cli.output)")
            #expect(cli.output.contains("refused: unknown-step"), "\(cli.output)")
            try trace.expectDiagnostic(.unknownStep)
            try trace.expectNothingMore()
            #expect(app.terminate() == 0)
        }
    }
}

@Suite("Stepper processes", .serialized)
struct StepperProcessTests {
    @Test("A stepper started before its binding emits its initial step once bound, then its ready steps")
    func initialStepThenReady() throws {
        let topology = try demoTopology()
        try topology.startFlowd()
        let events = try topology.subscribe(["nav/did/", "diag/"])
        let config = topology.config
        let finished = DispatchSemaphore(value: 0)
        let failure = LockedBox<String?>(nil)
        Thread.detachNewThread {
            defer { finished.signal() }
            do {
                let stepper = try StepperProcess(stepperID: "wishlist/movies", config: config)
                try stepper.run(initialStep: CanonicalStep("moviePicked", ["withMovieId": 1]), timeout: .seconds(20)) {
                    publisher in
                    try publisher.publish("castPicked", ["withCastId": 9])
                    _ = try publisher.waitForAcknowledgement()
                }
            } catch {
                failure.value = "\(error)"
            }
        }
        // The stepper is not bound yet: the wishlist tab does not exist until the api key is in.
        try tap(topology, "apikey", "apiKeyIsComplete")
        #expect(finished.wait(timeout: .now() + 30) == .success)
        #expect(failure.value == nil)
        let trace = lines(try events.collect(5)).map {
            $0.replacingOccurrences(of: #" presentable=\S+"#, with: "", options: .regularExpression)
        }
        #expect(
            Array(trace.prefix(4)) == [
                "did navigate flow=MainFlow step=apiKeyIsComplete",
                "did navigate flow=WishlistFlow step=movieList",
                "did navigate flow=WatchedFlow step=movieList",
                "did navigate flow=WishlistFlow step=moviePicked(withMovieId: 1)",
            ])
        // The ready step comes after the initial one: by then movie/1 covers the list, so it is reported.
        #expect(
            trace.last?.hasPrefix("diagnostic not-visible: step castPicked(withCastId: 9) from wishlist/movies")
                == true, "\(trace)")
    }
}

/// A value shared with a background thread.
final class LockedBox<Value: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: Value
    init(_ value: Value) { stored = value }
    var value: Value {
        get { lock.withLock { stored } }
        set { lock.withLock { stored = newValue } }
    }
}

@Suite("Security: CURVE with ZAP on tcp, private ipc files", .serialized)
struct SecurityTests {
    @Test("flowctl keygen writes a private secret key and its public key")
    func keygen() throws {
        let topology = try demoTopology()
        let keys = topology.directory.appendingPathComponent("keys").path
        let result = try topology.run("flowctl", ["keygen", "client", "--dir", keys])
        #expect(result.status == 0, "\(result.output)")
        let attributes = try FileManager.default.attributesOfItem(atPath: keys + "/client.key")
        #expect((attributes[.posixPermissions] as? NSNumber)?.intValue == 0o600)
        let again = try topology.run("flowctl", ["keygen", "client", "--dir", keys])
        #expect(again.status != 0)
        #expect(again.output.contains("pass --force"))
    }

    @Test("A known client key gets in; an unknown one gets no step, subscription or status in")
    func curveAllowsOnlyKnownKeys() throws {
        let keys = try TestKeys(["flowd", "client", "intruder"])
        defer { keys.remove() }
        let demo = try String(contentsOf: packageRoot.appendingPathComponent("config/demo.yaml"), encoding: .utf8)
        let (ingressEndpoint, eventsEndpoint, controlEndpoint) = (
            try freeTCPEndpoint(), try freeTCPEndpoint(), try freeTCPEndpoint()
        )
        func topologyYAML(clientKey: String) -> String {
            demo.replacingOccurrences(of: "ipc://${FLOWBUS_RUN_DIR:-/tmp/flowbus}/ingress.sock", with: ingressEndpoint)
                .replacingOccurrences(of: "ipc://${FLOWBUS_RUN_DIR:-/tmp/flowbus}/events.sock", with: eventsEndpoint)
                .replacingOccurrences(of: "ipc://${FLOWBUS_RUN_DIR:-/tmp/flowbus}/control.sock", with: controlEndpoint)
                    + """

                    heartbeatMilliseconds: 50
                    security:
                      serverKey: \(keys.path)/flowd.key
                      serverPublicKey: \(keys.path)/flowd.pub
                      clientKey: \(keys.path)/\(clientKey).key
                      allowedClients: [\(keys.path)/client.pub]
                    """
        }
        let topology = try TestTopology(configYAML: topologyYAML(clientKey: "client"))
        let flowd = try topology.startFlowd()
        let events = try topology.subscribe(["nav/did/"])
        try tap(topology, "apikey", "apiKeyIsComplete")
        #expect(
            lines(try events.collect(3)).first == "did navigate flow=MainFlow step=apiKeyIsComplete presentable=apikey")

        let intruder = try TestTopology(configYAML: topologyYAML(clientKey: "intruder"))
        let stepper = try intruder.stepper("wishlist/movies")
        try stepper.publish("moviePicked", ["withMovieId": 1])
        #expect(try stepper.waitForAcknowledgement(timeout: .milliseconds(1500)) == false)
        let eavesdropper = try BusSubscriber(endpoint: eventsEndpoint, topics: [""], curve: intruder.config.curve)
        #expect(try eavesdropper.waitUntilConnected(timeout: .milliseconds(500)) == false)
        #expect(throws: (any Error).self) {
            try StatusClient.fetch(endpoint: controlEndpoint, curve: intruder.config.curve, timeout: .milliseconds(500))
        }

        // Nothing of the intruder's was applied, its attempts were counted, and no secret was logged.
        let late = try events.next(timeout: .milliseconds(200))
        #expect(late == nil, "\(String(describing: late))")
        let refused = try topology.status()["ingress"]?.mapValue?["refused"]?.mapValue?["unauthorized"]?.intValue ?? 0
        #expect(refused >= 1)
        for secret in keys.secrets { #expect(!flowd.output.contains(secret)) }
    }

    @Test("ipc socket files are private to their owner")
    func ipcPermissions() throws {
        let topology = try demoTopology()
        try topology.startFlowd()
        for name in ["ingress", "events", "control"] {
            let attributes = try FileManager.default.attributesOfItem(
                atPath: topology.directory.appendingPathComponent("\(name).sock").path)
            #expect((attributes[.posixPermissions] as? NSNumber)?.intValue == 0o600, "\(name).sock")
        }
    }
}

@Suite("flowctl tools", .serialized)
struct FlowctlToolTests {
    @Test("flowctl doctor passes on a running topology and names the fix when flowd is down")
    func doctor() throws {
        let topology = try demoTopology()
        let down = try topology.run("flowctl", ["doctor", "--config", topology.configPath])
        #expect(down.status == 1)
        #expect(down.output.contains("FAIL flowd answers"))
        #expect(down.output.contains("start it: flowd --config"))
        try topology.startFlowd()
        try topology.start("reactor-host", arguments: ["--config", topology.configPath, "--host", "demo"])
        let subscriber = try BusSubscriber(
            endpoint: try #require(topology.config.reactors["demo"]).states, topics: ["hb/"])
        #expect(try subscriber.waitUntilConnected(timeout: .seconds(20)))
        let up = try topology.run("flowctl", ["doctor", "--config", topology.configPath])
        #expect(up.status == 0, "\(up.output)")
        #expect(up.output.contains("all checks passed"))
    }

    @Test("flowctl echo --stats reports rates per topic")
    func echoStats() throws {
        let topology = try demoTopology()
        try topology.startFlowd()
        let echo = try topology.start(
            "flowctl", arguments: ["echo", "did", "--stats", "--count", "2", "--config", topology.configPath])
        _ = try topology.subscribe(["nav/did/"])
        try tap(topology, "apikey", "apiKeyIsComplete")
        #expect(echo.waitForExit(timeout: .seconds(10)) == 0)
        #expect(echo.output.contains("msg/s over"))
    }

    @Test("flowctl graph draws the declared flows and the live tree")
    func graph() throws {
        let topology = try demoTopology()
        let declared = try topology.run("flowctl", ["graph", "--config", topology.configPath])
        #expect(declared.status == 0)
        #expect(declared.output.contains("\"MainFlow.apiKeyIsComplete\" -> \"tabs:dashboard\" [label=\"tabs\"];"))
        try topology.startFlowd()
        try tap(topology, "apikey", "apiKeyIsComplete")
        let live = try topology.run(
            "flowctl", ["graph", "--live", "--format", "mermaid", "--config", topology.configPath])
        #expect(live.status == 0)
        #expect(live.output.contains("flowchart LR"))
        #expect(live.output.contains("stack wishlist"))
    }
}

@Suite("Dead peers", .serialized)
struct DeadPeerTests {
    @Test(
        "A stepper whose heartbeats stop is reported dead within the configured intervals, in status and as a diagnostic"
    )
    func deadStepper() throws {
        let topology = try demoTopology()
        try topology.startFlowd()
        let diagnostics = try topology.subscribe(["diag/"])
        var source = ""
        do {
            let stepper = try topology.stepper("apikey")
            stepper.heartbeatInterval = .milliseconds(50)
            source = stepper.sourceID
            let until = ContinuousClock.now + .milliseconds(400)
            while ContinuousClock.now < until { try stepper.poll(timeout: .milliseconds(10)) }
            let peer = try topology.status()["peers"]?.mapValue?[source]?.mapValue
            #expect(peer?["alive"] == true)
            #expect(peer?["heartbeats"] == true)
        }
        // The stepper is gone: after 3 × 50 ms of silence flowd reports it.
        let reported = try diagnostics.collect(1, timeout: .seconds(5)) { message in
            if case .diagnostic(let diagnostic) = message { return diagnostic.reason == .peerDead }
            return false
        }
        guard case .diagnostic(let diagnostic)? = reported.first else {
            Issue.record("no peer-dead diagnostic")
            return
        }
        #expect(diagnostic.details["source"]?.stringValue == source)
        #expect(try topology.status()["peers"]?.mapValue?[source]?.mapValue?["alive"] == false)
    }
}
