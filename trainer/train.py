"""One RLOO training run: setup, then `_step` once per step, every verb of the recipe a visible call in its order:

    rollout              G responses per prompt, from the rollout engine (trainer/rollout/: vLLM or HF generate);
                         at async level k the batch sampled k steps ago (the queue, trainer/rollout/sampler.py)
    reward               verifiable, per response (trainer/tasks/rewards.py)
    reference log-probs  log pi_ref of every sampled token, the KL's other side (trainer/model/logprobs.py)
    for each minibatch (one optimizer step) and micro-batch of whole groups in it (trainer/batch.py):
      advantages         KL per token (trainer/objective/kl.py), R - beta sum sg(KL_t), the RLOO baseline (loss.py)
      loss               `rl_loss`: the policy-gradient term + beta * the KL loss term (trainer/objective/loss.py)
      backward, step     DeepSpeed ZeRO-3
    weight sync          the rollout engine takes the new weights (vLLM; HF samples the trained module itself)
    log                  MLflow (record/tracking/tracker.py), the collapse verdict (trainer/run/collapse.py)
    checkpoint           trainer/run/checkpoint.py
    export               at the last step, the bf16 weights evaluation loads (trainer/run/export.py)
The same entry point runs in a shell (`orchestrate train`) and inside a Slurm job (one task per GPU).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from record.files import atomic_write
from record.metric_keys import (
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
from record.rundir import RunDir
from record.tracking.key_rules import flatten_params
from record.tracking.null import NullTracker
from record.tracking.run_names import (
    axis_params,
    cell_run_name,
    experiment_tags,
    parent_params,
    read_manifest,
    sweep_tags,
)
from record.tracking.tracker import MlflowTracker, default_tracking_uri
from trainer.batch import Batch, UpdateMetrics
from trainer.config.run import RunConfig
from trainer.model import distributed
from trainer.model.build import build_engine, model_path
from trainer.model.logprobs import response_logprobs, score_logprobs
from trainer.objective.estimators import ESTIMATORS
from trainer.objective.fingerprint import fingerprint
from trainer.objective.kl import describe_objective
from trainer.objective.loss import rl_loss, shaped_advantages
from trainer.rollout.engine import RolloutEngine, build_rollout
from trainer.rollout.sampler import BatchSampler, RolloutQueue, Sampled
from trainer.run import checkpoint, export
from trainer.run.collapse import CollapseMonitor
from trainer.run.collapse_rules import CollapseConfig
from trainer.run.preempt import Preemption, install, requeue_self
from trainer.run.progress import StepProgress, quiet_third_party
from trainer.run.validation import pass_at_1
from trainer.tasks.data import load_examples

if TYPE_CHECKING:  # annotations only: deepspeed is imported once the accelerator is chosen (trainer/model/build.py)
    from deepspeed import DeepSpeedEngine
    from transformers import PreTrainedTokenizerBase

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
        # The gradient this code's loss path gives on a fixed probe (trainer/objective/fingerprint.py), and the code
        # that computed it: a relaunch after a change of gradient under unchanged settings shows here.
        "fingerprint": fingerprint(cfg.kl, cfg.algorithm),
        "code": os.environ.get("COMEDY_CODE") or str(Path(__file__).resolve().parents[1]),
    }


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
    run_key: str
    engine: DeepSpeedEngine            # the policy under ZeRO-3, with its optimizer
    reference: torch.nn.Module | None  # frozen; None where the objective ignores it (memory.skip_unused_reference)
    tokenizer: PreTrainedTokenizerBase
    rollout: RolloutEngine
    sampler: BatchSampler
    queue: RolloutQueue
    monitor: CollapseMonitor
    tracker: MlflowTracker | NullTracker
    logged: _LoggedSteps
    val_examples: list[dict]
    micro_groups: int
    start_step: int


def _train(cfg: RunConfig, ctx: RunContext, dist: distributed.DistInfo) -> dict:
    """The loop: `_step` until the last step, a collapse (with on_collapse: stop) or a preemption."""
    # The job's handler (installed at its start, orchestrator/cluster/entry.py), or this run's (a shell, a test):
    # before the setup either way, so a warning while the models load (minutes) does not kill the job.
    preempt, mine = install()
    try:
        run = _setup(cfg, ctx, dist)
    except BaseException:
        if mine:
            preempt.restore()
        raise
    last, status = {}, "FINISHED"
    progress = StepProgress(run.start_step, cfg.optim.steps, enabled=dist.is_main)
    early = preempt.agreed(dist.device)  # warned during the setup: no step starts (the restored checkpoint stands)
    if not early:
        run.rollout.sync_weights(run.engine.module)  # the restored checkpoint's weights (vLLM started from the base)
    try:
        for step in range(run.start_step, cfg.optim.steps):
            stop, preempted = False, early
            if not early:
                last, stop, preempted = _step(cfg, run, step, dist, preempt)
                progress(step + 1, last)
            if preempted:
                status = "KILLED"
                run.tracker.close(status)
                # The warning signal; a SIGTERM is Slurm ending the job (trainer/run/preempt.py). One request, from
                # rank 0, once every rank's checkpoint is whole: it requeues every task of the job. The other ranks
                # wait for it (the all-reduce): a task that exits first could end the job before the request.
                if preempt.requeue:
                    if dist.is_main:
                        requeue_self(ctx.run_dir, run.start_step if early else step + 1)  # the checkpoint's step
                    distributed.all_reduce_max([0.0], dist.device)
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
        if mine:
            preempt.restore()
        run.rollout.close()
        if status != "KILLED":  # preempted: closed above at once, its time limit is near
            run.tracker.close(status, wait_s=TRACKING_CLOSE_WAIT_S)
    return {"metrics": last, "verdict": run.monitor.verdict_dict(), "preempted": False}


def _step(cfg: RunConfig, run: _Run, step: int, dist: distributed.DistInfo,
          preempt: Preemption) -> tuple[dict[str, float], bool, bool]:
    """One RL step (the module docstring says where each call lives). Returns its metrics under their registered
    keys (record/metric_keys.py), whether the collapse rules stop the run, and whether the job was signalled to stop
    (preemption, agreed on by every rank)."""
    t0, G, T, pad = time.perf_counter(), cfg.algorithm.group_size, cfg.rollout.temperature, run.tokenizer.pad_token_id
    # The queue first tops itself up to step + async_level with the current weights (version `step`).
    rollouts = run.queue.next(step, lambda s: run.sampler.sample(s, version=step, model=run.engine.module))
    rewards = run.sampler.rewards(rollouts)
    chunk = cfg.memory.logprob_chunk_tokens
    ref_logp = None if run.reference is None else score_logprobs(
        run.reference, rollouts.prompt_ids, rollouts.response_ids, pad, run.micro_groups * G, T, chunk)
    batch = Batch(rollouts.prompt_ids, rollouts.response_ids, torch.tensor(rewards, dtype=torch.float32),
                  rollouts.behavior_tensor(), ref_logp, pad, G)
    updates = UpdateMetrics(cfg.optim.updates_per_batch)
    for minibatch in batch.minibatches(cfg.optim.updates_per_batch):
        # The loss divides by the whole minibatch's counts over every rank, whatever the micro-batch.
        tokens, seqs = distributed.all_reduce_sum([minibatch.tokens, minibatch.sequences], dist.device)
        for micro in minibatch.micro_batches(run.micro_groups, dist.device):
            logp, entropy = response_logprobs(run.engine, micro.tokens, T, with_entropy=True, chunk_tokens=chunk)
            # No reference (beta 0 or placement none, skipped): KL 0, which the objective multiplies by nothing.
            ref = logp.detach() if micro.ref_logp is None else micro.ref_logp
            kl, advantages = shaped_advantages(logp, ref, micro.mask, micro.rewards, cfg.kl,
                                               cfg.algorithm, old_logp=micro.old_logp)
            loss, loss_metrics = rl_loss(logp, advantages, kl, micro.mask, cfg.algorithm, old_logp=micro.old_logp,
                                         num_tokens=max(tokens, 1.0), num_seqs=seqs)
            # DeepSpeed averages gradients over ranks, and the loss is already the whole minibatch's: undo it.
            run.engine.backward(loss * dist.world_size, scale_wrt_gas=False)
            run.engine.step()  # the optimizer steps at the minibatch's last micro-batch (gradient accumulation)
            updates.add(loss_metrics, entropy, micro)
    updated = updates.reduce(run.engine, dist.device)
    # The time-limit margin: a warning that came during the rollouts or the update is agreed on here, and from
    # now on nothing that can wait runs (no weight sync, no validation, no new step): the checkpoint starts at
    # once. Nothing later depends on what is skipped (a resume syncs first; rollout seeds are pure in the step).
    preempted = preempt.agreed(dist.device)
    t_sync = time.perf_counter()
    if not preempted:
        run.rollout.sync_weights(run.engine.module)  # validation and the next batches sample version step + 1
    done = time.perf_counter()
    sampled, generated = _rollout_metrics(rollouts, rewards, dist.device)
    # Without a reference the estimators measured the policy against itself: not a KL, so not logged.
    unmeasured = set() if run.reference is not None else {est.metric for est in ESTIMATORS.values()}
    metrics = {**{step_key(name): value for name, value in updated.items() if name not in unmeasured}, **sampled,
               PERF_WEIGHT_SYNC_S: done - t_sync, ASYNC_LAG: step - rollouts.version,
               PERF_STEP_TIME_S: done - t0, PERF_TOKENS_PER_S: generated / (done - t0)}
    if cfg.data.val_every and (step + 1) % cfg.data.val_every == 0 and not preempted:
        metrics[VAL_PASS_AT_1] = pass_at_1(run.rollout, run.tokenizer, run.val_examples, cfg, run.sampler.grade,
                                           dist, step)
    _log(run, metrics, step + 1, dist.is_main)  # once per step, also after a resume from an older checkpoint
    run.monitor.update(step + 1, metrics)
    if dist.is_main:
        run.monitor.write(run.dir.verdict)
    stop, preempted = run.monitor.should_stop(), preempted or preempt.agreed(dist.device)  # one in validation
    if step + 1 == cfg.optim.steps or stop or preempted or (step + 1) % cfg.checkpoint.every == 0:
        checkpoint.save(run.engine, run.dir, step + 1, {"run_key": run.run_key, "collapse": run.monitor.state()},
                        dist.rank, cfg.checkpoint.keep_last, extra={f"queue_rank{dist.rank}.pt": run.queue.state()})
        preempted = preempted or preempt.agreed(dist.device)  # one during the save: it is this step's, no new step
    if (step + 1 == cfg.optim.steps or stop) and not preempted:  # the last weights, for evaluation (a preempted
        # job's time is short: its evaluation exports from the checkpoint instead)
        export.save_final(run.engine, run.dir, step + 1, cfg, dist.rank)
    return metrics, stop, preempted


def _setup(cfg: RunConfig, ctx: RunContext, dist: distributed.DistInfo) -> _Run:
    """Build the engines, data and trackers of a run and restore its latest checkpoint (if any)."""
    quiet_third_party()
    G, world = cfg.algorithm.group_size, dist.world_size
    if cfg.optim.minibatch_prompts % world:
        raise ValueError(f"optim.minibatch_prompts {cfg.optim.minibatch_prompts} is not divisible by the "
                         f"{world} ranks; every rank needs the same number of prompt groups")
    local_groups = cfg.optim.batch_prompts // world
    per_mini = local_groups // cfg.optim.updates_per_batch
    seq_tokens = cfg.rollout.max_prompt_tokens + cfg.rollout.max_response_tokens
    micro_groups = cfg.memory.micro_groups(ctx.micro_groups, G, seq_tokens, per_mini)
    micro_batches = -(-per_mini // micro_groups)

    run_dir = RunDir(ctx.run_dir)
    run_dir.path.mkdir(parents=True, exist_ok=True)
    manifest = objective_manifest(cfg)
    if dist.is_main:
        atomic_write(run_dir.objective, json.dumps(manifest, indent=1))
    # The data before any engine: a missing file costs seconds, not a model load on every GPU of the job.
    val_examples = load_examples(cfg.data, cfg.data.val_split) if cfg.data.val_every else []
    val_examples = val_examples[: cfg.data.val_size] if cfg.data.val_size else val_examples
    train_examples = load_examples(cfg.data, "train")
    path = model_path(cfg)
    engine, reference, tokenizer = build_engine(cfg, path, dist, micro_batches)
    rollout = build_rollout(cfg, engine, tokenizer, path, dist)
    sampler = BatchSampler(cfg, tokenizer, rollout, train_examples, dist, local_groups, micro_groups * G)
    queue = RolloutQueue(cfg.rollout.async_level)
    # The detector's noise allowance for held-out accuracy needs the size of the set it is measured on.
    monitor = CollapseMonitor(CollapseConfig.from_dict({"accuracy_samples": len(val_examples), **(cfg.collapse or {})}))
    state = checkpoint.restore(engine, run_dir, dist.rank) or {"step": 0}
    monitor.load(state.get("collapse", {}))
    queue.load(checkpoint.load_extra(run_dir, f"queue_rank{dist.rank}.pt", state.get("tag")) or [])
    tracker = _open_tracker(cfg, ctx, dist, manifest)
    return _Run(run_dir, ctx.run_key, engine, reference, tokenizer, rollout, sampler, queue, monitor, tracker,
                _LoggedSteps(run_dir), val_examples, micro_groups, state["step"])


def _open_tracker(cfg: RunConfig, ctx: RunContext, dist: distributed.DistInfo,
                  manifest: dict) -> MlflowTracker | NullTracker:
    """The run named as `orchestrate status` names the cell, with every paper axis as an `axis/` param; its
    sweep's parent gets the sweep (record/tracking/run_names.py)."""
    if not dist.is_main:
        return NullTracker()
    tracker = MlflowTracker(ctx.run_dir, check_first_metrics=True)  # a resumed job may resend its first step
    uri = cfg.tracking.tracking_uri or default_tracking_uri()
    config, sweep = cfg.to_dict(), read_manifest(ctx.run_dir.parent) if ctx.sweep_id else {}
    tracker.open_run(ctx.run_key, cfg.tracking.experiment or "comedy", uri,
                     {**flatten_params(config), **axis_params(config, ctx.axes)},
                     {"objective/target": manifest["kl_target"],
                      "objective/fingerprint": manifest["fingerprint"]["hash"]}, parent_run_key=ctx.parent_run_key,
                     sweep_id=ctx.sweep_id, run_name=cell_run_name(sweep, ctx.axes, ctx.run_key),
                     parent_tags=sweep_tags(sweep) if ctx.parent_run_key else None,
                     parent_params=parent_params(sweep) if ctx.parent_run_key else None,
                     experiment_tags=experiment_tags(ctx.sweep_id, sweep, config) if ctx.sweep_id else None)
    tracker.log_dict(cfg.to_dict(), "config.json")
    tracker.log_dict(manifest, "objective.json")
    return tracker


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


def _rollout_metrics(sampled: Sampled, rewards: list[float], device: torch.device) -> tuple[dict[str, float], float]:
    """The batch's reward, accuracy, length and truncation over every rank; and its generated token count."""
    n = len(sampled.response_ids)
    lengths = sum(len(r) for r in sampled.response_ids)
    reward = torch.tensor(rewards)
    tot = distributed.all_reduce_sum([float(reward.sum()), float((reward >= 1.0).sum()), float(lengths),
                                      float(sum(sampled.truncated)), n], device)
    return {TRAIN_REWARD_MEAN: tot[0] / tot[4], TRAIN_ACCURACY: tot[1] / tot[4],
            TRAIN_RESPONSE_LENGTH: tot[2] / tot[4], TRAIN_TRUNCATION_RATE: tot[3] / tot[4]}, tot[2]


def _log(run: _Run, metrics: dict[str, float], step: int, is_main: bool) -> None:
    """Log the step's metrics once: a step re-trained after a resume from an older checkpoint is not sent again."""
    if is_main and step > run.logged.last:
        run.tracker.log_metrics(metrics, step)
        run.logged.mark(step, metrics)
