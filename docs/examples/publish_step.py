#!/usr/bin/env python3
"""Publish one FlowBus step from Python, using only docs/PROTOCOL.md (protocol v1).

Usage:
    publish_step.py ENDPOINT STEPPER_ID STEP_NAME [key=value ...] [--timeout S] [--source ID]

    python3 docs/examples/publish_step.py ipc:///tmp/flowbus/ingress movie-list moviePicked withMovieId=23452

Connects a DEALER to ENDPOINT (flowd's `ingress`, or `wire-smoke listen`), sends one STEP
(kind 1) with topic `step/STEPPER_ID`, JSON params and sequence 1 under a fresh source id, then
waits up to --timeout seconds for the ACK (kind 11) of that source and prints it.

Params: `key=value` values are read as a bool (`true`, `false`), an int (`-12`, a 64-bit signed
integer), a double (`4.5`, `1e3`) or else a string (`Heat`, `12a`). `key:=JSON` takes any JSON
value, e.g. `id:='"23"'` for the string "23" or `tags:='["a","b"]'`.

Exit status:
    0  the step was acknowledged
    1  the receiver refused the step (a diagnostic about it arrived; it is printed)
    2  bad command line (usage)
    3  no ack within the timeout (is anything listening on ENDPOINT?)
    4  pyzmq is missing or ZeroMQ refused the endpoint

As a module: `step_frames()` builds the four frames, `parse_params()` reads key=value
arguments, `decode_reply()` reads an ack or diagnostic, `publish_step()` does the whole exchange.
Only `publish_step()` needs pyzmq.
"""

import argparse
import json
import math
import os
import re
import struct
import sys
import time

PROTOCOL_VERSION = 1
KIND_STEP = 1
KIND_DIAGNOSTIC = 10
KIND_ACK = 11
CONTENT_NONE, CONTENT_JSON, CONTENT_FBV = 0, 1, 2
ENVELOPE_FIXED_SIZE = 37  # PROTOCOL.md 4.2: the envelope is exactly 37 + n bytes
MAX_TOPIC_BYTES = 255  # PROTOCOL.md 3.4 and 6
MAX_SOURCE_BYTES = 255
MAX_NAME_BYTES = 255
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

EXIT_OK, EXIT_REFUSED, EXIT_USAGE, EXIT_NO_ACK, EXIT_ZMQ = 0, 1, 2, 3, 4

_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,255}\Z")  # PROTOCOL.md 4.2, "Names"
_INT = re.compile(r"-?(0|[1-9][0-9]*)\Z")
_NUMBER = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?\Z")  # RFC 8259 number


class WireFormatError(ValueError):
    """A value or message that protocol v1 cannot carry, or a reply that breaks it."""


# MARK: Building frames


def envelope(kind, content_type, sequence, source, timestamp_us=None, message_id=None):
    """Frame 1 (PROTOCOL.md 4.2): version, kind, content type, flags, sequence, time, id, source."""
    src = source.encode("utf-8")
    if not 1 <= len(src) <= MAX_SOURCE_BYTES:
        raise WireFormatError(f"source id is {len(src)} bytes, 1 to {MAX_SOURCE_BYTES} allowed")
    if timestamp_us is None:
        timestamp_us = time.time_ns() // 1000
    if message_id is None:
        message_id = os.urandom(16)
    if len(message_id) != 16:
        raise WireFormatError("message id must be 16 bytes")
    return struct.pack(">BBBBQq16sB", PROTOCOL_VERSION, kind, content_type, 0, sequence,
                       timestamp_us, message_id, len(src)) + src


def quoted(text):
    """An error's excerpt of `text`: its first 64 characters."""
    return text if len(text) <= 64 else text[:64] + "…"


def _check_value(value, depth=0):
    """Refuses what the value model (PROTOCOL.md 5.3) cannot hold."""
    if depth > 32:
        raise WireFormatError("value nests deeper than 32 levels")
    if value is None or isinstance(value, (bool, str)):
        return
    if isinstance(value, int):
        if not INT64_MIN <= value <= INT64_MAX:
            raise WireFormatError(f"{quoted(str(value))} does not fit a signed 64-bit int; end it with .0 to send a double")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise WireFormatError(f"{value} cannot be sent: NaN and infinities are not representable")
    elif isinstance(value, list):
        for element in value:
            _check_value(element, depth + 1)
    elif isinstance(value, dict):
        for key, element in value.items():
            if not isinstance(key, str):
                raise WireFormatError(f"map key {key!r} is not a string")
            _check_value(element, depth + 1)
    else:
        raise WireFormatError(f"{type(value).__name__} is not a wire value (null, bool, int, float, str, list, dict)")


def encode_json(value):
    """Canonical JSON (PROTOCOL.md 5.2): keys sorted by code point (= UTF-8 byte order), no
    whitespace, non-ASCII as UTF-8, floats always with '.' or an exponent (Python's repr)."""
    _check_value(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")


def check_name(name, what="step name"):
    """Step, action and deep link names are 1 to 255 bytes of [A-Za-z0-9_.:-]."""
    if not _NAME.match(name):
        raise WireFormatError(f"{what} {name!r} must be 1 to 255 characters of A-Z a-z 0-9 _ . : -")


def topic(prefix, topic_id):
    """`<prefix>/<id>` as bytes, checked against PROTOCOL.md 3.4."""
    if not topic_id:
        raise WireFormatError(f"the id in {prefix}/<id> must not be empty")
    data = f"{prefix}/{topic_id}".encode("utf-8")
    if len(data) > MAX_TOPIC_BYTES:
        raise WireFormatError(f"topic {prefix}/... is {len(data)} bytes, at most {MAX_TOPIC_BYTES} allowed")
    return data


def step_frames(stepper_id, name, params, source, sequence=1, timestamp_us=None, message_id=None):
    """The four frames of a STEP (PROTOCOL.md 4.3), params as JSON; no params: an empty frame 3
    and content type 0, as in the golden vector step-settings-noparams."""
    check_name(name)
    if not isinstance(params, dict):
        raise WireFormatError("params must be a dict (a map)")
    body = encode_json(params) if params else b""
    content_type = CONTENT_JSON if params else CONTENT_NONE
    return [
        topic("step", stepper_id),
        envelope(KIND_STEP, content_type, sequence, source, timestamp_us, message_id),
        name.encode("ascii"),
        body,
    ]


def new_source(stepper_id):
    """A fresh source id for this process (PROTOCOL.md 4.2: a restarted process takes a new one,
    because its sequence starts at 1 again)."""
    suffix = "#py-" + os.urandom(4).hex()
    base = stepper_id.encode("utf-8")[: MAX_SOURCE_BYTES - len(suffix)].decode("utf-8", "ignore")
    return (base or "publish_step") + suffix


# MARK: Parameters


def parse_value(text):
    """`true`/`false` → bool, an integer → int (64-bit), a JSON number → float, else the string."""
    if text in ("true", "false"):
        return text == "true"
    if _INT.match(text):
        value = int(text)
        if not INT64_MIN <= value <= INT64_MAX:
            raise WireFormatError(f"{quoted(text)} does not fit a signed 64-bit int; end it with .0 to send a double")
        return value
    if _NUMBER.match(text):
        value = float(text)
        if not math.isfinite(value):
            raise WireFormatError(f"{quoted(text)} is out of the double range")
        return value
    return text


def parse_param(argument):
    """`key=value` (see parse_value) or `key:=JSON`; returns (key, value)."""
    json_form = re.match(r"([^=:]*):=(.*)\Z", argument, re.S)
    if json_form:
        key, raw = json_form.groups()
        try:
            value = json.loads(raw, parse_constant=_refuse_constant)
        except ValueError as error:
            raise WireFormatError(f"{quoted(argument)!r}: the value after ':=' is not JSON ({error})") from None
        _check_value(value)
    else:
        key, sep, raw = argument.partition("=")
        if not sep:
            raise WireFormatError(f"{quoted(argument)!r} is not key=value (or key:=JSON)")
        value = parse_value(raw)
    if not key:
        raise WireFormatError(f"{quoted(argument)!r} has an empty key")
    return key, value


def _refuse_constant(name):
    raise ValueError(f"{name} is not representable")


def parse_params(arguments):
    """A dict from `key=value` / `key:=JSON` arguments; a repeated key is an error."""
    params = {}
    for argument in arguments:
        key, value = parse_param(argument)
        if key in params:
            raise WireFormatError(f"parameter {quoted(key)!r} is given twice")
        params[key] = value
    return params


# MARK: Reading replies


def decode_envelope(frame):
    """The fields of an envelope frame as a dict; raises WireFormatError if it breaks 4.2."""
    if len(frame) < ENVELOPE_FIXED_SIZE + 1:
        raise WireFormatError(f"envelope is {len(frame)} bytes, at least {ENVELOPE_FIXED_SIZE + 1} expected")
    version, kind, content_type, _flags, sequence, timestamp, message_id, n = struct.unpack(
        ">BBBBQq16sB", frame[:ENVELOPE_FIXED_SIZE])
    if version != PROTOCOL_VERSION:
        raise WireFormatError(f"envelope version is {version}, only {PROTOCOL_VERSION} is supported")
    if n == 0 or len(frame) != ENVELOPE_FIXED_SIZE + n:
        raise WireFormatError(f"envelope is {len(frame)} bytes, {ENVELOPE_FIXED_SIZE + n} expected for source length {n}")
    return {"version": version, "kind": kind, "content_type": content_type, "sequence": sequence,
            "timestamp_us": timestamp, "message_id": message_id.hex(),
            "source": frame[ENVELOPE_FIXED_SIZE:].decode("utf-8")}


def decode_reply(frames):
    """Reads an ACK or a DIAGNOSTIC received on the DEALER.

    Returns ("ack", envelope, acknowledged_source, acknowledged_sequence),
    ("diagnostic", envelope, reason_code, details_dict) or ("other", envelope, topic, None).
    """
    if len(frames) < 2:
        raise WireFormatError(f"reply has {len(frames)} frame(s), at least 2 expected")
    topic_text = frames[0].decode("utf-8")
    env = decode_envelope(frames[1])
    if env["kind"] == KIND_ACK:
        if len(frames) != 3 or len(frames[2]) != 8 or not topic_text.startswith("ack/"):
            raise WireFormatError("ack must be 3 frames: ack/<source>, envelope, 8-byte sequence")
        return ("ack", env, topic_text[len("ack/"):], struct.unpack(">Q", frames[2])[0])
    if env["kind"] == KIND_DIAGNOSTIC:
        if len(frames) != 4 or not topic_text.startswith("diag/"):
            raise WireFormatError("diagnostic must be 4 frames: diag/<reason>, envelope, reason, details")
        details = _decode_value(frames[3], env["content_type"])
        if not isinstance(details, dict):
            raise WireFormatError("diagnostic details are not a map")
        return ("diagnostic", env, frames[2].decode("utf-8"), details)
    return ("other", env, topic_text, None)


def _decode_value(data, content_type):
    if content_type == CONTENT_JSON:
        return json.loads(data.decode("utf-8"))
    if content_type == CONTENT_FBV:
        value, end = _decode_fbv(data, 0, 0)
        if end != len(data):
            raise WireFormatError("bytes after the FBV value")
        return value
    raise WireFormatError(f"content type {content_type} carries no value")


def _decode_fbv(data, at, depth):
    """FBV (PROTOCOL.md 5.1), enough to read diagnostics from Swift peers."""
    def take(count):
        if at + count > len(data):
            raise WireFormatError("FBV value is truncated")
        return data[at:at + count]
    tag = take(1)[0]
    at += 1
    if tag <= 0x02:
        return (None, False, True)[tag], at
    if tag in (0x03, 0x04):
        raw = take(8)
        return struct.unpack(">q" if tag == 0x03 else ">d", raw)[0], at + 8
    count = struct.unpack(">I", take(4))[0]
    at += 4
    if tag == 0x05:
        raw = take(count)
        return raw.decode("utf-8"), at + count
    if depth >= 32 or tag not in (0x06, 0x07):
        raise WireFormatError(f"FBV tag {tag:#04x} is unknown or nests too deep")
    if count > len(data) - at:
        raise WireFormatError("FBV count exceeds the remaining bytes")
    if tag == 0x06:
        items = []
        for _ in range(count):
            item, at = _decode_fbv(data, at, depth + 1)
            items.append(item)
        return items, at
    entries = {}
    for _ in range(count):
        size = struct.unpack(">H", take(2))[0]
        at += 2
        key = take(size).decode("utf-8")
        at += size
        entries[key], at = _decode_fbv(data, at, depth + 1)
    return entries, at


def describe_step(name, params):
    """`moviePicked(withMovieId: 23452)`, as `wire-smoke listen` prints steps."""
    if not params:
        return name
    inner = ", ".join(f"{key}: {json.dumps(params[key], ensure_ascii=False, separators=(',', ':'), sort_keys=True)}"
                      for key in sorted(params))
    return f"{name}({inner})"


# MARK: Publishing


class PublishResult:
    """What came back: the ack (or None on timeout) and the diagnostics about this step."""

    def __init__(self, source, sequence):
        self.source = source
        self.sequence = sequence
        self.ack = None  # (acknowledging source, acknowledged sequence)
        self.diagnostics = []  # (reason code, details)

    @property
    def exit_code(self):
        if self.diagnostics:
            return EXIT_REFUSED
        return EXIT_OK if self.ack else EXIT_NO_ACK


def publish_step(endpoint, stepper_id, name, params, timeout=5.0, source=None, log=None):
    """Sends one step and waits up to `timeout` seconds for its ack; returns a PublishResult.

    Diagnostics arriving before the ack (PROTOCOL.md 4.3, DIAGNOSTIC) are collected when they
    name this source (or name no source). Raises WireFormatError for bad input and zmq.ZMQError
    for a bad endpoint.
    """
    import zmq  # only this function needs pyzmq

    source = source or new_source(stepper_id)
    frames = step_frames(stepper_id, name, params, source, sequence=1)
    result = PublishResult(source, 1)
    context = zmq.Context()
    sock = context.socket(zmq.DEALER)
    try:
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.MAXMSGSIZE, 1 << 20)
        sock.connect(endpoint)
        # A DEALER queues the message until the connection is up, so no wait is needed here.
        sock.send_multipart(frames)
        deadline = time.monotonic() + timeout
        while result.ack is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not sock.poll(max(1, int(remaining * 1000))):
                break
            reply = sock.recv_multipart()
            try:
                what, env, a, b = decode_reply(reply)
            except (WireFormatError, UnicodeDecodeError, ValueError) as error:
                if log:
                    log(f"publish_step: ignoring a malformed reply: {error}")
                continue
            if what == "ack" and a == source and b >= result.sequence:
                result.ack = (env["source"], b)
            elif what == "diagnostic" and b.get("source", source) == source:
                result.diagnostics.append((a, b))
            elif log:
                log(f"publish_step: ignoring {what} {a!r}")
    finally:
        sock.close(0)
        context.term()
    return result


KIND_HEARTBEAT = 12
KIND_DID_NAVIGATE = 8


def subscribe_did_navigate(context, events_endpoint, timeout):
    """A SUB on flowd's `events` for didNavigate, returned once flowd's heartbeat shows it is
    connected (PROTOCOL.md 3.4: subscribe to `nav/did/`; heartbeats on `hb/`)."""
    import zmq

    sub = context.socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.SUBSCRIBE, b"nav/did/")
    sub.setsockopt(zmq.SUBSCRIBE, b"hb/")
    sub.connect(events_endpoint)
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not sub.poll(max(1, int(remaining * 1000))):
            sub.close(0)
            raise TimeoutError(f"no heartbeat from {events_endpoint} within {timeout:g} s")
        frames = sub.recv_multipart()
        if len(frames) >= 2 and decode_envelope(frames[1])["kind"] == KIND_HEARTBEAT:
            return sub


def wait_did_navigate(sub, name, params, timeout):
    """The first didNavigate of step `name` with `params`: (flow, step name, params, presentable)."""
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not sub.poll(max(1, int(remaining * 1000))):
            return None
        frames = sub.recv_multipart()
        env = decode_envelope(frames[1])
        if env["kind"] != KIND_DID_NAVIGATE or len(frames) != 6:
            continue
        event = (frames[2].decode("utf-8"), frames[3].decode("utf-8"),
                 _decode_value(frames[4], env["content_type"]) if frames[4] else {}, frames[5].decode("utf-8"))
        if event[1] == name and event[2] == params:
            return event


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="publish_step.py",
        description="Publish one FlowBus step (protocol v1, JSON params) and wait for its ack.",
        epilog="values: true/false → bool, 12 → int, 4.5 or 1e3 → double, anything else → string; "
               "key:=JSON for any JSON value. Exit: 0 acked, 1 refused, 2 usage, 3 no ack, 4 ZeroMQ/pyzmq error.")
    parser.add_argument("endpoint", help="the receiver's endpoint, e.g. ipc:///tmp/flowbus/ingress or tcp://127.0.0.1:5560")
    parser.add_argument("stepper_id", help="the stepper id; the topic is step/<stepper_id>")
    parser.add_argument("step_name", help="the step name, e.g. moviePicked ([A-Za-z0-9_.:-])")
    parser.add_argument("params", nargs="*", metavar="key=value", help="step params")
    parser.add_argument("--timeout", type=float, default=5.0, metavar="S", help="seconds to wait for the ack (default 5)")
    parser.add_argument("--source", help="source id for the envelope (default: <stepper_id>#py-<random>)")
    parser.add_argument("--watch", metavar="EVENTS_ENDPOINT",
                        help="also wait for flowd's didNavigate of this step on its events endpoint, and print it")
    args = parser.parse_intermixed_args(argv)

    def fail(code, message):
        print(f"publish_step: error: {message}", file=sys.stderr)
        return code

    try:
        params = parse_params(args.params)
        topic("step", args.stepper_id)
        check_name(args.step_name)
        if args.source is not None:
            envelope(KIND_STEP, 0, 1, args.source)
    except WireFormatError as error:
        return fail(EXIT_USAGE, str(error))
    if args.timeout <= 0:
        return fail(EXIT_USAGE, "--timeout must be more than 0 seconds")

    try:
        import zmq
    except ImportError:
        return fail(EXIT_ZMQ, "pyzmq is not installed: run scripts/bootstrap or `python3 -m pip install pyzmq`")

    watch_context = zmq.Context() if args.watch else None
    try:
        sub = subscribe_did_navigate(watch_context, args.watch, args.timeout) if args.watch else None
        result = publish_step(args.endpoint, args.stepper_id, args.step_name, params, timeout=args.timeout,
                              source=args.source, log=lambda line: print(line, file=sys.stderr))
    except TimeoutError as error:
        return fail(EXIT_NO_ACK, f"{error} (is flowd running with that events endpoint?)")
    except zmq.ZMQError as error:
        return fail(EXIT_ZMQ, f"cannot connect to {args.endpoint!r}: {error} "
                              "(endpoints look like tcp://127.0.0.1:5560 or ipc:///path/to/socket)")

    print(f"sent step/{args.stepper_id} source={result.source} seq={result.sequence} "
          f"step={describe_step(args.step_name, params)} content={'json' if params else 'none'}", flush=True)
    for reason, details in result.diagnostics:
        print(f"refused {reason}: {details.get('message', '')}", flush=True)
    if result.ack:
        print(f"ack from {result.ack[0]}: {result.source} seq={result.ack[1]}", flush=True)
    elif not result.diagnostics:
        return fail(EXIT_NO_ACK, f"no ack within {args.timeout:g} s from {args.endpoint} "
                                 "(is flowd or `wire-smoke listen` running there? --timeout waits longer)")
    if sub is not None and result.exit_code == EXIT_OK:
        event = wait_did_navigate(sub, args.step_name, params, args.timeout)
        sub.close(0)
        watch_context.term()
        if event is None:
            return fail(EXIT_NO_ACK, f"flowd acknowledged the step but published no didNavigate for it within {args.timeout:g} s "
                                     "(was it dropped? watch `flowctl echo diagnostics`)")
        presentable = f" presentable={event[3]}" if event[3] else ""
        print(f"did navigate flow={event[0]} step={describe_step(event[1], event[2])}{presentable}", flush=True)
    return result.exit_code


if __name__ == "__main__":
    sys.exit(main())
