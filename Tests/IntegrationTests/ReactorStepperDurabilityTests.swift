import FlowBusClient
import FlowBusConfiguration
import FlowBusCoordinator
import FlowBusReactorHost
import FlowBusTesting
import FlowBusTools
import FlowBusWire
import Foundation
import Testing

/// A journaled flowd whose `TickFlow` takes the `tick` steps of stepper `ticker` (changing
/// nothing), and a reactor host `steps` (fixture-reactors) serving the `ticker` reactor, which
/// publishes `tick(n: N)` as that stepper for each action `tick(n: N)`.
private let reactorStepperYAML = """
    endpoints:
      ingress: ipc://${FLOWBUS_RUN_DIR}/ingress.sock
      events: ipc://${FLOWBUS_RUN_DIR}/events.sock
      control: ipc://${FLOWBUS_RUN_DIR}/control.sock
    heartbeatMilliseconds: 50
    persistence: { journal: journal.sqlite, synchronous: full }
    coordinator: { flow: TickFlow, step: start }
    flows:
      TickFlow:
        root: stack
        id: ticks
        steps:
          start:
            - setRoot: { screen: home, stepper: ticker, allowStepWhenNotPresented: true }
          tick: [none]
    reactors:
      steps:
        actions: ipc://${FLOWBUS_RUN_DIR}/steps-actions.sock
        states: ipc://${FLOWBUS_RUN_DIR}/steps-states.sock
        serves: [ticker]
    """

/// The same topology with a host that keeps its reactors' steps in its state database until
/// flowd acknowledges them.
private let keptStepsYAML =
    reactorStepperYAML + """

            persistence: { database: steps-reactors.sqlite, reactors: [ticker], synchronous: full }
        """

private func ticks(_ range: ClosedRange<Int>) -> [Navigation] {
    range.map { Navigation(flow: "TickFlow", step: "tick", ["n": .int(Int64($0))]) }
}

@Suite("A reactor host's steps survive a SIGKILL of flowd", .serialized)
struct ReactorStepperDurabilityTests {
    @Test(
        "SIGKILL of a journaled flowd with a reactor's steps in flight: resent to the new flowd, none lost, none doubled"
    )
    func reactorStepsAcrossFlowdKill() throws {
        let topology = try TestTopology(configYAML: reactorStepperYAML)
        var flowd = try topology.startFlowd(arguments: ["--log-level", "info"])
        let host = try topology.startReactorHost("steps", executable: "fixture-reactors")
        let before = try topology.navigationTrace(exhaustivity: .off)
        for n in 1...5 { try topology.send("tick", ["n": .int(Int64(n))], to: "ticker") }
        try before.expect(ticks(1...5), exhaustivity: .on)

        // Frozen, flowd does not read: these steps reach its socket and die with it, unacknowledged.
        kill(flowd.processIdentifier, SIGSTOP)
        #expect(waitUntilStopped(flowd.processIdentifier), "flowd stopped")
        for n in 6...8 { try topology.send("tick", ["n": .int(Int64(n))], to: "ticker") }
        #expect(try host.waitForOutput(matching: #"step tick\(n: 8\) published as ticker"#), "\(host.outputTail())")
        flowd.kill()
        flowd = try topology.startFlowd(arguments: ["--log-level", "info"])
        #expect(flowd.output.contains("restored"), "\(flowd.output)")

        // The host resends 6…8 when it reconnects; its later steps follow them.
        let after = try topology.navigationTrace(exhaustivity: .off)
        for n in 9...12 { try topology.send("tick", ["n": .int(Int64(n))], to: "ticker") }
        try after.expect(ticks(9...12), timeout: .seconds(30))
        try after.poll()
        let seenAfter = after.navigations.compactMap { navigation in
            navigation.step.firstMatch(of: /tick\(n: (\d+)\)/).flatMap { Int($0.1) }
        }
        #expect(seenAfter == seenAfter.sorted(), "in order: \(seenAfter)")
        #expect(Set(seenAfter).count == seenAfter.count, "none twice: \(seenAfter)")
        #expect(seenAfter.allSatisfy { $0 > 5 }, "nothing applied before the kill came again: \(seenAfter)")
        #expect(host.output.contains("resending"), "the host resent its unacknowledged steps:\n\(host.outputTail())")

        #expect(flowd.terminate() == 0)
        let journaled = try journaledTicks(topology, stepper: "ticker")
        #expect(journaled == Array(1...12), "each step applied exactly once, in order")
    }

    @Test(
        "SIGKILL of a reactor host that keeps its steps, with steps flowd had not acknowledged: the restarted host sends them again, none lost, none doubled"
    )
    func keptStepsAcrossHostKill() throws {
        let topology = try TestTopology(configYAML: keptStepsYAML)
        var flowd = try topology.startFlowd(arguments: ["--log-level", "info"])
        var host = try topology.startReactorHost("steps", executable: "fixture-reactors")
        let before = try topology.navigationTrace(exhaustivity: .off)
        for n in 1...5 { try topology.send("tick", ["n": .int(Int64(n))], to: "ticker") }
        try before.expect(ticks(1...5), exhaustivity: .on)

        // flowd frozen: the host saves 6…8 with their states and acknowledges the actions; what it
        // sends dies in flowd's socket. Then both are killed.
        kill(flowd.processIdentifier, SIGSTOP)
        #expect(waitUntilStopped(flowd.processIdentifier), "flowd stopped")
        for n in 6...8 { try topology.send("tick", ["n": .int(Int64(n))], to: "ticker") }
        #expect(try host.waitForOutput(matching: #"step tick\(n: 8\) published as ticker"#), "\(host.outputTail())")
        host.kill()
        flowd.kill()
        flowd = try topology.startFlowd(arguments: ["--log-level", "info"])

        let after = try topology.navigationTrace(exhaustivity: .off)
        host = try topology.startReactorHost("steps", executable: "fixture-reactors")
        // 6…8 at least; 5 too when flowd was stopped after applying it but before its
        // acknowledgement reached the host (flowd then refuses 5 as a duplicate).
        #expect(
            try host.waitForOutput(
                matching:
                    #"sending again (3 step\(s\) of stepper ticker .* 6…8|4 step\(s\) of stepper ticker .* 5…8)\)"#),
            "the host took up the steps it kept:\n\(host.outputTail())")
        for n in 9...12 { try topology.send("tick", ["n": .int(Int64(n))], to: "ticker") }
        try after.expect(ticks(6...12), timeout: .seconds(30))
        #expect(host.terminate() == 0)
        #expect(flowd.terminate() == 0)
        let journaled = try journaledTicks(topology, stepper: "ticker")
        #expect(journaled == Array(1...12), "each step applied exactly once, in order")
    }

    @Test(
        "flowd frozen while a reactor's steps pile up: past 8,000 steps waiting for flowd the host reads no more actions, and goes on once flowd acknowledges; each step applied once, in order"
    )
    func backedUpStepsHoldActionsBack() throws {
        let topology = try TestTopology(configYAML: keptStepsYAML)
        let flowd = try topology.startFlowd(arguments: ["--log-level", "info"])
        let host = try topology.startReactorHost("steps", executable: "fixture-reactors")
        let before = try topology.navigationTrace(exhaustivity: .off)
        try topology.send("tick", ["n": 1], to: "ticker")
        try before.expect(ticks(1...1), exhaustivity: .on)

        kill(flowd.processIdentifier, SIGSTOP)
        #expect(waitUntilStopped(flowd.processIdentifier), "flowd stopped")
        let view = try ReactorView(reactorID: "ticker", config: topology.config)
        // More than the host reads before it stops: the backlog limit, crossed within a batch (the
        // host keeps its steps: it persists).
        let total = HostStepOutlet.backlogLimit + 2 * ReactorHostLoop.maxPersistingBatchSize
        for n in 2...total { _ = try view.send("tick", ["n": .int(Int64(n))]) }
        #expect(
            try host.waitForOutput(matching: "reading no actions: [0-9]+ steps of ticker wait", timeout: .seconds(120)),
            "\(host.outputTail())")
        // What the host read before it stopped reading is acknowledged; the rest waits.
        _ = try view.waitForAcknowledgement(timeout: .seconds(2))
        let acknowledged = view.lastAcknowledged
        #expect(
            acknowledged >= UInt64(HostStepOutlet.backlogLimit) && acknowledged < UInt64(total),
            "actions acknowledged while flowd is frozen: \(acknowledged)")

        kill(flowd.processIdentifier, SIGCONT)
        #expect(try view.waitForAcknowledgement(timeout: .seconds(120)), "\(host.outputTail())")
        #expect(
            try host.waitForOutput(matching: "reading actions again", timeout: .seconds(30)), "\(host.outputTail())")
        #expect(!host.output.contains("dropped"), "\(host.outputTail())")
        // The host's steps reach flowd after the actions that caused them were acknowledged.
        var accepted: Int64 = 0
        let deadline = ContinuousClock.now + .seconds(120)
        while accepted < Int64(total), ContinuousClock.now < deadline {
            accepted =
                (try? topology.status()["steppers"]?.mapValue?["ticker"]?.mapValue?["accepted"]?.intValue) ?? accepted
            Thread.sleep(forTimeInterval: 0.05)
        }
        #expect(accepted >= Int64(total), "flowd took every step of the host: \(accepted)")
        #expect(host.terminate() == 0)
        #expect(flowd.terminate() == 0)
        let journaled = try journaledTicks(topology, stepper: "ticker")
        let inOrder = journaled == (1...Int64(total)).map { $0 }
        #expect(
            inOrder,
            "each step applied exactly once, in order: \(journaled.count) of \(total), first difference at \(Array(zip(journaled, 1...Int64(total))).firstIndex { $0 != $1 } ?? -1)"
        )
    }
}
