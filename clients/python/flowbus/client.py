"""pyzmq clients: Stepper, Events, ReactorView and status() (PROTOCOL.md 3.2 and 3.3).

Every wait is bounded: each call takes a timeout (default: the client's `timeout`, 5 s) and
raises a TimeoutError subclass or returns None, as documented per call. Clients are used from
one thread each (ZeroMQ sockets are not thread-safe).

flowd's endpoints may be given as one string or as a list of them, one per flowd instance sharing a
journal (DEPLOYMENT.md, active and standby): only the active instance binds its endpoints, so the
clients connect to all of them and follow whichever answers (the ZeroMQ Guide's Binary Star client).
"""

import math
import time
from collections import deque
from dataclasses import dataclass

import zmq

from . import wire
from .clone import CloneMerger
from .messages import (Ack, Diagnostic, Heartbeat, Snapshot, State, Step, StatusReply, action_frames, decode,
                       snapshot_request_frames, status_request_frames, step_frames)
from .wire import CONTENT_JSON, MAX_FRAME_BYTES, WireError, new_source, topic

__all__ = ["FlowBusError", "Refused", "Dropped", "NoAck", "NoOutcome", "NotConnected", "Receipt", "Stepper",
           "Events", "ReactorView", "status"]


class FlowBusError(Exception):
    pass


class Refused(FlowBusError):
    """The receiver refused the message: `diagnostic` is the DIAGNOSTIC that said so."""

    def __init__(self, diagnostic, sequence=None):
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
    ack: Ack


def _remaining(deadline):
    return max(0, int((deadline - time.monotonic()) * 1000))


def _endpoint_list(endpoint):
    """`endpoint` as a list: one string, or a non-empty list (or tuple) of strings."""
    if isinstance(endpoint, str):
        return [endpoint]
    endpoints = list(endpoint) if isinstance(endpoint, (list, tuple)) else None
    if not endpoints or not all(isinstance(e, str) for e in endpoints):
        raise ValueError(f"an endpoint is a string, or a non-empty list of strings (one per flowd instance), "
                         f"not {endpoint!r}")
    return endpoints


def _describe(endpoint):
    """An endpoint, or every one of a list, for messages."""
    return endpoint if isinstance(endpoint, str) else ", ".join(endpoint)


# Sockets to a list of flowd instances, of which the active one is bound and the others are not:
# reconnect soon to the one that becomes active, and let ZMTP heartbeats drop a connection whose
# peer vanished without closing it (its machine or link went away), so that it is tried again.
_FAILOVER_OPTIONS = (
    (zmq.RECONNECT_IVL, 100),
    (zmq.RECONNECT_IVL_MAX, 250),
    (zmq.HEARTBEAT_IVL, 1000),
    (zmq.HEARTBEAT_TIMEOUT, 3000),
)


def _socket(context, kind, endpoint):
    sock = context.socket(kind)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.MAXMSGSIZE, MAX_FRAME_BYTES)
    try:
        sock.connect(endpoint)
    except zmq.ZMQError:
        sock.close(0)
        raise
    return sock


class _Owned:
    """Context ownership and closing, shared by the clients."""

    def __init__(self, context):
        self._own_context = context is None
        self._context = context or zmq.Context()
        self._sockets = []
        self._children = []  # clients sharing this context, closed first
        self.malformed = []  # WireErrors of received messages that were skipped

    def _open(self, kind, endpoint):
        sock = _socket(self._context, kind, endpoint)
        self._sockets.append(sock)
        return sock

    def _open_all(self, kind, endpoints, options):
        """One socket of `kind` with `options`, connected to every endpoint of the list."""
        sock = self._context.socket(kind)
        self._sockets.append(sock)  # closed by close() whatever happens next
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.MAXMSGSIZE, MAX_FRAME_BYTES)
        for option, value in options:
            sock.setsockopt(option, value)
        for endpoint in endpoints:
            sock.connect(endpoint)
        return sock

    def _decode(self, frames):
        try:
            return decode(frames)
        except WireError as error:
            self.malformed.append(error)
            return None

    def close(self):
        for child in self._children:
            child.close()
        self._children = []
        for sock in self._sockets:
            sock.close(0)
        self._sockets = []
        if self._own_context and not self._context.closed:
            self._context.term()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class _AckTracker:
    """Cumulative acks and refusals of one source on a DEALER (3.3, 4.3 ACK)."""

    def __init__(self, source):
        self.source = source
        self.sequence = 0  # last sequence sent
        self.acked = 0
        self.last_ack = None
        self.refusals = {}  # sequence -> Diagnostic
        self.unacked = {}  # sequence -> frames, kept until an ack covers them (4.4)
        self.resend_from = None  # set by an out-of-order refusal: its `expected`
        self.out_of_order = None  # that refusal (the Diagnostic)

    def next_sequence(self):
        self.sequence += 1
        return self.sequence

    def handle(self, message):
        """True if the reply was an ack or a diagnostic about this source."""
        if isinstance(message, Ack) and message.acked_source == self.source:
            if message.acked_sequence >= self.acked:
                self.acked, self.last_ack = message.acked_sequence, message
                for sequence in [s for s in self.unacked if s <= self.acked]:
                    del self.unacked[sequence]
            return True
        if isinstance(message, Diagnostic):
            details = message.details
            if details.get("source", self.source) != self.source:
                return False
            if message.reason == "out-of-order":
                # Not a refusal of the message: the receiver missed an earlier one (4.4).
                expected = details.get("expected")
                self.resend_from = expected if isinstance(expected, int) and not isinstance(expected, bool) else self.acked + 1
                self.out_of_order = message
                return True
            sequence = details.get("sequence")
            if not isinstance(sequence, int) or isinstance(sequence, bool):
                sequence = self.acked + 1  # unnamed: the oldest message not yet acknowledged
            self.refusals[sequence] = message
            return True
        return False

    def outcome(self, sequence):
        if sequence in self.refusals:
            raise Refused(self.refusals.pop(sequence), sequence)
        return Receipt(self.source, sequence, self.last_ack)


# MARK: Events


class Events(_Owned):
    """A SUB on a publisher (flowd's `events`, a reactor host's `states`).

    The constructor subscribes to `topics` (byte prefixes, 3.4), then to `hb/`, connects and
    waits up to `timeout` for a heartbeat: ZeroMQ applies subscriptions in order, so once a
    heartbeat arrives every message published afterwards on `topics` is received. Raises
    NotConnected if none comes. Heartbeats are only returned if `topics` match them.

    `endpoint` may be a list, one per flowd instance: the SUB connects to all of them, since only
    the active instance binds and publishes, and takes the first heartbeat of any. After a
    failover the new active's messages arrive once the SUB has connected to it (within 250 ms of
    its binding): what it published before, and what the old one had not sent when it died, is
    missed, as after any restart (a gap in the envelope sequence, a new source). The SUB
    fair-queues between its connections, so the old instance's last messages, still queued in
    it, may be read among the new one's first: each instance's messages are in order, not the
    two together.
    """

    def __init__(self, endpoint, topics, *, timeout=5.0, context=None):
        endpoints = _endpoint_list(endpoint)
        super().__init__(context)
        self.endpoint = endpoint
        self.timeout = timeout
        self.topics = [t.encode("utf-8") if isinstance(t, str) else bytes(t)
                       for t in ([topics] if isinstance(topics, (str, bytes)) else topics)]
        self.last_heard = None  # time.monotonic() of the last message from the publisher
        self._pending = deque()
        try:
            self._sub = _socket_unconnected(self._context)
            self._sockets.append(self._sub)
            for prefix in self.topics:
                self._sub.setsockopt(zmq.SUBSCRIBE, prefix)
            self._sub.setsockopt(zmq.SUBSCRIBE, b"hb/")
            if isinstance(endpoint, str):
                self._sub.connect(endpoint)
            else:
                for option, value in _FAILOVER_OPTIONS:
                    self._sub.setsockopt(option, value)
                for one in endpoints:
                    self._sub.connect(one)
            deadline = time.monotonic() + timeout
            while True:
                message = self._recv(deadline)
                if message is None:
                    raise NotConnected(f"no heartbeat from {_describe(endpoint)} within {timeout:g} s")
                if isinstance(message, Heartbeat):
                    break
                if self._wanted(message):
                    self._pending.append(message)
        except BaseException:
            self.close()
            raise

    def _wanted(self, message):
        raw = message.topic.encode("utf-8")
        return any(raw.startswith(prefix) for prefix in self.topics)

    def _recv(self, deadline):
        """The next well-formed message (heartbeats included) before `deadline`, or None."""
        while True:
            if not self._sub.poll(_remaining(deadline)):
                return None
            message = self._decode(self._sub.recv_multipart())
            self.last_heard = time.monotonic()
            if message is not None:
                return message

    def next(self, timeout=None):
        """The next message matching `topics`, or None if none comes within `timeout` s."""
        if self._pending:
            return self._pending.popleft()
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            message = self._recv(deadline)
            if message is None or self._wanted(message):
                return message

    def __iter__(self):
        """Messages until none arrives for `timeout` seconds."""
        while True:
            message = self.next()
            if message is None:
                return
            yield message

    def wait_for(self, predicate, timeout=None):
        """The first message for which predicate(message) is true; raises TimeoutError after
        `timeout` s. Messages skipped on the way are dropped."""
        limit = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        while True:
            message = self.next(max(0.0, deadline - time.monotonic()))
            if message is None:
                raise TimeoutError(f"no matching message from {_describe(self.endpoint)} within {limit:g} s")
            if predicate(message):
                return message


def _socket_unconnected(context):
    sock = context.socket(zmq.SUB)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.MAXMSGSIZE, MAX_FRAME_BYTES)
    return sock


# MARK: Stepper


class Stepper(_Owned):
    """Publishes steps as `stepper_id` on flowd's `ingress` (a DEALER).

    Every step is kept until an ack covers it; an `out-of-order` refusal (flowd missed an earlier
    one, PROTOCOL.md 4.4) makes it send the kept steps again from the `expected` sequence.

    `publish(name, **params)` sends one step and waits for the ack that covers it. It raises
    Refused when a diagnostic about the step arrived (flowd sends those it finds while decoding,
    e.g. `bad-params`, to the sender before the ack) and NoAck when no ack came in `timeout`.

    flowd refuses routing problems (`unbound-stepper`, `unknown-step`, `not-visible`,
    `dismissed`) only on `events`; pass `events_endpoint` to also watch for them (subscribed,
    and flowd's first heartbeat awaited, before anything is sent): after the ack `publish` waits
    for flowd to re-publish the step on `events` and for the next heartbeat (at most
    `timeout`), and raises Dropped (a Refused) for a diagnostic naming the step's source and
    sequence in between. `publish(name, wait=True, **params)` insists on that outcome: it needs
    `events_endpoint` and raises NoOutcome when the re-publication or the heartbeat after it
    does not come in time; `wait=False` sends and returns the sequence. (A step param named
    `wait` goes through `publish_params`.)

    `endpoint` (and `events_endpoint`) may be a list: the ingress of each flowd instance sharing
    one journal, of which only the active one is bound. The DEALER then connects to all of them
    with ZMQ_IMMEDIATE, so that a step is handed only to an instance that is there (never queued
    toward one that is not, where it would wait unseen), reconnects every 100 to 250 ms, and
    drops by ZMTP heartbeats a connection whose peer vanished. What an instance that died had
    not committed is lost with it, unacknowledged, so the kept steps go out again, in order, with
    their sequences: when acks start coming from another instance (the ack envelope's source),
    when no ack progress came for `retransmit_interval` s while waiting (doubling up to
    `max_retransmit_interval`), and from `expected` on `out-of-order`. The journal
    de-duplicates, so each step is applied once, in order. With no instance connected a step is
    kept, not refused: it goes out as soon as one is (the wait for its ack retries every few
    ms). `resent` counts steps sent again, `instance` names the instance that acknowledged last.
    Give `timeout` room for a failover (the standby's taking over plus a retransmit interval). A
    step whose re-publication on `events` went with the instance that died, or came before the
    SUB reached the new one, is not seen there: `publish` then waits out its `timeout`
    (`wait=True`: NoOutcome). With one endpoint string none of this applies: the DEALER queues
    steps until flowd is there, as ZeroMQ does.
    """

    def __init__(self, endpoint, stepper_id, *, source=None, timeout=5.0, content_type=CONTENT_JSON,
                 events_endpoint=None, context=None, retransmit_interval=0.5, max_retransmit_interval=2.0):
        endpoints = _endpoint_list(endpoint)
        super().__init__(context)
        topic("step/", stepper_id)
        self.endpoint = endpoint
        self.stepper_id = stepper_id
        self.timeout = timeout
        self.content_type = content_type
        self.source = source or new_source(stepper_id)
        self._acks = _AckTracker(self.source)
        self._events = None
        # Following several instances (a list of endpoints): see the class.
        self._failover = not isinstance(endpoint, str)
        self._retransmit_interval = retransmit_interval
        self._max_retransmit_interval = max(retransmit_interval, max_retransmit_interval)
        self._backoff = retransmit_interval
        self._silence_since = None  # when the wait for ack progress began; None: not timing
        self._next_send = 1  # the first kept step not handed to the socket yet
        self._instance = None  # the source of the flowd instance whose ack came last
        self._covered = None  # (from, through) sent again since the last ack progress
        self._behind = None  # (instance, expected) of the last out-of-order below what was acked
        self._resent_for = None  # the instance whose out-of-order made a resend since the last ack progress
        self.resent = 0
        try:
            if self._failover:
                self._dealer = self._open_all(zmq.DEALER, endpoints, _FAILOVER_OPTIONS + ((zmq.IMMEDIATE, 1),))
            else:
                self._dealer = self._open(zmq.DEALER, endpoint)
            if events_endpoint:
                self._events = Events(events_endpoint, [f"step/{stepper_id}", "diag/"], timeout=timeout,
                                      context=self._context)
                self._children.append(self._events)
        except BaseException:
            self.close()
            raise

    @property
    def sequence(self):
        return self._acks.sequence

    @property
    def instance(self):
        """The source id of the flowd instance that acknowledged last (None before the first ack)."""
        return self._instance or (self._acks.last_ack.source if self._acks.last_ack is not None else None)

    def publish(self, name, /, *, wait=None, **params):
        """Sends step `name` with `params` and waits for its ack (and, with `events_endpoint`, its
        outcome); returns a Receipt. See the class for `wait`."""
        return self.publish_params(name, params, wait=wait)

    def publish_params(self, name, params=None, *, wait=None, timeout=None):
        """As publish(), params as a dict; wait=False returns the sequence without waiting."""
        if wait and self._events is None:
            raise ValueError("wait=True needs the Stepper's events_endpoint (flowd's events), where the outcome is published")
        sequence = self._acks.sequence + 1
        frames = step_frames(self.stepper_id, name, params, source=self.source, sequence=sequence,
                             content_type=self.content_type)
        if self._failover:
            self._acks.next_sequence()
            self._acks.unacked[sequence] = frames
            self._flush()  # what the socket does not take now goes out from wait_ack
        else:
            self._dealer.send_multipart(frames)  # a DEALER queues until connected
            self._acks.next_sequence()
            self._acks.unacked[sequence] = frames
        if wait is False:
            return sequence
        receipt = self.wait_ack(sequence, timeout)
        if self._events is not None:
            self._check_routing(sequence, name, timeout, strict=bool(wait))
        return receipt

    def wait_ack(self, sequence, timeout=None):
        """Waits until an ack covers `sequence`; Receipt, or Refused / NoAck."""
        limit = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        if self._failover:
            return self._wait_ack_following(sequence, limit, deadline)
        while self._acks.acked < sequence:
            if not self._dealer.poll(_remaining(deadline)):
                raise NoAck(f"no ack for {self.source} sequence {sequence} from {self.endpoint} within {limit:g} s")
            message = self._decode(self._dealer.recv_multipart())
            if message is not None:
                self._acks.handle(message)  # other replies are skipped (3.2)
            if self._acks.resend_from is not None:
                first, self._acks.resend_from = self._acks.resend_from, None
                for resent in sorted(s for s in self._acks.unacked if s >= first):
                    self._dealer.send_multipart(self._acks.unacked[resent])
        return self._acks.outcome(sequence)

    # Following several flowd instances (a list of endpoints)

    _SEND_RETRY_S = 0.02  # how soon a step the socket did not take is offered again

    def _flush(self):
        """Hands the kept steps from `_next_send` on to the socket, in order, without blocking.
        With ZMQ_IMMEDIATE and no instance connected the socket takes nothing (zmq.Again): the
        step and those after it stay kept, to be offered again. True if all went."""
        last = self._acks.sequence
        for sequence in range(max(self._next_send, self._acks.acked + 1), last + 1):
            try:
                self._dealer.send_multipart(self._acks.unacked[sequence], zmq.NOBLOCK)
            except zmq.Again:  # a multipart message is taken whole or not at all
                self._next_send = sequence
                return False
        self._next_send = last + 1
        return True

    def _resend(self, first):
        """Sends the kept steps again from `first` (at the earliest the oldest unacknowledged)."""
        first = max(first, self._acks.acked + 1)
        if first > self._acks.sequence:
            return
        self.resent += max(0, self._next_send - first)
        self._next_send = min(self._next_send, first)
        covered_from = first if self._covered is None else min(self._covered[0], first)
        self._covered = (covered_from, self._acks.sequence)
        self._silence_since = None
        self._flush()

    def _on_reply(self, message):
        """An ack or diagnostic from whichever instance: progress, a new instance, a gap."""
        acked = self._acks.acked
        self._acks.handle(message)  # other replies are skipped (3.2)
        if isinstance(message, Ack) and message.acked_source == self.source:
            # Another instance acknowledges (only the one holding the lease commits, hence acks):
            # the one before may have died with steps it had not committed (in its socket, or
            # never received), unless this one's out-of-order already had them sent again.
            previous, self._instance = self._instance, message.source
            changed = previous is not None and previous != message.source and self._resent_for != message.source
            if self._acks.acked > acked:  # progress: the back-off starts again
                self._silence_since, self._backoff = None, self._retransmit_interval
                self._covered = self._resent_for = None
            if changed:
                self._resend(self._acks.acked + 1)
        if self._acks.resend_from is not None:
            expected, diagnostic = self._acks.resend_from, self._acks.out_of_order
            self._acks.resend_from = self._acks.out_of_order = None
            named = diagnostic.details.get("sequence") if diagnostic is not None else None
            named = named if isinstance(named, int) and not isinstance(named, bool) else expected
            if expected <= self._acks.acked:
                # The instance's journal is behind what was acknowledged: going back to the oldest
                # step kept tells it nothing older will come (4.4), once per instance and gap.
                behind = (diagnostic.source if diagnostic is not None else None, expected)
                if behind == self._behind:
                    return
                self._behind = behind
            elif self._covered is not None and self._covered[0] <= expected and named <= self._covered[1]:
                return  # refusals of steps sent before a resend that already went: not news
            self._resent_for = diagnostic.source if diagnostic is not None else None
            self._resend(expected)

    def _wait_ack_following(self, sequence, limit, deadline):
        while self._acks.acked < sequence:
            now = time.monotonic()
            if self._next_send <= self._acks.sequence:
                self._flush()
            wake = deadline
            if self._next_send <= self._acks.sequence:
                wake = min(wake, now + self._SEND_RETRY_S)  # no instance took it yet: offer it again
            elif self._acks.unacked:
                # All handed over and some unacknowledged: resend after a silence (doubling).
                if self._silence_since is None:
                    self._silence_since = now
                due = self._silence_since + self._backoff
                if now >= due:
                    self._resend(self._acks.acked + 1)
                    self._backoff = min(self._backoff * 2, self._max_retransmit_interval)
                    continue
                wake = min(wake, due)
            if now >= deadline:
                raise NoAck(f"no ack for {self.source} sequence {sequence} from any of {_describe(self.endpoint)} "
                            f"within {limit:g} s")
            if self._dealer.poll(max(1, math.ceil((wake - now) * 1000))):
                message = self._decode(self._dealer.recv_multipart())
                if message is not None:
                    self._on_reply(message)
        return self._acks.outcome(sequence)

    def _check_routing(self, sequence, name, timeout, strict=False):
        limit = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        republished = False
        while True:
            message = self._events._recv(deadline)
            if message is None:
                if strict:
                    seen = "no heartbeat followed its re-publication" if republished else "it was not re-published"
                    raise NoOutcome(f"step {name} ({self.source} sequence {sequence}) was acknowledged, but {seen} "
                                    f"on {_describe(self._events.endpoint)} within {limit:g} s")
                return
            if isinstance(message, Step):
                if message.topic_id == self.stepper_id and message.source == self.source and message.sequence == sequence:
                    republished = True
            elif isinstance(message, Heartbeat):
                if republished:
                    return
            elif republished and isinstance(message, Diagnostic):
                d = message.details
                if "source" in d or "sequence" in d:
                    if message.names(self.source, sequence):
                        raise Dropped(message, sequence)
                elif d.get("stepper") == self.stepper_id and d.get("step", name) == name:
                    raise Dropped(message, sequence)


# MARK: ReactorView


class ReactorView(_Owned):
    """A view of reactor `reactor_id` on a reactor host: actions on `actions_endpoint` (DEALER),
    states on `states_endpoint` (SUB), joined with the Clone rule (PROTOCOL.md 3.3).

    The constructor subscribes to `state/<id>` (then `hb/`), waits up to `timeout` for a
    heartbeat (NotConnected otherwise), and sends a snapshotRequest. `next_state()` / iteration
    then give the snapshot first and every later state once, in order: live states received
    before the snapshot are queued, states with sequence ≤ the snapshot's are dropped, and a gap
    or a new host source triggers a new snapshotRequest (counted in `resynchronisations`).
    """

    def __init__(self, actions_endpoint, states_endpoint, reactor_id, *, source=None, timeout=5.0,
                 content_type=CONTENT_JSON, context=None):
        super().__init__(context)
        self.reactor_id = reactor_id
        self.timeout = timeout
        self.content_type = content_type
        self.source = source or new_source(f"view:{reactor_id}")
        self.actions_endpoint, self.states_endpoint = actions_endpoint, states_endpoint
        self._state_topic = topic("state/", reactor_id).decode("utf-8")
        self._acks = _AckTracker(self.source)
        self._merger = CloneMerger()
        self._ready = deque()
        self._snapshot_sequence = None  # sequence of our pending snapshotRequest
        self.host_source = None
        self._heard_host = False
        try:
            self._sub = _socket_unconnected(self._context)
            self._sockets.append(self._sub)
            self._sub.setsockopt(zmq.SUBSCRIBE, self._state_topic.encode("utf-8"))
            self._sub.setsockopt(zmq.SUBSCRIBE, b"hb/")
            self._sub.connect(states_endpoint)
            self._dealer = self._open(zmq.DEALER, actions_endpoint)
            self._poller = zmq.Poller()
            self._poller.register(self._sub, zmq.POLLIN)
            self._poller.register(self._dealer, zmq.POLLIN)
            deadline = time.monotonic() + timeout
            while not self._heard_host:
                if not self._sub.poll(_remaining(deadline)):
                    raise NotConnected(f"no heartbeat from {states_endpoint} within {timeout:g} s")
                self._on_state_socket(self._sub.recv_multipart())
            self._request_snapshot()
        except BaseException:
            self.close()
            raise

    @property
    def resynchronisations(self):
        return self._merger.resynchronisations

    @property
    def synced(self):
        return self._merger.synced

    def _request_snapshot(self):
        sequence = self._acks.next_sequence()
        self._snapshot_sequence = sequence
        self._dealer.send_multipart(snapshot_request_frames(self.reactor_id, source=self.source, sequence=sequence))

    def _deliver(self, result):
        delivered, resync = result
        self._ready.extend(delivered)
        if resync:
            self._request_snapshot()

    def _on_state_socket(self, frames):
        message = self._decode(frames)
        if isinstance(message, Heartbeat):
            self._heard_host = True
        elif isinstance(message, State) and message.topic == self._state_topic:
            self._heard_host = True
            self._deliver(self._merger.state(message.sequence, message.value, message.source))

    def _on_dealer(self, frames):
        message = self._decode(frames)
        if message is None:
            return
        if isinstance(message, Snapshot):
            if message.topic == self._state_topic:
                self.host_source = message.source
                self._deliver(self._merger.snapshot(message.sequence, message.value, message.source))
        else:
            self._acks.handle(message)

    def _pump(self, deadline):
        """Handles what both sockets have; waits until `deadline` for the first message."""
        events = dict(self._poller.poll(_remaining(deadline)))
        if not events:
            return False
        while events:
            if self._dealer in events:
                self._on_dealer(self._dealer.recv_multipart())
            if self._sub in events:
                self._on_state_socket(self._sub.recv_multipart())
            events = dict(self._poller.poll(0))
        return True

    # Actions

    def send(self, name, /, **params):
        """Sends action `name` with `params` and waits for the host's ack: a Receipt, or
        Refused (e.g. `bad-action`, `unknown-reactor`) / NoAck. The ack does not mean the
        resulting states were published: read them with next_state()."""
        return self.send_params(name, params)

    def send_params(self, name, params=None, *, wait=True, timeout=None):
        sequence = self._acks.sequence + 1
        frames = action_frames(self.reactor_id, name, params, source=self.source, sequence=sequence,
                               content_type=self.content_type)
        self._dealer.send_multipart(frames)
        self._acks.next_sequence()
        return self.wait_ack(sequence, timeout) if wait else sequence

    def wait_ack(self, sequence, timeout=None):
        limit = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        while self._acks.acked < sequence:
            if not self._pump(deadline):
                raise NoAck(f"no ack for {self.source} sequence {sequence} from {self.actions_endpoint} within {limit:g} s")
        return self._acks.outcome(sequence)

    # States

    def next_state(self, timeout=None):
        """The next StateUpdate (the snapshot first), or None if none within `timeout` s.
        Raises Refused if the host refused our snapshotRequest (e.g. `unknown-reactor`)."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while not self._ready:
            if self._snapshot_sequence in self._acks.refusals:
                raise Refused(self._acks.refusals.pop(self._snapshot_sequence), self._snapshot_sequence)
            if not self._pump(deadline):
                return None
        return self._ready.popleft()

    def states(self, timeout=None):
        """StateUpdates until none arrives for `timeout` seconds."""
        while True:
            update = self.next_state(timeout)
            if update is None:
                return
            yield update

    __iter__ = states


# MARK: status


def status(control_endpoint, *, timeout=5.0, source=None, context=None, rep_delimiter=False, params=None):
    """Sends a statusRequest to flowd's `control` and returns the reply's JSON map.

    `params` choose sections and pages (4.3), e.g. `{"sections": ["peers"], "peers": {"offset": 100}}`;
    none: the default reply (the summary, every section, the first page of `steppers` and `peers`).

    Uses a DEALER; flowd's control socket is a ROUTER, so no delimiter is added. For a control
    endpoint served by a REP socket pass rep_delimiter=True (3.2). Raises TimeoutError if no
    reply within `timeout` s, Refused if a diagnostic comes back instead.

    `control_endpoint` may be a list, one per flowd instance: the request goes to each on a DEALER
    of its own (one that is not bound yet gets it when it binds, within `timeout`; a standby never
    answers) and the first reply is returned; TimeoutError only when none answered in `timeout`.
    """
    endpoints = _endpoint_list(control_endpoint)
    owned = _Owned(context)
    source = source or new_source("py-status")
    try:
        frames = ([b""] if rep_delimiter else []) + status_request_frames(params, source=source, sequence=1)
        poller = zmq.Poller()
        for endpoint in endpoints:
            dealer = owned._open(zmq.DEALER, endpoint)
            dealer.send_multipart(frames)
            poller.register(dealer, zmq.POLLIN)
        deadline = time.monotonic() + timeout
        while ready := poller.poll(_remaining(deadline)):
            for dealer, _ in ready:
                reply = dealer.recv_multipart()
                if reply and reply[0] == b"":
                    reply = reply[1:]
                message = owned._decode(reply)
                if isinstance(message, StatusReply):
                    return message.status
                if isinstance(message, Diagnostic):
                    raise Refused(message, 1)
        if isinstance(control_endpoint, str):
            raise TimeoutError(f"no status reply from {control_endpoint} within {timeout:g} s")
        raise TimeoutError(f"no status reply from any of {_describe(control_endpoint)} within {timeout:g} s")
    finally:
        owned.close()
