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
from .config import RunConfig
from .data import PromptOrder, load_examples, prompt_text
from .kl import describe_objective
from .rewards import reward_fn
from .rollout import Sampling, make_engine
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


def build_engine(cfg: RunConfig, path: str, dist: distributed.DistInfo, micro_batches: int):
    """The policy under DeepSpeed ZeRO-3, the frozen reference as a plain copy, and the tokenizer."""
    import deepspeed
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gpu = dist.device.type == "cuda"
    dtype = torch.bfloat16 if gpu and cfg.model.dtype != "fp32" else torch.float32
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
    ds = distributed.deepspeed_config(bf16=dtype == torch.bfloat16, grad_clip=cfg.optim.grad_clip,
                                      micro_batches=micro_batches)
    engine, _, _, _ = deepspeed.initialize(model=policy, optimizer=optim, lr_scheduler=sched, config=ds)
    return engine, reference, tokenizer


def default_tracking_uri() -> str:
    """MLFLOW_TRACKING_URI, else a local SQLite store under ./runs (MLflow 3 refuses new file stores)."""
    env = os.environ.get("MLFLOW_TRACKING_URI")
    return env or f"sqlite:///{(Path('runs') / 'mlflow.db').resolve()}"


def _open_tracker(cfg: RunConfig, ctx: RunContext, dist: distributed.DistInfo, manifest: dict):
    from orchestrator.tracking import MlflowTracker, NullTracker, flatten_params

    if not dist.is_main:
        return NullTracker()
    tracker = MlflowTracker(ctx.run_dir)
    uri = cfg.tracking.tracking_uri or default_tracking_uri()
    params = {**flatten_params(cfg.to_dict()), **{f"axis/{k}": v for k, v in (ctx.axes or {}).items()}}
    tracker.open_run(ctx.run_key, cfg.tracking.experiment or "comedy", uri, params,
                     {"objective/target": manifest["kl_target"]}, parent_run_key=ctx.parent_run_key,
                     sweep_id=ctx.sweep_id)
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
        checkpoint.atomic_write_text(ctx.run_dir / "objective.json", json.dumps(manifest, indent=1))
    path = resolve_model_path(cfg)
    engine, reference, tokenizer = build_engine(cfg, path, dist, micro_batches)
    examples = load_examples(cfg.data, "train")
    val_examples = load_examples(cfg.data, cfg.data.val_split) if cfg.data.val_every else []
    if cfg.data.val_size:
        val_examples = val_examples[: cfg.data.val_size]
    order, grade = PromptOrder(len(examples), cfg.seed), reward_fn(cfg.data.dataset)
    rollout = make_engine(cfg.rollout.engine, engine.module, tokenizer)
    sampling = Sampling(cfg.rollout.temperature, cfg.rollout.top_p, cfg.rollout.top_k or 0,
                        cfg.rollout.max_response_tokens)
    monitor = CollapseMonitor(CollapseConfig.from_dict(cfg.collapse))
    ckpt_dir = ctx.run_dir / "checkpoints"
    state = checkpoint.restore(engine, ckpt_dir, dist.rank) or {"step": 0}
    monitor.load(state.get("collapse", {}))
    tracker = _open_tracker(cfg, ctx, dist, manifest)
    start_step, last = state["step"], {}
    status = "FINISHED"
    try:
        for step in range(start_step, cfg.optim.steps):
            t0 = time.perf_counter()
            idx = order.indices(step, cfg.optim.batch_prompts)[dist.rank * local_groups:(dist.rank + 1) * local_groups]
            chunk = [examples[i] for i in idx]
            prompts = [_encode(tokenizer, prompt_text(tokenizer, ex, cfg.data.dataset, cfg.model.chat_template),
                               cfg.rollout.max_prompt_tokens) for ex in chunk]
            ro = rollout.generate(prompts, G, sampling, seed=_seed(cfg.seed, step, dist.rank))
            rewards = torch.tensor([grade(text, chunk[i // G]) for i, text in enumerate(ro.texts)])
            micro = micro_groups * G
            ref_logp = score_logprobs(reference, ro.prompt_ids, ro.response_ids, tokenizer.pad_token_id, micro,
                                      cfg.rollout.temperature)
            off_policy = cfg.optim.updates_per_batch > 1
            behaviour = (score_logprobs(engine.module, ro.prompt_ids, ro.response_ids, tokenizer.pad_token_id,
                                        micro, cfg.rollout.temperature) if off_policy else None)
            batch = Batch(ro.prompt_ids, ro.response_ids, rewards, behaviour, ref_logp, tokenizer.pad_token_id)
            m = update(engine, batch, cfg.kl, cfg.algorithm, cfg.optim.updates_per_batch, micro_groups,
                       cfg.rollout.temperature, dist.device)
            m.update(_rollout_metrics(ro, rewards, dist.device))
            m["step_time_s"] = time.perf_counter() - t0
            m["tokens_per_s"] = m.pop("_tokens_total") / m["step_time_s"]
            if cfg.data.val_every and (step + 1) % cfg.data.val_every == 0:
                m["val_pass_at_1"] = pass_at_1(rollout, tokenizer, val_examples, cfg, grade, dist, step)
            last = _log(tracker, m, step + 1)
            monitor.update(step + 1, last)
            if dist.is_main:
                monitor.write(ctx.run_dir / "verdict.json")
            done = step + 1 == cfg.optim.steps
            stop = monitor.should_stop()
            if done or stop or (step + 1) % cfg.checkpoint.every == 0:
                checkpoint.save(engine, ckpt_dir, step + 1, {"mlflow_run_key": ctx.run_key,
                                "collapse": monitor.state()}, dist.rank, cfg.checkpoint.keep_last)
            if stop:
                break
        if dist.is_main:
            tracker.set_tags(monitor.tags())
    except BaseException:
        status = "FAILED"
        raise
    finally:
        tracker.close(status)
    return {"metrics": last, "verdict": monitor.verdict_dict()}


def _encode(tokenizer, text: str, max_tokens: int) -> list[int]:
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return ids[-max_tokens:]  # keep the end: the instruction and the generation prompt


def _seed(seed: int, step: int, rank: int) -> int:
    return (seed * 1_000_003 + step * 10_007 + rank) % (2**31 - 1)


def _rollout_metrics(ro, rewards: torch.Tensor, device) -> dict[str, float]:
    n = len(ro.response_ids)
    lengths = sum(len(r) for r in ro.response_ids)
    tot = distributed.all_reduce_sum(
        [float(rewards.sum()), float((rewards >= 1.0).sum()), float(lengths), float(sum(ro.truncated)), n], device)
    return {"reward_mean": tot[0] / tot[4], "accuracy": tot[1] / tot[4], "response_length": tot[2] / tot[4],
            "truncation_rate": tot[3] / tot[4], "_tokens_total": tot[2]}


def _log(tracker, m: dict, step: int) -> dict:
    """Namespace and log. Names come from trainer/metrics.py: no '@' (MLflow refuses it)."""
    perf = {"step_time_s", "tokens_per_s"}
    out = {}
    for k, v in m.items():
        if k == "val_pass_at_1":
            out["val/pass_at_1"] = v
        else:
            out[("perf/" if k in perf else "train/") + k] = v
    tracker.log_metrics(out, step)
    return out
