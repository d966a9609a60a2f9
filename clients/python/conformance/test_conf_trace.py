"""§4.5 trace context: the trace frame is accepted on steps and actions, re-published with them, and what a
daemon publishes because of a traced message carries that message's trace."""

import rawwire as w
from scenario import T, shape_errors, wait_ack

TRACE = w.TRACEPARENT + b"\ncongo=t61rcWkgMzE"
TRACE_ID = w.TRACEPARENT[3:35]


def trace_frame(m):
    """The message's trace frame (§4.5), or None."""
    return m.frames[-1] if m.kind in w.TRACE_KINDS and len(m.frames) == w.KIND_FRAMES[m.kind] + 1 else None


def carries_trace(m):
    """§4.5: a well-formed trace frame in the step's trace (flowd's own span's context, or the step's unchanged)."""
    frame = trace_frame(m)
    if frame is None:
        return False
    parent = frame.split(b"\n")[0]
    return len(parent) == 55 and parent[3:35] == TRACE_ID


def test_traced_step_is_applied_republished_whole_and_its_navigation_carries_its_trace(topo):
    """§4.5: "A receiver MUST accept the frame"; "A re-published step ... is its sender's frame for frame, trace
    frame included"; flowd's willNavigate, navigation commands and didNavigate caused by it carry its trace."""
    events = topo.sub(topo.events, ["step/", "nav/", "cmd/", "diag/"])
    peer = topo.peer(topo.ingress)
    source = w.new_source("apikey")
    sent = w.step("apikey", "apiKeyIsComplete", 1, source) + [TRACE]
    peer.send(sent)
    wait_ack(peer, source, 1)
    events.seen_or_wait(lambda m: m.topic == "nav/did/WatchedFlow", T, "the navigation the step causes")
    assert [m.frames for m in events.seen if m.kind == w.STEP and m.source == source] == [sent]
    assert not [m for m in events.seen if m.kind == w.DIAGNOSTIC], "a traced step is applied as any other"
    caused = [m for m in events.seen if m.kind in (w.WILL_NAVIGATE, w.DID_NAVIGATE, w.NAV_COMMAND)]
    assert caused, events.seen
    for m in caused:
        assert not shape_errors(m), (m, shape_errors(m))
        assert carries_trace(m), f"§4.5: {m} does not carry the step's trace"


def test_empty_trace_frame_is_no_trace_context(topo):
    """§4.5: "An empty trace frame means no trace context, as an absent one does"."""
    events = topo.sub(topo.events, ["step/", "diag/"])
    peer = topo.peer(topo.ingress)
    source = w.new_source("apikey")
    sent = w.step("apikey", "apiKeyIsComplete", 1, source) + [b""]
    peer.send(sent)
    wait_ack(peer, source, 1)
    events.seen_or_wait(lambda m: m.kind == w.STEP and m.source == source, T, "the step re-published")
    assert [m.frames for m in events.seen if m.kind == w.STEP and m.source == source] == [sent]
    assert not [m for m in events.seen if m.kind == w.DIAGNOSTIC and source.encode() in m.frames[3]]


def test_traced_action_its_states_and_the_step_it_causes_carry_its_trace(topo):
    """§4.5: a reactor host's states caused by an action carry its trace, and so does a step the host publishes
    as a stepper because of it (the login reactor publishes `apiKeyIsComplete`), and flowd's navigation after."""
    states = topo.sub(topo.states, ["state/login"])
    events = topo.sub(topo.events, ["step/apikey", "nav/did/"])
    peer = topo.peer(topo.actions)
    source = w.new_source("view")
    peer.send(w.action("login", "submit", 1, source, {"apiKey": "k"}) + [TRACE])
    wait_ack(peer, source, 1)
    states.seen_or_wait(lambda m: m.kind == w.STATE and m.value(2).get("isSubmitting") is False, T,
                        "login's state after the submit")
    login_states = [m for m in states.seen if m.kind == w.STATE]
    assert login_states and all(carries_trace(m) for m in login_states), login_states
    events.seen_or_wait(lambda m: m.topic == "nav/did/WatchedFlow", T, "the navigation the host's step causes")
    step = next(m for m in events.seen if m.kind == w.STEP)
    assert carries_trace(step), f"§4.5: the host's step {step} does not carry the action's trace"
    assert all(carries_trace(m) for m in events.seen if m.kind == w.DID_NAVIGATE), events.seen
