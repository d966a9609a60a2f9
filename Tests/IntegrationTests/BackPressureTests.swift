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
        // One that resumes (PROTOCOL.md §4.6): it asks for the events flowd reports dropped.
        let resuming = try BusSubscriber(
            endpoints: [topology.config.endpoints.events], topics: [""],
            resuming: EventResumption(control: [topology.config.endpoints.control], since: 0))
        #expect(try resuming.waitUntilCaughtUp(timeout: .seconds(10)))

        // The slow one subscribes to everything, reads one heartbeat (so it is attached), then stops.
        let context = try ZeroMQ.Context(defaultLinger: 0)
        let slow = try context.socket(.sub)
        try slow.setOptions([.receiveHighWaterMark(10), .subscribe("")])
        try slow.connect(topology.config.endpoints.events)
        var scratch = FrameBuffer()
        #expect(try slow.receive(into: &scratch, mode: .within(.seconds(10))))

        let stepper = try topology.stepper("apikey")
        let total = 20_000
        // The events published before the subscribers came (the root flow's start).
        let before = try #require(try topology.status()["events"]?.mapValue?["head"]?.intValue)
        var plainEvents = 0
        var reports: [DiagnosticMessage] = []
        func take(_ received: BusSubscriber.Received?) -> Bool {
            guard case .message(let message)? = received else { return false }
            if case .diagnostic(let diagnostic) = message, diagnostic.reason == .droppedHWM {
                reports.append(diagnostic)
            }
            if message.kind != .heartbeat, message.envelope.sequence != 0 || message.kind == .step { plainEvents += 1 }
            return true
        }
        var resumedSteps: [UInt64] = []
        var resumedEvents = 0
        func takeResumed(_ received: BusSubscriber.Received?) -> Bool {
            guard case .message(let message)? = received else { return false }
            if case .step = message, message.envelope.source == stepper.sourceID {
                resumedSteps.append(message.envelope.sequence)
            }
            if message.kind != .heartbeat, message.envelope.sequence != 0 || message.kind == .step {
                resumedEvents += 1
            }
            return true
        }
        for _ in 0..<total {
            try stepper.publish("apiKeyIsComplete")
            _ = take(try fast.next(timeout: .zero))
            _ = takeResumed(try resuming.next(timeout: .zero))
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
            _ = take(try fast.next(timeout: .milliseconds(100)))
            finalDrops = try topology.status()["events"]?.mapValue?["dropped_hwm"]?.intValue ?? -1
            if let last = reports.last, last.details["total"]?.intValue == finalDrops { break }
        }
        let reported = reports.compactMap { $0.details["dropped"]?.intValue }.reduce(0, +)
        #expect(reported == finalDrops, "dropped-hwm reports add up to the drops counted in status")
        #expect(reports.last?.details["total"]?.intValue == finalDrops)
        // The reports name the events dropped (nobody received them): a plain subscriber knows
        // what it missed, a resuming one asks for them again.
        let named = reports.flatMap { $0.details["events"]?.listValue ?? [] }.compactMap { pair -> Int64? in
            guard let bounds = pair.listValue, let first = bounds.first?.intValue, let last = bounds.last?.intValue
            else { return nil }
            return last - first + 1
        }.reduce(0, +)
        #expect(named > 0 && named <= finalDrops, "the dropped events are named (the other drops are heartbeats)")
        let head = try #require(try topology.status()["events"]?.mapValue?["head"]?.intValue)
        // Heartbeats keep coming: read until the count stops growing.
        var settled = ContinuousClock.now + .seconds(1)
        while ContinuousClock.now < settled {
            let before = plainEvents
            _ = take(try fast.next(timeout: .milliseconds(100)))
            if plainEvents != before { settled = ContinuousClock.now + .seconds(1) }
        }
        #expect(Int64(plainEvents) + named == head - before, "the plain subscriber missed exactly the events named")

        // The resuming subscriber ends with every event once: every step, each once.
        let resumeDeadline = ContinuousClock.now + .seconds(30)
        while ContinuousClock.now < resumeDeadline, resumedEvents < head {
            guard takeResumed(try resuming.next(timeout: .seconds(2))) else { break }
        }
        #expect(resumedEvents == Int(head), "every event once: \(resumedEvents) of \(head)")
        #expect(Set(resumedSteps).count == total && resumedSteps.count == total, "every step once")
        print(
            "back-pressure: \(finalDrops) events dropped at the high-water mark; the resuming subscriber got \(resumedEvents) of \(head), \(resuming.replayCount) replay(s)"
        )
    }
}
