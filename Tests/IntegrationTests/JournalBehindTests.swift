import FlowBusClient
import FlowBusConfiguration
import FlowBusCoordinator
import FlowBusReactorHost
import FlowBusTesting
import FlowBusTools
import FlowBusWire
import Foundation
import Testing

@Suite("A journal behind its steppers: journal-behind, and --accept-journal-loss", .serialized)
struct JournalBehindTests {
    @Test(
        "The -wal deleted after a SIGKILL: the stepper's next steps are refused as journal-behind; --accept-journal-loss applies them and reports the count lost"
    )
    func journalLostItsTail() throws {
        let topology = try TestTopology(configYAML: durableFlowYAML)
        let journal = topology.directory.appendingPathComponent("journal.sqlite").path
        var flowd = try topology.startFlowd()
        let stepper = try StepPublisher(stepperID: "load", endpoint: topology.config.endpoints.ingress)
        stepper.retransmitInterval = .milliseconds(200)
        for n in 1...10 { _ = try stepper.publish("tick", ["n": .int(Int64(n))]) }
        #expect(try stepper.waitForAcknowledgement(timeout: .seconds(10)))
        // A clean stop folds the write-ahead log into the file: 1...10 are in the journal for good.
        #expect(flowd.terminate() == 0)
        flowd = try topology.startFlowd()
        for n in 11...20 { _ = try stepper.publish("tick", ["n": .int(Int64(n))]) }
        #expect(try stepper.waitForAcknowledgement(timeout: .seconds(10)))
        #expect(stepper.lastAcknowledged == 20)
        // 11...20 are acknowledged, committed in the write-ahead log only: lost with it.
        flowd.kill()
        for suffix in ["-wal", "-shm"] { try? FileManager.default.removeItem(atPath: journal + suffix) }
        let reader = try StepJournal.open(readingAt: journal)
        let journalLast = try reader.lastSequence(of: stepper.sourceID)
        reader.close()
        #expect(journalLast == 10, "the journal is behind the stepper")

        flowd = try topology.startFlowd()
        let diagnostics = try topology.subscribe(["diag/journal-behind"])
        let sequence = try stepper.publish("tick", ["n": 21])
        #expect(sequence == 21)
        let refused = try #require(
            try waitForRefusal(of: sequence, by: stepper), "the step is refused, not left hanging")
        #expect(refused.reason == .journalBehind)
        #expect(refused.details["journal_last"] == 10)
        #expect(refused.details["received"] == 21)
        #expect(refused.details["lost"] == 10)
        #expect(
            refused.message.contains("--accept-journal-loss"), "the refusal names the way forward: \(refused.message)")
        #expect(stepper.lastAcknowledged == 20, "nothing past the journal is acknowledged")
        guard case .message(.diagnostic(let published))? = try diagnostics.next(timeout: .seconds(5)) else {
            Issue.record("journal-behind is published on events")
            return
        }
        #expect(published.reason == .journalBehind && published.details["source"]?.stringValue == stepper.sourceID)
        // Later resends are refused again, logged once.
        Thread.sleep(forTimeInterval: 1)
        let refusedCount =
            try topology.status()["ingress"]?.mapValue?["refused"]?.mapValue?["journal-behind"]?.intValue ?? 0
        #expect(refusedCount >= 2, "refused at each resend: \(refusedCount)")
        #expect(flowd.output.components(separatedBy: "journal-behind").count - 1 == 1, "logged once:\n\(flowd.output)")
        #expect(try journaledTicks(topology).last == 10, "not applied")
        #expect(flowd.terminate() == 0)

        flowd = try topology.startFlowd(arguments: ["--accept-journal-loss"])
        #expect(try stepper.waitForAcknowledgement(timeout: .seconds(10)), "adopted: acknowledged")
        _ = try stepper.publish("tick", ["n": 22])
        #expect(try stepper.waitForAcknowledgement(timeout: .seconds(10)))
        let ingress = try #require(try topology.status()["ingress"]?.mapValue)
        #expect(ingress["journal_lost"] == 10 && ingress["journal_adopted"] == 1, "\(ingress)")
        #expect(flowd.output.contains("10 sequence(s) lost"), "the loss is logged:\n\(flowd.output)")
        #expect(try journaledTicks(topology) == Array(1...10) + [21, 22], "21 and 22 applied once, after 10")
        #expect(flowd.terminate() == 0)
    }

    private func waitForRefusal(of sequence: UInt64, by stepper: StepPublisher) throws -> DiagnosticMessage? {
        let deadline = ContinuousClock.now + .seconds(10)
        while ContinuousClock.now < deadline {
            if let refusal = stepper.refusal(for: sequence) { return refusal }
            try stepper.poll(timeout: .milliseconds(100))
        }
        return stepper.refusal(for: sequence)
    }
}
