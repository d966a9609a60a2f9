import FlowBusClient
import FlowBusConfiguration
import FlowBusCoordinator
import FlowBusReactorHost
import FlowBusTesting
import FlowBusTools
import FlowBusWire
import Foundation
import Synchronization
import Testing
import ZeroMQ

/// `durableFlowYAML` without a journal: the flood measures the loop, not the disk.
private let floodYAML = durableFlowYAML.replacingOccurrences(
    of: "persistence: { journal: journal.sqlite, synchronous: full }\n", with: "")

@Suite("The control plane is fair and rate-limited", .serialized)
struct ControlFloodTests {
    @Test(
        "20,000 status requests from one DEALER: a well-behaved stepper's acks keep coming; the flood is rate-limited and counted"
    )
    func statusFlood() throws {
        let topology = try TestTopology(configYAML: floodYAML)
        try topology.startFlowd()
        let control = topology.config.endpoints.control
        let floodReplies = Mutex((replies: 0, rateLimited: 0, sent: 0))
        let floodDone = ReadinessFlag()
        let flood = Thread {
            defer { floodDone.set() }
            do {
                let context = try ZeroMQ.Context(defaultLinger: 0)
                let dealer = try context.socket(.dealer)
                try dealer.setOptions([.sendHighWaterMark(0), .receiveHighWaterMark(0)])
                try dealer.connect(control)
                let request = try StatusRequest(
                    envelope: Envelope(kind: .statusRequest, sequence: 1, source: "flood#1")
                ).encoded()
                for _ in 0..<20_000 where try dealer.send(message: request, mode: .nonBlocking) {
                    floodReplies.withLock { $0.sent += 1 }
                }
                var buffer = FrameBuffer()
                while try dealer.receive(into: &buffer, mode: .within(.seconds(2))) {
                    let message = try? WireMessage.decode(from: buffer)
                    floodReplies.withLock {
                        $0.replies += 1
                        if case .diagnostic(let diagnostic)? = message, diagnostic.reason == .rateLimited {
                            $0.rateLimited += 1
                        }
                    }
                }
                dealer.close()
            } catch {
                print("flood: \(error)")
            }
        }
        let stepper = try StepPublisher(stepperID: "load", endpoint: topology.config.endpoints.ingress)
        #expect(try stepper.waitForAcknowledgement(timeout: .seconds(10)))
        flood.start()
        var latencies: [Duration] = []
        let clock = ContinuousClock()
        for n in 0..<300 {
            let sent = clock.now
            _ = try stepper.publish("tick", ["n": .int(Int64(n))])
            #expect(try stepper.waitForAcknowledgement(timeout: .seconds(10)), "step \(n) acknowledged")
            latencies.append(sent.duration(to: clock.now))
        }
        #expect(floodDone.wait(timeout: .seconds(60)))
        latencies.sort()
        let p50 = latencies[latencies.count / 2]
        let p99 = latencies[latencies.count * 99 / 100]
        let worst = latencies.last ?? .zero
        #expect(p99 < .seconds(1), "acks keep coming under the flood: p99 \(p99)")

        let status = try topology.status(timeout: .seconds(10))
        let controlStatus = try #require(status["control"]?.mapValue)
        let limited = controlStatus["rate_limited"]?.mapValue ?? [:]
        let refused = limited["refused"]?.intValue ?? 0
        let dropped = limited["dropped"]?.intValue ?? 0
        let answered = controlStatus["answered"]?.intValue ?? 0
        let flooded = floodReplies.withLock { $0 }
        #expect(flooded.sent == 20_000)
        #expect(refused >= 1 && flooded.rateLimited >= 1, "the flood peer was told: \(controlStatus)")
        #expect(refused + dropped >= 19_000, "nearly all of the flood was limited: \(controlStatus)")
        #expect(answered < 2_000, "answered ≈ burst + rate × duration: \(controlStatus)")
        print(
            "control flood: 20,000 status requests; stepper ack latency p50 \(p50), p99 \(p99), max \(worst); control \(WireValue.map(controlStatus)); flood peer got \(flooded.replies) replies, \(flooded.rateLimited) rate-limited"
        )
    }

    @Test("status pages: sections and a page of peers by source id; flowctl status --peers lists them page by page")
    func statusPages() throws {
        let topology = try TestTopology(configYAML: floodYAML)
        try topology.startFlowd()
        let context = try ZeroMQ.Context(defaultLinger: 500)
        let dealer = try context.socket(.dealer)
        defer { dealer.close() }
        try dealer.connect(topology.config.endpoints.ingress)
        for index in 0..<250 {
            try dealer.send(
                message: try StepMessage(
                    stepperID: "load",
                    envelope: Envelope(
                        kind: .step, contentType: .fbv, sequence: 1, source: String(format: "src#%03d", index)),
                    name: "tick", params: ["n": .int(Int64(index))]
                ).frames())
        }
        #expect(eventually(timeout: .seconds(10)) { (try? topology.status()["peers_total"]?.intValue) == 250 })
        let summary = try StatusClient.fetch(endpoint: topology.config.endpoints.control, params: ["sections": []])
        #expect(summary["peers"] == nil && summary["flows"] == nil, "sections: [] is the summary alone")
        #expect(summary["peers_total"] == 250 && summary["ingress"] != nil && summary["control"] != nil)
        let byDefault = try topology.status()
        #expect(byDefault["peers"]?.mapValue?.count == 100, "the default page")
        #expect(byDefault["flows"]?.listValue?.isEmpty == false, "existing callers keep the tree")
        let page = try StatusClient.fetch(
            endpoint: topology.config.endpoints.control,
            params: ["sections": ["peers"], "peers": ["offset": 240, "limit": 50]])
        #expect(page["peers"]?.mapValue.map { Set($0.keys) } == Set((240..<250).map { String(format: "src#%03d", $0) }))
        #expect(page["pages"]?.mapValue?["peers"]?.mapValue?["next"] == .null)
        #expect(page["flows"] == nil)
        let filtered = try StatusClient.fetch(
            endpoint: topology.config.endpoints.control, params: ["sections": ["peers"], "peers": ["prefix": "src#01"]])
        #expect(filtered["pages"]?.mapValue?["peers"]?.mapValue?["matching"] == 10)
        #expect(throws: ClientError.self, "a bad param is refused") {
            try StatusClient.fetch(endpoint: topology.config.endpoints.control, params: ["sections": ["nope"]])
        }

        let listed = try topology.run(
            "flowctl", ["status", "--config", topology.configPath, "--peers", "--limit", "100"])
        #expect(listed.status == 0, "\(listed.output)")
        #expect(listed.output.contains("peers 1–100 of 250; next page: --offset 100"), "\(listed.output)")
        let all = try topology.run(
            "flowctl", ["status", "--config", topology.configPath, "--peers", "--all", "--limit", "100"])
        #expect(all.output.split(separator: "\n").filter { $0.contains("src#") }.count == 250, "\(all.output)")
    }
}

/// A flag one thread sets and another waits for.
private final class ReadinessFlag: Sendable {
    private let state = Mutex(false)

    func set() { state.withLock { $0 = true } }

    func wait(timeout: Duration) -> Bool {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if state.withLock({ $0 }) { return true }
            Thread.sleep(forTimeInterval: 0.02)
        }
        return state.withLock { $0 }
    }
}
