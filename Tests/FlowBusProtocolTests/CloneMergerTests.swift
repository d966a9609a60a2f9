import FlowBusWire
import Testing

@testable import FlowBusProtocol

private func state(_ sequence: UInt64, source: String = "host#1", snapshot: Bool = false) -> ReactorViewState {
    ReactorViewState(
        reactorID: "counter",
        envelope: Envelope(kind: snapshot ? .snapshot : .state, sequence: sequence, source: source),
        state: .int(Int64(sequence)), isSnapshot: snapshot)
}

@Suite("Clone merge of a snapshot with live states")
struct CloneMergerTests {
    @Test("Live states queued before the snapshot are dropped up to its sequence, the rest delivered in order")
    func snapshotThenQueued() {
        var merger = CloneMerger()
        for sequence: UInt64 in [3, 4, 5, 6] {
            #expect(merger.live(state(sequence)).deliver.isEmpty)
        }
        let outcome = merger.snapshot(state(4, snapshot: true))
        #expect(outcome.deliver.map(\.sequence) == [4, 5, 6])
        #expect(outcome.deliver.first?.isSnapshot == true)
        #expect(!outcome.resync)
        #expect(merger.dropped == 2)
        #expect(merger.live(state(7)).deliver.map(\.sequence) == [7])
        #expect(merger.live(state(7)).deliver.isEmpty, "a duplicate is dropped")
    }

    @Test("A snapshot newer than every queued state is delivered alone")
    func snapshotNewerThanQueue() {
        var merger = CloneMerger()
        _ = merger.live(state(1))
        let outcome = merger.snapshot(state(9, snapshot: true))
        #expect(outcome.deliver.map(\.sequence) == [9])
        #expect(merger.live(state(10)).deliver.map(\.sequence) == [10])
    }

    @Test("A gap asks for a new snapshot; states after it wait for that snapshot")
    func gapResynchronises() {
        var merger = CloneMerger()
        _ = merger.snapshot(state(0, snapshot: true))
        #expect(merger.live(state(1)).deliver.map(\.sequence) == [1])
        let gap = merger.live(state(3))
        #expect(gap.resync && gap.deliver.isEmpty)
        #expect(merger.phase == .waitingForSnapshot)
        #expect(merger.live(state(4)).deliver.isEmpty)
        let outcome = merger.snapshot(state(3, snapshot: true))
        #expect(outcome.deliver.map(\.sequence) == [3, 4])
        #expect(!outcome.resync)
    }

    @Test("A state from a new host source (a restart) asks for a new snapshot")
    func newSourceResynchronises() {
        var merger = CloneMerger()
        _ = merger.snapshot(state(5, snapshot: true))
        let restart = merger.live(state(1, source: "host#2"))
        #expect(restart.resync)
        let outcome = merger.snapshot(state(2, source: "host#2", snapshot: true))
        #expect(outcome.deliver.map(\.sequence) == [2])
        #expect(merger.live(state(3, source: "host#2")).deliver.map(\.sequence) == [3])
    }

    @Test(
        "States of the former host queued across a restart are dropped by the new host's snapshot, not asked about again"
    )
    func formerHostsQueuedStatesAreDropped() {
        var merger = CloneMerger()
        _ = merger.snapshot(state(5, snapshot: true))
        // A gap, then the host restarts before the answer: the old host's states wait in the queue.
        #expect(merger.live(state(7)).resync)
        _ = merger.live(state(8))
        let outcome = merger.snapshot(state(9, source: "host#2", snapshot: true))
        #expect(outcome.deliver.map(\.sequence) == [9] && !outcome.resync)
        #expect(merger.phase == .live)
        #expect(merger.live(state(10, source: "host#2")).deliver.map(\.sequence) == [10])
    }

    @Test("A snapshot nobody waits for is ignored")
    func unexpectedSnapshot() {
        var merger = CloneMerger()
        _ = merger.snapshot(state(2, snapshot: true))
        #expect(merger.snapshot(state(7, snapshot: true)).deliver.isEmpty)
        #expect(merger.live(state(3)).deliver.map(\.sequence) == [3])
    }

    @Test(
        "A restarted host that persists the reactor: its snapshot of the last state seen is dropped, the next states follow"
    )
    func persistedRestartNoDuplicate() {
        var merger = CloneMerger()
        _ = merger.snapshot(state(0, snapshot: true))
        #expect(merger.live(state(1)).deliver.map(\.sequence) == [1])
        #expect(merger.live(state(2)).deliver.map(\.sequence) == [2])
        merger.hostRestarted()
        // The restarted host republishes its restored state 2, then continues with 3.
        #expect(merger.live(state(2, source: "host#2")).deliver.isEmpty)
        #expect(merger.live(state(3, source: "host#2")).deliver.isEmpty)
        let outcome = merger.snapshot(state(2, source: "host#2", snapshot: true))
        #expect(outcome.deliver.map(\.sequence) == [3], "snapshot 2 is the state already delivered: dropped")
        #expect(!outcome.resync)
        #expect(merger.live(state(4, source: "host#2")).deliver.map(\.sequence) == [4])
    }

    @Test("A restarted host whose snapshot is ahead of what the view saw: the snapshot is delivered")
    func persistedRestartAhead() {
        var merger = CloneMerger()
        _ = merger.snapshot(state(5, snapshot: true))
        let restart = merger.live(state(7, source: "host#2"))
        #expect(restart.resync && restart.deliver.isEmpty)
        let outcome = merger.snapshot(state(7, source: "host#2", snapshot: true))
        #expect(outcome.deliver.map(\.sequence) == [7])
        #expect(outcome.deliver.first?.isSnapshot == true)
    }

    @Test("A restarted host that does not persist: sequence 0 again, delivered as a new history")
    func unpersistedRestart() {
        var merger = CloneMerger()
        _ = merger.snapshot(state(5, snapshot: true))
        merger.hostRestarted()
        let outcome = merger.snapshot(state(0, source: "host#2", snapshot: true))
        #expect(outcome.deliver.map(\.sequence) == [0])
        #expect(merger.live(state(1, source: "host#2")).deliver.map(\.sequence) == [1])
    }
}
