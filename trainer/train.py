"""The recipe: setup -> (rollout, reward, kl, advantage, loss, step, log, checkpoint) -> teardown.

One readable loop; every piece it calls is a plain function of its inputs:
    prompts of step s (trainer/data.py, pure in (seed, s))
    -> G rollouts each (trainer/rollout.py)          -> verifiable rewards (trainer/rewards.py)
    -> log-probs of the behaviour policy and the reference (trainer/update.py, trainer/policy.py)
    -> KL, advantages and loss (trainer/objective.py -> kl.py, advantages.py) -> DeepSpeed ZeRO-3 step
    -> metrics (MLflow, orchestrator/tracking.py) -> collapse verdict (trainer/collapse.py) -> checkpoint
The same entry point runs in a shell (`orchestrate train`) and inside a Slurm job (one task per GPU).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from . import checkpoint, distributed
from .atomic import atomic_write
from .config import RunConfig
from .data import load_examples
from .kl import describe_objective
from .preempt import Preemption, requeue_self
from .progress import StepProgress, quiet_third_party
from .rollout import make_engine
from .sampler import BatchSampler, RolloutQueue
from .update import Batch, score_logprobs, update
from .validate import pass_at_1

CACHE = Path(__file__).resolve().parents[1] / ".cache"


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
        from .tiny_model import ensure_tiny_model

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


def default_tracking_uri() -> str:
    """MLFLOW_TRACKING_URI, else a local SQLite store under ./runs (MLflow 3 refuses new file stores)."""
    env = os.environ.get("MLFLOW_TRACKING_URI")
    return env or f"sqlite:///{(Path('runs') / 'mlflow.db').resolve()}"


def _open_tracker(cfg: RunConfig, ctx: RunContext, dist: distributed.DistInfo, manifest: dict):
    """The run named as `orchestrate status` names the cell, with every paper axis as an `axis/` param; its
    sweep's parent gets the sweep (orchestrator/sweep_run.py)."""
    from orchestrator.sweep_run import axis_params, cell_run_name, experiment_tags, read_manifest, sweep_tags
    from orchestrator.tracking import MlflowTracker, flatten_params
    from orchestrator.tracking_null import NullTracker

    if not dist.is_main:
        return NullTracker()
    tracker = MlflowTracker(ctx.run_dir)
    uri = cfg.tracking.tracking_uri or default_tracking_uri()
    config, sweep = cfg.to_dict(), read_manifest(ctx.run_dir.parent) if ctx.sweep_id else {}
    tracker.open_run(ctx.run_key, cfg.tracking.experiment or "comedy", uri,
                     {**flatten_params(config), **axis_params(config, ctx.axes)},
                     {"objective/target": manifest["kl_target"]}, parent_run_key=ctx.parent_run_key,
                     sweep_id=ctx.sweep_id, run_name=cell_run_name(ctx.run_dir, ctx.axes, ctx.run_key),
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


def _train(cfg: RunConfig, ctx: RunContext, dist: distributed.DistInfo) -> dict:
    from .collapse import CollapseConfig, CollapseMonitor

    quiet_third_party()
    G, world = cfg.algorithm.group_size, dist.world_size
    if cfg.optim.minibatch_prompts % world:
        raise ValueError(f"optim.minibatch_prompts {cfg.optim.minibatch_prompts} is not divisible by the "
                         f"{world} ranks; every rank needs the same number of prompt groups")
    local_groups = cfg.optim.batch_prompts // world
    per_mini = local_groups // cfg.optim.updates_per_batch
    micro_groups = max(1, min(ctx.micro_groups, per_mini))
    micro_batches = -(-per_mini // micro_groups)

    ctx.run_dir.mkdir(parents=True, exist_ok=True)
    manifest = objective_manifest(cfg)
    if dist.is_main:
        atomic_write(ctx.run_dir / "objective.json", json.dumps(manifest, indent=1))
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
    ckpt_dir = ctx.run_dir / "checkpoints"
    state = checkpoint.restore(engine, ckpt_dir, dist.rank) or {"step": 0}
    monitor.load(state.get("collapse", {}))
    queue.load(checkpoint.load_extra(ckpt_dir, f"queue_rank{dist.rank}.pt") or [])
    tracker = _open_tracker(cfg, ctx, dist, manifest)
    logged = _LoggedSteps(ctx.run_dir)
    preempt, last, status = Preemption(), {}, "FINISHED"
    progress = StepProgress(state["step"], cfg.optim.steps, enabled=dist.is_main)
    rollout.sync_weights(engine.module)  # the restored checkpoint's weights (vLLM started from the base model)
    try:
        for step in range(state["step"], cfg.optim.steps):
            t0 = time.perf_counter()
            sampled = queue.next(step, lambda s, v=step: sampler.sample(s, version=v, model=engine.module))
            m = _train_step(cfg, engine, reference, tokenizer, sampled, micro_groups, dist)
            t_sync = time.perf_counter()
            rollout.sync_weights(engine.module)  # validation and the next batches sample version step + 1
            m["weight_sync_s"] = time.perf_counter() - t_sync
            m["lag"] = step - sampled.version
            m["step_time_s"] = time.perf_counter() - t0
            m["tokens_per_s"] = m.pop("_tokens_total") / m["step_time_s"]
            if cfg.data.val_every and (step + 1) % cfg.data.val_every == 0:
                m["val_pass_at_1"] = pass_at_1(rollout, tokenizer, val_examples, cfg, sampler.grade, dist, step)
            last = _log(tracker, logged, m, step + 1, dist.is_main)
            progress(step + 1, last)
            monitor.update(step + 1, last)
            if dist.is_main:
                monitor.write(ctx.run_dir / "verdict.json")
            stop, preempted = monitor.should_stop(), preempt.agreed(dist.device)
            if step + 1 == cfg.optim.steps or stop or preempted or (step + 1) % cfg.checkpoint.every == 0:
                checkpoint.save(engine, ckpt_dir, step + 1, {"run_key": ctx.run_key, "collapse": monitor.state()},
                                dist.rank, cfg.checkpoint.keep_last,
                                extra={f"queue_rank{dist.rank}.pt": queue.state()})
            if preempted:
                status = "KILLED"
                tracker.close(status)
                requeue_self()
                return {"metrics": last, "verdict": monitor.verdict_dict(), "preempted": True}
            if stop:
                break
        if dist.is_main:
            tracker.set_tags(monitor.tags())
    except BaseException:
        status = "FAILED"
        raise
    finally:
        progress.close()
        preempt.restore()
        rollout.close()
        if status != "KILLED":
            tracker.close(status)
    return {"metrics": last, "verdict": monitor.verdict_dict(), "preempted": False}


def _train_step(cfg: RunConfig, engine, reference, tokenizer, sampled, micro_groups: int, dist) -> dict:
    """Reference log-probs, then every policy update of this batch; returns the step's metrics."""
    micro = micro_groups * cfg.algorithm.group_size
    ref_logp = score_logprobs(reference, sampled.prompt_ids, sampled.response_ids, tokenizer.pad_token_id, micro,
                              cfg.rollout.temperature)
    batch = Batch(sampled.prompt_ids, sampled.response_ids, sampled.rewards_tensor(), sampled.behavior_tensor(),
                  ref_logp, tokenizer.pad_token_id)
    m = update(engine, batch, cfg.kl, cfg.algorithm, cfg.optim.updates_per_batch, micro_groups,
               cfg.rollout.temperature, dist.device)
    m.update(_rollout_metrics(sampled, dist.device))
    return m


class _LoggedSteps:
    """The last metric step this run delivered to the tracker, kept in the run directory: after a resume from an
    older checkpoint, the steps it re-trains (bitwise the same) are not logged a second time. Beside it, that
    step's metrics (`last_metrics.json`), which `orchestrate status` shows without asking the tracking store."""

    def __init__(self, run_dir: Path):
        self.path, self.metrics_path = run_dir / "logged_step", run_dir / "last_metrics.json"
        self.last = int(self.path.read_text()) if self.path.exists() else 0

    def mark(self, step: int, metrics: dict) -> None:
        self.last = step
        atomic_write(self.metrics_path, json.dumps({"step": step, "metrics": metrics}))
        atomic_write(self.path, str(step))


def _rollout_metrics(sampled, device) -> dict[str, float]:
    n = len(sampled.response_ids)
    lengths = sum(len(r) for r in sampled.response_ids)
    rewards = torch.tensor(sampled.rewards)
    tot = distributed.all_reduce_sum([float(rewards.sum()), float((rewards >= 1.0).sum()), float(lengths),
                                      float(sum(sampled.truncated)), n], device)
    return {"reward_mean": tot[0] / tot[4], "accuracy": tot[1] / tot[4], "response_length": tot[2] / tot[4],
            "truncation_rate": tot[3] / tot[4], "_tokens_total": tot[2]}


def _log(tracker, logged: _LoggedSteps, m: dict, step: int, is_main: bool) -> dict:
    """Namespace (keys listed in trainer/metrics.py; no '@', MLflow refuses it) and log, once per step."""
    out = {}
    for k, v in m.items():
        if k == "val_pass_at_1":
            out["val/pass_at_1"] = v
        elif k == "lag":
            out["async/lag"] = v
        else:
            out[("perf/" if k in ("step_time_s", "tokens_per_s", "weight_sync_s") else "train/") + k] = v
    if is_main and step > logged.last:
        tracker.log_metrics(out, step)
        logged.mark(step, out)
    return out
