"""A probe entry's cells are no real training (issue 31): a real launch of the same sweep must not keep them as
done. `probe_trained` names them, `triage` sends them back to training, `supersede` moves the fake
checkpoints/latest.json aside so the real training starts from step 0."""

from __future__ import annotations

import json

from orchestrator.launch import ledger as L
from orchestrator.launch.fingerprints import supersede
from orchestrator.launch.plan import triage
from orchestrator.launch.probed import PROBE_TAG, probe_trained
from record.files import atomic_write
from record.rundir import RunDir

REAL = "orchestrator.jobs:train_job"
PROBE = "orchestrator.jobs:probe_train"


def finished(tmp_path, key: str, entry: str) -> dict:
    """A cell whose training and evaluation completed under `entry`, with a checkpoints/latest.json."""
    run = RunDir(tmp_path / key)
    atomic_write(run.latest_checkpoint, json.dumps({"tag": "step-3", "step": 3}))
    record = L.new_record("s", key, key, {}, run.path)
    record["entries"] = {"train": entry, "eval": "orchestrator.jobs:probe_eval"}
    L.add_attempt(record, "train", "t", 1.0, job_id="1", state="COMPLETED")
    L.add_attempt(record, "eval", "e", 2.0, job_id="2", state="COMPLETED")
    record["final"] = {"status": "completed", "at": 3.0}
    return record


def test_a_real_launch_trains_again_what_a_probe_entry_finished(tmp_path):
    records = {"p": finished(tmp_path, "p", PROBE), "r": finished(tmp_path, "r", REAL)}
    probed = probe_trained(records, REAL)
    assert [c.run_key for c in probed] == ["p"]
    todo = triage(records, ["p", "r"], rerun={c.run_key: c for c in probed})
    assert todo.train == ("p",) and todo.kept == {"done": 1}
    moved = supersede(tmp_path / "p", probed[0].recorded)
    assert moved == tmp_path / "p" / "superseded" / PROBE_TAG
    assert not RunDir(tmp_path / "p").latest_checkpoint.exists()
    assert RunDir(tmp_path / "r").latest_checkpoint.exists()


def test_a_probe_relaunch_keeps_what_probes_finished(tmp_path):
    records = {"p": finished(tmp_path, "p", PROBE)}
    assert probe_trained(records, PROBE) == []
    assert triage(records, ["p"]).kept == {"done": 1}
