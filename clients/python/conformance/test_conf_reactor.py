"""Reactor host: states and snapshots (§3.3 Clone pattern, §4.3 STATE / SNAPSHOT), refusals on `actions`."""

import pytest

import rawwire as w
from scenario import T, Side, details_name, settle, shape_errors, wait_ack


def counter_state(msg):
    value = msg.value(2)
    return value.get("value"), value.get("isLoading")


class View:
    """A DEALER on `actions` sending `increase` to the counter; `observer` sees every state from the start."""

    def __init__(self, topo, observer):
        self.peer = topo.peer(topo.actions)
        self.source = w.new_source("view")
        self.seq = 0
        self.observer = observer

    def increase(self):
        self.seq += 1
        self.peer.send(w.action("counter", "increase", self.seq, self.source))
        return self.seq

    def settled(self, value):
        """The state in which the counter shows `value` and is no longer loading (its last state for now)."""
        wait_ack(self.peer, self.source, self.seq)
        return self.observer.seen_or_wait(
            lambda m: m.kind == w.STATE and m.topic == "state/counter" and counter_state(m) == (value, False),
            T, f"counter at {value}, not loading")


def test_clone_pattern_late_joiner_gets_no_gap_and_no_duplicate(topo):
    """§3.3 Clone pattern steps (1)–(6) and §4.3 SNAPSHOT: "sequence = the sequence of the state it carries";
    snapshot then live states with sequence > N merge with no gap and no duplicate."""
    observer = topo.sub(topo.states, ["state/counter"])
    view = View(topo, observer)
    for value in (1, 2):
        view.increase()
        view.settled(value)
    late_states = topo.sub(topo.states, ["state/counter"])  # (1) subscribe, (2) a heartbeat came through
    late = topo.peer(topo.actions)
    late_source = w.new_source("late")
    view.increase()  # states are flowing while the snapshot is asked for
    late.send(w.snapshot_request("counter", 1, late_source))  # (3)
    snapshot = late.until(lambda m: m.kind == w.SNAPSHOT, T, "snapshot")[-1]  # (4) live states queue meanwhile
    assert not shape_errors(snapshot) and snapshot.topic == "state/counter", (snapshot, shape_errors(snapshot))
    view.settled(3)
    for value in (4, 5):
        view.increase()
        final = view.settled(value)
    late_states.seen_or_wait(lambda m: m.kind == w.STATE and m.seq == final.seq, T, "the final state")

    published = {m.seq: m.value(2) for m in observer.seen if m.kind == w.STATE and m.topic == "state/counter"}
    assert sorted(published) == list(range(min(published), final.seq + 1)), "§4.2: each state increments by one"
    assert snapshot.seq in published and snapshot.value(2) == published[snapshot.seq], \
        f"§4.3: the snapshot carries state {snapshot.seq} as published: {snapshot.value(2)}"
    merged = [snapshot] + [m for m in late_states.seen if m.kind == w.STATE and m.seq > snapshot.seq]  # (5), (6)
    assert [m.seq for m in merged] == list(range(snapshot.seq, final.seq + 1)), [m.seq for m in merged]
    assert all(m.value(2) == published[m.seq] for m in merged)

    late.send(w.snapshot_request("counter", 2, late_source))  # nothing in flight: the snapshot is the last state
    again = late.until(lambda m: m.kind == w.SNAPSHOT, T, "second snapshot")[-1]
    assert (again.seq, again.value(2)) == (final.seq, published[final.seq]), again


def test_states_numbered_by_state_sequence_and_encoded(topo):
    """§4.2: each state increments the reactor's state sequence; §4.3 STATE: 3 frames, content type not none."""
    observer = topo.sub(topo.states, ["state/counter"])
    view = View(topo, observer)
    view.increase()
    view.settled(1)
    view.increase()
    view.settled(2)
    states = [m for m in observer.seen if m.kind == w.STATE]
    assert [m.seq for m in states] == list(range(states[0].seq, states[0].seq + len(states))), states
    bad = [(m, shape_errors(m)) for m in states if shape_errors(m)]
    assert not bad, bad


def test_heartbeats_published_on_states(topo):
    """§4.3 HEARTBEAT: a reactor host publishes `hb/<source>` on `states`, topic id = envelope source."""
    states = topo.sub(topo.states, ["hb/"])
    beats = states.until(lambda m: len(states.seen) >= 3, T, "three heartbeats")
    for m in beats:
        assert m.kind == w.HEARTBEAT and not shape_errors(m) and m.source == topo.host_source, (m, shape_errors(m))


REFUSED = [
    ("unknown-reactor-action", lambda src: w.action("nothing-here", "increase", 1, src), "unknown-reactor"),
    ("unknown-reactor-snapshot", lambda src: w.snapshot_request("nothing-here", 1, src), "unknown-reactor"),
    ("bad-action", lambda src: w.action("counter", "frobnicate", 1, src), "bad-action"),
]


@pytest.mark.parametrize("build,reason", [pytest.param(b, r, id=f"s4.3-{i}") for i, b, r in REFUSED])
def test_reactor_refusal(shared, build, reason):
    """§4.3 reasons `unknown-reactor` / `bad-action`; §4.4: refused fresh messages are acknowledged, the diagnostic
    naming them (`source`, `sequence`, `topic`) before the ack (§3.3) and published on `states`."""
    peer = shared.peer(shared.actions)
    states = shared.sub(shared.states, ["diag/"])
    source = w.new_source("refused")
    frames = build(source)
    peer.send(frames)
    replies = wait_ack(peer, source, 1)
    diags = [m for m in replies if m.is_diag(reason)]
    assert diags and details_name(diags[0], source, 1), f"no diag/{reason} naming the action before its ack: {replies}"
    assert diags[0].details.get("topic") == frames[0].decode() and not shape_errors(diags[0]), diags[0]
    states.until(lambda m: m.is_diag(reason) and details_name(m, source, 1), T, f"diag/{reason} on states")


def test_every_message_the_host_sends_is_well_formed(topo):
    """§4.1–§4.3 for the reactor host: states, snapshots, acks, diagnostics and heartbeats."""
    states = topo.sub(topo.states)
    view = View(topo, states)
    view.increase()
    view.settled(1)
    peer = view.peer
    source = w.new_source("shapes")
    peer.send(w.snapshot_request("counter", 1, source))
    peer.send(w.action("counter", "frobnicate", 2, source))
    peer.send(w.action("counter", "increase", 4, source))
    peer.send(w.heartbeat(source))
    peer.until(lambda m: m.is_diag("out-of-order"), T, "out-of-order")
    settle(Side("actions", topo), peer)
    states.until(lambda m: m.is_diag("out-of-order"), T, "out-of-order on states")
    states.until(lambda m: m.kind == w.HEARTBEAT, T, "heartbeat")
    sent = [m for m in states.seen + peer.seen if m.source == topo.host_source]
    assert {m.kind for m in sent} >= {w.STATE, w.SNAPSHOT, w.ACK, w.DIAGNOSTIC, w.HEARTBEAT}, {m.kind for m in sent}
    bad = [(m, shape_errors(m)) for m in sent if shape_errors(m)]
    assert not bad, bad


def test_host_as_stepper_numbers_its_steps_from_1_without_gaps(topo):
    """§4.2 "strictly increasing from 1" and §4.3 ACK "a sender MUST number its messages to one receiver without
    gaps": the host's `login` reactor publishes steps to flowd's `ingress` as a stepper."""
    events = topo.sub(topo.events, ["step/"])
    peer = topo.peer(topo.actions)
    source = w.new_source("login-view")
    for seq in (1, 2, 3):
        peer.send(w.action("login", "submit", seq, source, {"apiKey": f"key-{seq}"}))
    wait_ack(peer, source, 3)
    got = events.until(lambda m: m.kind == w.STEP and len([x for x in events.seen if x.kind == w.STEP]) == 3, T,
                       "three steps from the host")
    steps = [m for m in got if m.kind == w.STEP]
    assert len({m.source for m in steps}) == 1, steps
    assert [m.seq for m in steps] == [1, 2, 3], f"§4.2: the host's steps are numbered {[m.seq for m in steps]}"
    bad = [(m, shape_errors(m)) for m in steps if shape_errors(m)]
    assert not bad, bad
