"""Failover: a Stepper given the ingress endpoints of several flowd instances follows the active
one, and a ReactorView given those of a reactor host's instances does the same.

The first tests stand in for the instances with ROUTER sockets answering by hand, to show each
rule of the Stepper alone: steps kept while no instance is bound, resent when acks come from
another instance, after a silence, and from `expected` on `out-of-order`.

Then the real thing (DEPLOYMENT.md, active and standby): two flowd instances share a PostgreSQL
journal, and the active one is SIGKILLed twice while a Stepper publishes; two instances of a
reactor host share their states there, and the active one is SIGKILLed while a ReactorView
(blocking, then flowbus.aio's) sends actions. Each starts a PostgreSQL server of its own
(Debian's binaries, as Sources/FlowBusTesting/PostgresServer.swift does: a fresh cluster in a
temporary directory, trust authentication, a free port on 127.0.0.1, run as the `postgres` user
when the test runs as root) and stops it whatever happens; they are skipped when PostgreSQL's
binaries are not installed.
"""

import asyncio
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import pytest
import zmq

import flowbus
from flowbus import Events, Heartbeat, NoAck, Step, Stepper, aio

STEPS = 300  # numbered `tick` steps, n = 1 … STEPS
CHUNK = 10  # sent together, then their acks awaited: a SIGKILL finds steps in flight
KILLS = (12, 22)  # the active flowd is SIGKILLed right after sending these chunks (steps 121 … 130, 221 … 230)
T = 10.0  # bound of the waits that involve no failover
FAILOVER_T = 45.0  # bound of the waits that span a failover (the standby takes the lease, restores, binds)

CONFIG = """\
endpoints:
  ingress: ipc://{dir}/ingress.sock
  events: ipc://{dir}/events.sock
  control: ipc://{dir}/control.sock
heartbeatMilliseconds: 100
persistence:
  postgres: "{url}"
  checkpoint: {{ keepEntries: 100000000 }}
coordinator: {{ flow: LoadFlow, step: start }}
flows:
  LoadFlow:
    root: stack
    id: load
    steps:
      start:
        - setRoot: {{ screen: home, stepper: load, allowStepWhenNotPresented: true }}
      tick: [none]
"""


# MARK: the Stepper's rules, against instances played by hand


class FakeFlowd:
    """A ROUTER bound where a flowd instance's ingress would be, answering as `source` by hand."""

    def __init__(self, endpoint, source):
        self.context = zmq.Context()
        self.sock = self.context.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.bind(endpoint)
        self.source, self.sequence, self.peer = source, 0, None

    def received(self):
        """The sequences of the steps that arrived since the last call (not waiting)."""
        got = []
        while self.sock.poll(0):
            frames = self.sock.recv_multipart()
            self.peer = frames[0]
            message = flowbus.decode(frames[1:])
            if isinstance(message, Step):
                got.append(message.sequence)
        return got

    def _send(self, frames):
        self.sock.send_multipart([self.peer] + frames)

    def ack(self, stepper, sequence):
        self.sequence += 1
        self._send(flowbus.ack_frames(stepper.source, sequence, source=self.source, sequence=self.sequence))

    def out_of_order(self, stepper, first, expected):
        self.sequence += 1
        self._send(flowbus.diagnostic_frames("out-of-order", "a gap", {"source": stepper.source, "sequence": first,
                                                                      "expected": expected, "count": 1},
                                             source=self.source, sequence=self.sequence))

    def close(self):
        self.sock.close(0)
        self.context.term()


def pump(stepper, fake, count, timeout=T):
    """Lets the stepper work (its wait for acks, in slices) until `fake` received `count` steps,
    then for 0.3 s more to show that nothing else comes; the sequences received."""
    got, deadline, settle = [], time.monotonic() + timeout, None
    while settle is None or time.monotonic() < settle:
        assert time.monotonic() < deadline, f"{fake.source} received only {got}"
        try:
            stepper.wait_ack(stepper.sequence, timeout=0.05)
        except NoAck:
            pass
        got += fake.received()
        if settle is None and len(got) >= count:
            settle = time.monotonic() + 0.3
    return got


@pytest.fixture
def endpoints():
    base = pathlib.Path(tempfile.mkdtemp(prefix="fbfo-", dir="/tmp"))
    try:
        yield [f"ipc://{base}/one.sock", f"ipc://{base}/two.sock"]
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_steps_wait_for_an_instance_to_bind(endpoints):
    """ZMQ_IMMEDIATE: nothing is queued toward an instance that is not there, nor refused: the
    steps are kept and go out, in order, once one binds."""
    with Stepper(endpoints, "load", timeout=T, retransmit_interval=30) as stepper:
        assert [stepper.publish_params("tick", {"n": n}, wait=False) for n in (1, 2)] == [1, 2]
        with pytest.raises(NoAck):
            stepper.wait_ack(2, timeout=0.3)
        second = FakeFlowd(endpoints[1], "flowd#two")
        try:
            assert pump(stepper, second, 2) == [1, 2]
            second.ack(stepper, 2)
            assert stepper.wait_ack(2).ack.source == "flowd#two" == stepper.instance
            assert stepper.resent == 0
        finally:
            second.close()


def three_sent_one_acknowledged(stepper, flowd):
    """Steps 1 to 3 reach `flowd`, which acknowledges the first."""
    for n in (1, 2, 3):
        stepper.publish_params("tick", {"n": n}, wait=False)
    assert pump(stepper, flowd, 3) == [1, 2, 3]
    flowd.ack(stepper, 1)
    stepper.wait_ack(1)


def test_acks_from_another_instance_resend_what_is_unacknowledged(endpoints):
    with Stepper(endpoints, "load", timeout=T, retransmit_interval=30) as stepper:
        first = FakeFlowd(endpoints[0], "flowd#one")
        gone = stepper._dealer.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        try:
            three_sent_one_acknowledged(stepper, first)
        finally:
            first.close()  # it dies having committed 2, acknowledged 1
        # Until the stepper has seen it go, step 4 could still be handed to its connection and
        # lost with it (found again only by the 30 s resend, past this test's bounds).
        try:
            assert gone.poll(T * 1000), "the stepper never saw flowd#one go"
            time.sleep(0.1)  # the event comes just before the connection's end is told to the socket,
            stepper._dealer.getsockopt(zmq.EVENTS)  # which this makes it take in
        finally:
            stepper._dealer.disable_monitor()
            gone.close(0)
        second = FakeFlowd(endpoints[1], "flowd#two")
        try:
            stepper.publish_params("tick", {"n": 4}, wait=False)
            assert pump(stepper, second, 1) == [4]
            second.ack(stepper, 2)  # the journal had 2: 3 and 4 go again, in order
            assert pump(stepper, second, 2) == [3, 4]
            second.ack(stepper, 4)
            assert stepper.wait_ack(4).ack.source == "flowd#two"
            assert stepper.resent == 2
        finally:
            second.close()


def test_silence_resends_with_a_doubling_interval(endpoints):
    with Stepper(endpoints, "load", timeout=T, retransmit_interval=0.2, max_retransmit_interval=0.4) as stepper:
        first = FakeFlowd(endpoints[0], "flowd#one")
        try:
            stepper.publish_params("tick", {"n": 1}, wait=False)
            # Until three arrivals: a loaded machine may be slow to connect or to poll.
            arrivals, until = [], time.monotonic() + 20
            while len(arrivals) < 3 and time.monotonic() < until:
                with pytest.raises(NoAck):
                    stepper.wait_ack(1, timeout=0.02)
                arrivals += [(time.monotonic(), sequence) for sequence in first.received()]
            assert {sequence for _, sequence in arrivals} == {1} and len(arrivals) >= 3, arrivals
            gaps = [b - a for (a, _), (b, _) in zip(arrivals, arrivals[1:])]
            # Lower bounds only (a loaded machine delays), with room for the test's own polling.
            assert gaps[0] >= 0.1 and all(gap >= 0.3 for gap in gaps[1:]), f"0.2 s, then 0.4 s: {gaps}"
            first.ack(stepper, 1)
            stepper.wait_ack(1)
            assert stepper.resent >= len(arrivals) - 1
            assert pump(stepper, first, 0) == [], "acknowledged: not sent again"
        finally:
            first.close()


def test_out_of_order_resends_from_expected_once(endpoints):
    with Stepper(endpoints, "load", timeout=T, retransmit_interval=30) as stepper:
        first = FakeFlowd(endpoints[0], "flowd#one")
        try:
            three_sent_one_acknowledged(stepper, first)
            first.out_of_order(stepper, first=3, expected=2)  # 2 was lost: 3 refused, 1 acknowledged again
            first.ack(stepper, 1)
            assert pump(stepper, first, 2) == [2, 3]
            first.out_of_order(stepper, first=3, expected=2)  # about the 3 sent before the resend
            first.ack(stepper, 1)
            assert pump(stepper, first, 0) == [], "the resend already covered it"
            first.ack(stepper, 3)
            assert stepper.wait_ack(3).sequence == 3 and stepper.resent == 2
        finally:
            first.close()


def test_status_and_events_name_every_endpoint_when_none_answers(endpoints):
    started = time.monotonic()
    with pytest.raises(TimeoutError) as timeout:
        flowbus.status(endpoints, timeout=0.3)
    assert all(endpoint in str(timeout.value) for endpoint in endpoints)
    with pytest.raises(flowbus.NotConnected) as silent:
        Events(endpoints, ["step/"], timeout=0.3)
    assert all(endpoint in str(silent.value) for endpoint in endpoints)
    assert time.monotonic() - started < 5
    with pytest.raises(ValueError):
        Stepper([], "load")


# MARK: two flowd instances on a PostgreSQL journal


def _postgres_binaries():
    root = pathlib.Path("/usr/lib/postgresql")
    versions = [p for p in root.iterdir() if (p / "bin" / "pg_ctl").is_file()] if root.is_dir() else []
    versions.sort(key=lambda p: [int(x) if x.isdigit() else 0 for x in p.name.split(".")], reverse=True)
    return versions[0] / "bin" if versions else None


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _packed_entries(first, last, hex_bytes):
    """The entries of one row of flowbus_batch (StepJournal.PackedEntries): (id, source, sequence,
    name, params) each."""
    data = bytes.fromhex(hex_bytes)
    assert data[0] == 1, f"packed entries of format {data[0]}"
    count = int.from_bytes(data[1:5], "big")
    assert count == int(last) - int(first) + 1, (first, last, count)
    offset, entries = 5, []

    def field():
        nonlocal offset
        length = int.from_bytes(data[offset:offset + 4], "big")
        offset += 4 + length
        return data[offset - length:offset]

    for index in range(count):
        sequence = int.from_bytes(data[offset + 1:offset + 9], "big")
        offset += 9
        _target, name, params, source = field(), field(), field(), field()
        entries.append((int(first) + index, source.decode(), sequence, name.decode(), params))
    assert offset == len(data), "nothing after the last entry"
    return entries


def _params(raw):
    """A journaled params frame: FBV (flowd journals values in its own encoding) or JSON."""
    if not raw:
        return {}
    return flowbus.decode_fbv(raw) if raw[0] == 0x07 else flowbus.decode_json(raw)


def _increasing(sequences):
    return all(a < b for a, b in zip(sequences, sequences[1:]))


class Postgres:
    """A PostgreSQL server of the test's own; `stop()` stops it at once and removes its files."""

    def __init__(self, binaries):
        self.binaries = binaries
        # PostgreSQL refuses to run as root: then it runs as `postgres`, in a directory it owns.
        self.run_as = ["/usr/sbin/runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="fbpg-", dir="/tmp"))  # holds the unix socket: short
        self.data = self.dir / "data"
        self.port = _free_port()
        if self.run_as:
            shutil.chown(self.dir, "postgres", "postgres")
        self.dir.chmod(0o700)

    def run(self, name, *args, timeout=60):
        """Runs one of the binaries to its end; its output, or RuntimeError with it."""
        # A file, not a pipe: the server pg_ctl starts would hold a pipe open for good.
        with tempfile.TemporaryFile() as output:
            done = subprocess.run(self.run_as + [str(self.binaries / name), *map(str, args)], cwd=self.dir,
                                  stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT, timeout=timeout)
            output.seek(0)
            text = output.read().decode(errors="replace")
        if done.returncode != 0:
            raise RuntimeError(f"{name} {' '.join(map(str, args))} failed ({done.returncode}):\n{text}\n{self.log()}")
        return text

    def start(self):
        self.run("initdb", "-D", self.data, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8",
                 "--locale=C", timeout=120)
        self.run("pg_ctl", "-D", self.data, "-l", self.dir / "server.log", "-w", "-t", "60", "-o",
                 f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.dir} -c fsync=off -c max_connections=50",
                 "start", timeout=90)

    def create_database(self, name):
        self.run("createdb", "-h", self.dir, "-p", self.port, "-U", "postgres", name)
        return f"postgres://postgres@127.0.0.1:{self.port}/{name}"

    def query(self, database, sql):
        """Rows of `sql` (psql -At: one line a row, columns joined by |)."""
        text = self.run("psql", "-h", self.dir, "-p", self.port, "-U", "postgres", "-d", database, "-At",
                        "-v", "ON_ERROR_STOP=1", "-c", sql)
        return [line for line in text.split("\n") if line]

    def log(self):
        try:
            return (self.dir / "server.log").read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def stop(self):
        try:
            if (self.data / "postmaster.pid").exists():
                self.run("pg_ctl", "-D", self.data, "-m", "immediate", "-w", "-t", "20", "stop", timeout=30)
        except (RuntimeError, subprocess.SubprocessError, OSError):
            pass
        try:  # still there (pg_ctl failed or timed out): the postmaster's pid is the file's first line
            pid = int((self.data / "postmaster.pid").read_text().split("\n")[0])
            os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)
        except (OSError, ValueError):
            pass
        shutil.rmtree(self.dir, ignore_errors=True)


class Daemon:
    """A daemon of the test's: its run directory (endpoints, config, logs) and its process, which
    `start()` starts (again after a kill: the same endpoints, a new instance)."""

    def __init__(self, base, name):
        self.name = name
        self.dir = base / name
        self.dir.mkdir()
        self.starts = 0
        self.process = self._log = None

    def command(self):
        raise NotImplementedError

    def start(self):
        self.starts += 1
        self.log_path = self.dir / f"{self.name}-{self.starts}.log"
        self._log = open(self.log_path, "wb")
        self.process = subprocess.Popen(self.command(), stdout=self._log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL)
        return self

    def log(self):
        return self.log_path.read_text(errors="replace")

    def wait_log(self, text, timeout):
        """Waits until `text` is in this start's log while the process lives."""
        deadline = time.monotonic() + timeout
        while text not in self.log():
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.process.returncode} before logging {text!r}:"
                                   f"\n{self.log()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name} did not log {text!r} within {timeout} s:\n{self.log()}")
            time.sleep(0.05)

    def kill(self):
        self.process.kill()
        self.process.wait(timeout=10)
        self._log.close()

    def stop(self):
        if self.process is None or self._log.closed:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
        self._log.close()


class Flowd(Daemon):
    """One flowd instance of a pair on one journal."""

    def __init__(self, bin_dir, base, name, url):
        super().__init__(base, name)
        self.bin_dir = bin_dir
        self.ingress, self.events, self.control = (f"ipc://{self.dir}/{s}.sock" for s in ("ingress", "events", "control"))
        self.config = self.dir / "flowd.yaml"
        self.config.write_text(CONFIG.format(dir=self.dir, url=url))

    def command(self):
        return [str(self.bin_dir / "flowd"), "--config", str(self.config), "--log-level", "info"]


class TallyHost(Daemon):
    """Instance `number` of the reactor host `tally` (fixture-reactors), its states in PostgreSQL."""

    def __init__(self, bin_dir, base, number, config):
        super().__init__(base, f"tally-{number}")
        self.bin_dir, self.number, self.config = bin_dir, number, config

    def command(self):
        return [str(self.bin_dir / "fixture-reactors"), "--config", str(self.config), "--host", "tally",
                "--instance", str(self.number)]


@pytest.fixture
def postgres(request):
    binaries = _postgres_binaries()
    if binaries is None:
        pytest.skip("PostgreSQL's binaries are not installed (/usr/lib/postgresql/*/bin; scripts/bootstrap "
                    "installs postgresql-15)")
    if os.geteuid() == 0 and not os.path.exists("/usr/sbin/runuser"):
        pytest.skip("running as root, PostgreSQL must run as `postgres`, and /usr/sbin/runuser is missing")
    server = Postgres(binaries)
    try:
        server.start()
        yield server
        report = getattr(request.node, "rep_call", None)
        if report is not None and report.failed:
            print(f"--- PostgreSQL\n{server.log()}")
    finally:
        signal.alarm(0)  # the tear-down is bounded by its own timeouts: it must not be cut short
        server.stop()


@pytest.fixture
def pair(bin_dir, postgres, request):
    """flowd #1 (active) and #2 (standing by) on one journal."""
    base = pathlib.Path(tempfile.mkdtemp(prefix="fbfo-", dir="/tmp"))  # ipc paths < ~100 bytes
    url = postgres.create_database("failover")
    pair = [Flowd(bin_dir, base, "n1", url), Flowd(bin_dir, base, "n2", url)]
    try:
        pair[0].start().wait_log("active as", timeout=30)
        pair[1].start().wait_log("standby:", timeout=30)
        yield pair
        report = getattr(request.node, "rep_call", None)
        if report is not None and report.failed:
            for one in pair:
                for log in sorted(one.dir.glob("*.log")):
                    print(f"--- flowd {one.name} {log.name}\n{log.read_text(errors='replace')[-6000:]}")
    finally:
        signal.alarm(0)
        for one in pair:
            one.stop()
        shutil.rmtree(base, ignore_errors=True)


def _holder(controls, timeout):
    """The lease holder named by the first instance that answers status, or None."""
    try:
        return flowbus.status(controls, timeout=timeout, params={"sections": []})["journal"]["lease"]["holder"]
    except TimeoutError:
        return None


@pytest.mark.time_limit(180)
def test_stepper_follows_the_active_flowd_across_sigkills(pair, postgres):
    """Two SIGKILLs of the active flowd, back and forth, while one Stepper given both ingress
    endpoints publishes: every step acknowledged and applied exactly once, in order."""
    ingress, events_endpoints, controls = ([one.ingress for one in pair], [one.events for one in pair],
                                           [one.control for one in pair])
    seen = []  # sequences of our steps re-published on events, as received
    heard = set()  # sources of the heartbeats received on events (the flowd instances)

    def read(events, until=lambda: False, timeout=0.0):
        """Reads events (what is there, or until `until()` for at most `timeout` s); until()."""
        deadline = time.monotonic() + timeout
        while not until():
            message = events.next(max(0.0, deadline - time.monotonic()))
            if message is None:
                return until()
            if isinstance(message, Step) and message.source == stepper.source:
                seen.append(message.sequence)
            elif isinstance(message, Heartbeat):
                heard.add(message.source)
        return True

    started = time.monotonic()
    holders = [_holder(controls, T)]  # the instances that held the lease, in turn
    assert holders[0] is not None, "flowd #1 answers status"
    acked_before_kill, failovers = [], []
    active, standby = pair
    with Events(events_endpoints, ["step/load", "hb/"], timeout=T) as events, \
            Stepper(ingress, "load", timeout=T) as stepper:
        killed = None  # when the active flowd was killed, until the new one acknowledges
        for chunk in range(STEPS // CHUNK):
            last = None
            for n in range(chunk * CHUNK + 1, (chunk + 1) * CHUNK + 1):
                last = stepper.publish_params("tick", {"n": n}, wait=False)
                assert last == n
            if chunk in KILLS:
                acked_before_kill.append(stepper._outbox.ledger.acked)
                killed = time.monotonic()
                active.kill()  # SIGKILL, with steps in flight
                # The first time, the stepper finds the new active by itself: its steps go
                # unacknowledged and are sent again after a silence, to whichever instance is
                # connected. The second time the new active serves before the stepper sends again:
                # the next chunk reaches it first, past a gap (out-of-order, resent from `expected`).
                if len(acked_before_kill) == 2:
                    deadline = time.monotonic() + FAILOVER_T
                    while (holder := _holder(controls, 0.5)) in (None, holders[-1]) and time.monotonic() < deadline:
                        pass
                    assert holder not in (None, holders[-1]), "the standby took over"
                    continue
            receipt = stepper.wait_ack(last, timeout=T if killed is None else FAILOVER_T)
            assert receipt.sequence == last
            if killed is not None:
                failovers.append(time.monotonic() - killed)
                killed = None
                holders.append(receipt.ack.source)
                assert holders[-1] != holders[-2], "acks come from the new active instance"
                # From here on the SUB is connected to the new active: nothing more it publishes is missed.
                assert read(events, lambda: receipt.ack.source in heard, T), f"no heartbeat of the new active: {heard}"
                # The killed one comes back as a standby, as it would under systemd's Restart=always.
                active, standby = standby, active
                standby.start().wait_log("standby:", timeout=30)
            read(events)
        assert stepper._outbox.ledger.acked == STEPS, "every step acknowledged"
        assert not stepper._outbox.ledger.unacked and not stepper._outbox.ledger.refusals, "none refused"
        assert stepper.resent > 0, "what the killed ones had not acknowledged was sent again"
        # The re-publication of the last step follows its commit, as the ack does.
        assert read(events, lambda: STEPS in seen, T), f"step {STEPS} not re-published: {seen[-5:]}"
        assert not events.malformed

    # Events: none twice, each instance's in order. Each re-published what it committed (with
    # the one before it: 1 … k1, k1 + 1 … k2, … with each k at least what it acknowledged before
    # being killed); the SUB fair-queues between its two connections, so the last ones of a killed
    # instance, still queued in it, may be read among the first ones of the next. The ones an
    # instance published just before dying, or the next one before the SUB had connected to it,
    # may be missed (a gap, as after any restart: DEPLOYMENT.md).
    assert len(seen) == len(set(seen)), f"re-published twice: {seen}"
    assert any(all(_increasing([s for s in seen if low < s <= high]) for low, high in
                   zip((0, k1, k2), (k1, k2, STEPS)))
               for k1 in range(acked_before_kill[0], acked_before_kill[0] + 3 * CHUNK + 1)
               for k2 in range(acked_before_kill[1], acked_before_kill[1] + 3 * CHUNK + 1)), \
        f"out of order (acknowledged before the kills: {acked_before_kill}): {seen}"
    missed = sorted(set(range(1, STEPS + 1)) - set(seen))
    assert all(any(k - 3 * CHUNK < m <= k + 3 * CHUNK for k in acked_before_kill) for m in missed), \
        f"missed on events, far from the failovers: {missed}"

    # status with both control endpoints: the active answers, and the lease was taken three times.
    lease = flowbus.status(controls, timeout=T)["journal"]["lease"]
    assert lease["holder"] == stepper.instance == holders[-1]
    assert [entry["instance"] for entry in lease["history"]][:3] == holders[::-1], lease

    # The journal: our steps, each exactly once, 1 … STEPS in order, each with its n.
    rows = [entry for row in postgres.query(
                "failover", "SELECT first, last, encode(entries, 'hex') FROM flowbus_batch ORDER BY first")
            for entry in _packed_entries(*row.split("|"))
            if entry[1] == stepper.source]
    assert [sequence for _, _, sequence, _, _ in rows] == list(range(1, STEPS + 1)), \
        "each step journaled (applied) exactly once, in order"
    journaled = [(name, _params(params)) for _, _, _, name, params in rows]
    assert journaled == [("tick", {"n": n}) for n in range(1, STEPS + 1)], journaled[:3]
    print(f"failover: {STEPS} steps, the active flowd killed twice with steps in flight; acknowledged by the new "
          f"active {', '.join(f'{f:.2f}' for f in failovers)} s after the kills; {stepper.resent} sent again; "
          f"{len(missed)} missed on events; {time.monotonic() - started:.1f} s in all")


# MARK: two reactor host instances on PostgreSQL

TALLY_CONFIG = """\
endpoints:
  ingress: ipc://{dir}/ingress.sock
  events: ipc://{dir}/events.sock
  control: ipc://{dir}/control.sock
heartbeatMilliseconds: 100
reactors:
  tally:
    instances:
      - {{ actions: "ipc://{dir}/tally-1/actions.sock", states: "ipc://{dir}/tally-1/states.sock" }}
      - {{ actions: "ipc://{dir}/tally-2/actions.sock", states: "ipc://{dir}/tally-2/states.sock" }}
    serves: [tally/]
    persistence: {{ postgres: "{url}", reactors: [tally/] }}
"""
ACTIONS = 300  # add(n), n = 1 … ACTIONS, sent in chunks of CHUNK; the active host is SIGKILLed after KILLS


@pytest.mark.time_limit(180)
def test_a_view_follows_the_active_reactor_host_across_sigkills(bin_dir, postgres, request):
    """Two SIGKILLs of the active instance of a reactor host (fixture-reactors' tallies, their
    states in PostgreSQL) while a ReactorView given both instances' endpoints sends actions with
    some in flight: every action acknowledged and applied once (the tally counts each), the
    states delivered in order, and the view on the instance that took over."""
    base = pathlib.Path(tempfile.mkdtemp(prefix="fbrh-", dir="/tmp"))
    config = base / "tally.yaml"
    config.write_text(TALLY_CONFIG.format(dir=base, url=postgres.create_database("reactors")))
    hosts = [TallyHost(bin_dir, base, number, config) for number in (1, 2)]
    started = time.monotonic()
    try:
        hosts[0].start().wait_log("holding the lease of reactor host tally", timeout=30)
        hosts[1].start().wait_log("standby: ", timeout=30)
        actions = [f"ipc://{host.dir}/actions.sock" for host in hosts]
        states = [f"ipc://{host.dir}/states.sock" for host in hosts]
        takeovers, delivered = [], []
        with flowbus.ReactorView(actions, states, "tally/py", timeout=T) as view:
            first = view.next_state(T)
            assert first is not None and first.is_snapshot and first.value == {"count": 0, "sum": 0}
            first_instance = view.host_source
            active, standby = hosts
            for chunk in range(ACTIONS // CHUNK):
                last = None
                for n in range(chunk * CHUNK + 1, (chunk + 1) * CHUNK + 1):
                    last = view.send_params("add", {"n": n}, wait=False)
                if chunk in KILLS:
                    killed = time.monotonic()
                    active.kill()  # SIGKILL, with actions in flight
                    view.wait_ack(last, timeout=FAILOVER_T)
                    takeovers.append(time.monotonic() - killed)
                    active.start().wait_log("standby: ", timeout=30)  # the killed one comes back as the standby
                    active, standby = standby, active
                else:
                    view.wait_ack(last)
            assert view.instance is not None and view.instance != first_instance
            final, deadline = first, time.monotonic() + FAILOVER_T
            while final.value["count"] < ACTIONS:
                update = view.next_state(max(0.0, deadline - time.monotonic()))
                assert update is not None, f"states stopped at {final.value} (sequence {final.sequence})"
                delivered.append(update.sequence)
                final = update
            assert _increasing(delivered), f"states out of order: {delivered}"
            assert final.value == {"count": ACTIONS, "sum": ACTIONS * (ACTIONS + 1) // 2}, \
                "each action applied once"
            assert final.sequence == ACTIONS, "one state per action, none skipped or reused"
            assert view.resent > 0, "what the killed instances had not acknowledged was sent again"
            assert view.resynchronisations >= len(KILLS), "a snapshot from each instance that took over"
        print(f"reactor host failover: {ACTIONS} actions, the active instance killed twice; acknowledged by the "
              f"new active {', '.join(f'{t:.2f}' for t in takeovers)} s after the kills; {view.resent} sent again; "
              f"{time.monotonic() - started:.1f} s in all")
    finally:
        report = getattr(request.node, "rep_call", None)
        if report is not None and report.failed:
            for host in hosts:
                for log in sorted(host.dir.glob("*.log")):
                    print(f"--- {host.name} {log.name}\n{log.read_text(errors='replace')[-6000:]}")
        signal.alarm(0)
        for host in hosts:
            host.stop()
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.time_limit(180)
def test_an_async_view_follows_the_active_reactor_host_across_a_sigkill(bin_dir, postgres, request):
    """flowbus.aio's ReactorView, given both instances' endpoints, across one SIGKILL of the active
    instance with actions in flight: every action applied once, the view on the other instance."""
    base = pathlib.Path(tempfile.mkdtemp(prefix="fbra-", dir="/tmp"))
    config = base / "tally.yaml"
    config.write_text(TALLY_CONFIG.format(dir=base, url=postgres.create_database("reactors")))
    hosts = [TallyHost(bin_dir, base, number, config) for number in (1, 2)]
    actions_count, kill_after = 100, 5  # chunks of CHUNK; the active instance is killed after this one

    async def scenario():
        actions = [f"ipc://{host.dir}/actions.sock" for host in hosts]
        states = [f"ipc://{host.dir}/states.sock" for host in hosts]
        async with aio.ReactorView(actions, states, "tally/aio", timeout=T) as view:
            first = await view.next_state(T)
            assert first is not None and first.is_snapshot
            first_instance = view.host_source
            for chunk in range(actions_count // CHUNK):
                last = None
                for n in range(chunk * CHUNK + 1, (chunk + 1) * CHUNK + 1):
                    last = await view.send_params("add", {"n": n}, wait=False)
                if chunk == kill_after:
                    hosts[0].kill()  # SIGKILL, with actions in flight
                    await view.wait_ack(last, timeout=FAILOVER_T)
                else:
                    await view.wait_ack(last)
            assert view.instance is not None and view.instance != first_instance
            final, deadline = first, time.monotonic() + FAILOVER_T
            while final.value["count"] < actions_count:
                update = await view.next_state(max(0.0, deadline - time.monotonic()))
                assert update is not None, f"states stopped at {final.value} (sequence {final.sequence})"
                final = update
            assert final.value == {"count": actions_count, "sum": actions_count * (actions_count + 1) // 2}
            assert final.sequence == actions_count and view.resent > 0

    try:
        hosts[0].start().wait_log("holding the lease of reactor host tally", timeout=30)
        hosts[1].start().wait_log("standby: ", timeout=30)
        asyncio.run(scenario())
    finally:
        report = getattr(request.node, "rep_call", None)
        if report is not None and report.failed:
            for host in hosts:
                for log in sorted(host.dir.glob("*.log")):
                    print(f"--- {host.name} {log.name}\n{log.read_text(errors='replace')[-6000:]}")
        signal.alarm(0)
        for host in hosts:
            host.stop()
        shutil.rmtree(base, ignore_errors=True)
