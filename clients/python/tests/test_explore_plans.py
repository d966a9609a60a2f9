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


@pytest.mark.time_limit(120)
def test_run_drives_the_plans_and_names_the_first_divergence(bin_dir, tmp_path):
    config = tmp_path / "shop.yaml"
    config.write_text(CONFIG)
    explore = [str(bin_dir / "flowctl"), "explore", "--config", str(config), "--depth", "3", "--run"]
    # A flowd that runs another app than the one explored: an item opens another screen. The
    # plans before the one that picks an item agree with the model; that one does not.
    changed = tmp_path / "changed.yaml"
    changed.write_text(CONFIG.replace('screen: "shop/item/{itemId}"', 'screen: "shop/product/{itemId}"')
                       + "heartbeatMilliseconds: 50\n")
    wrapper = tmp_path / "other-flowd"
    wrapper.write_text(f'#!/bin/sh\nexec "{bin_dir / "flowd"}" --config "{changed}" --log-level warning\n')
    wrapper.chmod(0o755)
    differed = subprocess.run(explore + ["--flowd", str(wrapper)], capture_output=True, text=True, timeout=100)
    assert differed.returncode == 1, differed.stdout + differed.stderr
    assert ("the real flowd differs from the model at plan 7 (shop: itemPicked(itemId: 1)): at message 1 (… shop: itemPicked(itemId: 1)) the model publishes "
            "command push shop/item/1 in shop (screen) of Shop, flowd command push shop/product/1 in shop (screen) "
            "of Shop") in differed.stderr, differed.stderr


@pytest.mark.time_limit(120)
def test_walk_agrees_with_the_model_and_shrinks_a_forgotten_binding(bin_dir, tmp_path):
    config = tmp_path / "shop.yaml"
    config.write_text(CONFIG)
    walk = [str(bin_dir / "flowctl"), "explore", "--config", str(config), "--walk", "300", "--seed", "3"]
    # Stopped and started twice on a journal, flowd goes on as the model does.
    agreed = subprocess.run(walk + ["--restarts", "2"], capture_output=True, text=True, timeout=100)
    assert agreed.returncode == 0, agreed.stdout + agreed.stderr
    assert agreed.stdout.startswith("walk of 300 messages, seed 3, flowd stopped and restarted 2 times on its journal: flowd "
                                    "published every didNavigate, navigation command and diagnostic"), agreed.stdout
    # A flowd whose item screen forgets its stepper: its bindings differ from the model's after the
    # first item is pushed, and the walk shrinks it to the one message that shows it, printed with
    # the seed and the options that replay it.
    forgets = tmp_path / "forgets.yaml"
    forgets.write_text(CONFIG.replace(', stepper: "shop/item/{itemId}" }', " }") + "heartbeatMilliseconds: 50\n")
    wrapper = tmp_path / "forgetful-flowd"
    wrapper.write_text(f'#!/bin/sh\nexec "{bin_dir / "flowd"}" --config "{forgets}" --log-level warning\n')
    wrapper.chmod(0o755)
    found = subprocess.run(walk + ["--flowd", str(wrapper)], capture_output=True, text=True, timeout=110)
    assert found.returncode == 1, found.stdout + found.stderr
    lines = found.stdout.splitlines()
    assert lines[0] == ("walk of 300 messages, seed 3: flowd's bindings after message 16 differ from the model's: "
                        "only the model has stepper shop/item/1 bound to shop/item/1 in Shop#1"), lines
    assert lines[1].startswith("shrunk to 1 message in ") and "--walk 300 --seed 3 --flowd " in lines[1], lines
    assert lines[2] == "  1. shop: itemPicked(itemId: 1)", lines
    assert lines[3] == ("which fails as: flowd's bindings after message 1 differ from the model's: only the model has "
                        "stepper shop/item/1 bound to shop/item/1 in Shop#1"), lines

@pytest.mark.time_limit(120)
def test_walk_sends_actions_and_follows_the_steps_reactors_publish(bin_dir, tmp_path):
    demo = HERE.parent.parent.parent / "config" / "demo.yaml"
    walk = [str(bin_dir / "flowctl"), "explore", "--config", str(demo), "--walk", "250", "--seed", "42", "--renderer"]
    # The demo's reactor host runs too: the login reactor's apiKeyIsComplete steps are applied by
    # the model where flowd applied them, and every reactor's states are gapless. Renderer reports
    # (appeared, disappeared, dismissed) go to flowd and the model alike.
    # Killed (SIGKILL) and started again on its journal, flowd still goes on as the model does.
    agreed = subprocess.run(walk + ["--restarts", "1", "--kill"], capture_output=True, text=True, timeout=100)
    assert agreed.returncode == 0, agreed.stdout + agreed.stderr
    head, _, rest = agreed.stdout.partition(": ")
    assert head.startswith("walk of 250 messages (") and " renderer reports), seed 42, flowd killed and restarted 1 time" in head, head
    assert " steps from reactors included" in rest and "acknowledged every action" in rest, rest
    # An action the counter does not take, listed as a sample: refused, and shrunk to that action.
    wrong = tmp_path / "demo.yaml"
    wrong.write_text(demo.read_text().replace("counter: [increase, decrease]", "counter: [increase, reset]"))
    found = subprocess.run(walk[:3] + [str(wrong)] + walk[4:], capture_output=True, text=True, timeout=100)
    assert found.returncode == 1, found.stdout + found.stderr
    lines = found.stdout.splitlines()
    assert "reactor host demo refused action counter: reset, which reactors.demo.sampleActions lists" in lines[0], lines
    assert lines[1].startswith("shrunk to 1 message in ") and lines[2] == "  1. action counter: reset", lines


@pytest.mark.time_limit(120)
def test_walk_holds_swift_flows_to_invariants_and_to_a_flowd_never_restarted(bin_dir, tmp_path):
    movie_app = HERE.parent.parent.parent / "config" / "movie-app.yaml"
    walk = [str(bin_dir / "flowctl"), "explore", "--config", str(movie_app), "--walk", "120", "--seed", "5",
            "--restarts", "1", "--flowd", str(bin_dir / "movie-app")]
    # No model: the config's sampleSteps say what each flow's steppers may send.
    agreed = subprocess.run(walk, capture_output=True, text=True, timeout=100)
    assert agreed.returncode == 0, agreed.stdout + agreed.stderr
    assert ("flowd applied every message" in agreed.stdout and "restored as it was before each stop, and it "
            "published what a flowd never restarted does" in agreed.stdout), agreed.stdout
    # A coordinator that comes back without its journal: found at the restart, and shrunk to the
    # two messages around it.
    forgetful = tmp_path / "forgetful-movie-app"
    forgetful.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        run=$(dirname "$2")
        if [ -e "$run/started" ]; then
          grep -v '^persistence:' "$2" > "$run/nojournal.yaml"
          exec "{bin_dir / "movie-app"}" --config "$run/nojournal.yaml" --log-level warning
        fi
        touch "$run/started"
        exec "{bin_dir / "movie-app"}" "$@"
        """))
    forgetful.chmod(0o755)
    walk[5], walk[7] = "10", "2"
    walk[-1] = str(forgetful)
    found = subprocess.run(walk, capture_output=True, text=True, timeout=100)
    assert found.returncode == 1, found.stdout + found.stderr
    lines = found.stdout.splitlines()
    assert "flowd's tree restored from its journal after message 5 differs from the one it had before it " \
           "stopped" in lines[0], lines
    assert lines[1].startswith("shrunk to 2 messages in "), lines
