"""Fixtures: the golden vectors and the real daemons (flowd, reactor-host) of `swift build`."""

import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # import flowbus from clients/python without installing it
REPO = HERE.parents[2]
FIXTURES = REPO / "Tests" / "FlowBusWireTests" / "Fixtures"
DEMO_CONFIG = REPO / "config" / "demo.yaml"

from flowbus.processes import process_output, spawn, stop_processes  # noqa: E402 (after the path)


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
    """flowd and the demo reactor host on a short run directory, heartbeats every 50 ms."""

    def __init__(self, bin_dir):
        self.bin_dir = bin_dir
        self.run_dir = pathlib.Path(tempfile.mkdtemp(prefix="fbpy-", dir="/tmp"))  # ipc paths < ~100 bytes
        self.config = self.run_dir / "demo.yaml"
        self.config.write_text(DEMO_CONFIG.read_text() + "\nheartbeatMilliseconds: 50\n")
        self.env = dict(os.environ, FLOWBUS_RUN_DIR=str(self.run_dir))
        self.processes = {}
        self.ingress = f"ipc://{self.run_dir}/ingress.sock"
        self.events = f"ipc://{self.run_dir}/events.sock"
        self.control = f"ipc://{self.run_dir}/control.sock"
        self.actions = f"ipc://{self.run_dir}/reactors-demo-actions.sock"
        self.states = f"ipc://{self.run_dir}/reactors-demo-states.sock"

    def start(self, name, *args):
        self.processes[name] = spawn(self.run_dir, name, [str(self.bin_dir / name), "--config", str(self.config), *args],
                                     self.env)

    def wait_ready(self, socket_names, timeout=10.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, (process, _) in self.processes.items():
                if process.poll() is not None:
                    raise RuntimeError(f"{name} exited with {process.returncode}:\n{self.logs()}")
            if all((self.run_dir / sock).exists() for sock in socket_names):
                return
            time.sleep(0.05)
        raise TimeoutError(f"daemons did not bind {socket_names} within {timeout} s:\n{self.logs()}")

    def logs(self):
        return process_output(self.run_dir, 4000)

    def stop(self):
        stop_processes(list(self.processes.values()), grace=10)
        self.processes = {}
        shutil.rmtree(self.run_dir, ignore_errors=True)


@pytest.fixture
def bus(bin_dir, request):
    bus = Bus(bin_dir)
    try:
        bus.start("flowd")
        bus.start("reactor-host", "--host", "demo", "--counter-delay-ms", "50")
        bus.wait_ready(["ingress.sock", "events.sock", "control.sock",
                        "reactors-demo-actions.sock", "reactors-demo-states.sock"])
        yield bus
        report = getattr(request.node, "rep_call", None)
        if report is not None and report.failed:
            print(bus.logs())  # shown with the failure
    finally:
        bus.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    setattr(item, "rep_" + report.when, report)
