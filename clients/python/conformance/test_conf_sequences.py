"""§4.2 sequence: "per source and socket, strictly increasing from 1, one step per message sent on that socket
(a daemon numbers its acks, its events and its status replies separately)" — on `events`, the event sequence of
§4.6; and source ids across restarts."""

import rawwire as w
from scenario import T, Side, settle, wait_ack


def consecutive(seqs):
    return all(b == a + 1 for a, b in zip(seqs, seqs[1:]))


def test_events_gapless_while_status_requests_are_answered(topo):
    """§4.2, §4.6: every event flowd publishes on `events` (subscribed to everything) takes the next event sequence,
    with no gap, whatever else it does: its own carry it in their envelope, a step it passes on takes one too (its
    sender's envelope kept), and a heartbeat repeats the last one."""
    events = topo.sub(topo.events)
    control = topo.peer(topo.control)
    ingress = topo.peer(topo.ingress)
    stepper = w.new_source("gapless")
    for seq in range(1, 6):
        control.send(w.status_request(w.new_source("status"), seq))
        ingress.send(w.step("conformance", "ping", seq, stepper))
        ingress.send(w.heartbeat(stepper))
    ingress.send(w.step("apikey", "apiKeyIsComplete", 6, stepper))  # a navigation: will, commands, did
    wait_ack(ingress, stepper, 6)
    replies = control.until(lambda m: m.kind == w.STATUS_REPLY and len(control.seen) == 5, T, "5 status replies")
    flowd = topo.ready_status.source
    events.until(lambda m: m.kind == w.DID_NAVIGATE and m.topic == "nav/did/WatchedFlow", T, "the last navigation")
    events.until(lambda m: m.kind == w.HEARTBEAT, T, "a heartbeat after it")
    last = None  # the event sequence reached
    numbered = []
    for m in events.seen:
        if m.kind == w.HEARTBEAT:
            assert last is None or m.seq == last, f"§4.6: a heartbeat carries the last event sequence {last}: {m}"
            last = m.seq
        elif m.source != flowd:
            assert m.kind == w.STEP, m
            last = None if last is None else last + 1
        elif last is not None:
            assert m.seq == last + 1, f"§4.6: after event {last}, {m} carries {m.seq}"
            last = m.seq
            numbered.append(m.seq)
    assert len(numbered) > 10, f"§4.6: flowd's numbered events: {numbered}"
    assert consecutive([m.seq for m in replies]), [m.seq for m in replies]


def test_status_replies_have_their_own_counter(topo):
    """§4.2: status replies are numbered separately: consecutive, from 1, however many events and acks flowd sent
    between them."""
    control = topo.peer(topo.control)
    ingress = topo.peer(topo.ingress)
    assert topo.ready_status.seq == 1, f"the readiness probe's reply was flowd's first on control: {topo.ready_status}"
    seqs = []
    for seq in range(0, 4):  # the first reply also ends whatever the readiness probe left behind
        control.send(w.status_request(w.new_source("status")))
        seqs.append(control.until(lambda m: m.kind == w.STATUS_REPLY, T, "status reply")[-1].seq)
        source = w.new_source("busy")
        ingress.send(w.step("conformance", "ping", 1, source))  # events and acks in between
        wait_ack(ingress, source, 1)
    assert seqs == list(range(seqs[0], seqs[0] + 4)) and seqs[0] <= topo.status_probes + 1, \
        f"§4.2: status replies numbered {seqs} after {topo.status_probes} readiness probes"


def test_ingress_replies_numbered_in_their_own_sequence(flowd_only):
    """§4.2/§4.4: acks, diagnostics and heartbeat answers on `ingress` share that socket's sequence, from 1,
    apart from `events` (flowd has published heartbeats there already)."""
    topo = flowd_only
    events = topo.sub(topo.events, ["hb/"])
    assert events.seen[-1].seq >= 1
    peer = topo.peer(topo.ingress)
    source = w.new_source("numbered")
    peer.send(w.heartbeat(source))
    peer.send(w.step("conformance", "ping", 1, source))
    peer.send(w.step("conformance", "ping", 2, source, params=b"[1]"))  # refused: diagnostic and ack
    peer.send(w.step("conformance", "ping", 4, source))  # gap: out-of-order diagnostic and ack
    peer.until(lambda m: m.is_diag("out-of-order"), T, "out-of-order diagnostic")
    settle(Side("ingress", topo), peer)
    seqs = [m.seq for m in peer.seen]
    assert seqs == list(range(1, len(seqs) + 1)), f"§4.2: ingress replies numbered {seqs} ({peer.seen})"


def test_actions_replies_numbered_apart_from_states(topo):
    """§4.2: the host numbers its acks on `actions` separately from its own messages on `states`; state and
    snapshot messages carry the reactor's state sequence instead."""
    states = topo.sub(topo.states)
    peer = topo.peer(topo.actions)
    source = w.new_source("numbered")
    peer.send(w.heartbeat(source))
    peer.send(w.action("counter", "increase", 1, source))
    peer.send(w.action("counter", "frobnicate", 2, source))  # refused: diagnostic and ack
    peer.send(w.action("counter", "increase", 3, source))
    wait_ack(peer, source, 3)
    peer.barrier(T)
    own = [m.seq for m in peer.seen]
    assert own == list(range(1, len(own) + 1)), f"§4.2: actions replies numbered {own} ({peer.seen})"
    states.until(lambda m: m.is_diag("bad-action"), T, "diag/bad-action on states")
    states.until(lambda m: m.kind == w.HEARTBEAT, T, "a heartbeat after it")
    host = [m.seq for m in states.seen if m.kind in (w.HEARTBEAT, w.DIAGNOSTIC)]
    assert consecutive(host), f"§4.2: the host's own messages on states have a gap: {host}"
    state_seqs = [m.seq for m in states.seen if m.kind == w.STATE]
    assert state_seqs and consecutive(state_seqs), f"§4.2: each state increments the state sequence: {state_seqs}"


def test_restarted_flowd_takes_a_new_source_id(topo):
    """§4.2: "A process that restarts without persisting its sequence MUST use a new source id"."""
    before = topo.ready_status
    topo.stop("flowd")
    topo.start_flowd()
    after = topo.ready_status
    assert after.source != before.source or after.seq > before.seq, (before, after)


def test_restarted_reactor_host_takes_a_new_source_id(topo):
    """§4.2: the same for a reactor host (its heartbeats start again from a new source)."""
    before = topo.host_source
    states = topo.sub(topo.states, ["hb/"])
    last = states.seen[-1].seq
    topo.stop("reactor-host")
    topo.start_host()
    after = topo.host_source
    again = topo.sub(topo.states, ["hb/"]).seen[-1]
    assert after != before or again.seq > last, (before, after)
