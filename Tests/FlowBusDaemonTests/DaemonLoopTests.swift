import FlowBusDaemon
import FlowBusProtocol
import FlowBusWire
import Testing

/// A role that records what the loop hands it and commits as told.
private final class RecordingRole: DaemonRole {
    var applied: [String] = []
    var commits: [DaemonBatch] = []
    /// What the next commits return, in order; `.committed` once it is empty.
    var outcomes: [DaemonCommit] = []
    var output: [String] = []
    var workInFlight = false
    /// Whether the commit left under way is done, and how it went.
    var underWayDone = false
    var underWayOutcome: Result<Void, any Error> = .success(())
    /// Events seen, in order: "apply n", "commit", "finish" (asked whether done), "wait" (waited
    /// for it), "tick".
    var log: [String] = []
    weak var publisher: BusPublisher?

    func beginTurn(now: ContinuousClock.Instant) {}
    func beginBatch() {}

    func apply(_ message: InboundMessage) -> DaemonApplied {
        let name = (try? NamedMessageView.decode(from: message.frames, header: message.header).name) ?? "?"
        applied.append(name)
        log.append("apply \(name)")
        // What a daemon publishes while applying is held until its batch is committed.
        publisher?.publish(
            DiagnosticMessage(
                envelope: publisher!.envelope(.diagnostic), reason: "applied", message: name, details: [:]))
        return .done
    }

    func answer(_ request: InboundMessage) {}
    var isSuspended: Bool { false }
    var suspendedRecheck: Duration? { nil }
    var hasOutput: Bool { !output.isEmpty }

    func commit(_ batch: DaemonBatch) -> DaemonCommit {
        commits.append(batch)
        log.append("commit")
        let outcome = outcomes.isEmpty ? .committed : outcomes.removeFirst()
        if case .committed = outcome { output.removeAll() }
        return outcome
    }

    func finishCommit(waiting: Bool) -> Result<Void, any Error>? {
        log.append(waiting ? "wait" : "finish")
        return waiting || underWayDone ? underWayOutcome : nil
    }

    func tick(now: ContinuousClock.Instant) throws { log.append("tick") }
    func endTurn(now: ContinuousClock.Instant) {}
    func isUnsaved(_ source: String) -> Bool { false }
    var hasWorkInFlight: Bool { workInFlight }
}

private struct Unwritable: Error {}

@Suite("The daemon loop, driven by hand: batches, commits, acks, refusals, liveness, look-ups")
struct DaemonLoopTests {
    private let peer = Array("peer-1".utf8)

    private func daemon(
        role: RecordingRole, durable: [String: UInt64]? = nil, failingLookUp: Bool = false, drain: Duration = .zero,
        maxHeldBytes: Int = 1 << 20, maxGroupedBatchSize: Int = 8
    ) -> EmbeddedDaemon {
        var settings = DaemonLoop.Settings(heartbeat: .seconds(1), maxBatchSize: 8)
        settings.maxGroupedBatchSize = maxGroupedBatchSize
        settings.drain = drain
        settings.maxHeldBytes = maxHeldBytes
        if let durable {
            settings.lookUp = { sources in
                sources.map {
                    LedgerAnswer(source: $0, last: failingLookUp ? .failure(Unwritable()) : .success(durable[$0]))
                }
            }
        }
        let intake = Intake(
            endpoint: "ingress",
            policy: .init(remembersSources: durable != nil, deadAfter: .seconds(3), hasDurableLedger: durable != nil),
            defaultRole: "stepper")
        let daemon = EmbeddedDaemon(role: role, intake: intake, settings: settings, refusalDetails: ["host": "h"])
        role.publisher = daemon.loop.publisher
        daemon.events.subscribe("")
        return daemon
    }

    private func step(_ name: String, sequence: UInt64, source: String = "s#1") throws -> FrameBuffer {
        try StepMessage(
            stepperID: "home", envelope: Envelope(kind: .step, contentType: .fbv, sequence: sequence, source: source),
            name: name, params: [:]
        ).encoded()
    }

    private func acks(_ sent: [EmbeddedRouterTransport.Sent]) -> [UInt64] {
        sent.compactMap { if case .ack(let ack)? = $0.message { ack.acknowledgedSequence } else { nil } }
    }

    /// Steps `s1`, `s2`, … numbered by `sequences`, delivered from the one peer.
    private func deliverSteps(_ sequences: ClosedRange<UInt64>, to daemon: EmbeddedDaemon) throws {
        for sequence in sequences {
            daemon.router.deliver(try step("s\(sequence)", sequence: sequence), from: peer)
        }
    }

    /// The acks sent over `times` turns, in order.
    private func acks(turning daemon: EmbeddedDaemon, times: Int) -> [UInt64] {
        (0..<times).flatMap { _ in
            daemon.turn()
            return acks(daemon.router.takeSent())
        }
    }

    private func published(_ daemon: EmbeddedDaemon) -> [String] {
        daemon.events.takePublished().compactMap {
            if case .diagnostic(let diagnostic) = $0 {
                "\(diagnostic.reason.rawValue):\(diagnostic.message)"
            } else {
                nil
            }
        }
    }

    @Test("a batch is applied, committed, and only then are its publications released and its acks sent")
    func commitBeforeReleaseAndAck() throws {
        let role = RecordingRole()
        let daemon = daemon(role: role)
        daemon.turn()
        _ = daemon.events.takePublished()
        daemon.router.deliver(try step("a", sequence: 1), from: peer)
        daemon.router.deliver(try step("b", sequence: 2), from: peer)
        daemon.turn()
        #expect(role.log == ["tick", "apply a", "apply b", "commit"])
        #expect(role.commits.last?.size == 2 && role.commits.last?.dealtWith == ["s#1": 2])
        #expect(acks(daemon.router.takeSent()) == [2], "one cumulative ack, after the commit")
        #expect(published(daemon) == ["applied:a", "applied:b"])
    }

    @Test(
        "a batch ends once what it published holds maxHeldBytes: a burst of events is committed and released in parts")
    func batchBoundByHeldBytes() throws {
        let role = RecordingRole()
        // Each applied step publishes one diagnostic of about 100 bytes.
        let daemon = daemon(role: role, maxHeldBytes: 150)
        daemon.turn()
        _ = daemon.events.takePublished()
        try deliverSteps(1...5, to: daemon)
        let acknowledged = acks(turning: daemon, times: 5)
        #expect(role.commits.map(\.size) == [2, 2, 1], "two steps' diagnostics pass 150 bytes")
        #expect(acknowledged == [2, 4, 5])
        #expect(published(daemon) == (1...5).map { "applied:s\($0)" })
    }

    @Test("a commit that must stop the daemon publishes and acknowledges nothing, and ends the loop with its failure")
    func failedCommitStops() throws {
        let role = RecordingRole()
        role.outcomes = [.stop(Unwritable())]
        let daemon = daemon(role: role)
        daemon.turn()
        _ = daemon.events.takePublished()
        daemon.router.deliver(try step("a", sequence: 1), from: peer)
        daemon.turn()
        #expect(daemon.loop.isFinished && daemon.loop.control.failure is Unwritable)
        #expect(acks(daemon.router.takeSent()).isEmpty)
        #expect(published(daemon).isEmpty, "the batch's events were dropped with it")
    }

    @Test("a commit to try again holds everything back and reads nothing until it succeeds, then all goes out in order")
    func retriedCommitHoldsBack() throws {
        let role = RecordingRole()
        role.outcomes = [.retry(after: .milliseconds(200)), .retry(after: .milliseconds(200))]
        let daemon = daemon(role: role)
        daemon.turn()
        _ = daemon.events.takePublished()
        daemon.router.deliver(try step("a", sequence: 1), from: peer)
        daemon.turn()
        daemon.router.deliver(try step("b", sequence: 2), from: peer)
        daemon.turn()
        #expect(role.applied == ["a"], "no data read while a commit is failing")
        #expect(daemon.router.pending == 1)
        #expect(acks(daemon.router.takeSent()).isEmpty && published(daemon).isEmpty)
        daemon.advance(by: .milliseconds(250))
        daemon.turn()
        #expect(role.commits.count == 2, "tried again once due")
        #expect(acks(daemon.router.takeSent()).isEmpty)
        daemon.advance(by: .milliseconds(250))
        daemon.turn()
        #expect(acks(daemon.router.takeSent()) == [1], "the held ack, once committed")
        #expect(published(daemon) == ["applied:a"])
        daemon.turn()
        #expect(role.applied == ["a", "b"], "reading resumes")
        #expect(acks(daemon.router.takeSent()) == [2])
    }

    @Test(
        "a commit under way: the next batch is applied meanwhile and held apart; the first is released and acknowledged before the next commits"
    )
    func commitUnderWay() throws {
        let role = RecordingRole()
        role.outcomes = [.underWay]
        let daemon = daemon(role: role)
        daemon.turn()
        _ = daemon.events.takePublished()
        role.log.removeAll()
        daemon.router.deliver(try step("a", sequence: 1), from: peer)
        daemon.router.deliver(try step("b", sequence: 2), from: peer)
        daemon.turn()
        #expect(role.log == ["apply a", "apply b", "commit"])
        #expect(acks(daemon.router.takeSent()).isEmpty && published(daemon).isEmpty, "nothing before it is done")
        daemon.router.deliver(try step("c", sequence: 3), from: peer)
        daemon.turn()
        #expect(role.log == ["apply a", "apply b", "commit", "finish", "apply c", "wait", "commit"])
        #expect(acks(daemon.router.takeSent()) == [2, 3], "each batch's ack once its commit is done, in order")
        #expect(published(daemon) == ["applied:a", "applied:b", "applied:c"])
    }

    @Test(
        "while a commit is under way a batch grows past its size up to maxGroupedBatchSize; once it is done, it ends at its size"
    )
    func groupCommit() throws {
        for done in [false, true] {
            let role = RecordingRole()
            role.outcomes = [.underWay, .underWay]
            role.underWayDone = done
            let daemon = daemon(role: role, maxGroupedBatchSize: 16)
            daemon.turn()
            _ = daemon.events.takePublished()
            try deliverSteps(1...30, to: daemon)
            let acknowledged = acks(turning: daemon, times: 4)
            #expect(role.commits.map(\.size) == (done ? [8, 8, 8, 6] : [8, 16, 6]))
            #expect(acknowledged == (done ? [8, 16, 24, 30] : [8, 24, 30]))
            #expect(published(daemon) == (1...30).map { "applied:s\($0)" })
        }
    }

    @Test("a commit under way with nothing read after it goes out at the turn after it is done; the tick waits for it")
    func commitUnderWayWhileIdle() throws {
        let role = RecordingRole()
        role.outcomes = [.underWay, .underWay]
        let daemon = daemon(role: role)
        daemon.turn()
        _ = daemon.events.takePublished()
        daemon.router.deliver(try step("a", sequence: 1), from: peer)
        daemon.turn()
        daemon.turn()
        #expect(acks(daemon.router.takeSent()).isEmpty && published(daemon).isEmpty, "the loop does not wait idle")
        role.underWayDone = true
        daemon.turn()
        #expect(acks(daemon.router.takeSent()) == [1] && published(daemon) == ["applied:a"])
        role.underWayDone = false
        role.log.removeAll()
        daemon.router.deliver(try step("b", sequence: 2), from: peer)
        daemon.turn()
        daemon.advance(by: .seconds(1))
        daemon.turn()
        #expect(role.log == ["apply b", "commit", "finish", "finish", "wait", "tick"], "done before the tick")
        #expect(acks(daemon.router.takeSent()) == [2])
    }

    @Test("a commit under way that fails stops the loop: neither its batch nor the next is published or acknowledged")
    func commitUnderWayFails() throws {
        let role = RecordingRole()
        role.outcomes = [.underWay]
        role.underWayOutcome = .failure(Unwritable())
        let daemon = daemon(role: role)
        daemon.turn()
        _ = daemon.events.takePublished()
        daemon.router.deliver(try step("a", sequence: 1), from: peer)
        daemon.turn()
        daemon.router.deliver(try step("b", sequence: 2), from: peer)
        daemon.turn()
        #expect(role.applied == ["a", "b"])
        #expect(daemon.loop.isFinished && daemon.loop.control.failure is Unwritable)
        #expect(acks(daemon.router.takeSent()).isEmpty && published(daemon).isEmpty)
    }

    @Test("after the loop stopped, a final flush commits what is left, then publishes it and sends the acks it owes")
    func finalFlush() throws {
        let role = RecordingRole()
        role.outcomes = [.underWay]
        let daemon = daemon(role: role)
        daemon.turn()
        _ = daemon.events.takePublished()
        daemon.router.deliver(try step("a", sequence: 1), from: peer)
        daemon.turn()
        daemon.loop.control.stopAccepting()
        daemon.turn()
        #expect(daemon.loop.isFinished && acks(daemon.router.takeSent()) == [1], "the stop waited for the commit")
        #expect(published(daemon) == ["applied:a"])
        role.output = ["late"]
        daemon.loop.flush()
        #expect(
            role.log.suffix(2) == ["wait", "commit"] && role.output.isEmpty, "what was made after the stop is committed"
        )
    }

    @Test("refusals go to the sender and the bus with the daemon's details; an unnumbered message is malformed")
    func refusals() throws {
        let role = RecordingRole()
        let daemon = daemon(role: role)
        daemon.turn()
        _ = daemon.events.takePublished()
        daemon.router.deliver(FrameBuffer(frames: [Array("step/home".utf8), [1, 2, 3]]), from: peer)
        daemon.router.deliver(try step("zero", sequence: 0), from: peer)
        daemon.turn()
        let sent = daemon.router.takeSent().compactMap { if case .diagnostic(let d)? = $0.message { d } else { nil } }
        #expect(sent.map(\.reason) == [.malformed, .malformed])
        #expect(sent.allSatisfy { $0.details["host"] == "h" && $0.details["endpoint"] == "ingress" })
        #expect(sent.map(\.envelope.sequence) == [1, 2], "numbered in the socket's own sequence")
        #expect(published(daemon).count == 2)
        #expect(daemon.loop.data.replier.refused[.malformed] == 2)
        #expect(role.applied.isEmpty)
    }

    @Test("heartbeats are answered; a peer that sent them and went silent is reported dead once")
    func deadPeers() throws {
        let role = RecordingRole()
        let daemon = daemon(role: role)
        daemon.turn()
        _ = daemon.events.takePublished()
        daemon.router.deliver(
            try Heartbeat(envelope: Envelope(kind: .heartbeat, sequence: 0, source: "view#1")).encoded(), from: peer)
        daemon.turn()
        #expect(daemon.router.takeSent().compactMap { if case .heartbeat? = $0.message { 1 } else { nil } } == [1])
        for _ in 0..<5 {
            daemon.advance(by: .seconds(1))
            daemon.turn()
        }
        let dead = published(daemon).filter { $0.hasPrefix("peer-dead") }
        #expect(dead.count == 1 && dead[0].contains("view#1"), "\(dead)")
        #expect(daemon.loop.data.peers["view#1"]?.isDead == true)
    }

    @Test("a source the intake does not hold waits for its look-up, done once per batch; a failed one is resent")
    func lookUps() throws {
        let role = RecordingRole()
        let daemon = daemon(role: role, durable: ["s#1": 4])
        daemon.turn()
        daemon.router.deliver(try step("old", sequence: 4), from: peer)
        daemon.router.deliver(try step("next", sequence: 5), from: peer)
        daemon.turn()
        #expect(role.applied.isEmpty, "held while the ledger is read")
        #expect(acks(daemon.router.takeSent()).isEmpty)
        daemon.turn()
        #expect(role.applied == ["next"], "4 was in the ledger: a duplicate")
        #expect(acks(daemon.router.takeSent()) == [5])

        let failing = RecordingRole()
        let unreadable = self.daemon(role: failing, durable: [:], failingLookUp: true)
        unreadable.turn()
        unreadable.router.deliver(try step("a", sequence: 1), from: peer)
        unreadable.turn()
        unreadable.turn()
        #expect(failing.applied.isEmpty && acks(unreadable.router.takeSent()).isEmpty, "dropped, unacknowledged")
        #expect(unreadable.loop.data.intake.counters.lookUpFailures == 1)
    }

    @Test("a connection refused by ZAP is refused like a message: counted, published with the daemon's details")
    func injectedRefusal() {
        let role = RecordingRole()
        let daemon = daemon(role: role)
        daemon.turn()
        _ = daemon.events.takePublished()
        daemon.loop.control.inbox.inject(
            Refusal(reason: .unauthorized, detail: "connection from 10.0.0.9 refused: no", endpoint: "zap"))
        daemon.turn()
        let diagnostics = daemon.events.takePublished().compactMap {
            if case .diagnostic(let d) = $0 { d } else { nil }
        }
        #expect(diagnostics.map(\.reason) == [.unauthorized])
        #expect(diagnostics.first?.details["endpoint"] == "zap" && diagnostics.first?.details["host"] == "h")
        #expect(daemon.loop.data.replier.refused[.unauthorized] == 1)
    }

    @Test(
        "a graceful stop reads what is queued and waits for work in flight, up to its drain; a plain one stops at once")
    func stopping() throws {
        let role = RecordingRole()
        let daemon = daemon(role: role, drain: .seconds(2))
        daemon.turn()
        daemon.router.deliver(try step("queued", sequence: 1), from: peer)
        role.workInFlight = true
        daemon.loop.control.stopAccepting(graceful: true)
        daemon.turn()
        #expect(role.applied == ["queued"] && !daemon.loop.isFinished)
        #expect(acks(daemon.router.takeSent()) == [1])
        daemon.advance(by: .seconds(1))
        daemon.turn()
        #expect(!daemon.loop.isFinished, "work in flight, within the drain")
        role.workInFlight = false
        daemon.turn()
        #expect(daemon.loop.isFinished && daemon.loop.control.failure == nil)

        let plain = RecordingRole()
        let abrupt = self.daemon(role: plain, drain: .seconds(2))
        abrupt.turn()
        abrupt.router.deliver(try step("late", sequence: 1), from: peer)
        abrupt.loop.control.stopAccepting()
        abrupt.turn()
        #expect(abrupt.loop.isFinished && plain.applied.isEmpty, "left to be resent to the next instance")
    }
}
