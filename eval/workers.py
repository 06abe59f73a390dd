"""Shards side by side: one engine per GPU the evaluation job has (data parallel; tensor parallel stays 1 for a model
that fits one GPU), each in a worker process of its own that takes the next unfinished shard from a shared queue
until none is left. A shard is saved by the worker that ran it (eval/shard_plan.py), so a worker that dies loses only
its shard in flight; the parent then joins the task's shards as one process would (eval/shard_run.py `finish`).

Workers are spawned (not forked: CUDA and vLLM need a fresh interpreter), each seeing one GPU through
CUDA_VISIBLE_DEVICES. On the HF backend a sample's draw depends only on (seed, prompt, repeat)
(eval/backends.py `seeded_samples`), so any number of workers gives the same per-sample files as one. Where there is
no GPU, `workers` CPU processes stand in (tests/integration/test_eval_lm_eval.py), each with its share of the
threads.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue as queues
from collections.abc import Callable, Sequence
from pathlib import Path

from eval.outcome import Settings
from eval.shard_plan import TaskPlan
from eval.shard_run import run_shard, shard_done


def count(requested: int | None) -> int:
    """Workers for this job: as asked, else one per visible CUDA device (at least one)."""
    if requested is not None:
        return requested
    import torch  # noqa: PLC0415

    return max(torch.cuda.device_count(), 1)


def run(workers: int, model: dict, plans: Sequence[TaskPlan], settings: Settings, generation: dict,
        log: Callable[[str], None]) -> None:
    """Every unfinished shard of `plans` (one evaluation seed) on `workers` processes. `model`: how a worker builds
    its engine ({"backend", "model_dir", "device", "vllm_args"}). RuntimeError naming a worker that failed."""
    items = [(i, shard) for i, plan in enumerate(plans) for shard in plan.todo]
    if not items:
        return
    ctx = mp.get_context("spawn")
    todo, done = ctx.Queue(), ctx.Queue()
    for item in items:
        todo.put(item)
    workers = min(workers, len(items))
    for _ in range(workers):
        todo.put(None)
    gpus = model["device"] == "cuda"
    threads = max(1, (os.cpu_count() or 1) // workers)
    procs = [ctx.Process(target=_work, args=(w, w if gpus else None, threads, model, list(plans), settings,
                                             generation, todo, done), daemon=True) for w in range(workers)]
    for p in procs:
        p.start()
    log(f"[eval] {len(items)} shard(s) on {workers} worker(s), one engine each"
        f"{' (one GPU each)' if gpus else ' (CPU processes)'}")
    finished = 0
    while finished < len(items):
        try:
            w, i, name, took = done.get(timeout=5)
        except queues.Empty:
            dead = [(n, p.exitcode) for n, p in enumerate(procs) if p.exitcode not in (None, 0)]
            if dead or not any(p.is_alive() for p in procs):
                for p in procs:
                    p.kill()
                raise RuntimeError(f"evaluation worker(s) {dead or 'all'} ended with {finished} of {len(items)} "
                                   f"shards done; the finished ones are kept (a rerun starts at the next)") from None
            continue
        finished += 1
        plan = plans[i]
        shard = next(s for s in plan.todo if s.name == name)
        shard_done(plan, shard, took, log, who=f" by worker {w}")
    for p in procs:
        p.join(timeout=60)


def _work(w: int, gpu: int | None, threads: int, model: dict, plans: list[TaskPlan], settings: Settings,
          generation: dict, todo, done) -> None:
    """One worker: its engine, then shards until the queue says stop."""
    if gpu is not None:  # read when CUDA initialises (the engine's first use), not when torch is imported
        os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu)
    import torch  # noqa: PLC0415

    from eval import backends  # noqa: PLC0415

    torch.set_num_threads(threads)
    if model["backend"] == "hf":
        engine = backends.hf_lm(Path(model["model_dir"]), device=model["device"])
    else:
        engine = backends.vllm_lm(backends.vllm_model_args(Path(model["model_dir"]), plans[0].seed,
                                                           **model["vllm_args"]))
    try:
        while (item := todo.get()) is not None:
            i, shard = item
            took = run_shard(engine, plans[i], shard, generation, settings)
            done.put((w, i, shard.name, took))
    finally:
        if model["backend"] == "vllm":
            backends.release_vllm(engine)
