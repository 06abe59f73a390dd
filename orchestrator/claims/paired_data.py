"""The claim intervals' input, checked before any resampling: every problem in one ValueError.

The shape asked for (orchestrator/claims/intervals.py): task -> [config, seed, problem], either one array or one
[seed, problem] array per configuration. Configurations are paired, so within a task every configuration has the
same seeds and problems; seeds are paired across tasks too (one training run per seed), so every task has the same
configurations and seeds; problem counts differ by task.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from orchestrator.claims.stats import Statistic


def check_inputs(outcomes: Mapping, statistics: Sequence[Statistic], level: float, methods: Sequence[str],
                 n_boot: int, known_methods: Mapping[str, str]) -> dict[str, np.ndarray]:
    """The outcomes as float arrays [config, seed, problem], or a ValueError listing every problem found."""
    problems: list[str] = []
    data = _arrays(outcomes, problems)
    if not 0 < level < 1:
        problems.append(f"level must lie strictly between 0 and 1 (0.95 for 95%); got {level}")
    if not isinstance(n_boot, (int, np.integer)) or n_boot < 1:
        problems.append(f"n_boot must be a positive integer; got {n_boot!r}")
    unknown = [m for m in methods if m not in known_methods]
    if unknown or not methods:
        problems.append(f"unknown method(s) {unknown or '(none given)'}; valid: {', '.join(known_methods)}")
    if not statistics:
        problems.append("no statistics to compute")
    shapes = {t: a.shape for t, a in data.items()}
    if shapes and len({(c, s) for c, s, _ in shapes.values()}) > 1:
        problems.append("tasks disagree on (configs, seeds), which are paired across tasks: " + ", ".join(
            f"{t} ({c}, {s})" for t, (c, s, _) in shapes.items()))
    if shapes:
        n_configs, n_seeds = min(s[0] for s in shapes.values()), min(s[1] for s in shapes.values())
        if n_seeds < 2 and "t-seeds" in methods:
            problems.append("method 't-seeds' needs at least two seeds; the data has one")
        for stat in statistics:
            missing = [t for t in stat.tasks if t not in data]
            if missing:
                problems.append(f"statistic {stat.name!r} names task(s) {missing} not in the data; "
                                f"tasks: {', '.join(data)}")
            outside = [c for c in stat.configs if not 0 <= c < n_configs]
            if outside:
                problems.append(f"statistic {stat.name!r} names configuration(s) {outside}; the data has "
                                f"{n_configs} (0 to {n_configs - 1})")
    if problems:
        raise ValueError("bad input for the claim intervals:\n  - " + "\n  - ".join(problems))
    return data


def _arrays(outcomes: Mapping, problems: list[str]) -> dict[str, np.ndarray]:
    """Each task's configurations stacked into [config, seed, problem]; a task with any problem is left out (and
    named in `problems`)."""
    if not isinstance(outcomes, Mapping) or not outcomes:
        problems.append("outcomes must be a non-empty mapping task -> [config, seed, problem] scores; got "
                        f"{type(outcomes).__name__} {'(empty)' if not outcomes else ''}".rstrip())
        return {}
    data = {}
    for task, configs in outcomes.items():
        try:
            arrays = [np.asarray(c, dtype=float) for c in configs]
        except (TypeError, ValueError) as error:
            problems.append(f"task {task!r}: not a list of [seed, problem] arrays ({error})")
            continue
        before = len(problems)
        if not arrays:
            problems.append(f"task {task!r}: no configurations")
        for i, a in enumerate(arrays):
            if a.ndim != 2:
                problems.append(f"task {task!r} config {i}: {a.ndim}-d, expected [seed, problem]")
            elif a.size == 0:
                problems.append(f"task {task!r} config {i}: empty ({a.shape[0]} seeds x {a.shape[1]} problems)")
            elif a.shape != arrays[0].shape:
                problems.append(f"task {task!r} config {i}: {a.shape[0]} seeds x {a.shape[1]} problems, but config "
                                f"0 has {arrays[0].shape[0]} x {arrays[0].shape[1]}: paired configurations share "
                                "seeds and problems")
            elif not np.isfinite(a).all():
                problems.append(f"task {task!r} config {i}: {int(np.sum(~np.isfinite(a)))} non-finite score(s)")
        if len(problems) == before:
            data[task] = np.stack(arrays)
    return data
