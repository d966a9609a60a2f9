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

/// A value of `/proc/PID/status` in kB (`VmHWM`, `VmRSS`).
func procStatus(_ pid: Int32, _ key: String) -> Int? {
    guard let text = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return nil }
    let line = text.split(separator: "\n").first { $0.hasPrefix(key + ":") }
    return line?.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first.flatMap { Int($0) }
}

@Suite("flowd under source churn")
struct SourceChurnTests {
    @Test("200,000 invented source ids: memory stays bounded, the one that returns after eviction is applied once")
    func inventedSources() throws {
        let sources = 200_000
        // Few events kept for replay: the default 100,000 would take some 15 MB of the peak.
        let topology = try TestTopology(
            configYAML: durableFlowYAML + "\nlimits: { maxSources: 10000 }\nreplay: { retain: 1000 }\n")
        let flowd = try topology.startFlowd()
        let baseline = procStatus(flowd.processIdentifier, "VmRSS") ?? 0
        let context = try ZeroMQ.Context(defaultLinger: 500)
        let dealer = try context.socket(.dealer)
        defer { dealer.close() }
        try dealer.connect(topology.config.endpoints.ingress)
        func tick(_ n: Int64, as source: String, sequence: UInt64) throws {
            try dealer.send(
                message: try StepMessage(
                    stepperID: "load",
                    envelope: Envelope(kind: .step, contentType: .fbv, sequence: sequence, source: source),
                    name: "tick", params: ["n": .int(n)]
                ).frames())
        }
        func awaitAck() throws -> Ack {
            while true {
                if case .ack(let ack) = try receiveDecoded(dealer, within: .seconds(30), what: "an ack") { return ack }
            }
        }
        // A window of 1,000 unacknowledged steps, as a publisher keeps: what is measured is the
        // sources flowd holds, not messages queued in its socket.
        var acknowledged = 0
        for index in 0..<sources {
            try tick(Int64(index), as: "invented#\(index)", sequence: 1)
            while index - acknowledged >= 1000 {
                _ = try awaitAck()
                acknowledged += 1
            }
        }
        while acknowledged < sources {
            _ = try awaitAck()
            acknowledged += 1
        }
        // Each source's ledger went to the journal; a liveness check forgets all but 10,000.
        Thread.sleep(forTimeInterval: 0.3)
        let peak = procStatus(flowd.processIdentifier, "VmHWM") ?? .max
        let peers = try topology.status()["peers_total"]?.intValue ?? -1
        #expect(peers <= 10_000, "flowd holds \(peers) sources")
        // Holding all 200,000 (about 290 bytes each) would add some 58 MB; 10,000 add about 3 MB.
        // With 10,000 held the peak rises about 24 MB; holding all would take it past the bound.
        #expect(peak - baseline < 40_000, "peak RSS \(peak) kB, \(baseline) kB at start")

        try tick(-1, as: "invented#0", sequence: 1)
        let resent = try awaitAck()
        #expect(resent.acknowledgedSource == "invented#0" && resent.acknowledgedSequence == 1)
        try tick(-2, as: "invented#0", sequence: 2)
        let next = try awaitAck()
        #expect(next.acknowledgedSource == "invented#0" && next.acknowledgedSequence == 2)
        let ticks = try journaledTicks(topology)
        #expect(ticks.count == sources + 1, "the resend of sequence 1 was not applied again")
        #expect(ticks.last == -2, "sequence 2 was applied, not refused as out-of-order")
        print("source churn: \(sources) sources, flowd RSS \(baseline) kB at start, peak \(peak) kB, holding \(peers)")
    }
}
