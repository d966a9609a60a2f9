import FlowBusClient
import FlowBusConfiguration
import FlowBusDaemon
import FlowBusProtocol
import FlowBusTracing
import FlowBusWire
import Foundation
import Reactors
import Synchronization
import ZeroMQ

/// What the hosted reactors hand to the host's I/O thread: states to publish, steps to send.
package enum ReactorHostOutboxItem: Sendable {
    /// A state, in the reactor's sequence order, with the trace of the action that caused it.
    case state(reactorID: String, sequence: UInt64, state: WireValue, trace: TraceContext?)
    /// A state that could not be encoded as a wire value.
    case unencodableState(reactorID: String, sequence: UInt64, detail: String)
    /// A step a reactor publishes as a stepper, with the trace of the action that caused it.
    case step(stepperID: String, name: String, params: WireParams, trace: TraceContext?)
}

/// Counters of a reactor host, for logs and tests.
public struct ReactorHostCounters: Sendable, Hashable {
    /// Messages received on the `actions` endpoint.
    public var received = 0
    /// Actions decoded and handed to their reactor.
    public var actionsApplied = 0
    /// Snapshot requests answered.
    public var snapshotsAnswered = 0
    /// Messages whose (source, sequence) was already dealt with.
    public var duplicates = 0
    /// Refused messages by reason (duplicates included).
    public var refused: [DiagnosticReason: Int] = [:]
    /// States published on the `states` endpoint.
    public var statesPublished = 0
    /// States the `states` socket refused at its high-water mark (views see a gap and resynchronise).
    public var statesDropped = 0
    /// States not encoded: no view subscribed to their reactor (the latest still answers snapshots).
    public var statesUnsubscribed = 0
    /// States that could not be encoded (a bug of the reactor's `State` type).
    public var statesUnencodable = 0
    /// Steps sent to flowd by reactors that are steppers.
    public var stepsSent = 0
    /// Steps that could not be queued (too many wait for flowd's ack) or encoded.
    public var stepsDropped = 0
    /// Mutation streams that ended with an error (the reactor lives on).
    public var mutationFailures = 0
    /// Reactor instances running.
    public var reactors = 0
    /// Messages refused as `out-of-order` (a host that persists: a sequence skipped ahead).
    public var outOfOrder = 0
    /// Transactions that saved states and de-duplication entries (a host that persists).
    public var saves = 0
    /// Transactions that failed (acks are held back until one succeeds).
    public var saveFailures = 0

    public init() {}
}

/// The hand-over point between reactors (any thread, any task) and the host's I/O thread, which
/// owns every socket. Pushing never blocks: items queue under a mutex and the I/O thread is woken
/// through an eventfd when the queue goes from empty to non-empty.
@usableFromInline
package final class ReactorHostOutlet: Sendable {
    package let wake = WakeSignal()
    private let queue = Mutex<[ReactorHostOutboxItem]>([])
    package let counters = Mutex(ReactorHostCounters())
    /// Where the counters go as swift-metrics metrics (``reportMetrics()``).
    package let metrics: ReactorHostMetrics

    package init(metrics: ReactorHostMetrics) {
        self.metrics = metrics
    }

    /// Hands the counters' gains to swift-metrics; called by the I/O thread once per loop turn.
    package func reportMetrics() {
        metrics.report(counters.withLock { $0 })
    }

    /// The I/O thread, once it runs: what it pushes itself (an action's synchronous states) it
    /// flushes after the batch, so it needs no wake-up.
    private let ioThread = Atomic<UInt>(0)

    /// Called by the I/O thread when it starts.
    package func ioThreadStarted() {
        ioThread.store(UInt(bitPattern: Int(bitPattern: pthread_self())), ordering: .releasing)
    }

    package func push(_ item: ReactorHostOutboxItem) {
        let wasEmpty = queue.withLock { queue in
            defer { queue.append(item) }
            return queue.isEmpty
        }
        if wasEmpty, ioThread.load(ordering: .acquiring) != UInt(bitPattern: Int(bitPattern: pthread_self())) {
            wake.signal()
        }
    }

    /// Whether anything is queued.
    var hasItems: Bool { queue.withLock { !$0.isEmpty } }

    /// Moves everything queued so far, in order, to the end of `items`; both arrays keep their
    /// capacity, so that handing states over allocates nothing.
    package func take(into items: inout [ReactorHostOutboxItem]) {
        queue.withLock { queue in
            // Swapped when `items` is empty (the usual case): no item copied, both buffers kept.
            if items.isEmpty {
                swap(&items, &queue)
            } else {
                items.append(contentsOf: queue)
                queue.removeAll(keepingCapacity: true)
            }
        }
    }

    package func mutationFailed() {
        counters.withLock { $0.mutationFailures += 1 }
    }

    package func count(_ update: (inout ReactorHostCounters) -> Void) {
        counters.withLock { update(&$0) }
    }
}
