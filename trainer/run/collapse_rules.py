"""The collapse detector: metric history in, verdict out. Pure: the trainer feeds it step by step
(trainer/run/collapse.py `CollapseMonitor`), which writes its verdict for the orchestrator to read.

A history maps a metric key (docs/metrics.md) to its points `[(step, value), ...]`, as MLflow's metric history
gives them. The verdict is `stable`, `unstable` or `collapsed`, with the step where it first held and a reason a
person can read. Rules (thresholds in `CollapseConfig`):

- non-finite loss or grad norm                                -> collapsed at that step, at once
- validation accuracy below `drop_fraction` x its best so far (and further below it than the sampling noise)
  for `patience` evaluations in a row                         -> collapsed at the first of them
  (fewer in a row, at the end of the history, is `unstable`: it has not had the chance to recover yet)
- KL per token or mean response length above `factor` x its early value (median of the first `early_points`,
  KL's at least `kl_floor`)                                   -> unstable; for `blowup_patience` points in a row,
                                                                 collapsed
- validation accuracy swinging up and down by at least `swing_fraction` x its best, and by more than the sampling
  noise, `swings` reversals or more                           -> unstable (the paper's K1-in-loss, Figure 2)

Calibration (issue 15). KL grows from exactly 0 in every RL run (the policy starts as the reference), so a rule
relative to its early value alone calls every healthy run unstable (a 12-step smoke run: 0.005 -> 0.25 nats per
sequence). The logged KL is per sequence (`train/kl_k1`: summed over a response's tokens), so it scales with the
response length; the rule reads it per token (divided by the mean response length of the same step) against a
floor of 0.05 nats/token: a blow-up is then above 0.5 nats/token, where no healthy run went (the tiny study's 27
runs over 50 steps, K3 in the reward included: median 0.012, at most 0.13 nats/token; docs/results.md) and a
collapsed policy (Figures 3 and 4: accuracy to ~0, KL up by orders of magnitude) lies far above. Held-out
accuracy is a sample mean over `accuracy_samples` problems (the trainer sets the validation split's size): a swing
or a drop counts only beyond `noise_sigmas` standard errors of the difference of two such means, so the noise of
a 64-problem validation set is not an oscillation (on MATH's 5,000 problems the allowance is ~0.03 and
`swing_fraction` rules).

The worst finding wins; among equals, the earliest.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields

from record.errors import ConfigError, raise_if
from record.metric_keys import (
    TAG_COLLAPSE_REASON,
    TAG_COLLAPSE_STEP,
    TAG_COLLAPSE_VERDICT,
    TRAIN_GRAD_NORM,
    TRAIN_KL_K1,
    TRAIN_LOSS,
    TRAIN_RESPONSE_LENGTH,
    VAL_PASS_AT_1,
)

VERDICTS = ("stable", "unstable", "collapsed")  # in order of severity
ON_COLLAPSE = ("continue", "stop")
History = Mapping[str, Sequence[tuple[int, float]]]


@dataclass(frozen=True)
class CollapseConfig:
    """Thresholds of the collapse rules; checked on construction, every problem listed at once."""

    accuracy_key: str = VAL_PASS_AT_1
    drop_fraction: float = 0.5
    patience: int = 3
    # Below this best accuracy a fall is noise around zero, not a collapse.
    min_best: float = 0.05
    nonfinite_keys: tuple[str, ...] = (TRAIN_LOSS, TRAIN_GRAD_NORM)
    kl_key: str = TRAIN_KL_K1
    # Judge KL per token (kl_key / length_key at the same step): the logged KL is per sequence.
    kl_per_token: bool = True
    kl_factor: float = 10.0
    # KL is ~0 at step 0 (the policy starts as the reference); measure growth from at least this (nats/token).
    kl_floor: float = 0.05
    length_key: str = TRAIN_RESPONSE_LENGTH
    length_factor: float = 3.0
    early_points: int = 5
    blowup_patience: int = 5
    swing_fraction: float = 0.1
    swings: int = 3
    # Problems behind each accuracy point (0: unknown, no noise allowance) and the allowance in standard errors.
    accuracy_samples: int = 0
    noise_sigmas: float = 3.0
    on_collapse: str = "continue"

    def __post_init__(self) -> None:
        raise_if(self.problems("collapse"), "collapse")

    @classmethod
    def from_dict(cls, data: Mapping | None, path: str = "collapse") -> CollapseConfig:
        """From the run config's `collapse:` mapping (None or {} for the defaults); every problem at once."""
        data = dict(data or {})
        names = [f.name for f in fields(cls)]
        problems = [f"{path}.{k}: unknown key; valid: {', '.join(names)}" for k in data if k not in names]
        if isinstance(data.get("nonfinite_keys"), list):
            data["nonfinite_keys"] = tuple(data["nonfinite_keys"])
        try:
            config = cls(**{k: v for k, v in data.items() if k in names})
        except ConfigError as exc:
            problems += exc.problems
        raise_if(problems, path)
        return config

    def problems(self, path: str = "collapse") -> list[str]:
        p: list[str] = []
        for name in ("drop_fraction", "swing_fraction"):
            _number(p, f"{path}.{name}", getattr(self, name), "a float in (0, 1)", lambda v: 0 < v < 1)
        for name in ("min_best", "kl_floor", "noise_sigmas"):
            _number(p, f"{path}.{name}", getattr(self, name), "a float >= 0", lambda v: v >= 0)
        for name in ("kl_factor", "length_factor"):
            _number(p, f"{path}.{name}", getattr(self, name), "a float > 1", lambda v: v > 1)
        for name, least in (("patience", 1), ("early_points", 1), ("blowup_patience", 1), ("swings", 1),
                            ("accuracy_samples", 0)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                p.append(f"{path}.{name}: {value!r}; give an integer >= {least}")
        if not isinstance(self.kl_per_token, bool):
            p.append(f"{path}.kl_per_token: {self.kl_per_token!r}; give true or false")
        for name in ("accuracy_key", "kl_key", "length_key"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                p.append(f"{path}.{name}: {getattr(self, name)!r}; give a metric key (docs/metrics.md)")
        if not isinstance(self.nonfinite_keys, tuple) or not all(isinstance(k, str) for k in self.nonfinite_keys):
            p.append(f"{path}.nonfinite_keys: {self.nonfinite_keys!r}; give a tuple of metric keys")
        if self.on_collapse not in ON_COLLAPSE:
            p.append(f"{path}.on_collapse: unknown value {self.on_collapse!r}; valid: {', '.join(ON_COLLAPSE)}")
        return p


def _number(problems: list[str], path: str, value, want: str, ok) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or not ok(value):
        problems.append(f"{path}: {value!r}; give {want}")


@dataclass(frozen=True)
class CollapseVerdict:
    """`verdict` in VERDICTS; `step` where it first held (None when stable); `reason` for a person;
    `findings` every rule that fired, worst first."""

    verdict: str = "stable"
    step: int | None = None
    reason: str = "no rule fired"
    findings: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict:
        return {"verdict": self.verdict, "step": self.step, "reason": self.reason,
                "findings": list(self.findings)}

    def tags(self) -> dict[str, str]:
        """The `collapse/*` run tags (docs/metrics.md)."""
        return {TAG_COLLAPSE_VERDICT: self.verdict, TAG_COLLAPSE_STEP: "" if self.step is None else str(self.step),
                TAG_COLLAPSE_REASON: self.reason[:5000]}

    @classmethod
    def from_dict(cls, data: Mapping) -> CollapseVerdict:
        if data.get("verdict") not in VERDICTS or not (data.get("step") is None or isinstance(data["step"], int)):
            raise ValueError(f"not a collapse verdict: {dict(data)!r}")
        return cls(data["verdict"], data["step"], str(data.get("reason", "")), tuple(data.get("findings", ())))


def detect(history: History, config: CollapseConfig | None = None) -> CollapseVerdict:
    """Apply every rule to `history`; the worst finding (then the earliest) becomes the verdict.

    Points may come in any order; keys that are missing are skipped. Never raises on values: NaN and inf are
    findings for `nonfinite_keys`, count as "above" for the blow-up rules and are ignored for accuracy.
    """
    config = CollapseConfig() if config is None else config
    findings: list[tuple[int, int, str]] = []  # (severity, step, reason)
    for key in config.nonfinite_keys:
        bad = [(s, v) for s, v in _points(history, key) if not math.isfinite(v)]
        if bad:
            findings.append((2, bad[0][0], f"{key} is {bad[0][1]} at step {bad[0][0]}"))
    accuracy = [(s, v) for s, v in _points(history, config.accuracy_key) if math.isfinite(v)]
    findings += _accuracy_drop(accuracy, config) + _swings(accuracy, config)
    lengths = _points(history, config.length_key)
    kl, kl_name = _points(history, config.kl_key), config.kl_key
    if config.kl_per_token and lengths:
        kl, kl_name = _per_token(kl, lengths), f"{config.kl_key} per token"
    findings += _blowup(kl, kl_name, config.kl_factor, config.kl_floor, config)
    findings += _blowup(lengths, config.length_key, config.length_factor, 0.0, config)
    if not findings:
        return CollapseVerdict()
    findings.sort(key=lambda f: (-f[0], f[1]))
    severity, step, reason = findings[0]
    return CollapseVerdict(VERDICTS[severity], step, reason, tuple(r for _, _, r in findings))


def should_stop(verdict: CollapseVerdict, config: CollapseConfig) -> bool:
    """Whether the trainer should end the run now: only a collapse, and only with `on_collapse: stop`."""
    return verdict.verdict == "collapsed" and config.on_collapse == "stop"


def _points(history: History, key: str) -> list[tuple[int, float]]:
    out = []
    for point in history.get(key, ()):
        try:
            out.append((int(point[0]), float(point[1])))
        except (TypeError, ValueError, IndexError, OverflowError):
            continue  # a malformed point is no evidence either way
    return sorted(out, key=lambda p: p[0])


def _per_token(kl: list[tuple[int, float]], lengths: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """KL per sequence over the mean response length of the same step; steps without a positive length are left out."""
    length = dict(lengths)
    return [(s, v / length[s]) for s, v in kl if s in length and length[s] > 0]


def _noise(a: float, b: float, c: CollapseConfig) -> float:
    """`noise_sigmas` standard errors of the difference of two accuracies measured on `accuracy_samples` problems
    each (binomial, at their mean); 0 when the count is unknown."""
    if not c.accuracy_samples:
        return 0.0
    p = min(max((a + b) / 2, 0.0), 1.0)
    return c.noise_sigmas * math.sqrt(2 * p * (1 - p) / c.accuracy_samples)


def _accuracy_drop(points: list[tuple[int, float]], c: CollapseConfig) -> list[tuple[int, int, str]]:
    best, run_start, run_len, run_best = -math.inf, None, 0, 0.0
    for step, value in points:
        if best >= c.min_best and value < c.drop_fraction * best and best - value > _noise(best, value, c):
            if run_len == 0:
                run_start, run_best = step, best
            run_len += 1
            if run_len >= c.patience:
                return [(2, run_start, f"{c.accuracy_key} fell to {value:.3g} from a best of {run_best:.3g} "
                         f"at step {run_start} and stayed below {c.drop_fraction:g}x best for {run_len} "
                         f"evaluations")]
        else:
            run_len = 0
        best = max(best, value)
    if run_len:
        return [(1, run_start, f"{c.accuracy_key} fell below {c.drop_fraction:g}x its best ({run_best:.3g}) at "
                 f"step {run_start}; not recovered yet ({run_len} of {c.patience} evaluations)")]
    return []


def _swings(points: list[tuple[int, float]], c: CollapseConfig) -> list[tuple[int, int, str]]:
    best, last_sign, reversals = -math.inf, 0, 0
    for (_, prev), (step, value) in zip(points, points[1:]):
        best = max(best, prev)
        if best < c.min_best or abs(value - prev) < max(c.swing_fraction * best, _noise(prev, value, c)):
            continue
        sign = 1 if value > prev else -1
        if last_sign and sign != last_sign:
            reversals += 1
            if reversals >= c.swings:
                return [(1, step, f"{c.accuracy_key} oscillates: {reversals} reversals of at least "
                         f"{c.swing_fraction:g}x its best by step {step}")]
        last_sign = sign
    return []


def _blowup(points, key: str, factor: float, floor: float, c: CollapseConfig) -> list[tuple[int, int, str]]:
    early = [v for _, v in points[: c.early_points] if math.isfinite(v)]
    if len(points) <= c.early_points or not early:
        return []
    limit = factor * max(statistics.median(early), floor)
    first, run_start, run_len = None, None, 0
    for step, value in points[c.early_points:]:
        if value <= limit:  # False for NaN and inf: both count as blown up
            run_len = 0
            continue
        first = (step, value) if first is None else first
        run_start = step if run_len == 0 else run_start
        run_len += 1
        if run_len >= c.blowup_patience:
            return [(2, run_start, f"{key} above {factor:g}x its early value (limit {limit:.3g}) from step "
                     f"{run_start} for {run_len} points, {value:.3g} at step {step}")]
    if first is None:
        return []
    return [(1, first[0], f"{key} went above {factor:g}x its early value (limit {limit:.3g}) at step {first[0]}: "
             f"{first[1]:.3g}")]
