"""Steps per second into a real flowd: flowbus.aio's Stepper beside a bare pyzmq DEALER, same run.

    swift build -c release --product flowd
    python3 clients/python/benchmarks/stepper_rate.py --bin-dir .build/release [--steps 20000] [--rounds 3]

Both publish the same steps (stepper `bench`, step `moviePicked`, one int param) to one flowd and
stop at the ack that covers the last. The bare DEALER sends frames encoded before the clock starts
and reads nothing until then: the fastest a Python sender can go. The aio Stepper encodes each step,
keeps it until acknowledged and reads acks as they come (`publish(wait=False)`, then `wait_ack`).
Rounds alternate; the medians and their ratio are printed.
"""

from __future__ import annotations

import argparse
import asyncio
import pathlib
import statistics
import sys
import tempfile
import time

import zmq

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # flowbus from this checkout

from flowbus import Ack, aio, decode, new_source, status, step_frames  # noqa: E402
from flowbus.processes import process_output, spawn, stop_processes  # noqa: E402
from flowbus.testing import find_bin_dir  # noqa: E402

CONFIG = """
endpoints:
  ingress: ipc://{run}/ingress.sock
  events: ipc://{run}/events.sock
  control: ipc://{run}/control.sock
coordinator:
  flow: BenchFlow
  step: start
flows:
  BenchFlow:
    root: stack
    id: bench
    steps:
      start:
        - setRoot:
            screen: bench
            stepper: bench
            allowStepWhenNotPresented: true
      moviePicked:
        - none
"""


def bare_dealer(ingress: str, steps: int) -> float:
    """Steps per second of a DEALER sending pre-encoded frames, then reading acks up to the last."""
    source = new_source("bench")
    frames = [step_frames("bench", "moviePicked", {"withMovieId": n}, source=source, sequence=n)
              for n in range(1, steps + 1)]
    context = zmq.Context()
    dealer = context.socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    dealer.setsockopt(zmq.SNDHWM, 0)
    dealer.connect(ingress)
    try:
        start = time.perf_counter()
        for message in frames:
            dealer.send_multipart(message)
        acked = 0
        while acked < steps:
            if not dealer.poll(10_000):
                raise TimeoutError(f"bare DEALER: acked {acked} of {steps}")
            reply = decode(dealer.recv_multipart())
            if isinstance(reply, Ack) and reply.acked_source == source:
                acked = max(acked, reply.acked_sequence)
        return steps / (time.perf_counter() - start)
    finally:
        dealer.close(0)
        context.term()


async def aio_stepper(ingress: str, steps: int) -> float:
    async with aio.Stepper(ingress, "bench", timeout=30) as stepper:
        start = time.perf_counter()
        for n in range(1, steps + 1):
            await stepper.publish("moviePicked", wait=False, withMovieId=n)
        await stepper.wait_ack(steps)
        return steps / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bin-dir", help="where flowd is (default: as flowbus.testing.find_bin_dir)")
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    bin_dir = find_bin_dir(options.bin_dir)
    run = pathlib.Path(tempfile.mkdtemp(prefix="fbrate-", dir="/tmp"))
    (run / "flowd.yaml").write_text(CONFIG.format(run=run))
    flowd = spawn(run, "flowd", [str(bin_dir / "flowd"), "--config", str(run / "flowd.yaml"),
                                 "--log-level", "warning"], None)
    try:
        deadline = time.monotonic() + 20
        while not (run / "control.sock").exists():
            if flowd[0].poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"flowd did not start:\n{process_output(run)}")
            time.sleep(0.05)
        status(f"ipc://{run}/control.sock", timeout=10)
        ingress = f"ipc://{run}/ingress.sock"
        bare_dealer(ingress, 1000)  # warm-up of both paths
        asyncio.run(aio_stepper(ingress, 1000))
        bare, stepper = [], []
        for _ in range(options.rounds):
            bare.append(bare_dealer(ingress, options.steps))
            stepper.append(asyncio.run(aio_stepper(ingress, options.steps)))
        b, s = statistics.median(bare), statistics.median(stepper)
        print(f"flowd: {bin_dir / 'flowd'}; {options.steps} steps per run, {options.rounds} rounds, medians")
        print(f"bare pyzmq DEALER  {b:10.0f} steps/s   (rounds: {', '.join(f'{x:.0f}' for x in bare)})")
        print(f"flowbus.aio.Stepper{s:10.0f} steps/s   (rounds: {', '.join(f'{x:.0f}' for x in stepper)})")
        print(f"ratio              {s / b:10.2f}x")
    finally:
        stop_processes([flowd], grace=10)


if __name__ == "__main__":
    main()
