"""The clients' protocol rules without sockets (PROTOCOL.md 3.2 to 4.4), shared by `flowbus.client`
(blocking) and `flowbus.aio` (asyncio).

Each class takes what arrived (a decoded message, the time) and says what to do: the frames to
send, the state to deliver, the outcome of a wait. A socket appears only as a `Sender`, the
function a client passes in that hands frames to its socket without blocking.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Callable, Optional, Sequence, Union

from .clone import CloneMerger, StateUpdate
from .messages import (Ack, DeepLink, Diagnostic, Heartbeat, Message, Replay, Snapshot, State, StatusReply, Step,
                       action_frames, decode, replay_request_frames, snapshot_request_frames, status_request_frames,
                       step_frames)
from .tracing import Trace, current_trace, trace_for
from .values import Value
from .wire import CONTENT_JSON, new_source, topic

__all__ = ["FlowBusError", "Refused", "Dropped", "NoAck", "NoOutcome", "NotConnected", "Receipt", "Frames",
           "Sender", "Endpoint", "endpoint_list", "describe", "AckLedger", "StepOutbox", "RoutingWatch",
           "TopicFilter", "ViewState", "StatusExchange", "EventResume", "Fallback"]

Frames = list[bytes]
# Hands frames to a socket without blocking: False when the socket took nothing (zmq.Again).
Sender = Callable[[Frames], bool]
# One flowd endpoint, or one per instance sharing a journal (DEPLOYMENT.md, active and standby).
Endpoint = Union[str, Sequence[str]]
Params = Optional[dict[str, Value]]


class FlowBusError(Exception):
    pass


class Refused(FlowBusError):
    """The receiver refused the message: `diagnostic` is the DIAGNOSTIC that said so."""

    def __init__(self, diagnostic: Diagnostic, sequence: Optional[int] = None) -> None:
        super().__init__(f"refused ({diagnostic.reason}): {diagnostic.message}")
        self.diagnostic = diagnostic
        self.reason = diagnostic.reason
        self.details = diagnostic.details
        self.sequence = sequence


class Dropped(Refused):
    """flowd acknowledged the step, then its flows dropped it (`not-visible`, `dismissed`,
    `unbound-stepper`, `unknown-step`, ...): `reason` says which, `diagnostic` is the DIAGNOSTIC
    published on `events` naming the step's source and sequence (PROTOCOL.md 3.3)."""


class NoOutcome(FlowBusError, TimeoutError):
    """The step was acknowledged, but flowd's `events` did not show what became of it in time."""


class NoAck(FlowBusError, TimeoutError):
    """No ack covering the message arrived in time (is anything listening on the endpoint?)."""


class NotConnected(FlowBusError, TimeoutError):
    """No heartbeat from the publisher in time (is the daemon running with that endpoint?)."""


@dataclass(frozen=True)
class Receipt:
    """A message that was acknowledged: our source and sequence, and the ack that covers it."""

    source: str
    sequence: int
    ack: Optional[Ack]


def endpoint_list(endpoint: Endpoint) -> list[str]:
    """`endpoint` as a list: one string, or a non-empty list (or tuple) of strings."""
    if isinstance(endpoint, str):
        return [endpoint]
    endpoints = list(endpoint) if isinstance(endpoint, (list, tuple)) else None
    if not endpoints or not all(isinstance(e, str) for e in endpoints):
        raise ValueError(f"an endpoint is a string, or a non-empty list of strings (one per flowd instance), "
                         f"not {endpoint!r}")
    return endpoints


def describe(endpoint: Endpoint) -> str:
    """An endpoint, or every one of a list, for messages."""
    return endpoint if isinstance(endpoint, str) else ", ".join(endpoint)


def _int(value: object) -> Optional[int]:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


# MARK: Acks


class AckLedger:
    """Cumulative acks and refusals of one source on a DEALER (3.3, 4.3 ACK), and the messages kept
    until an ack covers them (4.4)."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.sequence = 0  # last sequence given out
        self.acked = 0
        self.last_ack: Optional[Ack] = None
        self.refusals: dict[int, Diagnostic] = {}
        self.unacked: dict[int, Frames] = {}
        self.resend_from: Optional[int] = None  # set by an out-of-order refusal: its `expected`
        self.out_of_order: Optional[Diagnostic] = None  # that refusal

    def next_sequence(self) -> int:
        self.sequence += 1
        return self.sequence

    def keep(self, frames: Frames) -> int:
        """Gives `frames` (built with sequence `self.sequence + 1`) their sequence and keeps them."""
        sequence = self.next_sequence()
        self.unacked[sequence] = frames
        return sequence

    def handle(self, message: Message) -> bool:
        """True if the reply was an ack or a diagnostic about this source."""
        if isinstance(message, Ack) and message.acked_source == self.source:
            if message.acked_sequence >= self.acked:
                for sequence in range(self.acked + 1, message.acked_sequence + 1):
                    self.unacked.pop(sequence, None)
                self.acked, self.last_ack = message.acked_sequence, message
            return True
        if isinstance(message, Diagnostic):
            details = message.details
            if details.get("source", self.source) != self.source:
                return False
            if message.reason == "out-of-order":
                # Not a refusal of the message: the receiver missed an earlier one (4.4).
                expected = _int(details.get("expected"))
                self.resend_from = self.acked + 1 if expected is None else expected
                self.out_of_order = message
                return True
            named = _int(details.get("sequence"))
            # unnamed: the oldest message not yet acknowledged
            self.refusals[self.acked + 1 if named is None else named] = message
            return True
        return False

    def outcome(self, sequence: int) -> Receipt:
        """The Receipt of an acknowledged `sequence`; Refused if a diagnostic refused it."""
        if sequence in self.refusals:
            raise Refused(self.refusals.pop(sequence), sequence)
        return Receipt(self.source, sequence, self.last_ack)


# MARK: Steps


class ReliableOutbox:
    """The sending side of a client on a DEALER (a Stepper's steps, a view's actions and snapshot
    requests): kept messages, what went to the socket, and when to send again.

    Every message is kept until an ack covers it. An `out-of-order` refusal (the receiver missed an
    earlier one, 4.4) sends the kept messages again from its `expected`. With `following` (a list
    of daemon instances, of which only the active one is bound) it also sends again from the oldest
    unacknowledged message when acks start coming from another instance, and when no ack progress
    came for `retransmit_interval` s while waiting (doubling up to `max_retransmit_interval`).
    A message the socket does not take (no instance connected) stays kept and is offered again.
    """

    SEND_RETRY_S = 0.02  # how soon a message the socket did not take is offered again

    def __init__(self, source: str, *, following: bool, retransmit_interval: float = 0.5,
                 max_retransmit_interval: float = 2.0) -> None:
        self.source = source
        self.following = following
        self.ledger = AckLedger(source)
        self.retransmit_interval = retransmit_interval
        self.max_retransmit_interval = max(retransmit_interval, max_retransmit_interval)
        self.resent = 0
        self.instance: Optional[str] = None  # the source of the instance whose ack came last
        self._backoff = retransmit_interval
        self._silence_since: Optional[float] = None  # when the wait for ack progress began
        self._next_send = 1  # the first kept message not handed to the socket yet
        self._covered: Optional[tuple[int, int]] = None  # (from, through) sent again since the last progress
        self._behind: Optional[tuple[Optional[str], int]] = None  # (instance, expected) of an out-of-order below acked
        self._resent_for: Optional[str] = None  # the instance whose out-of-order made a resend since the last progress

    def keep_frames(self, build: Callable[[int], Frames]) -> int:
        """Keeps the message `build` makes for the next sequence, to be sent by the next flush; its sequence."""
        return self.ledger.keep(build(self.ledger.sequence + 1))

    @property
    def acknowledged_by(self) -> Optional[str]:
        """The source of the flowd instance that acknowledged last (None before the first ack)."""
        last_ack = self.ledger.last_ack
        return self.instance or (last_ack.source if last_ack is not None else None)

    @property
    def unsent(self) -> int:
        """Kept messages not handed to the socket yet."""
        return self.ledger.sequence - max(self._next_send, self.ledger.acked + 1) + 1

    def flush(self, send: Sender) -> bool:
        """Hands the kept messages from the first not yet handed over on to the socket, in order; those
        the socket does not take stay kept, to be offered again. True if all went."""
        last = self.ledger.sequence
        for sequence in range(max(self._next_send, self.ledger.acked + 1), last + 1):
            if not send(self.ledger.unacked[sequence]):  # a multipart message is taken whole or not at all
                self._next_send = sequence
                return False
        self._next_send = last + 1
        return True

    def on_reply(self, message: Message, send: Sender) -> None:
        """An ack or diagnostic from whichever instance: progress, a new instance, a gap."""
        ledger = self.ledger
        acked = ledger.acked
        ledger.handle(message)  # other replies are skipped (3.2)
        if isinstance(message, Ack) and message.acked_source == self.source:
            # Another instance acknowledges (only the one holding the lease commits, hence acks):
            # the one before may have died with messages it had not committed (in its socket, or
            # never received), unless this one's out-of-order already had them sent again.
            previous, self.instance = self.instance, message.source
            changed = previous is not None and previous != message.source and self._resent_for != message.source
            if ledger.acked > acked:  # progress: the back-off starts again
                self._silence_since, self._backoff = None, self.retransmit_interval
                self._covered = self._resent_for = None
            if changed and self.following:
                self.resend(ledger.acked + 1, send)
        if ledger.resend_from is None:
            return
        expected, diagnostic = ledger.resend_from, ledger.out_of_order
        ledger.resend_from = ledger.out_of_order = None
        if not self.following:
            self.resend(expected, send)
            return
        named_sequence = _int(diagnostic.details.get("sequence")) if diagnostic is not None else None
        named = expected if named_sequence is None else named_sequence
        if expected <= ledger.acked:
            # The instance's journal is behind what was acknowledged: going back to the oldest
            # message kept tells it nothing older will come (4.4), once per instance and gap.
            behind = (diagnostic.source if diagnostic is not None else None, expected)
            if behind == self._behind:
                return
            self._behind = behind
        elif self._covered is not None and self._covered[0] <= expected and named <= self._covered[1]:
            return  # refusals of messages sent before a resend that already went: not news
        self._resent_for = diagnostic.source if diagnostic is not None else None
        self.resend(expected, send)

    def resend(self, first: int, send: Sender) -> None:
        """Sends the kept messages again from `first` (at the earliest the oldest unacknowledged)."""
        first = max(first, self.ledger.acked + 1)
        if first > self.ledger.sequence:
            return
        self.resent += max(0, self._next_send - first)
        self._next_send = min(self._next_send, first)
        covered_from = first if self._covered is None else min(self._covered[0], first)
        self._covered = (covered_from, self.ledger.sequence)
        self._silence_since = None
        self.flush(send)

    def wake_time(self, now: float, deadline: float, send: Sender) -> float:
        """While waiting for an ack: offers what the socket did not take, sends again after a
        silence (following only), and returns when to look again at the latest."""
        if self._next_send <= self.ledger.sequence:
            self.flush(send)
        if self._next_send <= self.ledger.sequence:
            return min(deadline, now + self.SEND_RETRY_S)  # no instance took it yet: offer it again
        if not self.following or not self.ledger.unacked:
            return deadline
        # All handed over and some unacknowledged: send again after a silence, doubling.
        if self._silence_since is None:
            self._silence_since = now
        due = self._silence_since + self._backoff
        if now >= due:
            self.resend(self.ledger.acked + 1, send)
            self._backoff = min(self._backoff * 2, self.max_retransmit_interval)
            self._silence_since = now
            due = now + self._backoff
        return min(deadline, due)


class StepOutbox(ReliableOutbox):
    """A Stepper's outbox: its steps, kept and sent again by the rules of ReliableOutbox."""

    def __init__(self, stepper_id: str, source: str, *, following: bool, content_type: int = CONTENT_JSON,
                 retransmit_interval: float = 0.5, max_retransmit_interval: float = 2.0) -> None:
        topic("step/", stepper_id)  # refuses an id that cannot be a topic before anything is sent
        super().__init__(source, following=following, retransmit_interval=retransmit_interval,
                         max_retransmit_interval=max_retransmit_interval)
        self.stepper_id = stepper_id
        self.content_type = content_type

    def keep(self, name: str, params: Params, trace: Optional[Trace] = None) -> int:
        """Keeps step `name` to be sent by the next flush; its sequence."""
        traceparent, tracestate = trace_for(*trace) if trace else current_trace()
        return self.keep_frames(lambda sequence: step_frames(
            self.stepper_id, name, params, source=self.source, sequence=sequence, content_type=self.content_type,
            traceparent=traceparent, tracestate=tracestate))

    def publish(self, name: str, params: Params, send: Sender, trace: Optional[Trace] = None) -> int:
        """Keeps step `name` and offers it to the socket; its sequence. `trace`: its traceparent
        and tracestate, else the current OpenTelemetry context's (flowbus.tracing)."""
        sequence = self.keep(name, params, trace)
        self.flush(send)
        return sequence


class RoutingWatch:
    """What flowd's `events` say became of one acknowledged step (3.3): routing refusals are
    published there only. Settled at the first heartbeat after the step's re-publication;
    a diagnostic naming the step in between is its refusal."""

    def __init__(self, stepper_id: str, source: str, sequence: int, name: str) -> None:
        self.stepper_id, self.source, self.sequence, self.name = stepper_id, source, sequence, name
        self.republished = False

    def feed(self, message: Message) -> bool:
        """True once the outcome is known (applied); raises Dropped for the step's refusal."""
        if isinstance(message, Step):
            if message.topic_id == self.stepper_id and message.source == self.source \
                    and message.sequence == self.sequence:
                self.republished = True
        elif isinstance(message, Heartbeat):
            return self.republished
        elif self.republished and isinstance(message, Diagnostic):
            details = message.details
            if "source" in details or "sequence" in details:
                if message.names(self.source, self.sequence):
                    raise Dropped(message, self.sequence)
            elif details.get("stepper") == self.stepper_id and details.get("step", self.name) == self.name:
                raise Dropped(message, self.sequence)
        return False

    def no_outcome(self, endpoint: Endpoint, limit: float) -> NoOutcome:
        seen = "no heartbeat followed its re-publication" if self.republished else "it was not re-published"
        return NoOutcome(f"step {self.name} ({self.source} sequence {self.sequence}) was acknowledged, but {seen} "
                         f"on {describe(endpoint)} within {limit:g} s")


# MARK: Events


class TopicFilter:
    """The topics a subscriber asked for (byte prefixes, 3.4); it also subscribes to `hb/`."""

    def __init__(self, topics: Union[str, bytes, Sequence[Union[str, bytes]]]) -> None:
        listed = [topics] if isinstance(topics, (str, bytes)) else list(topics)
        self.prefixes = [t.encode("utf-8") if isinstance(t, str) else bytes(t) for t in listed]

    @property
    def subscriptions(self) -> list[bytes]:
        """In the order to subscribe: ZeroMQ applies them in order, so once a heartbeat arrives
        nothing published afterwards on the topics is missed."""
        return self.prefixes + [b"hb/"]

    def wanted(self, message: Message) -> bool:
        raw = message.topic.encode("utf-8")
        return any(raw.startswith(prefix) for prefix in self.prefixes)


# MARK: Resumable events


@dataclass(frozen=True)
class Fallback:
    """A replay flowd could not serve (4.6, `gone`): the events after `since` are no longer kept
    (the oldest is `oldest`); the subscriber goes on from `head`, having missed some."""
    since: int
    oldest: int
    head: int
    reason: str


DROPPED_HWM_TOPIC = b"diag/dropped-hwm"  # a resuming subscriber subscribes to it whatever its topics (4.6)
REQUEST_TIMEOUT = 2.0  # s an unanswered replay request waits before it is sent again (4.6, step 6)
_MAX_FILL_SPAN = 50_000  # events one request for dropped events spans, at most


class EventResume:
    """A subscriber's side of flowd's resumable events (4.6): every event once, in order, from
    `since`, then the live stream with no gap and no duplicate.

    Feed it what the SUB receives (`live`) and what the DEALER on `control` receives (`reply`);
    it sends replay requests through `send` and returns the messages to deliver. `position` is
    the event sequence of the last event delivered: where a later subscriber resumes. Events
    flowd reports dropped at its high-water mark (nobody received them) are asked for by their
    sequences and delivered when they come, after later ones (`filled` counts them)."""

    def __init__(self, since: int, topics: Sequence[bytes], send: Sender, source: Optional[str] = None) -> None:
        self.position = since  # the last event delivered or passed over
        self.delivered = since  # the last event handed to the application
        self.phase = "awaiting-heartbeat"  # then "replaying", "live"
        self.instance: Optional[str] = None  # the flowd instance followed
        self.replays = 0
        self.fallbacks: list[Fallback] = []
        self._topics = [t.decode("utf-8") for t in topics if t]
        self._send = send
        self._source = source or new_source("resume")
        self._sequence = 0
        self._held: list[Message] = []
        self._passed: set[tuple[str, int]] = set()  # steps delivered since the last numbered event
        # When the catch-up's request and the request for dropped events went out, while unanswered:
        # both may be out at once, and each is resent on its own.
        self._catch_up_asked_at: Optional[float] = None
        self._fill_asked_at: Optional[float] = None
        self._fills: list[tuple[int, int]] = []  # dropped events still to ask for, sorted
        self._filling: Optional[tuple[int, int]] = None  # the span asked for now
        self._replayed: set[int] = set()  # numbered events replays delivered
        self._ask_again = False  # reconnected while a request was out: its reply may predate the break
        self.filled = 0

    # Inputs

    def live(self, message: Message, now: float) -> list[Message]:
        """A message of the SUB; returns what to deliver now (heartbeats are not returned)."""
        if isinstance(message, Heartbeat):
            if self.phase == "awaiting-heartbeat" or message.source != self.instance:
                self.instance = message.source
                self._request(now)
            elif self.phase == "live" and message.sequence > self.position:
                # Every event up to the heartbeat's that was asked for has arrived (drops are reported).
                self.position = message.sequence
                self._passed.clear()
            return []
        if isinstance(message, Diagnostic) and message.reason == "dropped-hwm" and message.sequence == 0:
            self._dropped(message, now)
            return [message]
        if self.phase != "live":
            self._held.append(message)
            return []
        if message.sequence != 0 and not isinstance(message, (Step, DeepLink)) and message.source != self.instance:
            self.instance = message.source  # another instance: what the former had not sent is kept
            self._held.append(message)
            self._request(now)
            return []
        return [message] if self._judge(message) else []

    def reply(self, message: Optional[Message], now: float) -> list[Message]:
        """A message of the DEALER; returns what to deliver now."""
        if isinstance(message, Replay) and message.until is not None:
            if not self._answers_fill(message.since, message.until):
                return []  # a late answer to a request sent again at its timeout
            return self._filled(message, now)
        if isinstance(message, Diagnostic) and message.reason == "rate-limited":
            # What is out is asked again at the timeout: the refusal may be about either.
            retry = message.details.get("retry_after_ms")
            at = now - REQUEST_TIMEOUT + (retry / 1000 if isinstance(retry, int) else 0.1)
            if self._catch_up_asked_at is not None:
                self._catch_up_asked_at = at
            if self._fill_asked_at is not None:
                self._fill_asked_at = at
            return []
        if isinstance(message, Diagnostic) and "until" in message.details:
            since, until = message.details.get("since", 0), message.details.get("until")
            if not (isinstance(since, int) and isinstance(until, int) and self._answers_fill(since, until)):
                return []
            self._fill_asked_at = None
            self.fallbacks.append(Fallback(self.position, 0, self.position,
                                           f"events dropped at flowd's high-water mark are no longer kept: {message.message}"))
            if self._filling is not None:
                end = self._filling[1]
                self._fills = [r for r in self._fills if r[1] > end]
            self._filling = None
            self._next_fill(now)
            return []
        # The position moves only with a catch-up's replies: one from before it moved is late.
        if isinstance(message, Replay) and self.phase == "replaying" and message.since == self.position:
            self._catch_up_asked_at = None
            out: list[Message] = []
            for sequence, frames in message.events:
                if sequence <= self.position:
                    continue
                self.position = sequence
                if sequence in self._replayed:
                    continue  # delivered already by the reply to a request for dropped events
                self._replayed.add(sequence)
                event = decode(frames)
                if isinstance(event, (Step, DeepLink)):
                    key = (event.source, event.sequence)
                    if key in self._passed:
                        continue  # delivered live after the position (its event sequence was not known then)
                    self._passed.add(key)
                event.replayed_sequence = sequence
                out.append(event)
            self.position = max(self.position, message.last)
            if message.more or self._ask_again:
                self._ask_again = False
                self._request(now)
            else:
                out += self._release()
            return out
        if isinstance(message, Diagnostic) and self.phase == "replaying":
            self._catch_up_asked_at = None
            head = message.details.get("head")
            oldest = message.details.get("oldest")
            fallback = Fallback(self.position, oldest if isinstance(oldest, int) else 0,
                                head if isinstance(head, int) else self.position,
                                str(message.message) if message.reason == "gone" else f"{message.reason}: {message.message}")
            self.fallbacks.append(fallback)
            self.position = max(self.position, fallback.head)
            self.delivered = max(self.delivered, fallback.head)
            self._passed.clear()
            self._ask_again = False
            return self._release()
        return []

    def reconnected(self, now: float) -> None:
        """The SUB connected to a publisher again (another instance, or the same after a break):
        its first messages may be steps passed on, which do not name the instance, and come before
        its heartbeat, so they are held until a replay from the position reached the head."""
        if self.phase == "live":
            self._request(now)
        elif self.phase == "replaying":
            self._ask_again = True

    def may_have_missed(self, now: float) -> None:
        """The publisher was silent: ask again from the position."""
        if self.phase == "live":
            self._request(now)

    def tick(self, now: float) -> None:
        """Sends an unanswered request again after REQUEST_TIMEOUT."""
        if self._catch_up_asked_at is not None and now - self._catch_up_asked_at >= REQUEST_TIMEOUT:
            if self.phase == "replaying":
                self._request(now)
            else:
                self._catch_up_asked_at = None
        if self._fill_asked_at is not None and now - self._fill_asked_at >= REQUEST_TIMEOUT:
            if self._filling is not None:
                self._send_fill(now)
            else:
                self._fill_asked_at = None

    def taken(self, message: Message) -> None:
        """The application took `message`: the delivered position moves to its event sequence."""
        sequence = message.replayed_sequence
        if not sequence and not isinstance(message, (Step, DeepLink, Heartbeat)):
            sequence = message.sequence
        self.delivered = max(self.delivered, sequence)

    def drained(self) -> None:
        """Everything received was taken: the delivered position reaches the position."""
        self.delivered = max(self.delivered, self.position)

    # Internals

    def _judge(self, message: Message) -> bool:
        if isinstance(message, (Step, DeepLink)):
            key = (message.source, message.sequence)
            if key in self._passed:
                return False
            self._passed.add(key)
            return True
        if message.sequence == 0:
            return True
        if message.sequence <= self.position:
            return False
        self.position = message.sequence
        self._passed.clear()
        return True

    def _release(self) -> list[Message]:
        self.phase = "live"
        held, self._held = self._held, []
        return [message for message in held if self._judge(message)]

    def _dropped(self, report: Diagnostic, now: float) -> None:
        """A dropped-hwm report: the events it names are asked for by their sequences."""
        events = report.details.get("events")
        if report.details.get("events_complete") is False:
            self.fallbacks.append(Fallback(self.position, 0, self.position,
                                           "flowd dropped more events than its report names"))
        if isinstance(events, list):
            for pair in events:
                if isinstance(pair, list) and len(pair) == 2 and all(isinstance(v, int) for v in pair):
                    self._fills.append((int(pair[0]), int(pair[1])))  # type: ignore[arg-type]
            self._fills.sort()
        self._next_fill(now)

    def _next_fill(self, now: float) -> None:
        if self._filling is not None or not self._fills:
            return
        first, end = self._fills[0]
        # One request spans the runs that end within _MAX_FILL_SPAN of the first.
        end = max([end] + [last for _, last in self._fills if last <= first + _MAX_FILL_SPAN])
        self._filling = (first, end)
        self._send_fill(now)

    def _send_fill(self, now: float) -> None:
        assert self._filling is not None
        first, end = self._filling
        self._sequence += 1
        self._fill_asked_at = now
        self._send(replay_request_frames(first - 1, self._topics, until=end, source=self._source,
                                         sequence=self._sequence))

    def _answers_fill(self, since: int, until: int) -> bool:
        """Whether an answer naming since and until is the one to the request for dropped events
        out now: a request sent again at its timeout may be answered twice, and the late answer
        must not stand for the next request's, whose events it does not hold."""
        return self._filling is not None and since == self._filling[0] - 1 and until == self._filling[1]

    def _filled(self, reply: Replay, now: float) -> list[Message]:
        if self._filling is None:
            return []
        self._fill_asked_at = None
        out: list[Message] = []
        for sequence, frames in reply.events:
            if sequence in self._replayed or not any(a <= sequence <= b for a, b in self._fills):
                continue
            self._replayed.add(sequence)
            self.filled += 1
            out.append(decode(frames))
        end = self._filling[1]
        self._fills = [r for r in self._fills if r[1] > reply.last]
        if reply.more and reply.last < end:
            self._filling = (reply.last + 1, end)
            self._send_fill(now)
        else:
            self._fills = [r for r in self._fills if r[1] > end]
            self._filling = None
            self._next_fill(now)
        return out

    def _request(self, now: float) -> None:
        self.phase = "replaying"
        self.replays += 1
        self._sequence += 1
        self._catch_up_asked_at = now
        self._send(replay_request_frames(self.position, self._topics, source=self._source, sequence=self._sequence))


# MARK: Reactor views


class ViewState:
    """A view of one reactor (3.3): its actions and snapshot requests, kept in a ReliableOutbox
    until the host acknowledges them, and its states joined with the Clone rule.

    Feed it what the states SUB and the actions DEALER receive, each with the DEALER's `send`;
    what it keeps (an action, a snapshotRequest after a gap or a new host source) it offers to
    `send` at once, and again as the outbox's rules say (`wake_time`). With `following` (the
    instances of a host with a standby) it sends again what was not acknowledged to the instance
    that acknowledges next, and after a silence."""

    def __init__(self, reactor_id: str, source: Optional[str] = None, content_type: int = CONTENT_JSON, *,
                 following: bool = False, retransmit_interval: float = 0.5,
                 max_retransmit_interval: float = 2.0) -> None:
        self.reactor_id = reactor_id
        self.source = source or new_source(f"view:{reactor_id}")
        self.content_type = content_type
        self.state_topic = topic("state/", reactor_id).decode("utf-8")
        self.outbox = ReliableOutbox(self.source, following=following, retransmit_interval=retransmit_interval,
                                     max_retransmit_interval=max_retransmit_interval)
        self.ledger = self.outbox.ledger
        self.merger = CloneMerger()
        self.ready: deque[StateUpdate] = deque()
        self.snapshot_sequence: Optional[int] = None  # of our pending snapshotRequest
        self.host_source: Optional[str] = None
        self.heard_host = False

    def snapshot_request(self, send: Sender) -> int:
        """Keeps a snapshotRequest and offers it to `send`; its sequence."""
        sequence = self.outbox.keep_frames(
            lambda sequence: snapshot_request_frames(self.reactor_id, source=self.source, sequence=sequence))
        self.snapshot_sequence = sequence
        self.outbox.flush(send)
        return sequence

    def action(self, name: str, params: Params, send: Sender, trace: Optional[Trace] = None) -> int:
        """Keeps action `name` and offers it to `send`; its sequence. `trace` as for StepOutbox.publish."""
        traceparent, tracestate = trace_for(*trace) if trace else current_trace()
        sequence = self.outbox.keep_frames(lambda sequence: action_frames(
            self.reactor_id, name, params, source=self.source, sequence=sequence, content_type=self.content_type,
            traceparent=traceparent, tracestate=tracestate))
        self.outbox.flush(send)
        return sequence

    def _deliver(self, result: tuple[list[StateUpdate], bool], send: Sender) -> None:
        delivered, resync = result
        self.ready.extend(delivered)
        if resync:
            self.snapshot_request(send)

    def on_state_socket(self, message: Optional[Message], send: Sender) -> None:
        if isinstance(message, Heartbeat):
            self.heard_host = True
        elif isinstance(message, State) and message.topic == self.state_topic:
            self.heard_host = True
            self._deliver(self.merger.state(message.sequence, message.value, message.source), send)

    def on_dealer(self, message: Optional[Message], send: Sender) -> None:
        if isinstance(message, Snapshot):
            if message.topic == self.state_topic:
                self.host_source = message.source
                self._deliver(self.merger.snapshot(message.sequence, message.value, message.source), send)
        elif message is not None:
            self.outbox.on_reply(message, send)

    def wake_time(self, now: float, deadline: float, send: Sender) -> float:
        """As ReliableOutbox.wake_time: offers again what waits, and says when to look again."""
        return self.outbox.wake_time(now, deadline, send)

    def next_ready(self) -> Optional[StateUpdate]:
        """The next state to deliver, if any; Refused if the host refused our snapshotRequest."""
        if self.ready:
            return self.ready.popleft()
        if self.snapshot_sequence in self.ledger.refusals:
            sequence = self.snapshot_sequence
            raise Refused(self.ledger.refusals.pop(sequence), sequence)
        return None


# MARK: Status


class StatusExchange:
    """One statusRequest to flowd's `control` (4.3) and the reply that answers it."""

    def __init__(self, params: Params = None, source: Optional[str] = None, rep_delimiter: bool = False) -> None:
        self.source = source or new_source("py-status")
        self.request: Frames = ([b""] if rep_delimiter else []) + status_request_frames(
            params, source=self.source, sequence=1)

    @staticmethod
    def reply_frames(frames: Frames) -> Frames:
        """A reply without the REP delimiter, if it has one."""
        return frames[1:] if frames and frames[0] == b"" else frames

    @staticmethod
    def answer(message: Optional[Message]) -> Optional[dict[str, Value]]:
        """The status map of a reply; Refused for a diagnostic; None for anything else."""
        if isinstance(message, StatusReply):
            return message.status
        if isinstance(message, Diagnostic):
            raise Refused(message, 1)
        return None
