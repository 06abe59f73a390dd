"""The baselines' jobs (orchestrator/sweep/baselines.py): one evaluation each, nothing trained, submitted once.

Their records live in a ledger of their own beside their run dirs (orchestrator/launch/baseline_ledger.py). Submitting
is the cells' intent protocol (orchestrator/launch/intents.py `submit_groups`, kinds ("eval",): intents, then one
sbatch for all of them as an array, then the job ids), under the sweep's lock, and idempotent like the cells':

- never submitted, or LOST / VANISHED / ended by the infrastructure (node failure, preemption, time limit) -> submit
- live or COMPLETED -> kept
- FAILED (or cancelled, out of memory) -> kept unless `--retry-failed`

Between launches the watcher follows them by the cells' rules (orchestrator/watch/watcher.py `decide_baseline`).
With the local executor `orchestrate sweep` waits for them after the cells (`wait_baselines`).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.cluster.profile import resources_params
from orchestrator.launch.baseline_ledger import baseline_ledger, baseline_state, sweep_baselines_dir
from orchestrator.launch.intents import Group, submit_groups
from orchestrator.launch.ledger import LIVE, Ledger, attempts, finish, latest, new_record, note
from orchestrator.launch.reconcile import refresh, settle_intents

if TYPE_CHECKING:  # a type only: submitting goes through the backend the caller built
    from orchestrator.cluster.executor import Options

AGAIN = frozenset({"LOST", "VANISHED", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "TIMEOUT"})  # not the run's fault


def triage_baselines(records: dict[str, dict], keys: list[str], retry_failed: bool = False):
    """(keys to submit now, {reason: count} of those kept). Pure."""
    todo, kept = [], {}
    for key in keys:
        ev = latest(records[key], "eval") if key in records else None
        if ev is None or ev["state"] in AGAIN or (retry_failed and ev["state"] not in LIVE | {"COMPLETED"}):
            todo.append(key)
        else:
            why = "evaluated" if ev["state"] == "COMPLETED" else "live" if ev["state"] in LIVE else ev["state"]
            kept[why] = kept.get(why, 0) + 1
    return todo, kept


def launch_baselines(sweep, sweep_dir: Path, backend, options: Options, code, retry_failed: bool = False,
                     ) -> tuple[int, dict, int]:
    """Submit the baselines' evaluations that `triage_baselines` says are missing, as one array (or one job each,
    locally). The caller holds the sweep's lock; `code()` gives the code snapshot. Returns (submitted, kept, sbatch
    calls made)."""
    if not sweep.baselines:
        return 0, {}, 0
    ledger = baseline_ledger(sweep_dir)
    records = ledger.records()
    settle_intents(ledger, backend, records)
    refresh(ledger, backend, records)
    todo, kept = triage_baselines(records, [b.key for b in sweep.baselines], retry_failed)
    if not todo:
        return 0, kept, 0
    by_key, now = {b.key: b for b in sweep.baselines}, time.time()
    params = resources_params(sweep.profile, sweep.profile.eval)
    for key in todo:
        b = by_key[key]
        record = records.get(key) or new_record(sweep.name, key, b.name, {}, sweep_baselines_dir(sweep_dir) / key)
        record.update(code=str(code()), entries={"eval": options.eval_entry}, params={"eval": params}, final=None,
                      baseline=b.description())
        note(record, "submit", "baseline evaluation submitted by orchestrate sweep"
             + (" --retry-failed" if retry_failed and attempts(record, "eval") else ""), now)
        records[key] = record
    limit = min(sweep.profile.max_array_size, backend.array_limit())
    chunks = [todo[start:start + limit] for start in range(0, len(todo), limit)]
    submit_groups(backend, ledger, [Group([records[k] for k in chunk], ("eval",), sweep.profile.array_parallelism)
                                    for chunk in chunks])
    return len(todo), kept, len(chunks) if backend.kind == "slurm" else 0


def wait_baselines(sweep_dir: Path, backend, poll_s: float = 2.0, timeout_s: float | None = None) -> dict[str, str]:
    """Follow the baselines' jobs of this process's local executor to their end (each record's final: completed,
    or gave_up with the job's state); {key: state}. Holds the sweep's lock one poll at a time."""
    ledger, lock = baseline_ledger(sweep_dir), Ledger(sweep_dir)
    deadline = time.monotonic() + (timeout_s if timeout_s is not None else float("inf"))
    while True:
        with lock.lock("orchestrate sweep (baselines)", wait_s=60.0):
            records = ledger.records()
            refresh(ledger, backend, records)
            live = [r for r in records.values() if (ev := latest(r, "eval")) and ev["state"] in LIVE]
            if not live or time.monotonic() >= deadline:
                for record in records.values():
                    _close(ledger, record)
                return {k: baseline_state(r) for k, r in records.items()}
        time.sleep(poll_s)


def _close(ledger: Ledger, record: dict) -> None:
    ev = latest(record, "eval")
    if record.get("final") or ev is None or ev["state"] in LIVE:
        return
    if ev["state"] == "COMPLETED":
        finish(record, "completed", f"evaluated ({ev['job_id']})", time.time())
    else:
        finish(record, "gave_up", f"eval job {ev['job_id']} {ev['state']} {ev.get('reason') or ''}".strip(),
               time.time())
    ledger.save(record)
