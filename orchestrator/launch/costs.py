"""What a sweep will cost, said before it is submitted (issue 31, item 2; issue 43, item 2): GPU-hours at the time
limits and with the retry bounds in force, and the bytes its checkpoints and exports take against the free space
where they go. Pure: the command measures the free space (`free_bytes`) and prints the lines.

The disk peak models the run. A cell holds its ZeRO-3 checkpoints (`checkpoints_at_peak` of them) from its training
until the sweep ends, unless the profile's `checkpoint_retention: final-export` frees them once its evaluation has
succeeded (the watcher does, orchestrator/watch/retention.py); its final export stays either way. Every training
array goes out at once, side by side, each throttled to `array_parallelism` tasks (`%N`), and each evaluation array
follows its training array task by task (`aftercorr`) under the same throttle. So, per training array of n cells:

    nothing freed (the worst case):  every cell's checkpoints + every export
    expected, final-export:          the checkpoints of min(n, 2 x array_parallelism) cells + every export

The 2 x array_parallelism: the tasks training, and as many trained cells whose evaluation runs. The assumptions:
an evaluation ends before the training that took its slot does (where the evaluation's time limit is longer than
the training's, evaluations may fall behind, and the array counts as nothing freed); every cell succeeds (a failed or
collapsed cell keeps its checkpoints); a cell holds its full checkpoints from its start (a training that has just
begun holds fewer); the watcher runs (with `--no-watcher` nothing is freed until one does); the arrays run at once
(a busy cluster runs fewer). Where one array's cells differ in size, the largest hold the checkpoints. Only the cells
the plan trains count: cells already trained sit on the disk already, and an evaluation alone writes no checkpoint.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from orchestrator.cluster.profile import RETENTION
from orchestrator.launch.plan import JobGroup, Plan
from orchestrator.sweep.expand import Sweep
from trainer.analysis.model_shapes import shape_of

# A ZeRO-3 checkpoint of a bf16 run: the bf16 weights (2 bytes a parameter), the fp32 master copy (4) and Adam's two
# moments (4 + 4), over every rank's shards: 14 bytes a parameter (7.6B parameters: about 107 GB). An fp32 run keeps
# no separate master copy: 4 + 8. The final export for the evaluation is in the training dtype (trainer/run/export.py).
CHECKPOINT_BYTES_PER_PARAM = {"bf16": 14, "fp32": 12, "auto": 14}
EXPORT_BYTES_PER_PARAM = {"bf16": 2, "fp32": 4, "auto": 2}
KEEP_ALL, FINAL_EXPORT = RETENTION
FLAG = "--ignore-disk-peak"  # orchestrate sweep: submit although the expected peak exceeds the free space


@dataclass(frozen=True)
class Costs:
    gpu_hours: float  # every job of the plan at its time limit
    gpu_hours_retries: float  # and every job resubmitted as often as the retry budget allows
    max_retries: int
    bytes_at_peak: int  # expected: the checkpoints of the cells that hold them at once, and every export
    bytes_nothing_freed: int  # the worst case: every trained cell's checkpoints and export at once
    trained: int  # cells the plan trains whose size is known
    holding: int  # of them, the cells whose checkpoints the expected peak counts
    behind: int  # cells counted as holding because their evaluation's time limit exceeds their training's
    retention: str  # the profile's checkpoint_retention
    parallelism: int  # the profile's array_parallelism
    unknown: int  # cells whose model size is not known here (not counted)
    root: Path
    free_bytes: int | None  # on output_root's filesystem; None where it cannot be read

    @property
    def fits(self) -> bool:
        return self.free_bytes is None or self.bytes_at_peak <= self.free_bytes


def params_of(config) -> int | None:
    shape = shape_of(config.model.name_or_path)
    if shape is not None:
        return shape.params
    return int(config.model.params_b * 1e9) if config.model.params_b else None


def checkpoints_at_peak(keep_last: int) -> int:
    """trainer/run/checkpoint.py prunes before it saves: keep_last at the peak, and two with keep_last 1 (one complete
    checkpoint always stays while the next is written)."""
    return max(keep_last, 2)


def holding(cells: int, parallelism: int, frees: bool) -> int:
    """How many of a training array's `cells` hold their checkpoints at once: all of them unless a cell's are freed
    after its evaluation; then the `parallelism` training and as many evaluating (module docstring)."""
    return min(cells, 2 * parallelism) if frees else cells


def costs(sweep: Sweep, plan: Plan, max_retries: int, free_bytes: int | None) -> Costs:
    known: dict = {}  # by model section: a local model's config.json read once, not once per cell
    slow = {e.after for e in plan.eval if e.after and e.resources.time_min > _train(plan, e.after).resources.time_min}
    peak = worst = trained = held = behind = unknown = 0
    for group in plan.train:
        checkpoints, exports = [], 0
        for index in group.cells:
            config = sweep.cells[index].config
            if config.model not in known:
                known[config.model] = params_of(config)
            params, dtype = known[config.model], config.model.dtype
            if params is None:
                unknown += 1
                continue
            checkpoints.append(params * checkpoints_at_peak(config.checkpoint.keep_last)
                               * CHECKPOINT_BYTES_PER_PARAM[dtype])
            exports += params * EXPORT_BYTES_PER_PARAM[dtype]
        frees = sweep.profile.checkpoint_retention == FINAL_EXPORT and group.name not in slow
        n = holding(len(checkpoints), plan.array_parallelism, frees)
        peak += sum(sorted(checkpoints, reverse=True)[:n]) + exports
        worst += sum(checkpoints) + exports
        trained, held = trained + len(checkpoints), held + n
        behind += len(checkpoints) if group.name in slow else 0
    hours = plan.counts()["gpu_hours_max"]
    return Costs(hours, round(hours * (1 + max_retries), 1), max_retries, peak, worst, trained, held,
                 behind if sweep.profile.checkpoint_retention == FINAL_EXPORT else 0,
                 sweep.profile.checkpoint_retention, plan.array_parallelism, unknown,
                 Path(sweep.spec.output_root).absolute(), free_bytes)


def _train(plan: Plan, name: str) -> JobGroup:
    return next(g for g in plan.train if g.name == name)


def free_space(root: Path) -> int | None:
    """Free bytes on the filesystem that will hold `root` (its nearest existing parent), or None."""
    path = Path(root).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def gigabytes(n: int | None) -> str:
    return "unknown" if n is None else f"{n / 1e9:,.1f} GB"


def lines(c: Costs) -> list[str]:
    """What the dry run and a submission say of the costs: the disk's expected peak with the worst case beside it."""
    unknown = f" ({c.unknown} cell(s) of a model whose size is not known here not counted)" if c.unknown else ""
    if c.retention == FINAL_EXPORT:
        why = (f"checkpoint_retention {FINAL_EXPORT} frees a cell's once its evaluation succeeds, and at most "
               f"2 x array_parallelism {c.parallelism} cells of a training array hold them at once: the training "
               f"and the evaluating")
        why += (f"; {c.behind} cell(s) whose evaluation's time limit exceeds their training's counted as never freed"
                if c.behind else "")
    else:
        why = f"checkpoint_retention {c.retention} frees none while the sweep runs"
    return [f"GPU-hours: at most {c.gpu_hours:g} with every job at its time limit; up to {c.gpu_hours_retries:g} "
            f"if every job is also resubmitted {c.max_retries} time(s) (--max-retries)",
            f"disk: {gigabytes(c.bytes_at_peak)} expected at the peak, {gigabytes(c.bytes_nothing_freed)} if "
            f"nothing is freed: the ZeRO-3 checkpoints (14 bytes a parameter in bf16, checkpoint.keep_last each) of "
            f"{c.holding} of the {c.trained} cell(s) trained ({why}) and every cell's export{unknown}; "
            f"{gigabytes(c.free_bytes)} free under {c.root}"]


def disk_problem(c: Costs) -> str | None:
    """The refusal, on the expected peak, with the knobs that lower it and the flag that submits anyway."""
    if c.fits:
        return None
    knobs = ([f"lower array_parallelism (now {c.parallelism}: sweep.slurm.overrides.array_parallelism)"]
             if c.retention == FINAL_EXPORT else
             [f"set checkpoint_retention: {FINAL_EXPORT} (sweep.slurm.overrides.checkpoint_retention) to free a "
              f"cell's checkpoints once it is evaluated"])
    knobs += ["lower checkpoint.keep_last", "put sweep.output_root on a larger filesystem", "split the sweep"]
    return (f"the sweep's checkpoints and exports need {gigabytes(c.bytes_at_peak)} at the expected peak "
            f"({gigabytes(c.bytes_nothing_freed)} if nothing is freed) and {c.root} has {gigabytes(c.free_bytes)} "
            f"free: {', '.join(knobs[:-1])} or {knobs[-1]}; or, if you know the filesystem has the room, submit "
            f"anyway with {FLAG}")
