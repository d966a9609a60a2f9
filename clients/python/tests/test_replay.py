"""Resumable events (PROTOCOL.md 4.6) against a real flowd: `Events(since=...)` gets what it missed from
flowd's journal, once and in order, then the live events; across a restart of the subscriber and of flowd;
and says when flowd no longer keeps what it asks for."""

import pytest

from flowbus import DidNavigate, Events, Heartbeat, Stepper, status
from flowbus.testing import Topology

CONFIG = """\
endpoints:
  ingress: ipc://${{FLOWBUS_RUN_DIR}}/ingress.sock
  events: ipc://${{FLOWBUS_RUN_DIR}}/events.sock
  control: ipc://${{FLOWBUS_RUN_DIR}}/control.sock
heartbeatMilliseconds: 50
persistence: {{ journal: journal.sqlite }}
replay: {{ retain: {retain} }}
limits: {{ highWaterMark: {hwm} }}
coordinator: {{ flow: LoadFlow, step: start }}
flows:
  LoadFlow:
    root: stack
    id: load
    steps:
      start:
        - setRoot: {{ screen: home, stepper: load, allowStepWhenNotPresented: true }}
      open:
        - push: {{ screen: "detail/{{n}}" }}
      close: [pop]
"""

T = 10.0


@pytest.fixture
def journaled(bin_dir, tmp_path, request):
    def start(retain=100_000, hwm=100_000):
        config = tmp_path / "topology.yaml"
        config.write_text(CONFIG.format(retain=retain, hwm=hwm))
        topology = Topology(config, bin_dir=bin_dir, hosts=[])  # started
        topologies.append(topology)
        return topology
    topologies: list[Topology] = []
    yield start
    report = getattr(request.node, "rep_call", None)
    for topology in topologies:
        if report is not None and report.failed:
            print(topology.output(4000))  # shown with the failure
        topology.stop()
        topology.remove()


def endpoints(topology):
    config = topology.config["endpoints"]
    return config["ingress"], config["events"], config["control"]


def steps(stepper, first, count):
    """Steps `first` … `first + count - 1`, alternately open and close, each with its didNavigate."""
    for n in range(first, first + count):
        stepper.publish_params("open" if n % 2 else "close", {"n": n}, wait=False)
    stepper.wait_ack(stepper.sequence, T)


def navigations(events, count):
    """The next `count` didNavigate events, as the `n` of their step."""
    seen = []
    while len(seen) < count:
        message = events.next(T)
        assert message is not None, f"only {len(seen)} of {count} didNavigate events: {seen}"
        if isinstance(message, DidNavigate):
            seen.append(message.params.get("n"))
    return seen


def test_a_subscriber_gets_what_it_missed_then_the_live_events_and_resumes_where_it_stopped(journaled):
    """4.6: since=0 replays every event kept, in order, then the live ones; a later subscriber resuming from
    the first one's position gets exactly what came after, nothing twice."""
    topology = journaled()
    ingress, events_endpoint, control = endpoints(topology)
    with Stepper(ingress, "load") as stepper:
        steps(stepper, 1, 40)  # no subscriber yet
        with Events(events_endpoint, ["nav/did/"], since=0, control=control) as events:
            assert events.caught_up(T)
            assert navigations(events, 41) == [None] + list(range(1, 41)), "the root's setRoot, then every step"
            steps(stepper, 41, 10)  # live
            seen = navigations(events, 10)
            assert seen == list(range(41, 51)), seen
            position = events.position
            assert position and position > 0
            assert not events.fallbacks
        steps(stepper, 51, 30)  # while nobody listens
        with Events(events_endpoint, ["nav/did/"], since=position, control=control) as resumed:
            assert navigations(resumed, 30) == list(range(51, 81))
            extra = resumed.next(0.5)
            assert extra is None, f"nothing twice, nothing after the last step: {extra}"


def test_a_subscriber_to_some_topics_held_past_the_high_water_mark_misses_nothing(journaled):
    """4.6 steps 1 and 8: a resuming subscriber to nav/did/ alone still hears flowd's drop reports, asks
    for what its full queue lost and ends with every didNavigate once; the reports are not returned."""
    topology = journaled(hwm=50)
    ingress, events_endpoint, control = endpoints(topology)
    count = 3000
    with Events(events_endpoint, ["nav/did/"], since=0, control=control) as events:
        assert events.caught_up(T)
        assert navigations(events, 1) == [None], "the root's setRoot"
        with Stepper(ingress, "load") as stepper:
            steps(stepper, 1, count)  # not read meanwhile: past its queue, flowd drops
        dropped = status(control)["events"]["dropped_hwm"]
        assert dropped > 0, "the subscriber's queue overflowed"
        seen = []
        while len(seen) < count:
            message = events.next(T)
            assert message is not None, f"{len(seen)} of {count} didNavigate events"
            assert isinstance(message, (DidNavigate, Heartbeat)), f"only what it subscribed to: {message}"
            if isinstance(message, DidNavigate):
                seen.append(message.params.get("n"))
        assert sorted(seen) == list(range(1, count + 1)), f"each once ({dropped} dropped by flowd)"
        assert not events.fallbacks


def test_since_zero_starts_at_the_root_flows_start(journaled):
    """4.6: the events kept go back to flowd's first (the root flow's setRoot), each with its event sequence."""
    topology = journaled()
    _, events_endpoint, control = endpoints(topology)
    with Events(events_endpoint, ["nav/did/"], since=0, control=control) as events:
        first = events.next(T)
        assert isinstance(first, DidNavigate) and first.step == "start", first
        assert first.replayed_sequence > 0


def test_events_continue_across_a_restart_of_flowd(journaled):
    """4.6: a restarted flowd goes on with the next event sequence, and replays from its journal what a
    subscriber missed before and after the restart."""
    topology = journaled()
    ingress, events_endpoint, control = endpoints(topology)
    with Stepper(ingress, "load") as stepper:
        steps(stepper, 1, 10)
    with Events(events_endpoint, ["nav/did/"], since=0, control=control) as events:
        navigations(events, 11)  # the root's and the ten
        position = events.position
    head = status(control)["events"]["head"]
    with Stepper(ingress, "load") as stepper:
        steps(stepper, 11, 10)  # missed by the subscriber
    topology.stop()
    topology.start()
    with Events(events_endpoint, ["hb/"], timeout=T) as beats:
        beat = beats.next(T)
        assert isinstance(beat, Heartbeat) and beat.sequence > head, "the event sequence went on"
    with Stepper(ingress, "load") as stepper:
        steps(stepper, 21, 10)
    with Events(events_endpoint, ["nav/did/"], since=position, control=control) as resumed:
        assert navigations(resumed, 20) == list(range(11, 31))


def test_asking_for_events_no_longer_kept_falls_back_and_says_so(journaled):
    """4.6: since below the oldest kept gets `gone`; the subscriber goes on from the newest and reports it."""
    topology = journaled(retain=5)
    ingress, events_endpoint, control = endpoints(topology)
    with Stepper(ingress, "load") as stepper:
        steps(stepper, 1, 30)
    with Events(events_endpoint, ["nav/did/"], since=1, control=control) as events:
        assert events.caught_up(T)
        assert len(events.fallbacks) == 1, events.fallbacks
        fallback = events.fallbacks[0]
        assert fallback.since == 1 and fallback.oldest > 2 and fallback.head >= fallback.oldest, fallback
        with Stepper(ingress, "load") as stepper:
            steps(stepper, 31, 2)
        assert navigations(events, 2) == [31, 32], "live events follow the fallback"


def test_since_needs_the_control_endpoint():
    with pytest.raises(ValueError, match="control="):
        Events("ipc:///nonexistent", ["nav/did/"], since=0)
