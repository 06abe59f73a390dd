"""What an evaluation leaves behind: per-seed files, the MLflow metrics and artifacts, and the done-markers, in the
checkpoint's `<run_dir>/eval/step_NNNNNN/` (record/rundir.py `EvalStep` names each file):

    <task>/seed_S.samples.jsonl        per problem: prompt, all k samples, their scores and answers (joined from the
                                       task's shards as they finish, eval/shard_plan.py)
    <task>/seed_S.results.json         the seed's numbers (the mean over problems), its shards, the settings and the
                                       data sha256
    <task>.done.json                   written last: the metrics logged, the settings, the data sha256

A marker or a seed's results count only for equal settings and data, so changing k, the budget or the data
re-evaluates instead of reusing.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from eval import taskfiles
from eval.answers import grade
from record.files import atomic_write, sha256_file
from record.metric_keys import eval_metric_keys
from record.rundir import EvalStep, RunDir, tag_for
from record.tracking.key_rules import CLOSE_STATUSES
from record.tracking.tracker import MlflowTracker, default_tracking_uri

LM_EVAL_METRICS = ("acc", "pass_at_1", "pass_at_n", "maj_at_n", "n_samples")
BASE_EXPERIMENT = "comedy-base-models"


@dataclass(frozen=True)
class Settings:
    """Everything that changes the numbers; a marker counts as done only for equal settings."""

    k: int
    temperature: float
    top_p: float
    max_tokens: int
    chat_template: bool
    seeds: tuple[int, ...]
    backend: str
    limit: int | None = None
    grader: str = "ours"  # eval.grader: the grader of the tasks with a math answer

    def record(self) -> dict:
        """As JSON reads it back (seeds a list), for comparing with a marker; the grader left out at `ours`, so the
        markers written before it was a setting still count."""
        kept = {**asdict(self), "seeds": list(self.seeds)}
        return {k: v for k, v in kept.items() if not (k == "grader" and v == "ours")}


def marker(root: EvalStep, task: str, settings: Settings, data_file: Path) -> dict | None:
    try:
        mark = json.loads(root.done(task).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    same = mark.get("settings") == settings.record()
    return mark if same and mark.get("data_sha256") == sha256_file(data_file) else None


def seed_result(root: EvalStep, task, seed, settings, data_file) -> dict | None:
    try:
        saved = json.loads(root.seed_file(task, seed, "results.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None
    same = saved.get("settings") == settings.record()
    return saved["metrics"] if same and saved.get("data_sha256") == sha256_file(data_file) else None


def sample_rows(task: str, out: dict, doc_offset: int = 0, grader: str = "ours") -> list[dict]:
    """lm-eval's logged samples of `task` (simple_evaluate's `out`) as per-sample rows: the prompt, every sample, its
    grade and answer, lm-eval's per-problem numbers; doc_id shifted by `doc_offset` (a shard's first problem)."""
    family = taskfiles.family(task)
    rows = []
    for s in sorted(out["samples"][task], key=lambda s: s["doc_id"]):
        kept = s["filtered_resps"][0]
        samples = [kept] if isinstance(kept, str) else list(kept)  # a str: a take_first filter (caught below)
        graded = [grade(family, text, s["doc"], grader) for text in samples]
        rows.append({"doc_id": s["doc_id"] + doc_offset, "unique_id": s["doc"].get("unique_id"),
                     "target": s["target"], "prompt": s["arguments"][0][0], "samples": samples,
                     "scores": [g[0] for g in graded], "answers": [g[1] for g in graded],
                     **{m: s.get(m) for m in LM_EVAL_METRICS}})
    return rows


def save_seed(root: EvalStep, task, seed, rows, metrics, settings, data_file, seconds, detail=None) -> dict:
    """Write the seed's per-sample jsonl and results json; return its metrics (checked: k samples per problem).
    `rows`, `metrics`: the task's per-sample rows and their means (eval/shard_plan.py `merge`); `detail`: what else the
    results keep (the shards)."""
    bad = [r["doc_id"] for r in rows if len(r["samples"]) != settings.k]
    if bad or metrics["n_samples"] != settings.k:
        raise RuntimeError(f"{task}: lm-eval scored {metrics['n_samples']} samples per problem, not k={settings.k} "
                           f"(docs {bad[:5]}): the task's filter must keep all repeats")
    metrics = {**metrics, "docs": len(rows)}
    samples_path = root.seed_file(task, seed, "samples.jsonl")
    samples_path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(samples_path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    record = {"task": task, "seed": seed, "metrics": metrics, "seconds": round(seconds, 2), **(detail or {}),
              "settings": settings.record(), "data_sha256": sha256_file(data_file)}
    atomic_write(root.seed_file(task, seed, "results.json"), json.dumps(record, indent=1, default=str))
    return metrics


def problem_scores(root: EvalStep, task: str, settings: dict) -> tuple[dict[str, list[float]], str]:
    """What the claims read back from `save_seed`'s files: each problem's sample scores over the evaluation's seeds
    ({doc_id: [score, ...]}, k per seed, seeds in `settings`' order) and the data's sha256 (problems pair across
    cells only on the same data). ValueError naming each seed file that is missing, unreadable, computed under
    other settings or on other data than the first seed's."""
    scores: dict[str, list[float]] = {}
    sha, problems = None, []
    for seed in settings.get("seeds") or ():
        path = root.seed_file(task, seed, "samples.jsonl")
        try:
            saved = json.loads(root.seed_file(task, seed, "results.json").read_text())
            rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        except (OSError, json.JSONDecodeError) as error:
            problems.append(f"{path}: {error.__class__.__name__}: {error}")
            continue
        if saved.get("settings") != settings or (sha is not None and saved.get("data_sha256") != sha):
            problems.append(f"{path}: computed under other settings or data than the evaluation's")
            continue
        sha = saved.get("data_sha256")
        for row in rows:
            scores.setdefault(str(row["doc_id"]), []).extend(float(s) for s in row["scores"])
    if problems or not scores:
        raise ValueError(f"{task} at {root}: " + ("; ".join(problems) or "no evaluation seeds in its settings"))
    return scores, sha or ""


def log_to_run(target, cfg, tasks, per_seed, settings, step, home: RunDir, files, tracking_uri, experiment,
               model_dir) -> str | None:
    """Means over seeds into the MLflow run of `target` (reopened by run_key), the files as artifacts, then the
    markers. The tracker buffers in the run dir while the store is unreachable, so nothing is lost."""
    root = home.eval_step(step)
    uri = tracking_uri or (cfg.tracking.tracking_uri if cfg else "") or default_tracking_uri()
    name = experiment or ((cfg.tracking.experiment or "comedy") if cfg else BASE_EXPERIMENT)
    tracker = MlflowTracker(home.path)
    params = {} if target.is_run else {"model.name_or_path": str(model_dir)}
    tracker.open_run(target.run_key, name, uri, params, {})
    try:
        for task in tasks:
            seeds = per_seed[task]
            mean = {m: sum(r[m] for r in seeds.values()) / len(seeds) for m in LM_EVAL_METRICS}
            keys = eval_metric_keys(task, settings.k)
            metrics = {keys[m]: mean[m] for m in keys}
            tracker.log_metrics(metrics, step)
            for seed in seeds:
                for kind in ("samples.jsonl", "results.json"):
                    tracker.log_artifact(root.seed_file(task, seed, kind), f"eval/{tag_for(step)}/{task}")
            tracker.log_artifact(root.task_file(task), f"eval/{tag_for(step)}/{task}")
            mark = {"task": task, "step": step, "metrics": metrics, "per_seed": {str(s): r for s, r in seeds.items()},
                    "settings": settings.record(), "data_sha256": sha256_file(files[task]),
                    "model_dir": str(model_dir), "run_key": target.run_key, "finished_unix": int(time.time()),
                    "pid": os.getpid()}
            atomic_write(root.done(task), json.dumps(mark, indent=1, sort_keys=True))
    finally:
        # The training's status stays: evaluating a FAILED or KILLED run does not make it FINISHED, and an
        # evaluation that fails is the ledger's business, not the training run's.
        before = tracker.status_before
        tracker.close(before if before in CLOSE_STATUSES else "FINISHED")
    return tracker.run_id
