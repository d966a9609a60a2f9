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

@Suite("Back-pressure: no silent drops", .serialized)
struct BackPressureTests {
    @Test(
        "A subscriber that stops reading makes flowd drop at its high-water mark: every drop is counted and reported in band; no step is lost on the way in"
    )
    func slowSubscriber() throws {
        let demo = try String(contentsOf: packageRoot.appendingPathComponent("config/demo.yaml"), encoding: .utf8)
        let topology = try TestTopology(
            configYAML: demo.replacingOccurrences(of: "highWaterMark: 100000", with: "highWaterMark: 50")
                + "\nheartbeatMilliseconds: 100\n")
        try topology.startFlowd()
        let fast = try topology.subscribe([""])

        // The slow one subscribes to everything, reads one heartbeat (so it is attached), then stops.
        let context = try ZeroMQ.Context(defaultLinger: 0)
        let slow = try context.socket(.sub)
        try slow.setOptions([.receiveHighWaterMark(10), .subscribe("")])
        try slow.connect(topology.config.endpoints.events)
        var scratch = FrameBuffer()
        #expect(try slow.receive(into: &scratch, mode: .within(.seconds(10))))

        let stepper = try topology.stepper("apikey")
        let total = 20_000
        var flowdSequences: [UInt64] = []
        var reports: [DiagnosticMessage] = []
        func take(_ received: BusSubscriber.Received?) {
            guard case .message(let message)? = received else { return }
            if message.envelope.source.hasPrefix("flowd#") { flowdSequences.append(message.envelope.sequence) }
            if case .diagnostic(let diagnostic) = message, diagnostic.reason == .droppedHWM {
                reports.append(diagnostic)
            }
        }
        for _ in 0..<total {
            try stepper.publish("apiKeyIsComplete")
            take(try fast.next(timeout: .zero))
        }
        // Inbound, nothing is dropped: flowd acknowledges every step (it reads at its own pace).
        #expect(try stepper.waitForAcknowledgement(timeout: .seconds(120)))
        let ingress = try #require(try topology.status()["ingress"]?.mapValue)
        #expect(ingress["accepted"]?.intValue == Int64(total))

        // Outbound, the slow subscriber's full queue made flowd drop, and it counted each drop.
        let dropped = try #require(try topology.status()["events"]?.mapValue?["dropped_hwm"]?.intValue)
        #expect(dropped > 0)

        // Once the slow subscriber is gone, a dropped-hwm diagnostic reports every drop in band.
        slow.close()
        let deadline = ContinuousClock.now + .seconds(20)
        var finalDrops: Int64 = -1
        while ContinuousClock.now < deadline {
            take(try fast.next(timeout: .milliseconds(100)))
            finalDrops = try topology.status()["events"]?.mapValue?["dropped_hwm"]?.intValue ?? -1
            if let last = reports.last, last.details["total"]?.intValue == finalDrops { break }
        }
        let reported = reports.compactMap { $0.details["dropped"]?.intValue }.reduce(0, +)
        #expect(reported == finalDrops, "dropped-hwm reports add up to the drops counted in status")
        #expect(reports.last?.details["total"]?.intValue == finalDrops)
        // A subscriber can also tell from flowd's sequence numbers that it missed messages.
        let missing = zip(flowdSequences, flowdSequences.dropFirst()).reduce(0) { $0 + Int64($1.1 - $1.0 - 1) }
        #expect(missing > 0)
        #expect(missing <= finalDrops)
    }
}
