"""Fixtures: fresh flowd and reactor-host processes on ipc endpoints in a temporary directory.

Started the way clients/python/tests/conftest.py does (Popen, readiness probe, SIGTERM), but the
readiness probes speak raw frames (rawwire), as does every test of this suite.
"""

import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest
import zmq

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # rawwire and scenario, never the flowbus package
REPO = HERE.parents[2]

import rawwire as w  # noqa: E402

T = 5.0  # default bound of every wait, seconds
HEARTBEAT_MS = 50
TEST_LIMIT_S = 30

# The topology under test, self-contained: the demo's MainFlow with its two tab flows and the
# demo reactor host. {dir} is the run directory; {flowd_extra} and {host_extra} add persistence.
CONFIG = """\
endpoints:
  ingress: ipc://{dir}/ingress.sock
  events: ipc://{dir}/events.sock
  control: ipc://{dir}/control.sock
limits: {{ maxMessageBytes: 1048576, highWaterMark: 100000 }}
heartbeatMilliseconds: {hb}
heartbeatLiveness: 3
coordinator: {{ flow: MainFlow, step: apiKey }}
{flowd_extra}
flows:
  MainFlow:
    root: stack
    id: main
    steps:
      apiKey:
        - setRoot: {{ screen: apikey, stepper: apikey }}
      apiKeyIsComplete:
        - tabs:
            id: dashboard
            stepper: dashboard
            flows:
              - {{ flow: WishlistFlow, step: movieList }}
              - {{ flow: WatchedFlow, step: movieList }}
      wishlistTab:
        - selectTab: 0
      watchedTab:
        - selectTab: 1
      moviePicked: []
      wishlistClosed: []
      longTabs:
        - tabs:
            id: longbar
            stepper: longbar
            flows:
              - {{ flow: LongTab0, step: start }}
              - {{ flow: LongTab1, step: start }}
              - {{ flow: LongTab2, step: start }}
  WishlistFlow:
    root: stack
    id: wishlist
    steps:
      movieList:
        - push: {{ screen: wishlist/movies, stepper: wishlist/movies }}
      close:
        - end: wishlistClosed
      moviePicked:
        - push: {{ screen: "wishlist/movie/{{withMovieId}}", stepper: "wishlist/movie/{{withMovieId}}" }}
  WatchedFlow:
    root: stack
    id: watched
    steps:
      movieList:
        - push: {{ screen: watched/movies, stepper: watched/movies }}
      moviePicked:
        - push: {{ screen: "watched/movie/{{withMovieId}}", stepper: "watched/movie/{{withMovieId}}" }}
{long_tabs}
{reactors}
"""

# Three tab flows whose ids, joined in a `setTabs`, pass 255 bytes (each is 100).
LONG_TAB_IDS = [f"longtab-{n}-" + "x" * 90 for n in range(3)]
LONG_TABS = "\n".join(f"""\
  LongTab{n}:
    root: stack
    id: {tab_id}
    steps:
      start: []""" for n, tab_id in enumerate(LONG_TAB_IDS))

REACTORS = """\
reactors:
  demo:
    actions: ipc://{dir}/actions.sock
    states: ipc://{dir}/states.sock
    serves: [counter, login, movie/]
{host_extra}
"""


@pytest.fixture(autouse=True)
def _watchdog():
    """No test may hang: SIGALRM interrupts any blocking call."""
    def expired(signum, frame):
        raise TimeoutError(f"test took more than {TEST_LIMIT_S} s")
    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(TEST_LIMIT_S)
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
        path = subprocess.run(["swift", "build", "--show-bin-path"], cwd=REPO, capture_output=True, text=True,
                              check=True, timeout=120).stdout.strip()
    path = pathlib.Path(path)
    for name in ("flowd", "reactor-host"):
        if not (path / name).is_file():
            pytest.fail(f"{path / name} is missing: run `swift build --product {name}` (FLOWBUS_BIN_DIR={path})")
    return path


class Topology:
    """One run directory with flowd and, optionally, the demo reactor host; sockets closed and processes
    stopped (SIGTERM) by `close`."""

    def __init__(self, bin_dir, host=True, journal=False, host_database=False):
        self.bin_dir = bin_dir
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="fbconf-", dir="/tmp"))  # ipc paths stay short
        flowd_extra = f"persistence: {{ journal: {self.dir}/journal.sqlite }}" if journal else ""
        host_extra = (f"    persistence: {{ database: {self.dir}/host.sqlite, reactors: [counter] }}"
                      if host_database else "")
        reactors = REACTORS.format(dir=self.dir, host_extra=host_extra) if host else ""
        self.config = self.dir / "topology.yaml"
        self.config.write_text(CONFIG.format(dir=self.dir, hb=HEARTBEAT_MS, flowd_extra=flowd_extra,
                                             long_tabs=LONG_TABS, reactors=reactors))
        self.has_host = host
        self.ingress = f"ipc://{self.dir}/ingress.sock"
        self.events = f"ipc://{self.dir}/events.sock"
        self.control = f"ipc://{self.dir}/control.sock"
        self.actions = f"ipc://{self.dir}/actions.sock"
        self.states = f"ipc://{self.dir}/states.sock"
        self.ctx = zmq.Context()
        self.sockets = []
        self.processes = {}
        self.logs_open = []
        self.ready_status = None  # the status reply of flowd's readiness probe
        self.status_probes = 0  # status requests the probe sent (a request sent while connecting may be lost)
        self.host_source = None

    # processes

    def _start(self, name, *args):
        log = open(self.dir / f"{name}.log", "ab")
        self.logs_open.append(log)
        self.processes[name] = subprocess.Popen([str(self.bin_dir / name), "--config", str(self.config), *args],
                                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def _check_alive(self):
        for name, process in self.processes.items():
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited with {process.returncode}:\n{self.logs()}")

    def start_flowd(self, *args):
        """flowd with this topology; `args` are the reference flowd's options (e.g. --accept-journal-loss)."""
        self._start("flowd", *args)
        probe = w.Peer(self.ctx, self.control)
        try:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                self._check_alive()
                probe.send(w.status_request(w.new_source("conftest-ready")))
                self.status_probes += 1
                reply = probe.recv(0.2)
                if reply is not None:
                    self.ready_status = reply
                    return
            raise TimeoutError(f"flowd did not answer a status request within 10 s:\n{self.logs()}")
        finally:
            probe.close()

    def start_host(self):
        self._start("reactor-host", "--host", "demo", "--counter-delay-ms", "20")
        sub = w.Sub(self.ctx, self.states, ["hb/"])
        try:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                self._check_alive()
                msg = sub.recv(0.2)
                if msg is not None and msg.kind == w.HEARTBEAT:
                    self.host_source = msg.source
                    return
            raise TimeoutError(f"reactor-host sent no heartbeat within 10 s:\n{self.logs()}")
        finally:
            sub.close()

    def stop(self, name):
        process = self.processes.pop(name)
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)

    def logs(self):
        return "\n".join(f"--- {path.name}\n{path.read_text(errors='replace')[-4000:]}"
                         for path in sorted(self.dir.glob("*.log")))

    def close(self):
        for sock in self.sockets:
            sock.close()
        for name in list(self.processes):
            self.stop(name)
        for log in self.logs_open:
            log.close()
        self.ctx.term()
        shutil.rmtree(self.dir, ignore_errors=True)

    # sockets, closed with the topology

    def peer(self, endpoint):
        peer = w.Peer(self.ctx, endpoint)
        self.sockets.append(peer)
        return peer

    def sub(self, endpoint, prefixes=(b"",)):
        """A SUB whose subscription is active (a heartbeat came through it); it always includes `hb/`."""
        prefixes = list(prefixes)
        if not any(b"hb/".startswith(p.encode() if isinstance(p, str) else p) for p in prefixes):
            prefixes.append(b"hb/")
        sub = w.Sub(self.ctx, endpoint, prefixes)
        self.sockets.append(sub)
        sub.wait_active(T)
        return sub


def _topology(bin_dir, request, **options):
    topology = Topology(bin_dir, **options)
    request.node.topologies = getattr(request.node, "topologies", []) + [topology]
    try:
        topology.start_flowd()
        if topology.has_host:
            topology.start_host()
    except BaseException:
        topology.close()
        raise
    return topology


def _finish(topology, request):
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        print(topology.logs())  # shown with the failure
    topology.close()


@pytest.fixture
def topo(bin_dir, request):
    """A fresh flowd and reactor host for one test (where their state matters)."""
    topology = _topology(bin_dir, request)
    yield topology
    _finish(topology, request)


@pytest.fixture
def flowd_only(bin_dir, request):
    """A fresh flowd with no reactor host in its config: its DEALER peers are the test's alone."""
    topology = _topology(bin_dir, request, host=False)
    yield topology
    _finish(topology, request)


@pytest.fixture
def persistent(bin_dir, request):
    """flowd with `persistence: { journal: FILE }` and a reactor host with a state database."""
    topology = _topology(bin_dir, request, journal=True, host_database=True)
    yield topology
    _finish(topology, request)


@pytest.fixture(scope="module")
def shared(bin_dir, request):
    """One flowd and reactor host for a module whose tests use fresh source ids (no shared state)."""
    topology = _topology(bin_dir, request)
    yield topology
    topology.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    setattr(item, "rep_" + report.when, report)
