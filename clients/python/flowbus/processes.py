"""Daemons as child processes: started with their output in a run directory, stopped with
SIGTERM then SIGKILL. Standard library only (the codecs' tests use it without pyzmq)."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
from collections.abc import Collection, Mapping, Sequence
from typing import IO

__all__ = ["spawn", "stop_processes", "process_output"]


def spawn(run_dir: str | os.PathLike[str], name: str, command: Sequence[str],
          env: Mapping[str, str] | None) -> tuple[subprocess.Popen[bytes], IO[bytes]]:
    """Starts `command` with its output in `run_dir/<name>.log`; returns (process, log file)."""
    log = open(pathlib.Path(run_dir) / f"{name}.log", "wb")
    return subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL), log


def stop_processes(processes: Collection[tuple[subprocess.Popen[bytes], IO[bytes]]], grace: float = 15.0) -> None:
    """SIGTERM to every (process, log) of `processes`, SIGKILL to those still there after `grace` s."""
    for process, _ in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process, log in processes:
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)
        log.close()


def process_output(run_dir: str | os.PathLike[str], tail: int = 6000) -> str:
    """The last `tail` characters of each `*.log` in `run_dir`."""
    return "\n".join(f"--- {path.name}\n{path.read_text(errors='replace')[-tail:]}"
                     for path in sorted(pathlib.Path(run_dir).glob("*.log")))
