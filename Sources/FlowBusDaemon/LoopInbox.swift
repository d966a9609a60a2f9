import FlowBusProtocol
import Synchronization
import ZeroMQ

/// Where other threads leave work for a ``DaemonLoop`` (the ZAP handler's refusals, the durable
/// ledger's answers), and its wake-up. It exists before the sockets, so that the authenticator
/// can run before any of them binds.
package final class LoopInbox: Sendable {
    package let wake: WakeSignal
    private let queued = Mutex<(refusals: [Refusal], answers: [LedgerAnswer])>(([], []))

    /// - Parameter wake: The loop's wake-up, shared with whatever else wakes it (a reactor host's
    ///   reactors, when they hand it states).
    package init(wake: WakeSignal = WakeSignal()) {
        self.wake = wake
    }

    /// Reports a refusal made on another thread with the loop's next turn.
    package func inject(_ refusal: Refusal) {
        queued.withLock { $0.refusals.append(refusal) }
        wake.signal()
    }

    /// Hands the loop the durable ledger's answers to a batch's look-ups.
    package func deliver(_ answers: [LedgerAnswer]) {
        queued.withLock { $0.answers.append(contentsOf: answers) }
        wake.signal()
    }

    /// Everything left since the last call.
    package func take() -> (refusals: [Refusal], answers: [LedgerAnswer]) {
        queued.withLock { queued in
            defer {
                queued.refusals.removeAll()
                queued.answers.removeAll()
            }
            return queued
        }
    }
}
