import FlowBusClient
import FlowBusConfiguration
import FlowBusWire
import Flows
import Foundation
import Logging

/// flowd's side of its ``Journal``: what each batch applied is recorded and committed in one
/// transaction; the engine is restored at start from the newest checkpoint and the entries after
/// it; a standby follows what the active instance journals; checkpoints are taken when due, on a
/// writer thread, and the entries they cover compacted away.
///
/// It drives the engine only through the ``StepRouter`` it is given (to replay entries and to
/// install a restored engine), on the loop's thread.
@FlowActor
final class CoordinatorJournal {
    let journal: any Journal
    /// The journal, when several flowd share it: cast once, as every turn checks its lease.
    private let shared: (any SharedJournal)?
    private let policy: FlowBusConfig.CheckpointPolicy
    private let logger: Logger
    private let writer = CheckpointWriter()
    private let committer = JournalCommitter()
    /// The entries and the compaction of the commit under way (``beginCommit(dealtWith:events:wake:)``).
    private var underWay: (count: Int, compaction: StepJournal.Compaction?)?
    private var checkpoints = CheckpointState()
    private var records = StepJournal.Batch()
    /// The id of the last entry the engine applied while restoring or following.
    private var appliedEntry: Int64 = 0
    private(set) var restoredEntries = 0
    private(set) var journaledEntries = 0
    /// A standby following the journal: it applies what the active instance journals.
    private(set) var isFollowing = false
    /// Set once a commit failed: flowd is stopping, and its engine is ahead of its journal.
    private var failed = false

    init(journal: any Journal, policy: FlowBusConfig.CheckpointPolicy, logger: Logger) {
        self.journal = journal
        shared = journal as? any SharedJournal
        self.policy = policy
        self.logger = logger
    }

    /// Lets a commit under way and a checkpoint being written finish.
    func close() {
        committer.waitUntilIdle()
        writer.waitUntilIdle()
    }

    // MARK: Recording and committing

    /// Records an applied input; FBV params are kept as the bytes that arrived.
    func record(_ kind: StepJournal.Kind, target: String, name: String, params: WirePayload?, origin: Origin) {
        guard let params, !params.isEmpty, params.contentType != .fbv else {
            records.append(
                kind, target: target, name: name, params: params?.bytes ?? [], source: origin.source,
                sequence: origin.sequence)
            return
        }
        var encoded: [UInt8] = []
        do {
            try FBV.encode(params: try params.decodeParams(), into: &encoded)
        } catch {
            logger.error("cannot encode the params of \(name) for the journal: \(error)")
            encoded = []
        }
        records.append(
            kind, target: target, name: name, params: encoded, source: origin.source, sequence: origin.sequence)
    }

    /// Commits the batch's records with the sources' last sequences (and the compaction due), in
    /// one transaction.
    /// - Returns: how long the commit took.
    /// - Throws: the journal's error; flowd then stops rather than acknowledge what it could not persist.
    func commit(dealtWith: [String: UInt64], events: JournalEvents? = nil) throws -> Duration {
        precondition(underWay == nil, "a commit is under way")
        let start = ContinuousClock.now
        let compaction = checkpoints.compaction(alongside: records.count)
        let count = records.count
        do {
            let (last, compacted) = try journal.append(
                records, events: events, lastSequences: dealtWith, compaction: compaction)
            committed(count, last: last, compacted: compacted, of: compaction)
        } catch {
            failedCommit()
            throw error
        }
        records.removeAll()
        return start.duration(to: .now)
    }

    /// Whether the next batch may be committed off the loop's thread: not when a checkpoint is due,
    /// which is taken of the engine as the commit leaves it.
    var mayCommitAside: Bool {
        !failed && !isCheckpointDue(now: .now)
    }

    /// Starts committing the batch's records on the committer's thread, as ``commit(dealtWith:events:)``
    /// does; records made meanwhile belong to the next batch. `wake` is called once it is done, and
    /// ``finishCommit(waiting:)`` then says how it went.
    func beginCommit(dealtWith: [String: UInt64], events: JournalEvents?, wake: @escaping @Sendable () -> Void) {
        precondition(underWay == nil, "a commit is under way")
        let compaction = checkpoints.compaction(alongside: records.count)
        underWay = (records.count, compaction)
        committer.start(
            records, events: events, lastSequences: dealtWith, compaction: compaction, to: journal, wake: wake)
        // The committer holds the batch: the next one gets storage of the same capacity.
        records.removeAll()
    }

    /// How the commit begun with ``beginCommit(dealtWith:events:wake:)`` went, once it is done (nil:
    /// not yet, or none under way); with `waiting`, waits for it.
    /// - Returns: how long the commit took, or the journal's error.
    func finishCommit(waiting: Bool) -> Result<Duration, any Error>? {
        guard let (count, compaction) = underWay, let outcome = committer.outcome(waiting: waiting) else { return nil }
        underWay = nil
        switch outcome.result {
        case .success(let (last, compacted)):
            committed(count, last: last, compacted: compacted, of: compaction)
            return .success(outcome.took)
        case .failure(let error):
            failedCommit()
            return .failure(error)
        }
    }

    /// Takes note of `count` entries committed, the last numbered `last`.
    private func committed(_ count: Int, last: Int64, compacted: Int, of compaction: StepJournal.Compaction?) {
        if count > 0 { checkpoints.lastEntry = last }
        if let compaction { checkpoints.compacted(compacted, of: compaction) }
        journaledEntries += count
        checkpoints.sinceLast += count
    }

    /// The engine holds what was not written: no checkpoint may be taken of it, and flowd stops.
    private func failedCommit() {
        failed = true
        records.removeAll()
    }

    /// Throws if a shared journal's lease can no longer be relied on.
    func verifyLease() throws {
        try shared?.verifyLease()
    }

    /// Throws if a shared journal's lease is known lost, without asking its store.
    func checkLease() throws {
        try shared?.checkLease()
    }

    // MARK: Restoring and following

    /// Restores the newest checkpoint into `router`'s engine, or starts its root flow, then
    /// replays the entries after it, silently: the tree, the bindings and the counters become what
    /// they were when the journal was last written.
    /// - Parameter following: a standby's start: it then follows the journal with
    ///   ``catchUp(into:makeFlow:)`` until ``stopFollowing(into:makeFlow:)``.
    func start(
        _ router: StepRouter, root: CoordinatorService.RootFactory, makeFlow: CoordinatorService.FlowFactory?,
        following: Bool
    ) async throws {
        isFollowing = following
        let clock = ContinuousClock()
        let began = clock.now
        var after: Int64 = 0
        var restored = false
        let stored = try journal.latestCheckpoint()
        if let stored {
            do {
                try restore(stored, into: router, makeFlow: makeFlow)
                after = stored.entry
                restored = true
                checkpoints.stored(stored, bytes: stored.state.count)
                // Entries a crash left uncompacted go now.
                checkpoints.covered(by: stored, keeping: policy)
            } catch {
                // Nothing is lost while the journal still has every entry: replay them all.
                guard try !journal.mayHaveCompacted() else {
                    throw JournalError.unrestorable(path: journal.location, cause: "\(error)")
                }
                logger.warning("the journal's checkpoint cannot be restored (\(error)); replaying every entry instead")
            }
        } else if try journal.mayHaveCompacted() {
            let first = try journal.entryRange()?.lowerBound ?? 0
            throw JournalError.unrestorable(
                path: journal.location,
                cause: "it has no checkpoint, and its entries before \(first) were compacted away")
        }
        let pending = try journal.count(after: after)
        checkpoints.lastEntry = try journal.entryRange()?.upperBound ?? 0
        checkpoints.sinceLast = pending
        router.events.isSilent = restored || pending > 0 || following
        defer { router.events.isSilent = isFollowing }
        if !restored { await router.startRoot(root) }
        appliedEntry = after
        guard restored || pending > 0 else { return }
        try await replayEntries(into: router, makeFlow: makeFlow)
        let from =
            restored
            ? "its checkpoint of entry \(checkpoints.entry) and \(restoredEntries) entries after it"
            : "\(restoredEntries) entries"
        logger.info("restored the journal \(journal.location) from \(from) in \(began.duration(to: clock.now))")
    }

    /// A standby applies what the active instance journaled since the last call, so that its
    /// tree is ready when it takes over.
    func catchUp(into router: StepRouter, makeFlow: CoordinatorService.FlowFactory?) async throws {
        guard isFollowing else { return }
        try await replayEntries(into: router, makeFlow: makeFlow)
    }

    /// The standby took the lease: it applies the last entries, takes the journal's checkpoint
    /// state as its own, and publishes from now on.
    func stopFollowing(into router: StepRouter, makeFlow: CoordinatorService.FlowFactory?) async throws {
        guard isFollowing else { return }
        try await catchUp(into: router, makeFlow: makeFlow)
        if let stored = try journal.latestCheckpoint() {
            checkpoints.stored(stored, bytes: stored.state.count)
            checkpoints.covered(by: stored, keeping: policy)
        }
        checkpoints.lastEntry = try journal.entryRange()?.upperBound ?? 0
        checkpoints.sinceLast = try journal.count(after: checkpoints.entry)
        isFollowing = false
        router.events.isSilent = false
        logger.info("took over the journal \(journal.location) at entry \(appliedEntry), followed while standing by")
    }

    /// Applies the journal's entries after ``appliedEntry``, silently. A standby checks after
    /// each page it read that the active instance did not compact entries it had not applied
    /// yet away meanwhile; if it did, the standby restores the newest checkpoint, which covers
    /// them, and goes on from there.
    private func replayEntries(into router: StepRouter, makeFlow: CoordinatorService.FlowFactory?) async throws {
        while true {
            let page = try journal.entries(after: appliedEntry, limit: 4096)
            if isFollowing, try compactedPastApplied() {
                // Read again at the next call.
                guard let stored = try journal.latestCheckpoint(), stored.entry > appliedEntry else { break }
                try restore(stored, into: router, makeFlow: makeFlow)
                appliedEntry = stored.entry
                checkpoints.stored(stored, bytes: stored.state.count)
                continue
            }
            guard let last = page.last else { break }
            for entry in page { await replay(entry, into: router) }
            restoredEntries += page.count
            appliedEntry = last.id
        }
    }

    /// Whether entries after ``appliedEntry`` may have been compacted away: none below the
    /// next one is left, and a checkpoint covers more than was applied.
    private func compactedPastApplied() throws -> Bool {
        if let first = try journal.entryRange()?.lowerBound, first <= appliedEntry + 1 { return false }
        return (try journal.latestCheckpointEntry() ?? 0) > appliedEntry
    }

    /// Rebuilds the engine from a stored checkpoint, into a new coordinator that replaces the
    /// current one only once it is complete.
    private func restore(
        _ stored: StepJournal.Checkpoint, into router: StepRouter, makeFlow: CoordinatorService.FlowFactory?
    ) throws {
        guard let makeFlow else {
            throw CoordinatorError(
                .notRestorable, "this coordinator runs Swift flows, which are not restored from checkpoints")
        }
        let checkpoint = try JSONDecoder().decode(CoordinatorCheckpoint.self, from: stored.state)
        let restored = FlowCoordinator()
        try restored.restore(checkpoint, makeFlow: makeFlow)
        router.install(restored)
    }

    private func replay(_ entry: StepJournal.Entry, into router: StepRouter) async {
        let params: WireParams
        do {
            params = try entry.decodeParams()
        } catch {
            logger.error("journal entry \(entry.id) has unreadable params (\(error)); replayed without them")
            params = [:]
        }
        switch entry.kind {
        case .step:
            await router.replay(.step(stepperID: entry.target), CanonicalStep(entry.name, params))
        case .deepLink:
            await router.replay(.deepLink, CanonicalStep(entry.name, params))
        case .report:
            guard let event = PresentableEvent(rawValue: entry.name) else { return }
            router.replayReport(event, for: entry.target)
        }
    }

    // MARK: Checkpoints

    /// Takes note of a checkpoint the writer finished, then writes one of `engine` when the
    /// policy says one is due and the engine allows one.
    func checkpointIfDue(of engine: FlowCoordinator) {
        precondition(underWay == nil, "a checkpoint is taken of committed entries only")
        collectCheckpoint()
        let now = ContinuousClock.now
        guard isCheckpointDue(now: now) else { return }
        if let obstacle = engine.checkpointObstacle {
            if obstacle != checkpoints.obstacle {
                logger.notice("no checkpoint for now: \(obstacle); the journal keeps every entry meanwhile")
                checkpoints.obstacle = obstacle
            }
            checkpoints.notBefore = now + .seconds(10)
            return
        }
        checkpoints.obstacle = nil
        let checkpoint: CoordinatorCheckpoint
        do {
            checkpoint = try engine.checkpoint()
        } catch {
            logger.error("cannot take a checkpoint: \(error); the journal keeps every entry meanwhile")
            checkpoints.notBefore = now + .seconds(60)
            return
        }
        guard writer.write(checkpoint, entry: checkpoints.lastEntry, to: journal) else { return }
        checkpoints.taking = now.duration(to: .now)
        checkpoints.sinceLast = 0
        checkpoints.lastWritten = .now
        // Until the writer reports: it may not start another one before.
        checkpoints.notBefore = .now + checkpoints.taking * 20
    }

    /// Whether the policy asks for a checkpoint now.
    private func isCheckpointDue(now: ContinuousClock.Instant) -> Bool {
        guard !failed, policy.everyEntries > 0, checkpoints.sinceLast > 0, now >= checkpoints.notBefore else {
            return false
        }
        return checkpoints.sinceLast >= policy.everyEntries
            || checkpoints.lastWritten.duration(to: now) >= .seconds(policy.everySeconds)
    }

    /// Takes note of a checkpoint the writer finished: the entries it covers may go.
    private func collectCheckpoint() {
        guard let outcome = writer.takeOutcome() else { return }
        if let error = outcome.error {
            logger.error("cannot write a checkpoint: \(error); the journal keeps every entry meanwhile")
            checkpoints.sinceLast += policy.everyEntries
            checkpoints.notBefore = .now + .seconds(60)
            return
        }
        checkpoints.stored(outcome.stored, bytes: outcome.bytes)
        checkpoints.covered(by: outcome.stored, keeping: policy)
        let cost = checkpoints.taking + outcome.took
        checkpoints.lastCost = cost
        // At most about a twentieth of the time goes to checkpoints.
        checkpoints.notBefore = max(checkpoints.notBefore, .now + cost * 20)
        logger.debug(
            "checkpoint of entry \(outcome.stored.entry): state taken in \(checkpoints.taking), written (\(outcome.bytes) bytes) in \(outcome.took)"
        )
    }

    /// Deletes covered entries while no batch comes to carry the deletion, for about 10 ms.
    func compactWhileIdle() {
        guard !failed else { return }
        let deadline = ContinuousClock.now + .milliseconds(10)
        while let compaction = checkpoints.compaction(alongside: 0), ContinuousClock.now < deadline {
            do {
                checkpoints.compacted(try journal.compact(compaction), of: compaction)
            } catch {
                logger.error("cannot compact the journal: \(error)")
                return
            }
        }
    }

    // MARK: Status

    /// The journal's part of a status reply.
    var status: WireValue {
        var map: WireParams = [
            "path": .string(journal.location), "restored": .int(Int64(restoredEntries)),
            "appended": .int(Int64(journaledEntries)), "since_checkpoint": .int(Int64(checkpoints.sinceLast)),
        ]
        if let created = checkpoints.created {
            var checkpoint: WireParams = [
                "entry": .int(checkpoints.entry), "bytes": .int(Int64(checkpoints.bytes)),
                "age_s": .double(Date().timeIntervalSince(created)),
            ]
            if let cost = checkpoints.lastCost {
                checkpoint["took_ms"] = .double(
                    Double(cost.components.seconds) * 1000 + Double(cost.components.attoseconds) / 1e15)
            }
            map["checkpoint"] = .map(checkpoint)
        }
        if let obstacle = checkpoints.obstacle { map["checkpoint_obstacle"] = .string(obstacle) }
        map["compacting"] = .bool(checkpoints.compactBelow != nil)
        if let shared, let history = try? shared.leaseHistory(limit: 10) {
            // The first is this instance: it serves only while it holds the lease.
            map["lease"] = .map([
                "holder": history.first.map { .string($0.instance) } ?? .null,
                "history": .list(
                    history.map { record in
                        .map([
                            "instance": .string(record.instance), "host": .string(record.host),
                            "pid": .int(Int64(record.pid)),
                            "acquired": .double(record.acquired.timeIntervalSince1970),
                        ])
                    }),
            ])
        }
        return .map(map)
    }
}
