import Dispatch
import Synchronization

/// Appends flowd's batches to its journal on a thread of its own, one at a time, so that the loop
/// applies the next batch while SQLite or PostgreSQL makes this one durable (a group commit: the
/// loop holds the batch's events and acks until ``outcome(waiting:)`` reports it done).
final class JournalCommitter: Sendable {
    /// A commit done: the last entry's id and the entries compacted, or the journal's error.
    struct Outcome: Sendable {
        var result: Result<(last: Int64, compacted: Int), any Error>
        var took: Duration
    }

    private let queue = DispatchQueue(label: "flowd.journal-commit")
    private let outcomeReady = DispatchSemaphore(value: 0)
    private let finished = Mutex<Outcome?>(nil)

    /// Starts appending `records` with the batch's events, sources and compaction; `wake` is
    /// called once it is done. The previous commit's outcome must have been taken.
    func start(
        _ records: StepJournal.Batch, events: JournalEvents?, lastSequences: [String: UInt64],
        compaction: StepJournal.Compaction?, to journal: any Journal, wake: @escaping @Sendable () -> Void
    ) {
        queue.async { [self] in
            let began = ContinuousClock.now
            let result = Result {
                try journal.append(records, events: events, lastSequences: lastSequences, compaction: compaction)
            }
            let outcome = Outcome(result: result, took: began.duration(to: .now))
            finished.withLock { $0 = outcome }
            outcomeReady.signal()
            wake()
        }
    }

    /// The started commit's outcome once it is done (nil: not yet); with `waiting`, waits for it.
    func outcome(waiting: Bool) -> Outcome? {
        if waiting {
            outcomeReady.wait()
        } else if outcomeReady.wait(timeout: .now()) == .timedOut {
            return nil
        }
        return finished.withLock { outcome in
            defer { outcome = nil }
            return outcome
        }
    }

    /// Returns once no commit is running (before the journal closes).
    func waitUntilIdle() {
        queue.sync {}
    }
}
