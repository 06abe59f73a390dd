"""Cells a probe entry "trained" (orchestrator.jobs:probe_train, what the tests and the benchmark submit): its
record says completed and its run dir holds a checkpoints/latest.json that names no real checkpoint. A real launch
of the same sweep must not keep them as done, so they go back through the rerun path (launch/submit.py): outputs
moved to `superseded/probe-entry/`, old attempts marked superseded, the cell trained again from step 0.
"""

from __future__ import annotations

from orchestrator.launch.fingerprints import Changed

PROBE_PREFIX = "orchestrator.jobs:probe_"
PROBE_TAG = "probe-entry"  # the `superseded/<tag>/` its outputs move to


def is_probe(entry: str | None) -> bool:
    return bool(entry) and entry.startswith(PROBE_PREFIX)


def probe_trained(records: dict[str, dict], train_entry: str) -> list[Changed]:
    """The cells whose last training was a probe entry's, when this launch trains with a real entry (a probe
    launch keeps them: the tests relaunch probe sweeps and expect finished cells kept)."""
    if is_probe(train_entry):
        return []
    return [Changed(key, record.get("name") or key, PROBE_TAG, train_entry, record.get("code"))
            for key, record in sorted(records.items())
            if is_probe((record.get("entries") or {}).get("train"))]
