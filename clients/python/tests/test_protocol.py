"""flowbus.protocol's rules without sockets: acks, kept steps and resends, routing outcomes, the
Clone rule of a view, status replies."""

import pytest

from flowbus import (WireError, ack_frames, decode, diagnostic_frames, did_navigate_frames, heartbeat_frames,
                     snapshot_frames, state_frames, step_frames)
from flowbus.protocol import (AckLedger, Dropped, Refused, RoutingWatch, StatusExchange, StepOutbox, TopicFilter,
                              ViewState)

ME = "apikey#py-test"


def ack(sequence, instance="flowd#1", source=ME):
    return decode(ack_frames(source, sequence, source=instance, sequence=1))


def diagnostic(reason, instance="flowd#1", **details):
    return decode(diagnostic_frames(reason, f"{reason} here", details, source=instance, sequence=1))


class Socket:
    """A Sender that records what it took, and takes nothing while `full`."""

    def __init__(self):
        self.sent, self.full = [], False

    def __call__(self, frames):
        if self.full:
            return False
        self.sent.append(decode(frames).sequence)
        return True


def test_ledger_cumulative_acks_release_kept_messages_and_refusals_name_their_sequence():
    ledger = AckLedger(ME)
    for _ in range(3):
        ledger.keep([b"frames"])
    assert ledger.handle(ack(2)) and ledger.acked == 2 and sorted(ledger.unacked) == [3]
    assert ledger.handle(ack(1)) and ledger.acked == 2, "an older ack changes nothing"
    assert not ledger.handle(ack(3, source="someone-else")), "another source's ack is not ours"
    assert ledger.handle(diagnostic("bad-params", source=ME, sequence=3))
    with pytest.raises(Refused) as refused:
        ledger.outcome(3)
    assert refused.value.reason == "bad-params" and refused.value.sequence == 3
    assert ledger.outcome(2).sequence == 2
    assert not ledger.handle(diagnostic("bad-params", source="other", sequence=1))
    assert ledger.handle(diagnostic("out-of-order", source=ME, expected=3, sequence=4))
    assert ledger.resend_from == 3 and 4 not in ledger.refusals, "out-of-order is not a refusal"


def test_outbox_keeps_what_the_socket_does_not_take_and_offers_it_again():
    outbox, socket = StepOutbox("apikey", ME, following=True), Socket()
    socket.full = True
    assert [outbox.publish("wishlistTab", None, socket) for _ in range(2)] == [1, 2]
    assert socket.sent == []
    assert outbox.wake_time(10.0, 20.0, socket) == 10.0 + StepOutbox.SEND_RETRY_S, "offered again soon"
    socket.full = False
    outbox.wake_time(10.02, 20.0, socket)
    assert socket.sent == [1, 2], "in order, once each"


def test_outbox_resends_from_expected_on_out_of_order():
    outbox, socket = StepOutbox("apikey", ME, following=False), Socket()
    for _ in range(3):
        outbox.publish("wishlistTab", None, socket)
    outbox.on_reply(ack(1), socket)
    outbox.on_reply(diagnostic("out-of-order", source=ME, expected=2, sequence=3), socket)
    assert socket.sent == [1, 2, 3, 2, 3] and outbox.resent == 2


def test_following_outbox_resends_after_silence_doubling_and_for_a_new_instance():
    outbox = StepOutbox("apikey", ME, following=True, retransmit_interval=0.5, max_retransmit_interval=1.0)
    socket = Socket()
    outbox.publish("wishlistTab", None, socket)
    outbox.publish("watchedTab", None, socket)
    assert outbox.wake_time(0.0, 60.0, socket) == 0.5, "silence timed from the first wait"
    assert outbox.wake_time(0.5, 60.0, socket) == 1.5, "sent again, then the interval doubles"
    assert outbox.wake_time(1.5, 60.0, socket) == 2.5, "capped at max_retransmit_interval"
    assert socket.sent == [1, 2, 1, 2, 1, 2]
    outbox.on_reply(ack(1, instance="flowd#1"), socket)
    outbox.on_reply(ack(1, instance="flowd#2"), socket)  # another instance took over
    assert socket.sent[-1:] == [2] and outbox.instance == "flowd#2"
    single = StepOutbox("apikey", ME, following=False)
    single.publish("wishlistTab", None, socket)
    assert single.wake_time(0.0, 60.0, socket) == 60.0 and single.wake_time(59.0, 60.0, socket) == 60.0, \
        "one endpoint: ZeroMQ delivers, nothing is sent again on silence"


def test_outbox_refuses_bad_input_before_keeping_it():
    with pytest.raises(WireError) as refused:
        StepOutbox("", ME, following=False)
    assert refused.value.reason == "malformed"
    outbox, socket = StepOutbox("apikey", ME, following=False), Socket()
    with pytest.raises(WireError):
        outbox.publish("wishlistTab", {"big": 2**63}, socket)
    with pytest.raises(WireError):
        outbox.publish("not a name", None, socket)
    assert outbox.ledger.sequence == 0 and socket.sent == []


def test_routing_watch_settles_at_the_heartbeat_after_the_republication():
    step = decode(step_frames("apikey", "apiKeyIsComplete", None, source=ME, sequence=7))
    beat = decode(heartbeat_frames(source="flowd#1", sequence=1))
    watch = RoutingWatch("apikey", ME, 7, "apiKeyIsComplete")
    assert not watch.feed(beat), "a heartbeat before the re-publication settles nothing"
    assert not watch.feed(step) and watch.feed(beat)
    dropped = RoutingWatch("apikey", ME, 7, "apiKeyIsComplete")
    dropped.feed(step)
    assert not dropped.feed(diagnostic("not-visible", source="other", sequence=7))
    with pytest.raises(Dropped) as refusal:
        dropped.feed(diagnostic("not-visible", source=ME, sequence=7))
    assert refusal.value.reason == "not-visible"
    assert "was not re-published" in str(RoutingWatch("apikey", ME, 8, "x").no_outcome("ipc://e", 1.0))


def test_topic_filter_subscribes_heartbeats_last_and_matches_prefixes():
    topics = TopicFilter(["nav/did/", b"diag/"])
    assert topics.subscriptions == [b"nav/did/", b"diag/", b"hb/"]
    assert topics.wanted(diagnostic("x")) and not topics.wanted(decode(heartbeat_frames(source="f", sequence=1)))


class FrameLog:
    """A Sender that keeps the frames it took."""

    def __init__(self):
        self.sent = []

    def __call__(self, frames):
        self.sent.append(frames)
        return True

    def last(self):
        return decode(self.sent[-1])


def test_view_state_joins_snapshot_and_states_and_asks_again_after_a_gap():
    view, sent = ViewState("counter", "view:counter#py-test"), FrameLog()
    assert view.snapshot_request(sent) == 1
    request = sent.last()
    assert request.sequence == 1 and request.topic == "snapshot/counter"
    view.on_state_socket(decode(state_frames("counter", {"v": 3}, source="host#1", sequence=3)), sent)
    assert len(sent.sent) == 1
    assert view.next_ready() is None, "live states wait for the snapshot"
    view.on_dealer(decode(snapshot_frames("counter", {"v": 2}, source="host#1", sequence=2)), sent)
    assert [(u.sequence, u.is_snapshot) for u in (view.next_ready(), view.next_ready())] == [(2, True), (3, False)]
    view.on_state_socket(decode(state_frames("counter", {"v": 5}, source="host#1", sequence=5)), sent)
    assert len(sent.sent) == 2 and sent.last().sequence == 2, "a gap asks for a new snapshot"
    view.on_state_socket(decode(state_frames("counter2", {"v": 9}, source="host#1", sequence=6)), sent)
    assert len(sent.sent) == 2
    refused = ViewState("nothing")
    refused.snapshot_request(sent)
    refused.on_dealer(decode(diagnostic_frames("unknown-reactor", "no", {"source": refused.source, "sequence": 1},
                                               source="host#1", sequence=1)), sent)
    with pytest.raises(Refused):
        refused.next_ready()


def test_view_state_following_a_host_with_a_standby_sends_again_what_was_not_acknowledged():
    """The actions and the snapshot request are kept until acknowledged; acks from another instance
    (the standby took over) send again the rest, and a new host source asks for a new snapshot."""
    view, sent = ViewState("counter", "view:counter#py-test", following=True), Socket()
    view.snapshot_request(sent)
    view.on_dealer(decode(snapshot_frames("counter", {"v": 0}, source="host#1", sequence=0)), sent)
    view.on_dealer(decode(ack_frames(view.source, 1, source="host#1", sequence=1)), sent)
    assert [view.action("add", {"n": n}, sent) for n in (1, 2, 3)] == [2, 3, 4]
    view.on_dealer(decode(ack_frames(view.source, 2, source="host#1", sequence=2)), sent)
    assert sent.sent == [1, 2, 3, 4]
    # host#1 dies having applied 2 and 3; the standby, host#2, has them in the database.
    view.on_state_socket(decode(state_frames("counter", {"v": 1}, source="host#2", sequence=9)), sent)
    assert sent.sent[-1] == 5, "a new host source: a new snapshot request"
    view.on_dealer(decode(ack_frames(view.source, 3, source="host#2", sequence=1)), sent)
    assert sent.sent[-2:] == [4, 5], "what host#2 has not acknowledged goes to it again"
    assert view.outbox.resent == 2 and view.outbox.instance == "host#2"
    view.on_dealer(decode(ack_frames(view.source, 5, source="host#2", sequence=2)), sent)
    assert view.ledger.acked == 5 and not view.ledger.unacked
    # Silence: sent again after retransmit_interval, doubling.
    view.action("add", {"n": 4}, sent)
    assert view.wake_time(10.0, 20.0, sent) == 10.5
    assert view.wake_time(10.5, 20.0, sent) == 11.5 and sent.sent[-2:] == [6, 6]


def test_status_exchange_answers_replies_and_refusals():
    exchange = StatusExchange({"sections": []}, rep_delimiter=True)
    assert exchange.request[0] == b"" and decode(exchange.request[1:]).params == {"sections": []}
    assert StatusExchange.reply_frames([b"", b"x"]) == [b"x"]
    assert StatusExchange.answer(None) is None
    with pytest.raises(Refused):
        StatusExchange.answer(diagnostic("bad-params"))


TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_steps_and_actions_carry_the_trace_they_are_given_or_the_active_opentelemetry_span():
    outbox, view = StepOutbox("apikey", ME, following=False), ViewState("counter", "view:counter#py-test")
    outbox.keep("start", {}, (TRACEPARENT, "congo=t61rcWkgMzE"))
    kept = decode(outbox.ledger.unacked[1])
    assert (kept.traceparent, kept.tracestate) == (TRACEPARENT, "congo=t61rcWkgMzE")
    sent = FrameLog()
    view.action("increase", {}, sent, (TRACEPARENT, ""))
    assert sent.last().trace_id == TRACEPARENT[3:35]
    # No span is active: nothing to propagate, no trace frame.
    outbox.keep("again", {})
    assert len(outbox.ledger.unacked[2]) == 4
    opentelemetry = pytest.importorskip("opentelemetry.sdk.trace")
    tracer = opentelemetry.TracerProvider().get_tracer("test")
    with tracer.start_as_current_span("checkout") as span:
        outbox.keep("inside", {})
        view.action("increase", {}, sent)
        action = sent.last()
    context = span.get_span_context()
    # (The flags may say more than "sampled": W3C level 2's random trace id flag.)
    assert decode(outbox.ledger.unacked[3]).traceparent[:52] == f"00-{context.trace_id:032x}-{context.span_id:016x}"
    assert action.trace_id == f"{context.trace_id:032x}"


# MARK: EventResume (4.6)


def _did(n, seq, source="flowd#1"):
    return decode(did_navigate_frames("Main", "open", {"n": n}, source=source, sequence=seq))


def _replay(events, since, last, head, more=False, until=None):
    from flowbus.messages import replay_frames
    return decode(replay_frames(events, since=since, last=last, head=head, oldest=1, more=more, until=until,
                                source="flowd#1", sequence=1))


def test_event_resume_replays_then_drops_held_duplicates():
    from flowbus.protocol import EventResume
    sent = []
    resume = EventResume(2, [b"nav/did/"], lambda frames: sent.append(frames) or True)
    assert resume.live(decode(heartbeat_frames(source="flowd#1", sequence=4)), 0.0) == []
    request = decode(sent[-1])
    assert request.params["since"] == 2 and request.params["topics"] == ["nav/did/"]
    assert resume.live(_did(4, 4), 0.1) == [], "held while the replay comes"
    out = resume.reply(_replay([(3, did_navigate_frames("Main", "open", {"n": 3}, source="flowd#1", sequence=3)),
                                (4, did_navigate_frames("Main", "open", {"n": 4}, source="flowd#1", sequence=4))],
                               since=2, last=4, head=4), 0.2)
    assert [m.params["n"] for m in out] == [3, 4], "the held copy of 4 is dropped"
    assert [m.replayed_sequence for m in out] == [3, 4]
    assert resume.phase == "live" and resume.position == 4
    assert [m.params["n"] for m in resume.live(_did(5, 5), 0.3)] == [5]
    assert resume.live(_did(5, 5), 0.3) == [], "a duplicate"


def test_event_resume_asks_for_the_events_a_drop_report_names():
    from flowbus.protocol import EventResume
    sent = []
    resume = EventResume(0, [], lambda frames: sent.append(frames) or True)
    resume.live(decode(heartbeat_frames(source="flowd#1", sequence=0)), 0.0)
    resume.reply(_replay([], since=0, last=0, head=0), 0.0)
    assert resume.phase == "live"
    assert resume.live(_did(9, 9), 0.1)
    report = decode(diagnostic_frames("dropped-hwm", "dropped", {"events": [[5, 6]], "events_complete": True,
                                                                 "dropped": 2, "total": 2},
                                      source="flowd#1", sequence=0))
    assert resume.live(report, 0.2) == [report]
    request = decode(sent[-1])
    assert (request.params["since"], request.params["until"]) == (4, 6)
    out = resume.reply(_replay([(5, did_navigate_frames("Main", "open", {"n": 5}, source="flowd#1", sequence=5)),
                                (6, did_navigate_frames("Main", "open", {"n": 6}, source="flowd#1", sequence=6))],
                               since=4, last=6, head=9, until=6), 0.3)
    assert [m.params["n"] for m in out] == [5, 6], "delivered late, after 9"
    assert resume.filled == 2 and resume.position == 9


def test_event_resume_resends_a_fill_and_a_catch_up_each_on_its_own():
    """Both may be out at once: the reply to one does not stop the other's resend, and a catch-up
    does not deliver again what a fill delivered first."""
    from flowbus.protocol import REQUEST_TIMEOUT, EventResume
    sent = []
    resume = EventResume(0, [], lambda frames: sent.append(frames) or True)
    resume.live(decode(heartbeat_frames(source="flowd#1", sequence=0)), 0.0)
    resume.reply(_replay([], since=0, last=0, head=0), 0.0)
    report = decode(diagnostic_frames("dropped-hwm", "dropped", {"events": [[2, 3]], "events_complete": True,
                                                                 "dropped": 2, "total": 2},
                                      source="flowd#1", sequence=0))
    resume.live(report, 1.0)
    resume.may_have_missed(1.0)
    asked = [(decode(f).params["since"], decode(f).params.get("until")) for f in sent]
    assert asked == [(0, None), (1, 3), (0, None)]
    frames = {n: did_navigate_frames("Main", "open", {"n": n}, source="flowd#1", sequence=n) for n in range(1, 5)}
    out = resume.reply(_replay([(2, frames[2]), (3, frames[3])], since=1, last=3, head=4, until=3), 1.1)
    assert [m.params["n"] for m in out] == [2, 3]
    resume.tick(1.0 + REQUEST_TIMEOUT)
    assert decode(sent[-1]).params == {"since": 0}, "the catch-up, unanswered, is asked again"
    out = resume.reply(_replay([(n, frames[n]) for n in range(1, 5)], since=0, last=4, head=4), 3.2)
    assert [m.params["n"] for m in out] == [1, 4], "2 and 3 came with the fill"
    assert resume.position == 4 and resume.phase == "live"
    count = len(sent)
    resume.tick(10.0)
    assert len(sent) == count, "nothing is out"

    # A fill is resent though the catch-up's reply came first.
    resume.live(decode(diagnostic_frames("dropped-hwm", "dropped", {"events": [[6, 6]], "events_complete": True,
                                                                    "dropped": 1, "total": 3},
                                         source="flowd#1", sequence=0)), 11.0)
    resume.may_have_missed(11.0)
    resume.reply(_replay([], since=4, last=7, head=7), 11.1)
    resume.tick(11.0 + REQUEST_TIMEOUT)
    assert (decode(sent[-1]).params["since"], decode(sent[-1]).params["until"]) == (5, 6)


def test_event_resume_ignores_a_late_answer_to_a_fill_sent_again():
    """A request for dropped events resent at its timeout may be answered twice: the late answer
    does not stand for the next request's, whose events would otherwise never be asked for."""
    from flowbus.protocol import REQUEST_TIMEOUT, EventResume
    sent = []
    resume = EventResume(0, [], lambda frames: sent.append(frames) or True)
    resume.live(decode(heartbeat_frames(source="flowd#1", sequence=0)), 0.0)
    resume.reply(_replay([], since=0, last=0, head=0), 0.0)

    def report(first, last, total):
        return decode(diagnostic_frames("dropped-hwm", "dropped", {"events": [[first, last]], "events_complete": True,
                                                                   "dropped": last - first + 1, "total": total},
                                        source="flowd#1", sequence=0))
    resume.live(report(2, 3, 2), 1.0)
    resume.live(report(6, 7, 4), 1.0)
    resume.tick(1.0 + REQUEST_TIMEOUT)
    asked = [(decode(f).params["since"], decode(f).params.get("until")) for f in sent]
    assert asked == [(0, None), (1, 3), (1, 3)], "one fill at a time, sent again at its timeout"
    frames = {n: did_navigate_frames("Main", "open", {"n": n}, source="flowd#1", sequence=n) for n in range(1, 9)}
    answer = _replay([(2, frames[2]), (3, frames[3])], since=1, last=3, head=8, until=3)
    assert [m.params["n"] for m in resume.reply(answer, 3.1)] == [2, 3]
    assert (decode(sent[-1]).params["since"], decode(sent[-1]).params["until"]) == (5, 7)
    assert resume.reply(answer, 3.2) == [], "the late answer delivers nothing"
    gone = decode(diagnostic_frames("gone", "no longer kept", {"since": 1, "until": 3}, source="flowd#1", sequence=0))
    assert resume.reply(gone, 3.3) == [] and resume.fallbacks == [], "nor does a late gone count"
    resume.tick(3.1 + REQUEST_TIMEOUT)
    assert (decode(sent[-1]).params["since"], decode(sent[-1]).params["until"]) == (5, 7), "6 and 7 still asked for"
    out = resume.reply(_replay([(6, frames[6]), (7, frames[7])], since=5, last=7, head=8, until=7), 5.2)
    assert [m.params["n"] for m in out] == [6, 7]
    assert resume.filled == 4


def test_event_resume_ignores_a_late_answer_to_a_catch_up_sent_again():
    """A catch-up's late reply (its request was sent again at its timeout) does not end a later
    catch-up, whose events it does not hold."""
    from flowbus.protocol import REQUEST_TIMEOUT, EventResume
    sent = []
    resume = EventResume(0, [], lambda frames: sent.append(frames) or True)
    resume.live(decode(heartbeat_frames(source="flowd#1", sequence=2)), 0.0)
    resume.tick(REQUEST_TIMEOUT)
    assert [decode(f).params for f in sent] == [{"since": 0}, {"since": 0}], "asked again at the timeout"
    frames = {n: did_navigate_frames("Main", "open", {"n": n}, source="flowd#1", sequence=n) for n in range(1, 5)}
    answer = _replay([(1, frames[1]), (2, frames[2])], since=0, last=2, head=2)
    assert [m.params["n"] for m in resume.reply(answer, 2.1)] == [1, 2]
    assert resume.phase == "live"
    resume.may_have_missed(3.0)
    assert decode(sent[-1]).params == {"since": 2}
    assert resume.reply(answer, 3.1) == [], "the late answer delivers nothing"
    assert resume.phase == "replaying", "the catch-up from 2 still waits for its answer"
    out = resume.reply(_replay([(3, frames[3]), (4, frames[4])], since=2, last=4, head=4), 3.2)
    assert [m.params["n"] for m in out] == [3, 4]
    assert resume.phase == "live" and resume.position == 4


def test_event_resume_after_a_reconnection_holds_steps_and_replays_none_twice():
    from flowbus.messages import step_frames
    from flowbus.protocol import EventResume
    sent = []
    resume = EventResume(0, [], lambda frames: sent.append(frames) or True)

    def tick(n):
        return step_frames("load", "tick", {"n": n}, source="stepper#1", sequence=n)

    resume.live(decode(heartbeat_frames(source="flowd#1", sequence=10)), 0.0)
    resume.reply(_replay([], since=0, last=10, head=10), 0.0)
    assert [m.params["n"] for m in resume.live(decode(tick(7)), 0.1)] == [7], "event 11, delivered live"
    # flowd#1 is lost after event 12; flowd#2 published 13 before the SUB reached it, then 14.
    resume.reconnected(0.2)
    assert decode(sent[-1]).params["since"] == 10
    assert resume.live(decode(tick(10)), 0.3) == [], "event 14, held before its instance's heartbeat"
    out = resume.reply(_replay([(n, tick(n - 4)) for n in range(11, 15)], since=10, last=14, head=14), 0.4)
    assert [m.params["n"] for m in out] == [8, 9, 10], "7 was delivered live; the held 10 is the replayed one"
    assert resume.phase == "live" and resume.position == 14
