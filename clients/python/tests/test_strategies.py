"""flowbus.strategies: what it draws from config/demo.yaml and from configs declaring params."""

import json
import re
import subprocess
import sys
import types

import pytest
from conftest import DEMO_CONFIG, HERE

pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, Phase, find, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from flowbus import CONTENT_FBV, CONTENT_JSON, decode, step_frames  # noqa: E402
from flowbus.strategies import (ParamType, declared_steps, load_config, stepper_bindings, stepper_ids,  # noqa: E402
                                steps, wire_values)
from flowbus.values import INT64_MAX, INT64_MIN, check_value  # noqa: E402

FAST = settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
FIRST_FOUND = settings(max_examples=5000, database=None, phases=[Phase.generate])  # no shrinking: it's slow


@pytest.fixture(scope="module")
def demo(bin_dir):
    """config/demo.yaml as flowctl parses it."""
    done = subprocess.run([str(bin_dir / "flowctl"), "config", "--json", "--config", str(DEMO_CONFIG)],
                          capture_output=True, text=True, check=True, timeout=60)
    return json.loads(done.stdout)


def _expands(stepper_id, template):
    """Whether a drawn stepper id is `template` with its {withMovieId} replaced by an int."""
    return re.fullmatch(re.escape(template).replace(r"\{withMovieId\}", "-?[0-9]+"), stepper_id) is not None


def test_the_demo_binds_each_flow_s_steppers_to_its_steps(demo):
    declared = {(s.flow, s.name): s for s in declared_steps(demo)}
    assert set(declared) == {(flow, name) for flow, spec in demo["flows"].items() for name in spec["steps"]}
    assert declared["MainFlow", "settings"].steppers == ("apikey", "dashboard")
    assert declared["SettingsFlow", "about"].steppers == ("settings/list",)
    assert declared["WishlistFlow", "castPicked"].steppers == ("wishlist/movies", "wishlist/movie/{withMovieId}")
    assert declared["WishlistFlow", "moviePicked"].needs == ("withMovieId",)
    assert declared["WatchedFlow", "castPicked"].needs == ("withCastId",)
    assert declared["MainFlow", "apiKeyIsComplete"].needs == ()
    assert {b.template: b.presented_by for b in stepper_bindings(demo) if b.flow == "WatchedFlow"} == {
        "watched/movies": "movieList", "watched/movie/{withMovieId}": "moviePicked"}


def test_every_declared_step_is_drawn_from_every_stepper_that_may_send_it(demo):
    every = {(s.flow, s.name, template) for s in declared_steps(demo) for template in s.steppers}
    assert len(every) == 30
    flows = {b.template: b.flow for b in stepper_bindings(demo)}
    seen = set()

    def covers_all(drawn):
        stepper_id, name, _ = drawn
        # The demo's templates are told apart by their ids; a stepper sends its own flow's steps.
        template, = [t for t in flows if _expands(stepper_id, t)]
        seen.add((flows[template], name, template))
        return seen >= every

    find(steps(demo), covers_all, settings=FIRST_FOUND)
    assert seen == every


@FAST
@given(data=st.data())
def test_drawn_steps_encode_and_decode_unchanged(demo, data):
    stepper_id, name, params = data.draw(steps(demo))
    for content_type in (CONTENT_JSON, CONTENT_FBV):
        step = decode(step_frames(stepper_id, name, params, source="py-strategies", sequence=1,
                                  content_type=content_type))
        assert (step.stepper_id, step.name, step.params) == (stepper_id, name, params)


@FAST
@given(data=st.data())
def test_placeholder_steppers_get_concrete_ids_and_steps_their_params(demo, data):
    stepper_id, name, params = data.draw(steps(demo, stepper="wishlist/movie/{withMovieId}"))
    assert re.fullmatch(r"wishlist/movie/-?[0-9]+", stepper_id)
    assert name in ("movieList", "moviePicked", "castPicked")
    needed = {"moviePicked": "withMovieId", "castPicked": "withCastId"}.get(name)
    if needed:
        assert type(params[needed]) is int and INT64_MIN <= params[needed] <= INT64_MAX
    assert "{" not in data.draw(stepper_ids(demo))


def test_steps_params_of_which_the_config_says_nothing_are_only_the_ids_ones(demo):
    list_steps = steps(demo, stepper="wishlist/movies")
    find(list_steps, lambda t: t[1] == "castPicked" and set(t[2]) == {"withCastId"}, settings=FIRST_FOUND)
    # Now and then the flow's other ids' params ride along: declared flows ignore them.
    find(list_steps, lambda t: t[1] == "castPicked" and set(t[2]) == {"withCastId", "withMovieId"},
         settings=FIRST_FOUND)
    find(steps(demo, stepper="apikey"), lambda t: t[1] == "apiKey" and t[2] == {}, settings=FIRST_FOUND)


def test_a_concrete_stepper_id_is_kept(demo):
    drawn = find(steps(demo, stepper="watched/movie/23452"), lambda t: t[1] == "castPicked",
                 settings=settings(database=None))
    assert drawn == ("watched/movie/23452", "castPicked", {"withCastId": 0})
    with pytest.raises(ValueError, match="no rule of the config declares stepper 'nobody'"):
        steps(demo, stepper="nobody")


def test_a_path_or_a_topology_gives_the_model_flowctl_prints(demo, bin_dir):
    assert load_config(DEMO_CONFIG, bin_dir=bin_dir) == demo
    topology = types.SimpleNamespace(config=demo)  # what Topology holds: flowctl's model
    assert declared_steps(topology) == declared_steps(demo)


ORDERS = {
    "coordinator": {"flow": "ShopFlow", "step": "start"},
    "flows": {
        "ShopFlow": {
            "steps": {
                "start": [{"setRoot": {"screen": "shop", "stepper": "shop"}}],
                "orderPlaced": [{"present": {"flow": "OrderFlow", "step": "show"}}],
                "orderClosed": [{"dismiss": True}],
            },
            "params": {"orderPlaced": {"orderId": "int", "note": "string?"}},
        },
        "OrderFlow": {
            "steps": {
                "show": [{"push": {"screen": "order/{orderId}", "stepper": "order/{orderId}/{shelf}"}}],
                "rate": [{"push": {"screen": "rating/{withRatingId}"}}],
                "close": [{"end": "orderClosed"}],
            },
            "params": {"show": {"orderId": "int", "shelf": "string"}, "rate": {"stars": "double", "tags": "list?"}},
        },
    },
}


def test_declared_params_and_handed_off_ids_are_required():
    declared = {(s.flow, s.name): s for s in declared_steps(ORDERS)}
    placed = declared["ShopFlow", "orderPlaced"]
    # Its own declaration, then what the child's first step declares and uses.
    assert placed.declared == {"orderId": ParamType("int"), "note": ParamType("string", True),
                               "shelf": ParamType("string")}
    assert placed.needs == ()
    assert declared["OrderFlow", "rate"].needs == ("withRatingId",)
    binding, = [b for b in stepper_bindings(ORDERS) if b.flow == "OrderFlow"]
    assert binding.types == {"orderId": ParamType("int"), "shelf": ParamType("string")}


@FAST
@given(data=st.data())
def test_declared_types_are_drawn(data):
    stepper_id, name, params = data.draw(steps(ORDERS))
    if name == "orderPlaced":
        assert type(params["orderId"]) is int and isinstance(params["shelf"], str)
        assert params.get("note") is None or isinstance(params["note"], str)
        assert set(params) <= {"orderId", "note", "shelf"}
    if name == "rate":
        assert type(params["stars"]) in (int, float) and type(params["withRatingId"]) is int
        assert params.get("tags") is None or isinstance(params["tags"], list)
    if stepper_id.startswith("order/"):
        assert re.fullmatch(r"order/-?[0-9]+/.*", stepper_id, re.DOTALL)
        assert name in ("show", "rate", "close")
    check_value(params)


def test_optional_declared_params_are_sometimes_sent_and_sometimes_null():
    placed = steps(ORDERS, stepper="shop")
    find(placed, lambda t: t[1] == "orderPlaced" and "note" not in t[2], settings=FIRST_FOUND)
    find(placed, lambda t: t[1] == "orderPlaced" and "note" in t[2] and t[2]["note"] is None, settings=FIRST_FOUND)
    find(placed, lambda t: t[1] == "orderPlaced" and isinstance(t[2].get("note"), str), settings=FIRST_FOUND)


def _depth(value):
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    return 0


@FAST
@given(wire_values())
def test_values_are_in_the_protocol_s_model(value):
    check_value(value)
    assert _depth(value) < 32


def test_the_package_never_imports_hypothesis_and_says_what_is_missing():
    code = ("import sys; import flowbus, flowbus.messages\n"
            "assert 'hypothesis' not in sys.modules\n"
            "sys.modules['hypothesis'] = None\n"
            "try:\n    import flowbus.strategies\n"
            "except ImportError as error:\n    print(error)\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=HERE.parent, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "flowbus.strategies needs hypothesis (pip install hypothesis)"
