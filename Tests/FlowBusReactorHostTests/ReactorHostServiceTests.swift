import FlowBusClient
import FlowBusConfiguration
import FlowBusReactorHost
import FlowBusWire
import Foundation
import Logging
import Synchronization
import Testing
import ZeroMQ

private let allIDs = ["tally", "item/", "greeter", "wired"]

/// What a view saw: (sequence, state) pairs, with the snapshot first.
private struct Seen: Sendable, Equatable {
    var sequence: UInt64
    var state: TallyReactor.State
    var isSnapshot: Bool
}

/// Reads states until `done` holds for one, or `timeout` passes.
private func read(
    _ view: ReactorView, timeout: Duration = .seconds(10), until done: (TallyReactor.State) -> Bool
) throws -> [Seen] {
    var seen: [Seen] = []
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline,
        let received = try view.next(timeout: ContinuousClock.now.duration(to: deadline))
    {
        let state = try received.decode(TallyReactor.State.self)
        seen.append(Seen(sequence: received.sequence, state: state, isSnapshot: received.isSnapshot))
        if done(state) { break }
    }
    return seen
}

@Suite("Reactor host and views, in process")
struct ReactorHostServiceTests {
    @Test("A view gets the snapshot, then every state of an action with its loading states, in sequence")
    func exactStateSequence() async throws {
        let seen = try await withReactorHost(testRegistry(), serves: allIDs) { config, _ in
            let view = try ReactorView(reactorID: "tally", config: config)
            var seen = try read(view) { _ in true }
            try view.send(TallyReactor.Action.slowIncrease)
            seen += try read(view) { $0.value == 1 && !$0.isLoading }
            return seen
        }
        #expect(
            seen == [
                Seen(sequence: 0, state: .init(value: 0, isLoading: false), isSnapshot: true),
                Seen(sequence: 1, state: .init(value: 0, isLoading: true), isSnapshot: false),
                Seen(sequence: 2, state: .init(value: 1, isLoading: true), isSnapshot: false),
                Seen(sequence: 3, state: .init(value: 1, isLoading: false), isSnapshot: false),
            ])
    }

    @Test("Late joiners get a snapshot then live states with no gap and no duplicate while actions stream in")
    func lateJoinersUnderLoad() async throws {
        final class Progress: Sendable { let sent = Atomic<Int>(0) }
        struct Joiner: Sendable {
            var first: UInt64
            var sequences: [UInt64]
            var consistent: Bool
            var resyncs: Int
            var error: String?
        }
        let total = 3000
        let results = try await withReactorHost(testRegistry(), serves: allIDs) {
            config, _ -> (acknowledged: Bool, joiners: [Joiner]) in
            let progress = Progress()
            let joined = Mutex<[Joiner]>([])
            let group = DispatchGroup()
            for start in [200, 1200, 2400] {
                group.enter()
                Thread {
                    defer { group.leave() }
                    var joiner = Joiner(first: 0, sequences: [], consistent: true, resyncs: 0)
                    do {
                        let deadline = ContinuousClock.now + .seconds(20)
                        while progress.sent.load(ordering: .acquiring) < start, ContinuousClock.now < deadline {
                            Thread.sleep(forTimeInterval: 0.001)
                        }
                        let view = try ReactorView(reactorID: "tally", config: config)
                        let seen = try read(view, timeout: .seconds(20)) { $0.value == total }
                        joiner.first = seen.first?.sequence ?? 0
                        joiner.sequences = seen.map(\.sequence)
                        joiner.consistent =
                            seen.allSatisfy { UInt64($0.state.value) == $0.sequence } && seen.first?.isSnapshot == true
                            && seen.dropFirst().allSatisfy { !$0.isSnapshot }
                        joiner.resyncs = view.resynchronisations
                    } catch {
                        joiner.error = "\(error)"
                    }
                    joined.withLock { $0.append(joiner) }
                }.start()
            }
            let sender = try ReactorView(reactorID: "tally", config: config)
            for _ in 0..<total {
                try sender.send("add", ["n": 1])
                progress.sent.add(1, ordering: .releasing)
            }
            let acknowledged = try sender.waitForAcknowledgement(timeout: .seconds(20))
            _ = group.wait(timeout: .now() + 30)
            return (acknowledged, joined.withLock { $0 })
        }
        #expect(results.acknowledged)
        #expect(results.joiners.count == 3)
        for joiner in results.joiners {
            #expect(joiner.error == nil)
            #expect(
                joiner.sequences == Array(joiner.first...UInt64(total)),
                "snapshot \(joiner.first), then every later sequence once")
            #expect(joiner.consistent, "each state's value equals its sequence; only the first is a snapshot")
            #expect(joiner.resyncs == 0)
        }
    }

    @Test(
        "Bad actions are refused with diagnostics, to the sender and on the states endpoint, and the host keeps serving"
    )
    func refusals() async throws {
        struct Outcome: Sendable {
            var refusals: [String: String] = [:]
            var published: [String] = []
            var acknowledged = false
            var afterwards: [Seen] = []
            var counters = ReactorHostCounters()
        }
        let outcome = try await withReactorHost(testRegistry(), serves: allIDs) { config, service in
            var outcome = Outcome()
            let host = config.reactors["test"]!
            let diagnostics = try BusSubscriber(endpoint: host.states, topics: ["diag/"])
            guard try diagnostics.waitUntilConnected(timeout: .seconds(10)) else { return outcome }
            let tally = try ReactorView(reactorID: "tally", config: config)
            let unknownName = try tally.send("explode")
            let wrongType = try tally.send("add", ["n": "three"])
            let nobody = try ReactorView(reactorID: "tally", actionsEndpoint: host.actions, statesEndpoint: host.states)
            let unknownReactor = try ReactorView(
                reactorID: "nothing", actionsEndpoint: host.actions, statesEndpoint: host.states)
            let missing = try unknownReactor.send("add", ["n": 1])
            outcome.acknowledged = try tally.waitForAcknowledgement() && unknownReactor.waitForAcknowledgement()
            for (label, view, sequence) in [
                ("unknown-name", tally, unknownName), ("wrong-type", tally, wrongType),
                ("unknown-reactor", unknownReactor, missing),
            ] {
                if let refusal = view.refusal(for: sequence) {
                    outcome.refusals[label] = "\(refusal.reason): \(refusal.message)"
                }
            }
            // A malformed message from a raw socket: an envelope of 2 bytes.
            let context = try Context(defaultLinger: 500)
            let raw = try context.socket(.dealer)
            try raw.connect(host.actions)
            try raw.send(message: [Array("action/tally".utf8), [0x01, 0x03]])
            let deadline = ContinuousClock.now + .seconds(10)
            while outcome.published.count < 4, ContinuousClock.now < deadline,
                let received = try diagnostics.next(timeout: ContinuousClock.now.duration(to: deadline))
            {
                if case .message(.diagnostic(let diagnostic)) = received {
                    outcome.published.append(diagnostic.reason.rawValue)
                }
            }
            // Still serving.
            try nobody.send("add", ["n": 5])
            outcome.afterwards = try read(nobody) { $0.value == 5 }
            outcome.counters = service.counters
            return outcome
        }
        #expect(outcome.acknowledged, "refused actions are acknowledged too")
        #expect(
            outcome.refusals["unknown-name"] == "bad-action: tally cannot map action explode: no action named 'explode'"
        )
        let wrongType = outcome.refusals["wrong-type"] ?? ""
        #expect(wrongType.hasPrefix("bad-action: tally cannot map action add(n: \"three\"): n:"), "\(wrongType)")
        #expect(outcome.refusals["unknown-reactor"] == "unknown-reactor: no reactor nothing on reactor host test")
        // Two senders (two connections): their refusals interleave in any order; the raw one came last.
        #expect(outcome.published.prefix(3).sorted() == ["bad-action", "bad-action", "unknown-reactor"])
        #expect(outcome.published.last == "malformed")
        #expect(outcome.afterwards.last?.state.value == 5)
        #expect(outcome.counters.refused == [DiagnosticReason.badAction: 2, .unknownReactor: 1, .malformed: 1])
    }

    @Test("Actions and states with a wire form skip Codable; its errors are refusals with their reason")
    func wireFormReactor() async throws {
        struct Outcome: Sendable {
            var states: [WireValue] = []
            var refusals: [String] = []
        }
        let outcome = try await withReactorHost(testRegistry(), serves: allIDs) { config, _ in
            var outcome = Outcome()
            let view = try ReactorView(reactorID: "wired", config: config)
            let wrongType = try view.send("set", ["n": "four"])
            let unknown = try view.send("explode")
            try view.send("set", ["n": 4])
            let deadline = ContinuousClock.now + .seconds(10)
            while ContinuousClock.now < deadline,
                let received = try view.next(timeout: ContinuousClock.now.duration(to: deadline))
            {
                outcome.states.append(received.state)
                if received.state.mapValue?["n"] == .int(4) { break }
            }
            _ = try view.waitForAcknowledgement()
            for sequence in [wrongType, unknown] {
                if let refusal = view.refusal(for: sequence) {
                    outcome.refusals.append("\(refusal.reason): \(refusal.message)")
                }
            }
            return outcome
        }
        #expect(
            !outcome.states.isEmpty && outcome.states.allSatisfy { $0.mapValue?["wired"] == true },
            "snapshot and states")
        #expect(outcome.states.last == .map(["n": 4, "wired": true]))
        #expect(
            outcome.refusals == [
                "bad-params: wired cannot map action set(n: \"four\"): param n is not an integer",
                "bad-action: wired cannot map action explode: no action named 'explode'",
            ])
    }

    @Test("A resent (source, sequence) is applied once")
    func duplicatesAreAppliedOnce() async throws {
        let (value, duplicates) = try await withReactorHost(testRegistry(), serves: allIDs) {
            config, service -> (Int, Int) in
            let host = config.reactors["test"]!
            let context = try Context(defaultLinger: 500)
            let raw = try context.socket(.dealer)
            try raw.connect(host.actions)
            let action = ActionMessage(
                reactorID: "tally",
                envelope: Envelope(kind: .action, contentType: .json, sequence: 1, source: "resender#1"), name: "add",
                params: ["n": 10])
            for _ in 0..<3 { try raw.send(message: try action.encoded()) }
            var acked = false
            var buffer = FrameBuffer()
            let deadline = ContinuousClock.now + .seconds(10)
            while !acked, ContinuousClock.now < deadline, try raw.receive(into: &buffer, mode: .within(.seconds(1))) {
                if case .ack(let ack) = try WireMessage.decode(from: buffer), ack.acknowledgedSequence == 1 {
                    acked = service.counters.duplicates == 2
                }
            }
            let view = try ReactorView(reactorID: "tally", config: config)
            let snapshot = try view.next(TallyReactor.State.self, timeout: .seconds(10))
            return (snapshot?.state.value ?? -1, service.counters.duplicates)
        }
        #expect(value == 10)
        #expect(duplicates == 2)
    }

    @Test("A family member is created on first use; an id the factory rejects is unknown")
    func familyMembers() async throws {
        let (member, error) = try await withReactorHost(testRegistry(), serves: allIDs) {
            config, _ -> (ItemReactor.State?, String?) in
            let item = try ReactorView(reactorID: "item/7", config: config)
            let snapshot = try item.next(ItemReactor.State.self, timeout: .seconds(10))
            try item.send("touch")
            let touched = try item.next(ItemReactor.State.self, timeout: .seconds(10))
            let bad = try ReactorView(reactorID: "item/seven", config: config)
            var failure: String?
            do { _ = try bad.next(timeout: .seconds(10)) } catch { failure = "\(error)" }
            return (snapshot?.state.id == 7 ? touched?.state : nil, failure)
        }
        #expect(member == ItemReactor.State(id: 7, touches: 1))
        #expect(error?.contains("unknown-reactor") == true)
    }

    @Test("A reactor that is a stepper publishes its steps to flowd's ingress")
    func reactorAsStepper() async throws {
        let step = try await withReactorHost(testRegistry(), serves: allIDs) { config, _ -> StepMessage? in
            // Play flowd: bind its ingress and wait for the step.
            let context = try Context(defaultLinger: 0)
            let ingress = try context.socket(.router)
            try ingress.bind(config.endpoints.ingress)
            let view = try ReactorView(reactorID: "greeter", config: config)
            try view.send(GreeterReactor.Action.greet(name: "Ada"))
            guard try view.waitForAcknowledgement() else { return nil }
            var frames: [[UInt8]] = []
            guard try ingress.receive(into: &frames, mode: .within(.seconds(10))) else { return nil }
            guard case .step(let step) = try WireMessage.decode(from: FrameBuffer(frames: Array(frames.dropFirst())))
            else { return nil }
            return step
        }
        #expect(step?.stepperID == "greeter")
        #expect(step?.name == "greeted")
        #expect(step?.params == ["name": "Ada"])
        #expect(step?.envelope.sequence == 1)
    }

    @Test("A host name missing from the config is a config error naming the declared hosts")
    func missingHost() throws {
        let config = FlowBusConfig(
            endpoints: .init(ingress: "inproc://i", events: "inproc://e", control: "inproc://c"),
            reactors: ["demo": .init(actions: "inproc://a", states: "inproc://s", serves: ["counter"])])
        #expect(throws: ConfigError.self) {
            try ReactorHostService(
                hostName: "other", config: config, reactors: ReactorRegistry(), logger: .init(label: "test"))
        }
    }

    @Test("The steps of one batch of actions fit in a stepper's outbox past the limit where the host stops reading")
    func batchFitsStepperHeadroom() {
        // The host checks its steppers' backlog once per turn: a batch of one step per action must
        // not overflow the outbox (steps past it are dropped) before the check.
        let headroom = HostStepOutlet.maxWaiting - HostStepOutlet.backlogLimit
        #expect(ReactorHostLoop.maxBatchSize <= headroom && ReactorHostLoop.maxPersistingBatchSize <= headroom)
    }
}
