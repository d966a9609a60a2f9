"""The codecs against the golden vectors of Tests/FlowBusWireTests/Fixtures (and edge cases)."""

import struct

import pytest
from conftest import FIXTURES, load_vector

import flowbus
from flowbus import wire
from flowbus.clone import CloneMerger

TS = 1_700_000_000_000_000
MID = bytes.fromhex("00112233445566778899aabbccddeeff")
ENV = dict(timestamp_us=TS, message_id=MID)
STATE = {"value": 3, "isLoading": False, "label": "três"}
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def built(name):
    """Each vector rebuilt with the package's builders."""
    table = {
        "step-moviePicked-json": lambda: flowbus.step_frames("movie-list", "moviePicked", {"withMovieId": 23452},
                                                             source="movie-list#5f3a", sequence=1, **ENV),
        "step-moviePicked-fbv": lambda: flowbus.step_frames("movie-list", "moviePicked", {"withMovieId": 23452},
                                                            source="movie-list#5f3a", sequence=1,
                                                            content_type=flowbus.CONTENT_FBV, **ENV),
        "step-settings-noparams": lambda: flowbus.step_frames("movie-list", "settings", source="movie-list#5f3a",
                                                              sequence=2, **ENV),
        "action-increase-json": lambda: flowbus.action_frames("counter", "increase", {"by": 1},
                                                              source="counter-view#a1", sequence=7, **ENV),
        "state-counter-fbv": lambda: flowbus.state_frames("counter", STATE, source="counter-host#77", sequence=3,
                                                          content_type=flowbus.CONTENT_FBV, **ENV),
        "snapshot-counter-json": lambda: flowbus.snapshot_frames("counter", STATE, source="counter-host#77",
                                                                 sequence=3, content_type=flowbus.CONTENT_JSON, **ENV),
        "didNavigate-movies-json": lambda: flowbus.did_navigate_frames("movies", "moviePicked", {"withMovieId": 23452},
                                                                       "movie/23452", source="flowd#1", sequence=12, **ENV),
        "didNavigate-searched-json": lambda: flowbus.did_navigate_frames("movies", "searched",
                                                                         {"q": "café", "p": "a/b", "s": 100.0, "n": 0},
                                                                         "movies/search", source="flowd#1", sequence=18,
                                                                         **ENV),
        "navigationCommand-push": lambda: flowbus.navigation_command_frames("movies", "push", "movie/23452",
                                                                            "movies-stack", "screen", source="flowd#1",
                                                                            sequence=13, **ENV),
        "navigationCommand-setTabs": lambda: flowbus.navigation_command_frames("MainFlow", "setTabs", "dashboard",
                                                                               ",".join(["wishlist", "watched"]), "tabs",
                                                                               source="flowd#1", sequence=17, **ENV),
        "diagnostic-unbound-stepper-json": lambda: flowbus.diagnostic_frames(
            "unbound-stepper", "stepper movie-list is not bound to a flow",
            {"source": "movie-list#5f3a", "sequence": 1, "stepper": "movie-list", "topic": "step/movie-list"},
            source="flowd#1", sequence=14, **ENV),
        "ack-movie-list": lambda: flowbus.ack_frames("movie-list#5f3a", 2, source="flowd#1", sequence=15, **ENV),
        "heartbeat-flowd": lambda: flowbus.heartbeat_frames(source="flowd#1", sequence=16, **ENV),
        "step-moviePicked-traced": lambda: flowbus.step_frames(
            "movie-list", "moviePicked", {"withMovieId": 23452}, source="movie-list#5f3a", sequence=3,
            traceparent=TRACEPARENT, tracestate="congo=t61rcWkgMzE", **ENV),
        "didNavigate-movies-traced": lambda: flowbus.did_navigate_frames(
            "movies", "moviePicked", {"withMovieId": 23452}, "movie/23452", source="flowd#1", sequence=19,
            traceparent="00-4bf92f3577b34da6a3ce929d0e0e4736-b7ad6b7169203331-01", **ENV),
        "replayRequest-json": lambda: flowbus.replay_request_frames(12, ["nav/did/"], 1000, source="echo#9",
                                                                    sequence=1, **ENV),
        "replay-json": lambda: flowbus.replay_frames(
            [(13, load_vector("step-moviePicked-json")), (19, load_vector("didNavigate-movies-traced"))],
            since=12, last=19, head=20, oldest=1, more=False, source="flowd#1", sequence=2, **ENV),
    }
    return table[name]()


VECTORS = sorted(path.stem for path in FIXTURES.glob("*.hex"))


def test_every_vector_is_covered():
    assert VECTORS, f"no golden vectors in {FIXTURES}"
    for name in VECTORS:
        built(name)  # KeyError: a new vector needs a line in built()


@pytest.mark.parametrize("name", VECTORS)
def test_builders_match_golden_vectors(name):
    assert built(name) == load_vector(name)


@pytest.mark.parametrize("name", VECTORS)
def test_decode_then_encode_round_trips(name):
    frames = load_vector(name)
    message = flowbus.decode(frames)
    assert message.envelope.timestamp_us == TS and message.envelope.message_id == MID
    assert flowbus.encode(message) == frames


def test_decoded_fields():
    step = flowbus.decode(load_vector("step-moviePicked-fbv"))
    assert isinstance(step, flowbus.Step)
    assert (step.stepper_id, step.name, step.params) == ("movie-list", "moviePicked", {"withMovieId": 23452})
    assert (step.source, step.sequence, step.envelope.content_type) == ("movie-list#5f3a", 1, flowbus.CONTENT_FBV)

    state = flowbus.decode(load_vector("state-counter-fbv"))
    assert isinstance(state, flowbus.State) and not isinstance(state, flowbus.Snapshot)
    assert (state.reactor_id, state.sequence, state.value) == ("counter", 3, STATE)

    snapshot = flowbus.decode(load_vector("snapshot-counter-json"))
    assert isinstance(snapshot, flowbus.Snapshot) and snapshot.value == STATE and snapshot.sequence == 3

    did = flowbus.decode(load_vector("didNavigate-movies-json"))
    assert isinstance(did, flowbus.DidNavigate)
    assert (did.flow, did.step, did.params, did.presentable) == ("movies", "moviePicked", {"withMovieId": 23452}, "movie/23452")

    ack = flowbus.decode(load_vector("ack-movie-list"))
    assert (ack.acked_source, ack.acked_sequence, ack.source) == ("movie-list#5f3a", 2, "flowd#1")

    diag = flowbus.decode(load_vector("diagnostic-unbound-stepper-json"))
    assert diag.reason == "unbound-stepper" and diag.names("movie-list#5f3a", 1)
    assert diag.message == "stepper movie-list is not bound to a flow"

    command = flowbus.decode(load_vector("navigationCommand-push"))
    assert (command.flow, command.verb, command.target, command.container, command.presentable_kind) == \
        ("movies", "push", "movie/23452", "movies-stack", "screen")
    tabs = flowbus.decode(load_vector("navigationCommand-setTabs"))
    assert (tabs.verb, tabs.target, tabs.container.split(","), tabs.presentable_kind) == \
        ("setTabs", "dashboard", ["wishlist", "watched"], "tabs")

    heartbeat = flowbus.decode(load_vector("heartbeat-flowd"))
    assert isinstance(heartbeat, flowbus.Heartbeat) and heartbeat.source == "flowd#1"

    noparams = flowbus.decode(load_vector("step-settings-noparams"))
    assert noparams.params == {} and noparams.envelope.content_type == flowbus.CONTENT_NONE


def test_protocol_fbv_example():
    # PROTOCOL.md 5.1
    expected = bytes.fromhex("07 00000001 000b 776974684d6f7669654964 03 0000000000005b9c".replace(" ", ""))
    assert flowbus.encode_fbv({"withMovieId": 23452}) == expected
    assert flowbus.decode_fbv(expected) == {"withMovieId": 23452}


def test_other_kinds_round_trip():
    kw = dict(source="py#1", sequence=5, **ENV)
    for frames in (flowbus.deep_link_frames("settings", {"a": [1, 2.5, None, True]}, **kw),
                   flowbus.snapshot_request_frames("movie/42", **kw),
                   flowbus.will_navigate_frames("MainFlow", "apiKey", None, "apikey", **kw),
                   flowbus.status_request_frames(**kw),
                   flowbus.status_reply_frames({"totals": {"x": 1}}, **kw),
                   flowbus.presentable_report_frames("movie/42", "appeared", **kw)):
        assert flowbus.encode(flowbus.decode(frames)) == frames


@pytest.mark.parametrize("value", [None, True, False, 0, -1, 2**63 - 1, -2**63, 1.0, -0.0, 1e300, 0.1, "", "três 🎬",
                                   [], {}, [1, [2, [3]]], {"b": 1, "a": {"é": [None]}}])
def test_values_round_trip_in_both_encodings(value):
    for encode, decode in ((flowbus.encode_fbv, flowbus.decode_fbv), (flowbus.encode_json, flowbus.decode_json)):
        back = decode(encode(value))
        assert back == value and type(back) is type(value)


def test_json_canonical_form():
    assert flowbus.encode_json({"b": 1.0, "a": "x\n\u0001é"}) == '{"a":"x\\n\\u0001é","b":1.0}'.encode()
    assert isinstance(flowbus.decode_json(b"1"), int) and isinstance(flowbus.decode_json(b"1.0"), float)
    assert isinstance(flowbus.decode_json(b"9223372036854775808"), float)  # beyond int64: a double
    assert flowbus.decode_json(b" [1] \n") == [1]


def nested(depth):
    value = 0
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("data", [b"\xef\xbb\xbf{}", b'{"a":1,"a":2}', b'"\x01"', b'"\\ud800"', b"NaN", b"1e999",
                                  b"[1] x", b"\xff", b"[" * 33 + b"]" * 33, b"{'a':1}"])
def test_json_reader_refuses(data):
    with pytest.raises(flowbus.WireError) as error:
        flowbus.decode_json(data)
    assert error.value.reason == "malformed"


def test_nesting_limit():
    assert flowbus.decode_json(flowbus.encode_json(nested(32))) == nested(32)
    assert flowbus.decode_fbv(flowbus.encode_fbv(nested(32))) == nested(32)
    with pytest.raises(flowbus.WireError):
        flowbus.encode_fbv(nested(33))
    deep = b"\x06\x00\x00\x00\x01" * 33 + b"\x00"
    with pytest.raises(flowbus.WireError):
        flowbus.decode_fbv(deep)


@pytest.mark.parametrize("data", [b"", b"\x08", b"\x03\x00", b"\x05\x00\x00\x00\x05ab", b"\x06\xff\xff\xff\xff",
                                  b"\x00\x00", b"\x05\x00\x00\x00\x01\xff",
                                  b"\x07\x00\x00\x00\x02\x00\x01a\x00\x00\x01a\x00"])
def test_fbv_reader_refuses(data):
    with pytest.raises(flowbus.WireError):
        flowbus.decode_fbv(data)


def test_encoders_refuse_what_the_model_cannot_hold():
    for value in (2**63, {1: 2}, float("nan"), object()):
        with pytest.raises(flowbus.WireError):
            flowbus.encode_json(value)
    with pytest.raises(flowbus.WireError):
        flowbus.step_frames("s", "bad name", source="x#1", sequence=1)


def test_a_huge_value_is_quoted_short():
    with pytest.raises(flowbus.WireError) as error:
        flowbus.encode_json({"n": int("7" * 300)})
    message = str(error.value)
    assert "7" * 64 + "… (300 characters)" in message and "7" * 65 not in message


def refusal(frames):
    with pytest.raises(flowbus.WireError) as error:
        flowbus.decode(frames)
    return error.value.reason


def test_decode_refusals_carry_reason_codes():
    step = load_vector("step-moviePicked-json")
    env = bytearray(step[1])
    assert refusal(step[:1]) == "malformed"
    assert refusal(step + [b""] * 5) == "oversize"
    assert refusal([step[0], bytes([2]) + bytes(env[1:])] + step[2:]) == "unsupported-version"
    assert refusal([step[0], bytes(env[:1]) + bytes([99]) + bytes(env[2:])] + step[2:]) == "unknown-kind"
    assert refusal([step[0], bytes(env[:-1])] + step[2:]) == "malformed"  # source length mismatch
    assert refusal([b"action/movie-list"] + step[1:]) == "malformed"  # prefix does not match the kind
    assert refusal(step[:3]) == "malformed"  # 3 frames for a step
    assert refusal(step[:3] + [b"[1]"]) == "bad-params"
    assert refusal([step[0], bytes(env[:2]) + b"\x00" + bytes(env[3:]), step[2], step[3]]) == "bad-params"
    assert refusal([b"x" * 256] + step[1:]) == "oversize"
    diag = load_vector("diagnostic-unbound-stepper-json")
    assert refusal([b"diag/other"] + diag[1:]) == "malformed"  # reason differs from the topic id


def test_envelope_layout():
    env = flowbus.Envelope(kind=wire.ACK, sequence=15, source="flowd#1", timestamp_us=TS, message_id=MID)
    raw = env.encode()
    assert len(raw) == 37 + 7 and raw == load_vector("ack-movie-list")[1]
    assert flowbus.Envelope.decode(raw) == env
    assert struct.unpack(">Q", raw[4:12])[0] == 15


def updates(result):
    delivered, resync = result
    return [(u.sequence, u.value, u.is_snapshot) for u in delivered], resync


def test_clone_merger_queues_then_drops_up_to_the_snapshot():
    merger = CloneMerger()
    assert updates(merger.state(4, "d", "h")) == ([], False)
    assert updates(merger.state(5, "e", "h")) == ([], False)
    assert updates(merger.snapshot(4, "d", "h")) == ([(4, "d", True), (5, "e", False)], False)
    assert updates(merger.state(5, "e", "h")) == ([], False)  # duplicate
    assert updates(merger.state(6, "f", "h")) == ([(6, "f", False)], False)


def test_clone_merger_resynchronises_on_a_gap_and_a_new_host():
    merger = CloneMerger()
    merger.snapshot(0, "a", "h")
    assert updates(merger.state(2, "c", "h")) == ([], True)  # 1 was lost
    assert updates(merger.snapshot(2, "c", "h")) == ([(2, "c", True)], False)
    assert updates(merger.state(1, "x", "h2")) == ([], True)  # the host restarted
    assert updates(merger.snapshot(0, "y", "h2")) == ([(0, "y", True), (1, "x", False)], False)
    assert merger.resynchronisations == 2
    assert updates(merger.snapshot(1, "x", "h2")) == ([], False)  # unsolicited while synced


def test_trace_frame_decodes_and_round_trips():
    frames = load_vector("step-moviePicked-traced")
    step = flowbus.decode(frames)
    assert (step.traceparent, step.tracestate) == (TRACEPARENT, "congo=t61rcWkgMzE")
    assert step.trace_id == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert flowbus.encode(step) == frames
    assert flowbus.decode(frames[:4] + [b""]).traceparent == "", "an empty trace frame is no context"


@pytest.mark.parametrize("frame,reason", [
    (b"not a traceparent", "malformed"),
    (TRACEPARENT.upper().encode(), "malformed"),
    (b"ff" + TRACEPARENT[2:].encode(), "malformed"),
    (b"00-" + b"0" * 32 + TRACEPARENT[35:].encode(), "malformed"),
    (TRACEPARENT.encode() + b"\n" + b"a" * 1000, "oversize"),
])
def test_bad_trace_frames_are_refused(frame, reason):
    with pytest.raises(wire.WireError) as refused:
        flowbus.decode(load_vector("step-moviePicked-json") + [frame])
    assert refused.value.reason == reason


def test_trace_frames_only_on_the_kinds_that_carry_them():
    with pytest.raises(wire.WireError, match="frames"):
        flowbus.decode(load_vector("ack-movie-list") + [TRACEPARENT.encode()])
    with pytest.raises(wire.WireError):
        flowbus.step_frames("s", "go", source="s#1", sequence=1, traceparent="00-nope")
