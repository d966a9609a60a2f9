"""Fixtures: the golden vectors and the real daemons (flowd, reactor-host) of `swift build`."""

import os
import pathlib
import shutil
import signal
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # import flowbus from clients/python without installing it
REPO = HERE.parents[2]
FIXTURES = REPO / "Tests" / "FlowBusWireTests" / "Fixtures"
DEMO_CONFIG = REPO / "config" / "demo.yaml"


def load_vector(name):
    """One golden vector: a list of frames (one hex line per frame, see Fixtures/README.md)."""
    text = (FIXTURES / f"{name}.hex").read_text()
    assert text.endswith("\n")
    return [bytes.fromhex(line) for line in text.split("\n")[:-1]]


TEST_LIMIT_S = 60


def pytest_configure(config):
    config.addinivalue_line("markers", "time_limit(seconds): the watchdog's limit for this test, instead of "
                                       f"{TEST_LIMIT_S} s (a test that starts servers of its own)")


@pytest.fixture(autouse=True)
def _watchdog(request):
    """No test may hang: SIGALRM interrupts any blocking call after TEST_LIMIT_S seconds (or the
    test's `time_limit` marker), fixtures' set-up and tear-down included."""
    marker = request.node.get_closest_marker("time_limit")
    limit = int(marker.args[0]) if marker else TEST_LIMIT_S

    def expired(signum, frame):
        raise TimeoutError(f"test took more than {limit} s")
    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(limit)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture(scope="session")
def bin_dir():
    path = os.environ.get("FLOWBUS_BIN_DIR")
    if not path:
        if shutil.which("swift") is None:
            pytest.skip("no FLOWBUS_BIN_DIR and no swift to find the daemons")
        try:
            path = subprocess.run(["swift", "build", "--show-bin-path"], cwd=REPO, capture_output=True, text=True,
                                  check=True, timeout=120).stdout.strip()
        except (subprocess.SubprocessError, OSError) as error:
            pytest.fail(f"swift build --show-bin-path failed: {error}")
    path = pathlib.Path(path)
    for name in ("flowd", "reactor-host"):
        if not (path / name).is_file():
            pytest.fail(f"{path / name} is missing: run `swift build` first (FLOWBUS_BIN_DIR={path})")
    return path


class Bus:
    """flowd and the demo reactor host of config/demo.yaml, started by flowbus.testing.Topology (a
    private run directory, heartbeats every 50 ms), and their endpoints."""

    def __init__(self, topology):
        self.topology = topology
        self.run_dir = topology.run_dir
        endpoints = topology.config["endpoints"]
        self.ingress, self.events, self.control = endpoints["ingress"], endpoints["events"], endpoints["control"]
        self.actions, self.states = topology.reactor_endpoints("counter")


@pytest.fixture
def bus(bin_dir, request):
    from flowbus.testing import Topology  # pyzmq: only for the tests that start daemons

    topology = Topology(DEMO_CONFIG, bin_dir=bin_dir, hosts=["demo"], launch=False,
                        arguments={"demo": ["--counter-delay-ms", "50"]})
    try:
        yield Bus(topology)
        report = getattr(request.node, "rep_call", None)
        if report is not None and report.failed:
            print(topology.output(4000))  # shown with the failure
    finally:
        topology.stop()
        topology.remove()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    setattr(item, "rep_" + report.when, report)
