"""What a training run shows while it trains: a live bar on a terminal, a plain line now and then in a job log;
and the third-party noise that carries nothing for the user, quieted by name.

`StepProgress(first, total)` is called once per step with the step's namespaced metrics (trainer/train.py `_log`):
    terminal:  a rich bar  `step 3/8 ━━━━━━━━━━  reward 0.531  kl_k1 0.0123  2.4 s/step  0:00:07`
    job log:   `[train] step 3/8 reward 0.5312 kl_k1 0.01234 2.41 s/step (7s)` at the first step, every `every_s`
               seconds (or `every_steps` steps) and at the last, so a log stays short and still shows life.
"""

from __future__ import annotations

import logging
import sys
import time
import warnings

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from record.metric_keys import PERF_STEP_TIME_S, TRAIN_KL_K1, TRAIN_REWARD_MEAN

REWARD, KL, STEP_TIME = TRAIN_REWARD_MEAN, TRAIN_KL_K1, PERF_STEP_TIME_S


def quiet_third_party() -> None:
    """Silence, precisely, what every job printed and no user can act on (issue 16 lists them):
    - four FutureWarnings a job from torch.distributed: DeepSpeed ZeRO-3 calls `all_gather_into_tensor` and
      `reduce_scatter_tensor`, deprecated in torch 2.13; the fix is DeepSpeed's, our pin keeps it; and two from
      vLLM's kernel dispatcher touching `torch.distributed.reduce_op` (vLLM's to fix);
    - transformers' "Loading weights" bars: one line of carriage returns per model load in a log, for a load
      that takes milliseconds (the tiny model) or is timed in the job's own lines anyway;
    - MLflow creating and migrating its SQLite tables (mlflow.store.db.utils, alembic) on a run's first use.
    Other warnings, and these loggers' warnings and errors, still show."""
    deprecated = r"`torch\.distributed\.(all_gather_into_tensor|reduce_scatter_tensor|reduce_op)` is deprecated"
    warnings.filterwarnings("ignore", message=deprecated, category=FutureWarning)
    # Not at the top: ~0.8 s, and orchestrator/cluster/entry.py imports this module on the login node.
    from transformers.utils import logging as hf_logging  # noqa: PLC0415

    hf_logging.disable_progress_bar()
    for name in ("alembic", "mlflow.store.db.utils"):
        logging.getLogger(name).setLevel(logging.WARNING)


def fields(metrics: dict) -> str:
    """The step's reward, KL (k1: what every placement logs) and time, as far as `metrics` has them."""
    parts = []
    if REWARD in metrics:
        parts.append(f"reward {metrics[REWARD]:.4f}")
    if KL in metrics:
        parts.append(f"kl_k1 {metrics[KL]:.4g}")
    if STEP_TIME in metrics:
        parts.append(f"{metrics[STEP_TIME]:.2f} s/step")
    return " ".join(parts)


def summary(step: int, total: int, metrics: dict, elapsed: float) -> str:
    """One plain line for a log."""
    return f"[train] step {step}/{total} {fields(metrics)} ({elapsed:.0f}s)"


class StepProgress:
    """Shows a run's steps: a rich bar when stdout is a terminal, else a line every `every_s` seconds or
    `every_steps` steps (and at the first and last step). `first` is the step a resumed run starts from;
    `enabled=False` (ranks other than the first) shows nothing."""

    def __init__(self, first: int, total: int, interactive: bool | None = None, every_s: float = 30.0,
                 every_steps: int = 50, out=None, enabled: bool = True):
        self.total, self.every_s, self.every_steps, self.enabled = total, every_s, every_steps, enabled
        self.out = out or sys.stdout
        self.start = self.last_line = time.monotonic()
        self.printed, self.bar = False, None
        if enabled and (self.out.isatty() if interactive is None else interactive):
            self.bar = Progress(TextColumn("step"), MofNCompleteColumn(), BarColumn(), TextColumn("{task.fields[m]}"),
                                TimeElapsedColumn(), console=Console(file=self.out), transient=False)
            self.task = self.bar.add_task("train", total=total, completed=first, m="")
            self.bar.start()

    def __call__(self, step: int, metrics: dict) -> None:
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.update(self.task, completed=step, m=fields(metrics))
            return
        now = time.monotonic()
        due = now - self.last_line >= self.every_s or step % self.every_steps == 0
        if due or step == self.total or not self.printed:
            self.last_line, self.printed = now, True
            print(summary(step, self.total, metrics, now - self.start), file=self.out, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None
