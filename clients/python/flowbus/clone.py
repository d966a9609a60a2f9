"""The Clone rule (PROTOCOL.md 3.3, REACTORS.md "The snapshot rule") without sockets."""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from .values import Value


@dataclass(frozen=True)
class StateUpdate:
    """One state delivered to a view: the snapshot (is_snapshot=True) or a live state."""

    sequence: int
    value: Value
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

    def __init__(self) -> None:
        self.synced = False
        self.last: int | None = None  # sequence of the last delivered state
        self.source: str | None = None  # host source of the last delivered state
        self.queue: list[tuple[int, Value, str]] = []
        self.resynchronisations = 0

    def state(self, sequence: int, value: Value, source: str) -> tuple[list[StateUpdate], bool]:
        if not self.synced:
            self.queue.append((sequence, value, source))
            return [], False
        if source != self.source:
            return self._lost((sequence, value, source))
        last = cast(int, self.last)  # synced: the snapshot set it
        if sequence <= last:
            return [], False
        if sequence == last + 1:
            self.last = sequence
            return [StateUpdate(sequence, value, False, source)], False
        return self._lost((sequence, value, source))

    def snapshot(self, sequence: int, value: Value, source: str) -> tuple[list[StateUpdate], bool]:
        if self.synced:
            return [], False  # an answer to a request we no longer wait for
        delivered: list[StateUpdate] = []
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

    def _lost(self, item: tuple[int, Value, str]) -> tuple[list[StateUpdate], bool]:
        self.synced = False
        self.resynchronisations += 1
        self.queue.append(item)
        return [], True
