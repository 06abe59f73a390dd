"""The suite's tiers (tests/support/tiers.py) and how pytest-xdist may spread them.

Every test is marked with its tier at collection. A unit test carrying a service's marker stops the collection with
the list of such tests; a unit test that starts a Slurm job or a service fails at that call.

Under `-n N --dist loadgroup` (make test): the tests that use the local Slurm cluster run in one group, one after
another on one worker, since they drain nodes, restart daemons, count the cluster's jobs and compare its state; each
other integration module is a group of its own, so that its module-scoped fixtures (a trained reference cell, a
started server) are built once, not once per worker. Unit tests spread freely.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from tests.support.tiers import Guard, misplaced_markers, tier_of

TESTS = Path(__file__).resolve().parent
_guard: Guard | None = None


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
        _guard = Guard(tuple(roots))
    _guard.active = request.node.nodeid
    try:
        yield
    finally:
        _guard.active = None
