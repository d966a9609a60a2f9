"""clients/python/README.md's examples, run as written against the real daemons: each block's printed
lines are checked against the comments that show them."""

import contextlib
import io
import os
import re

from conftest import HERE, REPO

README = HERE.parent / "README.md"


def python_blocks():
    return re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def block(starting):
    """The one block whose first line starts with `starting`."""
    found = [b for b in python_blocks() if b.startswith(starting)]
    assert len(found) == 1, f"{len(found)} README blocks start with {starting!r}"
    return found[0]


def shown(code):
    """What the comments say a block prints: the `# ...` after each print, up to an ellipsis."""
    return [re.sub(r"\s*…$", "", comment) for comment in re.findall(r"print\(.*\)\s+# (.*)$", code, re.M)]


def run(code, bus):
    """Runs a block with RUN pointing at the bus's run directory; its printed lines."""
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        exec(compile(code, str(README), "exec"), {"RUN": f"ipc://{bus.run_dir}", "__name__": "readme"})
    return output.getvalue().splitlines()


def assert_shown(code, printed):
    expected = [line for line in shown(code) if not line.startswith(("params as", "flowd's", "not-visible:"))]
    remaining = iter(printed)
    for line in expected:
        assert any(out.startswith(line) for out in remaining), f"no printed line starts with {line!r} in {printed}"


def test_blocking_examples_then_the_dropped_step(bus):
    first = block("from flowbus import Stepper, Events")
    printed = run(first.replace('RUN = "ipc:///tmp/flowbus"\n', ""), bus)
    assert_shown(first, printed)
    assert printed[-1].startswith("[") and "MainFlow" in printed[-1], "the live tree, last"
    dropped = block("from flowbus import Dropped, Stepper")
    assert run(dropped, bus) == ["dropped: not-visible"], "the Watched tab is not selected after the dashboard opens"


def test_codec_example():
    code = block("import flowbus\n")
    namespace = {}
    exec(compile(code, str(README), "exec"), namespace)
    assert namespace["message"].name == "moviePicked" and namespace["message"].params == {"withMovieId": 23452}


def test_asyncio_example(bus):
    code = block("import asyncio\n")
    printed = run(code, bus)
    assert_shown(code, printed)
    assert printed[-1] == "3 flows"


def test_hypothesis_example(bin_dir, monkeypatch):
    monkeypatch.chdir(REPO)  # the example names config/demo.yaml from the repository's root
    monkeypatch.setenv("FLOWBUS_BIN_DIR", str(bin_dir))
    namespace = {}
    exec(compile(block("from hypothesis import given"), str(README), "exec"), namespace)
    namespace["test_every_declared_step_encodes"]()


def test_pytest_example_is_the_demo_apps_suite():
    code = block("import pytest\nfrom flowbus import Dropped")
    suite = (HERE.parent / "examples" / "test_demo_app.py").read_text()
    assert suite.endswith(code), "the README shows examples/test_demo_app.py (after its docstring), which scripts/test runs"
    assert len(suite.splitlines()) <= 40


def test_every_block_is_run_here_or_named():
    """A new block in the README gets a test above (the two-machine ones are test_failover's)."""
    starts = ["from flowbus import Stepper, Events", "from flowbus import Dropped, Stepper", "import flowbus\n",
              "import asyncio\n", "from hypothesis import given", "import pytest\nfrom flowbus import Dropped",
              'ingress = ["tcp://flowd-a', 'actions = ["tcp://bank-a']
    unmatched = [b.splitlines()[0] for b in python_blocks() if not any(b.startswith(s) for s in starts)]
    assert not unmatched and os.path.isfile(README)
