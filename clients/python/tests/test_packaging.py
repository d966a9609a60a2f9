"""The package as a user gets it: a wheel and an sdist from `python -m build`, and `pip install` into a
fresh virtual environment, whose pytest then finds the plugin's fixtures through the entry point."""

import pathlib
import shutil
import subprocess
import sys
import tarfile
import zipfile

import pytest

import flowbus

PACKAGE = pathlib.Path(__file__).resolve().parents[1]
MODULES = ["__init__.py", "aio.py", "client.py", "clone.py", "messages.py", "processes.py", "protocol.py",
           "pytest_plugin.py", "py.typed", "strategies.py", "testing.py", "tracing.py", "values.py", "wire.py"]


def source_copy(tmp_path):
    """The package's files without what earlier runs left (caches, build directories)."""
    target = tmp_path / "src"
    shutil.copytree(PACKAGE, target, ignore=shutil.ignore_patterns(
        "__pycache__", "*.egg-info", "build", "dist", ".hypothesis", ".mypy_cache"))
    return target


def run(command, cwd, timeout=180):
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(map(str, command))} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.mark.time_limit(240)
def test_build_makes_a_wheel_and_an_sdist_of_the_package_version(tmp_path):
    source = source_copy(tmp_path)
    # No isolation: the build uses the setuptools installed here instead of fetching one.
    run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(tmp_path / "dist"), str(source)], tmp_path)
    version = flowbus.__version__
    wheel = tmp_path / "dist" / f"flowbus-{version}-py3-none-any.whl"
    sdist = tmp_path / "dist" / f"flowbus-{version}.tar.gz"
    assert wheel.is_file() and sdist.is_file(), sorted(p.name for p in (tmp_path / "dist").iterdir())
    names = zipfile.ZipFile(wheel).namelist()
    assert sorted(n.split("/", 1)[1] for n in names if n.startswith("flowbus/")) == sorted(MODULES)
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "[pytest11]\nflowbus = flowbus.pytest_plugin" in zipfile.ZipFile(wheel).read(entry_points).decode()
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert f"Version: {version}" in metadata and "Requires-Dist: pyzmq" in metadata
    assert "Typing :: Typed" in metadata and "# flowbus" in metadata, "the README is the long description"
    with tarfile.open(sdist) as archive:
        members = {m.name.split("/", 1)[1] for m in archive.getmembers() if "/" in m.name}
    assert {"pyproject.toml", "README.md", "flowbus/py.typed", "flowbus/aio.py"} <= members


@pytest.mark.time_limit(240)
def test_pip_install_in_a_fresh_venv_registers_the_pytest_plugin(tmp_path):
    source = source_copy(tmp_path)
    venv = tmp_path / "venv"
    # The venv sees this interpreter's pyzmq and pytest, so that nothing is downloaded; flowbus
    # itself is not installed there and comes from the venv alone.
    run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], tmp_path)
    python = venv / "bin" / "python"
    run([python, "-m", "pip", "install", "--quiet", "--no-build-isolation", "--disable-pip-version-check",
         str(source)], tmp_path)
    project = tmp_path / "project"
    project.mkdir()
    found = run([python, "-c", "import flowbus, flowbus.aio; print(flowbus.__file__, flowbus.__version__)"], project)
    assert found.startswith(str(venv)) and found.split()[1] == flowbus.__version__, found
    fixtures = run([python, "-m", "pytest", "--fixtures", "-p", "no:cacheprovider"], project)
    assert "flowbus_topology" in fixtures and "flowbus_topologies" in fixtures, fixtures
