"""A test marked `slurm` finds the cluster up before ANY of its fixtures is set up, whatever their scope (issue 33,
item 1): tests/integration/conftest.py brings it up from a `pytest_runtest_setup` hook, because a module-scoped
fixture that launches a sweep (test_fault_matrix.py's `reference`) is set up before any function-scoped one could
bring the cluster up, and on a machine where Slurm was never installed it met no `sbatch`.

Checked without Slurm: an inner pytest session loads the real conftest with `slurm/local-cluster` replaced by a
script that only logs "up" (and `sinfo` by one that names a partition), and its fixtures of every scope log when
they are set up. On this machine Slurm is installed, so a real run cannot show the order; this can fail."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.inner_pytest import clean_env

REPO = Path(__file__).resolve().parents[2]

CONFTEST = f"""
import importlib.util
import sys
from pathlib import Path

spec = importlib.util.spec_from_file_location("integration_conftest", {str(REPO / "tests/integration/conftest.py")!r})
real = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(real)
real.LOCAL_CLUSTER = Path(__file__).parent / "bin" / "local-cluster"  # logs "up", installs nothing
pytest_configure = real.pytest_configure
pytest_runtest_setup = real.pytest_runtest_setup
slurm_cluster = real.slurm_cluster
"""

TESTS = """
import os
import pytest

def log(what):
    with open(os.environ["ORDER_LOG"], "a") as f:
        f.write(what + "\\n")

@pytest.fixture(scope="session")
def session_fixture():
    log("session fixture")

@pytest.fixture(scope="module")
def launches_a_sweep():  # test_fault_matrix.py's `reference`
    log("module fixture")

@pytest.fixture(autouse=True)
def function_fixture():
    log("function fixture")

def test_without_slurm():
    log("test without slurm")

@pytest.mark.slurm
def test_a_row(session_fixture, launches_a_sweep):
    log("test a row")

@pytest.mark.slurm
def test_another_row(launches_a_sweep, slurm_cluster):
    assert slurm_cluster.partition == "local" and slurm_cluster.hostname == "vm"
    log("test another row")
"""


def test_the_cluster_is_up_before_any_fixture_of_a_slurm_test(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "order.log"
    for name, body in {"local-cluster": f'echo up >> "{log}"', "sinfo": 'echo "local* vm"'}.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_rows.py").write_text(TESTS)
    # the real conftest imports tests.support: the inner session, rooted in tmp_path, finds it through PYTHONPATH
    python_path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    # the caller's pytest options (PYTEST_ADDOPTS with --basetemp, say) are not the inner session's
    env = clean_env(ORDER_LOG=str(log), PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", PYTHONPATH=python_path)
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
                          "--rootdir", str(tmp_path), str(tmp_path / "test_rows.py")], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    # "up" once (cached), before the first slurm test's session- and module-scoped fixtures; never for a test
    # that is not marked slurm.
    assert log.read_text().splitlines() == [
        "function fixture", "test without slurm",
        "up", "session fixture", "module fixture", "function fixture", "test a row",
        "function fixture", "test another row"], log.read_text()
