"""A demo topology (flowd, the demo reactor host, FlowBus Studio) on a temporary run directory,
and headless Chromium through Selenium, for the studio's browser and Foxglove-protocol tests."""
import os
import pathlib
import re
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
CONFIG = ROOT / "config" / "demo.yaml"


def bin_dir():
    explicit = os.environ.get("FLOWBUS_BIN_DIR")
    if explicit:
        return pathlib.Path(explicit)
    out = subprocess.run(["swift", "build", "--show-bin-path"], cwd=ROOT, capture_output=True, text=True, check=True)
    return pathlib.Path(out.stdout.strip())


def artifacts_dir():
    path = pathlib.Path(os.environ.get("FLOWBUS_ARTIFACTS") or ROOT / ".build" / "artifacts" / "studio")
    path.mkdir(parents=True, exist_ok=True)
    return path


class Topology:
    def __init__(self, run_dir, allow_publish=True):
        self.bin = bin_dir()
        self.run_dir = run_dir
        self.env = dict(os.environ, FLOWBUS_RUN_DIR=str(run_dir), FLOWBUS_CONFIG=str(CONFIG))
        self.processes = []
        self.logs = []
        self.start("flowd", ["--config", str(CONFIG)])
        self.flowctl("status", timeout=20, retry=True)
        self.start("reactor-host", ["--config", str(CONFIG), "--host", "demo"])
        args = ["--config", str(CONFIG), "--port", "0"] + (["--allow-publish"] if allow_publish else [])
        studio = self.start("flowbus-studio", args, capture=True)
        self.url = self.wait_for_line(studio, re.compile(r"studio: (http://\S+)"), 30).group(1)
        self.port = int(re.search(r":(\d+)/", self.url).group(1))

    def start(self, name, args, capture=False):
        log = open(self.run_dir / f"{name}.log", "w+")
        self.logs.append(log)
        process = subprocess.Popen(
            [str(self.bin / name)] + args, cwd=ROOT, env=self.env,
            stdout=subprocess.PIPE if capture else log, stderr=log, text=True)
        self.processes.append(process)
        return process

    @staticmethod
    def wait_for_line(process, pattern, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                raise AssertionError(f"process exited before printing {pattern.pattern}")
            match = pattern.search(line)
            if match:
                return match
        raise AssertionError(f"no line matching {pattern.pattern} within {timeout} s")

    def flowctl(self, *args, timeout=10, retry=False):
        deadline = time.monotonic() + timeout
        while True:
            result = subprocess.run([str(self.bin / "flowctl")] + list(args), cwd=ROOT, env=self.env, capture_output=True, text=True)
            if result.returncode == 0 or not retry or time.monotonic() > deadline:
                assert result.returncode == 0, f"flowctl {' '.join(args)}: {result.stderr}"
                return result.stdout
            time.sleep(0.2)

    def stop(self):
        for process in reversed(self.processes):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in reversed(self.processes):
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
        for log in self.logs:
            log.close()


@pytest.fixture
def topology():
    # ipc:// paths must fit in sun_path: a short directory under /tmp.
    run_dir = pathlib.Path(tempfile.mkdtemp(prefix="fbstudio.", dir="/tmp"))
    topo = Topology(run_dir)
    yield topo
    topo.stop()
    shutil.rmtree(run_dir, ignore_errors=True)


@pytest.fixture
def browser():
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.skip("selenium is not installed: run scripts/bootstrap")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if not chromium or not driver_path:
        pytest.skip("Chromium or chromedriver is missing: run scripts/bootstrap (Debian packages chromium, chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1600,1000"):
        options.add_argument(flag)
    try:
        driver = webdriver.Chrome(service=Service(driver_path), options=options)
    except Exception as error:  # Chromium that cannot start here is a skip, with the reason
        pytest.skip(f"Chromium cannot start: {error}")
    yield driver
    driver.quit()
