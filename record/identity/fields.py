"""Every field of the run config, classified by what it changes (docs/orchestration.md "Identity").

- COMPUTES: changes the trained weights or the logged training curve. Enters the training identity (the run_key):
  a change makes a new cell, trained beside the old one.
- EVALUATES: changes only the final evaluation. Enters the evaluation's identity (record/identity/run_key.py `eval_id`):
  a change re-evaluates the trained cells and keeps their earlier evaluations.
- MACHINERY: where things live and how memory, checkpoints and the scheduler are handled. Enters neither: a change
  submits nothing for a finished cell and applies to jobs that start from then on (a running one at its next
  resume, since every start reads config.yaml again).

A field missing here fails tests/unit/test_fields.py, so a new field cannot slip into (or out of) an identity
without a decision. Where the class is a judgement, the reason is beside it.
"""

from __future__ import annotations

COMPUTES, EVALUATES, MACHINERY = "computes", "evaluates", "machinery"

FIELDS: dict[str, str] = {
    # The weights are named by what they are, not where they live: identity uses record/identity/weights.py's model
    # identity in place of this path (a hub id and the directory it was fetched into are one model).
    "model.name_or_path": MACHINERY,
    "model.params_b": MACHINERY,  # picks the Slurm resources only
    "model.chat_template": COMPUTES,
    "model.dtype": COMPUTES,
    "data.dataset": COMPUTES,
    # Where the files live; what they hold is the dataset's (data.dataset and data.val_split name it).
    "data.train_path": MACHINERY,
    "data.val_path": MACHINERY,
    "data.val_split": COMPUTES,
    # Judgement: validation does not touch the training's random stream, but its points are part of the logged
    # training curve (val/pass_at_1) that status, the report and the collapse detector read.
    "data.val_every": COMPUTES,
    "data.val_size": COMPUTES,
    "data.grader": COMPUTES,  # the training reward's grader: another grader rewards other rollouts
    "rollout.engine": COMPUTES,  # another sampler draws other rollouts
    "rollout.temperature": COMPUTES,
    "rollout.top_p": COMPUTES,
    "rollout.top_k": COMPUTES,
    "rollout.max_response_tokens": COMPUTES,
    "rollout.max_prompt_tokens": COMPUTES,
    "rollout.async_level": COMPUTES,
    "rollout.tensor_parallel": MACHINERY,  # how vLLM spreads one engine over GPUs
    "rollout.gpu_memory_utilization": MACHINERY,  # the KV cache's share: how many sequences run at once
    "rollout.sleep_mode": MACHINERY,  # whether vLLM releases its memory while training
    "optim.lr": COMPUTES,
    "optim.steps": COMPUTES,
    "optim.batch_prompts": COMPUTES,
    "optim.minibatch_prompts": COMPUTES,
    "optim.grad_clip": COMPUTES,
    "optim.weight_decay": COMPUTES,
    "optim.warmup_steps": COMPUTES,
    # Exact resume is proven (tests/integration/test_resume.py), so where the checkpoints fall changes nothing
    # trained; tests/integration/test_identity_machinery.py shows the logged metrics equal under both.
    "checkpoint.every": MACHINERY,
    "checkpoint.keep_last": MACHINERY,
    "eval.tasks": EVALUATES,
    "eval.k": EVALUATES,
    "eval.temperature": EVALUATES,
    "eval.top_p": EVALUATES,
    "eval.max_tokens": EVALUATES,
    "eval.chat_template": EVALUATES,
    "eval.seeds": EVALUATES,
    "eval.backend": EVALUATES,
    "eval.limit": EVALUATES,  # the first N problems of each task (issue 23's smoke runs)
    "eval.grader": EVALUATES,  # the grader of the tasks with a math answer
    # How an evaluation is cut into lm-eval calls: set, each HF sample is seeded on its own (the same samples whatever
    # the shards); unset, or on vLLM, another cut draws other samples of the same distribution, equally valid.
    "eval.shard_samples": MACHINERY,
    "tracking.tracking_uri": MACHINERY,  # a resumed run keeps logging to the store it started in
    "tracking.experiment": MACHINERY,
    "kl.estimator": COMPUTES,
    "kl.placement": COMPUTES,
    "kl.beta": COMPUTES,
    "kl.beta_reward": COMPUTES,
    "kl.beta_loss": COMPUTES,
    "kl.loss_form": COMPUTES,
    "kl.credit": COMPUTES,
    "kl.clamp": COMPUTES,
    "algorithm.advantage": COMPUTES,
    "algorithm.aggregation": COMPUTES,
    "algorithm.group_size": COMPUTES,
    "algorithm.clip_eps": COMPUTES,
    "algorithm.norm_length": COMPUTES,
    "algorithm.grpo_eps": COMPUTES,
    # How memory is spent, not what is computed: the same updates in other chunks and micro-batches (equal within
    # floating-point reordering; trainer/ tests state the tolerances).
    "memory.gradient_checkpointing": MACHINERY,
    "memory.micro_batch_tokens": MACHINERY,
    "memory.logprob_chunk_tokens": MACHINERY,
    "memory.reference": MACHINERY,
    "memory.shared_prompt": MACHINERY,  # each group's prompt once in the log-prob passes: the same log-probs
    # Not machinery: skipping the reference drops the train/kl_k* curves and the collapse detector's KL rule from the
    # logged training curve of a beta-0 or placement-none cell.
    "memory.skip_unused_reference": COMPUTES,
    "seed": COMPUTES,
    # Judgement: the detector's thresholds and on_collapse decide whether a run stops early (on_collapse: stop),
    # which changes what is trained; one mapping, classified whole.
    "collapse": COMPUTES,
}


# Fields added after cells were keyed, each with the value every earlier config had: left out of its identity while
# it holds that value, so those cells keep their keys (a config.yaml without the field, and one with it at this
# value, are one cell); any other value enters the identity as every field does.
OMITTED_AT: dict[str, object] = {
    "data.grader": "ours",
    "eval.grader": "ours",
}


def of(path: str) -> str:
    """The class of a dotted field path; KeyError for a field nobody classified (the unit test names it)."""
    return FIELDS[path]


def paths(kind: str) -> tuple[str, ...]:
    """Every field path of one class, in the table's order."""
    return tuple(p for p, k in FIELDS.items() if k == kind)
