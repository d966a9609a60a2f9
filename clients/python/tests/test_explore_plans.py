"""`flowctl explore --write-pytest`: the plans it writes are a pytest module that passes against the
real daemons, as a user who keeps it runs it."""

import os
import subprocess
import sys
import textwrap

import pytest

from conftest import HERE

CONFIG = textwrap.dedent("""\
    endpoints:
      ingress: ipc://${FLOWBUS_RUN_DIR:-/tmp/flowbus}/ingress.sock
      events: ipc://${FLOWBUS_RUN_DIR:-/tmp/flowbus}/events.sock
      control: ipc://${FLOWBUS_RUN_DIR:-/tmp/flowbus}/control.sock
    coordinator: { flow: Main, step: start }
    flows:
      Main:
        steps:
          start:
            - tabs:
                id: home
                stepper: home
                flows:
                  - { flow: Shop, step: open }
                  - { flow: Cart, step: open }
          cartTab:
            - selectTab: 1
          help:
            - present: { screen: help, stepper: help }
          helpDone:
            - dismiss: true
      Shop:
        steps:
          open:
            - push: { screen: shop, stepper: shop }
          itemPicked:
            - push: { screen: "shop/item/{itemId}", stepper: "shop/item/{itemId}" }
      Cart:
        steps:
          open:
            - push: { screen: cart, stepper: cart }
    """)


@pytest.mark.time_limit(120)
def test_written_plans_pass_against_the_real_daemons(bin_dir, tmp_path):
    config = tmp_path / "shop.yaml"
    config.write_text(CONFIG)
    plans = tmp_path / "test_shop_plans.py"
    explored = subprocess.run([str(bin_dir / "flowctl"), "explore", "--config", str(config), "--depth", "3", "--strict",
                               "--write-pytest", str(plans)], capture_output=True, text=True, timeout=60)
    assert explored.returncode == 0, explored.stdout + explored.stderr
    assert "nothing unreachable" in explored.stdout
    written = int(explored.stderr.split("wrote ")[1].split(" plans")[0])
    text = plans.read_text()
    assert written >= 3 and text.count("\ndef test_plan_") == written
    assert "pytest.raises(Dropped, match=\"not-visible\")" in text, "refusals are asserted too"
    assert "assert flowbus_topology.tree() == " in text
    env = dict(os.environ, FLOWBUS_BIN_DIR=str(bin_dir), PYTHONPATH=str(HERE.parent))
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "flowbus.pytest_plugin",
                          "--flowbus-config", str(config), str(plans)], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=110)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert f"{written} passed" in run.stdout
