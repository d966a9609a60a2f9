"""The seventeen messages of flowbus/1 (PROTOCOL.md 4.3): builders (`*_frames`) that return the
list of frames to send, and `decode()` that turns received frames into a typed message.

Every builder takes the envelope fields as keywords: `source` and `sequence` (required),
`timestamp_us` and `message_id` (default: now and 16 random bytes) and, for kinds carrying
values, `content_type` (default JSON; FBV with `content_type=CONTENT_FBV`).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, TypedDict, cast

from . import wire
from .values import Value, decode_value, encode_value
from .wire import (CONTENT_FBV, CONTENT_JSON, CONTENT_NONE, KIND_LAYOUT, Envelope, WireError,
                   check_label, check_name, encode_envelope, topic)

NAV_VERBS = ("setRoot", "push", "pop", "present", "dismiss", "setTabs", "selectTab", "end")
PRESENTABLE_KINDS = ("screen", "stack", "tabs", "flow", "")
REPORT_EVENTS = ("appeared", "disappeared", "dismissed")

if TYPE_CHECKING:
    from typing_extensions import Buffer, Unpack


# MARK: Typed messages


@dataclass
class Message:
    topic: str
    envelope: Envelope
    # W3C Trace Context of the trace frame (4.5); empty when the message has none.
    traceparent: str = field(default="", kw_only=True)
    tracestate: str = field(default="", kw_only=True)
    # The event sequence a replay gave it (4.6); 0 for a message received live.
    replayed_sequence: int = field(default=0, kw_only=True, compare=False)

    @property
    def trace_id(self) -> str:
        """The trace id (32 hex digits) of the trace frame, or ""."""
        return self.traceparent[3:35]

    @property
    def kind(self) -> int:
        return self.envelope.kind

    @property
    def source(self) -> str:
        return self.envelope.source

    @property
    def sequence(self) -> int:
        return self.envelope.sequence

    @property
    def topic_id(self) -> str:
        prefix = KIND_LAYOUT[self.envelope.kind][0]
        return self.topic[len(prefix):] if prefix not in wire.BARE_TOPICS else ""


@dataclass
class Step(Message):
    name: str = ""
    params: dict[str, Value] = field(default_factory=dict)

    @property
    def stepper_id(self) -> str:
        return self.topic_id


@dataclass
class DeepLink(Message):
    name: str = ""
    params: dict[str, Value] = field(default_factory=dict)


@dataclass
class Action(Message):
    name: str = ""
    params: dict[str, Value] = field(default_factory=dict)

    @property
    def reactor_id(self) -> str:
        return self.topic_id


@dataclass
class State(Message):
    value: Value = None

    @property
    def reactor_id(self) -> str:
        return self.topic_id


@dataclass
class Snapshot(State):
    pass


@dataclass
class SnapshotRequest(Message):
    @property
    def reactor_id(self) -> str:
        return self.topic_id


@dataclass
class Navigation(Message):
    """willNavigate (kind 7) or didNavigate (kind 8)."""
    flow: str = ""
    step: str = ""
    params: dict[str, Value] = field(default_factory=dict)
    presentable: str = ""


@dataclass
class WillNavigate(Navigation):
    pass


@dataclass
class DidNavigate(Navigation):
    pass


@dataclass
class NavigationCommand(Message):
    verb: str = ""
    target: str = ""
    container: str = ""
    presentable_kind: str = ""

    @property
    def flow(self) -> str:
        return self.topic_id


@dataclass
class Diagnostic(Message):
    reason: str = ""
    details: dict[str, Value] = field(default_factory=dict)

    @property
    def message(self) -> Value:
        return self.details.get("message", "")

    def names(self, source: str, sequence: int) -> bool:
        """True when the details name the message (source, sequence) (3.3)."""
        return self.details.get("source") == source and self.details.get("sequence") == sequence


@dataclass
class Ack(Message):
    acked_sequence: int = 0

    @property
    def acked_source(self) -> str:
        return self.topic_id


@dataclass
class Heartbeat(Message):
    pass


@dataclass
class StatusRequest(Message):
    params: dict[str, Value] = field(default_factory=dict)  # sections and pages asked for (4.3); empty: the default reply


@dataclass
class StatusReply(Message):
    status: dict[str, Value] = field(default_factory=dict)


@dataclass
class PresentableReport(Message):
    event: str = ""

    @property
    def presentable_id(self) -> str:
        return self.topic_id


@dataclass
class ReplayRequest(Message):
    params: dict[str, Value] = field(default_factory=dict)  # since, topics, limit (4.6)


@dataclass
class Replay(Message):
    """A replay reply (4.6): the kept events after `since` the request asked for, in order, each
    as (event sequence, its frames); `last` is where to go on from, `more` whether to ask again;
    `until` the request's, if it had one."""
    since: int = 0
    until: int | None = None
    last: int = 0
    head: int = 0
    oldest: int = 0
    more: bool = False
    events: list[tuple[int, list[bytes]]] = field(default_factory=list)


# MARK: Builders


class _Stamp(TypedDict):
    source: str
    sequence: int


class _EnvelopeOptions(_Stamp, total=False):
    """The envelope keywords of every builder."""
    timestamp_us: int | None
    message_id: bytes | None


class _ValueOptions(_EnvelopeOptions, total=False):
    """The keywords of builders of kinds carrying values."""
    content_type: int
    traceparent: str
    tracestate: str


def _env(kind: int, source: str, sequence: int, content_type: int = CONTENT_NONE, timestamp_us: int | None = None,
         message_id: bytes | None = None) -> bytes:
    return encode_envelope(kind, sequence, source, content_type, timestamp_us, message_id)


def _params(params: Mapping[str, Value] | None, content_type: int) -> tuple[int, bytes]:
    """(content type, frame): an empty map is an empty frame with content type 0 (4.2, Params)."""
    params = dict(params or {})
    if not params:
        return CONTENT_NONE, b""
    return content_type, encode_value(params, content_type)


def _traced(frames: list[bytes], traceparent: str, tracestate: str) -> list[bytes]:
    """`frames` with a trace frame (4.5) when there is a traceparent."""
    return frames + [wire.trace_frame(traceparent, tracestate)] if traceparent else frames


def _named(kind: int, prefix: str, topic_id: str, name: str, params: Mapping[str, Value] | None, source: str,
           sequence: int, content_type: int, timestamp_us: int | None, message_id: bytes | None,
           traceparent: str, tracestate: str) -> list[bytes]:
    ct, body = _params(params, content_type)
    return _traced([topic(prefix, topic_id), _env(kind, source, sequence, ct, timestamp_us, message_id),
                    check_name(name), body], traceparent, tracestate)


def step_frames(stepper_id: str, name: str, params: Mapping[str, Value] | None = None, *, source: str, sequence: int,
                content_type: int = CONTENT_JSON, timestamp_us: int | None = None,
                message_id: bytes | None = None, traceparent: str = "", tracestate: str = "") -> list[bytes]:
    return _named(wire.STEP, "step/", stepper_id, name, params, source, sequence, content_type, timestamp_us, message_id,
                  traceparent, tracestate)


def deep_link_frames(name: str, params: Mapping[str, Value] | None = None, *, source: str, sequence: int,
                     content_type: int = CONTENT_JSON, timestamp_us: int | None = None,
                     message_id: bytes | None = None, traceparent: str = "", tracestate: str = "") -> list[bytes]:
    return _named(wire.DEEP_LINK, "deeplink/", name, name, params, source, sequence, content_type, timestamp_us,
                  message_id, traceparent, tracestate)


def action_frames(reactor_id: str, name: str, params: Mapping[str, Value] | None = None, *, source: str,
                  sequence: int, content_type: int = CONTENT_JSON, timestamp_us: int | None = None,
                  message_id: bytes | None = None, traceparent: str = "", tracestate: str = "") -> list[bytes]:
    return _named(wire.ACTION, "action/", reactor_id, name, params, source, sequence, content_type, timestamp_us,
                  message_id, traceparent, tracestate)


def snapshot_request_frames(reactor_id: str, *, source: str, sequence: int, timestamp_us: int | None = None,
                            message_id: bytes | None = None) -> list[bytes]:
    return [topic("snapshot/", reactor_id), _env(wire.SNAPSHOT_REQUEST, source, sequence, CONTENT_NONE, timestamp_us, message_id)]


def state_frames(reactor_id: str, value: Value, *, source: str, sequence: int, content_type: int = CONTENT_FBV,
                 timestamp_us: int | None = None, message_id: bytes | None = None,
                 snapshot: bool = False, traceparent: str = "", tracestate: str = "") -> list[bytes]:
    kind = wire.SNAPSHOT if snapshot else wire.STATE
    if snapshot and traceparent:
        raise WireError("malformed", "a snapshot carries no trace frame")
    return _traced([topic("state/", reactor_id), _env(kind, source, sequence, content_type, timestamp_us, message_id),
                    encode_value(value, content_type)], traceparent, tracestate)


def snapshot_frames(reactor_id: str, value: Value, **kwargs: Unpack[_ValueOptions]) -> list[bytes]:
    return state_frames(reactor_id, value, snapshot=True, **kwargs)


def navigation_frames(flow: str, step: str, params: Mapping[str, Value] | None = None, presentable: str = "", *,
                      did: bool = True, source: str, sequence: int, content_type: int = CONTENT_JSON,
                      timestamp_us: int | None = None, message_id: bytes | None = None, traceparent: str = "",
                      tracestate: str = "") -> list[bytes]:
    ct, body = _params(params, content_type)
    kind, prefix = (wire.DID_NAVIGATE, "nav/did/") if did else (wire.WILL_NAVIGATE, "nav/will/")
    return _traced([topic(prefix, flow), _env(kind, source, sequence, ct, timestamp_us, message_id),
                    check_label(flow, "flow name", allow_empty=False), check_name(step, "step name"), body,
                    check_label(presentable, "presentable id")], traceparent, tracestate)


def did_navigate_frames(flow: str, step: str, params: Mapping[str, Value] | None = None, presentable: str = "",
                        **kwargs: Unpack[_ValueOptions]) -> list[bytes]:
    return navigation_frames(flow, step, params, presentable, did=True, **kwargs)


def will_navigate_frames(flow: str, step: str, params: Mapping[str, Value] | None = None, presentable: str = "",
                         **kwargs: Unpack[_ValueOptions]) -> list[bytes]:
    return navigation_frames(flow, step, params, presentable, did=False, **kwargs)


def navigation_command_frames(flow: str, verb: str, target: str = "", container: str = "", presentable_kind: str = "",
                              *, source: str, sequence: int, timestamp_us: int | None = None,
                              message_id: bytes | None = None, traceparent: str = "",
                              tracestate: str = "") -> list[bytes]:
    if verb not in NAV_VERBS or presentable_kind not in PRESENTABLE_KINDS:
        raise WireError("malformed", f"unknown verb {verb!r} or presentable kind {presentable_kind!r}")
    return _traced([topic("cmd/", flow), _env(wire.NAVIGATION_COMMAND, source, sequence, CONTENT_NONE, timestamp_us,
                                              message_id),
                    verb.encode(), check_label(target, "target"), container.encode("utf-8"), presentable_kind.encode()],
                   traceparent, tracestate)


def diagnostic_frames(reason: str, message: Value, details: Mapping[str, Value] | None = None, *, source: str,
                      sequence: int, content_type: int = CONTENT_JSON, timestamp_us: int | None = None,
                      message_id: bytes | None = None) -> list[bytes]:
    body = dict(details or {})
    body["message"] = message
    return [topic("diag/", reason), _env(wire.DIAGNOSTIC, source, sequence, content_type, timestamp_us, message_id),
            check_name(reason, "reason code"), encode_value(body, content_type)]


def ack_frames(acked_source: str, acked_sequence: int, *, source: str, sequence: int, timestamp_us: int | None = None,
               message_id: bytes | None = None) -> list[bytes]:
    return [topic("ack/", acked_source), _env(wire.ACK, source, sequence, CONTENT_NONE, timestamp_us, message_id),
            struct.pack(">Q", acked_sequence)]


def heartbeat_frames(*, source: str, sequence: int, timestamp_us: int | None = None,
                     message_id: bytes | None = None) -> list[bytes]:
    return [topic("hb/", source), _env(wire.HEARTBEAT, source, sequence, CONTENT_NONE, timestamp_us, message_id)]


def status_request_frames(params: dict[str, Value] | None = None, *, source: str, sequence: int,
                          content_type: int = CONTENT_JSON, timestamp_us: int | None = None,
                          message_id: bytes | None = None) -> list[bytes]:
    """A statusRequest; `params` (e.g. {"sections": ["peers"], "peers": {"offset": 0, "limit": 100}}) add frame 2."""
    if not params:
        return [b"status", _env(wire.STATUS_REQUEST, source, sequence, CONTENT_NONE, timestamp_us, message_id)]
    return [b"status", _env(wire.STATUS_REQUEST, source, sequence, content_type, timestamp_us, message_id),
            encode_value(params, content_type)]


def status_reply_frames(status: dict[str, Value], *, source: str, sequence: int, timestamp_us: int | None = None,
                        message_id: bytes | None = None) -> list[bytes]:
    return [b"status", _env(wire.STATUS_REPLY, source, sequence, CONTENT_JSON, timestamp_us, message_id),
            encode_value(status, CONTENT_JSON)]


def presentable_report_frames(presentable_id: str, event: str, *, source: str, sequence: int,
                              timestamp_us: int | None = None, message_id: bytes | None = None) -> list[bytes]:
    if event not in REPORT_EVENTS:
        raise WireError("malformed", f"unknown presentable event {event!r}")
    return [topic("present/", presentable_id), _env(wire.PRESENTABLE_REPORT, source, sequence, CONTENT_NONE, timestamp_us, message_id),
            event.encode()]


def replay_request_frames(since: int, topics: Iterable[str] = (), limit: int | None = None, *, source: str,
                          sequence: int, until: int | None = None, timestamp_us: int | None = None,
                          message_id: bytes | None = None) -> list[bytes]:
    """A replayRequest (4.6): the events after `since` (0: all kept), up to `until` if given, whose topic starts
    with one of `topics`."""
    params: dict[str, Value] = {"since": since}
    if until is not None:
        params["until"] = until
    if topics:
        params["topics"] = list(topics)
    if limit is not None:
        params["limit"] = limit
    return [b"replay", _env(wire.REPLAY_REQUEST, source, sequence, CONTENT_JSON, timestamp_us, message_id),
            encode_value(params, CONTENT_JSON)]


def pack_events(events: Iterable[tuple[int, list[bytes]]]) -> bytes:
    """Frame 3 of a replay reply (4.6): each event's sequence (u64), frame count (u8), then each
    frame's length (u32) and bytes; big-endian."""
    out = bytearray()
    for sequence, frames in events:
        out += struct.pack(">QB", sequence, len(frames))
        for frame in frames:
            out += struct.pack(">I", len(frame)) + frame
    return bytes(out)


def unpack_events(raw: bytes) -> list[tuple[int, list[bytes]]]:
    """The events of a replay reply's frame 3; WireError when it is not whole."""
    events: list[tuple[int, list[bytes]]] = []
    offset = 0
    try:
        while offset < len(raw):
            sequence, count = struct.unpack_from(">QB", raw, offset)
            offset += 9
            if count < 2:
                raise WireError("malformed", f"a replayed event has {count} frames, at least 2 expected")
            frames = []
            for _ in range(count):
                (length,) = struct.unpack_from(">I", raw, offset)
                offset += 4
                if offset + length > len(raw):
                    raise WireError("malformed", "a replayed frame runs past the end")
                frames.append(raw[offset:offset + length])
                offset += length
            events.append((sequence, frames))
    except struct.error:
        raise WireError("malformed", "replayed events end in the middle of one") from None
    return events


def replay_frames(events: Iterable[tuple[int, list[bytes]]], *, since: int, last: int, head: int, oldest: int,
                  more: bool, source: str, sequence: int, until: int | None = None, timestamp_us: int | None = None,
                  message_id: bytes | None = None) -> list[bytes]:
    events = list(events)
    header: dict[str, Value] = {"since": since, "last": last, "head": head, "oldest": oldest, "count": len(events),
                                "more": more}
    if until is not None:
        header["until"] = until
    return [b"replay", _env(wire.REPLAY, source, sequence, CONTENT_JSON, timestamp_us, message_id),
            encode_value(header, CONTENT_JSON), pack_events(events)]


# MARK: Decoding


class _Base(TypedDict):
    topic: str
    envelope: Envelope
    traceparent: str
    tracestate: str


def decode(frames: Iterable[Buffer]) -> Message:
    """A typed Message from received frames (without a ROUTER's routing id), checked in the
    order of section 7; raises WireError(reason, message) for anything 4 and 5 refuse."""
    received = [bytes(f) for f in frames]
    if len(received) > wire.MAX_FRAMES:
        raise WireError("oversize", f"{len(received)} received, at most {wire.MAX_FRAMES}")
    if len(received) < 2:
        raise WireError("malformed", f"{len(received)} frame(s), at least 2 expected")
    for index, frame in enumerate(received):
        if len(frame) > wire.MAX_FRAME_BYTES:
            raise WireError("oversize", f"frame {index} is {len(frame)} bytes, at most {wire.MAX_FRAME_BYTES}")
    raw_topic = received[0]
    if not raw_topic:
        raise WireError("malformed", "empty topic")
    if len(raw_topic) > wire.MAX_TOPIC_BYTES:
        raise WireError("oversize", f"topic is {len(raw_topic)} bytes, at most {wire.MAX_TOPIC_BYTES}")
    topic_text = _text(raw_topic, "topic")
    env = Envelope.decode(received[1])
    prefix, count = KIND_LAYOUT[env.kind]
    if prefix in wire.BARE_TOPICS:
        if topic_text != prefix:
            raise WireError("malformed", f"topic {topic_text[:64]!r} does not match kind {env.kind_name}")
    elif not topic_text.startswith(prefix) or len(topic_text) == len(prefix):
        raise WireError("malformed", f"topic {topic_text[:64]!r} does not match kind {env.kind_name}")
    traced = env.kind in wire.TRACE_KINDS and len(received) == count + 1
    if len(received) != count and not traced and not (env.kind == wire.STATUS_REQUEST and len(received) == count + 1):
        also = f" (or {count + 1} with a trace frame)" if env.kind in wire.TRACE_KINDS else ""
        raise WireError("malformed", f"{env.kind_name} message has {len(received)} frames, {count}{also} expected")
    topic_id = topic_text[len(prefix):] if prefix not in wire.BARE_TOPICS else ""
    body = received[2:count]
    traceparent, tracestate = wire.read_trace_frame(received[count]) if traced else ("", "")
    base: _Base = dict(topic=topic_text, envelope=env, traceparent=traceparent, tracestate=tracestate)
    kind = env.kind

    if kind in (wire.STEP, wire.DEEP_LINK, wire.ACTION):
        name = _name(body[0], "name")
        params = _decode_params(body[1], env.content_type)
        if kind == wire.DEEP_LINK and name != topic_id:
            raise WireError("malformed", f"deep link name {name!r} differs from the topic id {topic_id[:64]!r}")
        classes: dict[int, type[Step | DeepLink | Action]] = {wire.STEP: Step, wire.DEEP_LINK: DeepLink,
                                                              wire.ACTION: Action}
        return classes[kind](**base, name=name, params=params)
    if kind in (wire.STATE, wire.SNAPSHOT):
        value = decode_value(body[0], env.content_type)
        return (State if kind == wire.STATE else Snapshot)(**base, value=value)
    if kind == wire.SNAPSHOT_REQUEST:
        return SnapshotRequest(**base)
    if kind in (wire.WILL_NAVIGATE, wire.DID_NAVIGATE):
        flow = _text(body[0], "flow name")
        if flow != topic_id:
            raise WireError("malformed", f"flow name {flow[:64]!r} differs from the topic id {topic_id[:64]!r}")
        cls = WillNavigate if kind == wire.WILL_NAVIGATE else DidNavigate
        return cls(**base, flow=flow, step=_name(body[1], "step name"),
                   params=_decode_params(body[2], env.content_type), presentable=_text(body[3], "presentable id"))
    if kind == wire.NAVIGATION_COMMAND:
        verb, target, container, pkind = (_text(f, "command frame") for f in body)
        if verb not in NAV_VERBS:
            raise WireError("malformed", f"unknown navigation verb {verb[:64]!r}")
        if pkind not in PRESENTABLE_KINDS:
            raise WireError("malformed", f"unknown presentable kind {pkind[:64]!r}")
        return NavigationCommand(**base, verb=verb, target=target, container=container, presentable_kind=pkind)
    if kind == wire.DIAGNOSTIC:
        reason = _name(body[0], "reason code")
        if reason != topic_id:
            raise WireError("malformed", f"reason {reason!r} differs from the topic id {topic_id[:64]!r}")
        details = decode_value(body[1], env.content_type)
        if not isinstance(details, dict):
            raise WireError("malformed", "diagnostic details are not a map")
        return Diagnostic(**base, reason=reason, details=details)
    if kind == wire.ACK:
        if len(body[0]) != 8:
            raise WireError("malformed", f"ack sequence frame is {len(body[0])} bytes, 8 expected")
        return Ack(**base, acked_sequence=struct.unpack(">Q", body[0])[0])
    if kind == wire.HEARTBEAT:
        if topic_id != env.source:
            raise WireError("malformed", f"heartbeat topic id {topic_id[:64]!r} differs from the source {env.source[:64]!r}")
        return Heartbeat(**base)
    if kind == wire.STATUS_REQUEST:
        return StatusRequest(**base, params=_decode_params(received[2], env.content_type) if len(received) > 2 else {})
    if kind == wire.STATUS_REPLY:
        if env.content_type != CONTENT_JSON:
            raise WireError("malformed", "a status reply must be JSON")
        status = decode_value(body[0], CONTENT_JSON)
        if not isinstance(status, dict):
            raise WireError("malformed", "status reply is not a map")
        return StatusReply(**base, status=status)
    if kind == wire.REPLAY_REQUEST:
        params = _decode_params(body[0], env.content_type)
        since = params.get("since")
        if not isinstance(since, int) or isinstance(since, bool) or since < 0:
            raise WireError("bad-params", "a replay request needs \"since\", an int >= 0")
        return ReplayRequest(**base, params=params)
    if kind == wire.REPLAY:
        header = decode_value(body[0], env.content_type)
        if not isinstance(header, dict):
            raise WireError("malformed", "replay reply (frame 2) is not a map")
        numbers = {key: header.get(key) for key in ("since", "last", "head", "oldest", "count")}
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in numbers.values()) \
                or not isinstance(header.get("more"), bool):
            raise WireError("malformed", "replay reply (frame 2) lacks since, last, head, oldest, count or more")
        events = unpack_events(body[1])
        if len(events) != numbers["count"]:
            raise WireError("malformed", f"replay reply says {numbers['count']} events, frame 3 holds {len(events)}")
        until = header.get("until")
        if until is not None and (not isinstance(until, int) or isinstance(until, bool)):
            raise WireError("malformed", "replay reply \"until\" is not an int")
        return Replay(**base, since=cast(int, numbers["since"]), until=until, last=cast(int, numbers["last"]),
                      head=cast(int, numbers["head"]), oldest=cast(int, numbers["oldest"]),
                      more=cast(bool, header["more"]), events=events)
    event = _text(body[0], "event")
    if event not in REPORT_EVENTS:
        raise WireError("malformed", f"unknown presentable event {event[:64]!r}")
    return PresentableReport(**base, event=event)


def _text(raw: bytes, what: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise WireError("malformed", f"{what} is not UTF-8") from None


def _name(raw: bytes, what: str) -> str:
    check_name(raw, what)
    return raw.decode("ascii")


def _decode_params(raw: bytes, content_type: int) -> dict[str, Value]:
    if not raw:
        return {}
    if content_type == CONTENT_NONE:
        raise WireError("bad-params", "non-empty params with content type none")
    try:
        params = decode_value(raw, content_type)
    except WireError as error:
        raise WireError("bad-params", error.message) from None
    if not isinstance(params, dict):
        raise WireError("bad-params", f"params are a {type(params).__name__}, a map expected")
    return params


def encode(message: Message, content_type: int | None = None) -> list[bytes]:
    """Frames for a decoded Message (re-encodes values; same envelope)."""
    env = message.envelope
    kw: _EnvelopeOptions = dict(source=env.source, sequence=env.sequence, timestamp_us=env.timestamp_us,
                                message_id=env.message_id)
    ct = env.content_type if content_type is None else content_type
    vct = ct if ct != CONTENT_NONE else CONTENT_JSON
    k = env.kind
    if message.traceparent:
        return _traced(encode(replace(message, traceparent="", tracestate=""), content_type), message.traceparent,
                       message.tracestate)
    if k == wire.STEP:
        step = cast(Step, message)
        return step_frames(step.stepper_id, step.name, step.params, content_type=vct, **kw)
    if k == wire.DEEP_LINK:
        link = cast(DeepLink, message)
        return deep_link_frames(link.name, link.params, content_type=vct, **kw)
    if k == wire.ACTION:
        action = cast(Action, message)
        return action_frames(action.reactor_id, action.name, action.params, content_type=vct, **kw)
    if k in (wire.STATE, wire.SNAPSHOT):
        state = cast(State, message)
        return state_frames(state.reactor_id, state.value, content_type=ct, snapshot=k == wire.SNAPSHOT, **kw)
    if k == wire.SNAPSHOT_REQUEST:
        return snapshot_request_frames(cast(SnapshotRequest, message).reactor_id, **kw)
    if k in (wire.WILL_NAVIGATE, wire.DID_NAVIGATE):
        nav = cast(Navigation, message)
        return navigation_frames(nav.flow, nav.step, nav.params, nav.presentable,
                                 did=k == wire.DID_NAVIGATE, content_type=vct, **kw)
    if k == wire.NAVIGATION_COMMAND:
        command = cast(NavigationCommand, message)
        return navigation_command_frames(command.flow, command.verb, command.target, command.container,
                                         command.presentable_kind, **kw)
    if k == wire.DIAGNOSTIC:
        diagnostic = cast(Diagnostic, message)
        details = dict(diagnostic.details)
        return diagnostic_frames(diagnostic.reason, details.pop("message", ""), details, content_type=ct, **kw)
    if k == wire.ACK:
        ack = cast(Ack, message)
        return ack_frames(ack.acked_source, ack.acked_sequence, **kw)
    if k == wire.HEARTBEAT:
        return heartbeat_frames(**kw)
    if k == wire.STATUS_REQUEST:
        return status_request_frames(cast(StatusRequest, message).params, content_type=vct, **kw)
    if k == wire.STATUS_REPLY:
        return status_reply_frames(cast(StatusReply, message).status, **kw)
    if k == wire.REPLAY_REQUEST:
        params = cast(ReplayRequest, message).params
        topics = params.get("topics")
        limit = params.get("limit")
        until = params.get("until")
        return replay_request_frames(cast(int, params["since"]), cast(list[str], topics) if topics else (),
                                     limit if isinstance(limit, int) else None,
                                     until=until if isinstance(until, int) else None, **kw)
    if k == wire.REPLAY:
        replay = cast(Replay, message)
        return replay_frames(replay.events, since=replay.since, until=replay.until, last=replay.last,
                             head=replay.head, oldest=replay.oldest, more=replay.more, **kw)
    report = cast(PresentableReport, message)
    return presentable_report_frames(report.presentable_id, report.event, **kw)
