import FlowBusClient
import FlowBusConfiguration
import FlowBusCoordinator
import FlowBusReactorHost
import FlowBusTesting
import FlowBusTools
import FlowBusWire
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A small topology built in code: a home screen that opens items, each item going back.
private func itemsTopology() throws -> TopologyBuilder {
    try TopologyBuilder()
        .flows(
            yaml: """
                Main:
                  id: main
                  steps:
                    start:
                      - setRoot: { screen: home, stepper: home }
                    open:
                      - push: { screen: "item/{id}", stepper: "item/{id}" }
                    back:
                      - pop
                """
        )
        .coordinator(flow: "Main", step: "start")
        .reactorHost("app", serves: ["counter"])
}

private struct Counter: Decodable, Equatable, CustomStringConvertible {
    var value: Int
    var isLoading: Bool
    var description: String { "Counter(value: \(value), isLoading: \(isLoading))" }
}

/// The lines of a failure's message, for checking its diff.
private func lines(of failure: ExpectationFailure?) -> [String] {
    failure?.message.components(separatedBy: "\n") ?? []
}

@Suite("FlowBusTesting: the distributed-testing kit itself", .serialized)
struct FlowBusTestingTests {
    @Test("Navigation literals: Flow.step, an optional presentable, spaces outside quotes ignored")
    func navigationLiterals() throws {
        let expected: Navigation = "WishlistFlow.moviePicked(withMovieId: 23452) @ wishlist/movies"
        #expect(expected.flow == "WishlistFlow")
        #expect(expected.step == "moviePicked(withMovieId: 23452)")
        #expect(expected.presentable == "wishlist/movies")
        let event = Navigation(
            flow: "WishlistFlow", step: "moviePicked", ["withMovieId": 23452], presentable: "wishlist/movies")
        #expect(expected.matches(event))
        #expect(
            Navigation(stringLiteral: "WishlistFlow.moviePicked(withMovieId:23452)").matches(event),
            "no presentable: any matches")
        #expect(!Navigation(stringLiteral: "WishlistFlow.moviePicked(withMovieId: 1)").matches(event))
        #expect(!Navigation(stringLiteral: "WishlistFlow.moviePicked(withMovieId: 23452) @ home").matches(event))
        let quoted = Navigation(flow: "F", step: "s", ["name": "a b"])
        #expect(Navigation(stringLiteral: #"F.s(name: "a b")"#).matches(quoted))
        #expect(!Navigation(stringLiteral: #"F.s(name: "ab")"#).matches(quoted), "spaces inside quotes count")
    }

    @Test("A topology built in code: its config, and its launch: entries started in order, each once ready")
    func builderAndLaunch() throws {
        let builder = try itemsTopology()
            .launch(
                "marker", ["sh", "-c", "echo marker up; exec sleep 60"], ready: .init(logLine: "^marker up$"),
                after: ["flowd"]
            )
            .launch("setup", ["sh", "-c", "echo set up"], after: ["marker"], oneShot: true)
            .launchFlowd()
        let started = try withTopology(builder) { topology in
            #expect(topology.config.coordinator?.flow == "Main")
            #expect(topology.config.heartbeatMilliseconds == 50)
            #expect(topology.config.endpoints.ingress == "ipc://\(topology.directory.path)/ingress.sock")
            #expect(
                topology.config.reactors["app"]?.states == "ipc://\(topology.directory.path)/reactors-app-states.sock")
            let processes = try topology.launch()
            #expect(processes.map(\.name) == ["flowd", "marker", "setup"], "dependencies first")
            #expect(processes[0].isRunning && processes[1].isRunning)
            #expect(processes[2].termination == .exited(0))
            #expect(processes[2].output == "set up\n")
            let status = try topology.status()
            #expect(status["bindings"]?.listValue?.contains { $0.mapValue?["stepper"] == "home" } == true)
            return processes
        }
        // Stopped by the scope's end; output and exit status outlive the directory.
        #expect(started[0].termination == .exited(0), "flowd exits 0 on SIGTERM")
        #expect(started[1].termination == .signalled(SIGTERM))
        #expect(started[1].output == "marker up\n")
    }

    @Test("launch(only:) starts the named entries and what they are after, not the others")
    func launchOnly() throws {
        let builder = try itemsTopology()
            .launchFlowd()
            .launch("extra", ["sh", "-c", "exec sleep 60"])
            .launch(
                "marker", ["sh", "-c", "echo marker up; exec sleep 60"], ready: .init(logLine: "marker up"),
                after: ["flowd"])
        try withTopology(builder) { topology in
            let started = try topology.launch(only: ["marker"])
            #expect(started.map(\.name) == ["flowd", "marker"])
            let unknown = #expect(throws: HarnessError.self) { try topology.launch(only: ["nobody"]) }
            #expect(unknown?.code == .notDeclared)
        }
    }

    @Test("A topology explores its declared flows without starting a daemon")
    func exploresDeclaredFlows() async throws {
        let topology = try TestTopology(configFile: "config/demo.yaml")
        let exploration = try await topology.explore(limits: .init(depth: 4, states: 500))
        #expect(exploration.unreachable.isEmpty, "\(exploration.text)")
        #expect(exploration.screens.count == 11 && topology.processes.isEmpty)
    }

    @Test("A topology's flows written in Swift are walked on a coordinator of the walk's own, with actions")
    func walksSwiftFlows() async throws {
        let topology = try TestTopology(configFile: "config/movie-app.yaml")
        let report = try await topology.walk(count: 150, seed: 11, renderer: true, coordinator: "movie-app")
        #expect(report.failure == nil, "\(report.text)")
        #expect(report.modelFree && report.messages.count == 150 && report.states > 0, "\(report.text)")
        #expect(report.messages.contains { if case .action = $0 { true } else { false } })
        #expect(topology.processes.isEmpty, "the walk runs daemons of its own")
    }

    @Test("Harness errors carry a code a test can match: not built, not declared, an invalid config or argument")
    func harnessErrorCodes() throws {
        func code(_ error: any Error) -> HarnessError.Code? { (error as? HarnessError)?.code }
        #expect { _ = try BuiltProducts.executable("flowbus-no-such-product") } throws: { code($0) == .notBuilt }
        #expect { _ = try TestTopology(configYAML: "endpoints: 3\n") } throws: { code($0) == .invalidConfig }
        try withTopology(itemsTopology()) { topology in
            #expect { _ = try topology.start("flowbus-no-such-product") } throws: { code($0) == .notBuilt }
            #expect { _ = try topology.startReactorHost("nobody") } throws: { code($0) == .notDeclared }
            let sleeper = try topology.start("sleep", arguments: ["60"])
            #expect { _ = try sleeper.waitForOutput(matching: "(", timeout: .milliseconds(10)) } throws: {
                code($0) == .invalidArgument
            }
        }
        #expect(HarnessError.Code.timedOut.description == "timed-out")
    }

    @Test("An exact trace passes; diagnostics are asserted beside it")
    func exactTrace() throws {
        try withTopology(itemsTopology()) { topology in
            try topology.startFlowd()
            let trace = try topology.navigationTrace()
            try topology.step("open", ["id": 1], as: "home")
            try topology.step("open", ["id": 2], as: "home")  // home is covered by item/1: dropped
            try topology.step("back", as: "item/1")
            try trace.expect(["Main.open(id: 1) @ home", "Main.back @ item/1"])
            let drop = try trace.expectDiagnostic(.notVisible, stepper: "home")
            #expect(drop.details["flow"] == "Main")
            try trace.expectNothingMore()
        }
    }

    @Test("The exhaustive assertion fails on an extra navigation, with a diff")
    func extraNavigationFails() throws {
        try withTopology(itemsTopology()) { topology in
            try topology.startFlowd()
            let trace = try topology.navigationTrace()
            try topology.step("open", ["id": 1], as: "home")
            try topology.step("back", as: "item/1")
            // Main.open is not the next one: a mismatch, reported at once.
            let mismatch = #expect(throws: ExpectationFailure.self) { try trace.expect(["Main.back"]) }
            #expect(
                lines(of: mismatch).contains("the navigation trace differs (exhaustive):"), "\(lines(of: mismatch))")
            #expect(lines(of: mismatch).contains("  + Main.open(id: 1) @ home"), "\(lines(of: mismatch))")
            #expect(lines(of: mismatch).contains("    Main.back @ item/1"), "\(lines(of: mismatch))")
            // Asserting only the first leaves the second unasserted.
            try trace.expect(["Main.open(id: 1)"])
            let extra = #expect(throws: ExpectationFailure.self) { try trace.expectNothingMore() }
            #expect(lines(of: extra) == ["navigations received but not asserted:", "  + Main.back @ item/1"])
        }
    }

    @Test("The exhaustive assertion fails on a missing navigation, with a diff")
    func missingNavigationFails() throws {
        try withTopology(itemsTopology()) { topology in
            try topology.startFlowd()
            let trace = try topology.navigationTrace()
            try topology.step("open", ["id": 1], as: "home")
            let missing = #expect(throws: ExpectationFailure.self) {
                try trace.expect(["Main.open(id: 1)", "Main.open(id: 2)"], timeout: .seconds(1))
            }
            #expect(
                lines(of: missing) == [
                    "expected navigations did not all arrive within 1 s (exhaustive):",
                    "(- expected but not received, + received but not expected)",
                    "    Main.open(id: 1) @ home",
                    "  - Main.open(id: 2)",
                    "diagnostics received meanwhile: none",
                ])
            try trace.expect(["Main.open(id: 1)"])
        }
    }

    @Test("An exhaustive trace fails as soon as flowd refuses the awaited step, the refusal in its diff")
    func refusalFailsAtOnce() throws {
        try withTopology(itemsTopology()) { topology in
            try topology.startFlowd()
            let trace = try topology.navigationTrace()
            try topology.step("open", ["id": 1], as: "home")
            try trace.expect(["Main.open(id: 1)"])
            // home is covered by item/1: its step is dropped, which explains the miss at once.
            try topology.step("open", ["id": 2], as: "home")
            let started = ContinuousClock.now
            let refused = #expect(throws: ExpectationFailure.self) {
                try trace.expect(["Main.open(id: 2)"], timeout: .seconds(300))
            }
            #expect(ContinuousClock.now - started < .seconds(150), "not the whole timeout")
            let text = lines(of: refused)
            #expect(text.first == "flowd refused a step the trace awaits (not-visible) (exhaustive):", "\(text)")
            #expect(text.contains("  - Main.open(id: 2)"), "\(text)")
            #expect(text.contains("diagnostics received meanwhile:"), "\(text)")
            #expect(text.contains { $0.hasPrefix("  ! diagnostic not-visible") && $0.contains("home") }, "\(text)")
            try trace.expectDiagnostic(.notVisible, stepper: "home")
        }
    }

    @Test("Relaxed: in order with others skipped, or ignoring some steps")
    func relaxedTraces() throws {
        try withTopology(itemsTopology()) { topology in
            try topology.startFlowd()
            let trace = try topology.navigationTrace()
            let quiet = try topology.navigationTrace(diagnostics: false) { $0.step == "back" }
            for id in 1...3 {
                try topology.step("open", ["id": .int(Int64(id))], as: id == 1 ? "home" : "item/\(id - 1)")
            }
            try topology.step("back", as: "item/3")
            try trace.expect(["Main.open(id: 1)", "Main.open(id: 3)"], exhaustivity: .off)
            try trace.expect(["Main.back"], ignoring: [], timeout: .seconds(5))
            // The ignored ones are skipped; the others must still be exact.
            try quiet.expect(["Main.open(id: 1)", "Main.open(id: 2)", "Main.open(id: 3)"])
            let wrongOrder = #expect(throws: ExpectationFailure.self) {
                try quiet.expect(["Main.open(id: 2)"], exhaustivity: .off, timeout: .seconds(1))
            }
            #expect(
                wrongOrder?.message.hasPrefix(
                    "expected navigations did not all arrive within 1 s (in order, others skipped)") == true)
            let relaxed = try topology.navigationTrace(exhaustivity: .off)
            try topology.step("back", as: "item/2")
            try topology.step("back", as: "item/1")
            try relaxed.expect(["Main.back @ item/1"])
            // A relaxed trace leaves nothing to check at the end; the exhaustive ones must be drained.
            try trace.expect(["Main.back", "Main.back"])
            let ignored = #expect(throws: ExpectationFailure.self) {
                try trace.expect(["Main.open(id: 4)"], ignoring: ["Main.back"], timeout: .seconds(1))
            }
            #expect(lines(of: ignored).contains { $0.hasPrefix("  - Main.open(id: 4)") })
        }
    }

    @Test("States: exact sequences pass, an extra or a wrong state fails, relaxed skips")
    func stateSequences() throws {
        try withTopology(itemsTopology()) { topology in
            try topology.startReactorHost("app", arguments: ["--counter-delay-ms", "20"])
            let counter = try topology.stateTrace(of: "counter", as: Counter.self)
            #expect(counter.initial == Counter(value: 0, isLoading: false))
            try topology.send("increase", to: "counter")
            let wrong = #expect(throws: ExpectationFailure.self) {
                try counter.expect([Counter(value: 0, isLoading: true), Counter(value: 1, isLoading: false)])
            }
            #expect(lines(of: wrong).contains("  + Counter(value: 1, isLoading: true)"), "\(lines(of: wrong))")
            try counter.expect([
                Counter(value: 0, isLoading: true), Counter(value: 1, isLoading: true),
                Counter(value: 1, isLoading: false),
            ])
            try counter.expectNothingMore()

            try topology.send("decrease", to: "counter")
            try counter.expect([Counter(value: 0, isLoading: false)], exhaustivity: .off)
            #expect(counter.latest == Counter(value: 0, isLoading: false))

            // A relaxed trace of the same reactor tells when the host has published the last state.
            let watcher = try topology.stateTrace(of: "counter", as: Counter.self, exhaustivity: .off)
            try topology.send("increase", to: "counter")
            try counter.expect([Counter(value: 0, isLoading: true)])
            try watcher.expect([Counter(value: 1, isLoading: false)])
            let unasserted = #expect(throws: ExpectationFailure.self) { try counter.expectNothingMore() }
            #expect(
                lines(of: unasserted) == [
                    "states of counter received but not asserted:",
                    "  + Counter(value: 1, isLoading: true)",
                    "  + Counter(value: 1, isLoading: false)",
                ])
        }
    }

    @Test("An action the host refuses throws Refused, with its diagnostic")
    func refusedAction() throws {
        try withTopology(itemsTopology()) { topology in
            try topology.startReactorHost("app")
            let refused = #expect(throws: Refused.self) { try topology.send("nonsense", to: "counter") }
            #expect(refused?.diagnostic.reason == .badAction)
            #expect(
                refused?.description.hasPrefix("the action nonsense to counter was refused: bad-action") == true,
                "\(String(describing: refused))")
        }
    }

    @Test("A daemon that dies while a trace waits fails the wait at once, with its name, signal and output")
    func deathWhileWaiting() throws {
        try withTopology(itemsTopology()) { topology in
            let flowd = try topology.startFlowd(arguments: ["--log-level", "debug"])
            let trace = try topology.navigationTrace()
            #expect(kill(flowd.processIdentifier, SIGKILL) == 0)
            // A long timeout: the death is what ends the wait, not the clock.
            let died = #expect(throws: ProcessDied.self) {
                try trace.expect(["Main.open(id: 1)"], timeout: .seconds(120))
            }
            #expect(died?.name == "flowd")
            #expect(died?.termination == .signalled(SIGKILL))
            #expect(
                died?.description.contains("flowd (pid \(flowd.processIdentifier)) was killed by signal 9 (SIGKILL)")
                    == true)
            #expect(died?.outputTail.contains("flowd listening") == true, "\(died?.outputTail ?? "")")
            // Reported once: the scope's end does not fail on it again.
        }
    }

    @Test("A process that exits by itself is reported with its exit status and output; a one-shot is not")
    func deathDetectedAtTheEnd() throws {
        var directory: URL?
        let died = #expect(throws: ProcessDied.self) {
            try withTopology(itemsTopology()) { topology in
                directory = topology.directory
                let job = try topology.start("sh", arguments: ["-c", "echo done"], name: "job", mayExit: true)
                let daemon = try topology.start(
                    "sh", arguments: ["-c", "echo starting; echo no config >&2; exit 3"], name: "daemon")
                #expect(job.waitForExit(timeout: .seconds(10)) == 0)
                #expect(daemon.waitForExit(timeout: .seconds(10)) == 3)
            }
        }
        #expect(died?.name == "daemon")
        #expect(died?.termination == .exited(3))
        #expect(died?.outputTail == "starting\nno config")
        #expect(died?.context == "before the end of the test")
        #expect(directory.map { FileManager.default.fileExists(atPath: $0.path) } == false)
    }

    @Test("After a failure every process is stopped and the directory removed; output and exit status stay readable")
    func cleanupAfterFailure() throws {
        var directory: URL?
        var processes: [ManagedProcess] = []
        let failure = #expect(throws: HarnessError.self) {
            try withTopology(itemsTopology()) { topology in
                directory = topology.directory
                processes.append(try topology.startFlowd())
                processes.append(
                    try topology.start(
                        "sh", arguments: ["-c", "echo sleeping; exec sleep 60"], name: "sleeper",
                        ready: .init(logLine: "sleeping")))
                throw HarnessError(.failed, "the test failed here")
            }
        }
        #expect(failure?.description == "the test failed here")
        #expect(failure?.code == .failed)
        let removed = try #require(directory)
        #expect(!FileManager.default.fileExists(atPath: removed.path))
        #expect(processes.map(\.isRunning) == [false, false])
        #expect(processes.map(\.termination) == [.exited(0), .signalled(SIGTERM)])
        #expect(processes[1].output == "sleeping\n")
        #expect(processes[0].output.contains("flowd listening"))
    }

    @Test("Without withTopology, releasing the topology cleans up too")
    func deinitCleansUp() throws {
        var directory: URL?
        var sleeper: ManagedProcess?
        do {
            let topology = try TestTopology(itemsTopology())
            directory = topology.directory
            sleeper = try topology.start("sleep", arguments: ["60"])
            #expect(FileManager.default.fileExists(atPath: topology.directory.path))
        }
        #expect(sleeper?.termination == .signalled(SIGTERM))
        #expect(directory.map { FileManager.default.fileExists(atPath: $0.path) } == false)
    }

    @Test("A navigation left unasserted fails the end of withTopology")
    func unassertedAtTheEnd() throws {
        let failure = #expect(throws: ExpectationFailure.self) {
            try withTopology(itemsTopology()) { topology in
                try topology.startFlowd()
                _ = try topology.navigationTrace()
                try topology.step("open", ["id": 5], as: "home")
            }
        }
        #expect(
            lines(of: failure) == [
                "at the end of the test: navigations received but not asserted:", "  + Main.open(id: 5) @ home",
            ])
    }

    @Test("A process that is not ready in time, or dies starting, fails start with its output")
    func readinessFailures() throws {
        try withTopology(itemsTopology()) { topology in
            let slow = #expect(throws: HarnessError.self) {
                try topology.start(
                    "sh", arguments: ["-c", "echo waiting; exec sleep 60"], name: "slow",
                    ready: .init(logLine: "^never$"), timeout: .milliseconds(300))
            }
            #expect(
                slow?.description.hasPrefix("slow was not ready (log line /^never$/) within 300 ms") == true,
                "\(String(describing: slow))")
            #expect(slow?.code == .timedOut)
            topology.process(named: "slow")?.terminate()
            let crash = #expect(throws: ProcessDied.self) {
                try topology.start(
                    "sh", arguments: ["-c", "echo bad flag >&2; exit 64"], name: "crasher", ready: .init(control: true))
            }
            #expect(crash?.termination == .exited(64))
            #expect(crash?.outputTail == "bad flag")
        }
    }
}
