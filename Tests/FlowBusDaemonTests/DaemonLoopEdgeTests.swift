import FlowBusDaemon
import FlowBusProtocol
import FlowBusWire
import Testing

/// A role that applies what it is given, can be suspended, and commits as told.
private final class EdgeRole: DaemonRole {
    var applied: [UInt64] = []
    var suspended = false
    var savesWork = true
    /// Thrown at the next turn's start, as flowd does once its journal's lease is lost.
    var lostLease: (any Error)?
    /// Publishes each message it applies again, as a reactor host echoes actions.
    weak var echo: BusPublisher?

    func beginTurn(now: ContinuousClock.Instant) throws {
        if let lostLease { throw lostLease }
    }
    func beginBatch() {}
    func apply(_ message: InboundMessage) -> DaemonApplied {
        applied.append(message.header.envelope.sequence)
        echo?.publish(frames: message.frames)
        return .done
    }
    func answer(_ request: InboundMessage) {}
    var isSuspended: Bool { suspended }
    var suspendedRecheck: Duration? { nil }
    var hasOutput: Bool { false }
    func commit(_ batch: DaemonBatch) -> DaemonCommit { savesWork ? .committed : .retry(after: .milliseconds(200)) }
    func tick(now: ContinuousClock.Instant) throws {}
    func endTurn(now: ContinuousClock.Instant) {}
    func isUnsaved(_ source: String) -> Bool { false }
    var hasWorkInFlight: Bool { false }
}

@Suite("The daemon loop at its edges: look-up answers, suspension, held-back commits, liveness")
struct DaemonLoopEdgeTests {
    private let peer = Array("p".utf8)

    private func step(_ sequence: UInt64, source: String = "s#1") throws -> FrameBuffer {
        try StepMessage(
            stepperID: "home", envelope: Envelope(kind: .step, contentType: .fbv, sequence: sequence, source: source),
            name: "go", params: [:]
        ).encoded()
    }

    private func heartbeat(_ source: String, sequence: UInt64 = 0) throws -> FrameBuffer {
        try Heartbeat(envelope: Envelope(kind: .heartbeat, sequence: sequence, source: source)).encoded()
    }

    private func acks(_ daemon: EmbeddedDaemon) -> [UInt64] {
        daemon.router.takeSent().compactMap {
            if case .ack(let ack)? = $0.message { ack.acknowledgedSequence } else { nil }
        }
    }

    private func published(_ daemon: EmbeddedDaemon, _ reason: DiagnosticReason? = nil) -> [WireMessage] {
        daemon.events.takePublished().filter {
            guard let reason else { return true }
            if case .diagnostic(let diagnostic) = $0 { return diagnostic.reason == reason }
            return false
        }
    }

    private func daemon(_ role: EdgeRole, ledger: Bool = false, maxBatchSize: Int = 8) -> EmbeddedDaemon {
        var settings = DaemonLoop.Settings(heartbeat: .seconds(1), maxBatchSize: maxBatchSize)
        if ledger { settings.lookUp = { $0.map { LedgerAnswer(source: $0, last: .success(nil)) } } }
        let intake = Intake(
            endpoint: "ingress",
            policy: .init(remembersSources: ledger, deadAfter: .seconds(3), hasDurableLedger: ledger),
            defaultRole: "stepper")
        let daemon = EmbeddedDaemon(role: role, intake: intake, settings: settings)
        daemon.events.subscribe("")
        daemon.turn()
        _ = daemon.events.takePublished()
        return daemon
    }

    @Test("a held message answered by the ledger in a stopping turn is neither applied nor acknowledged")
    func answerAtStop() throws {
        let role = EdgeRole()
        let daemon = daemon(role, ledger: true)
        daemon.router.deliver(try step(1), from: peer)
        daemon.turn()
        daemon.loop.control.stopAccepting()
        daemon.turn()
        #expect(daemon.loop.isFinished)
        #expect(role.applied.isEmpty && acks(daemon).isEmpty, "its sender resends it to the next instance")
    }

    @Test("a role that fails at a turn's start stops the loop at once, with nothing read or acknowledged")
    func failureAtTurnStart() throws {
        struct LeaseLost: Error {}
        let role = EdgeRole()
        let daemon = daemon(role)
        daemon.router.deliver(try step(1), from: peer)
        role.lostLease = LeaseLost()
        daemon.turn()
        #expect(daemon.loop.isFinished)
        #expect(daemon.loop.control.failure is LeaseLost)
        #expect(role.applied.isEmpty && acks(daemon).isEmpty, "its sender resends it to the next instance")
    }

    @Test("a held message answered while the daemon is suspended waits, then is applied and acknowledged")
    func answerWhileSuspended() throws {
        let role = EdgeRole()
        let daemon = daemon(role, ledger: true)
        daemon.router.deliver(try step(1), from: peer)
        daemon.turn()
        role.suspended = true
        daemon.turn()
        #expect(role.applied.isEmpty && acks(daemon).isEmpty, "not read while suspended")
        role.suspended = false
        daemon.turn()
        #expect(role.applied == [1] && acks(daemon) == [1])
    }

    @Test("more held messages than a batch: each is acknowledged in the batch that applies it")
    func heldMoreThanABatch() throws {
        let role = EdgeRole()
        let daemon = daemon(role, ledger: true, maxBatchSize: 4)
        for sequence in UInt64(1)...10 { daemon.router.deliver(try step(sequence), from: peer) }
        daemon.turn()
        daemon.turn()
        daemon.turn()
        // Each turn applies one batch of what was held: what is acknowledged was applied.
        for _ in 0..<3 {
            let acked = acks(daemon).max() ?? 0
            #expect(acked <= role.applied.max() ?? 0, "acknowledged \(acked), applied \(role.applied)")
            daemon.turn()
        }
        #expect(role.applied == Array(UInt64(1)...10))
    }

    @Test("peers are not judged dead while the daemon reads nothing; their queued heartbeats count")
    func noDeathWhileSuspended() throws {
        let role = EdgeRole()
        let daemon = daemon(role)
        daemon.router.deliver(try heartbeat("s#1"), from: peer)
        daemon.turn()
        role.suspended = true
        for _ in 0..<5 {
            daemon.router.deliver(try heartbeat("s#1"), from: peer)
            daemon.advance(by: .seconds(1))
            daemon.turn()
        }
        #expect(published(daemon, .peerDead).isEmpty)
        role.suspended = false
        daemon.turn()
        #expect(daemon.loop.data.peers["s#1"]?.isDead == false)
    }

    @Test("a numbered heartbeat (a view's filler) does not make its peer a heartbeat sender judged by silence")
    func fillerIsNoHeartbeat() throws {
        let role = EdgeRole()
        let daemon = daemon(role)
        daemon.router.deliver(try heartbeat("view:x#1", sequence: 1), from: peer)
        daemon.turn()
        for _ in 0..<5 {
            daemon.advance(by: .seconds(1))
            daemon.turn()
        }
        #expect(published(daemon, .peerDead).isEmpty)
        #expect(acks(daemon) == [1], "the filler is acknowledged")
    }

    @Test("while a commit is held back, heartbeats still go out; a final flush publishes nothing a failing commit held")
    func heldBackCommit() throws {
        let role = EdgeRole()
        role.savesWork = false
        let daemon = daemon(role)
        role.echo = daemon.loop.publisher
        daemon.router.deliver(try step(1), from: peer)
        daemon.turn()
        for _ in 0..<3 {
            daemon.advance(by: .seconds(1))
            daemon.turn()
        }
        let during = published(daemon)
        #expect(during.count == 3 && during.allSatisfy { if case .heartbeat = $0 { true } else { false } }, "\(during)")
        #expect(acks(daemon).isEmpty)
        daemon.loop.control.stopAccepting()
        daemon.turn()
        daemon.loop.flush()
        #expect(published(daemon).isEmpty && acks(daemon).isEmpty, "the echo and the ack stay unsent")
    }
}
