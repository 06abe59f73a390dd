"""A machine that cannot make network namespaces, reproduced honestly: the same root, with CAP_NET_ADMIN and
CAP_SYS_ADMIN dropped from its capability sets (util-linux's `setpriv`, which the two-node path needs anyway), as in
a container run without `--privileged`. `local-cluster up --nodes 2` then exits 3 saying what it needs, keeps the
one-node cluster it had, and the two-node tests skip with that reason instead of failing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.inner_pytest import clean_env

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
CLUSTER = REPO / "slurm" / "local-cluster"
EXIT_NO_NAMESPACES = 3
NETNS = "comedy-node2"
WITHOUT_THE_RIGHT = ["setpriv", "--inh-caps=-net_admin,-sys_admin", "--bounding-set=-net_admin,-sys_admin", "--"]


def partitions() -> str:
    """Each partition with its node count and nodes, and whether its nodes can run jobs: not their exact state,
    which follows whatever jobs run beside the test (idle, mix, alloc, comp)."""
    out = subprocess.run(["sinfo", "-h", "-o", "%P %D %N %t"], capture_output=True, text=True, check=True).stdout
    return "".join(f"{' '.join(line.split()[:3])} {'usable' if line.split()[3] in USABLE else line}\n"
                   for line in out.splitlines())


USABLE = {"idle", "mix", "alloc", "comp"}


@pytest.fixture
def one_node(slurm_cluster):
    """The one-node cluster, as on a machine where node 2 was never made (CI runs modules one after another; the
    two-node module restores this itself)."""
    if NETNS in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout:
        done = subprocess.run([str(CLUSTER), "up", "--nodes", "1"], capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout + done.stderr
    return partitions()


def test_up_nodes_2_without_the_capabilities_exits_3_says_why_and_keeps_the_cluster(one_node):
    check = subprocess.run([*WITHOUT_THE_RIGHT, "ip", "netns", "add", "comedy-captest"], capture_output=True,
                           text=True)
    assert check.returncode != 0, "setpriv did not take the right away: this test would prove nothing"
    done = subprocess.run([*WITHOUT_THE_RIGHT, str(CLUSTER), "up", "--nodes", "2"], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == EXIT_NO_NAMESPACES, done.stdout + done.stderr
    assert "cannot make network namespace comedy-node2" in done.stderr
    assert "needs root with CAP_NET_ADMIN and CAP_SYS_ADMIN" in done.stderr and "Traceback" not in done.stderr
    assert NETNS not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert partitions() == one_node  # nothing of the running cluster changed


def test_the_two_node_tests_skip_with_the_reason(one_node):
    """The two-node module run in a process without the capabilities: every test skipped, naming what it needs."""
    done = subprocess.run([*WITHOUT_THE_RIGHT, sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                           "tests/integration/test_two_nodes.py"], cwd=REPO, capture_output=True, text=True,
                          timeout=900, env=clean_env())
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "no second node" in out and "needs root with CAP_NET_ADMIN and CAP_SYS_ADMIN" in out, out
    summary = out.strip().splitlines()[-1]
    assert "skipped" in summary and "passed" not in summary and "failed" not in summary, summary
    assert partitions() == one_node
