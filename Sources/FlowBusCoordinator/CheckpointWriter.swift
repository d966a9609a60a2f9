import Dispatch
import FlowBusClient
import FlowBusConfiguration
import FlowBusDaemon
import FlowBusProtocol
import FlowBusWire
import Flows
import Foundation
import Synchronization
import ZeroMQ

/// Encodes and stores flowd's checkpoints on a thread of its own: taking the engine's state is
/// all the loop pays, so a large tree does not hold up acknowledgements while it is written.
package final class CheckpointWriter: Sendable {
    /// A checkpoint the writer finished with.
    package struct Outcome: Sendable {
        package var stored: StepJournal.Checkpoint
        package var bytes: Int
        /// Encoding and storing it.
        package var took: Duration
        package var error: String?
    }

    private let queue = DispatchQueue(label: "flowd.checkpoint")
    private let state = Mutex<(busy: Bool, outcome: Outcome?)>((false, nil))

    /// Starts writing `checkpoint`, taken once the entries up to `entry` were applied; false
    /// when the previous one is still being written.
    package func write(_ checkpoint: CoordinatorCheckpoint, entry: Int64, to journal: any Journal) -> Bool {
        let started = state.withLock { state in
            if state.busy { return false }
            state.busy = true
            return true
        }
        guard started else { return false }
        queue.async { [self] in
            let began = ContinuousClock.now
            var stored = StepJournal.Checkpoint(entry: entry, created: Date(), state: Data())
            var failure: String?
            do {
                stored.state = try JSONEncoder().encode(checkpoint)
                try journal.store(stored)
            } catch {
                failure = "\(error)"
            }
            let outcome = Outcome(
                stored: stored, bytes: stored.state.count, took: began.duration(to: .now), error: failure)
            state.withLock { state in
                state.busy = false
                state.outcome = outcome
            }
        }
        return true
    }

    /// The checkpoint written since the last call, if any.
    package func takeOutcome() -> Outcome? {
        state.withLock { state in
            defer { state.outcome = nil }
            return state.outcome
        }
    }

    /// Returns once nothing is being written (before the journal closes).
    package func waitUntilIdle() {
        queue.sync {}
    }
}
