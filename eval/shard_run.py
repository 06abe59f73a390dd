"""One task of one evaluation seed, run shard by shard (the plan: eval/shard_plan.py): each unfinished shard is one
lm-eval call over its problems with its repeats, saved when it ends; then the shards are merged into the seed's
files.

Sampling, HF backend, with eval.shard_samples set: each sample is generated alone and seeded by (evaluation seed, its
prompt's tokens, its repeat index) (eval/backends.py `seeded_samples`), so a task gives the same samples in one shard
or many, interrupted or not. Without it (the CPU default) a task is one shard and lm-eval batches as it does on its
own: 2.3x faster on CPU (bench/eval_shards.py), and a task cut midway is computed again whole. vLLM: the engine's
generator runs on across the shards of a seed, so a shard recomputed in a new engine draws other, equally valid,
samples; the statistics are computed from whatever samples the files hold.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path

import lm_eval
from lm_eval.tasks import TaskManager

from eval import backends, outcome, shard_plan, taskfiles
from eval.outcome import Settings
from eval.shard_plan import Shard, TaskPlan, plan_task
from record.files import atomic_write
from record.rundir import EvalStep
from trainer.tasks.common import write_jsonl


def run_shard(model, plan: TaskPlan, shard: Shard, generation: dict, settings: Settings) -> float:
    """One shard: its lm-eval call, then its files; the seconds it took."""
    began = time.monotonic()
    out = _one_call(model, plan.task, plan.seed, plan.rows, shard, plan.root, generation, settings, plan.seeded)
    rows = outcome.sample_rows(plan.task, out, shard.lo, settings.grader)
    shard_plan.save(plan.root, plan.task, plan.seed, shard, rows, plan.provenance, time.monotonic() - began)
    return time.monotonic() - began


def evaluate(model, task: str, seed: int, data_file: Path, settings: Settings, root: EvalStep, generation: dict,
             samples_per_shard: int | None, force: bool, log: Callable[[str], None]) -> dict:
    """The task's metrics for `seed` (the mean over its problems), every shard run or found finished (`force`:
    every shard run again), one after another in this process."""
    plan = plan_task(task, seed, data_file, settings, root, samples_per_shard, force)
    announce(plan, samples_per_shard, log)
    start = time.monotonic()
    for shard in plan.todo:
        took = run_shard(model, plan, shard, generation, settings)
        shard_done(plan, shard, took, log)
    return finish(plan, settings, time.monotonic() - start)


def announce(plan: TaskPlan, samples_per_shard: int | None, log: Callable[[str], None]) -> None:
    done = len(plan.planned) - len(plan.todo)
    if len(plan.planned) > 1:
        log(f"[eval] {plan.task} seed {plan.seed}: {done} of {len(plan.planned)} shards finished, "
            f"{sum(s.samples for s in plan.todo):,} samples to go ({samples_per_shard} a shard at most)")
    _progress(plan, done)


def shard_done(plan: TaskPlan, shard: Shard, took: float, log: Callable[[str], None],
               who: str = "") -> None:
    """Progress after a shard (the progress file counts the markers: workers finish shards in any order)."""
    done = sum(shard_plan.finished(plan.root, plan.task, plan.seed, s, plan.provenance) for s in plan.planned)
    _progress(plan, done)
    if len(plan.planned) > 1:
        log(f"[eval] {plan.task} seed {plan.seed}: shard {shard.name} done{who} ({done} of {len(plan.planned)}, "
            f"{took:.1f} s)")


def finish(plan: TaskPlan, settings: Settings, seconds: float) -> dict:
    """The shards joined into the seed's files; its metrics."""
    merged, metrics = shard_plan.merge(plan.root, plan.task, plan.seed, plan.planned)
    return outcome.save_seed(plan.root, plan.task, plan.seed, merged, metrics, settings, plan.data_file, seconds,
                             {"shards": [s.record() for s in plan.planned]})


def _progress(plan: TaskPlan, done: int) -> None:
    """The run's progress file (record/rundir.py `RunDir.eval_progress`): shards done of total per task and seed of the
    evaluation running now."""
    root = plan.root
    path = root.run_dir.eval_progress
    try:
        known = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        known = {}
    if known.get("step_dir") != root.name:
        known = {"step_dir": root.name, "shards": {}}
    known["shards"][f"{plan.task}/seed_{plan.seed}"] = [done, len(plan.planned)]
    atomic_write(path, json.dumps({**known, "at": time.time()}, sort_keys=True))


def _one_call(model, task, seed, rows, shard, root, generation, settings, seeded=True) -> dict:
    """lm-eval over the shard's problems with its repeats, from the shard's own data file and task file."""
    data = write_jsonl(rows[shard.lo:shard.hi], root.shard_call(task, seed, shard.name) / taskfiles.data_file(task))
    rendered = taskfiles.render({task: data}, root.shard_tasks(task, seed, shard.name), shard.r1 - shard.r0,
                                generation, settings.grader)
    manager = TaskManager(include_path=str(rendered), include_defaults=False)
    with backends.seeded_samples(model, seed, shard.r0) if seeded else nullcontext():
        return lm_eval.simple_evaluate(
            model=model, tasks=[task], task_manager=manager, apply_chat_template=settings.chat_template,
            fewshot_as_multiturn=settings.chat_template, log_samples=True, bootstrap_iters=0, random_seed=seed,
            numpy_random_seed=seed, torch_random_seed=seed, fewshot_random_seed=seed)
