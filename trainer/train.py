"""The recipe: setup -> (rollout, reward, kl, advantage, loss, step, log, checkpoint) -> teardown.

One readable loop; every piece it calls is a plain function of its inputs:
    prompts of step s (trainer/data.py, pure in (seed, s))
    -> G rollouts each (trainer/rollout.py)          -> verifiable rewards (trainer/rewards.py)
    -> log-probs of the behaviour policy and the reference (trainer/update.py, trainer/policy.py)
    -> KL, advantages and loss (trainer/objective.py -> kl.py, advantages.py) -> DeepSpeed ZeRO-3 step
    -> metrics (MLflow, record/tracker.py) -> collapse verdict (trainer/collapse.py) -> checkpoint
The same entry point runs in a shell (`orchestrate train`) and inside a Slurm job (one task per GPU).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from record.keys import (
    ASYNC_LAG,
    PERF_STEP_TIME_S,
    PERF_TOKENS_PER_S,
    PERF_WEIGHT_SYNC_S,
    TRAIN_ACCURACY,
    TRAIN_RESPONSE_LENGTH,
    TRAIN_REWARD_MEAN,
    TRAIN_TRUNCATION_RATE,
    VAL_PASS_AT_1,
    step_key,
)
from record.rundir import RunDir, atomic_write
from trainer import checkpoint, distributed
from trainer.config import RunConfig
from trainer.data import load_examples
from trainer.kl import describe_objective
from trainer.preempt import Preemption, requeue_self
from trainer.progress import StepProgress, quiet_third_party
from trainer.rollout import make_engine
from trainer.sampler import BatchSampler, RolloutQueue
from trainer.update import Batch, score_logprobs, update
from trainer.val_pass_at_1 import pass_at_1

CACHE = Path(__file__).resolve().parents[1] / ".cache"

# How long a run that ends while its MLflow store is unreachable keeps trying to deliver what it buffered (a
# server restarting): past it, the points wait in the run dir for the evaluation job's (or a resume's) open_run.
TRACKING_CLOSE_WAIT_S = 120.0


@dataclass
class RunContext:
    """Where a run lives and how it is tracked; the orchestrator fills it, `orchestrate train` too."""

    run_dir: Path
    run_key: str
    sweep_id: str | None = None
    parent_run_key: str | None = None
    axes: dict | None = None          # the sweep axes of this cell, logged as params
    micro_groups: int = 4             # prompt groups per micro-batch (memory knob, no effect on the gradient)


def objective_manifest(cfg: RunConfig) -> dict:
    """The resolved objective of the run: what no other library writes down (reference notes, section 5)."""
    algo = cfg.algorithm
    centring = {"rloo": "leave-one-out group mean (KL gradient unbiased)",
                "grpo": "group mean incl. the sample, / group std (KL gradient shrunk by (G-1)/G, rescaled)",
                "dr_grpo": "group mean incl. the sample (KL gradient shrunk by (G-1)/G)",
                "none": "no baseline"}[algo.advantage]
    return {
        **describe_objective(cfg.kl),
        "kl_credit": cfg.kl.credit,
        "centring": centring,
        "normaliser": algo.aggregation + (f" (norm_length {algo.norm_length})" if algo.norm_length else ""),
        "kl_loss_normaliser": "same as the policy-gradient term",
        "updates_per_batch": cfg.optim.updates_per_batch,
        "ppo_clip": algo.clip_eps,
        "async_level": cfg.rollout.async_level,
    }


def resolve_model_path(cfg: RunConfig) -> str:
    if cfg.model.is_tiny:
        from trainer.tiny_model import ensure_tiny_model

        return str(ensure_tiny_model())
    return cfg.model.name_or_path


def train_dtype(cfg: RunConfig, dist: distributed.DistInfo) -> torch.dtype:
    """bf16 on GPU unless the model asks for fp32; fp32 on CPU (bf16 matmuls there are slow and inexact)."""
    return torch.bfloat16 if dist.device.type == "cuda" and cfg.model.dtype != "fp32" else torch.float32


def build_engine(cfg: RunConfig, path: str, dist: distributed.DistInfo, micro_batches: int):
    """The policy under DeepSpeed ZeRO-3, the frozen reference as a plain copy, and the tokenizer."""
    import deepspeed
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gpu = dist.device.type == "cuda"
    dtype = train_dtype(cfg, dist)
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    torch.manual_seed(cfg.seed)
    policy = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    reference = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(dist.device).eval()
    reference.requires_grad_(False)
    optim = torch.optim.AdamW(policy.parameters(), lr=cfg.optim.lr, weight_decay=cfg.optim.weight_decay)
    warm = max(cfg.optim.warmup_steps, 0)
    sched = torch.optim.lr_scheduler.LambdaLR(optim, lambda s: min(1.0, (s + 1) / warm) if warm else 1.0)
    # Two CPU-only speed settings (same numbers, less Python per step); on GPU, DeepSpeed's defaults.
    ds = distributed.deepspeed_config(bf16=dtype == torch.bfloat16, grad_clip=cfg.optim.grad_clip,
                                      micro_batches=micro_batches, memory_efficient_linear=gpu)
    if not gpu:
        distributed.hook_whole_layers(policy)
    engine, _, _, _ = deepspeed.initialize(model=policy, optimizer=optim, lr_scheduler=sched, config=ds)
    return engine, reference, tokenizer


def build_rollout(cfg: RunConfig, engine, tokenizer, path: str, dist: distributed.DistInfo):
    """The rollout engine of `rollout.engine`: HF generate on the policy module, or a colocated vLLM engine started
    from the model's directory (its weights are replaced by the policy's at the first sync)."""
    r = cfg.rollout
    if r.engine == "hf":
        return make_engine("hf", engine.module, tokenizer, ds_engine=engine)
    return make_engine("vllm", engine.module, tokenizer, model_path=path, dtype=train_dtype(cfg, dist),
                       seed=cfg.seed, max_model_len=r.max_prompt_tokens + r.max_response_tokens,
                       tensor_parallel=r.tensor_parallel,
                       gpu_memory_utilization=r.gpu_memory_utilization, sleep_mode=r.sleep_mode,
                       world_size=dist.world_size)


def _open_tracker(cfg: RunConfig, ctx: RunContext, dist: distributed.DistInfo, manifest: dict):
    """The run named as `orchestrate status` names the cell, with every paper axis as an `axis/` param; its
    sweep's parent gets the sweep (record/run_names.py)."""
    from record.run_names import axis_params, cell_run_name, experiment_tags, read_manifest, sweep_tags
    from record.tracker import MlflowTracker, default_tracking_uri
    from record.tracker_keys import flatten_params
    from record.tracker_null import NullTracker

    if not dist.is_main:
        return NullTracker()
    tracker = MlflowTracker(ctx.run_dir)
    uri = cfg.tracking.tracking_uri or default_tracking_uri()
    config, sweep = cfg.to_dict(), read_manifest(ctx.run_dir.parent) if ctx.sweep_id else {}
    tracker.open_run(ctx.run_key, cfg.tracking.experiment or "comedy", uri,
                     {**flatten_params(config), **axis_params(config, ctx.axes)},
                     {"objective/target": manifest["kl_target"]}, parent_run_key=ctx.parent_run_key,
                     sweep_id=ctx.sweep_id, run_name=cell_run_name(sweep, ctx.axes, ctx.run_key),
                     parent_tags=sweep_tags(sweep) if ctx.parent_run_key else None,
                     experiment_tags=experiment_tags(ctx.sweep_id, sweep, config) if ctx.sweep_id else None)
    tracker.log_dict(cfg.to_dict(), "config.json")
    tracker.log_dict(manifest, "objective.json")
    return tracker


def train(cfg: RunConfig, ctx: RunContext) -> dict:
    """Run (or resume) one training run to its last step. Returns the final metrics and the collapse verdict."""
    dist = distributed.init(CACHE)
    try:
        return _train(cfg, ctx, dist)
    finally:
        distributed.teardown()


@dataclass
class _Run:
    """Everything one training run holds between steps (built by `_setup`, restored from the last checkpoint)."""

    dir: RunDir
    engine: object  # the policy under DeepSpeed ZeRO-3
    reference: torch.nn.Module
    tokenizer: object
    rollout: object  # trainer/rollout.py RolloutEngine
    sampler: BatchSampler
    queue: RolloutQueue
    monitor: object  # trainer/collapse.py CollapseMonitor
    tracker: object
    logged: _LoggedSteps
    val_examples: list
    micro_groups: int
    start_step: int


def _train(cfg: RunConfig, ctx: RunContext, dist: distributed.DistInfo) -> dict:
    """The loop: one screen. What a step computes is `_step` below, the math in trainer/objective.py."""
    run = _setup(cfg, ctx, dist)
    preempt, last, status = Preemption(), {}, "FINISHED"
    progress = StepProgress(run.start_step, cfg.optim.steps, enabled=dist.is_main)
    run.rollout.sync_weights(run.engine.module)  # the restored checkpoint's weights (vLLM started from the base)
    try:
        for step in range(run.start_step, cfg.optim.steps):
            metrics = _step(cfg, run, step, dist)                       # rollout -> reward -> KL/advantage/loss
            if cfg.data.val_every and (step + 1) % cfg.data.val_every == 0:
                metrics[VAL_PASS_AT_1] = pass_at_1(run.rollout, run.tokenizer, run.val_examples, cfg,
                                                   run.sampler.grade, dist, step)
            last = _log(run, metrics, step + 1, dist.is_main)             # MLflow, once per step
            progress(step + 1, last)
            run.monitor.update(step + 1, last)                             # collapse verdict
            if dist.is_main:
                run.monitor.write(run.dir.verdict)
            stop, preempted = run.monitor.should_stop(), preempt.agreed(dist.device)
            if step + 1 == cfg.optim.steps or stop or preempted or (step + 1) % cfg.checkpoint.every == 0:
                state = {"run_key": ctx.run_key, "collapse": run.monitor.state()}
                checkpoint.save(run.engine, run.dir, step + 1, state, dist.rank, cfg.checkpoint.keep_last,
                                extra={f"queue_rank{dist.rank}.pt": run.queue.state()})
            if preempted:
                status = "KILLED"
                run.tracker.close(status)
                requeue_self()
                return {"metrics": last, "verdict": run.monitor.verdict_dict(), "preempted": True}
            if stop:
                break
        if dist.is_main:
            run.tracker.set_tags(run.monitor.tags())
    except BaseException:
        status = "FAILED"
        raise
    finally:
        progress.close()
        preempt.restore()
        run.rollout.close()
        if status != "KILLED":  # preempted: closed above at once, its time limit is near
            run.tracker.close(status, wait_s=TRACKING_CLOSE_WAIT_S)
    return {"metrics": last, "verdict": run.monitor.verdict_dict(), "preempted": False}


def _step(cfg: RunConfig, run: _Run, step: int, dist) -> dict[str, float]:
    """One step of the recipe; returns its metrics under their registered keys (record/keys.py).

    rollout + reward   G responses per prompt, graded by the verifiable reward (trainer/sampler.py); with
                       async_level > 0, sampled up to that many steps ago by an older policy (the queue)
    reference          log pi_ref of every sampled token: the KL's other side (trainer/update.py)
    KL, advantage,     per micro-batch `rl_loss` (trainer/objective.py): kl_terms (kl.py) -> the KL-shaped reward
    loss, update       -> advantages and the policy-gradient loss (advantages.py) + the KL loss term -> backward
                       -> the ZeRO-3 optimizer step (trainer/update.py)
    weight sync        the rollout engine samples the next step with the updated weights
    """
    t0 = time.perf_counter()
    sampled = run.queue.next(step, lambda s, v=step: run.sampler.sample(s, version=v, model=run.engine.module))
    micro = run.micro_groups * cfg.algorithm.group_size
    ref_logp = score_logprobs(run.reference, sampled.prompt_ids, sampled.response_ids,
                              run.tokenizer.pad_token_id, micro, cfg.rollout.temperature)
    batch = Batch(sampled.prompt_ids, sampled.response_ids, sampled.rewards_tensor(), sampled.behavior_tensor(),
                  ref_logp, run.tokenizer.pad_token_id)
    updated = update(run.engine, batch, cfg.kl, cfg.algorithm, cfg.optim.updates_per_batch, run.micro_groups,
                     cfg.rollout.temperature, dist.device)
    t_sync = time.perf_counter()
    run.rollout.sync_weights(run.engine.module)  # validation and the next batches sample version step + 1
    done = time.perf_counter()
    rollout, tokens = _rollout_metrics(sampled, dist.device)
    return {**{step_key(name): value for name, value in updated.items()}, **rollout,
            PERF_WEIGHT_SYNC_S: done - t_sync, ASYNC_LAG: step - sampled.version,
            PERF_STEP_TIME_S: done - t0, PERF_TOKENS_PER_S: tokens / (done - t0)}


def _setup(cfg: RunConfig, ctx: RunContext, dist: distributed.DistInfo) -> _Run:
    """Build the engines, data and trackers of a run and restore its latest checkpoint (if any)."""
    from trainer.collapse import CollapseConfig, CollapseMonitor

    quiet_third_party()
    G, world = cfg.algorithm.group_size, dist.world_size
    if cfg.optim.minibatch_prompts % world:
        raise ValueError(f"optim.minibatch_prompts {cfg.optim.minibatch_prompts} is not divisible by the "
                         f"{world} ranks; every rank needs the same number of prompt groups")
    local_groups = cfg.optim.batch_prompts // world
    per_mini = local_groups // cfg.optim.updates_per_batch
    micro_groups = max(1, min(ctx.micro_groups, per_mini))
    micro_batches = -(-per_mini // micro_groups)

    run_dir = RunDir(ctx.run_dir)
    run_dir.path.mkdir(parents=True, exist_ok=True)
    manifest = objective_manifest(cfg)
    if dist.is_main:
        atomic_write(run_dir.objective, json.dumps(manifest, indent=1))
    path = resolve_model_path(cfg)
    engine, reference, tokenizer = build_engine(cfg, path, dist, micro_batches)
    val_examples = load_examples(cfg.data, cfg.data.val_split) if cfg.data.val_every else []
    val_examples = val_examples[: cfg.data.val_size] if cfg.data.val_size else val_examples
    rollout = build_rollout(cfg, engine, tokenizer, path, dist)
    sampler = BatchSampler(cfg, tokenizer, rollout, load_examples(cfg.data, "train"), dist, local_groups,
                           micro_groups * G)
    queue = RolloutQueue(cfg.rollout.async_level)
    # The detector's noise allowance for held-out accuracy needs the size of the set it is measured on.
    monitor = CollapseMonitor(CollapseConfig.from_dict({"accuracy_samples": len(val_examples), **(cfg.collapse or {})}))
    state = checkpoint.restore(engine, run_dir, dist.rank) or {"step": 0}
    monitor.load(state.get("collapse", {}))
    queue.load(checkpoint.load_extra(run_dir, f"queue_rank{dist.rank}.pt", state.get("tag")) or [])
    tracker = _open_tracker(cfg, ctx, dist, manifest)
    return _Run(run_dir, engine, reference, tokenizer, rollout, sampler, queue, monitor, tracker,
                _LoggedSteps(run_dir), val_examples, micro_groups, state["step"])


class _LoggedSteps:
    """The last metric step this run delivered to the tracker, kept in the run directory: after a resume from an
    older checkpoint, the steps it re-trains (bitwise the same) are not logged a second time. Beside it, that
    step's metrics (`last_metrics.json`), which `orchestrate status` shows without asking the tracking store."""

    def __init__(self, run: RunDir):
        self.path, self.metrics_path = run.logged_step, run.last_metrics
        self.last = int(self.path.read_text()) if self.path.exists() else 0

    def mark(self, step: int, metrics: dict) -> None:
        self.last = step
        atomic_write(self.metrics_path, json.dumps({"step": step, "metrics": metrics}))
        atomic_write(self.path, str(step))


def _rollout_metrics(sampled, device) -> tuple[dict[str, float], float]:
    """The batch's reward, accuracy, length and truncation over every rank; and its generated token count."""
    n = len(sampled.response_ids)
    lengths = sum(len(r) for r in sampled.response_ids)
    rewards = torch.tensor(sampled.rewards)
    tot = distributed.all_reduce_sum([float(rewards.sum()), float((rewards >= 1.0).sum()), float(lengths),
                                      float(sum(sampled.truncated)), n], device)
    return {TRAIN_REWARD_MEAN: tot[0] / tot[4], TRAIN_ACCURACY: tot[1] / tot[4],
            TRAIN_RESPONSE_LENGTH: tot[2] / tot[4], TRAIN_TRUNCATION_RATE: tot[3] / tot[4]}, tot[2]


def _log(run: _Run, metrics: dict[str, float], step: int, is_main: bool) -> dict[str, float]:
    """Log the step's metrics once: a step re-trained after a resume from an older checkpoint is not sent again."""
    if is_main and step > run.logged.last:
        run.tracker.log_metrics(metrics, step)
        run.logged.mark(step, metrics)
    return metrics
