"""`orchestrate preflight` on the local Slurm cluster (issue 31): Slurm's own `sbatch --test-only` verdict on each
array and on the watcher, then the probe jobs on the node (orchestrator/preflight/probe_job.py). A good sweep passes
(exit 0); planted faults each fail with their own row and fix (exit 1); the sweep's directory holds nothing but
preflight/ afterwards (no ledger, no run dirs, no code snapshot of the sweep).

Planted here: an unknown partition; an account the cluster refuses (the local cluster enforces associations, as real
ones do: slurm/templates/slurm.conf.in; `up` gives the submitting users one in account `comedy` and none in
`chemistry`); a missing dataset file, a model directory without weights, a tracking server the node cannot reach and
an output_root on a nearly full filesystem (one sweep, one preflight: each its own rows); a watcher partition that
cannot run a job (a partition this test creates DOWN and deletes). A tracking server that only the second node cannot
reach is planted in tests/integration/test_two_nodes.py (it needs node 2).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.support.probe_sweep import orchestrate

pytestmark = pytest.mark.slurm


def rows_of(done: subprocess.CompletedProcess) -> list[dict]:
    return json.loads(done.stdout)["rows"]


def only_preflight(sweep_dir: Path) -> None:
    """Nothing of the sweep written: its directory holds preflight/ and nothing else."""
    assert sorted(p.name for p in sweep_dir.iterdir()) == ["preflight"], sorted(sweep_dir.iterdir())


def test_preflight_passes_a_good_sweep_with_its_probes(slurm_cluster, sweep_args, tmp_path):
    name, args, sweep_dir = sweep_args
    good = orchestrate("preflight", *args, "--json", "--probe-timeout", "300", cwd=tmp_path, timeout=400)
    assert good.returncode == 0, good.stdout + good.stderr
    rows = rows_of(good)
    assert all(r["ok"] for r in rows), [r for r in rows if not r["ok"]]
    assert [r["group"] for r in rows if r["check"] == "sbatch --test-only"] == ["train-0", "eval-0", "watcher"]
    checks = {(r["group"], r["check"].split()[0]) for r in rows}
    for group in ("train-0", "eval-0"):  # one probe per resource group, each reporting from the node
        assert {(group, c) for c in ("import", "gpus", "model", "tracking", "run")} <= checks, checks
    assert {("watcher", "sbatch"), ("watcher", "run")} <= checks
    assert "probe train-0: done (COMPLETED)" in good.stderr
    only_preflight(sweep_dir)


def test_preflight_names_an_unknown_partition(slurm_cluster, sweep_args, tmp_path):
    # the arrays' partition unknown, the watcher's good: each row its own verdict; no probe goes out
    name, args, sweep_dir = sweep_args
    bad = orchestrate("preflight", *args, "sweep.slurm.overrides.partition=nope",
                      "sweep.slurm.overrides.watcher.partition=service", "--json", cwd=tmp_path)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    rows = {r["group"]: r for r in rows_of(bad)}
    assert not rows["train-0"]["ok"] and "partition" in rows["train-0"]["words"].lower()
    assert "sinfo" in rows["train-0"]["fix"]
    assert not rows["eval-0"]["ok"] and rows["watcher"]["ok"]
    assert not sweep_dir.exists()  # nothing written: no ledger, no run dirs, no probe


def test_preflight_names_an_account_the_cluster_refuses(slurm_cluster, sweep_args, tmp_path):
    # no submitting user here has an association in `chemistry`: Slurm refuses every job, the watcher's too
    name, args, sweep_dir = sweep_args
    bad = orchestrate("preflight", *args, "sweep.slurm.overrides.account=chemistry", "--json", cwd=tmp_path)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    found = rows_of(bad)
    limit = [r for r in found if r["check"] == "submission limit"]  # read from the real sacctmgr; never a failure
    assert len(limit) == 1 and limit[0]["ok"] and "this sweep needs" in limit[0]["words"], limit
    rows = {r["group"]: r for r in found if r["check"] != "submission limit"}
    assert sorted(rows) == ["eval-0", "train-0", "watcher"], rows  # no probe goes out
    for row in rows.values():
        assert not row["ok"] and "Invalid account" in row["words"], row  # Slurm's own words
        assert "sacctmgr show assoc user=$USER" in row["fix"], row
    assert not sweep_dir.exists()  # nothing written: no ledger, no run dirs, no probe


@pytest.fixture
def nearly_full(tmp_path):
    """A 32 MB tmpfs with 6 MB left: room for the preflight's own files, not for the plan's checkpoints."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mount = tmp_path / "small"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", str(mount)], check=True)
    try:
        subprocess.run(["fallocate", "-l", "26M", str(mount / "filler")], check=True)
        yield mount
    finally:
        if subprocess.run(["umount", str(mount)], check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(mount)], check=False)


def weightless_model(root: Path) -> Path:
    """A model directory with its config and tokenizer and no weights; its shape (about 20M parameters) makes the
    plan's checkpoints about 1.2 GB, more than the nearly full filesystem has."""
    model = root / "no-weights"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({
        "model_type": "qwen2", "hidden_size": 256, "intermediate_size": 1024, "num_hidden_layers": 4,
        "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 32000}))
    (model / "tokenizer.json").write_text("{}")
    return model


def dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again: nothing listens there


@pytest.fixture
def down_partition(slurm_cluster):
    """A partition only this test uses, on the cluster's node, DOWN: it takes jobs and never runs them."""
    partition = f"down{uuid.uuid4().hex[:6]}"
    subprocess.run(["scontrol", "create", f"PartitionName={partition}", f"Nodes={slurm_cluster.hostname}",
                    "State=DOWN", "MaxTime=INFINITE"], check=True, capture_output=True)
    try:
        yield partition
    finally:
        subprocess.run(["scontrol", "delete", f"PartitionName={partition}"], check=False, capture_output=True)


def test_preflight_probes_name_each_fault(slurm_cluster, sweep_args, tmp_path, nearly_full, down_partition):
    """Five faults planted in one sweep, one preflight: each its own failing rows, the rest passing."""
    name, args, _ = sweep_args
    args = [a for a in args if not a.startswith("sweep.output_root=")]
    sweep_dir = nearly_full / name
    missing = tmp_path / "data" / "train.jsonl"
    done = orchestrate("preflight", *args, f"sweep.output_root={nearly_full}", f"data.train_path={missing}",
                       f"model.name_or_path={weightless_model(tmp_path)}",
                       f"tracking.tracking_uri=http://127.0.0.1:{dead_port()}",
                       f"sweep.slurm.overrides.watcher.partition={down_partition}", "--json", "--probe-timeout", "300",
                       cwd=tmp_path, timeout=400)
    assert done.returncode == 1, done.stdout + done.stderr
    rows = rows_of(done)
    failed = {(r["group"], r["check"].split()[0]) for r in rows if not r["ok"]}
    assert ("train-0", "data") in failed  # from the node: the file is not there
    for group in ("train-0", "eval-0"):
        assert {(group, "model"), (group, "tracking"), (group, "run")} <= failed, failed
    # Slurm takes the watcher's job into the DOWN partition (--test-only passes) and never starts it
    [watcher] = [r for r in rows if r["group"] == "watcher" and not r["ok"]]
    assert watcher["check"] == "probe job" and "PartitionDown" in watcher["words"], watcher
    assert "probe watcher: queued (Slurm: PartitionDown)" in done.stderr
    for r in rows:
        if not r["ok"]:
            assert r["fix"], r  # each failure carries its fix
    by = {(r["group"], r["check"].split()[0]): r for r in rows}
    assert "weights" in by[("train-0", "model")]["words"]
    assert "needs" in by[("train-0", "run")]["words"]
    assert all(r["ok"] for r in rows if r["check"].startswith(("import", "gpus", "sbatch")))
    only_preflight(sweep_dir)


def test_sweep_preflight_submits_nothing_when_a_row_fails(slurm_cluster, sweep_args, tmp_path):
    name, args, sweep_dir = sweep_args
    done = orchestrate("sweep", *args, "sweep.slurm.overrides.partition=nope", "--preflight",
                       "--train-entry", "orchestrator.jobs:probe_train", "--eval-entry", "orchestrator.jobs:probe_eval",
                       cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    # named as a partition the cluster lacks, before Slurm could answer with a gres error (issue 43, item 6)
    assert "does not exist" in done.stdout and "nothing submitted" in done.stdout, done.stdout
    assert not sweep_dir.exists()
