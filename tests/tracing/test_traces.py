"""One trace per step across processes: flowd and the demo reactor host export spans over OTLP/HTTP to a
real receiver (opentelemetry-proto decodes what arrives), driven by `flowctl step`, a Python stepper in an
OpenTelemetry span, and an action whose reactor publishes a step (docs/TRACING.md)."""

from __future__ import annotations

import json
import pathlib
import re
import struct
import subprocess
import sys
from collections.abc import Iterator

import pytest
import websocket  # websocket-client: the studio's Foxglove WebSocket
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "clients" / "python"))
sys.path.insert(0, str(pathlib.Path(__file__).parent))

from flowbus import DidNavigate  # noqa: E402
from flowbus.client import Events, ReactorView, Stepper  # noqa: E402
from flowbus.testing import Topology  # noqa: E402
from otlp_receiver import OTLPReceiver, ReceivedSpan  # noqa: E402

CONFIG = ROOT / "config" / "demo.yaml"

python_spans = InMemorySpanExporter()
_provider = TracerProvider()
_provider.add_span_processor(SimpleSpanProcessor(python_spans))
trace.set_tracer_provider(_provider)
tracer = trace.get_tracer("flowbus-tests")


@pytest.fixture(scope="module")
def receiver() -> Iterator[OTLPReceiver]:
    receiver = OTLPReceiver()
    yield receiver
    receiver.close()


@pytest.fixture
def topology(receiver: OTLPReceiver) -> Iterator[Topology]:
    topology = Topology(CONFIG, launch=False, env={"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint})
    yield topology
    topology.stop()


def one(spans: list[ReceivedSpan], **match: str) -> ReceivedSpan:
    found = [s for s in spans if all(getattr(s, key) == value for key, value in match.items())]
    assert len(found) == 1, f"one span with {match} expected, found {len(found)}: {found}"
    return found[0]


def in_trace(trace_id: str, *names: tuple[str, str]):
    """A predicate: every (service, span name) is among the spans of `trace_id`."""
    def holds(spans: list[ReceivedSpan]) -> bool:
        have = {(s.service, s.name) for s in spans if s.trace_id == trace_id}
        return all(name in have for name in names)
    return holds


def flowctl(topology: Topology, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(topology.bin_dir / "flowctl"), "--config", str(topology.config_path), *args],
                          env=topology.env, capture_output=True, text=True, timeout=30)


def test_flowctl_step_is_one_trace_through_flowd_to_its_did_navigate(topology: Topology,
                                                                      receiver: OTLPReceiver) -> None:
    with Events(topology.events_endpoints, ["nav/did/"], timeout=10) as events:
        done = flowctl(topology, "step", "--as", "apikey", "apiKeyIsComplete")
        assert done.returncode == 0, done.stderr
        did = events.wait_for(lambda m: isinstance(m, DidNavigate) and m.flow == "WatchedFlow")
    assert did.trace_id, "the didNavigate carries the step's trace (PROTOCOL.md 4.5)"
    spans = receiver.wait_for(in_trace(did.trace_id, ("flowctl", "send step"), ("flowd", "process step"),
                                       ("flowd", "publish events")))
    spans = [s for s in spans if s.trace_id == did.trace_id]
    send = one(spans, service="flowctl", name="send step")
    process = one(spans, service="flowd", name="process step")
    publish = one(spans, service="flowd", name="publish events")
    assert send.parent_id == "" and send.kind == "SPAN_KIND_PRODUCER"
    assert process.parent_id == send.span_id and process.kind == "SPAN_KIND_CONSUMER"
    assert publish.parent_id == process.span_id and publish.kind == "SPAN_KIND_PRODUCER"
    assert did.traceparent.split("-")[2] == process.span_id, "events carry flowd's process span"
    assert send.attributes["messaging.destination.name"] == "step/apikey"
    assert process.attributes["messaging.system"] == "flowbus"
    assert process.attributes["messaging.operation.type"] == "process"
    assert process.attributes["flowbus.step"] == "apiKeyIsComplete"
    assert process.attributes["flowbus.stepper"] == "apikey"
    assert process.attributes["flowbus.outcome"] == "applied"
    assert process.attributes["flowbus.flow"] == "WatchedFlow"
    assert publish.attributes["flowbus.navigations"] >= 3


def test_python_stepper_continues_the_active_opentelemetry_span(topology: Topology, receiver: OTLPReceiver) -> None:
    stepper = Stepper(topology._endpoints("ingress"), "dashboard", timeout=10)
    try:
        with tracer.start_as_current_span("open the watched tab") as span:
            stepper.publish("watchedTab")
            context = span.get_span_context()
    finally:
        stepper.close()
    trace_id, span_id = f"{context.trace_id:032x}", f"{context.span_id:016x}"
    spans = receiver.wait_for(in_trace(trace_id, ("flowd", "process step")))
    process = one([s for s in spans if s.trace_id == trace_id], service="flowd", name="process step")
    assert process.parent_id == span_id
    assert process.attributes["flowbus.step"] == "watchedTab"


def test_a_refused_step_is_an_error_span_naming_the_reason(topology: Topology, receiver: OTLPReceiver) -> None:
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    stepper = Stepper(topology._endpoints("ingress"), "nobody/binds/this", timeout=10)
    try:
        stepper.publish_params("start", {}, traceparent=parent)
    finally:
        stepper.close()
    spans = receiver.wait_for(in_trace("0af7651916cd43dd8448eb211c80319c", ("flowd", "process step")))
    process = one([s for s in spans if s.trace_id == "0af7651916cd43dd8448eb211c80319c"], name="process step")
    assert process.parent_id == "b7ad6b7169203331"
    assert process.attributes["flowbus.outcome"] == "unbound-stepper"
    assert process.status == "STATUS_CODE_ERROR"


def test_an_action_its_states_and_the_step_its_reactor_publishes_are_one_trace(topology: Topology,
                                                                               receiver: OTLPReceiver) -> None:
    actions, states = topology.reactor_endpoints("login")
    with Events(topology.events_endpoints, ["nav/did/"], timeout=10) as events:
        view = ReactorView(actions, states, "login", timeout=10)
        try:
            with tracer.start_as_current_span("submit the api key") as span:
                view.send("submit", apiKey="k")
                context = span.get_span_context()
            traced_states = []
            while len(traced_states) < 2:
                update = view.next_state(timeout=10)
                assert update is not None, "login's states"
                traced_states.append(update)
        finally:
            view.close()
        trace_id = f"{context.trace_id:032x}"
        did = events.wait_for(lambda m: isinstance(m, DidNavigate) and m.trace_id == trace_id)
    spans = receiver.wait_for(in_trace(
        trace_id, ("reactor-host-demo", "process action"), ("reactor-host-demo", "mutate"),
        ("reactor-host-demo", "publish state"),
        ("reactor-host-demo", "send step"), ("flowd", "process step"), ("flowd", "publish events")))
    spans = [s for s in spans if s.trace_id == trace_id]
    action = one(spans, name="process action")
    step = one(spans, name="send step")
    process = one(spans, service="flowd", name="process step")
    assert action.parent_id == f"{context.span_id:016x}"
    assert action.attributes["flowbus.reactor"] == "login" and action.attributes["flowbus.action"] == "submit"
    assert all(s.parent_id == action.span_id for s in spans if s.name in ("publish state", "mutate"))
    assert {s.attributes["flowbus.mutation"] for s in spans if s.name == "mutate"} >= {"started", "succeeded"}
    assert step.parent_id == action.span_id and step.attributes["flowbus.step"] == "apiKeyIsComplete"
    assert process.parent_id == step.span_id, "flowd continues the reactor's step"
    assert did.trace_id == trace_id


def test_the_client_sends_no_trace_frame_without_opentelemetry(topology: Topology, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry", None)  # `import opentelemetry` now raises ImportError
    with Events(topology.events_endpoints, ["step/dashboard"], timeout=10) as events:
        stepper = Stepper(topology._endpoints("ingress"), "dashboard", timeout=10)
        try:
            with tracer.start_as_current_span("not propagated"):
                stepper.publish("watchedTab")
        finally:
            stepper.close()
        republished = events.wait_for(lambda m: m.source == stepper.source)
    assert republished.traceparent == ""


def test_a_step_sent_from_the_studio_is_its_send_span_then_flowd(topology: Topology, receiver: OTLPReceiver) -> None:
    studio = subprocess.Popen([str(topology.bin_dir / "flowbus-studio"), "--config", str(topology.config_path),
                               "--port", "0", "--allow-publish"], env=topology.env, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True)
    try:
        assert studio.stdout is not None
        port = int(re.search(r"studio: http://[^:]+:(\d+)/", studio.stdout.readline()).group(1))  # type: ignore[union-attr]
        ws = websocket.create_connection(f"ws://127.0.0.1:{port}/ws", subprotocols=["foxglove.websocket.v1"],
                                         timeout=10)
        try:
            ws.send(json.dumps({"op": "advertise", "channels": [
                {"id": 1, "topic": "/flowbus/step", "encoding": "json", "schemaName": "flowbus.Step"}]}))
            ws.send_binary(struct.pack("<BI", 1, 1)
                           + json.dumps({"stepper": "apikey", "step": "apiKeyIsComplete", "params": {}}).encode())
            spans = receiver.wait_for(lambda spans: any(s.service == "flowbus-studio" and s.name == "send step"
                                                        for s in spans))
            send = one(spans, service="flowbus-studio", name="send step")
            spans = receiver.wait_for(in_trace(send.trace_id, ("flowd", "process step")))
            process = one([s for s in spans if s.trace_id == send.trace_id], service="flowd", name="process step")
            assert process.parent_id == send.span_id
            assert process.attributes["flowbus.step"] == "apiKeyIsComplete"
        finally:
            ws.close()
    finally:
        studio.terminate()
        studio.wait(timeout=10)
