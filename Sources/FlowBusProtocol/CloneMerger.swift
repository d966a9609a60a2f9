import FlowBusWire

/// The view side of the Clone pattern, without sockets: merges a snapshot with live states so
/// that the consumer sees every state once, in sequence order, with no gap.
///
/// Live states received before the snapshot are queued; the snapshot (sequence N) is delivered,
/// then queued and later states with sequence ≤ N are dropped and the others delivered in order.
/// A live state whose sequence skips ahead (a state lost at a high-water mark) or that comes
/// from another host source (the host restarted) asks for a new snapshot: the merger goes back
/// to waiting and the caller sends a snapshot request.
///
/// Across a host restart (a snapshot from another source), the merger keeps what it delivered
/// last: a host that persists the reactor continues its sequence, so a snapshot with the last
/// delivered sequence and the same state is a duplicate and is dropped, and one with a higher
/// sequence is delivered. A snapshot with a lower sequence (a host that does not persist the
/// reactor starts again from 0), or the same sequence with another state, is delivered too: the
/// reactor's history started again.
package struct CloneMerger {
    package enum Phase: Equatable {
        case waitingForSnapshot
        case live
    }

    package init() {}

    package private(set) var phase = Phase.waitingForSnapshot
    package private(set) var lastSequence: UInt64?
    package private(set) var lastState: WireValue?
    package private(set) var source: String?
    private var queued: [ReactorViewState] = []
    /// States dropped because the snapshot (or an earlier state) already covered them.
    package private(set) var dropped = 0

    /// A live state from the `states` endpoint.
    /// - Returns: the states to deliver now, and whether a new snapshot is needed.
    package mutating func live(_ state: ReactorViewState) -> (deliver: [ReactorViewState], resync: Bool) {
        if phase == .waitingForSnapshot {
            queued.append(state)
            return ([], false)
        }
        var delivered: [ReactorViewState] = []
        let resync = apply(state, into: &delivered)
        return (delivered, resync)
    }

    /// The snapshot answering the request; ignored unless one is awaited.
    /// - Returns: the states to deliver now (the snapshot first), and whether a new snapshot is needed.
    package mutating func snapshot(_ snapshot: ReactorViewState) -> (deliver: [ReactorViewState], resync: Bool) {
        guard phase == .waitingForSnapshot else { return ([], false) }
        var delivered: [ReactorViewState] = []
        let isNew: Bool
        if let last = lastSequence {
            if snapshot.envelope.source == source {
                isNew = snapshot.sequence > last
            } else {
                // The host restarted: the same state again is a duplicate.
                isNew = snapshot.sequence != last || snapshot.state != lastState
            }
        } else {
            isNew = true
        }
        if isNew {
            delivered.append(snapshot)
            lastSequence = snapshot.sequence
            lastState = snapshot.state
        } else {
            dropped += 1
        }
        source = snapshot.envelope.source
        phase = .live
        // States of another host instance than the snapshot's are not its history: replayed, each
        // would ask for a snapshot again, forever (a newer instance's next heartbeat or state asks).
        let pending = queued.filter { $0.envelope.source == snapshot.envelope.source }
        dropped += queued.count - pending.count
        queued.removeAll()
        for (index, state) in pending.enumerated() where apply(state, into: &delivered) {
            queued.append(contentsOf: pending[(index + 1)...])
            return (delivered, true)
        }
        return (delivered, false)
    }

    /// Applies a live state in the live phase; true when it reveals a gap (then it is queued).
    private mutating func apply(_ state: ReactorViewState, into delivered: inout [ReactorViewState]) -> Bool {
        guard let last = lastSequence, state.envelope.source == source else {
            return startResync(with: state)
        }
        if state.sequence <= last {
            dropped += 1
            return false
        }
        if state.sequence != last + 1 {
            return startResync(with: state)
        }
        lastSequence = state.sequence
        lastState = state.state
        delivered.append(state)
        return false
    }

    /// The host restarted (a heartbeat from another source): wait for a new snapshot, keeping
    /// what was delivered last so that the snapshot is not delivered twice.
    package mutating func hostRestarted() {
        phase = .waitingForSnapshot
        queued.removeAll()
    }

    private mutating func startResync(with state: ReactorViewState) -> Bool {
        phase = .waitingForSnapshot
        queued.append(state)
        return true
    }
}
