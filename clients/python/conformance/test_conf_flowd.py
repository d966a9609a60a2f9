"""flowd: steps and deep links (§3.3, §4.3), heartbeats and peers (§4.3 HEARTBEAT), status (§4.3 STATUS)."""

import time

import pytest

import rawwire as w
from conftest import LONG_TAB_IDS
from scenario import T, Side, acks_of, details_name, settle, shape_errors, wait_ack

NAV_DONE = "nav/did/WatchedFlow"  # the last navigation of apiKeyIsComplete: the tabs' second flow


def navigate_to_dashboard(topo, events):
    peer = topo.peer(topo.ingress)
    source = w.new_source("apikey")
    peer.send(w.step("apikey", "apiKeyIsComplete", 1, source))
    wait_ack(peer, source, 1)
    events.seen_or_wait(lambda m: m.kind == w.DID_NAVIGATE and m.topic == NAV_DONE, T, "dashboard shown")
    return peer


def status(topo):
    peer = topo.peer(topo.control)
    peer.send(w.status_request(w.new_source("status")))
    reply = peer.until(lambda m: m.kind == w.STATUS_REPLY, T, "status reply")[-1]
    assert not shape_errors(reply), shape_errors(reply)
    body = reply.value(2)
    assert isinstance(body, dict), f"§4.3: the status reply is a JSON map: {body!r}"
    return body


def peer_entry(peers, source):
    """`peers` as a map keyed by source id, or a list of entries naming it (the document does not say which)."""
    if isinstance(peers, dict):
        return peers.get(source)
    return next((p for p in peers if isinstance(p, dict) and source in (p.get("source"), p.get("id"))), None)


def test_accepted_step_and_deep_link_republished_unchanged(topo):
    """§3.3: "flowd re-publishes every accepted step and deep link on `events` unchanged" (JSON and FBV params)."""
    events = topo.sub(topo.events, ["step/", "deeplink/"])
    peer = topo.peer(topo.ingress)
    source = w.new_source("unchanged")
    sent = [w.step("apikey", "apiKeyIsComplete", 1, source, {"b": [1, 2.5, None], "a": "\u00e9"}, w.FBV),
            w.step("dashboard", "watchedTab", 2, source, {"withMovieId": 23452}, w.JSON),
            w.deeplink("moviePicked", 3, source, {"withMovieId": 7}, w.JSON)]
    for frames in sent:
        peer.send(frames)
    wait_ack(peer, source, 3)
    got = events.until(lambda m: m.source == source and m.seq == 3, T, "the deep link re-published")
    assert [m.frames for m in got if m.source == source] == sent


def test_navigation_params_written_by_flowd(topo):
    """§4.3 WILL/DID-NAVIGATE frame 4 and §5.2: flowd writes the params of its navigation events itself — keys sorted
    (MUST), no whitespace, only `"`, `\\` and controls escaped, doubles with `.` or an exponent — whatever the step's JSON
    sender wrote; the step itself is re-published unchanged (§3.3)."""
    events = topo.sub(topo.events, ["step/", "nav/"])
    peer = topo.peer(topo.ingress)
    source = w.new_source("apikey")
    sent = w.step("apikey", "apiKeyIsComplete", 1, source, rb'{"q":"caf\u00e9", "p":"a\/b","s":1E2,"n":-0}')
    peer.send(sent)
    wait_ack(peer, source, 1)
    events.seen_or_wait(lambda m: m.topic == "nav/did/MainFlow", T, "didNavigate apiKeyIsComplete")
    assert [m.frames for m in events.seen if m.source == source] == [sent], "§3.3: the step re-published unchanged"
    navigations = [m for m in events.seen if m.topic in ("nav/will/MainFlow", "nav/did/MainFlow")]
    assert len(navigations) == 2, navigations
    for m in navigations:
        assert not shape_errors(m), (m, shape_errors(m))
        assert m.frames[4] == '{"n":0,"p":"a/b","q":"café","s":100.0}'.encode(), m.frames[4]


def test_navigation_publishes_will_then_commands_then_did(topo):
    """§3.3: "For each navigation, flowd publishes willNavigate, then the navigation commands, then didNavigate";
    §4.3: flow name frame = topic id, step name, params, valid verbs and presentable kinds."""
    events = topo.sub(topo.events, ["nav/", "cmd/"])
    navigate_to_dashboard(topo, events)
    open_by_flow, done = {}, []
    for m in events.seen:
        if m.kind == w.HEARTBEAT:
            continue
        assert not shape_errors(m), (m, shape_errors(m))
        flow = m.topic_id
        if m.kind == w.WILL_NAVIGATE:
            assert flow not in open_by_flow, f"§3.3: a second willNavigate before didNavigate: {m}"
            open_by_flow[flow] = m.frames[3]
        elif m.kind == w.NAV_COMMAND:
            assert flow in open_by_flow, f"§3.3: a command outside willNavigate..didNavigate: {m}"
        elif m.kind == w.DID_NAVIGATE:
            assert open_by_flow.pop(flow, None) == m.frames[3], f"§3.3: didNavigate without its willNavigate: {m}"
            done.append((flow, m.frames[3].decode()))
    assert ("MainFlow", "apiKeyIsComplete") in done and ("WishlistFlow", "movieList") in done, done
    assert ("WatchedFlow", "movieList") in done and not open_by_flow, (done, open_by_flow)
    assert any(m.kind == w.NAV_COMMAND for m in events.seen), "a tabs navigation has commands"


def test_end_of_a_flow_is_a_command_of_its_navigation(topo):
    """§3.3: "willNavigate, then the navigation commands for the renderers, then didNavigate", the `end` of the flow a
    navigation ends included. WishlistFlow's `close` ends it (`end: wishlistClosed`, handled by MainFlow)."""
    events = topo.sub(topo.events, ["nav/", "cmd/"])
    peer = navigate_to_dashboard(topo, events)
    source = w.new_source("wishlist")
    peer.send(w.step("wishlist/movies", "close", 1, source))
    wait_ack(peer, source, 1)
    events.until(lambda m: m.topic == "nav/did/MainFlow" and m.frames[3] == b"wishlistClosed", T, "wishlistClosed")
    trace = [(m.topic, m.frames[2] if m.kind == w.NAV_COMMAND else m.frames[3]) for m in events.seen
             if m.kind in (w.WILL_NAVIGATE, w.DID_NAVIGATE, w.NAV_COMMAND)]
    will, did = ("nav/will/WishlistFlow", b"close"), ("nav/did/WishlistFlow", b"close")
    end = ("cmd/WishlistFlow", b"end")
    assert will in trace and did in trace and end in trace, trace
    assert trace.index(will) < trace.index(end) < trace.index(did), f"§3.3: `end` outside its navigation: {trace}"


def test_tabs_rule_tells_renderers_the_tabs_in_order(topo):
    """§4.3 NAVIGATION-COMMAND: `setTabs` gives a tab bar's tab ids in order (frame 4, joined by `,`); a container
    shown with what it already holds is followed by the commands that build it. MainFlow's `tabs:` rule puts tab bar
    `dashboard` in stack `main`, then sets its tabs: WishlistFlow's `wishlist`, WatchedFlow's `watched`."""
    events = topo.sub(topo.events, ["nav/", "cmd/"])
    navigate_to_dashboard(topo, events)
    commands = [m.frames[2:] for m in events.seen if m.kind == w.NAV_COMMAND and m.topic == "cmd/MainFlow"]
    placed, tabs = [b"setRoot", b"dashboard", b"main", b"tabs"], [b"setTabs", b"dashboard", b"wishlist,watched", b"tabs"]
    assert placed in commands, f"§4.3: the tab bar is put in MainFlow's stack: {commands}"
    assert tabs in commands, f"§4.3: a renderer learns the tabs, in order (setTabs): {commands}"
    assert commands.index(placed) < commands.index(tabs), commands


def test_set_tabs_lists_every_tab_id_however_long_the_list(topo):
    """§4.3 NAVIGATION-COMMAND frame 4: each tab id is 1 to 255 bytes, and `setTabs` lists them all, joined by `,`,
    however long the list: a tab bar whose ids join past 255 bytes is published like any other. MainFlow's
    `longTabs` sets three tabs of 100-byte ids."""
    events = topo.sub(topo.events, ["cmd/MainFlow"])
    peer = topo.peer(topo.ingress)
    source = w.new_source("apikey")
    peer.send(w.step("apikey", "longTabs", 1, source))
    wait_ack(peer, source, 1)
    got = events.until(lambda m: m.kind == w.NAV_COMMAND and m.frames[2] == b"setTabs", T, "setTabs")
    frames = got[-1].frames
    joined = ",".join(LONG_TAB_IDS).encode()
    assert frames[3] == b"longbar" and frames[4] == joined, f"§4.3: every tab, in order: {frames[3:5]}"
    assert len(frames[4]) > 255
    assert not shape_errors(got[-1]), shape_errors(got[-1])


def expect_flow_refusal(topo, events, peer, frames, source, seq, reason):
    """§3.3: a step read but not applied is acknowledged, without a diagnostic to the sender, and its diagnostic is
    published on `events` only, after the step's re-publication and before the next heartbeat."""
    peer.send(frames)
    replies = wait_ack(peer, source, seq) + settle(Side("ingress", topo), peer)
    assert not [m for m in replies if m.kind == w.DIAGNOSTIC and details_name(m, source, seq)], \
        f"§3.3: the {reason} diagnostic goes to `events` only: {replies}"
    got = events.until(lambda m: m.is_diag(reason) and details_name(m, source, seq), T, f"diag/{reason}")
    republished = [i for i, m in enumerate(got) if m.source == source and m.seq == seq and m.kind == w.STEP]
    assert republished, f"§3.3: the step is re-published before its diagnostic: {got}"
    between = got[republished[0] + 1:-1]
    assert not [m for m in between if m.kind == w.HEARTBEAT], f"§3.3: diagnostic after the next heartbeat: {got}"
    diag = got[-1]
    topic = frames[0].decode()[:64]  # §8: the reference cuts the topic it quotes to 64 characters
    assert not shape_errors(diag) and diag.details.get("topic") == topic, diag.details


def test_unbound_stepper_acknowledged_and_refused_on_events(topo):
    """§3.3, §4.3 reason `unbound-stepper`: "a step from a stepper no flow contribution binds"."""
    events = topo.sub(topo.events, ["step/", "diag/"])
    source = w.new_source("nobody")
    expect_flow_refusal(topo, events, topo.peer(topo.ingress), w.step("nobody", "apiKeyIsComplete", 1, source),
                        source, 1, "unbound-stepper")


def test_flow_refusal_quotes_a_long_topic_cut(topo):
    """§8: "the reference implementation truncates quoted input to 64 characters", in flow refusals too; `source` and
    `sequence` still name the step."""
    events = topo.sub(topo.events, ["step/", "diag/"])
    source = w.new_source("nobody")
    stepper = "nobody/" + "x" * 200
    expect_flow_refusal(topo, events, topo.peer(topo.ingress), w.step(stepper, "apiKeyIsComplete", 1, source),
                        source, 1, "unbound-stepper")


def test_unknown_step_acknowledged_and_refused_on_events(topo):
    """§3.3, §4.3 reason `unknown-step`: "the flow does not handle this step"."""
    events = topo.sub(topo.events, ["step/", "diag/"])
    source = w.new_source("apikey")
    expect_flow_refusal(topo, events, topo.peer(topo.ingress), w.step("apikey", "noSuchStep", 1, source),
                        source, 1, "unknown-step")


@pytest.mark.parametrize("event,reason", [("disappeared", "not-visible"), ("dismissed", "dismissed")])
def test_step_of_hidden_presentable_refused_on_events(topo, event, reason):
    """§3.3, §4.3 reasons `not-visible` / `dismissed`, after a renderer's presentableReport (kind 15) about the
    stepper's presentable."""
    events = topo.sub(topo.events, ["step/", "diag/"])
    peer = topo.peer(topo.ingress)
    source = w.new_source("renderer")
    peer.send(w.presentable_report("apikey", event, 1, source))
    replies = wait_ack(peer, source, 1)
    assert not [m for m in replies if m.kind == w.DIAGNOSTIC], replies
    expect_flow_refusal(topo, events, peer, w.step("apikey", "apiKeyIsComplete", 2, source), source, 2, reason)


def test_report_about_unknown_presentable(topo):
    """§4.3 reason `unknown-presentable`: "a renderer reported about a presentable id that is not in the tree";
    the report is dealt with, hence acknowledged (§4.4)."""
    events = topo.sub(topo.events, ["diag/"])
    peer = topo.peer(topo.ingress)
    source = w.new_source("renderer")
    peer.send(w.presentable_report("no-such-presentable", "appeared", 1, source))
    wait_ack(peer, source, 1)
    diag = events.until(lambda m: m.is_diag("unknown-presentable"), T, "diag/unknown-presentable")[-1]
    assert not shape_errors(diag), shape_errors(diag)
    assert details_name(diag, source, 1) and diag.details.get("topic") == "present/no-such-presentable", \
        f"§3.3/§4.4: a diagnostic names the refused message (`source`, `sequence`, `topic`): {diag.details}"


def test_deep_link_delivered_to_every_active_flow(topo):
    """§4.3 DEEPLINK: "flowd delivers a deep link to every active flow"; acknowledged and re-published."""
    events = topo.sub(topo.events)
    peer = navigate_to_dashboard(topo, events)
    source = w.new_source("tool")
    link = w.deeplink("moviePicked", 1, source, {"withMovieId": 7})
    peer.send(link)
    wait_ack(peer, source, 1)
    flows = {"MainFlow", "WishlistFlow", "WatchedFlow"}
    got = events.until(lambda m: m.kind == w.DID_NAVIGATE and m.frames[3] == b"moviePicked" and
                       {x.topic_id for x in events.seen if x.kind == w.DID_NAVIGATE and x.frames[3] == b"moviePicked"}
                       >= flows, T, f"didNavigate moviePicked in each of {flows}")
    assert [m.frames for m in got if m.source == source] == [link], "§3.3: the deep link re-published unchanged"


def test_heartbeat_to_ingress_answered(flowd_only):
    """§4.3 HEARTBEAT: a client heartbeat (sequence 0) is answered with a heartbeat of flowd's own to that peer,
    `hb/` + flowd's source, numbered from flowd's ingress sequence; not acknowledged."""
    topo = flowd_only
    peer = topo.peer(topo.ingress)
    source = w.new_source("client")
    peer.send(w.heartbeat(source))
    replies = peer.until(lambda m: m.kind == w.HEARTBEAT, T, "heartbeat answer") + settle(Side("ingress", topo), peer)
    answer = replies[0]
    assert answer.kind == w.HEARTBEAT and not shape_errors(answer), (answer, shape_errors(answer))
    assert answer.source == topo.ready_status.source and answer.seq == 1, answer
    assert not acks_of(replies, source), replies


def test_heartbeats_published_on_events(topo):
    """§4.3 HEARTBEAT: flowd publishes `hb/<source>` on `events`; the topic id equals the envelope's source."""
    events = topo.sub(topo.events, ["hb/"])
    beats = events.until(lambda m: len(events.seen) >= 3, T, "three heartbeats")
    for m in beats:
        assert m.kind == w.HEARTBEAT and not shape_errors(m), (m, shape_errors(m))
        assert m.source == topo.ready_status.source, m


def test_status_reply(topo):
    """§4.3 STATUS: the reply is kind 14 on topic `status`, JSON (content type 1), a map with `metrics`
    (and `metrics.prometheus` text when exported) and `peers` (each with `alive`, `heartbeats`, `silent_ms`,
    `role`); a DEALER on `control` needs no delimiter frame (§3.2)."""
    peer = topo.peer(topo.ingress)
    source = w.new_source("stepper")
    peer.send(w.heartbeat(source))
    peer.until(lambda m: m.kind == w.HEARTBEAT, T, "heartbeat answer")
    body = status(topo)
    assert isinstance(body.get("metrics"), dict), f"§4.3: `metrics` map: {sorted(body)}"
    if "prometheus" in body["metrics"]:
        assert isinstance(body["metrics"]["prometheus"], str)
    entry = peer_entry(body.get("peers", {}), source)
    assert isinstance(entry, dict), f"§4.3: a source that sent a heartbeat is under `peers`: {body.get('peers')}"
    for key in ("alive", "heartbeats", "silent_ms", "role"):
        assert key in entry, f"§4.3: peer entry lacks {key}: {entry}"
    assert entry["alive"] is True, entry


def status_with(topo, params, content_type=w.JSON):
    """A status request with a params frame (§4.3: 2 or 3 frames); the reply or diagnostic it got."""
    peer = topo.peer(topo.control)
    source = w.new_source("status")
    peer.send([b"status", w.envelope(w.STATUS_REQUEST, 1, source, content_type), w.encode_value(content_type, params)])
    reply = peer.until(lambda m: m.kind in (w.STATUS_REPLY, w.DIAGNOSTIC), T, "status reply or refusal")[-1]
    assert not shape_errors(reply), shape_errors(reply)
    return reply


@pytest.mark.parametrize("content_type", [w.JSON, w.FBV], ids=["json", "fbv"])
def test_status_request_params_sections_and_pages(flowd_only, content_type):
    """§4.3 STATUS-REQUEST: an optional params frame; `sections` chooses the lists, `[]` the summary alone;
    `peers: {offset, limit, prefix}` one page by source id, with `pages.peers` `{offset, limit, matching, next}`."""
    topo = flowd_only
    peer = topo.peer(topo.ingress)
    sources = [f"pages-{index:02d}#{w.new_source('x')[-4:]}" for index in range(12)]
    for source in sources:
        peer.send(w.heartbeat(source))
    peer.until(lambda m: m.kind == w.HEARTBEAT, T, "heartbeat answer")
    settle(Side("ingress", topo), peer)
    summary = status_with(topo, {"sections": []}, content_type)
    assert summary.kind == w.STATUS_REPLY, summary
    body = summary.value(2)
    assert "peers" not in body and "flows" not in body, f"§4.3: `sections: []` is the summary alone: {sorted(body)}"
    assert body.get("peers_total", 0) >= 12 and "ingress" in body, sorted(body)
    reply = status_with(topo, {"sections": ["peers"], "peers": {"prefix": "pages-", "offset": 5, "limit": 4}}, content_type)
    body = reply.value(2)
    assert sorted(body["peers"]) == sorted(sources)[5:9], body["peers"]
    assert "flows" not in body and "bindings" not in body, sorted(body)
    assert body["pages"]["peers"] == {"offset": 5, "limit": 4, "matching": 12, "next": 9}, body["pages"]
    last = status_with(topo, {"sections": ["peers"], "peers": {"prefix": "pages-", "offset": 9}}, content_type).value(2)
    assert len(last["peers"]) == 3 and last["pages"]["peers"]["next"] is None, last["pages"]


def test_status_request_pages_flows_and_bindings(topo):
    """§4.3 STATUS-REQUEST: `flows` (pre-order) and `bindings` (by stepper id, then flow) are pages too,
    1,000 entries by default, each with its `pages` entry."""
    whole = status_with(topo, {}).value(2)
    flows, bindings = whole["flows"], whole["bindings"]
    assert whole["pages"]["flows"] == {"offset": 0, "limit": 1000, "matching": len(flows), "next": None}, whole["pages"]
    assert len(flows) == whole["flows_total"] >= 1 and len(bindings) == whole["bindings_total"] >= 2, whole
    order = [(b["stepper"], b["flow"]) for b in bindings]
    assert order == sorted(order), f"§4.3: bindings by stepper id, then flow: {order}"
    one = status_with(topo, {"sections": ["bindings"], "bindings": {"offset": 1, "limit": 1}}).value(2)
    assert one["bindings"] == bindings[1:2] and "flows" not in one, one
    assert one["pages"]["bindings"] == {
        "offset": 1, "limit": 1, "matching": len(bindings), "next": 2 if len(bindings) > 2 else None}, one["pages"]
    prefix = bindings[-1]["stepper"]
    matching = [b for b in bindings if b["stepper"].startswith(prefix)]
    filtered = status_with(topo, {"sections": ["bindings"], "bindings": {"prefix": prefix}}).value(2)
    assert filtered["bindings"] == matching and filtered["pages"]["bindings"]["matching"] == len(matching), filtered
    past = status_with(topo, {"sections": ["flows"], "flows": {"offset": len(flows)}}).value(2)
    assert past["flows"] == [] and past["pages"]["flows"]["next"] is None, past


def test_status_request_bad_params_refused(flowd_only):
    """§4.3 STATUS-REQUEST: "refuse a known key with a wrong value as `bad-params`"; unknown keys are ignored."""
    refused = status_with(flowd_only, {"sections": ["nope"]})
    assert refused.is_diag("bad-params"), refused
    assert status_with(flowd_only, {"colour": "blue"}).kind == w.STATUS_REPLY


def test_control_refusals_name_the_request(flowd_only):
    """§7: a refusal names the refused message's `source`, `topic` and `sequence` when they could be read — on
    `control` as on `ingress`: a request under the wrong topic and one of an unknown kind carry all three; one of
    another version, whose envelope is not read, its topic."""
    topo = flowd_only
    control = topo.peer(topo.control)
    source = w.new_source("ctl")
    control.send([b"status/x", w.envelope(w.STATUS_REQUEST, 7, source)])
    wrong_topic = control.until(lambda m: m.is_diag(), T, "the refusal of a request under the wrong topic")[-1]
    assert wrong_topic.reason in ("malformed", "unknown-kind"), wrong_topic
    assert wrong_topic.details["endpoint"] == "control", wrong_topic.details
    assert wrong_topic.details["source"] == source and wrong_topic.details["sequence"] == 7, wrong_topic.details
    assert wrong_topic.details["topic"] == "status/x", wrong_topic.details
    control.send(w.heartbeat(source, sequence=8))
    unknown = control.until(lambda m: m.is_diag("unknown-kind"), T, "the refusal of a heartbeat on control")[-1]
    assert unknown.details["source"] == source and unknown.details["sequence"] == 8, unknown.details
    assert unknown.details["topic"] == f"hb/{source}", unknown.details
    control.send(w.status_request(source, sequence=9, version=2))
    other = control.until(lambda m: m.is_diag("unsupported-version"), T, "the refusal of a version-2 request")[-1]
    assert other.details["topic"] == "status" and "sequence" not in other.details, other.details


def test_status_flood_is_rate_limited(flowd_only):
    """§4.3 STATUS: past `burst` requests at once a peer is refused with `rate-limited` (`retry_after_ms`) or
    dropped unanswered; a step sent meanwhile is still acknowledged."""
    topo = flowd_only
    control = topo.peer(topo.control)
    source = w.new_source("flood")
    for sequence in range(1, 1001):
        control.send(w.status_request(source, sequence))
    stepper = topo.peer(topo.ingress)
    stepped = w.new_source("stepper")
    stepper.send(w.step("apikey", "apiKey", 1, stepped))
    wait_ack(stepper, stepped, 1)
    replies = control.until(lambda m: m.is_diag("rate-limited"), T, "rate-limited refusal")
    refusal = replies[-1]
    assert isinstance(refusal.details.get("retry_after_ms"), int) and refusal.details["retry_after_ms"] > 0, refusal.details
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        message = control.recv(0.2)
        if message is not None:
            replies.append(message)
    answered = [m for m in replies if m.kind == w.STATUS_REPLY]
    assert len(answered) < 1000, "§4.3: not every request of the flood is answered"


def test_reactor_host_judged_by_its_heartbeats(topo):
    """§4.3 HEARTBEAT: flowd subscribes to `hb/` on each configured host's `states` and lists it under `peers`
    with role `reactor-host <name>`."""
    deadline = time.monotonic() + T
    while True:
        entry = peer_entry(status(topo).get("peers", {}), topo.host_source)
        if entry is not None or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert entry is not None, f"reactor host {topo.host_source} not under `peers`"
    assert entry.get("role") == "reactor-host demo" and entry.get("alive") is True, entry


def test_silent_stepper_reported_peer_dead(topo):
    """§4.3 HEARTBEAT: after `heartbeatLiveness` intervals of silence flowd publishes `peer-dead` (details `source`,
    `silent_ms`, `role`) and shows the source not alive under `peers`."""
    events = topo.sub(topo.events, ["diag/"])
    peer = topo.peer(topo.ingress)
    source = w.new_source("silent")
    peer.send(w.heartbeat(source))  # then silence
    got = events.until(lambda m: m.is_diag("peer-dead") and m.details.get("source") == source, 10,
                       "diag/peer-dead")
    details = got[-1].details
    assert isinstance(details.get("silent_ms"), int) and isinstance(details.get("role"), str), details
    entry = peer_entry(status(topo).get("peers", {}), source)
    assert entry is not None and entry.get("alive") is False, entry


def test_every_message_flowd_sends_is_well_formed(topo):
    """§4.1–§4.3: frame counts, topics matching kinds, flags 0 on send, reason = topic id, details with `message`,
    flow name = topic id, verbs and kinds, heartbeat topic = source, 8-byte acks, JSON status replies."""
    events = topo.sub(topo.events)
    peer = navigate_to_dashboard(topo, events)
    source = w.new_source("shapes")
    peer.send(w.step("nobody", "x", 1, source))
    peer.send(w.step("nobody", "x", 2, source, params=b"[1]"))
    peer.send(w.step("nobody", "x", 4, source))
    peer.send(w.heartbeat(source))
    peer.until(lambda m: m.is_diag("out-of-order"), T, "out-of-order")
    settle(Side("ingress", topo), peer)
    status(topo)
    events.until(lambda m: m.is_diag("unbound-stepper"), T, "diag/unbound-stepper")
    events.until(lambda m: m.kind == w.HEARTBEAT, T, "heartbeat")
    flowd = topo.ready_status.source
    sent = [m for m in events.seen + peer.seen if m.source == flowd]
    assert {m.kind for m in sent} >= {w.WILL_NAVIGATE, w.DID_NAVIGATE, w.NAV_COMMAND, w.DIAGNOSTIC, w.ACK,
                                       w.HEARTBEAT}, {m.kind for m in sent}
    bad = [(m, shape_errors(m)) for m in sent if shape_errors(m)]
    assert not bad, bad
