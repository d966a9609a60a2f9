import FlowBusClient
import FlowBusConfiguration
import FlowBusCoordinator
import FlowBusReactorHost
import FlowBusTesting
import FlowBusTools
import FlowBusWire
import Foundation
import Testing
import ZeroMQ

/// One kind of bad input and the reason code it must be refused with.
struct BadInput: Sendable, CustomTestStringConvertible {
    var name: String
    var frames: [[UInt8]]
    var reason: DiagnosticReason

    var testDescription: String { name }
}

/// The frames of a well-formed step, to corrupt.
func stepFrames(
    _ stepperID: String, _ name: String, _ params: WireParams = [:], contentType: ContentType = .fbv,
    sequence: UInt64 = 1
) -> [[UInt8]] {
    let envelope = Envelope(
        kind: .step, contentType: contentType, sequence: sequence, source: "bad-input#\(UUID().uuidString.prefix(6))")
    return (try? StepMessage(stepperID: stepperID, envelope: envelope, name: name, params: params).encoded().frames)
        ?? []
}

/// The frames of a well-formed action, to corrupt.
func actionFrames(
    _ reactorID: String, _ name: String, _ params: WireParams = [:], contentType: ContentType = .fbv
) -> [[UInt8]] {
    let envelope = Envelope(
        kind: .action, contentType: contentType, sequence: 1, source: "bad-input#\(UUID().uuidString.prefix(6))")
    return (try? ActionMessage(reactorID: reactorID, envelope: envelope, name: name, params: params).encoded().frames)
        ?? []
}

/// Every kind of malformed input the protocol names, each with the reason it must be refused with.
let badInputs = corruptions(
    of: stepFrames("apikey", "apiKeyIsComplete", ["n": 1]),
    json: stepFrames("apikey", "apiKeyIsComplete", ["n": 1], contentType: .json))

/// The same corruptions of an action, plus what only a reactor host can judge.
let badActions =
    corruptions(
        of: actionFrames("counter", "increase", ["n": 1]),
        json: actionFrames("counter", "increase", ["n": 1], contentType: .json)) + [
        BadInput(name: "an unknown reactor", frames: actionFrames("nobody", "increase"), reason: .unknownReactor),
        BadInput(name: "an unknown action", frames: actionFrames("counter", "explode"), reason: .badAction),
        BadInput(
            name: "a parameter of the wrong type", frames: actionFrames("login", "submit", ["apiKey": 42]),
            reason: .badAction),
        BadInput(
            name: "a params frame over the configured limit", frames: oversized(actionFrames("counter", "increase")),
            reason: .oversize),
    ]

/// `frames` with its params frame one byte over the default `limits.maxMessageBytes` (1 MiB).
func oversized(_ frames: [[UInt8]]) -> [[UInt8]] {
    var frames = frames
    frames[3] = [UInt8](repeating: 0x41, count: (1 << 20) + 1)
    return frames
}

func corruptions(of good: [[UInt8]], json: [[UInt8]]) -> [BadInput] {
    var inputs: [BadInput] = []
    func add(_ name: String, _ reason: DiagnosticReason, _ frames: [[UInt8]]) {
        inputs.append(BadInput(name: name, frames: frames, reason: reason))
    }
    add("a single frame", .malformed, [good[0]])
    add("empty frames", .malformed, [[], []])
    add("a truncated envelope", .malformed, [good[0], Array(good[1].prefix(12))])
    var version = good[1]
    version[0] = 9
    add("an unknown version", .unsupportedVersion, [good[0], version] + good[2...])
    var kind = good[1]
    kind[1] = 99
    add("an unknown kind", .unknownKind, [good[0], kind] + good[2...])
    var source = good[1]
    source[source.count - 1] = 0xFF
    add("invalid UTF-8 in the source", .malformed, [good[0], source] + good[2...])
    add(
        "invalid UTF-8 in the topic", .malformed,
        [Array(good[0].prefix(while: { $0 != 0x2F })) + [0x2F, 0xFF, 0xFE]] + good[1...])
    add("invalid UTF-8 in the name", .malformed, [good[0], good[1], [0xC3, 0x28], good[3]])
    add("a wrong frame count", .malformed, Array(good.prefix(3)))
    add("too many frames", .oversize, good + Array(repeating: [0x00], count: 6))
    add("invalid JSON params", .badParams, [json[0], json[1], json[2], Array("{\"n\": 1".utf8)])
    add("JSON params that are not a map", .badParams, [json[0], json[1], json[2], Array("[1, 2]".utf8)])
    add("a truncated FBV params frame", .badParams, [good[0], good[1], good[2], Array(good[3].dropLast(3))])
    add("a topic that does not match the kind", .malformed, [Array("state/apikey".utf8)] + good[1...])
    return inputs
}

@Suite("Bad input is refused, counted and reported; the daemon keeps serving", .serialized)
struct BadInputTests {
    @Test("flowd's ingress refuses each kind of malformed input with a diagnostic", arguments: badInputs)
    func flowdIngress(input: BadInput) throws {
        let topology = try demoTopology()
        try topology.startFlowd()
        let events = try topology.subscribe(["diag/", "nav/did/"])
        let context = try ZeroMQ.Context(defaultLinger: 500)
        let raw = try context.socket(.dealer)
        try raw.connect(topology.config.endpoints.ingress)
        try raw.send(message: input.frames)

        guard case .diagnostic(let diagnostic)? = try events.collect(1).first else {
            Issue.record("no diagnostic published for \(input.name)")
            return
        }
        #expect(diagnostic.reason == input.reason, "\(diagnostic.details["message"]?.stringValue ?? "")")
        #expect(diagnostic.details["message"]?.stringValue?.isEmpty == false)
        // The sender hears of it too when its envelope could be read.
        if let reply = try raw.receiveMessage(mode: .timeout(milliseconds: 500)),
            case .diagnostic(let told) = try WireMessage.decode(from: FrameBuffer(frames: reply))
        {
            #expect(told.reason == input.reason)
        }
        // Still serving well-formed traffic, and the refusal is counted.
        try tap(topology, "apikey", "apiKeyIsComplete")
        #expect(lines(try events.collect(1)) == ["did navigate flow=MainFlow step=apiKeyIsComplete presentable=apikey"])
        #expect(try topology.status()["ingress"]?.mapValue?["refused"]?.mapValue?[input.reason.rawValue]?.intValue == 1)
    }

    @Test("A reactor host's actions endpoint refuses each kind of bad action with a diagnostic", arguments: badActions)
    func reactorActions(input: BadInput) throws {
        let topology = try demoTopology()
        let host = try topology.start(
            "reactor-host", arguments: ["--config", topology.configPath, "--host", "demo", "--counter-delay-ms", "0"])
        let spec = try #require(topology.config.reactors["demo"])
        let diagnostics = try BusSubscriber(endpoint: spec.states, topics: ["diag/"])
        #expect(try diagnostics.waitUntilConnected(timeout: .seconds(20)), "reactor-host is up: \(host.output)")
        let context = try ZeroMQ.Context(defaultLinger: 500)
        let raw = try context.socket(.dealer)
        try raw.connect(spec.actions)
        try raw.send(message: input.frames)
        guard case .diagnostic(let diagnostic)? = try diagnostics.collect(1).first else {
            Issue.record("no diagnostic published for \(input.name)")
            return
        }
        #expect(diagnostic.reason == input.reason, "\(diagnostic.details["message"]?.stringValue ?? "")")
        // Still serving: a good action is applied.
        let view = try ReactorView(reactorID: "counter", config: topology.config)
        _ = try view.send("increase")
        #expect(try view.waitForAcknowledgement())
        var last: Int64?
        while let state = try view.next(timeout: .seconds(5)) {
            last = state.state.mapValue?["value"]?.intValue
            if last == 1 { break }
        }
        #expect(last == 1)
    }

    @Test("flowd's control endpoint refuses what is not a status request")
    func flowdControl() throws {
        let topology = try demoTopology()
        try topology.startFlowd()
        let events = try topology.subscribe(["diag/"])
        let context = try ZeroMQ.Context(defaultLinger: 500)
        let raw = try context.socket(.dealer)
        try raw.connect(topology.config.endpoints.control)
        try raw.send(message: stepFrames("apikey", "apiKeyIsComplete"))
        try raw.send(message: [[0x00]])
        let reasons = try events.collect(2).compactMap { message -> DiagnosticReason? in
            if case .diagnostic(let diagnostic) = message { return diagnostic.reason }
            return nil
        }
        #expect(reasons == [.unknownKind, .malformed])
        #expect(try topology.status()["flows"]?.listValue?.isEmpty == false)
    }

    @Test("A flood from one peer is counted, and other steppers' steps are not lost meanwhile")
    func flood() throws {
        let topology = try demoTopology()
        try topology.startFlowd()
        let events = try topology.subscribe(["nav/did/"])
        let flooder = try topology.stepper("nobody")
        let floodSize = 20_000
        for index in 0..<floodSize { try flooder.publish("moviePicked", ["withMovieId": .int(Int64(index))]) }
        try tap(topology, "apikey", "apiKeyIsComplete")
        #expect(try flooder.waitForAcknowledgement(timeout: .seconds(60)))
        #expect(
            lines(try events.collect(1, timeout: .seconds(30))) == [
                "did navigate flow=MainFlow step=apiKeyIsComplete presentable=apikey"
            ])
        let dropped = try topology.status()["totals"]?.mapValue?["dropped"]?.mapValue?["unbound-stepper"]?.intValue
        #expect(dropped == Int64(floodSize))
    }

    @Test("A frame over the configured limit is refused as oversize with a diagnostic, and counted")
    func oversizeReported() throws {
        let topology = try demoTopology()
        try topology.startFlowd()
        let events = try topology.subscribe(["diag/"])
        let context = try ZeroMQ.Context(defaultLinger: 500)
        let raw = try context.socket(.dealer)
        try raw.connect(topology.config.endpoints.ingress)
        var frames = stepFrames("apikey", "apiKeyIsComplete")
        frames[3] = [UInt8](repeating: 0x41, count: topology.config.limits.maxMessageBytes + 1)
        try raw.send(message: frames)
        guard case .diagnostic(let diagnostic)? = try events.collect(1).first else {
            Issue.record("no diagnostic for an over-size frame")
            return
        }
        #expect(diagnostic.reason == .oversize)
        #expect(try topology.status()["ingress"]?.mapValue?["refused"]?.mapValue?["oversize"]?.intValue == 1)
    }

    @Test("A frame far over the limit is cut off by libzmq before it is allocated, and flowd keeps serving")
    func oversize() throws {
        let topology = try demoTopology()
        try topology.startFlowd()
        let events = try topology.subscribe(["nav/did/"])
        let context = try ZeroMQ.Context(defaultLinger: 500)
        let raw = try context.socket(.dealer)
        try raw.connect(topology.config.endpoints.ingress)
        var frames = stepFrames("apikey", "apiKeyIsComplete")
        frames[3] = [UInt8](repeating: 0x41, count: 8 << 20)
        try raw.send(message: frames)
        try tap(topology, "apikey", "apiKeyIsComplete")
        #expect(lines(try events.collect(1)) == ["did navigate flow=MainFlow step=apiKeyIsComplete presentable=apikey"])
    }

    @Test("A flood of status requests from peers that never read does not starve a stepper's acks")
    func statusFlood() throws {
        let topology = try demoTopology()
        try topology.startFlowd()
        let context = try ZeroMQ.Context(defaultLinger: 0)
        var flooders: [Socket] = []
        defer { for socket in flooders { socket.close() } }
        let request = try StatusRequest(envelope: Envelope(kind: .statusRequest, sequence: 1, source: "flood#1"))
            .frames()
        for _ in 0..<4 {
            let socket = try context.socket(.dealer)
            try socket.setOptions([.sendHighWaterMark(10_000), .linger(0)])
            try socket.connect(topology.config.endpoints.control)
            flooders.append(socket)
        }
        for index in 0..<20_000 { _ = try flooders[index % flooders.count].send(message: request, mode: .nonBlocking) }
        // A well-behaved stepper meanwhile: every step is acknowledged promptly.
        let stepper = try topology.stepper("settings")
        var latencies: [Duration] = []
        let clock = ContinuousClock()
        for _ in 0..<100 {
            let start = clock.now
            try stepper.publish("about")
            #expect(try stepper.waitForAcknowledgement(timeout: .seconds(30)))
            latencies.append(start.duration(to: clock.now))
        }
        latencies.sort()
        let p99 = latencies[98]
        // Generous for a loaded machine; a quiet one gives a few milliseconds.
        #expect(p99 < .seconds(1), "p99 ack latency \(p99) under a 20,000-request status flood")
        #expect(
            try topology.status(timeout: .seconds(30))["flows"]?.listValue?.isEmpty == false, "still serving status")
    }
}
