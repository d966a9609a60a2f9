"""flowbus.testing and its pytest plugin against the real daemons."""

import os
import subprocess
import sys
import textwrap

import pytest
from conftest import DEMO_CONFIG, HERE

from flowbus.testing import ExpectationFailed, Topology


def test_an_expectation_fails_at_once_on_the_refusal_of_its_step(bin_dir):
    with Topology(DEMO_CONFIG, bin_dir=bin_dir) as topology:
        navigation = topology.navigation()
        topology.step("apikey", "apiKeyIsComplete")
        navigation.expect("MainFlow.apiKeyIsComplete", "WishlistFlow.movieList", "WatchedFlow.movieList")
        topology.stepper("wishlist/movies").publish_params("nosuchstep", {}, wait=False)
        with pytest.raises(ExpectationFailed) as failure:
            navigation.expect("WishlistFlow.nosuchstep", timeout=30)
        message = str(failure.value)
        # Not the timeout's message: the refusal ended the wait.
        assert message.startswith("flowd refused a step the trace awaits (unknown-step)"), message
        assert "diagnostics received meanwhile:\n  ! unknown-step: WishlistFlow#1 cannot decode step nosuchstep" in message
        navigation.expect_diagnostic("unknown-step")
        navigation.expect_nothing_more()


def test_exhaustive_traces_name_what_differs(bin_dir):
    with Topology(DEMO_CONFIG, bin_dir=bin_dir) as topology:
        navigation = topology.navigation()
        topology.step("apikey", "apiKeyIsComplete")
        with pytest.raises(ExpectationFailed, match="the navigation trace differs") as failure:
            navigation.expect("MainFlow.apiKeyIsComplete", "WatchedFlow.movieList")
        assert "received WishlistFlow.movieList @ wishlist\n" in str(failure.value)
        relaxed = topology.navigation(exhaustive=False)
        topology.step("wishlist/movies", "moviePicked", withMovieId=1)
        relaxed.expect(("WishlistFlow.moviePicked", {"withMovieId": 1}))


def test_the_readme_shows_the_demo_suite_that_runs():
    """clients/python/README.md's plugin example is examples/test_demo_app.py, which scripts/test runs."""
    readme = (HERE.parent / "README.md").read_text()
    block = readme[readme.index("```python\nimport pytest"):]
    block = block[len("```python\n"):block.index("```", 3)]
    example = (HERE.parent / "examples" / "test_demo_app.py").read_text()
    assert example.endswith(block), "the README's block differs from examples/test_demo_app.py"
    assert len(example.splitlines()) <= 40


def run_pytest(tmp_path, bin_dir, source):
    (tmp_path / "test_user.py").write_text(textwrap.dedent(source))
    env = dict(os.environ, PYTHONPATH=str(HERE.parent), FLOWBUS_BIN_DIR=str(bin_dir))
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "flowbus.pytest_plugin",
                           "--flowbus-config", str(DEMO_CONFIG), str(tmp_path / "test_user.py")],
                          env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.time_limit(150)
def test_the_plugin_reports_failures_with_the_daemons_output_and_unasserted_navigations(tmp_path, bin_dir):
    done = run_pytest(tmp_path, bin_dir, """
        def test_fails(flowbus_topology):
            flowbus_topology.navigation().expect("MainFlow.never", timeout=0.2)

        def test_leaves_a_navigation_unasserted(flowbus_topology):
            navigation = flowbus_topology.navigation()
            flowbus_topology.step("apikey", "apiKeyIsComplete")
            navigation.expect("MainFlow.apiKeyIsComplete", exhaustive=False)
    """)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 failed, 1 passed, 1 error" in done.stdout, done.stdout
    assert "flowbus: demo.yaml in /tmp/fbt-" in done.stdout and "flowd listening" in done.stdout, done.stdout
    assert "received but not asserted:\n  + WishlistFlow.movieList @ wishlist\n" in done.stdout, done.stdout


def test_arguments_reach_the_daemons_it_starts_and_wrong_ones_are_refused(bin_dir):
    with pytest.raises(ValueError, match="launch: section starts the daemons"):
        Topology(DEMO_CONFIG, bin_dir=bin_dir, arguments={"demo": ["--counter-delay-ms", "5"]}, start=False)
    with pytest.raises(ValueError, match="arguments for nobody: not a daemon of this topology"):
        Topology(DEMO_CONFIG, bin_dir=bin_dir, launch=False, arguments={"nobody": []}, start=False)
    with Topology(DEMO_CONFIG, bin_dir=bin_dir, launch=False, hosts=["demo"],
                  arguments={"demo": ["--counter-delay-ms", "400"]}) as topology:
        assert set(topology.processes) == {"flowd", "demo"}
        counter = topology.states("counter")
        topology.action("counter", "increase")
        counter.expect({"isLoading": True, "value": 0}, {"isLoading": True, "value": 1}, {"isLoading": False, "value": 1},
                       timeout=5)
        assert "--counter-delay-ms 400" in " ".join(topology.processes["demo"][0].args)
