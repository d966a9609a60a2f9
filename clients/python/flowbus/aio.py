"""asyncio clients on `zmq.asyncio`: Stepper, Events, ReactorView and status().

The same clients as `flowbus.client`, with the same protocol rules (`flowbus.protocol`), the same
arguments and the same errors; every wait is a coroutine. A client connects in `async with`
(or `await client.connect()`), where the blocking client's constructor waits:

    async with aio.Events(f"{RUN}/events.sock", ["nav/did/"]) as events, \\
               aio.Stepper(f"{RUN}/ingress.sock", "apikey") as stepper:
        await stepper.publish("apiKeyIsComplete")
        did = await events.wait_for(lambda m: isinstance(m, DidNavigate))

A client belongs to one event loop and is used from one task at a time.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import AsyncIterator
from typing import Callable, Literal, Optional, Sequence, TypeVar, Union, cast, overload

import zmq
import zmq.asyncio

from .client import configure, sender, socket_options
from .clone import StateUpdate
from .messages import Heartbeat, Message, decode
from .protocol import (Dropped, Endpoint, FlowBusError, Frames, NoAck, NoOutcome, NotConnected, Params, Receipt,
                       Refused, RoutingWatch, StatusExchange, StepOutbox, TopicFilter, ViewState, describe,
                       endpoint_list)
from .values import Value
from .wire import CONTENT_JSON, WireError, new_source

__all__ = ["FlowBusError", "Refused", "Dropped", "NoAck", "NoOutcome", "NotConnected", "Receipt", "Stepper",
           "Events", "ReactorView", "status"]

_C = TypeVar("_C", bound="_AsyncOwned")
AsyncSocket = zmq.asyncio.Socket


def _remaining(deadline: float) -> int:
    return max(0, int((deadline - time.monotonic()) * 1000))


async def _readable(sock: AsyncSocket, timeout_ms: int) -> bool:
    return bool(await sock.poll(timeout_ms))  # POLLIN by default


_EVENTS, _POLLIN = int(zmq.EVENTS), int(zmq.POLLIN)


def _shadow(sock: AsyncSocket) -> zmq.Socket[bytes]:
    """A blocking-API handle on the same socket, for sends and receives that never wait: cheaper than
    a future each. Safe with the asyncio handle's waits, which look at ZMQ_EVENTS when they start."""
    return zmq.Socket.shadow(sock.underlying)


class _AsyncOwned:
    """Context ownership and closing, shared by the clients."""

    def __init__(self, context: Optional[zmq.asyncio.Context]) -> None:
        self._own_context = context is None
        self._context = context or zmq.asyncio.Context()
        self._sockets: list[AsyncSocket] = []
        self._children: list[_AsyncOwned] = []  # clients sharing this context, closed first
        self.malformed: list[WireError] = []  # WireErrors of received messages that were skipped

    def _open_all(self, kind: int, endpoints: Sequence[str], options: Sequence[tuple[int, int]] = (),
                  subscriptions: Sequence[bytes] = ()) -> AsyncSocket:
        sock = self._context.socket(kind)
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

    async def connect(self: _C) -> _C:
        """Waits until the publisher is heard (see each client); the client itself."""
        return self

    def close(self) -> None:
        for child in self._children:
            child.close()
        self._children = []
        for sock in self._sockets:
            sock.close(0)
        self._sockets = []
        if self._own_context and not self._context.closed:
            self._context.term()

    async def __aenter__(self: _C) -> _C:
        try:
            return await self.connect()
        except BaseException:
            self.close()
            raise

    async def __aexit__(self, *exc: object) -> None:
        self.close()


# MARK: Events


class Events(_AsyncOwned):
    """A SUB on a publisher, as `flowbus.client.Events`: `connect()` waits up to `timeout` for a
    heartbeat (NotConnected otherwise), after which nothing published on `topics` is missed."""

    def __init__(self, endpoint: Endpoint, topics: Union[str, bytes, Sequence[Union[str, bytes]]], *,
                 timeout: float = 5.0, context: Optional[zmq.asyncio.Context] = None) -> None:
        endpoints = endpoint_list(endpoint)
        super().__init__(context)
        self.endpoint = endpoint
        self.timeout = timeout
        self._filter = TopicFilter(topics)
        self.topics = self._filter.prefixes
        self.last_heard: Optional[float] = None
        self._pending: deque[Message] = deque()
        try:
            self._sub = self._open_all(zmq.SUB, endpoints, socket_options(endpoint), self._filter.subscriptions)
        except BaseException:
            self.close()
            raise

    async def connect(self) -> Events:
        deadline = time.monotonic() + self.timeout
        while True:
            message = await self._recv(deadline)
            if message is None:
                raise NotConnected(f"no heartbeat from {describe(self.endpoint)} within {self.timeout:g} s")
            if isinstance(message, Heartbeat):
                return self
            if self._filter.wanted(message):
                self._pending.append(message)

    async def _recv(self, deadline: float) -> Optional[Message]:
        """The next well-formed message (heartbeats included) before `deadline`, or None."""
        while True:
            if not await _readable(self._sub, _remaining(deadline)):
                return None
            message = self._decode(await self._sub.recv_multipart())
            self.last_heard = time.monotonic()
            if message is not None:
                return message

    async def next(self, timeout: Optional[float] = None) -> Optional[Message]:
        """The next message matching `topics`, or None if none comes within `timeout` s."""
        if self._pending:
            return self._pending.popleft()
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            message = await self._recv(deadline)
            if message is None or self._filter.wanted(message):
                return message

    async def __aiter__(self) -> AsyncIterator[Message]:
        """Messages until none arrives for `timeout` seconds."""
        while (message := await self.next()) is not None:
            yield message

    async def wait_for(self, predicate: Callable[[Message], bool], timeout: Optional[float] = None) -> Message:
        """The first message for which predicate(message) is true; TimeoutError after `timeout` s."""
        limit = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        while True:
            message = await self.next(max(0.0, deadline - time.monotonic()))
            if message is None:
                raise TimeoutError(f"no matching message from {describe(self.endpoint)} within {limit:g} s")
            if predicate(message):
                return message


# MARK: Stepper


class Stepper(_AsyncOwned):
    """Publishes steps as `stepper_id` on flowd's `ingress`, as `flowbus.client.Stepper` (kept steps,
    resends, several instances, `events_endpoint` for routing refusals).

    `await publish(name, wait=False, **params)` keeps the step and returns its sequence without
    waiting: kept steps go to the socket together when the task next lets the loop run (or when
    `SEND_BATCH` are waiting), since one send per step would wake flowd's reader for each. Acks
    that arrived meanwhile are taken on the way, so a stream of such publications followed by
    `await wait_ack(last)` pipelines steps."""

    SEND_BATCH = 64

    def __init__(self, endpoint: Endpoint, stepper_id: str, *, source: Optional[str] = None, timeout: float = 5.0,
                 content_type: int = CONTENT_JSON, events_endpoint: Optional[Endpoint] = None,
                 context: Optional[zmq.asyncio.Context] = None, retransmit_interval: float = 0.5,
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
        self._flush_due = False  # a flush of kept steps is scheduled on the loop
        try:
            self._dealer = self._open_all(zmq.DEALER, endpoints, socket_options(endpoint, immediate=True))
            self._now = _shadow(self._dealer)
            self._send = sender(self._now)
            if events_endpoint:
                self._events = Events(events_endpoint, [f"step/{stepper_id}", "diag/"], timeout=timeout,
                                      context=self._context)
                self._children.append(self._events)
        except BaseException:
            self.close()
            raise

    async def connect(self) -> Stepper:
        """Waits for flowd's heartbeat on `events_endpoint`, if given."""
        if self._events is not None:
            await self._events.connect()
        return self

    @property
    def sequence(self) -> int:
        return self._outbox.ledger.sequence

    @property
    def resent(self) -> int:
        return self._outbox.resent

    @property
    def instance(self) -> Optional[str]:
        return self._outbox.acknowledged_by

    @overload
    async def publish(self, name: str, /, *, wait: Literal[False], **params: Value) -> int: ...
    @overload
    async def publish(self, name: str, /, *, wait: Optional[Literal[True]] = None, **params: Value) -> Receipt: ...

    async def publish(self, name: str, /, *, wait: Optional[bool] = None, **params: Value) -> Union[Receipt, int]:
        """Sends step `name` and waits for its ack (and, with `events_endpoint`, its outcome)."""
        return await self._publish(name, params, wait, None)

    @overload
    async def publish_params(self, name: str, params: Params = None, *, wait: Literal[False],
                             timeout: Optional[float] = None, traceparent: Optional[str] = None,
                             tracestate: str = "") -> int: ...
    @overload
    async def publish_params(self, name: str, params: Params = None, *, wait: Optional[Literal[True]] = None,
                             timeout: Optional[float] = None, traceparent: Optional[str] = None,
                             tracestate: str = "") -> Receipt: ...

    async def publish_params(self, name: str, params: Params = None, *, wait: Optional[bool] = None,
                             timeout: Optional[float] = None, traceparent: Optional[str] = None,
                             tracestate: str = "") -> Union[Receipt, int]:
        """As publish(), params as a dict; `traceparent` as for the blocking client's."""
        return await self._publish(name, params, wait, timeout, (traceparent, tracestate) if traceparent else None)

    async def _publish(self, name: str, params: Params, wait: Optional[bool],
                       timeout: Optional[float], trace: Optional[tuple[str, str]] = None) -> Union[Receipt, int]:
        if wait and self._events is None:
            raise ValueError("wait=True needs the Stepper's events_endpoint (flowd's events), where the outcome is published")
        if wait is False:
            sequence = self._outbox.keep(name, params, trace)
            if self._outbox.unsent >= self.SEND_BATCH:
                self._take_replies()
                self._outbox.flush(self._send)
            elif not self._flush_due:
                self._flush_due = True
                asyncio.get_running_loop().call_soon(self._flush_kept)
            return sequence
        sequence = self._outbox.publish(name, params, self._send, trace)
        receipt = await self.wait_ack(sequence, timeout)
        if self._events is not None:
            await self._check_routing(sequence, name, timeout, strict=bool(wait))
        return receipt

    def _flush_kept(self) -> None:
        self._flush_due = False
        if self._sockets:  # not closed meanwhile
            self._take_replies()
            self._outbox.flush(self._send)

    def _take_replies(self) -> None:
        """Handles the replies already received, without waiting."""
        while cast(int, self._now.get(_EVENTS)) & _POLLIN:
            message = self._decode(self._now.recv_multipart(zmq.NOBLOCK))
            if message is not None:
                self._outbox.on_reply(message, self._send)

    async def wait_ack(self, sequence: int, timeout: Optional[float] = None) -> Receipt:
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
            if await _readable(self._dealer, max(1, math.ceil((wake - now) * 1000))):
                self._take_replies()
        return outbox.ledger.outcome(sequence)

    async def _check_routing(self, sequence: int, name: str, timeout: Optional[float], strict: bool) -> None:
        assert self._events is not None
        limit = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        watch = RoutingWatch(self.stepper_id, self.source, sequence, name)
        while True:
            message = await self._events._recv(deadline)
            if message is None:
                if strict:
                    raise watch.no_outcome(self._events.endpoint, limit)
                return
            if watch.feed(message):
                return


# MARK: ReactorView


class ReactorView(_AsyncOwned):
    """A view of reactor `reactor_id`, as `flowbus.client.ReactorView`: `connect()` subscribes, waits
    for the host's heartbeat and asks for the snapshot; `next_state()` gives the snapshot first and
    every later state once, in order (the Clone rule, 3.3). The endpoints may be lists, one per
    instance of a host with a standby: the view follows the active one, as the blocking one does."""

    def __init__(self, actions_endpoint: Endpoint, states_endpoint: Endpoint, reactor_id: str, *,
                 source: Optional[str] = None, timeout: float = 5.0, content_type: int = CONTENT_JSON,
                 retransmit_interval: float = 0.5, max_retransmit_interval: float = 2.0,
                 context: Optional[zmq.asyncio.Context] = None) -> None:
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
            self._dealer = self._open_all(zmq.DEALER, endpoint_list(actions_endpoint),
                                          socket_options(actions_endpoint, immediate=True))
            self._send = sender(_shadow(self._dealer))
            self._poller = zmq.asyncio.Poller()
            self._poller.register(self._sub, zmq.POLLIN)
            self._poller.register(self._dealer, zmq.POLLIN)
        except BaseException:
            self.close()
            raise

    async def connect(self) -> ReactorView:
        deadline = time.monotonic() + self.timeout
        while not self._view.heard_host:
            if not await _readable(self._sub, _remaining(deadline)):
                raise NotConnected(f"no heartbeat from {describe(self.states_endpoint)} within {self.timeout:g} s")
            self._view.on_state_socket(self._decode(await self._sub.recv_multipart()), self._send)
        self._view.snapshot_request(self._send)
        return self

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

    async def _pump(self, deadline: float) -> bool:
        """Handles what both sockets have, and sends again what the outbox's rules say; waits until
        `deadline` for the first message."""
        now = time.monotonic()
        wake = self._view.wake_time(now, deadline, self._send)
        events = dict(await self._poller.poll(max(0, math.ceil((wake - now) * 1000))))
        if not events:
            return time.monotonic() < deadline
        while events:
            if self._dealer in events:
                self._view.on_dealer(self._decode(await self._dealer.recv_multipart()), self._send)
            if self._sub in events:
                self._view.on_state_socket(self._decode(await self._sub.recv_multipart()), self._send)
            events = dict(await self._poller.poll(0))
        return True

    async def send(self, name: str, /, **params: Value) -> Receipt:
        """Sends action `name` and waits for the host's ack: a Receipt, or Refused / NoAck."""
        return await self.wait_ack(await self._send_action(name, params))

    @overload
    async def send_params(self, name: str, params: Params = None, *, wait: Literal[True] = True,
                          timeout: Optional[float] = None, traceparent: Optional[str] = None,
                          tracestate: str = "") -> Receipt: ...
    @overload
    async def send_params(self, name: str, params: Params = None, *, wait: Literal[False],
                          timeout: Optional[float] = None, traceparent: Optional[str] = None,
                          tracestate: str = "") -> int: ...

    async def send_params(self, name: str, params: Params = None, *, wait: bool = True,
                          timeout: Optional[float] = None, traceparent: Optional[str] = None,
                          tracestate: str = "") -> Union[Receipt, int]:
        sequence = await self._send_action(name, params, (traceparent, tracestate) if traceparent else None)
        return await self.wait_ack(sequence, timeout) if wait else sequence

    async def _send_action(self, name: str, params: Params, trace: Optional[tuple[str, str]] = None) -> int:
        # What the socket does not take (no instance bound yet) goes out from wait_ack.
        return self._view.action(name, params, self._send, trace)

    async def wait_ack(self, sequence: int, timeout: Optional[float] = None) -> Receipt:
        limit = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        while self._view.ledger.acked < sequence:
            if not await self._pump(deadline):
                following = "any of " if self._view.outbox.following else ""
                raise NoAck(f"no ack for {self.source} sequence {sequence} from {following}"
                            f"{describe(self.actions_endpoint)} within {limit:g} s")
        return self._view.ledger.outcome(sequence)

    async def next_state(self, timeout: Optional[float] = None) -> Optional[StateUpdate]:
        """The next StateUpdate (the snapshot first), or None if none within `timeout` s."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while (update := self._view.next_ready()) is None:
            if not await self._pump(deadline):
                return None
        return update

    async def states(self, timeout: Optional[float] = None) -> AsyncIterator[StateUpdate]:
        """StateUpdates until none arrives for `timeout` seconds."""
        while (update := await self.next_state(timeout)) is not None:
            yield update

    def __aiter__(self) -> AsyncIterator[StateUpdate]:
        return self.states()


# MARK: status


async def status(control_endpoint: Endpoint, *, timeout: float = 5.0, source: Optional[str] = None,
                 context: Optional[zmq.asyncio.Context] = None, rep_delimiter: bool = False,
                 params: Params = None) -> dict[str, Value]:
    """flowd's status map, as `flowbus.client.status` (the first reply of any instance)."""
    endpoints = endpoint_list(control_endpoint)
    owned = _AsyncOwned(context)
    exchange = StatusExchange(params, source, rep_delimiter)
    try:
        poller = zmq.asyncio.Poller()
        for endpoint in endpoints:
            dealer = owned._open_all(zmq.DEALER, [endpoint])
            await dealer.send_multipart(exchange.request)
            poller.register(dealer, zmq.POLLIN)
        deadline = time.monotonic() + timeout
        while ready := await poller.poll(_remaining(deadline)):
            for dealer, _ in ready:
                frames = await dealer.recv_multipart()
                answer = exchange.answer(owned._decode(exchange.reply_frames(frames)))
                if answer is not None:
                    return answer
        prefix = "" if isinstance(control_endpoint, str) else "any of "
        raise TimeoutError(f"no status reply from {prefix}{describe(control_endpoint)} within {timeout:g} s")
    finally:
        owned.close()
