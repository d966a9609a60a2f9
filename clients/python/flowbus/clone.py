"""The Clone rule (PROTOCOL.md 3.3, REACTORS.md "The snapshot rule") without sockets."""

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class StateUpdate:
    """One state delivered to a view: the snapshot (is_snapshot=True) or a live state."""

    sequence: int
    value: Any
    is_snapshot: bool
    source: str


class CloneMerger:
    """Merges a snapshot and live states into one gap-free, duplicate-free sequence.

    Feed it with `snapshot()` and `state()`; both return (states to deliver, resync) where
    resync=True means "send a new snapshotRequest": before the first snapshot live states are
    queued; after it, states with sequence ≤ the last delivered are dropped, the next one is
    delivered, and a gap (sequence > last + 1) or a state from another host source queues the
    state and asks for a new snapshot.
    """

    def __init__(self):
        self.synced = False
        self.last = None  # sequence of the last delivered state
        self.source = None  # host source of the last delivered state
        self.queue = []
        self.resynchronisations = 0

    def state(self, sequence, value, source):
        if not self.synced:
            self.queue.append((sequence, value, source))
            return [], False
        if source != self.source:
            return self._lost((sequence, value, source))
        if sequence <= self.last:
            return [], False
        if sequence == self.last + 1:
            self.last = sequence
            return [StateUpdate(sequence, value, False, source)], False
        return self._lost((sequence, value, source))

    def snapshot(self, sequence, value, source):
        if self.synced:
            return [], False  # an answer to a request we no longer wait for
        delivered = []
        if not (source == self.source and self.last is not None and sequence <= self.last):
            # a new history, or a later state of the same one; the same or an older state of
            # the history already delivered is not delivered again
            delivered.append(StateUpdate(sequence, value, True, source))
            self.last, self.source = sequence, source
        self.synced = True
        queued, self.queue = sorted(self.queue, key=lambda item: item[0]), []
        for index, (seq, val, src) in enumerate(queued):
            more, resync = self.state(seq, val, src)
            delivered += more
            if resync:
                self.queue += queued[index + 1:]
                return delivered, True
        return delivered, False

    def _lost(self, item):
        self.synced = False
        self.resynchronisations += 1
        self.queue.append(item)
        return [], True
