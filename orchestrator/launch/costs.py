"""What a sweep will cost, said before it is submitted (issue 31, item 2): GPU-hours at the time limits and with the
retry bounds in force, and the bytes its checkpoints and exports take against the free space where they go. Pure:
the command measures the free space (`free_bytes`) and prints the lines.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from orchestrator.launch.plan import Plan
from orchestrator.sweep.expand import Sweep
from trainer.analysis.model_shapes import shape_of

# A ZeRO-3 checkpoint of a bf16 run: the bf16 weights (2 bytes a parameter), the fp32 master copy (4) and Adam's two
# moments (4 + 4), over every rank's shards: 14 bytes a parameter (7.6B parameters: about 107 GB). An fp32 run keeps
# no separate master copy: 4 + 8. The final export for the evaluation is in the training dtype (trainer/run/export.py).
CHECKPOINT_BYTES_PER_PARAM = {"bf16": 14, "fp32": 12, "auto": 14}
EXPORT_BYTES_PER_PARAM = {"bf16": 2, "fp32": 4, "auto": 2}


@dataclass(frozen=True)
class Costs:
    gpu_hours: float  # every job of the plan at its time limit
    gpu_hours_retries: float  # and every job resubmitted as often as the retry budget allows
    max_retries: int
    bytes_at_peak: int  # every cell's checkpoints at their peak and its export, all at once
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


def costs(sweep: Sweep, plan: Plan, max_retries: int, free_bytes: int | None) -> Costs:
    total, unknown = 0, 0
    known: dict = {}  # by model section: a local model's config.json read once, not once per cell
    for cell in sweep.cells:
        if cell.config.model not in known:
            known[cell.config.model] = params_of(cell.config)
        params = known[cell.config.model]
        if params is None:
            unknown += 1
            continue
        checkpoints, dtype = checkpoints_at_peak(cell.config.checkpoint.keep_last), cell.config.model.dtype
        total += params * (checkpoints * CHECKPOINT_BYTES_PER_PARAM[dtype] + EXPORT_BYTES_PER_PARAM[dtype])
    hours = plan.counts()["gpu_hours_max"]
    return Costs(hours, round(hours * (1 + max_retries), 1), max_retries, total, unknown,
                 Path(sweep.spec.output_root).absolute(), free_bytes)


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
    """What the dry run and a submission say of the costs."""
    unknown = f" ({c.unknown} cell(s) of a model whose size is not known here not counted)" if c.unknown else ""
    return [f"GPU-hours: at most {c.gpu_hours:g} with every job at its time limit; up to {c.gpu_hours_retries:g} "
            f"if every job is also resubmitted {c.max_retries} time(s) (--max-retries)",
            f"disk: {gigabytes(c.bytes_at_peak)} at the peak for the checkpoints (ZeRO-3, 14 bytes a parameter in "
            f"bf16, checkpoint.keep_last each) and the exports{unknown}; "
            f"{gigabytes(c.free_bytes)} free under {c.root}"]


def disk_problem(c: Costs) -> str | None:
    if c.fits:
        return None
    return (f"the sweep's checkpoints and exports need {gigabytes(c.bytes_at_peak)} at the peak and "
            f"{c.root} has {gigabytes(c.free_bytes)} free: lower checkpoint.keep_last, put sweep.output_root on a "
            f"larger filesystem, or split the sweep")
