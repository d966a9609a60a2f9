"""Distributed integration tests in Python: start a topology, drive it, assert what it did.

    from flowbus.testing import Topology

    with Topology("config/demo.yaml") as topology:
        navigation = topology.navigation()
        topology.step("apikey", "apiKeyIsComplete")
        navigation.expect("MainFlow.apiKeyIsComplete", "WishlistFlow.movieList", "WatchedFlow.movieList")

The pytest plugin (`flowbus.pytest_plugin`, registered when the package is installed) gives the
same as the `flowbus_topology` fixture. The semantics are FlowBusTesting's (docs/TESTING.md):
traces are exhaustive unless told otherwise, an expectation fails as soon as flowd refuses the
step it awaits, with the refusal's reason, and every failure lists the diagnostics received
meanwhile.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import IO, Any

import zmq

from .client import Events, ReactorView, Receipt, Refused, Stepper, _Owned, socket_options, status
from .messages import Ack, Diagnostic, DidNavigate, Heartbeat, Message, Navigation, deep_link_frames
from .processes import process_output, spawn, stop_processes
from .protocol import endpoint_list
from .values import Value
from .wire import new_source

__all__ = ["Topology", "NavigationTrace", "StateTrace", "ExpectationFailed", "find_bin_dir"]


class ExpectationFailed(AssertionError):
    """What a test expected of the topology did not happen; the message says what did."""


def find_bin_dir(explicit: str | os.PathLike[str] | None = None) -> pathlib.Path:
    """Where flowd, flowctl and reactor-host are: `explicit`, else $FLOWBUS_BIN_DIR, else the
    bin path of the Swift package in the current directory, else the directory of `flowd` in PATH."""
    candidates: list[str | os.PathLike[str] | None] = [explicit, os.environ.get("FLOWBUS_BIN_DIR")]
    if pathlib.Path("Package.swift").is_file() and shutil.which("swift"):
        try:
            candidates.append(subprocess.run(["swift", "build", "--show-bin-path"], capture_output=True, text=True,
                                             check=True, timeout=120).stdout.strip())
        except (subprocess.SubprocessError, OSError):
            pass
    on_path = shutil.which("flowd")
    candidates.append(os.path.dirname(on_path) if on_path else None)
    for candidate in candidates:
        if candidate and (pathlib.Path(candidate) / "flowd").is_file() and (pathlib.Path(candidate) / "flowctl").is_file():
            return pathlib.Path(candidate)
    raise FileNotFoundError("flowd and flowctl not found: set FLOWBUS_BIN_DIR (or --flowbus-bin-dir) to the directory "
                            "`swift build --show-bin-path` prints, after `swift build`")


def _matches_step(text: str, name: str) -> bool:
    """Whether a step written `name(k: v)` (or just `name`) is step `name`."""
    return text == name or text.startswith(name + "(")


class _Expected:
    """`"Flow.step"` or `"Flow.step @ presentable"`, params optional (all of them must match)."""

    def __init__(self, text: str, params: Mapping[str, Value] | None = None) -> None:
        body, _, presentable = text.partition(" @ ")
        self.flow, dot, self.step = body.partition(".")
        if not dot or not self.step:
            raise ValueError(f"{text!r} is not written Flow.step, e.g. 'MainFlow.apiKeyIsComplete'")
        self.presentable: str | None = presentable.strip() or None
        self.params = params
        self.text = text + (f" {params}" if params else "")

    def matches(self, event: Navigation) -> bool:
        return (event.flow == self.flow and event.step == self.step
                and (self.presentable is None or event.presentable == self.presentable)
                and (self.params is None or event.params == self.params))


def _describe(event: Navigation) -> str:
    params = f"({', '.join(f'{k}: {v!r}' for k, v in sorted(event.params.items()))})" if event.params else ""
    return f"{event.flow}.{event.step}{params} @ {event.presentable}"


def _describe_diagnostic(diagnostic: Diagnostic) -> str:
    return f"{diagnostic.reason}: {diagnostic.message}"


class NavigationTrace:
    """Every didNavigate and diagnostic flowd publishes from the moment the trace is made."""

    def __init__(self, topology: Topology, exhaustive: bool = True) -> None:
        self.exhaustive = exhaustive
        self._topology = topology
        self._events = Events(topology.events_endpoints, ["nav/did/", "diag/"], timeout=topology.timeout)
        self.navigations: list[DidNavigate] = []  # every one received, asserted or not
        self.diagnostics: list[Diagnostic] = []
        self._pending: list[DidNavigate] = []
        self._pending_diagnostics: list[Diagnostic] = []

    def close(self) -> None:
        self._events.close()

    def _take(self, message: Message) -> None:
        if isinstance(message, DidNavigate):
            self.navigations.append(message)
            self._pending.append(message)
        elif isinstance(message, Diagnostic):
            self.diagnostics.append(message)
            self._pending_diagnostics.append(message)

    def _read(self, deadline: float) -> Message | None:
        message = self._events.next(max(0.0, deadline - time.monotonic()))
        if message is not None:
            self._take(message)
        return message

    def _drain_taking(self, limit: float = 0.3) -> None:
        """Takes what flowd published up to its next heartbeat (at most `limit` s)."""
        deadline = time.monotonic() + limit
        while (message := self._events._recv(deadline)) is not None and not isinstance(message, Heartbeat):
            if self._events._wanted(message):
                self._take(message)

    def _settle(self) -> None:
        """Reads until two heartbeats came: the second was sent after this call began."""
        heartbeats, deadline = 0, time.monotonic() + self._topology.timeout
        while heartbeats < 2 and time.monotonic() < deadline:
            message = self._events._recv(deadline)
            if message is None:
                break
            if isinstance(message, Heartbeat):
                heartbeats += 1
            elif self._events._wanted(message):
                self._take(message)

    def expect(self, *expected: str | tuple[str, Mapping[str, Value]], exhaustive: bool | None = None,
               timeout: float = 10.0) -> None:
        """Asserts the next navigations: `"Flow.step"`, `"Flow.step @ presentable"` or
        `("Flow.step", {params})`. Exhaustive: exactly these come next; else in this order, others
        between them skipped. Fails at once when flowd refuses the step awaited."""
        wanted = [_Expected(*item) if isinstance(item, tuple) else _Expected(item) for item in expected]
        exhaustive = self.exhaustive if exhaustive is None else exhaustive
        first_diagnostic = len(self.diagnostics)
        deadline = time.monotonic() + timeout
        refusal: Diagnostic | None = None
        while True:
            matched, position, mismatch = self._match(wanted, exhaustive)
            if matched is not None:
                del self._pending[:matched + 1]
                return
            if mismatch or time.monotonic() >= deadline:
                break
            awaited = wanted[position]
            refusal = next((d for d in self.diagnostics[first_diagnostic:]
                            if _matches_step(str(d.details.get("step", "")), awaited.step)
                            and d.details.get("flow") in (None, awaited.flow)), None)
            if refusal is not None and exhaustive:
                break
            self._read(deadline)
        # What else is on its way belongs in the report; waiting longer would only delay it.
        self._drain_taking()
        if refusal is not None:
            why = f"flowd refused a step the trace awaits ({refusal.reason})"
        elif mismatch:
            why = "the navigation trace differs"
        else:
            why = f"expected navigations did not all arrive within {timeout:g} s"
        meanwhile = [f"  ! {_describe_diagnostic(d)}" for d in self.diagnostics[first_diagnostic:]]
        raise ExpectationFailed(
            f"{why} ({'exhaustive' if exhaustive else 'in order, others skipped'}):\n"
            + "\n".join(f"  expected {w.text}" for w in wanted) + "\n"
            + ("\n".join(f"  received {_describe(e)}" for e in self._pending) or "  received nothing")
            + ("\ndiagnostics received meanwhile:\n" + "\n".join(meanwhile) if meanwhile
               else "\ndiagnostics received meanwhile: none"))

    def _match(self, wanted: list[_Expected], exhaustive: bool) -> tuple[int | None, int, bool]:
        """(index of the last pending navigation matched or None, position awaited, mismatch)."""
        position = 0
        for index, event in enumerate(self._pending):
            if wanted[position].matches(event):
                position += 1
                if position == len(wanted):
                    return index, position, False
            elif exhaustive:
                return None, position, True
        return None, position, False

    def expect_diagnostic(self, reason: str, stepper: str | None = None, timeout: float = 10.0) -> Diagnostic:
        """Asserts the next diagnostic (exhaustive) or the next one with `reason`; returns it."""
        deadline = time.monotonic() + timeout
        while True:
            for index, diagnostic in enumerate(self._pending_diagnostics):
                if diagnostic.reason == reason and (stepper is None or diagnostic.details.get("stepper") == stepper):
                    del self._pending_diagnostics[:index + 1]
                    return diagnostic
                if self.exhaustive:
                    raise ExpectationFailed(f"expected diagnostic {reason}, but the next one is "
                                            f"{_describe_diagnostic(diagnostic)}")
            if time.monotonic() >= deadline:
                raise ExpectationFailed(f"expected diagnostic {reason} within {timeout:g} s; none came")
            self._read(deadline)

    def finish(self) -> None:
        """What the pytest plugin checks when a test passed: nothing unasserted, if exhaustive."""
        if self.exhaustive:
            self.expect_nothing_more()

    def expect_nothing_more(self) -> None:
        """Fails if flowd published a navigation or diagnostic (up to now) that was not asserted."""
        self._settle()
        problems = [f"  + {_describe(e)}" for e in self._pending]
        problems += [f"  + ! {_describe_diagnostic(d)}" for d in self._pending_diagnostics]
        self._pending.clear()
        self._pending_diagnostics.clear()
        if problems:
            raise ExpectationFailed("received but not asserted:\n" + "\n".join(problems))


class StateTrace:
    """A reactor's states, the snapshot first, each once and in order (the Clone rule)."""

    def __init__(self, topology: Topology, reactor_id: str, exhaustive: bool = True) -> None:
        actions, states = topology.reactor_endpoints(reactor_id)
        self.exhaustive = exhaustive
        self._view = ReactorView(actions, states, reactor_id, timeout=topology.timeout)
        self.states: list[Value] = []
        snapshot = self._view.next_state(topology.timeout)
        if snapshot is None:
            raise ExpectationFailed(f"no snapshot of {reactor_id} within {topology.timeout:g} s")
        self.initial = snapshot.value
        self._pending: list[Value] = []

    def close(self) -> None:
        self._view.close()

    @property
    def latest(self) -> Value:
        return self.states[-1] if self.states else self.initial

    def finish(self) -> None:
        """What the pytest plugin checks when a test passed: no state left unasserted, if exhaustive."""
        while self.exhaustive and (update := self._view.next_state(0.1)) is not None:
            self.states.append(update.value)
            self._pending.append(update.value)
        if self.exhaustive and self._pending:
            left = ", ".join(repr(value) for value in self._pending)
            self._pending.clear()
            raise ExpectationFailed(f"states received but not asserted: {left}")

    def expect(self, *expected: Value | Callable[[Value], object], timeout: float = 10.0) -> None:
        """Asserts the next states, each a value or a predicate on it (exhaustive: exactly these;
        else in order, others skipped)."""
        deadline = time.monotonic() + timeout
        position = 0
        while position < len(expected):
            while not self._pending:
                update = self._view.next_state(max(0.0, deadline - time.monotonic()))
                if update is None:
                    raise ExpectationFailed(f"expected state {expected[position]!r} within {timeout:g} s; "
                                            f"the latest is {self.latest!r}")
                self.states.append(update.value)
                self._pending.append(update.value)
            value = self._pending.pop(0)
            want = expected[position]
            if want(value) if callable(want) else value == want:
                position += 1
            elif self.exhaustive:
                raise ExpectationFailed(f"expected state {expected[position]!r}, received {value!r}")


class Topology:
    """The daemons a config declares, in a private run directory, stopped on `stop()`.

    A config with a `launch:` section is started with `flowctl launch` (every entry that is not
    optional); one without is flowd and `reactor-host --host NAME` for each reactor host in
    `hosts` (default: all). The config is copied into the run directory, where
    $FLOWBUS_RUN_DIR points: ipc endpoints and journals written with it stay private to the test.
    Each daemon is waited for until it answers (flowd its status, a reactor host its heartbeat).
    Unless the config sets `heartbeatMilliseconds`, the copy sets it to `heartbeat_ms` (50).
    `launch=False` starts flowd and the hosts itself even when the config has a `launch:` section.
    `arguments` adds command-line options per daemon it starts itself, by name (`flowd`, or a
    host's name), e.g. `{"demo": ["--counter-delay-ms", "50"], "flowd": ["--log-level", "debug"]}`.
    """

    def __init__(self, config: str | os.PathLike[str], *, bin_dir: str | os.PathLike[str] | None = None,
                 hosts: Iterable[str] | None = None, timeout: float = 10.0, heartbeat_ms: int | None = 50,
                 start: bool = True, env: Mapping[str, str] | None = None,
                 launch: bool | None = None, arguments: Mapping[str, Sequence[str]] | None = None) -> None:
        self.bin_dir = find_bin_dir(bin_dir)
        self.timeout = timeout
        self.run_dir = pathlib.Path(tempfile.mkdtemp(prefix="fbt-", dir="/tmp"))  # ipc paths stay short
        self.config_path = self.run_dir / pathlib.Path(config).name
        text = pathlib.Path(config).read_text()
        if heartbeat_ms and not any(line.startswith("heartbeatMilliseconds:") for line in text.splitlines()):
            # Fast heartbeats: readiness and "nothing more was published" are known sooner.
            text += f"\nheartbeatMilliseconds: {int(heartbeat_ms)}\n"
        self.config_path.write_text(text)
        self.env = dict(os.environ, **(env or {}), FLOWBUS_RUN_DIR=str(self.run_dir),
                        FLOWBUS_CONFIG=str(self.config_path),
                        PATH=f"{self.bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
        self.config = self._resolved()
        self.hosts: list[str] = list(self.config.get("reactors", {})) if hosts is None else list(hosts)
        self.processes: dict[str, tuple[subprocess.Popen[bytes], IO[bytes]]] = {}
        self.arguments = {name: list(options) for name, options in (arguments or {}).items()}
        unknown = set(self.arguments) - {"flowd", *self.hosts}
        self.launch = bool(self.config.get("launch")) if launch is None else launch
        if self.launch and not self.config.get("launch"):
            raise ValueError(f"{self.config_path.name} has no launch: section to start")
        if self.arguments and self.launch:
            raise ValueError(f"{self.config_path.name}'s launch: section starts the daemons with the options it "
                             "gives: put the options there, or pass launch=False")
        if unknown:
            raise ValueError(f"arguments for {', '.join(sorted(unknown))}: not a daemon of this topology "
                             f"(flowd{''.join(', ' + h for h in self.hosts)})")
        self._closing: list[Stepper | ReactorView | NavigationTrace | StateTrace] = []
        self.traces: list[NavigationTrace | StateTrace] = []  # the traces made, in order
        if start:
            try:
                self.start()
            except BaseException:
                self.stop()
                raise

    def _resolved(self) -> dict[str, Any]:
        done = subprocess.run([str(self.bin_dir / "flowctl"), "config", "--json", "--config", str(self.config_path)],
                              env=self.env, capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise ValueError(f"{self.config_path.name}: {done.stderr.strip()}")
        config: dict[str, Any] = json.loads(done.stdout)
        return config

    @property
    def events_endpoints(self) -> str | list[str]:
        """flowd's events endpoint, or one per instance."""
        return self._endpoints("events")

    def _endpoints(self, key: str) -> str | list[str]:
        endpoints = self.config["endpoints"]
        return endpoints[key] if isinstance(endpoints, dict) else [e[key] for e in endpoints]

    def reactor_endpoints(self, reactor_id: str) -> tuple[str, str]:
        """(actions, states) of the reactor host serving `reactor_id`."""
        for name, spec in self.config.get("reactors", {}).items():
            if any(reactor_id == s or (s.endswith("/") and reactor_id.startswith(s)) for s in spec["serves"]):
                if "instances" in spec:
                    raise ValueError(f"reactor host {name} of {self.config_path.name} lists instances: the Python "
                                     "ReactorView follows one instance; give it the active instance's endpoints")
                return spec["actions"], spec["states"]
        raise ValueError(f"no reactor host of {self.config_path.name} serves {reactor_id!r}")

    def _spawn(self, name: str, command: list[str]) -> None:
        self.processes[name] = spawn(self.run_dir, name, command, self.env)

    def start(self) -> None:
        if self.launch:
            self._spawn("launch", [str(self.bin_dir / "flowctl"), "launch", str(self.config_path)])
        else:
            self._spawn("flowd", [str(self.bin_dir / "flowd"), "--config", str(self.config_path),
                                  *self.arguments.get("flowd", [])])
            for host in self.hosts:
                self._spawn(host, [str(self.bin_dir / "reactor-host"), "--config", str(self.config_path),
                                   "--host", host, *self.arguments.get(host, [])])
        deadline = time.monotonic() + max(self.timeout, 20.0)
        self._wait(lambda: status(self._endpoints("control"), timeout=0.5), "flowd to answer its status", deadline)
        for host in self.hosts:
            states = self.config["reactors"][host]["states"]
            self._wait(lambda: Events(states, [], timeout=0.5).close(), f"reactor host {host}'s heartbeat", deadline)

    def _wait(self, probe: Callable[[], object], what: str, deadline: float) -> None:
        while True:
            for name, (process, _) in self.processes.items():
                if process.poll() is not None:
                    raise RuntimeError(f"{name} exited with status {process.returncode} while waiting for {what}:\n"
                                       + self.output())
            try:
                probe()
                return
            except (TimeoutError, OSError):
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"no {what} within {self.timeout:g} s:\n{self.output()}") from None

    def output(self, tail: int = 6000) -> str:
        """Every process's output, the last `tail` characters of each."""
        return process_output(self.run_dir, tail)

    # Driving it

    def stepper(self, stepper_id: str) -> Stepper:
        stepper = Stepper(self._endpoints("ingress"), stepper_id, events_endpoint=self.events_endpoints,
                          timeout=self.timeout)
        self._closing.append(stepper)
        return stepper

    def step(self, stepper_id: str, name: str, /, **params: Value) -> Receipt:
        """Publishes a step as `stepper_id` and waits for its outcome; raises Refused (Dropped)
        with flowd's reason when it is refused."""
        return self.stepper(stepper_id).publish_params(name, params, wait=True)

    def deeplink(self, name: str, /, **params: Value) -> None:
        """Sends a deep link to every active flow; returns once flowd acknowledged it, raises
        Refused when flowd refused it on receipt."""
        owned = _Owned(None)
        try:
            ingress = self._endpoints("ingress")
            dealer = owned._open_all(zmq.DEALER, endpoint_list(ingress), socket_options(ingress, immediate=True))
            dealer.send_multipart(deep_link_frames(name, params, source=new_source("py-deeplink"), sequence=1))
            deadline = time.monotonic() + self.timeout
            while dealer.poll(max(0, int((deadline - time.monotonic()) * 1000))):
                reply = owned._decode(dealer.recv_multipart())
                if isinstance(reply, Diagnostic):
                    raise Refused(reply, 1)
                if isinstance(reply, Ack):
                    return
            raise TimeoutError(f"flowd did not acknowledge deep link {name} within {self.timeout:g} s")
        finally:
            owned.close()

    def action(self, reactor_id: str, name: str, /, **params: Value) -> Receipt:
        """Sends an action to reactor `reactor_id` and waits for its host's acknowledgement."""
        actions, states = self.reactor_endpoints(reactor_id)
        view = ReactorView(actions, states, reactor_id, timeout=self.timeout)
        self._closing.append(view)
        return view.send_params(name, params)

    def navigation(self, exhaustive: bool = True) -> NavigationTrace:
        """A NavigationTrace from now on."""
        trace = NavigationTrace(self, exhaustive)
        self._closing.append(trace)
        self.traces.append(trace)
        return trace

    def states(self, reactor_id: str, exhaustive: bool = True) -> StateTrace:
        """A StateTrace of `reactor_id` (its snapshot read)."""
        trace = StateTrace(self, reactor_id, exhaustive)
        self._closing.append(trace)
        self.traces.append(trace)
        return trace

    def status(self, **params: Value) -> dict[str, Value]:
        return status(self._endpoints("control"), timeout=self.timeout, params=params or None)

    def tree(self) -> Value:
        """flowd's flows, each with its live tree (status `flows`)."""
        return self.status()["flows"]

    # Stopping

    def stop(self) -> None:
        for closable in self._closing:
            closable.close()
        self._closing = []
        self.traces = []
        stop_processes(list(self.processes.values()))
        self.processes = {}

    def remove(self) -> None:
        shutil.rmtree(self.run_dir, ignore_errors=True)

    def __enter__(self) -> Topology:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self.remove()
