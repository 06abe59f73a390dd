"""One row of the fault matrix (docs/reliability.md), measured the same way for every fault, and the table.

A row's figures come from the real systems: the jobs of the cell from its ledger and from Slurm (`sacct`/`squeue`
by the ledger's job names: a job Slurm has under a name the ledger gave one attempt is a duplicate), its metric
steps from MLflow (through the run dir's `mlflow_run.json`) and from the run dir (`logged_step`), and its metric
histories against an undisturbed run of the same cell. Tests write rows as JSON under $RELIABILITY_ROWS when it is
set (`make reliability` sets it); `python -m tests.support.fault_row DIR` prints the table.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROWS_ENV = "RELIABILITY_ROWS"
# The table's order (a row not measured in a run keeps its place, marked so).
ORDER = ["sigkill-job", "sigkill-rank", "node-fail-2-nodes", "timeout-signal",
         "timeout-no-signal", "requeue", "scancel", "orchestrator-before-sbatch", "orchestrator-after-sbatch",
         "watcher-poll-before", "watcher-poll-after", "store-unreachable", "disk-full", "corrupt-checkpoint",
         "collapsed", "submit-limit", "submit-limit-unread"]
COLUMNS = ("fault", "how injected", "what the orchestrator decided", "which code acted", "runs finished",
           "metrics = undisturbed", "jobs (duplicates)", "metric steps duplicate / lost", "test s")


@dataclass
class Row:
    id: str
    fault: str
    injected: str
    decided: str
    finished: str  # "1/1", or "0/1 (cancelled by the user, as asked)"
    metrics_equal: str  # "yes" | "no" | "n/a (...)"
    jobs: str  # "2 train + 1 eval (0 duplicate)"
    steps: str  # "0 / 0 (MLflow 8 steps x 14 keys; run dir logged_step 8)"
    seconds: float = 0.0
    acted: str = ""  # who requeued or resubmitted: the trainer (its requeues.jsonl), Slurm in place, the watcher

    def cells(self) -> list[str]:
        return [self.fault, self.injected, self.decided, self.acted, self.finished, self.metrics_equal, self.jobs,
                self.steps, f"{self.seconds:.0f}"]


def histories(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every metric of the cell's MLflow run but the timings (perf/): key -> [(step, value)] in step order."""
    from mlflow import MlflowClient

    from record.tracking.tracker import read_run_file

    where = read_run_file(run_dir)
    client = MlflowClient(where["tracking_uri"])
    run = client.get_run(where["run_id"])
    return {k: sorted((m.step, m.value) for m in client.get_metric_history(where["run_id"], k))
            for k in run.data.metrics if not k.startswith("perf/")}


def step_counts(got: dict, want: dict) -> tuple[int, int]:
    """(duplicate, lost) metric points of `got` against the steps `want` has, over every key."""
    duplicate = sum(len(v) - len({s for s, _ in v}) for v in got.values())
    lost = sum(len({s for s, _ in want[k]} - {s for s, _ in got.get(k, [])}) for k in want)
    return duplicate, lost


def metric_columns(run_dir: Path, reference: dict) -> tuple[str, str, int, int]:
    """(metrics_equal, steps, duplicate, lost) of a real training cell against the undisturbed run's histories."""
    got = histories(run_dir)
    duplicate, lost = step_counts(got, reference)
    logged = (run_dir / "logged_step").read_text().strip() if (run_dir / "logged_step").exists() else "none"
    steps = max((len(v) for v in got.values()), default=0)
    equal = "yes" if got == reference else "no"
    return equal, f"{duplicate} / {lost} (MLflow: {steps} steps x {len(got)} keys; run dir logged_step {logged})", \
        duplicate, lost


def job_counts(records: list[dict], since: float) -> tuple[str, int]:
    """("1 train + 1 eval (0 duplicate)", duplicates) of cells' records. A duplicate is a second Slurm submission
    under a name the ledger gave one attempt; requeues of a job in place (same id) are counted from sacct -D apart."""

    from orchestrator.cluster.query import find_by_names

    jobs = [j for r in records for j in r["jobs"]]
    names = sorted({j["name"] for j in jobs})
    found = find_by_names(names, since)
    # One submission per name: the tasks of one array ("123_0", "123_1": other cells of the same array) share its
    # name and its array id; a second array id under the name is a duplicate submission.
    duplicate = sum(max(0, len({row.job_id.split("_")[0] for row in found.get(n, [])}) - 1) for n in names)
    ids = {kind: sorted({j["job_id"] for j in jobs if j["job_id"] and j["kind"] == kind}) for kind in ("train", "eval")}
    restarts = sum(runs_again(job_id) for job_id in ids["train"])
    requeued = f", {restarts} requeued in place" if restarts else ""
    return f"{len(ids['train'])} train + {len(ids['eval'])} eval ({duplicate} duplicate{requeued})", duplicate


def trainer_requeues(run_dir: Path) -> list[dict]:
    """The requeues the trainer asked Slurm for (trainer/run/preempt.py writes one line per request)."""
    from record.rundir import RunDir

    path = RunDir(run_dir).requeues
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def runs_again(job_id: str) -> int:
    """How many times Slurm ran `job_id` again under its own id: sacct -D's runs of it less one (a NODE_FAIL's run
    shows as NODE_FAIL, not REQUEUED, so the states are not counted)."""
    import subprocess

    out = subprocess.run(["sacct", "-j", job_id, "-X", "-D", "-n", "-P", "-o", "JobID"], capture_output=True,
                         text=True).stdout.split()
    return max(0, len(out) - 1)


def in_place_requeues(record: dict) -> int:
    """How many times Slurm ran a training job of the cell again under its own id."""
    return sum(runs_again(j["job_id"]) for j in record["jobs"] if j["kind"] == "train" and j["job_id"])


def acted(record: dict) -> str:
    """Which code requeued or resubmitted the cell: the trainer's requests (with their steps), the in-place
    requeues nobody in the job asked for (Slurm's own, or a user's `scontrol requeue`), the watcher's resubmits."""
    asked = trainer_requeues(Path(record["run_dir"]))
    parts = [f"trainer/run/preempt.py asked Slurm to requeue at step {', '.join(str(r['step']) for r in asked)}"
             ] if asked else []
    other = in_place_requeues(record) - sum(r["accepted"] for r in asked)
    if other > 0:
        parts.append(f"Slurm requeued in place {other}x, not asked by the job")
    resubmits = sum(d["action"] == "resubmit" for d in record.get("decisions", []))
    if resubmits:
        parts.append(f"the watcher resubmitted {resubmits}x")
    return "; ".join(parts) or "no requeue, no resubmission"


def decisions(record: dict) -> str:
    """The watcher's and launcher's decisions for a cell, in order, then its final status."""
    seen = [d["action"] for d in record.get("decisions", []) if d["action"] not in ("submit", "start")]
    final = record.get("final") or {}
    return ", ".join([*seen, f"final: {final.get('status', 'none')}"])


def probe_row(rid: str, fault: str, injected: str, record: dict, since: float, finished: str, seconds: float) -> Row:
    """The row of a probe cell (orchestrator.jobs:probe_train logs no metrics): jobs and decisions only."""
    jobs, _ = job_counts([record], since)
    latest = Path(record["run_dir"]) / "checkpoints" / "latest.json"
    step = json.loads(latest.read_text())["step"] if latest.exists() else "none"
    return write(Row(rid, fault, injected, decisions(record), finished, "n/a (probe job, no metrics)", jobs,
                     f"n/a (probe; last checkpoint step {step})", seconds, acted(record)))


def write(row: Row) -> Row:
    where = os.environ.get(ROWS_ENV)
    if where:
        Path(where).mkdir(parents=True, exist_ok=True)
        (Path(where) / f"{row.id}.json").write_text(json.dumps(asdict(row), indent=1))
    print(json.dumps(asdict(row)))
    return row


def table(rows_dir: Path) -> str:
    rows = {r["id"]: Row(**r) for r in (json.loads(p.read_text()) for p in sorted(rows_dir.glob("*.json")))}
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for rid in ORDER + sorted(set(rows) - set(ORDER)):
        if rid in rows:
            lines.append("| " + " | ".join(c.replace("|", "/") for c in rows[rid].cells()) + " |")
        else:
            lines.append(f"| {rid} | not measured in this run |" + " |" * (len(COLUMNS) - 2))
    return "\n".join(lines)



def measured(rid: str, fault: str, injected: str, fs, reference: dict, started: float) -> Row:
    """The row of a cell (a tests/support/fault_sweep.FaultSweep) that must end trained, with every metric step once
    and equal to the undisturbed run."""
    record = fs.record()
    equal, steps, duplicate_steps, lost = metric_columns(fs.run_dir, reference)
    jobs, duplicate_jobs = job_counts([record], fs.started)
    finished = record["final"]["status"] == "completed"
    row = write(Row(rid, fault, injected, decisions(record), "1/1" if finished else "0/1", equal, jobs, steps,
                    time.monotonic() - started, acted(record)))
    assert (finished, equal, duplicate_jobs, duplicate_steps, lost) == (True, "yes", 0, 0, 0), row
    return row


if __name__ == "__main__":
    print(table(Path(sys.argv[1] if len(sys.argv) > 1 else os.environ.get(ROWS_ENV, "runs/reliability"))))
