"""pyzmq clients: Stepper, Events, ReactorView and status() (PROTOCOL.md 3.2 and 3.3).

Every wait is bounded: each call takes a timeout (default: the client's `timeout`, 5 s) and
raises a TimeoutError subclass or returns None, as documented per call. Clients are used from
one thread each (ZeroMQ sockets are not thread-safe). `flowbus.aio` has the same clients for
asyncio; both take their protocol rules from `flowbus.protocol`.

flowd's endpoints may be given as one string or as a list of them, one per flowd instance sharing a
journal (DEPLOYMENT.md, active and standby): only the active instance binds its endpoints, so the
clients connect to all of them and follow whichever answers (the ZeroMQ Guide's Binary Star client).
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Iterator
from typing import Any, Callable, Literal, Optional, Sequence, TypeVar, Union, overload

import zmq

from .clone import StateUpdate
from .messages import Heartbeat, Message, decode
from .protocol import (DROPPED_HWM_TOPIC, Dropped, Endpoint, EventResume, Fallback, FlowBusError, Frames, NoAck,
                       NoOutcome, NotConnected, Params, Receipt, Refused, RoutingWatch, StatusExchange, StepOutbox,
                       TopicFilter, ViewState, describe, endpoint_list)
from .values import Value
from .wire import CONTENT_JSON, MAX_FRAME_BYTES, WireError, new_source

__all__ = ["FlowBusError", "Refused", "Dropped", "NoAck", "NoOutcome", "NotConnected", "Receipt", "Stepper",
           "Events", "Fallback", "ReactorView", "status"]

def _remaining(deadline: float) -> int:
    return max(0, int((deadline - time.monotonic()) * 1000))


# Sockets to a list of flowd instances, of which the active one is bound and the others are not:
# reconnect soon to the one that becomes active, and let ZMTP heartbeats drop a connection whose
# peer vanished without closing it (its machine or link went away), so that it is tried again.
_FAILOVER_OPTIONS: tuple[tuple[int, int], ...] = (
    (zmq.RECONNECT_IVL, 100),
    (zmq.RECONNECT_IVL_MAX, 250),
    (zmq.HEARTBEAT_IVL, 1000),
    (zmq.HEARTBEAT_TIMEOUT, 3000),
)


def socket_options(endpoint: Endpoint, *, immediate: bool = False) -> tuple[tuple[int, int], ...]:
    """The options of a socket connecting to `endpoint`: following several instances (a list) or one."""
    if isinstance(endpoint, str):
        return ()
    return _FAILOVER_OPTIONS + (((zmq.IMMEDIATE, 1),) if immediate else ())


def configure(sock: zmq.Socket[Any], options: Sequence[tuple[int, int]] = (),
              subscriptions: Sequence[bytes] = ()) -> None:
    """The options every client socket has (no linger, 3.1's frame limit), then `options` and the
    SUB's `subscriptions` in order, before it connects."""
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.MAXMSGSIZE, MAX_FRAME_BYTES)
    for option, value in options:
        sock.setsockopt(option, value)
    for prefix in subscriptions:
        sock.setsockopt(zmq.SUBSCRIBE, prefix)


_O = TypeVar("_O", bound="_Owned")


class _Owned:
    """Context ownership and closing, shared by the clients."""

    def __init__(self, context: Optional[zmq.Context[Any]]) -> None:
        self._own_context = context is None
        self._context: zmq.Context[Any] = context or zmq.Context()
        self._sockets: list[zmq.Socket[Any]] = []
        self._children: list[_Owned] = []  # clients sharing this context, closed first
        self.malformed: list[WireError] = []  # WireErrors of received messages that were skipped

    def _open(self, kind: int, endpoint: str) -> zmq.Socket[Any]:
        return self._open_all(kind, [endpoint], ())

    def _open_all(self, kind: int, endpoints: Sequence[str], options: Sequence[tuple[int, int]],
                  subscriptions: Sequence[bytes] = ()) -> zmq.Socket[Any]:
        """One socket of `kind` with `options`, connected to every endpoint of the list."""
        sock: zmq.Socket[Any] = self._context.socket(kind)
        self._sockets.append(sock)  # closed by close() whatever happens next
        configure(sock, options, subscriptions)
        for endpoint in endpoints:
            sock.connect(endpoint)
        return sock

    def _decode(self, frames: Frames) -> Optional[Message]:
        try:
            return decode(frames)
        except WireError as error:
            self.malformed.append(error)
            return None

    def close(self) -> None:
        for child in self._children:
            child.close()
        self._children = []
        for sock in self._sockets:
            sock.close(0)
        self._sockets = []
        if self._own_context and not self._context.closed:
            self._context.term()

    def __enter__(self: _O) -> _O:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()



_MORE_NOW = int(zmq.NOBLOCK | zmq.SNDMORE)  # plain ints: pyzmq's flag enums cost more than the send
_NOW = int(zmq.NOBLOCK)


def sender(sock: zmq.Socket[Any]) -> Callable[[Frames], bool]:
    """A protocol.Sender on `sock`: hands frames over without blocking, False when it took nothing.
    Once the first frame of a multipart message is taken, ZeroMQ takes the rest."""
    def send(frames: Frames) -> bool:
        last = len(frames) - 1
        try:
            sock.send(frames[0], _MORE_NOW if last else _NOW)
        except zmq.Again:
            return False
        for index in range(1, last + 1):
            sock.send(frames[index], _MORE_NOW if index < last else _NOW)
        return True
    return send


# MARK: Events

# Seconds without a message (heartbeats come each second) after which a resuming subscriber asks
# again for what it may have missed (4.6, step 6).
_SILENCE = 3.0


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

    Given `since` (an event sequence; 0 for every event flowd keeps) and flowd's `control`
    endpoint(s), it resumes (4.6): the events after `since` first, then the live ones, each once
    and in order, across flowd restarts and takeovers and drops at flowd's high-water mark (it also
    subscribes to flowd's `diag/dropped-hwm` reports for that, returned only if `topics` match them).
    `position` is the event sequence of the last event returned, where a later Events resumes;
    `fallbacks` lists the replays flowd could not serve (events no longer kept: some were missed,
    and the subscriber went on from the newest).
    """

    def __init__(self, endpoint: Endpoint, topics: Union[str, bytes, Sequence[Union[str, bytes]]], *,
                 timeout: float = 5.0, context: Optional[zmq.Context[Any]] = None, since: Optional[int] = None,
                 control: Optional[Endpoint] = None) -> None:
        endpoints = endpoint_list(endpoint)
        if since is not None and control is None:
            raise ValueError("Events(since=...) asks flowd's control endpoint for the events it missed: pass control=")
        super().__init__(context)
        self.endpoint = endpoint
        self.timeout = timeout
        self._filter = TopicFilter(topics)
        self.topics = self._filter.prefixes
        self.last_heard: Optional[float] = None  # time.monotonic() of the last message from the publisher
        self._pending: deque[Message] = deque()
        self._resume: Optional[EventResume] = None
        self._first_connection_seen = False
        try:
            # Resuming, flowd's reports of the events it dropped name those to ask for again,
            # whatever the topics (4.6, step 1); they are returned only when the topics cover them.
            subscriptions = self._filter.subscriptions
            if since is not None:
                subscriptions = [DROPPED_HWM_TOPIC] + subscriptions
            self._sub = self._open_all(zmq.SUB, endpoints, socket_options(endpoint), subscriptions)
            if since is not None and control is not None:
                self._control = self._open_all(zmq.DEALER, endpoint_list(control),
                                               socket_options(control, immediate=True))
                self._resume = EventResume(since, self.topics, sender(self._control))
                # Connections are watched: a new one is told to the resume before its first message.
                self._monitor: zmq.Socket[Any] = self._sub.get_monitor_socket(zmq.EVENT_CONNECTED)
                self._sockets.append(self._monitor)
                self._poller = zmq.Poller()
                self._poller.register(self._sub, zmq.POLLIN)
                self._poller.register(self._control, zmq.POLLIN)
            deadline = time.monotonic() + timeout
            while True:
                message = self._recv(deadline)
                if message is None:
                    raise NotConnected(f"no heartbeat from {describe(endpoint)} within {timeout:g} s")
                if self._resume is not None:
                    self._pending.extend(m for m in self._resume.live(message, time.monotonic()) if self._wanted(m))
                    if isinstance(message, Heartbeat) and self._wanted(message):
                        self._pending.append(message)
                if isinstance(message, Heartbeat):
                    break
                if self._resume is None and self._wanted(message):
                    self._pending.append(message)
        except BaseException:
            self.close()
            raise

    @property
    def position(self) -> Optional[int]:
        """With `since`: the event sequence of the last event returned (or where it went on from
        after a fallback)."""
        return self._resume.delivered if self._resume is not None else None

    @property
    def fallbacks(self) -> list[Fallback]:
        return self._resume.fallbacks if self._resume is not None else []

    @property
    def replays(self) -> int:
        """Replay requests sent (with `since`)."""
        return self._resume.replays if self._resume is not None else 0

    def caught_up(self, timeout: Optional[float] = None) -> bool:
        """With `since`: reads until the replay reached the newest event and the live stream took
        over (what arrived meanwhile is kept for next()); False if not within `timeout` s."""
        resume = self._resume
        if resume is None:
            return True
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while resume.phase != "live":
            if not self._pump(deadline):
                return False
        return True

    def _pump(self, deadline: float) -> bool:
        """Resuming: reads what either socket has, within `deadline`; False when nothing came."""
        resume = self._resume
        assert resume is not None
        ready = dict(self._poller.poll(min(_remaining(deadline), 500)))
        now = time.monotonic()
        if self._control in ready:
            while self._control.poll(0):
                for answer in resume.reply(self._decode(self._control.recv_multipart()), now):
                    if self._wanted(answer):
                        self._pending.append(answer)
        if self._sub in ready:
            while self._sub.poll(0):
                silent = self.last_heard is not None and now - self.last_heard > _SILENCE
                received = self._decode(self._sub.recv_multipart())
                self.last_heard = now
                if self._reconnected():
                    resume.reconnected(now)
                if received is None:
                    continue
                if silent:
                    resume.may_have_missed(now)
                for delivered in resume.live(received, now):
                    if self._wanted(delivered):
                        self._pending.append(delivered)
                if isinstance(received, Heartbeat) and self._wanted(received):
                    self._pending.append(received)
        resume.tick(now)
        return bool(ready)

    def _wanted(self, message: Message) -> bool:
        return self._filter.wanted(message)

    def _reconnected(self) -> bool:
        """Whether the SUB connected again since the last look (not its first connection)."""
        connected = False
        while self._monitor.poll(0):
            self._monitor.recv_multipart()
            connected = True
        if connected and not self._first_connection_seen:
            self._first_connection_seen = True
            return False
        return connected

    def _recv(self, deadline: float) -> Optional[Message]:
        """The next well-formed message (heartbeats included) before `deadline`, or None."""
        while True:
            if not self._sub.poll(_remaining(deadline)):
                return None
            message = self._decode(self._sub.recv_multipart())
            self.last_heard = time.monotonic()
            if message is not None:
                return message

    def next(self, timeout: Optional[float] = None) -> Optional[Message]:
        """The next message matching `topics`, or None if none comes within `timeout` s."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        if self._resume is not None:
            while not self._pending:
                if time.monotonic() >= deadline:
                    return None
                self._pump(deadline)
            taken = self._pending.popleft()
            self._resume.taken(taken)
            if not self._pending:
                self._resume.drained()
            return taken
        if self._pending:
            return self._pending.popleft()
        while True:
            message = self._recv(deadline)
            if message is None or self._wanted(message):
                return message

    def __iter__(self) -> Iterator[Message]:
        """Messages until none arrives for `timeout` seconds."""
        while True:
            message = self.next()
            if message is None:
                return
            yield message

    def wait_for(self, predicate: Callable[[Message], bool], timeout: Optional[float] = None) -> Message:
        """The first message for which predicate(message) is true; raises TimeoutError after
        `timeout` s. Messages skipped on the way are dropped."""
        limit = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        while True:
            message = self.next(max(0.0, deadline - time.monotonic()))
            if message is None:
                raise TimeoutError(f"no matching message from {describe(self.endpoint)} within {limit:g} s")
            if predicate(message):
                return message


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

    def __init__(self, endpoint: Endpoint, stepper_id: str, *, source: Optional[str] = None, timeout: float = 5.0,
                 content_type: int = CONTENT_JSON, events_endpoint: Optional[Endpoint] = None,
                 context: Optional[zmq.Context[Any]] = None, retransmit_interval: float = 0.5,
                 max_retransmit_interval: float = 2.0) -> None:
        endpoints = endpoint_list(endpoint)
        super().__init__(context)
        self.endpoint = endpoint
        self.stepper_id = stepper_id
        self.timeout = timeout
        self.content_type = content_type
        self.source = source or new_source(stepper_id)
        self._outbox = StepOutbox(stepper_id, self.source, following=not isinstance(endpoint, str),
                                  content_type=content_type, retransmit_interval=retransmit_interval,
                                  max_retransmit_interval=max_retransmit_interval)
        self._events: Optional[Events] = None
        try:
            self._dealer = self._open_all(zmq.DEALER, endpoints, socket_options(endpoint, immediate=True))
            self._send = sender(self._dealer)
            if events_endpoint:
                self._events = Events(events_endpoint, [f"step/{stepper_id}", "diag/"], timeout=timeout,
                                      context=self._context)
                self._children.append(self._events)
        except BaseException:
            self.close()
            raise

    @property
    def sequence(self) -> int:
        return self._outbox.ledger.sequence

    @property
    def resent(self) -> int:
        """Steps sent again (after an out-of-order, a silence or a new instance)."""
        return self._outbox.resent

    @property
    def instance(self) -> Optional[str]:
        """The source id of the flowd instance that acknowledged last (None before the first ack)."""
        return self._outbox.acknowledged_by

    @overload
    def publish(self, name: str, /, *, wait: Literal[False], **params: Value) -> int: ...
    @overload
    def publish(self, name: str, /, *, wait: Optional[Literal[True]] = None, **params: Value) -> Receipt: ...

    def publish(self, name: str, /, *, wait: Optional[bool] = None, **params: Value) -> Union[Receipt, int]:
        """Sends step `name` with `params` and waits for its ack (and, with `events_endpoint`, its
        outcome); returns a Receipt. See the class for `wait`."""
        return self._publish(name, params, wait, None)

    @overload
    def publish_params(self, name: str, params: Params = None, *, wait: Literal[False],
                       timeout: Optional[float] = None, traceparent: Optional[str] = None,
                       tracestate: str = "") -> int: ...
    @overload
    def publish_params(self, name: str, params: Params = None, *, wait: Optional[Literal[True]] = None,
                       timeout: Optional[float] = None, traceparent: Optional[str] = None,
                       tracestate: str = "") -> Receipt: ...

    def publish_params(self, name: str, params: Params = None, *, wait: Optional[bool] = None,
                       timeout: Optional[float] = None, traceparent: Optional[str] = None,
                       tracestate: str = "") -> Union[Receipt, int]:
        """As publish(), params as a dict; wait=False returns the sequence without waiting.
        `traceparent` (W3C) is the step's trace; by default the active OpenTelemetry span's, if any."""
        return self._publish(name, params, wait, timeout, (traceparent, tracestate) if traceparent else None)

    def _publish(self, name: str, params: Params, wait: Optional[bool], timeout: Optional[float],
                 trace: Optional[tuple[str, str]] = None) -> Union[Receipt, int]:
        if wait and self._events is None:
            raise ValueError("wait=True needs the Stepper's events_endpoint (flowd's events), where the outcome is published")
        # What the socket does not take goes out from wait_ack.
        sequence = self._outbox.publish(name, params, self._send, trace)
        if wait is False:
            return sequence
        receipt = self.wait_ack(sequence, timeout)
        if self._events is not None:
            self._check_routing(sequence, name, timeout, strict=bool(wait))
        return receipt

    def wait_ack(self, sequence: int, timeout: Optional[float] = None) -> Receipt:
        """Waits until an ack covers `sequence`; Receipt, or Refused / NoAck."""
        limit = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        outbox = self._outbox
        while outbox.ledger.acked < sequence:
            now = time.monotonic()
            wake = outbox.wake_time(now, deadline, self._send)
            if now >= deadline:
                raise NoAck(f"no ack for {self.source} sequence {sequence} from "
                            f"{'any of ' if outbox.following else ''}{describe(self.endpoint)} within {limit:g} s")
            if self._dealer.poll(max(1, math.ceil((wake - now) * 1000))):
                message = self._decode(self._dealer.recv_multipart())
                if message is not None:
                    outbox.on_reply(message, self._send)
        return outbox.ledger.outcome(sequence)

    def _check_routing(self, sequence: int, name: str, timeout: Optional[float], strict: bool = False) -> None:
        assert self._events is not None
        limit = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        watch = RoutingWatch(self.stepper_id, self.source, sequence, name)
        while True:
            message = self._events._recv(deadline)
            if message is None:
                if strict:
                    raise watch.no_outcome(self._events.endpoint, limit)
                return
            if watch.feed(message):
                return


# MARK: ReactorView


class ReactorView(_Owned):
    """A view of reactor `reactor_id` on a reactor host: actions on `actions_endpoint` (DEALER),
    states on `states_endpoint` (SUB), joined with the Clone rule (PROTOCOL.md 3.3).

    The constructor subscribes to `state/<id>` (then `hb/`), waits up to `timeout` for a
    heartbeat (NotConnected otherwise), and sends a snapshotRequest. `next_state()` / iteration
    then give the snapshot first and every later state once, in order: live states received
    before the snapshot are queued, states with sequence ≤ the snapshot's are dropped, and a gap
    or a new host source triggers a new snapshotRequest (counted in `resynchronisations`).

    Actions and snapshot requests are kept until the host acknowledges them, and sent again after
    an `out-of-order` refusal. The endpoints may be lists, one per instance of a host with a
    standby (`reactors.<host>.instances`): the view connects to every instance and follows the one
    that binds; what the instance that died had not acknowledged goes again to the one taking over
    (which applies each action once), also after `retransmit_interval` s without an ack (doubling
    up to `max_retransmit_interval`), and its new host source brings a new snapshot.
    """

    def __init__(self, actions_endpoint: Endpoint, states_endpoint: Endpoint, reactor_id: str, *,
                 source: Optional[str] = None, timeout: float = 5.0, content_type: int = CONTENT_JSON,
                 retransmit_interval: float = 0.5, max_retransmit_interval: float = 2.0,
                 context: Optional[zmq.Context[Any]] = None) -> None:
        super().__init__(context)
        self.reactor_id = reactor_id
        self.timeout = timeout
        self.content_type = content_type
        following = not isinstance(actions_endpoint, str)
        self._view = ViewState(reactor_id, source, content_type, following=following,
                               retransmit_interval=retransmit_interval, max_retransmit_interval=max_retransmit_interval)
        self.source = self._view.source
        self.actions_endpoint, self.states_endpoint = actions_endpoint, states_endpoint
        try:
            self._sub = self._open_all(zmq.SUB, endpoint_list(states_endpoint), socket_options(states_endpoint),
                                       [self._view.state_topic.encode("utf-8"), b"hb/"])
            # Following: ZMQ_IMMEDIATE, so that nothing is queued toward an instance that is not bound.
            self._dealer = self._open_all(zmq.DEALER, endpoint_list(actions_endpoint),
                                          socket_options(actions_endpoint, immediate=True))
            self._send = sender(self._dealer)
            self._poller = zmq.Poller()
            self._poller.register(self._sub, zmq.POLLIN)
            self._poller.register(self._dealer, zmq.POLLIN)
            deadline = time.monotonic() + timeout
            while not self._view.heard_host:
                if not self._sub.poll(_remaining(deadline)):
                    raise NotConnected(f"no heartbeat from {describe(states_endpoint)} within {timeout:g} s")
                self._on_state_socket(self._sub.recv_multipart())
            self._view.snapshot_request(self._send)
        except BaseException:
            self.close()
            raise

    @property
    def resynchronisations(self) -> int:
        return self._view.merger.resynchronisations

    @property
    def synced(self) -> bool:
        return self._view.merger.synced

    @property
    def host_source(self) -> Optional[str]:
        return self._view.host_source

    @property
    def resent(self) -> int:
        """Actions and snapshot requests sent again (after an out-of-order, a silence or a new instance)."""
        return self._view.outbox.resent

    @property
    def instance(self) -> Optional[str]:
        """The source id of the host instance that acknowledged last (None before the first ack)."""
        return self._view.outbox.acknowledged_by

    def _on_state_socket(self, frames: Frames) -> None:
        self._view.on_state_socket(self._decode(frames), self._send)

    def _on_dealer(self, frames: Frames) -> None:
        self._view.on_dealer(self._decode(frames), self._send)

    def _pump(self, deadline: float) -> bool:
        """Handles what both sockets have, and sends again what the outbox's rules say; waits until
        `deadline` for the first message."""
        now = time.monotonic()
        wake = self._view.wake_time(now, deadline, self._send)
        events = dict(self._poller.poll(max(0, math.ceil((wake - now) * 1000))))
        if not events:
            return time.monotonic() < deadline
        while events:
            if self._dealer in events:
                self._on_dealer(self._dealer.recv_multipart())
            if self._sub in events:
                self._on_state_socket(self._sub.recv_multipart())
            events = dict(self._poller.poll(0))
        return True

    # Actions

    def send(self, name: str, /, **params: Value) -> Receipt:
        """Sends action `name` with `params` and waits for the host's ack: a Receipt, or
        Refused (e.g. `bad-action`, `unknown-reactor`) / NoAck. The ack does not mean the
        resulting states were published: read them with next_state()."""
        return self.send_params(name, params)

    @overload
    def send_params(self, name: str, params: Params = None, *, wait: Literal[True] = True,
                    timeout: Optional[float] = None, traceparent: Optional[str] = None,
                    tracestate: str = "") -> Receipt: ...
    @overload
    def send_params(self, name: str, params: Params = None, *, wait: Literal[False],
                    timeout: Optional[float] = None, traceparent: Optional[str] = None,
                    tracestate: str = "") -> int: ...

    def send_params(self, name: str, params: Params = None, *, wait: bool = True,
                    timeout: Optional[float] = None, traceparent: Optional[str] = None,
                    tracestate: str = "") -> Union[Receipt, int]:
        """As send(), params as a dict; `traceparent` (W3C) is the action's trace, by default the
        active OpenTelemetry span's, if any."""
        # What the socket does not take (no instance bound yet) goes out from wait_ack.
        sequence = self._view.action(name, params, self._send, (traceparent, tracestate) if traceparent else None)
        return self.wait_ack(sequence, timeout) if wait else sequence

    def wait_ack(self, sequence: int, timeout: Optional[float] = None) -> Receipt:
        limit = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        while self._view.ledger.acked < sequence:
            if not self._pump(deadline):
                following = "any of " if self._view.outbox.following else ""
                raise NoAck(f"no ack for {self.source} sequence {sequence} from {following}"
                            f"{describe(self.actions_endpoint)} within {limit:g} s")
        return self._view.ledger.outcome(sequence)

    # States

    def next_state(self, timeout: Optional[float] = None) -> Optional[StateUpdate]:
        """The next StateUpdate (the snapshot first), or None if none within `timeout` s.
        Raises Refused if the host refused our snapshotRequest (e.g. `unknown-reactor`)."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while (update := self._view.next_ready()) is None:
            if not self._pump(deadline):
                return None
        return update

    def states(self, timeout: Optional[float] = None) -> Iterator[StateUpdate]:
        """StateUpdates until none arrives for `timeout` seconds."""
        while True:
            update = self.next_state(timeout)
            if update is None:
                return
            yield update

    __iter__ = states


# MARK: status


def status(control_endpoint: Endpoint, *, timeout: float = 5.0, source: Optional[str] = None,
           context: Optional[zmq.Context[Any]] = None, rep_delimiter: bool = False,
           params: Params = None) -> dict[str, Value]:
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
    endpoints = endpoint_list(control_endpoint)
    owned = _Owned(context)
    exchange = StatusExchange(params, source, rep_delimiter)
    try:
        poller = zmq.Poller()
        for endpoint in endpoints:
            dealer = owned._open(zmq.DEALER, endpoint)
            dealer.send_multipart(exchange.request)
            poller.register(dealer, zmq.POLLIN)
        deadline = time.monotonic() + timeout
        while ready := poller.poll(_remaining(deadline)):
            for dealer, _ in ready:
                answer = exchange.answer(owned._decode(exchange.reply_frames(dealer.recv_multipart())))
                if answer is not None:
                    return answer
        prefix = "" if isinstance(control_endpoint, str) else "any of "
        raise TimeoutError(f"no status reply from {prefix}{describe(control_endpoint)} within {timeout:g} s")
    finally:
        owned.close()
