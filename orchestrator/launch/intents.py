"""The intent protocol: a job's name is written to the ledger before its sbatch, its id after, so an orchestrator
killed in between leaves names the next one looks for (orchestrator/launch/reconcile.py `settle_intents`) and
never submits twice.
"""

from __future__ import annotations

import hashlib
import time

from orchestrator.launch.ledger import Ledger, add_attempt, attempts


def submit_jobs(backend, ledger: Ledger, records: list[dict], kinds: tuple[str, ...] = ("train", "eval"),
                parallelism: int = 1) -> None:
    """Submit these cells' jobs of `kinds` with one sbatch per kind: intents first (job names in the ledger), then
    sbatch, then the job ids. The evaluation is chained on the training submitted here: task by task
    (`aftercorr`) for an array, `afterok` for a single job. Where the backend has no dependencies (local), only
    the training goes out; the watcher starts the evaluation when the training has completed."""
    if backend.kind != "slurm" and "train" in kinds:
        kinds = ("train",)
    now, first, many = time.time(), records[0], len(records) > 1
    intents: dict[str, list[dict]] = {}
    for kind in kinds:
        numbers = [len(attempts(r, kind)) + 1 for r in records]
        name = array_name(first["sweep"], kind, [r["run_key"] for r in records], numbers)
        intents[kind] = [add_attempt(r, kind, name, now, array_index=i if many else None, executor=backend.kind,
                                     **({"eval_id": r.get("eval_id")} if kind == "eval" else {}))
                         for i, r in enumerate(records)]
    ledger.save_all(records)  # from here on a crash leaves job names the next orchestrator looks for: no duplicate
    train_ids: list[str] = []
    try:
        for kind in kinds:
            dependency = None
            if kind == "eval" and train_ids:
                dependency = f"aftercorr:{train_ids[0].split('_')[0]}" if many else f"afterok:{train_ids[0]}"
            done = backend.submit(kind, first["entries"][kind], [r["run_dir"] for r in records],
                                  first["params"][kind], intents[kind][0]["name"], first["code"], dependency,
                                  parallelism)
            for i, (job, sub) in enumerate(zip(intents[kind], done)):
                job.update(job_id=sub.job_id, state="SUBMITTED", submitted_at=time.time(), stdout=sub.stdout,
                           stderr=sub.stderr, after=train_ids[i] if dependency else None)
            if kind == "train":
                train_ids = [s.job_id for s in done]
    finally:
        ledger.save_all(records)


def array_name(sweep: str, kind: str, run_keys: list[str], attempts: list[int]) -> str:
    """A single cell's job is `<sweep>-<kind>-<run_key>-a<attempt>`; an array is `<sweep>-<kind>-<digest>`, the
    digest of its (run_key, attempt) pairs, which the ledger maps back to its cells."""
    if len(run_keys) == 1:
        return f"{sweep}-{kind}-{run_keys[0]}-a{attempts[0]}"
    pairs = ",".join(f"{k}:{a}" for k, a in zip(run_keys, attempts))
    return f"{sweep}-{kind}-{hashlib.sha256(pairs.encode()).hexdigest()[:10]}"
