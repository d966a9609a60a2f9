"""The fifteen messages of flowbus/1 (PROTOCOL.md 4.3): builders (`*_frames`) that return the
list of frames to send, and `decode()` that turns received frames into a typed message.

Every builder takes the envelope fields as keywords: `source` and `sequence` (required),
`timestamp_us` and `message_id` (default: now and 16 random bytes) and, for kinds carrying
values, `content_type` (default JSON; FBV with `content_type=CONTENT_FBV`).
"""

import struct
from dataclasses import dataclass, field
from typing import Any

from . import wire
from .values import decode_value, encode_value
from .wire import (CONTENT_FBV, CONTENT_JSON, CONTENT_NONE, KIND_LAYOUT, Envelope, WireError,
                   check_label, check_name, topic)

NAV_VERBS = ("setRoot", "push", "pop", "present", "dismiss", "setTabs", "selectTab", "end")
PRESENTABLE_KINDS = ("screen", "stack", "tabs", "flow", "")
REPORT_EVENTS = ("appeared", "disappeared", "dismissed")


# MARK: Typed messages


@dataclass
class Message:
    topic: str
    envelope: Envelope

    @property
    def kind(self):
        return self.envelope.kind

    @property
    def source(self):
        return self.envelope.source

    @property
    def sequence(self):
        return self.envelope.sequence

    @property
    def topic_id(self):
        prefix = KIND_LAYOUT[self.envelope.kind][0]
        return self.topic[len(prefix):] if prefix != "status" else ""


@dataclass
class Step(Message):
    name: str = ""
    params: dict = field(default_factory=dict)

    @property
    def stepper_id(self):
        return self.topic_id


@dataclass
class DeepLink(Message):
    name: str = ""
    params: dict = field(default_factory=dict)


@dataclass
class Action(Message):
    name: str = ""
    params: dict = field(default_factory=dict)

    @property
    def reactor_id(self):
        return self.topic_id


@dataclass
class State(Message):
    value: Any = None

    @property
    def reactor_id(self):
        return self.topic_id


@dataclass
class Snapshot(State):
    pass


@dataclass
class SnapshotRequest(Message):
    @property
    def reactor_id(self):
        return self.topic_id


@dataclass
class Navigation(Message):
    """willNavigate (kind 7) or didNavigate (kind 8)."""
    flow: str = ""
    step: str = ""
    params: dict = field(default_factory=dict)
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
    def flow(self):
        return self.topic_id


@dataclass
class Diagnostic(Message):
    reason: str = ""
    details: dict = field(default_factory=dict)

    @property
    def message(self):
        return self.details.get("message", "")

    def names(self, source, sequence):
        """True when the details name the message (source, sequence) (3.3)."""
        return self.details.get("source") == source and self.details.get("sequence") == sequence


@dataclass
class Ack(Message):
    acked_sequence: int = 0

    @property
    def acked_source(self):
        return self.topic_id


@dataclass
class Heartbeat(Message):
    pass


@dataclass
class StatusRequest(Message):
    params: dict = field(default_factory=dict)  # sections and pages asked for (4.3); empty: the default reply


@dataclass
class StatusReply(Message):
    status: dict = field(default_factory=dict)


@dataclass
class PresentableReport(Message):
    event: str = ""

    @property
    def presentable_id(self):
        return self.topic_id


# MARK: Builders


def _env(kind, source, sequence, content_type=CONTENT_NONE, timestamp_us=None, message_id=None):
    kwargs = {}
    if timestamp_us is not None:
        kwargs["timestamp_us"] = timestamp_us
    if message_id is not None:
        kwargs["message_id"] = message_id
    return Envelope(kind=kind, sequence=sequence, source=source, content_type=content_type, **kwargs).encode()


def _params(params, content_type):
    """(content type, frame): an empty map is an empty frame with content type 0 (4.2, Params)."""
    params = dict(params or {})
    if not params:
        return CONTENT_NONE, b""
    return content_type, encode_value(params, content_type)


def _named(kind, prefix, topic_id, name, params, source, sequence, content_type, timestamp_us, message_id):
    ct, body = _params(params, content_type)
    return [topic(prefix, topic_id), _env(kind, source, sequence, ct, timestamp_us, message_id),
            check_name(name), body]


def step_frames(stepper_id, name, params=None, *, source, sequence, content_type=CONTENT_JSON,
                timestamp_us=None, message_id=None):
    return _named(wire.STEP, "step/", stepper_id, name, params, source, sequence, content_type, timestamp_us, message_id)


def deep_link_frames(name, params=None, *, source, sequence, content_type=CONTENT_JSON,
                     timestamp_us=None, message_id=None):
    return _named(wire.DEEP_LINK, "deeplink/", name, name, params, source, sequence, content_type, timestamp_us, message_id)


def action_frames(reactor_id, name, params=None, *, source, sequence, content_type=CONTENT_JSON,
                  timestamp_us=None, message_id=None):
    return _named(wire.ACTION, "action/", reactor_id, name, params, source, sequence, content_type, timestamp_us, message_id)


def snapshot_request_frames(reactor_id, *, source, sequence, timestamp_us=None, message_id=None):
    return [topic("snapshot/", reactor_id), _env(wire.SNAPSHOT_REQUEST, source, sequence, CONTENT_NONE, timestamp_us, message_id)]


def state_frames(reactor_id, value, *, source, sequence, content_type=CONTENT_FBV, timestamp_us=None,
                 message_id=None, snapshot=False):
    kind = wire.SNAPSHOT if snapshot else wire.STATE
    return [topic("state/", reactor_id), _env(kind, source, sequence, content_type, timestamp_us, message_id),
            encode_value(value, content_type)]


def snapshot_frames(reactor_id, value, **kwargs):
    return state_frames(reactor_id, value, snapshot=True, **kwargs)


def navigation_frames(flow, step, params=None, presentable="", *, did=True, source, sequence,
                      content_type=CONTENT_JSON, timestamp_us=None, message_id=None):
    ct, body = _params(params, content_type)
    kind, prefix = (wire.DID_NAVIGATE, "nav/did/") if did else (wire.WILL_NAVIGATE, "nav/will/")
    return [topic(prefix, flow), _env(kind, source, sequence, ct, timestamp_us, message_id),
            check_label(flow, "flow name", allow_empty=False), check_name(step, "step name"), body,
            check_label(presentable, "presentable id")]


def did_navigate_frames(flow, step, params=None, presentable="", **kwargs):
    return navigation_frames(flow, step, params, presentable, did=True, **kwargs)


def will_navigate_frames(flow, step, params=None, presentable="", **kwargs):
    return navigation_frames(flow, step, params, presentable, did=False, **kwargs)


def navigation_command_frames(flow, verb, target="", container="", presentable_kind="", *, source, sequence,
                              timestamp_us=None, message_id=None):
    if verb not in NAV_VERBS or presentable_kind not in PRESENTABLE_KINDS:
        raise WireError("malformed", f"unknown verb {verb!r} or presentable kind {presentable_kind!r}")
    return [topic("cmd/", flow), _env(wire.NAVIGATION_COMMAND, source, sequence, CONTENT_NONE, timestamp_us, message_id),
            verb.encode(), check_label(target, "target"), container.encode("utf-8"), presentable_kind.encode()]


def diagnostic_frames(reason, message, details=None, *, source, sequence, content_type=CONTENT_JSON,
                      timestamp_us=None, message_id=None):
    body = dict(details or {})
    body["message"] = message
    return [topic("diag/", reason), _env(wire.DIAGNOSTIC, source, sequence, content_type, timestamp_us, message_id),
            check_name(reason, "reason code"), encode_value(body, content_type)]


def ack_frames(acked_source, acked_sequence, *, source, sequence, timestamp_us=None, message_id=None):
    return [topic("ack/", acked_source), _env(wire.ACK, source, sequence, CONTENT_NONE, timestamp_us, message_id),
            struct.pack(">Q", acked_sequence)]


def heartbeat_frames(*, source, sequence, timestamp_us=None, message_id=None):
    return [topic("hb/", source), _env(wire.HEARTBEAT, source, sequence, CONTENT_NONE, timestamp_us, message_id)]


def status_request_frames(params=None, *, source, sequence, content_type=CONTENT_JSON, timestamp_us=None,
                          message_id=None):
    """A statusRequest; `params` (e.g. {"sections": ["peers"], "peers": {"offset": 0, "limit": 100}}) add frame 2."""
    if not params:
        return [b"status", _env(wire.STATUS_REQUEST, source, sequence, CONTENT_NONE, timestamp_us, message_id)]
    return [b"status", _env(wire.STATUS_REQUEST, source, sequence, content_type, timestamp_us, message_id),
            encode_value(params, content_type)]


def status_reply_frames(status, *, source, sequence, timestamp_us=None, message_id=None):
    return [b"status", _env(wire.STATUS_REPLY, source, sequence, CONTENT_JSON, timestamp_us, message_id),
            encode_value(status, CONTENT_JSON)]


def presentable_report_frames(presentable_id, event, *, source, sequence, timestamp_us=None, message_id=None):
    if event not in REPORT_EVENTS:
        raise WireError("malformed", f"unknown presentable event {event!r}")
    return [topic("present/", presentable_id), _env(wire.PRESENTABLE_REPORT, source, sequence, CONTENT_NONE, timestamp_us, message_id),
            event.encode()]


# MARK: Decoding


def decode(frames):
    """A typed Message from received frames (without a ROUTER's routing id), checked in the
    order of section 7; raises WireError(reason, message) for anything 4 and 5 refuse."""
    frames = [bytes(f) for f in frames]
    if len(frames) > wire.MAX_FRAMES:
        raise WireError("oversize", f"{len(frames)} frames, at most {wire.MAX_FRAMES}")
    if len(frames) < 2:
        raise WireError("malformed", f"{len(frames)} frame(s), at least 2 expected")
    for index, frame in enumerate(frames):
        if len(frame) > wire.MAX_FRAME_BYTES:
            raise WireError("oversize", f"frame {index} is {len(frame)} bytes, at most {wire.MAX_FRAME_BYTES}")
    raw_topic = frames[0]
    if not raw_topic:
        raise WireError("malformed", "empty topic")
    if len(raw_topic) > wire.MAX_TOPIC_BYTES:
        raise WireError("oversize", f"topic is {len(raw_topic)} bytes, at most {wire.MAX_TOPIC_BYTES}")
    topic_text = _text(raw_topic, "topic")
    env = Envelope.decode(frames[1])
    prefix, count = KIND_LAYOUT[env.kind]
    if prefix == "status":
        if topic_text != "status":
            raise WireError("malformed", f"topic {topic_text[:64]!r} does not match kind {env.kind_name}")
    elif not topic_text.startswith(prefix) or len(topic_text) == len(prefix):
        raise WireError("malformed", f"topic {topic_text[:64]!r} does not match kind {env.kind_name}")
    if len(frames) != count and not (env.kind == wire.STATUS_REQUEST and len(frames) == count + 1):
        raise WireError("malformed", f"{env.kind_name} message has {len(frames)} frames, {count} expected")
    topic_id = topic_text[len(prefix):] if prefix != "status" else ""
    body = frames[2:]
    base = dict(topic=topic_text, envelope=env)
    kind = env.kind

    if kind in (wire.STEP, wire.DEEP_LINK, wire.ACTION):
        name = _name(body[0], "name")
        params = _decode_params(body[1], env.content_type)
        if kind == wire.DEEP_LINK and name != topic_id:
            raise WireError("malformed", f"deep link name {name!r} differs from the topic id {topic_id[:64]!r}")
        cls = {wire.STEP: Step, wire.DEEP_LINK: DeepLink, wire.ACTION: Action}[kind]
        return cls(**base, name=name, params=params)
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
        return StatusRequest(**base, params=_decode_params(body[0], env.content_type) if body else {})
    if kind == wire.STATUS_REPLY:
        if env.content_type != CONTENT_JSON:
            raise WireError("malformed", "a status reply must be JSON")
        status = decode_value(body[0], CONTENT_JSON)
        if not isinstance(status, dict):
            raise WireError("malformed", "status reply is not a map")
        return StatusReply(**base, status=status)
    event = _text(body[0], "event")
    if event not in REPORT_EVENTS:
        raise WireError("malformed", f"unknown presentable event {event[:64]!r}")
    return PresentableReport(**base, event=event)


def _text(raw, what):
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise WireError("malformed", f"{what} is not UTF-8") from None


def _name(raw, what):
    check_name(raw, what)
    return raw.decode("ascii")


def _decode_params(raw, content_type):
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


def encode(message, content_type=None):
    """Frames for a decoded Message (re-encodes values; same envelope)."""
    env = message.envelope
    kw = dict(source=env.source, sequence=env.sequence, timestamp_us=env.timestamp_us, message_id=env.message_id)
    ct = env.content_type if content_type is None else content_type
    vct = ct if ct != CONTENT_NONE else CONTENT_JSON
    k = env.kind
    if k == wire.STEP:
        return step_frames(message.stepper_id, message.name, message.params, content_type=vct, **kw)
    if k == wire.DEEP_LINK:
        return deep_link_frames(message.name, message.params, content_type=vct, **kw)
    if k == wire.ACTION:
        return action_frames(message.reactor_id, message.name, message.params, content_type=vct, **kw)
    if k in (wire.STATE, wire.SNAPSHOT):
        return state_frames(message.reactor_id, message.value, content_type=ct, snapshot=k == wire.SNAPSHOT, **kw)
    if k == wire.SNAPSHOT_REQUEST:
        return snapshot_request_frames(message.reactor_id, **kw)
    if k in (wire.WILL_NAVIGATE, wire.DID_NAVIGATE):
        return navigation_frames(message.flow, message.step, message.params, message.presentable,
                                 did=k == wire.DID_NAVIGATE, content_type=vct, **kw)
    if k == wire.NAVIGATION_COMMAND:
        return navigation_command_frames(message.flow, message.verb, message.target, message.container,
                                         message.presentable_kind, **kw)
    if k == wire.DIAGNOSTIC:
        details = dict(message.details)
        return diagnostic_frames(message.reason, details.pop("message", ""), details, content_type=ct, **kw)
    if k == wire.ACK:
        return ack_frames(message.acked_source, message.acked_sequence, **kw)
    if k == wire.HEARTBEAT:
        return heartbeat_frames(**kw)
    if k == wire.STATUS_REQUEST:
        return status_request_frames(message.params, content_type=vct, **kw)
    if k == wire.STATUS_REPLY:
        return status_reply_frames(message.status, **kw)
    return presentable_report_frames(message.presentable_id, message.event, **kw)
