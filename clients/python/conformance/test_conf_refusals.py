"""§4.1–§4.3, §5, §6, §7: every malformed message is refused with its reason code, on `ingress` and `actions`.

Each case sends one bad message as sequence 1 of a fresh source and checks, per §3.3, §4.4 and §7:
the diagnostic (reason, details naming the message when they could be read) reaches the DEALER
before the ack that covers it, it is published on `events` / `states`, the message is acknowledged
if and only if its v1 envelope could be read, and the daemon keeps serving.
"""

import struct
from dataclasses import dataclass

import pytest

import rawwire as w
from scenario import T, Side, acks_of, details_name, settle, shape_errors, wait_ack

NAMED = {"source", "topic", "sequence"}  # §7: details of a message whose envelope could be read
QUOTED = 64  # §8: the reference cuts the topic it quotes to its first 64 characters (code points)


@dataclass
class Case:
    id: str
    build: object  # (side, source) -> frames, sequence 1
    reasons: set
    acked: object  # True: acknowledged (§4.4, §7); False: not (envelope unreadable); None: not checked
    details: set  # keys the diagnostic's details must have
    sides: tuple = ("ingress", "actions")


def bad_env(side, source, **changes):
    changes.setdefault("content_type", w.JSON)
    return w.envelope(side.kind, 1, source, **changes)


def with_frame(frames, index, value):
    frames = list(frames)
    frames[index] = value
    return frames


def msg(side, source, **kw):
    return side.message(1, source, **kw)


def nest_json(depth):
    """A params map holding a value inside `depth` nested containers (the map included)."""
    inner = "0"
    for _ in range(depth - 1):
        inner = f"[{inner}]"
    return ('{"a":' + inner + "}").encode()


def nest_fbv(depth):
    inner = w.fbv_encode(0)
    for _ in range(depth - 1):
        inner = b"\x06" + struct.pack(">I", 1) + inner
    return b"\x07" + struct.pack(">I", 1) + struct.pack(">H", 1) + b"a" + inner


def long_topic(side, size):
    return (side.topic() + "/" + "x" * size).encode()[:size]


def long_text_topic(side, size):
    """A UTF-8 topic of `size` bytes, mostly 2-byte characters (so that bytes and characters differ)."""
    text = side.topic() + "/"
    while len((text + "\u00e9").encode()) <= size:
        text += "\u00e9"
    return (text + "x" * (size - len(text.encode()))).encode()


def fbv_params(side, source, raw):
    return msg(side, source, params=raw, content_type=w.FBV)


def json_params(side, source, raw):
    return msg(side, source, params=raw, content_type=w.JSON)


CASES = [
    # §4.2 envelope fields
    Case("s4.2-version-0", lambda s, src: with_frame(msg(s, src), 1, bad_env(s, src, version=0)),
         {"unsupported-version"}, None, {"topic"}),
    Case("s4.2-version-2", lambda s, src: with_frame(msg(s, src), 1, bad_env(s, src, version=2)),
         {"unsupported-version"}, None, {"topic"}),
    Case("s4.2-kind-0", lambda s, src: with_frame(msg(s, src), 1, w.envelope(0, 1, src, w.JSON)),
         {"unknown-kind"}, True, NAMED),
    Case("s4.2-kind-99", lambda s, src: with_frame(msg(s, src), 1, w.envelope(99, 1, src, w.JSON)),
         {"unknown-kind"}, True, NAMED),
    Case("s4.2-content-type-3", lambda s, src: with_frame(msg(s, src), 1, bad_env(s, src, content_type=3)),
         {"malformed"}, True, NAMED),
    # §4.2 "exactly 37 + n bytes; anything shorter or longer is malformed": no trustworthy source (§4.4)
    Case("s4.2-envelope-short", lambda s, src: with_frame(msg(s, src), 1, bad_env(s, src)[:-1]),
         {"malformed"}, False, {"topic"}),
    Case("s4.2-envelope-long", lambda s, src: with_frame(msg(s, src), 1, bad_env(s, src) + b"x"),
         {"malformed"}, False, {"topic"}),
    Case("s4.2-envelope-20-bytes", lambda s, src: with_frame(msg(s, src), 1, bad_env(s, src)[:20]),
         {"malformed"}, False, {"topic"}),
    Case("s4.2-source-length-0", lambda s, src: with_frame(msg(s, src), 1, bad_env(s, src)[:36] + b"\x00"),
         {"malformed"}, False, {"topic"}),
    Case("s4.2-source-not-utf8", lambda s, src: with_frame(msg(s, src), 1, bad_env(s, b"\xff\xfe" + src.encode())),
         {"malformed"}, False, {"topic"}),
    Case("s4.2-source-with-nul", lambda s, src: with_frame(msg(s, src), 1, bad_env(s, src.encode() + b"\x00x")),
         {"malformed"}, False, {"topic"}),
    # §4.2 "The topic prefix MUST match the kind; a mismatch is malformed"
    Case("s4.2-topic-prefix-of-other-kind",
         lambda s, src: with_frame(msg(s, src), 0, b"action/counter" if s.name == "ingress" else b"step/x"),
         {"malformed"}, True, NAMED),
    Case("s4.2-topic-prefix-state", lambda s, src: with_frame(msg(s, src), 0, b"state/counter"),
         {"malformed"}, True, NAMED),
    # §4.1 "A message MUST have exactly the number of frames its kind specifies"
    Case("s4.1-three-frames-for-kind-of-four", lambda s, src: msg(s, src)[:3], {"malformed"}, True, NAMED),
    # §4.5: a fifth frame is a trace frame, so a sixth is one too many
    Case("s4.1-six-frames-for-kind-of-four", lambda s, src: msg(s, src) + [b"", b""], {"malformed"}, True, NAMED),
    # §4.5 "MUST refuse a non-empty one that is not a valid traceparent ... with malformed, one over 1,024 bytes
    # with oversize"
    Case("s4.5-trace-frame-not-traceparent", lambda s, src: msg(s, src) + [b"not a traceparent"],
         {"malformed"}, True, NAMED),
    Case("s4.5-trace-frame-upper-case-hex", lambda s, src: msg(s, src) + [w.TRACEPARENT.upper()],
         {"malformed"}, True, NAMED),
    Case("s4.5-trace-frame-zero-trace-id",
         lambda s, src: msg(s, src) + [b"00-" + b"0" * 32 + w.TRACEPARENT[35:]], {"malformed"}, True, NAMED),
    Case("s4.5-trace-frame-version-ff", lambda s, src: msg(s, src) + [b"ff" + w.TRACEPARENT[2:]],
         {"malformed"}, True, NAMED),
    Case("s4.5-trace-frame-tracestate-with-control",
         lambda s, src: msg(s, src) + [w.TRACEPARENT + b"\nkey=\x07"], {"malformed"}, True, NAMED),
    Case("s4.5-trace-frame-over-1024-bytes",
         lambda s, src: msg(s, src) + [w.TRACEPARENT + b"\n" + b"a" * 1000], {"oversize"}, True, NAMED),
    # §7 "frame count within limits (oversize above 8, malformed below 2)"
    Case("s7-one-frame", lambda s, src: msg(s, src)[:1], {"malformed"}, False, set()),
    Case("s7-nine-frames", lambda s, src: msg(s, src) + [b""] * 5, {"oversize"}, None, set()),
    # §6 "any frame: 1 MiB"; §4.4: refused before its body is read, its v1 envelope still names it
    Case("s6-frame-over-1MiB", lambda s, src: with_frame(msg(s, src), 3, b" " * (1024 * 1024 + 1)),
         {"oversize"}, True, NAMED),
    # §3.4 "Ids MUST NOT be empty, and the whole topic MUST fit in 255 bytes"; §4.1 topic is UTF-8
    Case("s3.4-empty-id", lambda s, src: with_frame(msg(s, src), 0, s.applied_prefix.encode()),
         {"malformed"}, True, NAMED),
    # §8: the reference cuts the topic it quotes to 64 characters
    Case("s3.4-topic-256-bytes", lambda s, src: with_frame(msg(s, src), 0, long_topic(s, 256)),
         {"oversize"}, True, NAMED),
    Case("s3.4-topic-300-bytes-non-ascii", lambda s, src: with_frame(msg(s, src), 0, long_text_topic(s, 300)),
         {"oversize"}, True, NAMED),
    Case("s4.1-topic-not-utf8", lambda s, src: with_frame(msg(s, src), 0, s.topic().encode() + b"\xff"),
         {"malformed"}, True, {"source", "sequence"}),
    Case("s4.1-topic-empty-frame", lambda s, src: with_frame(msg(s, src), 0, b""),
         {"malformed"}, True, {"source", "sequence"}),
    # §3.4 "Ids MUST NOT contain U+0000"
    Case("s3.4-id-with-nul", lambda s, src: with_frame(msg(s, src), 0, s.topic().encode() + b"\x00x"),
         {"malformed"}, True, {"source", "sequence"}),
    # §4.2 Names: 1 to 255 bytes of [A-Za-z0-9_.:-]
    Case("s4.2-name-bad-chars", lambda s, src: with_frame(msg(s, src), 2, b"bad name!"), {"malformed"}, True, NAMED),
    Case("s4.2-name-non-ascii", lambda s, src: with_frame(msg(s, src), 2, "caf\u00e9".encode()),
         {"malformed"}, True, NAMED),
    Case("s4.2-name-empty", lambda s, src: with_frame(msg(s, src), 2, b""), {"malformed"}, True, NAMED),
    Case("s4.2-name-256-bytes", lambda s, src: with_frame(msg(s, src), 2, b"n" * 256), {"oversize"}, True, NAMED),
    # §4.2 Params: "A non-empty params frame with content type 0, or one that is not a map, is refused with bad-params"
    Case("s4.2-params-content-type-0", lambda s, src: msg(s, src, params=b'{"a":1}', content_type=w.NONE),
         {"bad-params"}, True, NAMED),
    Case("s4.2-params-json-list", lambda s, src: json_params(s, src, b"[1]"), {"bad-params"}, True, NAMED),
    Case("s4.2-params-fbv-string", lambda s, src: fbv_params(s, src, w.fbv_encode("x")), {"bad-params"}, True, NAMED),
    # §5.2 "Readers MUST refuse: invalid UTF-8, a byte-order mark, unescaped control characters, lone
    # surrogates, duplicate object keys, nesting deeper than 32, and anything but whitespace after the value"
    Case("s5.2-not-json", lambda s, src: json_params(s, src, b'{"a":'), {"bad-params"}, True, NAMED),
    Case("s5.2-invalid-utf8", lambda s, src: json_params(s, src, b'{"a":"\xff"}'), {"bad-params"}, True, NAMED),
    Case("s5.2-byte-order-mark", lambda s, src: json_params(s, src, b'\xef\xbb\xbf{"a":1}'),
         {"bad-params"}, True, NAMED),
    Case("s5.2-control-char-in-string", lambda s, src: json_params(s, src, b'{"a":"x\x01y"}'),
         {"bad-params"}, True, NAMED),
    Case("s5.2-lone-surrogate", lambda s, src: json_params(s, src, b'{"a":"\\ud800"}'), {"bad-params"}, True, NAMED),
    Case("s5.2-duplicate-keys", lambda s, src: json_params(s, src, b'{"a":1,"a":2}'), {"bad-params"}, True, NAMED),
    Case("s5.2-nesting-33", lambda s, src: json_params(s, src, nest_json(33)), {"bad-params"}, True, NAMED),
    Case("s5.2-trailing-value", lambda s, src: json_params(s, src, b'{"a":1} {}'), {"bad-params"}, True, NAMED),
    # §5.2 says "malformed" for the number, §4.2/§7 "bad-params" for a params frame: either is accepted
    Case("s5.2-number-outside-double-range", lambda s, src: json_params(s, src, b'{"a":1e400}'),
         {"bad-params", "malformed"}, True, NAMED),
    # §5.1 FBV
    Case("s5.1-bytes-after-value", lambda s, src: fbv_params(s, src, w.fbv_encode({"a": 1}) + b"\x00"),
         {"bad-params", "malformed"}, True, NAMED),
    Case("s5.1-nesting-33", lambda s, src: fbv_params(s, src, nest_fbv(33)), {"bad-params"}, True, NAMED),
    Case("s5.1-map-count-past-end", lambda s, src: fbv_params(s, src, b"\x07\xff\xff\xff\xff"),
         {"bad-params"}, True, NAMED),
    Case("s5.1-string-count-past-end",
         lambda s, src: fbv_params(s, src, b"\x07\x00\x00\x00\x01\x00\x01a\x05\xff\xff\xff\xf0ab"),
         {"bad-params"}, True, NAMED),
    Case("s5.1-unknown-tag", lambda s, src: fbv_params(s, src, b"\x07\x00\x00\x00\x01\x00\x01a\x08"),
         {"bad-params"}, True, NAMED),
    Case("s5.1-string-not-utf8",
         lambda s, src: fbv_params(s, src, b"\x07\x00\x00\x00\x01\x00\x01a\x05\x00\x00\x00\x01\xff"),
         {"bad-params"}, True, NAMED),
    # §4.3 kind-specific rules on ingress
    Case("s4.3-deeplink-name-not-topic-id",
         lambda s, src: w.deeplink("moviePicked", 1, src, topic_name="castPicked"),
         {"malformed"}, True, NAMED, sides=("ingress",)),
    Case("s4.3-presentable-report-unknown-event",
         lambda s, src: w.presentable_report("apikey", "exploded", 1, src),
         {"malformed"}, True, NAMED, sides=("ingress",)),
]

PARAMS = [pytest.param(case, side, id=f"{case.id}-{side}") for case in CASES for side in case.sides]


@pytest.mark.parametrize("case,side_name", PARAMS)
def test_refusal(shared, case, side_name):
    """§3.3, §4.4, §7: reason, details, diagnostic before the ack, publication, ack iff the envelope was read.
    Every broken rule is listed in the failure, not only the first."""
    side = Side(side_name, shared)
    source = w.new_source(f"refusal-{case.id}")
    frames = case.build(side, source)
    peer = shared.peer(side.endpoint)
    published = shared.sub(side.publisher, ["diag/"])
    peer.send(frames)
    replies = settle(side, peer)

    mine = [m for m in replies if m.kind == w.DIAGNOSTIC and m.reason in case.reasons]
    assert mine, f"§7: no diagnostic {case.reasons} sent to the DEALER; got {replies}"
    diag = mine[0]
    problems = shape_errors(diag)
    details = diag.details if not problems else {}
    missing = case.details - set(details)
    if missing:
        problems.append(f"§7: details lack {sorted(missing)} (they could be read): {details}")
    if "source" in case.details and (details.get("source"), details.get("sequence")) != (source, 1):
        problems.append(f"§7: details name another message: {details}")
    if "topic" in details and "topic" in case.details:
        topic = frames[0].decode()
        if details["topic"] != topic[:QUOTED]:
            problems.append(f"§7/§8: details topic {details['topic']!r} is not {topic!r} cut to {QUOTED} characters")

    acks = acks_of(replies, source)
    if case.acked is True:
        if not acks or acks[-1] != 1:
            problems.append(f"§4.4/§7: a refused message whose envelope was read is acknowledged; acks {acks}")
        else:
            first_ack = next(i for i, m in enumerate(replies) if m.kind == w.ACK and m.topic == f"ack/{source}")
            if replies.index(diag) > first_ack:
                problems.append("§3.3: the diagnostic must come before the ack that covers it")
    elif case.acked is False and acks:
        problems.append(f"§4.4: a message whose envelope cannot be read is not acknowledged; got ack {acks}")

    def same(m):
        return m.kind == w.DIAGNOSTIC and m.reason == diag.reason and (
            "source" not in case.details or details_name(m, source, 1))
    try:
        out = published.until(same, T, f"diag/{diag.reason} on {side.publisher}")
        problems += shape_errors(out[-1])
    except w.Timeout as error:
        problems.append(f"§3.3/§7: not published: {error}")
    assert not problems, f"{problems}\nreplies: {replies}"


ACCEPTED = [
    # (id, build(side, source) -> frames of sequence 1, sides)
    ("s4.2-flags-ignored-on-receive", lambda s, src: with_frame(msg(s, src), 1, bad_env(s, src, flags=0xFF)),
     ("ingress", "actions")),
    ("s4.2-timestamp-zero", lambda s, src: with_frame(msg(s, src), 1, bad_env(s, src, timestamp=0)),
     ("ingress", "actions")),
    ("s4.2-timestamp-far-future", lambda s, src: with_frame(msg(s, src), 1, bad_env(s, src, timestamp=2**62)),
     ("ingress", "actions")),
    ("s4.2-timestamp-negative", lambda s, src: with_frame(msg(s, src), 1, bad_env(s, src, timestamp=-1)),
     ("ingress",)),
    ("s4.2-message-id-zero", lambda s, src: with_frame(msg(s, src), 1, bad_env(s, src, message_id=bytes(16))),
     ("ingress", "actions")),
    ("s4.2-empty-params-content-type-0", lambda s, src: msg(s, src, content_type=w.NONE), ("ingress", "actions")),
    ("s4.2-name-all-allowed-chars-255-bytes",
     lambda s, src: with_frame(msg(s, src), 2, (b"AZaz09_.:-" * 26)[:255]), ("ingress",)),
    ("s3.4-id-with-slashes", lambda s, src: with_frame(msg(s, src), 0, b"step/conformance/a/b"), ("ingress",)),
    ("s3.4-topic-255-bytes", lambda s, src: with_frame(msg(s, src), 0, long_topic(s, 255)), ("ingress",)),
    ("s5.1-fbv-keys-in-any-order", lambda s, src: fbv_params(
        s, src, b"\x07\x00\x00\x00\x02\x00\x01b\x03" + bytes(8) + b"\x00\x01a\x03" + bytes(8)), ("ingress",)),
    ("s5.1-fbv-nesting-32", lambda s, src: fbv_params(s, src, nest_fbv(32)), ("ingress",)),
    ("s5.2-json-nesting-32", lambda s, src: json_params(s, src, nest_json(32)), ("ingress",)),
    ("s5.2-json-whitespace", lambda s, src: json_params(s, src, b' { "a" : [ 1 , 2.5 ] } \n'), ("ingress",)),
]


@pytest.mark.parametrize("build,side_name", [pytest.param(b, s, id=f"{i}-{s}") for i, b, ss in ACCEPTED for s in ss])
def test_accepted(shared, build, side_name):
    """§3.4, §4.2, §5: valid edge cases are acknowledged without a diagnostic and re-published unchanged."""
    side = Side(side_name, shared)
    source = w.new_source("accepted")
    frames = build(side, source)
    peer = shared.peer(side.endpoint)
    applied = shared.sub(side.publisher, [side.applied_prefix])
    peer.send(frames)
    replies = wait_ack(peer, source, 1)
    refused = [m for m in replies if m.kind == w.DIAGNOSTIC]
    assert not refused, f"refused a valid message: {refused}"
    out = applied.until(lambda m: m.source == source and m.kind == side.kind, T, "re-publication")
    assert out[-1].frames == frames, "§3.2/§3.3: re-published with the frames it arrived with"


def test_heartbeat_content_type_ignored(shared):
    """§4.2: kinds without value frames: "receivers ignore the content type of such kinds"."""
    peer = shared.peer(shared.ingress)
    source = w.new_source("hb-ct")
    peer.send(w.heartbeat(source, content_type=w.FBV))
    replies = peer.until(lambda m: m.kind == w.HEARTBEAT, T, "heartbeat answer")
    assert not [m for m in replies if m.kind == w.DIAGNOSTIC], replies


@pytest.mark.parametrize("side_name", ["ingress", "actions"])
def test_still_serving_after_every_refusal(shared, side_name):
    """§7: "A receiver MUST NOT crash, block or stop on any input": after the whole table, a message is applied."""
    side = Side(side_name, shared)
    for name, process in shared.processes.items():
        assert process.poll() is None, f"{name} exited with {process.returncode}"
    source = w.new_source("after")
    peer = shared.peer(side.endpoint)
    peer.send(side.message(1, source))
    wait_ack(peer, source, 1)
