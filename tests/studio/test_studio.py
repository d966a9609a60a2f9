"""FlowBus Studio in headless Chromium against a live demo topology, and over the Foxglove
WebSocket protocol (foxglove.websocket.v1) with a client written from its specification."""
import json
import signal
import struct
import subprocess
import time

import pytest

from conftest import artifacts_dir

WAIT = 15


def wait_until(check, what, timeout=WAIT):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
        except Exception:  # the page may be re-rendering between two reads
            pass
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def shot(browser, name):
    path = artifacts_dir() / f"{name}.png"
    browser.save_screenshot(str(path))
    return path


def node(browser, presentable):
    return browser.find_element("css selector", f'#tree .node[data-id="{presentable}"]')


def click_step(browser, presentable, step):
    """Clicks a declared step's button, again if the page re-rendered the tree under the click."""
    def attempt():
        node(browser, presentable).find_element("css selector", f'button[data-step="{step}"]').click()
        return True
    wait_until(attempt, f"a click on {step} of {presentable}")


def timeline_text(browser):
    return browser.find_element("id", "timeline").text


def open_page(browser, topology, fresh=True):
    browser.get(topology.url)
    wait_until(lambda: browser.find_element("id", "connection").text == "connected", "the page's WebSocket")
    if fresh:
        wait_until(lambda: node(browser, "apikey").get_attribute("data-visible") == "true", "the api key screen, visible")


def test_step_from_the_page_changes_tree_and_timeline(topology, browser):
    open_page(browser, topology)
    shot(browser, "1-start")
    click_step(browser, "apikey", "apiKeyIsComplete")
    wait_until(lambda: node(browser, "dashboard"), "the dashboard tabs in the tree")
    wait_until(lambda: "apiKeyIsComplete" in timeline_text(browser) and "didNavigate" in timeline_text(browser), "didNavigate in the timeline")
    # Read through wait_until: the tree may re-render between finding the node and its tab.
    wait_until(lambda: node(browser, "dashboard").find_element("css selector", ".tab.selected").text == "wishlist",
               "the wishlist tab drawn selected")
    wait_until(lambda: node(browser, "watched/movies").get_attribute("data-visible") == "false", "the hidden tab drawn invisible")
    wait_until(lambda: "invisible" in node(browser, "watched/movies").get_attribute("class"),
               "the hidden tab styled invisible")
    shot(browser, "2-after-step")


def test_action_shows_state_and_diff(topology, browser):
    open_page(browser, topology)
    counter = '.reactor[data-reactor="counter"]'

    def state_text():
        # Read in one go, found again on each try: a new state re-renders the card between two reads.
        text = browser.find_element("css selector", f"{counter} pre.state").text
        return text if "value" in text else None
    before = wait_until(state_text, "the counter's snapshot")

    def send_increase():
        # Found again on each try: a new state re-renders the card under the click.
        card = browser.find_element("css selector", counter)
        name = card.find_element("css selector", ".action-name")
        name.clear()
        name.send_keys("increase")
        card.find_element("css selector", ".action-send").click()
        return True
    wait_until(send_increase, "a click on the counter's send")

    def changed():
        card = browser.find_element("css selector", '.reactor[data-reactor="counter"]')
        return '"value": 1' in card.find_element("css selector", "pre.state").text and "→" in card.find_element("css selector", ".diff").text
    wait_until(changed, "the new counter state with its diff")
    assert before != wait_until(state_text, "the counter's state after the action")
    assert "✓" in browser.find_element("id", "publish-result").text
    shot(browser, "3-action")


def test_refused_step_shows_its_reason(topology, browser):
    open_page(browser, topology)
    click_step(browser, "apikey", "apiKeyIsComplete")
    wait_until(lambda: node(browser, "watched/movies"), "the watched tab's list")
    # The watched tab is not selected: its list is not visible, so flowd drops the step (not-visible).
    browser.find_element("id", "step-params").send_keys("withMovieId=7")
    click_step(browser, "watched/movies", "moviePicked")
    # Its text, read at once: the timeline re-renders as events come.
    refusal = wait_until(lambda: [li.text for li in browser.find_elements("css selector", "#timeline li.refusal") if "not-visible" in li.text],
                         "the not-visible refusal in the timeline")[0]
    assert "watched/movies" in refusal and "moviePicked" in refusal, refusal
    # The page says what became of its own step, as flowctl does.
    wait_until(lambda: "refused: not-visible" in browser.find_element("id", "publish-result").text, "the step's outcome")
    browser.find_element("id", "filter-reason").send_keys("not-visible")
    wait_until(lambda: all("not-visible" in li.text for li in browser.find_elements("css selector", "#timeline li")), "the reason filter")
    shot(browser, "4-refusal")


def test_a_traced_step_and_its_navigation_show_their_trace_id(topology, browser):
    """docs/TRACING.md: the timeline shows the trace a message belongs to (PROTOCOL.md 4.5)."""
    open_page(browser, topology)
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    env = dict(topology.env, TRACEPARENT=f"00-{trace_id}-00f067aa0ba902b7-01")
    done = subprocess.run([str(topology.bin / "flowctl"), "step", "apiKeyIsComplete", "--as", "apikey"],
                          env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    traced = wait_until(lambda: {li.get_attribute("data-kind") for li in browser.find_elements("css selector", "#timeline li")
                                 if trace_id in li.text} >= {"step", "willNavigate", "didNavigate", "command"} or None,
                        "the step and its navigation with their trace id")
    assert traced
    shot(browser, "4-trace-id")


def test_clicking_an_event_shows_the_tree_after_it(topology, browser):
    open_page(browser, topology)
    click_step(browser, "apikey", "apiKeyIsComplete")
    wait_until(lambda: node(browser, "dashboard"), "the dashboard")
    # The tree after an event is the first status the studio reads after it (docs/STUDIO.md): let
    # that read happen before the next step, as a person clicking would.
    wait_until(lambda: "applied" in browser.find_element("id", "publish-result").text, "the first step applied")
    time.sleep(0.5)
    click_step(browser, "dashboard", "settings")
    wait_until(lambda: node(browser, "settings/list").get_attribute("data-visible") == "true", "settings presented")
    def click_first():
        [li for li in browser.find_elements("css selector", '#timeline li[data-kind="didNavigate"]') if "apiKeyIsComplete" in li.text][-1].click()
        return True
    wait_until(click_first, "a click on the didNavigate of apiKeyIsComplete")
    wait_until(lambda: not browser.find_elements("css selector", '#tree .node[data-id="settings/list"]'), "the tree before settings")
    assert "right after event" in browser.find_element("id", "tree-note").text
    shot(browser, "5-tree-after-event")


def test_recording_scrubs(topology, browser, tmp_path):
    path = tmp_path / "journey.fbrec"
    recorder = subprocess.Popen([str(topology.bin / "flowctl"), "record", str(path)], env=topology.env, cwd=topology.run_dir,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wait_until(lambda: "recording to" in recorder.stdout.readline(), "the recorder's subscriptions")
    topology.flowctl("step", "apiKeyIsComplete", "--as", "apikey")
    topology.flowctl("step", "settings", "--as", "dashboard")
    topology.flowctl("action", "counter", "increase")
    # The counter answers after a delay: record until its new state is out.
    wait_until(lambda: "value: 1" in topology.flowctl("state", "counter"), "the counter's new state")
    time.sleep(0.5)
    recorder.send_signal(signal.SIGINT)
    recorder.wait(timeout=10)

    open_page(browser, topology, fresh=False)
    browser.find_element("id", "recording-file").send_keys(str(path))
    wait_until(lambda: browser.find_element("id", "mode").text == "recording", "the recording to open")
    wait_until(lambda: node(browser, "settings/list"), "the tree at the end of the recording")
    assert "didNavigate" in timeline_text(browser)
    shot(browser, "6-recording-end")

    def scrub(value):
        browser.execute_script(
            "const s = document.getElementById('slider'); s.value = arguments[0]; s.dispatchEvent(new Event('input'));", value)
    scrub(0)
    wait_until(lambda: not browser.find_elements("css selector", '#tree .node[data-id="settings/list"]'), "the tree at the start")
    assert "settings" not in timeline_text(browser)
    shot(browser, "7-recording-start")
    scrub(1000)
    wait_until(lambda: node(browser, "settings/list"), "the tree back at the end")
    wait_until(lambda: '"value": 1' in browser.find_element(
        "css selector", '.reactor[data-reactor="counter"] pre.state').text, "the counter's state at the end")


def test_foxglove_protocol_client(topology):
    import websocket  # websocket-client

    ws = websocket.create_connection(f"ws://127.0.0.1:{topology.port}/ws", subprotocols=["foxglove.websocket.v1"], timeout=WAIT)
    try:
        assert ws.getsubprotocol() == "foxglove.websocket.v1"
        info = json.loads(ws.recv())
        assert info["op"] == "serverInfo" and "clientPublish" in info["capabilities"] and "json" in info["supportedEncodings"]
        channels = {}
        while not {"/flowbus/navigation", "/flowbus/diagnostics", "/flowbus/states/counter"} <= set(channels):
            message = json.loads(ws.recv())
            assert message["op"] == "advertise", message
            for channel in message["channels"]:
                assert channel["encoding"] == "json"
                channels[channel["topic"]] = channel["id"]
        ws.send(json.dumps({"op": "subscribe", "subscriptions": [
            {"id": 10, "channelId": channels["/flowbus/navigation"]},
            {"id": 11, "channelId": channels["/flowbus/diagnostics"]},
            {"id": 12, "channelId": channels["/flowbus/states/counter"]}]}))
        ws.send(json.dumps({"op": "advertise", "channels": [
            {"id": 1, "topic": "/flowbus/step", "encoding": "json", "schemaName": "flowbus.Step"},
            {"id": 2, "topic": "/flowbus/action", "encoding": "json", "schemaName": "flowbus.Action"}]}))
        time.sleep(0.3)

        def publish(channel, payload):
            ws.send_binary(struct.pack("<BI", 1, channel) + json.dumps(payload).encode())
        publish(1, {"stepper": "apikey", "step": "apiKeyIsComplete", "params": {}})
        publish(1, {"stepper": "nobody", "step": "settings", "params": {}})
        publish(2, {"reactor": "counter", "action": "increase", "params": {}})

        seen = {10: [], 11: [], 12: []}
        deadline = time.monotonic() + WAIT
        def done():
            return (any(e["kind"] == "didNavigate" for e in seen[10]) and any(e["reason"] == "unbound-stepper" for e in seen[11])
                    and any(e["state"].get("value") == 1 for e in seen[12]))
        while time.monotonic() < deadline and not done():
            frame = ws.recv()
            if isinstance(frame, str):
                assert json.loads(frame)["op"] in ("advertise", "status")
                continue
            opcode, subscription, timestamp = struct.unpack("<BIQ", frame[:13])
            assert opcode == 1 and timestamp > 0
            seen[subscription].append(json.loads(frame[13:]))
        assert any(e["kind"] == "didNavigate" and e["step"] == "apiKeyIsComplete" for e in seen[10]), seen[10]
        assert any(e["kind"] == "diagnostic" and e["reason"] == "unbound-stepper" for e in seen[11]), seen[11]
        assert any(e["reactor"] == "counter" and e["state"]["value"] == 1 for e in seen[12]), seen[12]
        (artifacts_dir() / "foxglove-client.json").write_text(json.dumps({"serverInfo": info, "channels": channels, "received": seen}, indent=1))
    finally:
        ws.close()


def test_non_loopback_bind_needs_a_token(topology):
    result = subprocess.run([str(topology.bin / "flowbus-studio"), "--bind", "0.0.0.0", "--port", "0"], env=topology.env,
                            capture_output=True, text=True, timeout=WAIT)
    assert result.returncode != 0 and "--token" in result.stderr
