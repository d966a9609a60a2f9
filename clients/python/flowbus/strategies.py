"""Hypothesis strategies for the steps a FlowBus topology config declares (docs/FLOWS.md).

    from flowbus.strategies import steps

    @given(steps("config/demo.yaml"))
    def test_any_declared_step_encodes(step):
        stepper_id, name, params = step
        ...

A config is the model `flowctl config --json` prints (a dict), a path to a config file (then
flowctl, found with `flowbus.testing.find_bin_dir`, parses it), or a `flowbus.testing.Topology`.

What the config declares, and so what is drawn:

* A stepper id in a rule (`push`, `setRoot`, `present` of a screen, `tabs`) is bound to the flow
  whose rule declares it, and may send any step of that flow's table. Its `{param}`s are
  replaced by the params of the step that presented it, so drawn ids are concrete.
* A step needs the params `params:` declares for it (of their types; optional ones are drawn
  sometimes, maybe null) and every `{param}` its rules' ids use, including the ids of the steps it
  hands its params to (a child flow's first step, a forwarded or ending step).
* A `{param}` no `params:` types is drawn as an int when it is named like an id (`withMovieId`,
  `orderId`, as the docs send them), else as an int or a short string.
* A step with no `params:` entry occasionally carries, besides what it needs, other `{param}`s
  its flow's ids use: declared flows ignore params they do not use.

The config declares neither deep links (any step name, sent to every active flow) nor reactors'
actions (Swift `Action` types), so there are no strategies for them. Whether a drawn step is
applied also depends on the live tree (the stepper's screen visible, bound under the drawn id).

Every value drawn is in the protocol's value model (PROTOCOL.md 5.3, 6): signed 64-bit ints,
finite floats, valid UTF-8 strings, bools, None, lists and string-keyed maps, nesting shallowly.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Protocol, Sequence, Tuple, Union

try:
    from hypothesis import strategies as st
    from hypothesis.strategies import SearchStrategy
except ImportError as _error:  # pragma: no cover - depends on the environment
    raise ImportError("flowbus.strategies needs hypothesis (pip install hypothesis)") from _error

__all__ = ["Value", "Params", "StepTriple", "ParamType", "StepperBinding", "DeclaredStep", "load_config",
           "declared_steps", "stepper_bindings", "steps", "stepper_ids", "step_params", "wire_values",
           "param_values"]

Value = Union[None, bool, int, float, str, List["Value"], Dict[str, "Value"]]
Params = Dict[str, Value]
StepTriple = Tuple[str, str, Params]

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
PARAM_KINDS = ("int", "double", "string", "bool", "list", "map", "any")

_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_ID_LIKE = re.compile(r"(?:^id$|Id$|ID$)")
# Short, readable ids: a drawn stepper id stays far below the 255-byte topic limit.
_ID_TEXT = st.text(st.characters(categories=["Ll", "Lu", "Nd"], max_codepoint=0x7F), min_size=1, max_size=8)


class HasConfig(Protocol):
    """A flowbus.testing.Topology: the parsed config it started."""

    @property
    def config(self) -> Mapping[str, Any]: ...


ConfigSource = Union[Mapping[str, Any], str, "os.PathLike[str]", HasConfig]


@dataclass(frozen=True)
class ParamType:
    """A type `params:` declares: `int`, `double` (an int is accepted), `string`, `bool`, `list`,
    `map` or `any`; optional when written with a trailing `?`."""

    kind: str
    optional: bool = False

    @classmethod
    def parse(cls, text: str) -> ParamType:
        optional = text.endswith("?")
        kind = text[:-1] if optional else text
        if kind not in PARAM_KINDS:
            raise ValueError(f"{text!r} is not a param type (one of {', '.join(PARAM_KINDS)}, with ? if optional)")
        return cls(kind, optional)

    def __str__(self) -> str:
        return self.kind + ("?" if self.optional else "")


@dataclass(frozen=True)
class StepperBinding:
    """A stepper id template, the flow it is bound to, and the step whose params expand it."""

    template: str
    flow: str
    presented_by: str
    types: Mapping[str, ParamType] = field(default_factory=dict, compare=False, hash=False)

    @property
    def placeholders(self) -> Tuple[str, ...]:
        return tuple(_PLACEHOLDER.findall(self.template))


@dataclass(frozen=True)
class DeclaredStep:
    """A step of a flow's table, the stepper templates that may send it, and its params:
    `declared` as `params:` types them, `needs` the `{param}`s its ids (and those of the steps
    it hands off to) use that no declaration types, `extras` other `{param}`s of its flow."""

    flow: str
    name: str
    steppers: Tuple[str, ...]
    declared: Mapping[str, ParamType] = field(default_factory=dict, compare=False, hash=False)
    needs: Tuple[str, ...] = ()
    extras: Tuple[str, ...] = ()
    has_declaration: bool = False


# MARK: The config model


def load_config(config: ConfigSource, *, bin_dir: Optional[Union[str, os.PathLike[str]]] = None) -> Mapping[str, Any]:
    """The config model: `config` itself, a Topology's, or what `flowctl config --json` prints."""
    if isinstance(config, Mapping):
        return config
    if isinstance(config, (str, os.PathLike)):
        path = pathlib.Path(config).resolve()
        return _parsed(str(path), path.stat().st_mtime_ns, None if bin_dir is None else str(bin_dir))
    parsed = getattr(config, "config", None)
    if isinstance(parsed, Mapping):
        return parsed
    raise TypeError(f"a config is a dict (flowctl config --json), a path or a Topology, not {type(config).__name__}")


_PARSED: Dict[Tuple[str, int, Optional[str]], Mapping[str, Any]] = {}


def _parsed(path: str, mtime_ns: int, bin_dir: Optional[str]) -> Mapping[str, Any]:
    # Strategies are built per test: parse each file once while it is unchanged.
    key = (path, mtime_ns, bin_dir)
    if key not in _PARSED:
        try:
            from .testing import find_bin_dir  # imports pyzmq: only when a path needs flowctl
        except ImportError as error:
            raise ImportError(f"reading {path} needs flowbus.testing ({error}): pass the parsed config "
                              "(`flowctl config --json`) instead") from error

        # find_bin_dir is untyped unless flowbus.testing is annotated: either way mypy --strict passes.
        flowctl = pathlib.Path(find_bin_dir(bin_dir)) / "flowctl"  # type: ignore[no-untyped-call, unused-ignore]
        done = subprocess.run([str(flowctl), "config", "--json", "--config", path], capture_output=True, text=True,
                              timeout=60)
        if done.returncode != 0:
            raise ValueError(f"{path}: {done.stderr.strip()}")
        loaded = json.loads(done.stdout)
        if not isinstance(loaded, dict):
            raise ValueError(f"{path}: flowctl config --json printed no object")
        _PARSED[key] = loaded
    return _PARSED[key]


def _flows(config: Mapping[str, Any]) -> Mapping[str, Mapping[str, Any]]:
    flows = config.get("flows") or {}
    if not isinstance(flows, Mapping):
        raise ValueError("the config's flows is not a map of flow name to flow")
    return flows


def _rules(flow: Mapping[str, Any], step: str) -> Sequence[Any]:
    rules = (flow.get("steps") or {}).get(step) or []
    return rules if isinstance(rules, list) else [rules]


def _declared_types(flow: Mapping[str, Any], step: str) -> Optional[Dict[str, ParamType]]:
    declared = (flow.get("params") or {}).get(step)
    if declared is None:
        return None
    return {key: ParamType.parse(str(text)) for key, text in declared.items()}


def _templates(rule: Any) -> List[Tuple[str, str]]:
    """(kind, template) of every id a rule expands: kind "stepper" or "id" (screen, tab bar)."""
    if not isinstance(rule, Mapping) or len(rule) != 1:
        return []  # a bare rule (`dismiss`), as YAML writes it
    ((key, spec),) = rule.items()
    if key in ("push", "setRoot", "present") and isinstance(spec, Mapping) and "screen" in spec:
        found = [("id", str(spec["screen"]))]
    elif key == "tabs" and isinstance(spec, Mapping):
        found = [("id", str(spec.get("id", "")))]
    else:
        return []
    return found + ([("stepper", str(spec["stepper"]))] if spec.get("stepper") is not None else [])


def _handoffs(rule: Any) -> List[Tuple[str, str]]:
    """(how, target) of the steps a rule passes the step's params to: ("child", "Flow.step"),
    ("current", step) or ("parent", step)."""
    if not isinstance(rule, Mapping) or len(rule) != 1:
        return []
    ((key, spec),) = rule.items()
    if key == "present" and isinstance(spec, Mapping) and "flow" in spec:
        return [("child", f"{spec['flow']}.{spec['step']}")]
    if key == "tabs" and isinstance(spec, Mapping):
        return [("child", f"{child['flow']}.{child['step']}") for child in spec.get("flows", [])]
    if key == "forwardToCurrent":
        return [("current", str(spec))]
    if key in ("forwardToParent", "end"):
        return [("parent", str(spec))]
    return []


def stepper_bindings(config: ConfigSource, *, bin_dir: Optional[Union[str, os.PathLike[str]]] = None
                     ) -> List[StepperBinding]:
    """Every stepper id template the config's rules declare, with the flow it is bound to."""
    bindings: Dict[Tuple[str, str], StepperBinding] = {}
    for flow_name, flow in sorted(_flows(load_config(config, bin_dir=bin_dir)).items()):
        for step in sorted(flow.get("steps") or {}):
            declared = _declared_types(flow, step) or {}
            for rule in _rules(flow, step):
                for kind, template in _templates(rule):
                    if kind == "stepper" and (template, flow_name) not in bindings:
                        types = {name: declared[name] for name in _PLACEHOLDER.findall(template) if name in declared}
                        bindings[(template, flow_name)] = StepperBinding(template, flow_name, step, types)
    return list(bindings.values())


def declared_steps(config: ConfigSource, *, bin_dir: Optional[Union[str, os.PathLike[str]]] = None
                   ) -> List[DeclaredStep]:
    """Every step of every flow's table, sorted by flow and name, with what `steps` draws for it."""
    model = load_config(config, bin_dir=bin_dir)
    flows = _flows(model)
    parents: Dict[str, List[str]] = {}
    for flow_name, flow in sorted(flows.items()):
        for step in flow.get("steps") or {}:
            for rule in _rules(flow, step):
                for how, target in _handoffs(rule):
                    if how == "child":
                        parents.setdefault(target.split(".", 1)[0], []).append(flow_name)
    steppers: Dict[str, List[str]] = {}
    for binding in stepper_bindings(model):
        steppers.setdefault(binding.flow, []).append(binding.template)
    result = []
    for flow_name, flow in sorted(flows.items()):
        flow_placeholders = sorted({name for step in flow.get("steps") or {} for rule in _rules(flow, step)
                                    for _, template in _templates(rule) for name in _PLACEHOLDER.findall(template)})
        for step in sorted(flow.get("steps") or {}):
            own = _declared_types(flow, step)
            declared, needs = _requirements(flows, parents, flow_name, step)
            result.append(DeclaredStep(
                flow_name, step, tuple(steppers.get(flow_name, [])), declared, needs,
                tuple(name for name in flow_placeholders if name not in declared and name not in needs),
                own is not None))
    return result


def _requirements(flows: Mapping[str, Mapping[str, Any]], parents: Mapping[str, List[str]], flow_name: str,
                  step: str) -> Tuple[Dict[str, ParamType], Tuple[str, ...]]:
    """The typed params a step must (or may) carry, and the untyped `{param}`s it must carry:
    its own, and those of every step it hands its params on to (as flowd's load-time check walks them)."""
    declared: Dict[str, ParamType] = {}
    used: List[str] = []
    seen = set()
    pending = [(flow_name, step)]
    while pending:
        visit = pending.pop(0)  # breadth first: the step's own declaration wins
        if visit in seen or visit[0] not in flows:
            continue
        seen.add(visit)
        flow = flows[visit[0]]
        for name, kind in (_declared_types(flow, visit[1]) or {}).items():
            declared.setdefault(name, kind)
        for rule in _rules(flow, visit[1]):
            used += [name for _, template in _templates(rule) for name in _PLACEHOLDER.findall(template)]
            for how, target in _handoffs(rule):
                if how == "child":
                    child, _, first = target.partition(".")
                    pending.append((child, first))
                elif how == "current":
                    pending.append((visit[0], target))
                else:
                    pending += [(parent, target) for parent in parents.get(visit[0], [])]
    for name in used:
        if name in declared and declared[name].optional:
            # An id uses it, so it must be there: a required, non-null value of its kind.
            declared[name] = ParamType(declared[name].kind)
    needs = tuple(dict.fromkeys(name for name in used if name not in declared))
    return declared, needs


# MARK: Values


def wire_values(max_leaves: int = 8) -> SearchStrategy[Value]:
    """Any value of the protocol's model (PROTOCOL.md 5.3): few leaves, so far below the nesting
    limit of 32 and the 1 MiB frame limit."""
    scalars: SearchStrategy[Value] = st.one_of(
        st.none(), st.booleans(), st.integers(INT64_MIN, INT64_MAX),
        st.floats(allow_nan=False, allow_infinity=False), st.text(st.characters(codec="utf-8"), max_size=16))
    return st.recursive(
        scalars,
        lambda inner: st.one_of(st.lists(inner, max_size=4),
                                st.dictionaries(st.text(st.characters(codec="utf-8"), max_size=8), inner, max_size=4)),
        max_leaves=max_leaves)


def param_values(kind: ParamType) -> SearchStrategy[Value]:
    """Values a param declared `kind` admits (null too, when it is optional)."""
    values: SearchStrategy[Value]
    if kind.kind == "int":
        values = st.integers(INT64_MIN, INT64_MAX)
    elif kind.kind == "double":
        values = st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.integers(INT64_MIN, INT64_MAX))
    elif kind.kind == "string":
        values = st.text(st.characters(codec="utf-8"), max_size=16)
    elif kind.kind == "bool":
        values = st.booleans()
    elif kind.kind == "list":
        values = st.lists(wire_values(4), max_size=4)
    elif kind.kind == "map":
        values = st.dictionaries(st.text(st.characters(codec="utf-8"), max_size=8), wire_values(4), max_size=4)
    else:
        values = wire_values()
    return st.one_of(st.none(), values) if kind.optional else values


def _untyped_placeholder(name: str) -> SearchStrategy[Value]:
    ints: SearchStrategy[Value] = st.integers(INT64_MIN, INT64_MAX)
    return ints if _ID_LIKE.search(name) else st.one_of(ints, _ID_TEXT)


def _display_text(value: Value) -> str:
    """How flowd writes a value into an id (Swift's WireValue.displayText): strings bare, lists
    and maps in brackets. Swift prints a double as Python's repr does (shortest round trip)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, str)):
        return value if isinstance(value, str) else repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_display_text(v) for v in value) + "]"
    return "{" + ", ".join(f"{k}: {_display_text(v)}" for k, v in sorted(value.items())) + "}"


def _expand(template: str, params: Mapping[str, Value]) -> str:
    return _PLACEHOLDER.sub(lambda match: _display_text(params.get(match.group(1))) if match.group(1) in params
                            else "", template)


# MARK: Strategies


def _binding_ids(binding: StepperBinding) -> SearchStrategy[str]:
    names = dict.fromkeys(binding.placeholders)
    if not names:
        return st.just(binding.template)
    fixed = {name: (param_values(ParamType(binding.types[name].kind)) if name in binding.types
                    else _untyped_placeholder(name)) for name in names}
    return st.fixed_dictionaries(fixed).map(lambda params: _expand(binding.template, params))


def _template_regex(template: str) -> re.Pattern[str]:
    parts = _PLACEHOLDER.split(template)
    # split alternates literal text and placeholder names: literals at even indexes.
    return re.compile("".join(re.escape(part) if index % 2 == 0 else ".*" for index, part in enumerate(parts)),
                      re.DOTALL)


def stepper_ids(config: ConfigSource, *, bin_dir: Optional[Union[str, os.PathLike[str]]] = None
                ) -> SearchStrategy[str]:
    """Concrete stepper ids: every template the config declares, its `{param}`s drawn."""
    bindings = stepper_bindings(config, bin_dir=bin_dir)
    if not bindings:
        raise ValueError("the config declares no stepper in its flows' rules")
    return st.sampled_from(bindings).flatmap(_binding_ids)


def step_params(step: DeclaredStep) -> SearchStrategy[Params]:
    """Params for `step`: what it needs always, its optional declared ones sometimes, and, when
    `params:` declares nothing for it, occasionally other `{param}`s of its flow."""
    required: Dict[str, SearchStrategy[Value]] = {}
    optional: Dict[str, SearchStrategy[Value]] = {}
    for name, kind in step.declared.items():
        (optional if kind.optional else required)[name] = param_values(kind)
    for name in step.needs:
        required[name] = _untyped_placeholder(name)
    if not step.has_declaration:
        for name in step.extras:
            optional[name] = _untyped_placeholder(name)
    drawn = st.fixed_dictionaries(required, optional=optional)
    if not step.has_declaration and step.extras:
        # Mostly just what the step needs; the flow's other ids' params only now and then.
        drawn = st.one_of(st.fixed_dictionaries(required), st.fixed_dictionaries(required),
                          st.fixed_dictionaries(required), drawn)
    return drawn.map(dict)


def steps(config: ConfigSource, *, stepper: Optional[str] = None,
          bin_dir: Optional[Union[str, os.PathLike[str]]] = None) -> SearchStrategy[StepTriple]:
    """(stepper id, step name, params) for every step a flow declares, sent by each stepper bound
    to that flow. `stepper` keeps one stepper's: a template as the config writes it
    (`wishlist/movie/{withMovieId}`, ids drawn) or a concrete id (`wishlist/movie/7`, kept)."""
    model = load_config(config, bin_dir=bin_dir)
    bindings = stepper_bindings(model)
    if stepper is not None:
        exact = [b for b in bindings if b.template == stepper]
        chosen = exact or [b for b in bindings if _template_regex(b.template).fullmatch(stepper)]
        if not chosen:
            known = ", ".join(sorted({b.template for b in bindings})) or "none"
            raise ValueError(f"no rule of the config declares stepper {stepper!r} (declared: {known})")
        bindings = chosen
    by_flow: Dict[str, List[StepperBinding]] = {}
    for binding in bindings:
        by_flow.setdefault(binding.flow, []).append(binding)
    choices = [(binding, step) for step in declared_steps(model) for binding in by_flow.get(step.flow, [])]
    if not choices:
        raise ValueError("no flow of the config has both a step and a stepper bound to it")
    fixed_id = stepper is not None and not any(b.template == stepper for b in bindings)

    def triple(choice: Tuple[StepperBinding, DeclaredStep]) -> SearchStrategy[StepTriple]:
        binding, step = choice
        ids = st.just(stepper) if fixed_id and stepper is not None else _binding_ids(binding)
        return st.tuples(ids, st.just(step.name), step_params(step))

    return st.sampled_from(choices).flatmap(triple)
