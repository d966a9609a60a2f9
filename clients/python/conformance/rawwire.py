"""Raw flowbus/1 frames, written from docs/PROTOCOL.md alone (§4, §5); no import of the flowbus package.

Builders return lists of frames (bytes). `Msg` parses a received message; `Peer` (DEALER) and
`Sub` (SUB) wrap sockets with bounded waits only.
"""

import json
import math
import os
import struct
import time

import zmq

# §4.2 kinds
STEP, DEEPLINK, ACTION, STATE, SNAPSHOT_REQUEST, SNAPSHOT = 1, 2, 3, 4, 5, 6
WILL_NAVIGATE, DID_NAVIGATE, NAV_COMMAND, DIAGNOSTIC, ACK, HEARTBEAT = 7, 8, 9, 10, 11, 12
STATUS_REQUEST, STATUS_REPLY, PRESENTABLE_REPORT = 13, 14, 15
REPLAY_REQUEST, REPLAY = 16, 17
KIND_FRAMES = {1: 4, 2: 4, 3: 4, 4: 3, 5: 2, 6: 3, 7: 6, 8: 6, 9: 6, 10: 4, 11: 3, 12: 2, 13: 2, 14: 3, 15: 3,
               16: 3, 17: 4}
# §4.5: kinds that may end with one more frame, the trace frame (W3C Trace Context).
TRACE_KINDS = {1, 2, 3, 4, 7, 8, 9}
TRACEPARENT = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
KIND_PREFIX = {1: "step/", 2: "deeplink/", 3: "action/", 4: "state/", 5: "snapshot/", 6: "state/",
               7: "nav/will/", 8: "nav/did/", 9: "cmd/", 10: "diag/", 11: "ack/", 12: "hb/",
               13: "status", 14: "status", 15: "present/", 16: "replay", 17: "replay"}
NONE, JSON, FBV = 0, 1, 2

_HEAD = struct.Struct(">BBBBQq16sB")  # §4.2: the 37 fixed bytes before the source id


def new_source(prefix):
    """A fresh source id per use (§4.2: a new id means a new ledger entry at the receiver)."""
    return f"{prefix}#{os.urandom(4).hex()}"


def envelope(kind, sequence, source, content_type=NONE, version=1, flags=0, timestamp=None, message_id=None):
    src = source.encode() if isinstance(source, str) else source
    ts = time.time_ns() // 1000 if timestamp is None else timestamp
    mid = os.urandom(16) if message_id is None else message_id
    return _HEAD.pack(version, kind, content_type, flags, sequence, ts, mid, len(src)) + src


class Envelope:
    def __init__(self, raw):
        if len(raw) < 38:
            raise ValueError(f"envelope of {len(raw)} bytes")
        (self.version, self.kind, self.content_type, self.flags, self.sequence, self.timestamp,
         self.message_id, n) = _HEAD.unpack_from(raw)
        if n == 0 or len(raw) != 37 + n:
            raise ValueError(f"envelope of {len(raw)} bytes with source length {n}")
        self.source = raw[37:].decode("utf-8")


# §5.1 FBV

def fbv_encode(value):
    if value is None:
        return b"\x00"
    if value is False:
        return b"\x01"
    if value is True:
        return b"\x02"
    if isinstance(value, int):
        return b"\x03" + struct.pack(">q", value)
    if isinstance(value, float):
        return b"\x04" + struct.pack(">d", value)
    if isinstance(value, str):
        data = value.encode()
        return b"\x05" + struct.pack(">I", len(data)) + data
    if isinstance(value, list):
        return b"\x06" + struct.pack(">I", len(value)) + b"".join(fbv_encode(v) for v in value)
    if isinstance(value, dict):
        items = sorted((k.encode(), v) for k, v in value.items())  # sorted by UTF-8 bytes
        return b"\x07" + struct.pack(">I", len(items)) + b"".join(
            struct.pack(">H", len(k)) + k + fbv_encode(v) for k, v in items)
    raise TypeError(type(value))


def fbv_decode(data):
    value, end = _fbv_value(data, 0, 0)
    if end != len(data):
        raise ValueError("bytes after the FBV value")
    return value


def _fbv_value(data, at, depth, check_keys=None):
    tag = data[at]
    at += 1
    if tag <= 2:
        return (None, False, True)[tag], at
    if tag == 3:
        return struct.unpack_from(">q", data, at)[0], at + 8
    if tag == 4:
        return struct.unpack_from(">d", data, at)[0], at + 8
    count = struct.unpack_from(">I", data, at)[0]
    at += 4
    if tag == 5:
        if at + count > len(data):
            raise ValueError("string past the end")
        return data[at:at + count].decode("utf-8"), at + count
    if depth >= 32:
        raise ValueError("nesting deeper than 32")
    if tag == 6:
        items = []
        for _ in range(count):
            item, at = _fbv_value(data, at, depth + 1, check_keys)
            items.append(item)
        return items, at
    if tag == 7:
        result, keys = {}, []
        for _ in range(count):
            n = struct.unpack_from(">H", data, at)[0]
            key = data[at + 2:at + 2 + n].decode("utf-8")
            value, at = _fbv_value(data, at + 2 + n, depth + 1, check_keys)
            result[key] = value
            keys.append(key)
        if check_keys:
            check_keys(keys)
        return result, at
    raise ValueError(f"FBV tag {tag}")


# §5.2 JSON

def json_encode(value):
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def _no_duplicates(pairs):
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        raise ValueError("duplicate JSON key")
    return dict(pairs)


def decode_value(content_type, data):
    if content_type == JSON:
        value = json.loads(data.decode("utf-8"), object_pairs_hook=_no_duplicates)
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError("non-finite number")
        return value
    if content_type == FBV:
        return fbv_decode(data)
    raise ValueError(f"content type {content_type} for a value frame")


def canonical_errors(content_type, data):
    """§5.1/§5.2 writer rules a value frame breaks: map keys unique and sorted by their UTF-8 bytes."""
    errors = []

    def check(keys):
        raw = [k.encode() for k in keys]
        if raw != sorted(set(raw)):
            errors.append(f"keys not unique and sorted by UTF-8 bytes: {keys}")
    try:
        if content_type == JSON:
            json.loads(data.decode("utf-8"), object_pairs_hook=lambda pairs: check([k for k, _ in pairs]) or {})
        elif content_type == FBV:
            _fbv_value(data, 0, 0, check)
    except Exception as error:  # not decodable: reported by decode_value
        errors.append(str(error))
    return errors


def encode_value(content_type, value):
    return json_encode(value) if content_type == JSON else fbv_encode(value)


# Message builders (§4.3). Params: a dict (encoded in content_type), or raw bytes as given.

def _params(params, content_type):
    if isinstance(params, bytes):
        return params
    return b"" if not params else encode_value(content_type, params)


def step(stepper, name, sequence, source, params=None, content_type=JSON, **env):
    return [f"step/{stepper}".encode(), envelope(STEP, sequence, source, content_type, **env),
            name.encode() if isinstance(name, str) else name, _params(params, content_type)]


def deeplink(name, sequence, source, params=None, content_type=JSON, topic_name=None, **env):
    return [f"deeplink/{topic_name or name}".encode(), envelope(DEEPLINK, sequence, source, content_type, **env),
            name.encode(), _params(params, content_type)]


def action(reactor, name, sequence, source, params=None, content_type=JSON, **env):
    return [f"action/{reactor}".encode(), envelope(ACTION, sequence, source, content_type, **env),
            name.encode() if isinstance(name, str) else name, _params(params, content_type)]


def snapshot_request(reactor, sequence, source, **env):
    return [f"snapshot/{reactor}".encode(), envelope(SNAPSHOT_REQUEST, sequence, source, **env)]


def heartbeat(source, sequence=0, **env):
    return [f"hb/{source}".encode(), envelope(HEARTBEAT, sequence, source, **env)]


def status_request(source, sequence=1, **env):
    return [b"status", envelope(STATUS_REQUEST, sequence, source, **env)]


def replay_request(source, since, sequence=1, topics=None, limit=None, until=None, content_type=JSON, **env):
    """§4.6 REPLAY-REQUEST: the events after `since` (up to `until`) whose topic starts with one of `topics`."""
    params = {"since": since}
    for key, value in (("topics", topics), ("limit", limit), ("until", until)):
        if value is not None:
            params[key] = value
    return [b"replay", envelope(REPLAY_REQUEST, sequence, source, content_type),
            encode_value(content_type, params)]


def unpack_events(frame):
    """§4.6 frame 3 of a REPLAY: [(event sequence, [frames])]; AssertionError when it is not whole."""
    events, at = [], 0
    while at < len(frame):
        assert at + 9 <= len(frame), "a packed event's head is cut"
        sequence, count = struct.unpack_from(">QB", frame, at)
        at += 9
        frames = []
        for _ in range(count):
            (length,) = struct.unpack_from(">I", frame, at)
            at += 4
            assert at + length <= len(frame), "a packed frame is cut"
            frames.append(frame[at:at + length])
            at += length
        events.append((sequence, frames))
    return events


def presentable_report(presentable, event, sequence, source, **env):
    return [f"present/{presentable}".encode(), envelope(PRESENTABLE_REPORT, sequence, source, **env), event.encode()]


class Msg:
    """A received message: topic, envelope, body frames; decoded values on demand."""

    def __init__(self, frames):
        self.frames = frames
        self.topic = frames[0].decode("utf-8")
        self.env = Envelope(frames[1])
        self.kind = self.env.kind
        self.seq = self.env.sequence
        self.source = self.env.source

    @property
    def topic_id(self):
        prefix = KIND_PREFIX[self.kind]
        return self.topic[len(prefix):]

    @property
    def acked(self):
        assert self.kind == ACK and len(self.frames[2]) == 8, self
        return struct.unpack(">Q", self.frames[2])[0]

    @property
    def reason(self):
        assert self.kind == DIAGNOSTIC, self
        return self.frames[2].decode()

    @property
    def details(self):
        assert self.kind == DIAGNOSTIC, self
        return decode_value(self.env.content_type, self.frames[3])

    def value(self, index):
        return decode_value(self.env.content_type, self.frames[index])

    def is_diag(self, reason=None):
        return self.kind == DIAGNOSTIC and (reason is None or self.reason == reason)

    def __repr__(self):
        body = [f[:80] for f in self.frames[2:]]
        if self.kind == DIAGNOSTIC:
            try:
                body = [self.reason, self.details]
            except Exception:  # keep repr usable on a broken diagnostic
                pass
        return f"<{self.topic} kind={self.kind} seq={self.seq} src={self.source} {body}>"


class Timeout(AssertionError):
    pass


class _Socket:
    def __init__(self, ctx, kind, endpoint):
        self.sock = ctx.socket(kind)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.endpoint = endpoint
        self.seen = []  # every message received, in order, for assertions and failure output

    def recv(self, timeout):
        """The next message, or None after `timeout` seconds."""
        if not self.sock.poll(int(timeout * 1000)):
            return None
        msg = Msg(self.sock.recv_multipart())
        self.seen.append(msg)
        return msg

    def until(self, predicate, timeout, what="a matching message"):
        """Messages received up to and including the first matching one; Timeout if none in `timeout` s."""
        got = []
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            msg = self.recv(max(0.0, left)) if left > 0 else None
            if msg is None:
                raise Timeout(f"no {what} within {timeout} s on {self.endpoint}; got {got}")
            got.append(msg)
            if predicate(msg):
                return got

    def seen_or_wait(self, predicate, timeout, what="a matching message"):
        """The first message ever received that matches, waiting up to `timeout` s for it if none has yet."""
        for msg in self.seen:
            if predicate(msg):
                return msg
        return self.until(predicate, timeout, what)[-1]

    def close(self):
        self.sock.close(0)


class Peer(_Socket):
    """A DEALER connected to a ROUTER endpoint (ingress, actions, control)."""

    def __init__(self, ctx, endpoint):
        super().__init__(ctx, zmq.DEALER, endpoint)
        self.sock.connect(endpoint)

    def send(self, frames):
        self.sock.send_multipart(frames)

    def barrier(self, timeout, source=None):
        """Sends a heartbeat (§4.4: answered, never a ledger entry) and returns every message up to its answer.

        Replies to earlier batches leave before the answer to this later one, so what was not
        received by then was not sent.
        """
        source = source or new_source("barrier")
        self.send(heartbeat(source))
        return self.until(lambda m: m.kind == HEARTBEAT, timeout, "heartbeat answer")


class Sub(_Socket):
    """A SUB connected to a PUB endpoint (events, states)."""

    def __init__(self, ctx, endpoint, prefixes=(b"",)):
        super().__init__(ctx, zmq.SUB, endpoint)
        for prefix in prefixes:
            self.sock.setsockopt(zmq.SUBSCRIBE, prefix.encode() if isinstance(prefix, str) else prefix)
        self.sock.connect(endpoint)

    def wait_active(self, timeout):
        """A heartbeat proves the subscription is active at the publisher (§3.3 step 2)."""
        self.until(lambda m: m.kind == HEARTBEAT, timeout, "heartbeat")
