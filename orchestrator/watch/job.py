"""The sweep's watcher as a Slurm job of its own: `orchestrate sweep` starts it (one per sweep), so a sweep on Slurm
resubmits what infrastructure failures end with nobody keeping a login-node session open. It follows the sweep
from its own partition (the profile's `watcher`), hands over to a successor before its time limit, and ends once
the sweep is settled, saying so in its log and in `<sweep dir>/watcher.json` (orchestrator/status/watcher_info.py).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections import Counter
from pathlib import Path

from orchestrator.cluster.executor import SlurmBackend, load_options, submit_watcher, watcher_name
from orchestrator.cluster.limits import refused_by_limit
from orchestrator.cluster.profile import mem_param
from orchestrator.cluster.query import SlurmError
from orchestrator.launch.baseline_jobs import baselines_settled
from orchestrator.launch.ledger import Ledger, SweepBusy, cell_status, settled
from orchestrator.status import watcher_info as ws
from orchestrator.tracking.sweep import close_parent
from orchestrator.watch.watcher import Watcher
from record.errors import UserError
from record.files import read_json

DEFAULT_POLL_S = 60.0
DEFAULT_TIME_MIN = 120


class Superseded(SweepBusy):
    """watcher.json names another watcher job (this one's successor, or a newer one): this one ends, so that a
    watcher Slurm brought back (a requeue after a node failure) never makes two."""


def watch_job(sweep_dir: str, max_retries: int = 3, poll_s: float = DEFAULT_POLL_S,
              time_min: int = DEFAULT_TIME_MIN, params: dict | None = None) -> str:
    """The watcher's own Slurm job: follow the sweep until Slurm's warning signal (USR2) or a margin before its time
    limit (a quarter of it, at most 3 minutes), then submit its successor (`afterany` on itself: it starts once
    this one has ended and released the lock). SIGTERM (`scancel`, a node going down) stops it with no successor:
    a user's scancel is respected, and a job Slurm requeues comes back as itself. A watcher that watcher.json no
    longer names ends at its next poll. Returns "settled", "stopped", "superseded by <id>" or the successor's id."""
    started, ledger, margin_s = time.time(), Ledger(sweep_dir), min(180.0, time_min * 15.0)
    backend = SlurmBackend(Path(sweep_dir), load_options(sweep_dir, executor="slurm"))
    me = os.environ.get("SLURM_JOB_ID", "")
    warned: list[int] = []
    terminated: list[int] = []
    superseded: list[str] = []
    signal.signal(signal.SIGUSR2, lambda signum, frame: warned.append(signum))  # may come a minute early: hand over
    signal.signal(signal.SIGTERM, lambda signum, frame: terminated.append(signum))  # finish the poll, then stop
    print(f"watcher job {me} of {sweep_dir}: a poll every {poll_s:g} s, at most {max_retries} resubmissions per "
          f"cell; hands over to a successor before its {time_min} min limit; ends once the sweep is settled",
          flush=True)

    def stop() -> bool:
        return bool(warned or terminated or superseded) or time.time() > started + time_min * 60 - margin_s

    # The lock is held one poll at a time, so `orchestrate sweep` (a relaunch, --retry-failed) and `orchestrate
    # watch` can work on the sweep while this job follows it. A poll that went through is recorded for status.
    @contextlib.contextmanager
    def one_poll():
        with ledger.lock("orchestrate watch --as-job (one poll)", stale_s=max(600.0, 10 * poll_s)):
            named = (ws.read_info(Path(sweep_dir)) or {}).get("job_id")
            if me and named != me:  # read under the lock, where every watcher.json but a handover's is written
                superseded.append(named)
                raise Superseded(f"watcher.json names watcher job {named}, not this one ({me}): this one ends")
            yield
            ws.mark_poll(Path(sweep_dir), me, time.time())

    watcher = Watcher(ledger, backend, max_retries, log=lambda line: print(line, flush=True))
    while not stop():
        records = watcher.run(poll_s, stop=stop, guard=one_poll)
        if superseded or not watcher.settled(records):
            break
        if _close_settled(ledger, Path(sweep_dir), me):
            return "settled"
    if superseded:
        return f"superseded by {superseded[0]}"
    if terminated:
        print("stopped by SIGTERM (scancel, or the node going down): no successor; a job Slurm requeues comes "
              "back as itself", flush=True)
        return "stopped"
    successor = submit_as_job(Path(sweep_dir), ledger.records(), max_retries, poll_s, time_min, params,
                              dependency=f"afterany:{me}".rstrip(":"), by=f"watcher job {me} (handing over)")
    print(f"handed over to watcher job {successor}", flush=True)
    return successor


def _close_settled(ledger: Ledger, sweep_dir: Path, me: str) -> bool:
    """Close a settled sweep under the lock (its MLflow parent, watcher.json), unless a relaunch has added cells
    meanwhile or holds the lock; True when closed."""
    try:
        with ledger.lock("orchestrate watch --as-job (closing)", wait_s=60.0):
            records = ledger.records()
            if not (settled(records) and baselines_settled(sweep_dir)):
                return False
            try:
                print(close_parent(records), flush=True)
            except Exception as err:  # the MLflow parent is a summary: it never keeps the watcher running
                print(f"could not close the sweep's MLflow parent run: {err}", flush=True)
            why = "the sweep is settled: " + ", ".join(
                f"{n} {s}" for s, n in sorted(Counter(cell_status(r) for r in records.values()).items()))
            ws.mark_ended(sweep_dir, me, why, time.time())
            print(f"{why}; the watcher ends", flush=True)
            return True
    except SweepBusy as err:
        print(f"could not close the settled sweep yet: {err}", flush=True)
        return False


def submit_as_job(sweep_dir: Path, records: dict[str, dict], max_retries: int, poll_s: float, time_min: int,
                  params: dict | None = None, dependency: str | None = None, by: str = "orchestrate watch --as-job"
                  ) -> str:
    """Submit `watch_job` for this sweep with its code (the cells' snapshot in `records`, the ledger's, in memory
    when a launch has yet to save them), and record it in watcher.json. `params`: the profile's watcher parameters
    (submit.watcher_params); None: the ones the sweep's manifest gives."""
    records = [r for r in records.values() if r.get("params") and r.get("code")]
    if not records:
        raise UserError(f"{sweep_dir}: no submitted cells in its ledger; run `orchestrate sweep` first")
    params = {**(params or manifest_params(sweep_dir, records[0])), "time": time_min}
    options = {"max_retries": max_retries, "poll_s": poll_s, "time_min": time_min}
    job_id = submit_watcher(watch_job, sweep_dir, {**options, "params": params}, params, records[0]["code"],
                            dependency, signal_delay_s=int(min(90.0, time_min * 7.5)))
    ws.write_info(sweep_dir, {"job_id": job_id, "name": watcher_name(sweep_dir), "at": time.time(),
                              "after": dependency, "by": by, "params": params, "options": options})
    return job_id


def manifest_params(sweep_dir: Path, record: dict) -> dict:
    """The watcher parameters of the profile the sweep was launched with (manifest.json); a sweep launched before
    profiles had `watcher` gets its training jobs' partition, account and QOS."""
    profile = (read_json(Path(sweep_dir) / "manifest.json") or {}).get("profile") or {}
    base = record["params"]["train"]
    params = {k: base[k] for k in ("partition", "account", "qos") if k in base}
    watcher = profile.get("watcher") or {}
    if watcher.get("partition"):
        params["partition"] = watcher["partition"]
    params["mem"] = mem_param(float(watcher.get("mem_gb", 1.0)))
    return params


class Starter:
    """Starts the sweep's watcher job from inside `launch` (orchestrator/launch/submit.py), under the sweep's lock:
    `ids()` go into the launch's one sacct, and the call decides with Slurm's answer
    (orchestrator/status/watcher_info.py `should_start`) and submits at most one, before the cells' sbatch: where the
    watcher partition shares nodes with the training one and has no higher PriorityTier, a job submitted later waits
    until every earlier pending one has started. Returns what it did, in words."""

    def __init__(self, sweep_dir: Path, params: dict, max_retries: int, poll_s: float, time_min: int,
                 by: str = "orchestrate sweep"):
        self.sweep_dir, self.params, self.by = Path(sweep_dir), params, by
        self.max_retries, self.poll_s, self.time_min = max_retries, poll_s, time_min
        self.failed = False

    def ids(self) -> list[str]:
        return ws.ids_to_ask(ws.read_info(self.sweep_dir))

    def __call__(self, records: dict[str, dict], rows: dict, declared: tuple[str, ...] = ()) -> str:
        """`declared`: the baselines the launch is about to submit (they too keep a watcher busy)."""
        done = settled(records) and baselines_settled(self.sweep_dir, declared)
        start, why = ws.should_start(ws.read_info(self.sweep_dir), rows, done, time.time())
        if not start:
            return f"no watcher job submitted: {why}"
        try:
            job_id = submit_as_job(self.sweep_dir, records, self.max_retries, self.poll_s, self.time_min,
                                   self.params, by=self.by)
        except SlurmError as err:  # the cells' jobs are out: say what failed instead of hiding that they are
            self.failed = True
            if refused_by_limit(str(err)):
                return (f"the watcher job was refused by a submission limit ({err}): no slot was free for it. "
                        f"Nothing submits what waits for a slot, nor resubmits failures, until one runs: once jobs "
                        f"have left the queue, `orchestrate watch {self.sweep_dir} --as-job`")
            return (f"the watcher job could not be submitted: {err}. Nothing resubmits infrastructure failures "
                    f"until one runs: check the profile's watcher.partition (or sweep.slurm.overrides."
                    f"watcher.partition=...), then `orchestrate watch {self.sweep_dir} --as-job`")
        return (f"watcher job {job_id} submitted in partition {self.params.get('partition')} ({why}): it resubmits "
                f"cells ended by infrastructure failures and ends once the sweep is settled; its log: "
                f"{self.sweep_dir / 'slurm' / job_id}")


def start_by_hand(sweep_dir: Path, max_retries: int, poll_s: float, time_min: int | None) -> tuple[str, bool]:
    """`orchestrate watch --as-job`: the same rule as `orchestrate sweep` (never a second watcher), under the lock.
    Returns what was done and whether sbatch failed."""
    ledger = Ledger(sweep_dir)
    info = ws.read_info(sweep_dir)
    records = [r for r in ledger.records().values() if r.get("params")]
    if not records:
        raise UserError(f"{sweep_dir}: no submitted cells in its ledger; run `orchestrate sweep` first")
    params = (info or {}).get("params") or manifest_params(sweep_dir, records[0])
    minutes = time_min or int(params.get("time") or _manifest_time(sweep_dir))
    backend = SlurmBackend(Path(sweep_dir), load_options(sweep_dir, executor="slurm"))
    with ledger.lock("orchestrate watch --as-job", wait_s=60.0):
        ids = ws.ids_to_ask(ws.read_info(sweep_dir))
        rows = backend.rows(ids) if ids else {}
        starter = Starter(sweep_dir, params, max_retries, poll_s, minutes, by="orchestrate watch --as-job")
        said = starter(ledger.records(), rows)
    return said, starter.failed


def _manifest_time(sweep_dir: Path) -> int:
    profile = (read_json(Path(sweep_dir) / "manifest.json") or {}).get("profile") or {}
    return int((profile.get("watcher") or {}).get("time_min", DEFAULT_TIME_MIN))

