import FlowBusClient
import FlowBusConfiguration
import FlowBusCoordinator
import FlowBusReactorHost
import FlowBusTesting
import FlowBusTools
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A topology of ipc endpoints in the test's directory, with `launchYAML` as its launch: section.
private func launchTopology(_ launchYAML: String) throws -> TestTopology {
    try TestTopology(
        configYAML: """
            endpoints:
              ingress: ipc://${FLOWBUS_RUN_DIR}/ingress.sock
              events: ipc://${FLOWBUS_RUN_DIR}/events.sock
              control: ipc://${FLOWBUS_RUN_DIR}/control.sock
            launch:
            """ + "\n" + launchYAML)
}

/// Runs `flowctl launch` on the topology to completion (bounded) and returns its status and output.
private func launch(
    _ topology: TestTopology, _ arguments: [String] = [], timeout: Duration = .seconds(60)
) throws -> (status: Int32, lines: [String]) {
    let flowctl = try topology.start("flowctl", arguments: ["launch", topology.configPath] + arguments)
    guard let status = flowctl.waitForExit(timeout: timeout) else {
        flowctl.kill()
        throw HarnessError(.timedOut, "flowctl launch did not finish within \(timeout):\n\(flowctl.output)")
    }
    return (status, flowctl.output.split(separator: "\n").map(String.init))
}

/// The index of the first line matching `pattern`, or nil.
private func line(_ lines: [String], _ pattern: String) -> Int? {
    lines.firstIndex { $0.range(of: pattern, options: .regularExpression) != nil }
}

private func isAlive(_ pid: Int32) -> Bool {
    kill(pid, 0) == 0 || errno != ESRCH
}

@Suite("flowctl launch", .serialized)
struct LaunchTests {
    @Test("Processes start in dependency order, each after those it needs are ready, with prefixed output")
    func dependencyOrder() throws {
        let topology = try launchTopology(
            """
              - name: last
                command: [sh, -c, "echo last ran"]
                oneShot: true
                after: [second]
              - name: first
                command: [sh, -c, "sleep 0.3; echo first up; exec sleep 30"]
                ready: { logLine: "^first up$" }
              - name: second
                command: [sh, -c, "echo second up; exec sleep 30"]
                ready: { delayMs: 200 }
                after: [first]
            """)
        let (status, lines) = try launch(topology, ["--until-exit", "last"])
        let text = lines.joined(separator: "\n")
        #expect(status == 0, "\(text)")
        // The prefixes are padded to the longest name; no colour when the output is a file.
        let firstUp = try #require(line(lines, #"^first  \| first up$"#), "\(text)")
        let secondStarted = try #require(line(lines, #"^launch \| started second "#), "\(text)")
        let secondReady = try #require(line(lines, #"^launch \| second is ready \(200 ms delay\)$"#), "\(text)")
        let lastStarted = try #require(line(lines, #"^launch \| started last "#), "\(text)")
        let lastRan = try #require(line(lines, #"^last   \| last ran$"#), "\(text)")
        #expect(
            firstUp < secondStarted && secondStarted < secondReady && secondReady < lastStarted
                && lastStarted < lastRan, "\(text)")
        #expect(line(lines, #"^second \| second up$"#) != nil, "\(text)")
        #expect(!text.contains("\u{1B}["), "no ANSI colour when stdout is not a terminal")
        // Stopped in reverse start order.
        let stopSecond = try #require(line(lines, "stopping second"), "\(text)")
        let stopFirst = try #require(line(lines, "stopping first"), "\(text)")
        #expect(stopSecond < stopFirst)
        #expect(lines.last == "launch | everything stopped", "\(text)")
    }

    @Test("A crashing process is restarted with back-off up to its retry limit, then everything stops with status 1")
    func crashRestartsThenGivesUp() throws {
        let topology = try launchTopology(
            """
              - name: sleeper
                command: [sleep, "30"]
              - name: crasher
                command: [sh, -c, "echo crashing; exit 3"]
                restart: { maxRetries: 2, backoffMs: 50 }
            """)
        let (status, lines) = try launch(topology)
        let text = lines.joined(separator: "\n")
        #expect(status == 1, "\(text)")
        #expect(lines.filter { $0 == "crasher | crashing" }.count == 3, "started once, restarted twice:\n\(text)")
        #expect(text.contains("crasher exited with status 3; restarting in 50 ms (retry 1 of 2)"), "\(text)")
        #expect(text.contains("crasher exited with status 3; restarting in 100 ms (retry 2 of 2)"), "\(text)")
        #expect(
            text.contains("crasher exited with status 3; gave up after 2 restart(s): stopping everything"), "\(text)")
        #expect(text.contains("stopping sleeper (SIGTERM)"), "\(text)")
    }

    @Test("--until-exit returns the one-shot's exit status")
    func untilExitStatus() throws {
        let topology = try launchTopology(
            """
              - name: server
                command: [sleep, "30"]
              - name: job
                command: [sh, -c, "echo working; exit 7"]
                oneShot: true
                after: [server]
            """)
        let (status, lines) = try launch(topology, ["--until-exit", "job"])
        #expect(status == 7, "\(lines.joined(separator: "\n"))")
        #expect(lines.contains("job    | working"))
    }

    @Test(
        "An optional entry starts only with --with NAME (or --until-exit NAME); an unknown name is refused with the choices"
    )
    func optionalEntries() throws {
        let topology = try launchTopology(
            """
              - name: server
                command: [sh, -c, "echo serving; exec sleep 30"]
                ready: { logLine: "^serving$" }
              - name: extra
                command: [sh, -c, "echo extra ran"]
                oneShot: true
                optional: true
                after: [server]
            """)
        let plain = try launch(topology, ["--for", "0.5"])
        #expect(plain.status == 0)
        #expect(!plain.lines.contains("extra  | extra ran"), "\(plain.lines.joined(separator: "\n"))")
        let with = try launch(topology, ["--with", "extra", "--for", "3"])
        #expect(with.lines.contains("extra  | extra ran"), "\(with.lines.joined(separator: "\n"))")
        let until = try launch(topology, ["--until-exit", "extra"])
        #expect(until.status == 0)
        #expect(until.lines.contains("extra  | extra ran"), "\(until.lines.joined(separator: "\n"))")
        let unknown = try launch(topology, ["--with", "nothing"])
        #expect(unknown.status != 0)
        #expect(
            unknown.lines.joined(separator: "\n").contains(
                "--with nothing: no optional launch entry of that name (optional: extra)"))
    }

    @Test("--for stops everything after a duration, with status 0")
    func forDuration() throws {
        let topology = try launchTopology(
            """
              - name: server
                command: [sleep, "30"]
            """)
        let started = ContinuousClock.now
        let (status, lines) = try launch(topology, ["--for", "0.5"])
        #expect(status == 0, "\(lines.joined(separator: "\n"))")
        #expect(started.duration(to: .now) < .seconds(10))
        #expect(lines.contains("launch | --for elapsed: stopping"))
    }

    @Test("SIGTERM to flowctl stops every child, and what they started, then exits 0")
    func sigtermStopsChildren() throws {
        let topology = try launchTopology(
            """
              - name: plain
                command: [sh, -c, "echo pid=$$; exec sleep 60"]
              - name: parent
                command: [sh, -c, "sleep 60 & echo pid=$$; echo pid=$!; wait"]
                after: [plain]
            """)
        let flowctl = try topology.start("flowctl", arguments: ["launch", topology.configPath])
        let deadline = ContinuousClock.now + .seconds(20)
        var pids: [Int32] = []
        while pids.count < 3, ContinuousClock.now < deadline {
            pids = flowctl.output.split(separator: "\n").compactMap { line in
                line.range(of: #"pid=\d+$"#, options: .regularExpression).flatMap { Int32(line[$0].dropFirst(4)) }
            }
            Thread.sleep(forTimeInterval: 0.05)
        }
        try #require(pids.count == 3, "the children printed their pids:\n\(flowctl.output)")
        #expect(pids.allSatisfy(isAlive))
        #expect(flowctl.terminate(timeout: .seconds(20)) == 0, "flowctl exits 0 after a clean stop:\n\(flowctl.output)")
        let gone = ContinuousClock.now + .seconds(5)
        while pids.contains(where: isAlive), ContinuousClock.now < gone { Thread.sleep(forTimeInterval: 0.02) }
        #expect(!pids.contains(where: isAlive), "no leftovers: \(pids.filter(isAlive))\n\(flowctl.output)")
        let output = flowctl.output
        #expect(output.contains("launch | SIGTERM: stopping"), "\(output)")
        let stopParent = try #require(output.range(of: "stopping parent"))
        let stopPlain = try #require(output.range(of: "stopping plain"))
        #expect(stopParent.lowerBound < stopPlain.lowerBound)
    }

    @Test("The demo's launch section starts flowd, then the reactor host once flowd answers")
    func demoLaunch() throws {
        let demo = try String(contentsOf: packageRoot.appendingPathComponent("config/demo.yaml"), encoding: .utf8)
        // A one-shot that asks the reactor host for a state, added to the launch: section; it
        // is written first, but it is after the reactor host.
        let check = """
              - name: check
                command: [flowctl, state, counter, --config, "${FLOWBUS_CONFIG:-unused}", --timeout, "10"]
                oneShot: true
                after: [reactors]

            """
        try #require(demo.contains("\nlaunch:\n"))
        let yaml =
            demo.replacingOccurrences(of: "\nlaunch:\n", with: "\nlaunch:\n" + check) + "\nheartbeatMilliseconds: 50\n"
        let topology = try TestTopology(configYAML: yaml)
        #expect(topology.config.launch?.map(\.name) == ["check", "flowd", "reactors", "journey"])
        let (status, lines) = try launch(topology, ["--until-exit", "check"])
        let text = lines.joined(separator: "\n")
        #expect(status == 0, "\(text)")
        let flowdReady = try #require(line(lines, #"^launch   \| flowd is ready \(control\)$"#), "\(text)")
        let reactorsStarted = try #require(line(lines, #"^launch   \| started reactors "#), "\(text)")
        let reactorsReady = try #require(line(lines, #"^launch   \| reactors is ready \(heartbeat demo\)$"#), "\(text)")
        let checkStarted = try #require(line(lines, #"^launch   \| started check "#), "\(text)")
        #expect(
            flowdReady < reactorsStarted && reactorsStarted < reactorsReady && reactorsReady < checkStarted, "\(text)")
        #expect(line(lines, #"^check    \| "#) != nil, "\(text)")
        #expect(line(lines, #"journey"#) == nil, "the optional journey is not started:\n\(text)")
        #expect(
            lines.last == "launch   | everything stopped",
            "flowd and the reactor host stop cleanly on SIGTERM:\n\(text)")
    }

    @Test("Mistakes in the launch section are reported before anything starts")
    func validation() throws {
        let cycle = try launchTopology(
            """
              - { name: a, command: [sleep, "1"], after: [b] }
              - { name: b, command: [sleep, "1"], after: [a] }
            """)
        let (status, lines) = try launch(cycle)
        #expect(status != 0)
        #expect(lines.joined(separator: "\n").contains("cycle: a, b"))
        let missing = try launchTopology(
            """
              - { name: a, command: [no-such-command-here] }
            """)
        let result = try launch(missing)
        #expect(result.status != 0)
        #expect(result.lines.joined(separator: "\n").contains("'no-such-command-here' is not an executable"))
    }
}
