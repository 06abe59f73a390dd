"""Every metric key and run tag the project logs, with its meaning; docs/metrics.md mirrors these dicts.

Keys are namespaced (`train/`, `perf/`, `val/`, `async/`, `eval/`) and never contain `@`, which MLflow refuses:
the paper's Pass@1 is `pass_at_1`, mean@32 is `mean_at_32`. A `<placeholder>` stands for a validation split, an
eval task, a sample count or a KL estimator; `metric_key` fills it in, `template_of` finds the entry a filled-in
key belongs to. A test checks that docs/metrics.md lists every key here.

The KL estimators are the trainer's registry (trainer/objective/estimators.py), which this layer may not import:
so one entry, `train/kl_<estimator>`, stands for all of them, and an estimator registered there is logged under
its own key with nothing added here. tests/unit/test_metrics_doc.py holds docs/metrics.md to the registry.
"""

from __future__ import annotations

import re

TRAIN_REWARD_MEAN = "train/reward_mean"
TRAIN_ACCURACY = "train/accuracy"
TRAIN_KL_ESTIMATOR = "train/kl_<estimator>"
TRAIN_KL_K1 = "train/kl_k1"  # the paper's K1, which the collapse rules and the progress line follow
TRAIN_ENTROPY = "train/entropy"
TRAIN_RESPONSE_LENGTH = "train/response_length"
TRAIN_TRUNCATION_RATE = "train/truncation_rate"
TRAIN_GRAD_NORM = "train/grad_norm"
TRAIN_CLIP_FRACTION = "train/clip_fraction"
TRAIN_RATIO_MEAN, TRAIN_RATIO_MAX, TRAIN_RATIO_MIN = "train/ratio_mean", "train/ratio_max", "train/ratio_min"
TRAIN_KL_CLAMPED_FRACTION = "train/kl_clamped_fraction"
TRAIN_LOSS, TRAIN_PG_LOSS, TRAIN_KL_LOSS = "train/loss", "train/pg_loss", "train/kl_loss"
PERF_STEP_TIME_S = "perf/step_time_s"
PERF_TOKENS_PER_S = "perf/tokens_per_s"
PERF_WEIGHT_SYNC_S = "perf/weight_sync_s"
VAL_PASS_AT_1 = "val/pass_at_1"
VAL_SPLIT_PASS_AT_1 = "val/<split>/pass_at_1"
ASYNC_LAG = "async/lag"
EVAL_MEAN_AT_32 = "eval/<task>/mean_at_32"
EVAL_MEAN_AT_K = "eval/<task>/mean_at_<k>"
TRAIN_ADVANTAGE_MEAN = "train/advantage_mean"
EVAL_PASS_AT_K = "eval/<task>/pass_at_<k>"
EVAL_MAJ_AT_K = "eval/<task>/maj_at_<k>"

METRICS: dict[str, str] = {
    TRAIN_REWARD_MEAN: "mean task reward of the batch's responses, before any KL shaping",
    TRAIN_ACCURACY: "fraction of the batch's responses graded correct (equals reward_mean for 0/1 rewards)",
    TRAIN_KL_ESTIMATOR: "sequence-level estimate of the reverse KL[pi_theta, pi_ref] by one registered estimator "
                        "(e.g. train/kl_k1): summed over a response's tokens, averaged over the batch's responses "
                        "(the policy's own samples); every estimator is logged whichever one is optimised",
    TRAIN_ENTROPY: "mean per-token entropy of the policy over response tokens",
    TRAIN_RESPONSE_LENGTH: "mean response length in tokens",
    TRAIN_TRUNCATION_RATE: "fraction of responses cut at the maximum response length (no end of sequence)",
    TRAIN_GRAD_NORM: "global L2 norm of the gradient before clipping",
    TRAIN_CLIP_FRACTION: "fraction of response tokens whose PPO ratio was clipped (0 on-policy)",
    TRAIN_RATIO_MEAN: "mean importance ratio pi_theta / pi_old over response tokens (1 on-policy)",
    TRAIN_RATIO_MAX: "largest importance ratio pi_theta / pi_old over response tokens",
    TRAIN_RATIO_MIN: "smallest importance ratio pi_theta / pi_old over response tokens",
    TRAIN_KL_CLAMPED_FRACTION: "fraction of response tokens whose log-ratio hit kl.clamp (0 without a clamp)",
    TRAIN_LOSS: "the loss that was backpropagated: pg_loss + kl_loss",
    TRAIN_PG_LOSS: "policy-gradient part of the loss (advantages include the KL penalty when it is in the reward)",
    TRAIN_KL_LOSS: "KL part of the loss, beta x the estimator (0 unless the placement includes the loss)",
    PERF_STEP_TIME_S: "wall-clock seconds of one training step, rollout to optimiser step",
    PERF_TOKENS_PER_S: "response tokens generated and trained on per second of step time",
    PERF_WEIGHT_SYNC_S: "seconds to load the updated weights into the rollout engine (vLLM; 0 for HF, which samples "
                        "from the trained parameters)",
    VAL_PASS_AT_1: "Pass@1 on the validation set during training (the paper: MATH test): mean correctness "
                   "of one sample per problem",
    VAL_SPLIT_PASS_AT_1: "Pass@1 on one named validation split, e.g. val/math500/pass_at_1",
    ASYNC_LAG: "how many policy versions behind the learner the step's rollouts were generated (0 on-policy)",
    EVAL_MEAN_AT_32: "final evaluation: mean accuracy over 32 samples per problem (the paper's mean@32)",
    EVAL_MEAN_AT_K: "final evaluation with k samples per problem (e.g. the smoke sweep's k=4): mean accuracy",
    TRAIN_ADVANTAGE_MEAN: "mean advantage over the batch's response tokens (0 for RLOO up to the KL in the reward)",
    EVAL_PASS_AT_K: "final evaluation: fraction of problems with a correct answer among k samples",
    EVAL_MAJ_AT_K: "final evaluation: accuracy of the majority-vote answer over k samples",
}

TAG_COLLAPSE_VERDICT, TAG_COLLAPSE_STEP, TAG_COLLAPSE_REASON = "collapse/verdict", "collapse/step", "collapse/reason"

TAGS: dict[str, str] = {
    "run_key": "hash of the resolved cell; finds the cell's run when a job reopens it (never a timestamp)",
    "sweep_id": "the sweep the cell belongs to; the sweep's parent run carries it too",
    "mlflow.parentRunId": "the sweep's parent run, set by hand because every cell runs in its own job",
    "mlflow.experimentKind": "experiment tag custom_model_development: the experiment is model training",
    TAG_COLLAPSE_VERDICT: "stable, unstable or collapsed (trainer/run/collapse.py)",
    TAG_COLLAPSE_STEP: "step where the verdict first held; empty when stable",
    TAG_COLLAPSE_REASON: "the rule that fired, in words",
}

_PLACEHOLDER = re.compile(r"<(\w+)>")


def metric_key(template: str, **fields: object) -> str:
    """metric_key(EVAL_PASS_AT_K, task="math500", k=8) -> 'eval/math500/pass_at_8'."""
    if template not in METRICS:
        raise KeyError(f"unknown metric {template!r}; add it to record/metric_keys.py and docs/metrics.md")
    missing = [name for name in _PLACEHOLDER.findall(template) if name not in fields]
    if missing:
        raise KeyError(f"metric {template!r} needs {', '.join(missing)}")
    return _PLACEHOLDER.sub(lambda m: str(fields[m.group(1)]), template)


def eval_metric_keys(task: str, k: int) -> dict[str, str]:
    """lm-eval metric name -> the MLflow key it is logged under (EVAL_MEAN_AT_K and its kin, filled in).

    mean@k is `eval/<task>/mean_at_<k>` (the paper's k = 32 gives `eval/<task>/mean_at_32`).
    """
    keys = {"acc": metric_key(EVAL_MEAN_AT_K, task=task, k=k), "pass_at_1": metric_key(EVAL_PASS_AT_K, task=task, k=1)}
    if k > 1:
        keys.update({"pass_at_n": metric_key(EVAL_PASS_AT_K, task=task, k=k),
                     "maj_at_n": metric_key(EVAL_MAJ_AT_K, task=task, k=k)})
    return keys


def _pattern(template: str) -> re.Pattern:
    """The keys a template stands for: each `<placeholder>` one path segment's worth of characters, at least one."""
    pieces = _PLACEHOLDER.split(template)  # literal, name, literal, name, ..., literal
    return re.compile("".join(re.escape(piece) if i % 2 == 0 else f"(?P<{piece}>[^/]+)"
                              for i, piece in enumerate(pieces)))


_PATTERNS = {template: _pattern(template) for template in METRICS if _PLACEHOLDER.search(template)}


def template_of(key: str) -> str | None:
    """The METRICS entry a logged key is or fills in (train/kl_k3 -> train/kl_<estimator>); None for a key the
    registry does not know."""
    if key in METRICS:
        return key
    return next((template for template, pattern in _PATTERNS.items() if pattern.fullmatch(key)), None)


# A training step's own metrics by their short name (trainer/batch.py and trainer/objective/loss.py say `kl_k1`,
# `grad_norm`, ...): one namespace each, so the short name finds the one key. Of the templates, only the
# estimators' `kl_<estimator>` is a step metric.
_STEP_KEYS = {key.split("/", 1)[1]: key for key in METRICS
              if key.split("/", 1)[0] in ("train", "perf") and not _PLACEHOLDER.search(key)}
_STEP_ESTIMATOR = _pattern(TRAIN_KL_ESTIMATOR.split("/", 1)[1])


def step_key(name: str) -> str:
    """step_key("kl_k1") -> 'train/kl_k1', step_key("grad_norm") -> 'train/grad_norm'; KeyError for a metric not in
    the registry (add it here and to docs/metrics.md). `kl_<name>` is an estimator's, whatever its name: the
    estimators' registry is the trainer's (trainer/objective/estimators.py)."""
    if name in _STEP_KEYS:
        return _STEP_KEYS[name]
    if match := _STEP_ESTIMATOR.fullmatch(name):
        return metric_key(TRAIN_KL_ESTIMATOR, **match.groupdict())
    raise KeyError(f"unknown step metric {name!r}; add it to record/metric_keys.py METRICS and docs/metrics.md")
