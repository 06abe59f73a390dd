"""Relaunching a finished sweep on the local Slurm cluster (issue 32): a machinery change submits nothing, an added
evaluation task submits evaluations alone (one per trained cell) and status shows both tasks, a change to what
training computes makes new cells beside the old. The jobs are the probe's (orchestrator/jobs.py): this is about
what the orchestrator submits; the real evaluation's side of the seam is tests/integration/test_status_seam.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from orchestrator.launch.ledger import Ledger, attempts
from orchestrator.sweep.expand import load_sweep
from record.rundir import RunDir
from tests.support.probe_sweep import PROBE, orchestrate, probes

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
def relaunch(args: list[str], cwd: Path, *changes: str) -> str:
    done = orchestrate("sweep", *args, *changes, *PROBE, "--no-watcher", cwd=cwd)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def settle(sweep_dir: Path, cwd: Path) -> dict:
    watch = orchestrate("watch", str(sweep_dir), "--poll", "2", "--timeout", "200", cwd=cwd)
    assert watch.returncode == 0, watch.stdout + watch.stderr
    return Ledger(sweep_dir).records()


def jobs_of(records: dict) -> dict[str, tuple[int, int]]:
    return {k: (len(attempts(r, "train")), len(attempts(r, "eval"))) for k, r in records.items()}


def test_a_finished_sweep_relaunched_trains_only_what_computes_something_new(sweep_args, tmp_path):
    name, args, sweep_dir = sweep_args
    args = [*args, "eval.tasks=[tiny]", "eval.k=2"]
    keys = probes(args, {"steps": 2}, {"steps": 2})
    relaunch(args, tmp_path)
    first = settle(sweep_dir, tmp_path)
    assert jobs_of(first) == {k: (1, 1) for k in keys}

    # (a) machinery: where checkpoints go, vLLM's memory share, where the data lives
    out = relaunch(args, tmp_path, "checkpoint.keep_last=5", "rollout.gpu_memory_utilization=0.5",
                   f"data.train_path={tmp_path / 'moved' / 'train.jsonl'}")
    assert "submitted 0 training job(s) with chained evaluations and 0 evaluation(s) alone" in out, out
    assert jobs_of(Ledger(sweep_dir).records()) == jobs_of(first)
    config = yaml.safe_load(RunDir(sweep_dir / keys[0]).config.read_text())
    assert config["checkpoint"]["keep_last"] == 5  # taken by any job that starts from now on

    # (b) an evaluation task added: each trained cell evaluated again, nothing trained. The dry run says so first
    # (the ledgers read, Slurm asked, nothing written), and the launch then submits exactly that (issue 43, item 1).
    dry = relaunch(args, tmp_path, "eval.tasks=[tiny,tiny_ood]", "--dry-run")
    assert "evaluation only (no training): 2 (2 evaluation settings changed)" in dry, dry
    assert "training (and its evaluation): 0" in dry and "counts: cells 0, skipped 2, train_arrays 0" in dry
    assert "sbatch script: " + name + "-eval-alone-0" in dry and jobs_of(Ledger(sweep_dir).records()) == jobs_of(first)
    out = relaunch(args, tmp_path, "eval.tasks=[tiny,tiny_ood]")
    assert "evaluation only (no training): 2 (2 evaluation settings changed)" in out, out
    assert "submitted 0 training job(s) with chained evaluations and 2 evaluation(s) alone" in out, out
    assert "the plan changed" not in out
    second = settle(sweep_dir, tmp_path)
    assert jobs_of(second) == {k: (1, 2) for k in keys}
    assert all(r["final"]["status"] == "completed" for r in second.values())
    assert all(any(d["action"] == "reevaluate" for d in r["decisions"]) for r in second.values())
    status = orchestrate("status", str(sweep_dir), "--json", cwd=tmp_path)
    rows = [r for r in json.loads(status.stdout) if not r.get("watcher")]
    assert {r["run_key"] for r in rows} == set(keys)
    for row in rows:
        assert {"eval/tiny/mean_at_2", "eval/tiny_ood/mean_at_2"} <= set(row["eval"]), row["eval"]
        assert len(row["evals"]) == 2  # the first evaluation kept beside the second
    assert relaunch(args, tmp_path, "eval.tasks=[tiny,tiny_ood]").count("0 evaluation(s) alone") == 1

    # (c) what training computes: new cells beside the old, the old ones untouched
    out = relaunch(args, tmp_path, "eval.tasks=[tiny,tiny_ood]", "optim.lr=0.001")
    assert "submitted 2 training job(s) with chained evaluations and 0 evaluation(s) alone" in out, out
    third = settle(sweep_dir, tmp_path)
    assert set(third) > set(keys) and len(third) == 4
    assert jobs_of({k: third[k] for k in keys}) == jobs_of(second)


def test_a_cell_trained_under_another_gradient_is_named_and_rerun_only_when_asked(sweep_args, tmp_path, monkeypatch):
    """Issue 24: the trainer's own writer records cell 0's fingerprint under an edited loss (the code of an earlier
    launch); the relaunch names that cell, keeps it, and `--rerun-changed` trains exactly it again from step 0."""
    from trainer.objective import fingerprint as fp
    from trainer.objective.loss import rl_loss
    from trainer.train import objective_manifest

    name, args, sweep_dir = sweep_args
    keys = probes(args, {"steps": 2}, {"steps": 2})
    relaunch(args, tmp_path)
    settle(sweep_dir, tmp_path)
    sweep = load_sweep(args[0], args[1:])
    for i, cell in enumerate(sweep.cells):
        with monkeypatch.context() as m:
            if i == 0:  # a normaliser changed under unchanged settings
                m.setattr(fp, "rl_loss", lambda *a, **k: (2 * rl_loss(*a, **k)[0], {}))
            RunDir(sweep_dir / cell.run_key).objective.write_text(json.dumps(objective_manifest(cell.config)))

    out = relaunch(args, tmp_path)
    assert "1 trained cell(s) were computed under another gradient" in out and sweep.cells[0].name in out, out
    assert "submitted 0 training job(s)" in out
    out = orchestrate("sweep", *args, *PROBE, "--no-watcher", "--rerun-changed", cwd=tmp_path).stdout
    assert "submitted 1 training job(s) with chained evaluations" in out, out
    records = settle(sweep_dir, tmp_path)
    assert jobs_of(records) == {keys[0]: (2, 2), keys[1]: (1, 1)}
    assert records[keys[0]]["final"]["status"] == "completed"
    run = RunDir(sweep_dir / keys[0])
    (moved,) = (sweep_dir / keys[0] / "superseded").iterdir()
    assert (moved / "checkpoints" / "latest.json").exists() and (moved / "objective.json").exists()
    starts = [json.loads(line) for line in run.starts.read_text().splitlines()]
    assert [s["from_step"] for s in starts] == [0]  # trained again from the start, not resumed
    assert "computed under another gradient" not in relaunch(args, tmp_path)
