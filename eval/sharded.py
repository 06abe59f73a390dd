"""One task of one evaluation seed, shard by shard (eval/shards.py): each unfinished shard is one lm-eval call over
its problems with its repeats, saved when it ends; then the shards are merged into the seed's files.

Sampling, HF backend: each sample is generated alone and seeded by (evaluation seed, its prompt's tokens, its repeat
index) (eval/backends.py `seeded_samples`), so a task gives the same samples run whole or in shards, interrupted or
not. vLLM: the engine's generator runs on across the shards of a seed, so a shard recomputed in a new engine draws
other, equally valid, samples; the statistics are computed from whatever samples the files hold.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import lm_eval
from lm_eval.tasks import TaskManager

from eval import backends, outcome, shards, taskfiles
from eval.outcome import Settings
from record.rundir import RunDir, atomic_write, sha256_file
from trainer.tasks.common import read_jsonl, write_jsonl


def evaluate(model, task: str, seed: int, data_file: Path, settings: Settings, root: Path, generation: dict,
             samples_per_shard: int | None, force: bool, log: Callable[[str], None]) -> dict:
    """The task's metrics for `seed` (the mean over its problems), every shard run or found finished (`force`:
    every shard run again)."""
    rows = read_jsonl(data_file)[:settings.limit] if settings.limit else read_jsonl(data_file)
    planned = shards.plan(len(rows), settings.k, samples_per_shard)
    provenance = {"settings": settings.record(), "data_sha256": sha256_file(data_file), "seed": seed}
    todo = [s for s in planned if force or not shards.finished(root, task, seed, s, provenance)]
    if len(planned) > 1:
        log(f"[eval] {task} seed {seed}: {len(planned) - len(todo)} of {len(planned)} shards finished, "
            f"{sum(s.samples for s in todo):,} samples to go ({samples_per_shard} a shard at most)")
    start = time.monotonic()
    _progress(root, task, seed, len(planned) - len(todo), len(planned))
    for i, shard in enumerate(todo):
        began = time.monotonic()
        out = _one_call(model, task, seed, rows, shard, root, generation, settings)
        shards.save(root, task, seed, shard, outcome.sample_rows(task, out, shard.lo), provenance,
                    time.monotonic() - began)
        _progress(root, task, seed, len(planned) - len(todo) + i + 1, len(planned))
        if len(planned) > 1:
            log(f"[eval] {task} seed {seed}: shard {shard.name} done ({len(planned) - len(todo) + i + 1} of "
                f"{len(planned)}, {time.monotonic() - began:.1f} s)")
    merged, metrics = shards.merge(root, task, seed, planned)
    return outcome.save_seed(root, task, seed, merged, metrics, settings, data_file, time.monotonic() - start,
                             {"shards": [s.record() for s in planned]})


def _progress(root: Path, task: str, seed: int, done: int, total: int) -> None:
    """`<run_dir>/eval_progress.json`: shards done of total per task and seed of the evaluation running now (the
    run directory is two levels above `root`, eval/step_N)."""
    path = RunDir(root.parent.parent).eval_progress
    try:
        known = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        known = {}
    if known.get("step_dir") != root.name:
        known = {"step_dir": root.name, "shards": {}}
    known["shards"][f"{task}/seed_{seed}"] = [done, total]
    atomic_write(path, json.dumps({**known, "at": time.time()}, sort_keys=True))


def _one_call(model, task, seed, rows, shard, root, generation, settings) -> dict:
    """lm-eval over the shard's problems with its repeats, from the shard's own data file and task file."""
    where = shards.shard_dir(root, task, seed) / shard.name
    data = write_jsonl(rows[shard.lo:shard.hi], where / taskfiles.data_file(task))
    rendered = taskfiles.render({task: data}, where / "tasks", shard.r1 - shard.r0, generation)
    manager = TaskManager(include_path=str(rendered), include_defaults=False)
    with backends.seeded_samples(model, seed, shard.r0):
        return lm_eval.simple_evaluate(
            model=model, tasks=[task], task_manager=manager, apply_chat_template=settings.chat_template,
            fewshot_as_multiturn=settings.chat_template, log_samples=True, bootstrap_iters=0, random_seed=seed,
            numpy_random_seed=seed, torch_random_seed=seed, fewshot_random_seed=seed)
