"""The suite's tiers (tests/support/tiers.py) and how pytest-xdist may spread them.

Every test is marked with its tier at collection. A unit test carrying a service's marker stops the collection with
the list of such tests; a unit test that starts a Slurm job or a service fails at that call.

Under `-n N --dist loadgroup` (make test): the tests that use the local Slurm cluster run in one group, one after
another on one worker, since they drain nodes, restart daemons, count the cluster's jobs and compare its state; each
other integration module is a group of its own, so that its module-scoped fixtures (a trained reference cell, a
started server) are built once, not once per worker. Unit tests spread freely. The order hands out the longest
chain first: the Slurm group, then the unit tests (while tests/support/warm_caches.py builds the shared models in
the background), then the other integration modules. And the Slurm chain keeps the CPU it needs: in a parallel
run every other test runs at a lower scheduling priority (nice 10), its processes too, so that on 2 cores the chain,
the session's longest path, runs near its own speed while the rest fills the time the chain spends waiting.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.support.tiers import Guard, misplaced_markers, tier_of

TESTS = Path(__file__).resolve().parent
BEHIND_THE_CHAIN = 10  # the niceness of every test but the Slurm chain's, in a parallel run
_guard: Guard | None = None
_warming: subprocess.Popen | None = None


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the xdist_group markers into the node ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    misplaced = []
    for item in items:
        tier = tier_of(item.path, TESTS)
        if tier:
            item.add_marker(tier)
        markers = {m.name for m in item.iter_markers()}
        if bad := misplaced_markers(tier, markers):
            misplaced.append(f"  {item.nodeid}: {', '.join(sorted(bad))}")
        if "xdist_group" not in markers and tier == "integration":
            group = "slurm" if "slurm" in markers else item.path.stem
            item.add_marker(pytest.mark.xdist_group(group))
    if misplaced:
        raise pytest.UsageError("unit tests marked as needing a service; move them to tests/integration:\n"
                                + "\n".join(misplaced))
    # stable: within each class the collection's own order (every xdist worker must collect the same order)
    items.sort(key=lambda item: 0 if item.get_closest_marker("slurm") else 1 if item.get_closest_marker("unit")
               else 2)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """In an xdist worker run as root (who may raise a priority back): the Slurm chain at the usual priority, every
    other test behind it, for the whole of its setup, call and teardown (and what they start)."""
    if os.environ.get("PYTEST_XDIST_WORKER") and os.geteuid() == 0:
        os.setpriority(os.PRIO_PROCESS, 0, 0 if item.get_closest_marker("slurm") else BEHIND_THE_CHAIN)
    return (yield)


def pytest_sessionstart(session: pytest.Session) -> None:
    """A parallel run that may reach the integration tier starts the shared builds at once, in the background (the
    controller only: xdist's workers are configured with `workerinput`)."""
    global _warming
    config = session.config
    if hasattr(config, "workerinput") or not config.getoption("numprocesses", None):
        return
    paths = [Path(a.split("::")[0]).resolve() for a in config.args] or [TESTS]
    if not any(p == TESTS or p == TESTS.parent or p.is_relative_to(TESTS / "integration") for p in paths):
        return
    log = Path(tempfile.gettempdir()) / f"comedy-warm-caches-{session.config.rootpath.name}.log"
    with open(log, "w") as out:
        _warming = subprocess.Popen([sys.executable, "-m", "tests.support.warm_caches"], cwd=TESTS.parent,
                                    stdout=out, stderr=subprocess.STDOUT)


def pytest_sessionfinish(session: pytest.Session) -> None:
    if _warming is not None and _warming.poll() is None:
        _warming.terminate()
        _warming.wait()


@pytest.fixture(autouse=True)
def _unit_tier_starts_no_service(request: pytest.FixtureRequest):
    """While a unit test runs, no Slurm job or service may start (tests/support/tiers.py)."""
    global _guard
    if request.node.get_closest_marker("unit") is None:
        yield
        return
    if _guard is None:
        roots = {Path(tempfile.gettempdir()).resolve(),
                 request.config._tmp_path_factory.getbasetemp().resolve()}  # stand-ins a test writes live here
        _guard = Guard(tuple(roots), checkout=TESTS.parent)  # ... and the checkout's programs are never one
    _guard.active = request.node.nodeid
    try:
        yield
    finally:
        _guard.active = None
