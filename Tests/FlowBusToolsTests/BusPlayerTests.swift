import FlowBusClient
import FlowBusConfiguration
import FlowBusTools
import FlowBusWire
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A stepper's tick as `tick(n) from <source before #>`.
private func line(_ step: StepMessage) -> String {
    let n = step.params["n"]?.intValue.map(String.init) ?? "?"
    return "\(step.name)(\(n)) from \(step.envelope.source.prefix { $0 != "#" })"
}

// One coordinator per process: the suite runs its tests one after the other.
@Suite("BusPlayer: a recording's inputs sent again to a running topology", .serialized)
struct BusPlayerTests {
    @Test(
        "Steps go to flowd in recorded order, as their stepper, in their recorded encoding, with the gaps divided by the rate"
    )
    func stepsInOrder() async throws {
        let (pass, seen) = try await withTickTopology { config, directory in
            let path = directory.file("steps.fbrec")
            try writeRecording(
                path,
                [
                    try recorded(tickStep(1, source: "ticker#u1"), atMilliseconds: 0),
                    try recorded(tickStep(2, source: "ticker#u1", contentType: .json), atMilliseconds: 200),
                    try recorded(tickStep(3, source: "ticker#u1"), atMilliseconds: 400),
                ])
            let watch = try StepWatch(config)
            let player = try BusPlayer(playlist: try playlist(at: path), config: config, configPath: "tick.yaml")
            let pass = try player.play(rate: 2)
            return (pass, try watch.take(3))
        }
        #expect(pass.steps == 3 && pass.actions == 0 && pass.deepLinks == 0 && pass.reactorSteps == 0)
        #expect(pass.isComplete && pass.stoppedBy == nil && pass.refusals.isEmpty)
        #expect(pass.duration >= .milliseconds(200), "400 ms recorded at rate 2: \(pass.duration)")
        #expect(seen.map(\.params) == [["n": 1], ["n": 2], ["n": 3]])
        #expect(seen.map(\.stepperID) == ["ticker", "ticker", "ticker"])
        #expect(seen.map(\.envelope.contentType) == [.fbv, .json, .fbv])
        #expect(Set(seen.map(\.envelope.source)).count == 1, "one publisher per stepper id")
        #expect(seen.allSatisfy { $0.envelope.source != "ticker#u1" }, "under a new source id")
    }

    @Test("A second pass sends the inputs again, and what a host refuses is in the pass that sent it")
    func refusalsAndPasses() async throws {
        let (actions, first, second, seen) = try await withTickTopology(withReactorHost: true) { config, directory in
            let path = directory.file("refused.fbrec")
            let states = "reactors.test.states"
            try writeRecording(
                path, [try recorded(tickAction(1), on: states), try recorded(tickAction(0, name: "jump"), on: states)])
            let watch = try StepWatch(config)
            let player = try BusPlayer(playlist: try playlist(at: path), config: config, configPath: "tick.yaml")
            let first = try player.play(rate: 0)
            let second = try player.play(rate: 0)
            return (config.reactors["test"]?.actions ?? "", first, second, try watch.take(2))
        }
        #expect(first.actions == 2 && first.isComplete && second.actions == 2 && second.isComplete)
        #expect(first.refusals.map(\.refusedBy) == ["the reactor host at \(actions)"])
        #expect(first.refusals.map(\.topic) == ["action/ticker"])
        #expect(
            first.refusals.first?.description.hasPrefix("the reactor host at \(actions) refused action/ticker: ")
                == true)
        #expect(second.refusals.count == 1, "each pass reports its own: \(second.refusals)")
        #expect(seen.map(line) == ["tick(1) from ticker", "tick(1) from ticker"], "the reactor stepped in each pass")
    }

    @Test(
        "Actions go to the host serving their reactor; a step a reactor published comes again through them, before the next step"
    )
    func reactorStepsComeAgain() async throws {
        let (fromReactor, pass, seen) = try await withTickTopology(withReactorHost: true) { config, directory in
            let path = directory.file("reactor.fbrec")
            let states = "reactors.test.states"
            try writeRecording(
                path, hosts: [BusRecording.ReactorHost(endpoint: states, source: "test#h1")],
                [
                    try recorded(tickAction(1), on: states),
                    // What the recorded host published from that action: not sent, expected.
                    try recorded(tickStep(1, source: "ticker#h1")),
                    try recorded(tickStep(2, source: "ticker#u1")),
                ])
            let list = try playlist(at: path)
            let watch = try StepWatch(config)
            let player = try BusPlayer(playlist: list, config: config, configPath: "tick.yaml")
            let pass = try player.play(rate: 0)
            return (list.inputs.map(\.isFromReactor), pass, try watch.take(2))
        }
        #expect(fromReactor == [false, true, false])
        #expect(pass.actions == 1 && pass.steps == 1 && pass.reactorSteps == 1, "\(pass)")
        #expect(pass.isComplete && pass.refusals.isEmpty, "\(pass)")
        // The live host's step first (its own source suffix), then the player's.
        #expect(seen.map(line) == ["tick(1) from ticker", "tick(2) from ticker"])
        #expect(seen.count == 2 && seen[0].envelope.source != seen[1].envelope.source)
    }

    @Test(
        "A step a reactor published that does not come again within the timeout is an error, and the next step is held back"
    )
    func missingReactorStep() async throws {
        let (code, seen) = try await withTickTopology(withReactorHost: true) { config, directory in
            let path = directory.file("missing.fbrec")
            let states = "reactors.test.states"
            try writeRecording(
                path, hosts: [BusRecording.ReactorHost(endpoint: states, source: "test#h1")],
                [
                    // n = 0: the live reactor publishes no step.
                    try recorded(tickAction(0), on: states), try recorded(tickStep(1, source: "ticker#h1")),
                    try recorded(tickStep(2, source: "ticker#u1")),
                ])
            let watch = try StepWatch(config)
            let player = try BusPlayer(
                playlist: try playlist(at: path), config: config, configPath: "tick.yaml", timeout: .seconds(1))
            var code: BusToolError.Code?
            do {
                _ = try player.play(rate: 0)
            } catch let error as BusToolError {
                code = error.code
            }
            return (code, try watch.take(1, timeout: .milliseconds(300)))
        }
        #expect(code == .reactorStepMissing)
        #expect(seen.isEmpty, "nothing reached flowd: \(seen.map(line))")
    }

    @Test("A stop request ends a pass between two messages, and the pass says so")
    func stopRequest() async throws {
        let pass = try await withTickTopology { config, directory in
            let path = directory.file("long.fbrec")
            try writeRecording(
                path,
                [
                    try recorded(tickStep(1, source: "ticker#u1"), atMilliseconds: 0),
                    try recorded(tickStep(2, source: "ticker#u1"), atMilliseconds: 30_000),
                ])
            let player = try BusPlayer(playlist: try playlist(at: path), config: config, configPath: "tick.yaml")
            let stop = try StopRequest()
            Thread.detachNewThread {
                Thread.sleep(forTimeInterval: 0.3)
                stop.request()
            }
            return try player.play(rate: 1, stop: stop)
        }
        #expect(pass.stoppedBy == .requested)
        #expect(pass.steps == 1 && pass.isComplete)
        #expect(pass.duration < .seconds(10), "stopped while waiting for the second step: \(pass.duration)")
    }

    @Test("Before sending anything, the player checks that a host serves each action's reactor and that flowd answers")
    func checksBeforeSending() throws {
        let directory = try ScratchDirectory()
        defer { directory.remove() }
        let config = try tickConfig(in: directory)
        let action = ActionMessage(
            reactorID: "nowhere", envelope: Envelope(kind: .action, sequence: 1, source: "view#1"), name: "go")
        let unserved = BusPlayer.Playlist(
            inputs: [BusPlayer.Input(time: 0, message: .action(action))], path: "nowhere.fbrec")
        #expect {
            _ = try BusPlayer(playlist: unserved, config: config, configPath: "tick.yaml")
        } throws: { error in
            let error = error as? BusToolError
            return error?.code == .unservedReactor
                && error?.description.hasPrefix(
                    "no reactor host of tick.yaml serves nowhere, whose actions nowhere.fbrec holds") == true
        }
        // Nothing runs on the config's endpoints.
        let steps = BusPlayer.Playlist(inputs: [BusPlayer.Input(time: 0, message: .step(tickStep(1, source: "t#1")))])
        #expect {
            _ = try BusPlayer(playlist: steps, config: config, configPath: "tick.yaml", timeout: .milliseconds(300))
        } throws: { error in
            (error as? BusToolError)?.code == .flowdNotAnswering
        }
        #expect(!steps.isEmpty)
        #expect(
            BusPlayer.Playlist(inputs: [
                BusPlayer.Input(time: 0, message: .step(tickStep(1, source: "t#1")), isFromReactor: true)
            ]).isEmpty)
    }
}
