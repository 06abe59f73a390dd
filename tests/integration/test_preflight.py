"""`orchestrate preflight` on the local Slurm cluster (issue 31): Slurm's own `sbatch --test-only` verdict on each
array and on the watcher; a good sweep passes (exit 0), planted faults each fail with their own row and fix
(exit 1); nothing is written under the sweep's output root. The probe jobs on the nodes are not covered yet."""

from __future__ import annotations

import json

import pytest

from tests.support.probe_sweep import orchestrate

pytestmark = pytest.mark.slurm


def test_preflight_passes_a_good_sweep_and_names_each_fault(slurm_cluster, sweep_args, tmp_path):
    name, args, sweep_dir = sweep_args
    good = orchestrate("preflight", *args, "--json", cwd=tmp_path)
    assert good.returncode == 0, good.stdout + good.stderr
    rows = json.loads(good.stdout)["rows"]
    assert [r["group"] for r in rows] == ["train-0", "eval-0", "watcher"] and all(r["ok"] for r in rows)

    # the arrays' partition unknown, the watcher's good: each row its own verdict (accounts are not enforced on
    # the local cluster, AccountingStorageEnforce=none, so a refused account cannot be planted here)
    bad = orchestrate("preflight", *args, "sweep.slurm.overrides.partition=nope",
                      "sweep.slurm.overrides.watcher.partition=service", "--json", cwd=tmp_path)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    rows = {r["group"]: r for r in json.loads(bad.stdout)["rows"]}
    assert not rows["train-0"]["ok"] and "partition" in rows["train-0"]["words"].lower()
    assert "sinfo" in rows["train-0"]["fix"]
    assert not rows["eval-0"]["ok"] and rows["watcher"]["ok"]
    assert not sweep_dir.exists()  # nothing written: no ledger, no run dirs


def test_sweep_preflight_submits_nothing_when_a_row_fails(slurm_cluster, sweep_args, tmp_path):
    name, args, sweep_dir = sweep_args
    done = orchestrate("sweep", *args, "sweep.slurm.overrides.partition=nope", "--preflight",
                       "--train-entry", "orchestrator.jobs:probe_train", "--eval-entry", "orchestrator.jobs:probe_eval",
                       cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "invalid partition" in done.stdout and "nothing submitted" in done.stdout
    assert not sweep_dir.exists()
