"""Daemons as child processes: started with their output in a run directory, stopped with
SIGTERM then SIGKILL. Standard library only (the codecs' tests use it without pyzmq)."""

import pathlib
import signal
import subprocess

__all__ = ["spawn", "stop_processes", "process_output"]


def spawn(run_dir, name, command, env):
    """Starts `command` with its output in `run_dir/<name>.log`; returns (process, log file)."""
    log = open(pathlib.Path(run_dir) / f"{name}.log", "wb")
    return subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL), log


def stop_processes(processes, grace=15.0):
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


def process_output(run_dir, tail=6000):
    """The last `tail` characters of each `*.log` in `run_dir`."""
    return "\n".join(f"--- {path.name}\n{path.read_text(errors='replace')[-tail:]}"
                     for path in sorted(pathlib.Path(run_dir).glob("*.log")))
