"""A task's evaluation in shards, planned: problem ranges x repeat ranges of its k samples, each saved when it ends,
so that an evaluation cut by its time limit resumes at its first unfinished shard instead of starting the task over.
Running them is eval/shard_run.py.

    <run_dir>/eval/step_NNNNNN/<task>/seed_S/shards/      (record/rundir.py `EvalStep.shards`)
        <shard>.samples.jsonl     the shard's problems, each with its samples (repeats r0..r1) and their grades
        <shard>.json              written last: what the shard was computed from (settings, data sha256, its range)

A shard counts as finished only when its marker is there and was computed from the same settings and data; a shard
killed midway leaves at most a samples file without a marker, which is recomputed. When every shard of a task and
seed is finished, `merge` joins them into the seed's per-sample file and results (eval/outcome.py's layout, read by
the report), each problem's metrics recomputed from all its k samples (eval/mean_at_k.py), so the statistics are
those of one whole call.

The plan (`plan`): at most `samples_per_shard` samples a shard: whole problems (every repeat) while k fits, else one
problem per shard with its repeats split. None: one shard, the whole task. A task and seed's plan against what is
finished (`plan_task`) is a `TaskPlan`: the shards still to run.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from eval.mean_at_k import problem_metrics
from eval.outcome import Settings
from record.files import atomic_write, sha256_file
from record.rundir import EvalStep, RunDir
from trainer.tasks.common import read_jsonl

METRICS = ("acc", "pass_at_1", "pass_at_n", "maj_at_n", "n_samples")


@dataclass(frozen=True)
class Shard:
    lo: int  # problems [lo, hi)
    hi: int
    r0: int  # repeats [r0, r1) of each problem's k samples
    r1: int

    @property
    def name(self) -> str:
        return f"p{self.lo:06d}-{self.hi:06d}.r{self.r0:05d}-{self.r1:05d}"

    @property
    def samples(self) -> int:
        return (self.hi - self.lo) * (self.r1 - self.r0)

    def record(self) -> dict:
        return {"problems": [self.lo, self.hi], "repeats": [self.r0, self.r1]}


def plan(problems: int, k: int, samples_per_shard: int | None) -> list[Shard]:
    """The shards of a task of `problems` problems x `k` samples, in order (problem-major)."""
    if problems < 1 or k < 1:
        raise ValueError(f"a task needs problems and samples; got {problems} problems, k={k}")
    if samples_per_shard is None or samples_per_shard >= problems * k:
        return [Shard(0, problems, 0, k)]
    if samples_per_shard < 1:
        raise ValueError(f"samples per shard: {samples_per_shard}; give at least 1 (one sample of one problem)")
    if samples_per_shard >= k:
        step = samples_per_shard // k
        return [Shard(lo, min(lo + step, problems), 0, k) for lo in range(0, problems, step)]
    return [Shard(p, p + 1, r, min(r + samples_per_shard, k)) for p in range(problems)
            for r in range(0, k, samples_per_shard)]


@dataclass(frozen=True)
class TaskPlan:
    """One task and seed's shards: the problems (the first `limit`), the plan, those still to run, and what each
    shard's marker must record."""

    task: str
    seed: int
    data_file: Path
    root: EvalStep
    rows: list
    planned: list
    todo: list
    provenance: dict
    seeded: bool  # HF: each sample seeded on its own (eval.shard_samples set), else lm-eval's batches as they are


def plan_task(task: str, seed: int, data_file: Path, settings: Settings, root: EvalStep, samples_per_shard: int | None,
              force: bool) -> TaskPlan:
    """The task's shards for `seed`, and those not finished under these settings and data (`force`: all of them)."""
    rows = read_jsonl(data_file)[:settings.limit] if settings.limit else read_jsonl(data_file)
    planned = plan(len(rows), settings.k, samples_per_shard)
    provenance = {"settings": settings.record(), "data_sha256": sha256_file(data_file), "seed": seed}
    todo = [s for s in planned if force or not finished(root, task, seed, s, provenance)]
    return TaskPlan(task, seed, data_file, root, rows, planned, todo, provenance, samples_per_shard is not None)


def finished(root: EvalStep, task: str, seed: int, shard: Shard, provenance: dict) -> bool:
    """The shard's marker is there and was computed from `provenance` (settings, data sha256) and this range."""
    try:
        mark = json.loads(root.shard_marker(task, seed, shard.name).read_text())
    except (OSError, json.JSONDecodeError):
        return False
    return mark.get("provenance") == provenance and mark.get("shard") == shard.record()


def save(root: EvalStep, task: str, seed: int, shard: Shard, rows: list[dict], provenance: dict,
         seconds: float) -> None:
    """The shard's rows (doc_id already global, samples of repeats r0..r1), then its marker: atomic, in that order."""
    bad = [r["doc_id"] for r in rows if len(r["samples"]) != shard.r1 - shard.r0]
    if bad or sorted(r["doc_id"] for r in rows) != list(range(shard.lo, shard.hi)):
        raise RuntimeError(f"{task} shard {shard.name}: lm-eval returned problems {[r['doc_id'] for r in rows][:5]}"
                           f"... with samples {[len(r['samples']) for r in rows][:5]}...; expected problems "
                           f"{shard.lo}..{shard.hi - 1} with {shard.r1 - shard.r0} samples each")
    atomic_write(root.shard_rows(task, seed, shard.name),
                 "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    atomic_write(root.shard_marker(task, seed, shard.name),
                 json.dumps({"shard": shard.record(), "provenance": provenance, "seconds": round(seconds, 2),
                             "job": slurm_job()}, indent=1, sort_keys=True))


@contextmanager
def exclusive(root: EvalStep, log: Callable[[str], None]) -> Iterator[None]:
    """One evaluation of a checkpoint at a time (a relaunch's beside a requeued one's): an flock on
    `<step dir>/eval.lock`, which the kernel releases when its holder dies however it dies, so a killed evaluation
    never blocks the next. The second waits, then finds the first's shards finished: no shard is computed twice."""
    root.path.mkdir(parents=True, exist_ok=True)
    with open(root.lock, "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            log(f"[eval] another evaluation of this checkpoint holds {root.lock} ({f.read().strip() or '?'});"
                f" waiting for it to end")
            fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        f.truncate()
        f.write(f"pid {os.getpid()} on {socket.gethostname()}, job {slurm_job() or '-'}, since {time.ctime()}\n")
        f.flush()
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def slurm_job() -> str | None:
    """This job as the ledger names it (`<array>_<task>` for an array task), None outside Slurm."""
    array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    return f"{array}_{task}" if array and task else os.environ.get("SLURM_JOB_ID")


def jobs_with_shards(run_dir: Path) -> set[str]:
    """The jobs that finished at least one shard of any evaluation of the run: an attempt among them made progress,
    and the watcher does not count it against the retry budget (orchestrator/watch/watcher.py)."""
    jobs = set()
    for marker in RunDir(run_dir).shard_markers():
        try:
            job = json.loads(marker.read_text()).get("job")
        except (OSError, json.JSONDecodeError):
            continue
        if job:
            jobs.add(job)
    return jobs


def merge(root: EvalStep, task: str, seed: int, shards: list[Shard]) -> tuple[list[dict], dict[str, float]]:
    """Every shard's rows joined per problem (samples in repeat order) with each problem's metrics recomputed from
    all its samples; and the task's metrics (the mean over problems, as lm-eval aggregates them)."""
    by_doc: dict[int, dict] = {}
    for shard in sorted(shards, key=lambda s: (s.lo, s.r0)):
        for line in root.shard_rows(task, seed, shard.name).read_text().splitlines():
            row = json.loads(line)
            kept = by_doc.setdefault(row["doc_id"], {**row, "samples": [], "scores": [], "answers": []})
            for key in ("samples", "scores", "answers"):
                kept[key] += row[key]
    rows = [by_doc[d] for d in sorted(by_doc)]
    for row in rows:
        row.update(problem_metrics(row["scores"], row["answers"]))
    metrics = {m: sum(r[m] for r in rows) / len(rows) for m in METRICS}
    return rows, metrics
