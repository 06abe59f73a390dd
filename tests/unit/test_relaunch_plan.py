"""What the login node says a (re)launch will submit is what the launch submits (issue 43, items 1 and 3): the dry
run reads the ledgers and shows the relaunch's arrays, with their GPU-hours; the baselines are arrays of the plan.

The same relaunch, dry run then real, on the local Slurm cluster: tests/integration/test_identity_relaunch.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from orchestrator.cluster.executor import Options
from orchestrator.launch import ledger as L
from orchestrator.launch.baseline_jobs import baseline_ledger
from orchestrator.launch.materialise import materialise
from orchestrator.launch.plan import decide, make_plan
from orchestrator.launch.submit import launch
from orchestrator.sweep.expand import load_sweep
from record.identity.run_key import eval_id
from tests.unit.test_watcher_state import FakeSlurm

REPO = Path(__file__).resolve().parents[2]
SMOKE = REPO / "sweeps" / "smoke.yaml"


def dry_run(*args: str, cwd: Path) -> str:
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "sweep", "--dry-run", "--executor", "local",
                           str(SMOKE), *args], cwd=cwd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def finish_all(sweep, sweep_dir: Path) -> None:
    """Every cell trained and evaluated under the sweep's settings, as the watcher leaves a finished sweep."""
    ledger = L.Ledger(sweep_dir)
    records = []
    for n, cell in enumerate(sweep.cells):
        record = L.new_record(sweep.name, cell.run_key, cell.name, {}, sweep_dir / cell.run_key)
        record["eval_id"] = eval_id(cell.config)
        L.add_attempt(record, "train", "t", 1.0, job_id=f"{10 + n}", state="COMPLETED", exit_code="0:0")
        L.add_attempt(record, "eval", "e", 1.0, job_id=f"{20 + n}", state="COMPLETED", exit_code="0:0",
                      eval_id=record["eval_id"])
        record["final"] = {"status": "completed", "reason": "", "at": 2.0}
        records.append(record)
    ledger.save_all(records)


def test_the_dry_run_of_a_finished_sweep_with_another_evaluation_shows_evaluations_alone(tmp_path):
    root = [f"sweep.output_root={tmp_path}"]
    sweep = load_sweep(SMOKE, root)
    sweep_dir = materialise(sweep, make_plan(sweep)).sweep_dir
    finish_all(sweep, sweep_dir)

    out = dry_run(*root, cwd=tmp_path)
    assert "kept 2 (2 done)" in out and "nothing to submit" in out, out
    out = dry_run(*root, "eval.k=8", cwd=tmp_path)
    assert "relaunch over a ledger of 2 cell(s): kept 0" in out, out
    assert "evaluation only (no training): 2 (2 evaluation settings changed)" in out
    assert "training (and its evaluation): 0" in out
    assert "eval-alone-0" in out and "train-0" not in out and "sbatch script: smoke-eval-alone-0" in out
    assert "counts: cells 0, skipped 2, train_arrays 0, eval_arrays 1" in out
    assert not (sweep_dir / "code").exists()  # nothing written: no snapshot, ledger as it was

    # the launch's own decision on the same ledger, submitted through a stand-in Slurm: exactly those arrays
    changed = load_sweep(SMOKE, [*root, "eval.k=8"])
    calls: list = []
    report = launch(changed, sweep_dir, FakeSlurm({}, calls), Options(executor="slurm"))
    assert [g.name for g in report.plan.groups] == ["eval-alone-0"] and calls == [("sbatch", "eval")]
    assert (report.train, report.eval) == (0, 2)
    # the job name the dry run's script showed is the one the submission gave (each cell's second evaluation)
    submitted = {L.latest(r, "eval")["name"] for r in L.Ledger(sweep_dir).records().values()}
    assert len(submitted) == 1 and f"#SBATCH --job-name={submitted.pop()}" in out


def test_why_each_cell_goes_out_or_stays(tmp_path):
    sweep = load_sweep(SMOKE, [f"sweep.output_root={tmp_path}"])
    first, second = sweep.cells
    lost = L.new_record(sweep.name, first.run_key, first.name, {}, tmp_path / first.run_key)
    L.add_attempt(lost, "train", "t", 1.0, job_id=None, state="LOST")
    todo, plan = decide(sweep, {first.run_key: lost}, {}, array_limit=1000)
    assert todo.why == {first.run_key: "its submission never reached Slurm", second.run_key: "never submitted"}
    assert [(g.name, g.size) for g in plan.groups] == [("train-0", 2), ("eval-0", 2)]
    # the cluster's MaxArraySize splits the relaunch's arrays as the launch does
    assert [g.size for g in decide(sweep, {}, {}, array_limit=1)[1].train] == [1, 1]


def test_baselines_are_arrays_of_the_plan_in_the_dry_run_and_its_totals(tmp_path):
    root = [f"sweep.output_root={tmp_path}", "sweep.baselines=[{model: tiny}]"]
    sweep = load_sweep(SMOKE, root)
    plan = make_plan(sweep)
    [baseline] = plan.baselines
    assert baseline.run_keys == (sweep.baselines[0].key,) and plan.counts()["baselines"] == 1
    assert plan.counts()["array_tasks"] == 2 * len(sweep.cells) + 1
    out = dry_run(*root[1:], f"sweep.output_root={tmp_path}", cwd=tmp_path)
    assert "baseline-0" in out and "sbatch script: smoke-baseline-0" in out, out
    assert "baselines 1, baseline_arrays 1" in out

    # evaluated: kept by the next launch's plan, and said so
    sweep_dir = materialise(sweep, plan).sweep_dir
    record = L.new_record(sweep.name, baseline.run_keys[0], "base", {}, sweep_dir / "baselines" / "b")
    L.add_attempt(record, "eval", "e", 1.0, job_id="7", state="COMPLETED", exit_code="0:0")
    baseline_ledger(sweep_dir).save_all([record])
    todo, again = decide(sweep, {}, {record["run_key"]: record}, array_limit=1000)
    assert todo.baselines == () and todo.baselines_kept == {"evaluated": 1} and not again.baselines


def test_a_relaunch_that_only_evaluates_costs_no_training_gpu_hour(tmp_path):
    """The paper's sweep, trained and evaluated, relaunched with eval.k changed: 102 evaluations alone (1 GPU,
    4 h each) and the three baselines never evaluated; none of the 19,584 training GPU-hours."""
    root = [f"sweep.output_root={tmp_path}"]
    sweep = load_sweep(REPO / "sweeps" / "onpolicy.yaml", root)
    sweep_dir = materialise(sweep, make_plan(sweep)).sweep_dir
    finish_all(sweep, sweep_dir)
    changed = load_sweep(REPO / "sweeps" / "onpolicy.yaml", [*root, "eval.k=8"])
    todo, plan = decide(changed, L.Ledger(sweep_dir).records(), {}, array_limit=1000)
    assert (len(todo.train), len(todo.eval), len(todo.baselines)) == (0, 102, 3)
    assert plan.counts()["gpu_hours_max"] == 102 * 1 * 4 + 3 * 1 * 4 and not plan.train
