"""End to end against the real daemons (flowd, reactor-host --host demo) of `swift build`."""

import pytest

import flowbus
from flowbus import DidNavigate, Events, ReactorView, Refused, Stepper

T = 5.0  # every wait is bounded by this many seconds


def counter(update):
    return update.value["value"], update.value["isLoading"]


def test_stepper_step_navigates_main_flow(bus):
    with Events(bus.events, ["nav/did/"], timeout=T) as events, Stepper(bus.ingress, "apikey", timeout=T) as stepper:
        receipt = stepper.publish("apiKeyIsComplete")
        assert receipt.sequence == 1 and receipt.ack.acked_sequence >= 1
        did = events.wait_for(lambda m: isinstance(m, DidNavigate) and m.step == "apiKeyIsComplete", timeout=T)
        assert did.flow == "MainFlow" and did.topic == "nav/did/MainFlow"


def test_stepper_reports_refusals(bus):
    with Stepper(bus.ingress, "apikey", timeout=T, events_endpoint=bus.events) as stepper:
        with pytest.raises(Refused) as refused:  # routing refusal, seen on events
            stepper.publish("noSuchStep")
        assert refused.value.reason == "unknown-step"
        with pytest.raises(flowbus.WireError):  # refused locally, before sending: not an int64
            stepper.publish("apiKeyIsComplete", big=2**63)
        assert stepper.sequence == 1
    with Stepper(bus.ingress, "nobody", timeout=T, events_endpoint=bus.events) as stepper:
        with pytest.raises(Refused) as refused:
            stepper.publish("apiKeyIsComplete")
        assert refused.value.reason == "unbound-stepper"


def test_stepper_wait_tells_applied_from_dropped(bus):
    """wait=True: the outcome of the step itself, matched by source and sequence (PROTOCOL.md 3.3)."""
    with Stepper(bus.ingress, "apikey", timeout=T) as stepper:
        with pytest.raises(ValueError):  # the outcome is on events: wait=True needs it
            stepper.publish("apiKeyIsComplete", wait=True)
        assert stepper.sequence == 0, "nothing was sent"
    with Stepper(bus.ingress, "apikey", timeout=T, events_endpoint=bus.events) as stepper:
        receipt = stepper.publish("apiKeyIsComplete", wait=True)
        assert receipt.sequence == 1
    # The Watched tab is not selected: its list's step is dropped, and publish says so.
    with Stepper(bus.ingress, "watched/movies", timeout=T, events_endpoint=bus.events) as stepper:
        with pytest.raises(flowbus.Dropped) as dropped:
            stepper.publish("moviePicked", wait=True, withMovieId=1)
        assert dropped.value.reason == "not-visible"
        assert dropped.value.details["source"] == stepper.source and dropped.value.details["sequence"] == 1
        assert isinstance(dropped.value, Refused), "a Dropped is a Refused: older callers still catch it"
        assert stepper.publish("moviePicked", wait=False, withMovieId=2) == 2


def test_stepper_resends_from_expected_after_a_lost_step(bus):
    """4.4: a gap is refused `out-of-order` with `expected`; the stepper resends from there."""
    with Events(bus.events, ["step/apikey"], timeout=T) as events, Stepper(bus.ingress, "apikey", timeout=T) as stepper:
        stepper.publish("wishlistTab")  # sequence 1, acknowledged
        real_send = stepper._send
        stepper._send = lambda frames: True  # sequence 2 is lost in transit
        stepper.publish_params("watchedTab", wait=False)
        stepper._send = real_send
        receipt = stepper.publish("wishlistTab")  # sequence 3 arrives first: refused, then 2 and 3 resent
        assert receipt.sequence == 3 and receipt.ack.acked_sequence == 3
        assert not stepper._outbox.ledger.unacked
        seen = [events.wait_for(lambda m: m.source == stepper.source, timeout=T).sequence for _ in range(3)]
        assert seen == [1, 2, 3], "flowd applied each once, in order"


def test_stepper_bad_params_refused_on_ingress(bus):
    with Stepper(bus.ingress, "apikey", timeout=T) as stepper:
        # a params frame that is not a map, built by hand: flowd refuses it with bad-params
        frames = flowbus.step_frames("apikey", "apiKeyIsComplete", {"x": 1}, source=stepper.source, sequence=1)
        frames[3] = b"[1]"
        stepper._outbox.ledger.keep(frames)
        stepper._outbox.flush(stepper._send)
        with pytest.raises(Refused) as refused:
            stepper.wait_ack(1)
        assert refused.value.reason == "bad-params" and refused.value.details["sequence"] == 1


def test_view_snapshot_then_states_and_late_joiner(bus):
    with ReactorView(bus.actions, bus.states, "counter", timeout=T) as view:
        snapshot = view.next_state(T)
        assert snapshot is not None and snapshot.is_snapshot
        assert (snapshot.sequence, counter(snapshot)) == (0, (0, False))
        assert view.send("increase").sequence >= 1
        states = [view.next_state(T) for _ in range(3)]
        assert None not in states, f"only {states}"
        assert [(s.sequence, counter(s), s.is_snapshot) for s in states] == [
            (1, (0, True), False), (2, (1, True), False), (3, (1, False), False)]
        assert view.next_state(0.3) is None  # nothing more, no duplicate
        with ReactorView(bus.actions, bus.states, "counter", timeout=T) as late:
            joined = late.next_state(T)
            assert joined.is_snapshot and (joined.sequence, counter(joined)) == (3, (1, False))
            view.send("increase")
            assert [s.sequence for s in (late.next_state(T), late.next_state(T), late.next_state(T))] == [4, 5, 6]
            assert late.next_state(0.3) is None
        assert [s.sequence for s in view.states(timeout=0.5)] == [4, 5, 6]
        assert view.resynchronisations == 0 and not view.malformed


def test_view_bad_action_refused(bus):
    with ReactorView(bus.actions, bus.states, "counter", timeout=T) as view, \
            Events(bus.states, ["diag/"], timeout=T) as diagnostics:
        with pytest.raises(Refused) as refused:
            view.send("frobnicate")
        assert refused.value.reason == "bad-action"
        assert refused.value.details["source"] == view.source
        published = diagnostics.wait_for(lambda m: isinstance(m, flowbus.Diagnostic), timeout=T)
        assert published.reason == "bad-action" and published.topic == "diag/bad-action"
        assert view.next_state(T).is_snapshot  # the view still works
        view.send("increase")


def test_view_of_unknown_reactor_is_refused(bus):
    with ReactorView(bus.actions, bus.states, "nothing-here", timeout=T) as view:
        with pytest.raises(Refused) as refused:
            view.next_state(T)
        assert refused.value.reason == "unknown-reactor"


def test_status(bus):
    reply = flowbus.status(bus.control, timeout=T)
    assert isinstance(reply, dict) and "flows" in reply


def test_status_sections_and_pages(bus):
    summary = flowbus.status(bus.control, timeout=T, params={"sections": []})
    assert "flows" not in summary and "peers_total" in summary and "control" in summary
    page = flowbus.status(bus.control, timeout=T, params={"sections": ["peers"], "peers": {"limit": 1}})
    assert len(page["peers"]) <= 1 and page["pages"]["peers"]["limit"] == 1
