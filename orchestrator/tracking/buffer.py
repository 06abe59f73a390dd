"""What a sweep's jobs could not deliver to their tracking store, the login node's half (why two halves:
record/tracking/__init__.py; issue 31, item 3): each cell's undelivered events (buffered in its run directory,
record/tracking/buffer.py, by a job that could not reach the store) counted, and delivered from the login node by
`orchestrate tracking flush SWEEP`.

Delivery is the tracker's own replay (record/tracking/tracker.py `open_run`): in order, each metric point once, whatever
an earlier replay cut short already sent. A cell whose job is live is left alone: the buffer has one writer, its job,
which delivers it itself (record/tracking/buffer.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from orchestrator.launch.ledger import KINDS, LIVE, latest
from orchestrator.status.cells import undelivered
from record.rundir import RunDir
from record.tracking.key_rules import CLOSE_STATUSES
from record.tracking.tracker import MlflowTracker, default_tracking_uri


@dataclass(frozen=True)
class Flushed:
    run_key: str
    name: str
    before: int
    after: int  # still buffered (the store did not answer, or the job is live)
    why: str = ""

    def line(self) -> str:
        sent = f"{self.before - self.after} of {self.before} event(s) delivered"
        return f"{self.name} ({self.run_key}): {sent}" + (f"; {self.why}" if self.why else "")


def flush(records: dict[str, dict]) -> list[Flushed]:
    """Deliver every cell's buffered events into the run its config logs to; the cells that had some."""
    out = []
    for record in sorted(records.values(), key=lambda r: r["name"]):
        run_dir = Path(record["run_dir"])
        before = undelivered(run_dir)
        if not before:
            continue
        if any((j := latest(record, kind)) and j["state"] in LIVE for kind in KINDS):
            out.append(Flushed(record["run_key"], record["name"], before, before,
                               "its job is live and delivers them itself"))
            continue
        config = RunDir(run_dir).read_config() or {}
        tracking = config.get("tracking") or {}
        tracker = MlflowTracker(run_dir, retry_after_s=0.0)
        # as the trainer opens it (trainer/train.py `_open_tracker`): the run tagged run_key, its config's store
        tracker.open_run(record["run_key"], tracking.get("experiment") or "comedy",
                         tracking.get("tracking_uri") or default_tracking_uri(), {}, {})
        before_status = tracker.status_before
        tracker.close(before_status if before_status in CLOSE_STATUSES else "FINISHED")
        after = undelivered(run_dir)
        out.append(Flushed(record["run_key"], record["name"], before, after,
                           "the store did not answer; run this again when it does" if after else ""))
    return out
