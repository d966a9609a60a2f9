"""Frame-level definitions of flowbus/1 (docs/PROTOCOL.md sections 3.4, 4.1, 4.2 and 6)."""

from __future__ import annotations

import os
import re
import struct
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing_extensions import Buffer

PROTOCOL_VERSION = 1

# Kinds (4.2)
STEP, DEEP_LINK, ACTION, STATE, SNAPSHOT_REQUEST, SNAPSHOT = 1, 2, 3, 4, 5, 6
WILL_NAVIGATE, DID_NAVIGATE, NAVIGATION_COMMAND, DIAGNOSTIC, ACK, HEARTBEAT = 7, 8, 9, 10, 11, 12
STATUS_REQUEST, STATUS_REPLY, PRESENTABLE_REPORT = 13, 14, 15
REPLAY_REQUEST, REPLAY = 16, 17

KIND_NAMES = {
    STEP: "step", DEEP_LINK: "deepLink", ACTION: "action", STATE: "state",
    SNAPSHOT_REQUEST: "snapshotRequest", SNAPSHOT: "snapshot", WILL_NAVIGATE: "willNavigate",
    DID_NAVIGATE: "didNavigate", NAVIGATION_COMMAND: "navigationCommand", DIAGNOSTIC: "diagnostic",
    ACK: "ack", HEARTBEAT: "heartbeat", STATUS_REQUEST: "statusRequest", STATUS_REPLY: "statusReply",
    PRESENTABLE_REPORT: "presentableReport", REPLAY_REQUEST: "replayRequest", REPLAY: "replay",
}
# kind -> (topic prefix, exact frame count); `status` and `replay` have no id.
KIND_LAYOUT = {
    STEP: ("step/", 4), DEEP_LINK: ("deeplink/", 4), ACTION: ("action/", 4), STATE: ("state/", 3),
    SNAPSHOT_REQUEST: ("snapshot/", 2), SNAPSHOT: ("state/", 3), WILL_NAVIGATE: ("nav/will/", 6),
    DID_NAVIGATE: ("nav/did/", 6), NAVIGATION_COMMAND: ("cmd/", 6), DIAGNOSTIC: ("diag/", 4),
    ACK: ("ack/", 3), HEARTBEAT: ("hb/", 2), STATUS_REQUEST: ("status", 2), STATUS_REPLY: ("status", 3),
    PRESENTABLE_REPORT: ("present/", 3), REPLAY_REQUEST: ("replay", 3), REPLAY: ("replay", 4),
}
# Topics without an id.
BARE_TOPICS = frozenset({"status", "replay"})

# Kinds that may end with a trace frame (4.5), one past their frame count.
TRACE_KINDS = frozenset({STEP, DEEP_LINK, ACTION, STATE, WILL_NAVIGATE, DID_NAVIGATE, NAVIGATION_COMMAND})
MAX_TRACE_FRAME_BYTES = 1024
_TRACEPARENT = re.compile(r"[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}(-.*)?\Z", re.DOTALL)

# Content types (4.2)
CONTENT_NONE, CONTENT_JSON, CONTENT_FBV = 0, 1, 2

# Limits (6)
MAX_TOPIC_BYTES = 255
MAX_NAME_BYTES = 255
MAX_SOURCE_BYTES = 255
MAX_FRAME_BYTES = 1 << 20
MAX_FRAMES = 8
MAX_DEPTH = 32
ENVELOPE_FIXED_SIZE = 37

_ENVELOPE = struct.Struct(">BBBBQq16sB")
_NAME = re.compile(rb"[A-Za-z0-9_.:-]{1,255}\Z")


class WireError(ValueError):
    """A message or value that breaks flowbus/1; `reason` is the section 4.3 reason code."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message


def encode_envelope(kind: int, sequence: int, source: str, content_type: int = CONTENT_NONE,
                    timestamp_us: int | None = None, message_id: bytes | None = None,
                    version: int = PROTOCOL_VERSION) -> bytes:
    """Frame 1 (4.2) without an Envelope instance: what builders send. The time and a random
    message id unless given."""
    src = source.encode("utf-8")
    if not 1 <= len(src) <= MAX_SOURCE_BYTES:
        raise WireError("oversize" if src else "malformed",
                        f"source id is {len(src)} bytes, 1 to {MAX_SOURCE_BYTES} allowed")
    if message_id is None:
        message_id = os.urandom(16)
    elif len(message_id) != 16:
        raise WireError("malformed", "message id must be 16 bytes")
    if not 0 <= sequence < 2**64:
        raise WireError("malformed", "sequence must fit an unsigned 64-bit int")
    if timestamp_us is None:
        timestamp_us = time.time_ns() // 1000
    return _ENVELOPE.pack(version, kind, content_type, 0, sequence, timestamp_us, bytes(message_id), len(src)) + src


@dataclass(frozen=True)
class Envelope:
    """Frame 1 (4.2)."""

    kind: int
    sequence: int
    source: str
    content_type: int = CONTENT_NONE
    timestamp_us: int = field(default_factory=lambda: time.time_ns() // 1000)
    message_id: bytes = field(default_factory=lambda: os.urandom(16))
    version: int = PROTOCOL_VERSION
    flags: int = 0

    def encode(self) -> bytes:
        return encode_envelope(self.kind, self.sequence, self.source, self.content_type, self.timestamp_us,
                               self.message_id, self.version)

    @classmethod
    def decode(cls, frame: Buffer) -> Envelope:
        frame = bytes(frame)
        if not frame:
            raise WireError("malformed", "empty envelope")
        if frame[0] != PROTOCOL_VERSION:
            raise WireError("unsupported-version", f"envelope version {frame[0]}, only {PROTOCOL_VERSION} is supported")
        if len(frame) < ENVELOPE_FIXED_SIZE + 1:
            raise WireError("malformed", f"envelope is {len(frame)} bytes, at least {ENVELOPE_FIXED_SIZE + 1} expected")
        version, kind, content_type, flags, sequence, timestamp, message_id, n = _ENVELOPE.unpack_from(frame)
        if kind not in KIND_NAMES:
            raise WireError("unknown-kind", f"envelope kind {kind} is not in the table")
        if content_type not in (CONTENT_NONE, CONTENT_JSON, CONTENT_FBV):
            raise WireError("malformed", f"unknown content type {content_type}")
        if n == 0 or len(frame) != ENVELOPE_FIXED_SIZE + n:
            raise WireError("malformed", f"envelope is {len(frame)} bytes, {ENVELOPE_FIXED_SIZE + n} expected for source length {n}")
        try:
            source = frame[ENVELOPE_FIXED_SIZE:].decode("utf-8")
        except UnicodeDecodeError:
            raise WireError("malformed", "source id is not UTF-8") from None
        return cls(kind=kind, sequence=sequence, source=source, content_type=content_type,
                   timestamp_us=timestamp, message_id=message_id, version=version, flags=flags)

    @property
    def kind_name(self) -> str:
        return KIND_NAMES.get(self.kind, str(self.kind))


def topic(prefix: str, topic_id: str | None = None) -> bytes:
    """`<prefix><id>` as bytes (prefix includes its `/`; `status` and `replay` have no id), checked against 3.4."""
    if prefix in BARE_TOPICS:
        return prefix.encode()
    if not topic_id:
        raise WireError("malformed", f"the id in {prefix}<id> must not be empty")
    data = (prefix + topic_id).encode("utf-8")
    if len(data) > MAX_TOPIC_BYTES:
        raise WireError("oversize", f"topic {data[:64]!r} is {len(data)} bytes, at most {MAX_TOPIC_BYTES}")
    return data


def check_name(name: str | bytes, what: str = "name") -> bytes:
    """Step, action and deep link names and reason codes: 1..255 bytes of [A-Za-z0-9_.:-]."""
    raw = name.encode("utf-8") if isinstance(name, str) else bytes(name)
    if not _NAME.match(raw):
        raise WireError("malformed", f"{what} {raw[:64]!r} must be 1 to 255 bytes of A-Z a-z 0-9 _ . : -")
    return raw


def check_label(text: str, what: str, allow_empty: bool = True) -> bytes:
    """Flow names, presentable ids, verbs: UTF-8, at most 255 bytes."""
    raw = text.encode("utf-8")
    if len(raw) > MAX_NAME_BYTES:
        raise WireError("oversize", f"{what} is {len(raw)} bytes, at most {MAX_NAME_BYTES}")
    if not raw and not allow_empty:
        raise WireError("malformed", f"{what} must not be empty")
    return raw


def new_source(base: str) -> str:
    """A fresh source id (4.2: a process restarting without its sequence takes a new one)."""
    suffix = "#py-" + os.urandom(4).hex()
    raw = base.encode("utf-8")[: MAX_SOURCE_BYTES - len(suffix)]
    return (raw.decode("utf-8", "ignore") or "py") + suffix


def valid_traceparent(text: str) -> bool:
    """W3C Trace Context's rules (4.5): version not ff, 55 characters for version 00 (a later
    version may add `-` fields), trace id and parent id not all zero, lowercase hex."""
    if not _TRACEPARENT.match(text) or text.startswith("ff"):
        return False
    if text.startswith("00") and len(text) != 55:
        return False
    return text[3:35] != "0" * 32 and text[36:52] != "0" * 16


def trace_frame(traceparent: str, tracestate: str = "") -> bytes:
    """The trace frame (4.5): the traceparent, then a line feed and the tracestate if any."""
    if not valid_traceparent(traceparent):
        raise WireError("malformed", f"{traceparent[:64]!r} is not a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>)")
    if len(tracestate) > 512 or not all(0x20 <= ord(c) < 0x7F for c in tracestate):
        raise WireError("malformed", "tracestate is not printable ASCII of at most 512 bytes")
    return (traceparent + ("\n" + tracestate if tracestate else "")).encode("ascii")


def read_trace_frame(frame: bytes) -> tuple[str, str]:
    """(traceparent, tracestate) of a trace frame; ("", "") for an empty one."""
    if not frame:
        return "", ""
    if len(frame) > MAX_TRACE_FRAME_BYTES:
        raise WireError("oversize", f"trace frame is {len(frame)} bytes, at most {MAX_TRACE_FRAME_BYTES}")
    try:
        text = frame.decode("ascii")
    except UnicodeDecodeError:
        raise WireError("malformed", "trace frame is not ASCII") from None
    parent, _, state = text.partition("\n")
    trace_frame(parent, state)  # validates
    return parent, state
