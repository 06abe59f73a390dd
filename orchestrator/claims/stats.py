"""The statistics a claim is tested with, as functions of each configuration's mean score on each task.

A statistic takes `means`: task -> array [..., config] (the mean over seeds and problems of each configuration; any
leading axes are bootstrap replicates) and returns an array [...]. The bootstrap in orchestrator/claims/intervals.py
feeds it the observed means and the resampled ones alike, so every statistic here is vectorised over those axes.

- difference: mean_A - mean_B on one task (the paper's Figs. 5-6 read as "A beats B on task t");
- relative improvement: (mean_A - mean_B) / mean_B (Observation 3's numbers, one task);
- group relative improvement: the average over a group of tasks of each task's relative improvement (Observation
  3's "average relative improvement across the three MMLU subjects"): every task counts once, whatever its problem
  count;
- group contrast: one group's relative improvement minus another's (Observation 3's contrast: "the gains are more
  pronounced in out-of-domain tasks for Qwen-2.5-7B", and in-domain for Llama-3.1-8B-Instruct), from one
  resampling of both groups' problems, so its interval is that of the difference, not two intervals side by side;
- slope: the least-squares slope of the mean score (averaged over the given tasks, each task once) against x, one
  point per configuration (x = beta or log beta: "lower beta is better", Figs. 4-6).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

Means = Mapping[str, np.ndarray]  # task -> [..., config]


@dataclass(frozen=True)
class Statistic:
    """A named function of the configurations' means; `tasks` and `configs` are what it reads (checked against the
    data before any resampling)."""

    name: str
    tasks: tuple[str, ...]
    configs: tuple[int, ...]
    fn: Callable[[Means], np.ndarray]

    def __call__(self, means: Means) -> np.ndarray:
        return self.fn(means)


def difference(task: str, a: int, b: int) -> Statistic:
    """mean_A - mean_B on `task` (configurations by index)."""
    return Statistic(f"{task}: [{a}] - [{b}]", (task,), (a, b), lambda m: m[task][..., a] - m[task][..., b])


def relative_improvement(task: str, a: int, b: int) -> Statistic:
    """(mean_A - mean_B) / mean_B on `task`: a ratio of means, not a mean of per-problem ratios (a problem B never
    solves would make those infinite)."""
    return Statistic(f"{task}: ([{a}] - [{b}]) / [{b}]", (task,), (a, b), lambda m: _relative(m[task], a, b))


def group_relative_improvement(tasks: Sequence[str], a: int, b: int) -> Statistic:
    """The mean over `tasks` of each task's (mean_A - mean_B) / mean_B."""
    tasks = tuple(tasks)
    if not tasks:
        raise ValueError("group_relative_improvement needs at least one task")

    def fn(m: Means) -> np.ndarray:
        return np.mean([_relative(m[t], a, b) for t in tasks], axis=0)

    return Statistic(f"mean over {', '.join(tasks)} of ([{a}] - [{b}]) / [{b}]", tasks, (a, b), fn)


def group_contrast(first: Sequence[str], second: Sequence[str], a: int, b: int) -> Statistic:
    """The group relative improvement over `first` minus that over `second`."""
    one, two = group_relative_improvement(first, a, b), group_relative_improvement(second, a, b)
    return Statistic(f"({one.name}) - ({two.name})", (*one.tasks, *two.tasks), (a, b), lambda m: one(m) - two(m))


def slope(tasks: Sequence[str], configs: Sequence[int], xs: Sequence[float]) -> Statistic:
    """The least-squares slope of the mean score against x, one point (x_i, mean of configs[i]) per configuration;
    the mean is averaged over `tasks`, each task once."""
    tasks, configs = tuple(tasks), tuple(configs)
    x = np.asarray(xs, dtype=float)
    problems = []
    if len(configs) != len(x):
        problems.append(f"{len(configs)} configurations but {len(x)} x values")
    if len(x) < 2 or np.ptp(x) == 0:
        problems.append(f"a slope needs at least two distinct x values; got {list(x)}")
    if not tasks:
        problems.append("a slope needs at least one task")
    if problems:
        raise ValueError("bad slope: " + "; ".join(problems))
    # slope = sum(centred_i * y_i): one product over every bootstrap replicate at once, where scipy.stats.linregress
    # fits one 1-D series per call (2000 calls per interval)
    centred = (x - x.mean()) / np.sum((x - x.mean()) ** 2)

    def fn(m: Means) -> np.ndarray:
        y = np.mean([m[t][..., list(configs)] for t in tasks], axis=0)
        return y @ centred

    return Statistic(f"slope over {', '.join(tasks)} of [{', '.join(map(str, configs))}] against x = {list(xs)}",
                     tasks, configs, fn)


def _relative(m: np.ndarray, a: int, b: int) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):  # B's mean of 0: inf or nan, which the interval then shows
        return (m[..., a] - m[..., b]) / m[..., b]
