"""§4.6 resumable events: flowd numbers every event it publishes, keeps them, and replays them on `control`
(REPLAY-REQUEST, REPLAY, `gone`); heartbeats carry the last event sequence; drop reports name the events dropped."""

import rawwire as w
from scenario import T, wait_ack

NAVIGATION = "apiKeyIsComplete"  # from `apikey`: willNavigate, commands and didNavigate of three flows


def replay(topo, since, **options):
    """One REPLAY-REQUEST on `control` and its answer (a REPLAY or a diagnostic)."""
    control = topo.peer(topo.control)
    control.send(w.replay_request(w.new_source("replayer"), since, **options))
    return control.until(lambda m: m.kind in (w.REPLAY, w.DIAGNOSTIC), T, "the replay reply")[-1]


def header(reply):
    assert reply.kind == w.REPLAY and len(reply.frames) == 4, reply
    return reply.value(2)


def navigate(topo):
    """A step that navigates, once flowd acknowledged it; returns the events subscriber that saw it all."""
    events = topo.sub(topo.events)
    peer = topo.peer(topo.ingress)
    source = w.new_source("apikey")
    peer.send(w.step("apikey", NAVIGATION, 1, source))
    wait_ack(peer, source, 1)
    events.seen_or_wait(lambda m: m.topic == "nav/did/WatchedFlow", T, "the navigation")
    events.until(lambda m: m.kind == w.HEARTBEAT, T, "a heartbeat after it")
    return events, source


def test_replay_from_zero_returns_every_event_as_published(topo):
    """§4.6: "every message flowd publishes on `events` while dealing with what it reads ... is an event"; a REPLAY
    carries "the message exactly as flowd published it", with its event sequence; a heartbeat carries the last."""
    events, source = navigate(topo)
    head = events.seen[-1].seq
    reply = replay(topo, 0)
    fields = header(reply)
    assert fields["since"] == 0 and fields["head"] == head and fields["last"] == head and not fields["more"], fields
    replayed = w.unpack_events(reply.frames[3])
    assert fields["count"] == len(replayed) == head, "every event from the first is kept"
    assert [sequence for sequence, _ in replayed] == list(range(1, head + 1)), "numbered 1, 2, 3, … with no gap"
    live = [m for m in events.seen if m.kind != w.HEARTBEAT]
    assert [frames for _, frames in replayed[-len(live):]] == [m.frames for m in live], \
        "the events the subscriber saw live, byte for byte"
    flowd = topo.ready_status.source
    for sequence, frames in replayed:
        message = w.Msg(frames)
        if message.source == flowd:
            assert message.seq == sequence, f"flowd's own event carries its event sequence: {message}"
        else:
            assert message.kind == w.STEP and message.source == source, "a step passed on keeps its sender's envelope"


def test_topics_limit_and_paging(topo):
    """§4.6: `topics` selects by prefix, `limit` bounds a reply, `last` and `more` page through the rest."""
    navigate(topo)
    dids = header(replay(topo, 0, topics=["nav/did/"]))
    assert dids["count"] == 4, dids  # the root's setRoot, MainFlow's tabs and the two tab flows
    first = replay(topo, 0, topics=["nav/did/"], limit=2)
    page = header(first)
    assert page["count"] == 2 and page["more"] is True, page
    events = w.unpack_events(first.frames[3])
    assert all(w.Msg(frames).kind == w.DID_NAVIGATE for _, frames in events)
    second = replay(topo, page["last"], topics=["nav/did/"])
    rest = header(second)
    assert rest["count"] == 2 and rest["more"] is False and rest["last"] == rest["head"], rest
    assert [s for s, _ in w.unpack_events(second.frames[3])] > [s for s, _ in events]
    assert replay(topo, 0, until=3).frames[3] and header(replay(topo, 0, until=3))["last"] == 3, "until bounds it"


def test_gone_when_asking_past_the_head(topo):
    """§4.6: a `since` past `head` (a flowd that never published it) is answered with a DIAGNOSTIC `gone` naming
    `since`, `oldest` and `head`."""
    reply = replay(topo, 1_000_000)
    assert reply.is_diag("gone"), reply
    details = reply.details
    assert details["since"] == 1_000_000 and details["head"] < 1_000_000 and "oldest" in details, details


def test_bad_replay_requests_are_refused(topo):
    """§4.6: "Anything else is `bad-params`": no `since`, a negative one, `topics` not a list of strings or more than
    64 of them, a `limit` out of range, an `until` not above `since`."""
    control = topo.peer(topo.control)
    for params in ({}, {"since": -1}, {"since": 0, "topics": "nav/"}, {"since": 0, "limit": 0},
                   {"since": 0, "limit": 10_001}, {"since": 5, "until": 5},
                   {"since": 0, "topics": [f"nav/{n}/" for n in range(65)]}):
        source = w.new_source("bad-replay")
        control.send([b"replay", w.envelope(w.REPLAY_REQUEST, 1, source, w.JSON), w.encode_value(w.JSON, params)])
        reply = control.until(lambda m: m.kind in (w.REPLAY, w.DIAGNOSTIC), T, "the refusal")[-1]
        assert reply.is_diag("bad-params"), (params, reply)


def test_events_and_their_sequence_survive_a_restart_with_a_journal(persistent):
    """§4.6: "A restarted flowd ... goes on with the next event sequence", and what it published before is kept."""
    topo = persistent
    events, _ = navigate(topo)
    head = events.seen[-1].seq
    topo.stop("flowd")
    topo.start_flowd()
    again = topo.sub(topo.events, ["hb/"])
    assert again.seen[-1].seq == head, "the heartbeat of the restarted flowd carries the last event sequence"
    replayed = w.unpack_events(replay(topo, 0).frames[3])
    assert [s for s, _ in replayed] == list(range(1, head + 1))
