import FlowBusClient
import FlowBusConfiguration
import FlowBusCoordinator
import FlowBusReactorHost
import FlowBusTesting
import FlowBusTools
import FlowBusWire
import Foundation
import Testing

/// The demo topology with heartbeats every 100 ms and a peer dead after 5 silent intervals: fast
/// enough for a test, slack enough for a loaded debug build.
private func livenessTopology() throws -> TestTopology {
    let yaml = try String(contentsOf: packageRoot.appendingPathComponent("config/demo.yaml"), encoding: .utf8)
    return try TestTopology(configYAML: yaml + "\nheartbeatMilliseconds: 100\nheartbeatLiveness: 5\n")
}

/// The `peers` entries of flowd's status whose role is `role`, by source id.
private func peers(_ topology: TestTopology, role: String) throws -> [String: WireParams] {
    let all = try topology.status()["peers"]?.mapValue ?? [:]
    return all.compactMapValues { $0.mapValue }.filter { $0.value["role"]?.stringValue == role }
}

@Suite("Dead peers across processes", .serialized)
struct LivenessTests {
    @Test(
        "flowd watches reactor hosts' heartbeats: a killed host is reported peer-dead and shows in status; its restart is alive"
    )
    func deadReactorHost() throws {
        let topology = try livenessTopology()
        try topology.startFlowd()
        let diagnostics = try topology.subscribe(["diag/"])
        let host = try topology.start("reactor-host", arguments: ["--config", topology.configPath, "--host", "demo"])
        var first: [String: WireParams] = [:]
        #expect(
            try eventually(timeout: .seconds(15)) {
                first = try peers(topology, role: "reactor-host demo")
                return first.values.contains { $0["alive"] == true }
            }, "flowd never heard the reactor host:\n\(host.output)")
        let source = try #require(first.keys.first)

        host.kill()
        var reported: DiagnosticMessage?
        let deadline = ContinuousClock.now + .seconds(15)
        while reported == nil, ContinuousClock.now < deadline,
            let received = try diagnostics.next(timeout: ContinuousClock.now.duration(to: deadline))
        {
            if case .message(.diagnostic(let diagnostic)) = received, diagnostic.reason == .peerDead {
                reported = diagnostic
            }
        }
        let diagnostic = try #require(reported, "no peer-dead diagnostic for the killed reactor host")
        #expect(diagnostic.details["source"]?.stringValue == source)
        #expect(diagnostic.details["role"]?.stringValue == "reactor-host demo")
        #expect(diagnostic.message.contains("heartbeats stopped"))
        #expect(try peers(topology, role: "reactor-host demo")[source]?["alive"] == false)

        // A new instance has a new source id: it shows alive beside the dead one.
        try topology.start(
            "reactor-host", arguments: ["--config", topology.configPath, "--host", "demo"], name: "reactor-host-2")
        #expect(
            try eventually(timeout: .seconds(15)) {
                try peers(topology, role: "reactor-host demo").contains {
                    $0.key != source && $0.value["alive"] == true
                }
            })
    }

    @Test(
        "Clients tell a dead flowd: a stepper's heartbeats go unanswered, a subscriber hears no heartbeat; both say when it is back"
    )
    func deadFlowd() throws {
        let topology = try livenessTopology()
        let flowd = try topology.startFlowd()
        let publisher = try topology.stepper("apikey")
        publisher.heartbeatInterval = .milliseconds(100)
        publisher.livenessIntervals = 5
        var publisherChanges: [LivenessChange] = []
        publisher.onFlowdLiveness = { publisherChanges.append($0) }
        let subscriber = try topology.subscribe(["nav/did/"])
        subscriber.silenceLimit = .milliseconds(500)
        var subscriberChanges: [LivenessChange] = []
        subscriber.onLiveness = { subscriberChanges.append($0) }
        let echo = try topology.start("flowctl", arguments: ["echo", "did", "--config", topology.configPath])

        // Alive: heartbeats are answered, so a quiet publisher is not judged silent.
        let quiet = ContinuousClock.now + .seconds(1)
        while ContinuousClock.now < quiet {
            try publisher.poll(timeout: .milliseconds(20))
            _ = try subscriber.next(timeout: .milliseconds(1))
        }
        #expect(!publisher.isFlowdSilent)
        #expect(!subscriber.isPublisherSilent)

        flowd.kill()
        #expect(
            try eventually(timeout: .seconds(15)) {
                try publisher.poll(timeout: .milliseconds(20))
                _ = try subscriber.next(timeout: .milliseconds(1))
                return publisher.isFlowdSilent && subscriber.isPublisherSilent
            })
        guard case .silent(let silentFor)? = publisherChanges.last else {
            Issue.record("the publisher reported no outage: \(publisherChanges)")
            return
        }
        #expect(silentFor >= .milliseconds(500))
        #expect(subscriberChanges.count == 1)
        #expect(try echo.waitForOutput(matching: "flowd silent for [0-9]+ ms", timeout: .seconds(10)), "\(echo.output)")

        let restarted = try topology.startFlowd()
        #expect(
            try eventually(timeout: .seconds(15)) {
                try publisher.poll(timeout: .milliseconds(20))
                _ = try subscriber.next(timeout: .milliseconds(1))
                return !publisher.isFlowdSilent && !subscriber.isPublisherSilent
            }, "\(restarted.output)")
        #expect(publisherChanges.count == 2)
        if case .back(let source)? = subscriberChanges.last {
            #expect(source.hasPrefix("flowd#"))
        } else {
            Issue.record("the subscriber reported no return: \(subscriberChanges)")
        }
        #expect(try echo.waitForOutput(matching: "flowd heard again", timeout: .seconds(10)), "\(echo.output)")
        // And it resumes: a step now is acknowledged and navigates.
        try publisher.publish("apiKeyIsComplete")
        #expect(try publisher.waitForAcknowledgement(timeout: .seconds(10)))
    }
}
