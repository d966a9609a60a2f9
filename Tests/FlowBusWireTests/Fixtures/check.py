#!/usr/bin/env python3
"""Independent check of the FlowBus golden vectors (protocol v1), in plain Python.

Builds the representative messages from the spec alone (struct.pack, json.dumps) and compares
them with the .hex files; then parses every .hex file's envelope. Run: python3 check.py
"""
import json, pathlib, struct, sys

HERE = pathlib.Path(__file__).parent
TS = 1_700_000_000_000_000
MID = bytes.fromhex("00112233445566778899aabbccddeeff")

def envelope(kind, ctype, seq, source):
    s = source.encode()
    return struct.pack(">BBBBQq16sB", 1, kind, ctype, 0, seq, TS, MID, len(s)) + s

def fjson(value):  # deterministic JSON as FlowBus writes it (ints, strings, bools, integral doubles here)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()

def fbv(value):
    if value is None: return b"\x00"
    if value is False: return b"\x01"
    if value is True: return b"\x02"
    if isinstance(value, int): return b"\x03" + struct.pack(">q", value)
    if isinstance(value, float): return b"\x04" + struct.pack(">d", value)
    if isinstance(value, str): b = value.encode(); return b"\x05" + struct.pack(">I", len(b)) + b
    if isinstance(value, list): return b"\x06" + struct.pack(">I", len(value)) + b"".join(map(fbv, value))
    items = sorted((k.encode(), v) for k, v in value.items())
    return b"\x07" + struct.pack(">I", len(items)) + b"".join(struct.pack(">H", len(k)) + k + fbv(v) for k, v in items)

def load(name):
    return [bytes.fromhex(line) for line in (HERE / f"{name}.hex").read_text().split("\n")[:-1]]

state = {"value": 3, "isLoading": False, "label": "três"}
expected = {
    "step-moviePicked-json": [b"step/movie-list", envelope(1, 1, 1, "movie-list#5f3a"), b"moviePicked", fjson({"withMovieId": 23452})],
    "step-moviePicked-fbv": [b"step/movie-list", envelope(1, 2, 1, "movie-list#5f3a"), b"moviePicked", fbv({"withMovieId": 23452})],
    "step-settings-noparams": [b"step/movie-list", envelope(1, 0, 2, "movie-list#5f3a"), b"settings", b""],
    "action-increase-json": [b"action/counter", envelope(3, 1, 7, "counter-view#a1"), b"increase", fjson({"by": 1})],
    "state-counter-fbv": [b"state/counter", envelope(4, 2, 3, "counter-host#77"), fbv(state)],
    "snapshot-counter-json": [b"state/counter", envelope(6, 1, 3, "counter-host#77"), fjson(state)],
    "didNavigate-movies-json": [b"nav/did/movies", envelope(8, 1, 12, "flowd#1"), b"movies", b"moviePicked",
                                fjson({"withMovieId": 23452}), b"movie/23452"],
    "didNavigate-searched-json": [b"nav/did/movies", envelope(8, 1, 18, "flowd#1"), b"movies", b"searched",
                                  fjson({"q": "café", "p": "a/b", "s": 100.0, "n": 0}), b"movies/search"],
    "navigationCommand-push": [b"cmd/movies", envelope(9, 0, 13, "flowd#1"), b"push", b"movie/23452", b"movies-stack", b"screen"],
    "navigationCommand-setTabs": [b"cmd/MainFlow", envelope(9, 0, 17, "flowd#1"), b"setTabs", b"dashboard",
                                  b",".join([b"wishlist", b"watched"]), b"tabs"],
    "diagnostic-unbound-stepper-json": [b"diag/unbound-stepper", envelope(10, 1, 14, "flowd#1"), b"unbound-stepper",
        fjson({"message": "stepper movie-list is not bound to a flow", "source": "movie-list#5f3a", "sequence": 1,
               "stepper": "movie-list", "topic": "step/movie-list"})],
    "ack-movie-list": [b"ack/movie-list#5f3a", envelope(11, 0, 15, "flowd#1"), struct.pack(">Q", 2)],
    "heartbeat-flowd": [b"hb/flowd#1", envelope(12, 0, 16, "flowd#1")],
    # §4.5: the trace frame is the traceparent, then a line feed and the tracestate when there is one.
    "step-moviePicked-traced": [b"step/movie-list", envelope(1, 1, 3, "movie-list#5f3a"), b"moviePicked",
                                fjson({"withMovieId": 23452}),
                                b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\ncongo=t61rcWkgMzE"],
    "didNavigate-movies-traced": [b"nav/did/movies", envelope(8, 1, 19, "flowd#1"), b"movies", b"moviePicked",
                                  fjson({"withMovieId": 23452}), b"movie/23452",
                                  b"00-4bf92f3577b34da6a3ce929d0e0e4736-b7ad6b7169203331-01"],
}
# §4.6: a replay request's params, and a reply packing two of the messages above as events 13 and 19.
expected["replayRequest-json"] = [b"replay", envelope(16, 1, 1, "echo#9"),
                                  fjson({"since": 12, "topics": ["nav/did/"], "limit": 1000})]

def packed(sequence, frames):
    return struct.pack(">QB", sequence, len(frames)) + b"".join(struct.pack(">I", len(f)) + f for f in frames)

expected["replay-json"] = [b"replay", envelope(17, 1, 2, "flowd#1"),
                           fjson({"since": 12, "last": 19, "head": 20, "oldest": 1, "count": 2, "more": False}),
                           packed(13, expected["step-moviePicked-json"]) + packed(19, expected["didNavigate-movies-traced"])]

failed = 0
# §4.3/§5.2: flowd writes a step's params again, whatever its JSON sender wrote.
received = json.loads(r'{"q":"caf\u00e9","p":"a\/b","s":1E2,"n":-0}')
if fjson(received) != expected["didNavigate-searched-json"][4]:
    failed += 1
    print("MISMATCH didNavigate-searched-json: not the received params written again")
for name, frames in expected.items():
    if load(name) != frames:
        failed += 1
        print(f"MISMATCH {name}")
for path in sorted(HERE.glob("*.hex")):
    frames = load(path.stem)
    env = frames[1]
    version, kind, ctype, flags, seq, ts, mid, n = struct.unpack(">BBBBQq16sB", env[:37])
    assert version == 1 and len(env) == 37 + n and ts == TS and mid == MID, path.name
    print(f"ok {path.stem}: topic={frames[0].decode()} kind={kind} content={ctype} seq={seq} source={env[37:].decode()}")
sys.exit(1 if failed else 0)
