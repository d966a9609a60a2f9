import FlowBusClient
import FlowBusConfiguration
import FlowBusProtocol
import FlowBusWire
import Synchronization
import ZeroMQ

/// Where other threads leave work for the loop (the ZAP handler's refusals), and its wake-up.
/// It exists before the sockets, so that the authenticator can run before any of them binds.
package final class LoopInbox: Sendable {
    package let wake = WakeSignal()
    private let refusals = Mutex<[Refusal]>([])

    /// Reports a refusal made on another thread with the loop's next turn.
    package init() {}

    package func inject(_ refusal: Refusal) {
        refusals.withLock { $0.append(refusal) }
        wake.signal()
    }

    package func take() -> [Refusal] {
        refusals.withLock { refusals in
            defer { refusals.removeAll() }
            return refusals
        }
    }
}
