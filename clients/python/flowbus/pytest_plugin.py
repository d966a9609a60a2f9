"""The pytest plugin of the `flowbus` package (entry point `pytest11`): fixtures that start a
topology for a test and stop it afterwards (see `flowbus.testing`).

* `flowbus_topology`: the topology of `--flowbus-config FILE` (or the `flowbus_config` ini
  option, or $FLOWBUS_CONFIG), started and answering.
* `flowbus_topologies`: a factory, `flowbus_topologies(config=None, **options)`, for tests that
  need several (or another config); each takes `Topology`'s options.

A test that fails gets every process's output in its report. A test that passed also fails
if an exhaustive trace received something it did not assert.
"""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from typing import Protocol, TypedDict

    from pluggy import Result
    from typing_extensions import Unpack

    from .testing import Topology

    class _TopologyOptions(TypedDict, total=False):
        """Topology's keyword options."""
        bin_dir: str | os.PathLike[str] | None
        hosts: Iterable[str] | None
        timeout: float
        heartbeat_ms: int | None
        start: bool
        env: Mapping[str, str] | None

    class _TopologyFactory(Protocol):
        def __call__(self, config: str | os.PathLike[str] | None = None,
                     **options: Unpack[_TopologyOptions]) -> Topology: ...


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("flowbus")
    group.addoption("--flowbus-config", help="the topology file flowbus_topology starts "
                                             "(default: the flowbus_config ini option, else $FLOWBUS_CONFIG)")
    group.addoption("--flowbus-bin-dir", help="where flowd, flowctl and reactor-host are (default: $FLOWBUS_BIN_DIR, "
                                              "else `swift build --show-bin-path` in a Swift package, else PATH)")
    parser.addini("flowbus_config", "the topology file flowbus_topology starts")


def _default_config(config: pytest.Config) -> str:
    path: str | None = (config.getoption("flowbus_config") or config.getini("flowbus_config")
                        or os.environ.get("FLOWBUS_CONFIG"))
    if not path:
        raise pytest.UsageError("flowbus_topology needs a topology file: --flowbus-config FILE, flowbus_config in "
                                "pytest.ini, or $FLOWBUS_CONFIG")
    return path


@pytest.fixture
def flowbus_topologies(request: pytest.FixtureRequest) -> Iterator[_TopologyFactory]:
    """Starts topologies for this test: `flowbus_topologies(config=None, **options)`."""
    from .testing import ExpectationFailed, Topology

    started: list[Topology] = []
    setattr(request.node, "_flowbus_topologies", started)

    def start(config: str | os.PathLike[str] | None = None, **options: Unpack[_TopologyOptions]) -> Topology:
        options.setdefault("bin_dir", request.config.getoption("flowbus_bin_dir"))
        topology = Topology(config or _default_config(request.config), **options)
        started.append(topology)
        return topology

    yield start
    call = getattr(request.node, "_flowbus_call", None)
    unasserted: list[str] = []
    try:
        if call is not None and call.passed:
            for topology in started:
                for trace in topology.traces:
                    try:
                        trace.finish()
                    except ExpectationFailed as failure:
                        unasserted.append(str(failure))
    finally:
        for topology in started:
            topology.stop()
            topology.remove()
    if unasserted:
        pytest.fail("\n".join(unasserted), pytrace=False)


@pytest.fixture
def flowbus_topology(flowbus_topologies: _TopologyFactory) -> Topology:
    """The topology of --flowbus-config (or `flowbus_config`, or $FLOWBUS_CONFIG), answering."""
    return flowbus_topologies()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item,
                               call: pytest.CallInfo[None]) -> Generator[None, Result[pytest.TestReport], None]:
    outcome = yield
    report = outcome.get_result()
    if report.when == "call":
        setattr(item, "_flowbus_call", report)
        if report.failed:
            started: list[Topology] = getattr(item, "_flowbus_topologies", [])
            for topology in started:
                report.sections.append((f"flowbus: {topology.config_path.name} in {topology.run_dir}",
                                        topology.output()))
