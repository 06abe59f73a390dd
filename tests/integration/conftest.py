"""Integration fixtures: the real local Slurm cluster, brought up once per test session.

`slurm/local-cluster up` installs and starts the cluster on a fresh machine and is a one-second
no-op when it is already up, so the fixture always calls it. The cluster is left running after the
session: the next session (or a developer) reuses it instead of paying for a bring-up again.
"""

from __future__ import annotations

import functools
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.probe_sweep import fresh_sweep

REPO = Path(__file__).resolve().parents[2]
LOCAL_CLUSTER = REPO / "slurm" / "local-cluster"
# A fresh machine first installs the apt packages: about half a minute here, longer on a slow mirror.
UP_TIMEOUT_S = 1200


@dataclass(frozen=True)
class LocalSlurm:
    """What a test needs to address the local cluster."""

    partition: str  # the default partition, where plain `sbatch` sends jobs
    hostname: str  # the one node's name, e.g. for `scontrol update nodename=...`
    script: Path = LOCAL_CLUSTER


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slurm: needs the local Slurm cluster (brought up by the slurm_cluster fixture)")


@functools.cache
def bring_up() -> LocalSlurm:
    """Bring the local cluster up (or find it up), once per session. A failed bring-up errors the test, never
    skips it."""
    try:
        proc = subprocess.run([str(LOCAL_CLUSTER), "up"], capture_output=True, text=True, timeout=UP_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"`slurm/local-cluster up` did not finish in {UP_TIMEOUT_S}s:\n{exc.stdout}{exc.stderr}")
    if proc.returncode != 0:
        pytest.fail(
            f"`slurm/local-cluster up` failed (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}",
            pytrace=False,
        )
    # Ask the cluster itself rather than repeating the script's names: "local* vm" marks the default.
    sinfo = subprocess.run(["sinfo", "-h", "-o", "%P %N"], capture_output=True, text=True, check=True)
    default = [line.split() for line in sinfo.stdout.splitlines() if line.split()[0].endswith("*")]
    if not default:
        pytest.fail(f"the local cluster has no default partition; sinfo says:\n{sinfo.stdout}", pytrace=False)
    partition, node = default[0]
    return LocalSlurm(partition=partition.rstrip("*"), hostname=node)


@pytest.fixture(scope="session")
def slurm_cluster() -> LocalSlurm:
    return bring_up()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test marked `slurm` finds the cluster up before ANY of its fixtures is set up, whatever their scope: a
    module-scoped fixture that launches a sweep is set up before a function-scoped autouse one could bring the
    cluster up, and on a machine where Slurm was never installed it met no `sbatch` (issue 33)."""
    if item.get_closest_marker("slurm"):
        bring_up()


@pytest.fixture
def sweep_args(tmp_path):
    """(name, arguments, sweep dir) of a fresh 2-cell probe sweep under tmp_path (tests/support/probe_sweep.py);
    its jobs, and its watcher jobs, cancelled afterwards."""
    yield from fresh_sweep(tmp_path)
