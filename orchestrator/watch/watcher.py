"""Following a launched sweep: what to do when a job ends. The decisions are pure; the Watcher acts on them.

`decide(record, verdict, now)` reads one cell's ledger record (its attempts with the states Slurm reported) and
returns at most one `Action`, with its reason:

- training COMPLETED            -> evaluation: submit it if missing; `complete` once it has COMPLETED
- NODE_FAIL, PREEMPTED, BOOT_FAIL, TIMEOUT (after the in-job requeues), CANCELLED outside `orchestrate cancel`
  (a kill), a first FAILED      -> `resubmit` within the retry budget; the evaluation is re-chained on the new
                                   job, the job resumes from the cell's latest checkpoint
- a job that exited USER_ERROR_EXIT (a mistake of the user's it found at its start: user_error.json) -> `give_up`
  as `user_error` at once, with the job's message and fix; never resubmitted (--retry-failed does, once fixed)
- the same FAILED exit code twice, a user's cancellation, a collapsed run (verdict.json), OUT_OF_MEMORY (with
  MaxRSS/ReqMem), a spent budget -> `give_up` with the reason; never resubmitted
- an ended job Slurm may still requeue in place (NODE_FAIL, PREEMPTED) is given `grace_s` before acting.

What a (re)launch submits is the plan's (orchestrator/launch/plan.py `triage`); submitting it is
orchestrator/launch/submit.py.
The watcher as a Slurm job of its own (started by `orchestrate sweep`) is orchestrator/watch/job.py.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from pathlib import Path

from eval.shard_plan import jobs_with_shards
from orchestrator.cluster.entry import PREEMPTED_EXIT
from orchestrator.cluster.executor import submit_limit_of
from orchestrator.cluster.options import load_options
from orchestrator.cluster.query import SlurmError
from orchestrator.launch.baseline_jobs import baseline_ledger, baselines_settled
from orchestrator.launch.intents import Group, mark_waiting, submit_jobs
from orchestrator.launch.ledger import (
    KINDS,
    LIVE,
    Ledger,
    SweepBusy,
    attempts,
    finish,
    latest,
    note,
    settled,
)
from orchestrator.launch.reconcile import observe
from orchestrator.status.outcomes import objective_fields
from orchestrator.watch.retention import FINAL_EXPORT, keep_final_export
from orchestrator.watch.slots import Slots, trickle, waiting_baseline, waiting_training
from orchestrator.watch.user_error import error_of, is_user_error, user_error_of
from record.files import read_json
from record.rundir import RunDir
from trainer.run.collapse import read_verdict

RETRYABLE = {"NODE_FAIL": "node failure", "PREEMPTED": "preempted", "BOOT_FAIL": "node failed to boot",
             "TIMEOUT": "time limit reached after the in-job requeues",
             "CANCELLED": "cancelled outside `orchestrate cancel` (killed)",
             "FAILED": "failed once; retried in case the cause was transient", "LOST": "never reached Slurm",
             "VANISHED": "gone from Slurm without an accounting record (cancelled while pending?)"}
REQUEUE_GRACE_S = 60.0


@dataclass(frozen=True)
class Action:
    run_key: str
    do: str  # "resubmit" | "submit_eval" | "give_up" | "complete"
    reason: str
    kind: str = "train"  # what `resubmit` submits again (train brings a new chained evaluation)
    status: str | None = None  # the final status of give_up / complete
    error: dict | None = None  # a user_error's {"message", "fix"}, kept beside the final status for `status`
    cancel: tuple[str, ...] = ()  # job ids to scancel first: an evaluation still waiting on the old training


def describe(job: dict) -> str:
    where = f" on {job['node']}" if job.get("node") else ""
    code = f", exit {job['exit_code']}" if job.get("exit_code") not in (None, "", "0:0") else ""
    return f"{job['kind']} job {job['job_id'] or job['name']} {job['state']}{where}{code} (attempt {job['attempt']})"


def human_bytes(n: int | None) -> str:
    if n is None:
        return "unknown"
    for unit in ("B", "K", "M", "G", "T"):
        if n < 1024 or unit == "T":
            return f"{n:.0f}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n /= 1024
    return str(n)


def decide(record: dict, verdict: str | None, now: float, max_retries: int = 3,
           grace_s: float = REQUEUE_GRACE_S, progressed: frozenset = frozenset(),
           user_error: dict | None = None) -> Action | None:
    """One cell's next step, or None (nothing to do yet). Pure: the record, the collapse verdict ("stable",
    "unstable", "collapsed" or None), the time, the evaluation jobs that finished a shard (`progressed`: their
    attempts spend no retry budget: an evaluation longer than its jobs advances by them) and the run dir's
    user_error.json (what a job that exited USER_ERROR_EXIT wrote) in; an action out."""
    if record.get("final"):
        return None
    train = latest(record, "train")
    if train is None or train["state"] in LIVE:
        return None  # planned (the launcher or the local pump starts it) or still in Slurm's hands
    if train["state"] == "COMPLETED":
        return _after_training(record, now, max_retries, grace_s, progressed, user_error)
    return _after_failure(record, train, verdict, now, max_retries, grace_s, user_error=user_error)


def decide_baseline(record: dict, now: float, max_retries: int = 3, grace_s: float = REQUEUE_GRACE_S,
                    user_error: dict | None = None) -> Action | None:
    """A baseline's next step (orchestrator/launch/baseline_jobs.py: one evaluation, nothing trained), by the cells'
    rules: an infrastructure failure resubmitted within the budget, a user's cancellation or a repeated error
    never; a completed evaluation made final. Pure."""
    if record.get("final"):
        return None
    ev = latest(record, "eval")
    if ev is None or ev["state"] in LIVE:
        return None  # planned (the launch submits it) or still in Slurm's hands
    if ev["state"] == "COMPLETED":
        return Action(record["run_key"], "complete", f"evaluated ({ev['job_id']})", kind="eval", status="completed")
    return _after_failure(record, ev, None, now, max_retries, grace_s, user_error=user_error)


def _waiting_evals(record: dict) -> tuple[str, ...]:
    ev = latest(record, "eval")
    return (ev["job_id"],) if ev and ev["job_id"] and ev["state"] in LIVE else ()


def _after_training(record: dict, now: float, max_retries: int, grace_s: float,
                    progressed: frozenset = frozenset(), user_error: dict | None = None) -> Action | None:
    key, train, ev = record["run_key"], latest(record, "train"), latest(record, "eval")
    stale = ev is not None and ev.get("after") not in (None, train["job_id"])  # chained on an older training
    # ... or another evaluation than the cell's now (a relaunch changed what evaluates: record/identity/fields.py)
    stale = stale or (ev is not None and ev.get("eval_id", record.get("eval_id")) != record.get("eval_id"))
    if ev is None or ev["state"] == "LOST" or (stale and ev["state"] not in LIVE):
        return Action(key, "submit_eval", f"training {train['job_id']} completed; its evaluation is submitted",
                      kind="eval")
    if ev["state"] in LIVE:
        return None
    if ev["state"] == "COMPLETED":
        return Action(key, "complete", f"trained ({train['job_id']}) and evaluated ({ev['job_id']})",
                      status="completed")
    return _after_failure(record, ev, None, now, max_retries, grace_s, progressed, user_error)


def _after_failure(record: dict, job: dict, verdict: str | None, now: float, max_retries: int,
                   grace_s: float, progressed: frozenset = frozenset(), user_error: dict | None = None
                   ) -> Action | None:
    key, kind, what, state = record["run_key"], job["kind"], describe(job), job["state"]
    cancel = _waiting_evals(record) if kind == "train" else ()

    def give_up(status: str, why: str) -> Action:
        return Action(key, "give_up", f"{what}: {why}", kind=kind, status=status, cancel=cancel)

    if record.get("user_cancelled"):
        return give_up("cancelled", "cancelled by the user (orchestrate cancel); not resubmitted")
    if verdict == "collapsed":
        return give_up("collapsed", "the run collapsed (verdict.json); a collapse is a result, not resubmitted")
    if is_user_error(job):
        error = error_of(user_error, job, key)
        return Action(key, "give_up", f"{what}: a mistake to fix, not an infrastructure failure; not resubmitted: "
                      f"{error['message']}", kind=kind, status="user_error", cancel=cancel, error=error)
    if state == "OUT_OF_MEMORY":
        return give_up("out_of_memory", f"out of memory: MaxRSS {human_bytes(job.get('max_rss'))} of ReqMem "
                       f"{job.get('req_mem') or 'unknown'}; raise mem_gb (sweep.slurm.overrides) and relaunch "
                       f"with --retry-failed")
    if state in ("NODE_FAIL", "PREEMPTED", "CANCELLED") and job.get("end") and now - job["end"] < grace_s:
        return None  # Slurm may still requeue it in place (same id): give it a moment
    previous = [a for a in attempts(record, kind) if a is not job and a["state"] != "LOST" and not a.get("superseded")]
    preempted = state == "FAILED" and job.get("exit_code") == f"{PREEMPTED_EXIT}:0"
    if state == "FAILED" and not preempted and previous and previous[-1]["state"] == "FAILED" \
            and previous[-1]["exit_code"] == job["exit_code"]:
        return give_up("gave_up", f"failed twice with exit code {job['exit_code']}: an error in the run, not the "
                       f"infrastructure; see `orchestrate logs {key}`")
    if state not in RETRYABLE:
        return give_up("gave_up", f"{state} is not an infrastructure failure; not resubmitted")
    # resubmissions so far (a LOST intent never ran: it spends nothing; an evaluation that finished shards advanced)
    advanced = [a for a in (*previous, job) if a.get("job_id") in progressed]
    used = len([a for a in previous if a not in advanced])
    if state != "LOST" and used >= max_retries and job not in advanced:
        return give_up("gave_up", f"retry budget spent ({used} of {max_retries} resubmissions)")
    spent = 0 if job in advanced else 1
    budget = "" if state == "LOST" else f" ({used + spent} of at most {max_retries} resubmissions" + (
        f"; {len(advanced)} attempt(s) that finished evaluation shards not counted)" if advanced else ")")
    why = "checkpointed on the warning signal, not requeued by Slurm" if preempted else RETRYABLE[state]
    return Action(key, "resubmit", f"{what}: {why}; submitted again as attempt {job['attempt'] + 1}"
                  f"{budget}, resuming from its latest checkpoint", kind=kind, cancel=cancel)


class Watcher:
    """Poll the ledger and Slurm, act on `decide` (`decide_baseline` for the sweep's baselines), record every
    decision; local: also start queued cells."""

    def __init__(self, ledger: Ledger, backend, max_retries: int = 3, parallelism: int = 1,
                 grace_s: float = REQUEUE_GRACE_S, log=None):
        self.ledger, self.backend, self.max_retries = ledger, backend, max_retries
        self.parallelism, self.grace_s, self.log = parallelism, grace_s, log or (lambda line: None)
        self.baselines = baseline_ledger(ledger.sweep_dir)  # the base models' evaluations, followed alike
        self.cap: int | None = None  # where no limit can be read: the most jobs a submission tries (slots.py)
        self.refusals: list[int] = []  # refused sbatch calls, poll by poll (at most one each)

    def poll(self) -> dict[str, dict]:
        """One poll of the cells and the baselines (one sacct for both, orchestrator/launch/reconcile.py `observe`);
        returns the cells' records."""
        records, bases = self.ledger.records(), self.baselines.records()
        observe(self.backend, [(self.ledger, records), (self.baselines, bases)])
        slots = self._slots(records) if self.backend.kind == "slurm" else None
        evals, trains = [], []  # what waits for a submission slot (Slurm): submitted as arrays, slots allowing
        for record in records.values():
            if slots is not None and waiting_training(record):
                trains.append(record)
                continue
            action = decide(record, _verdict(record), time.time(), self.max_retries, self.grace_s,
                            _progressed(record), user_error_of(record))
            if action is not None and slots is not None and action.do == "submit_eval" and not action.cancel:
                evals.append(record)
            elif action is not None:
                self.act(record, action, slots=slots)
        if self.backend.kind == "local":
            self._start_queued(records)
        waiting = []
        for record in bases.values():
            if slots is not None and waiting_baseline(record):
                waiting.append(record)
                continue
            action = decide_baseline(record, time.time(), self.max_retries, self.grace_s, user_error_of(record))
            if action is not None:
                self.act(record, action, self.baselines, slots=slots)
        if slots is not None:
            trickle(self.backend, slots, self.ledger, evals, trains, (self.baselines, waiting), self.parallelism,
                    self.log)
            self.cap, self.refusals = slots.cap, [*self.refusals, slots.refusals]
        return records

    def _slots(self, records: dict[str, dict]) -> Slots:
        """This poll's submission slots: the limit read once, the queue every poll (one squeue)."""
        params = next((r["params"].get("eval") or {} for r in records.values() if r.get("params")), {})
        return Slots(submit_limit_of(self.backend, params), self.cap)

    def settled(self, records: dict[str, dict]) -> bool:
        """Every cell final, and every baseline's evaluation."""
        return settled(records) and baselines_settled(self.ledger.sweep_dir)

    def act(self, record: dict, action: Action, ledger: Ledger | None = None, slots: Slots | None = None) -> None:
        """Carry out `action` on a record of `ledger` (the cells' by default; the baselines' for theirs); a
        submission waits when the poll's `slots` have no room for it (decided again at the next poll)."""
        ledger, now = ledger or self.ledger, time.time()
        kinds = ("train", "eval") if action.do == "resubmit" and action.kind == "train" else ("eval",)
        if slots is not None and action.do in ("resubmit", "submit_eval") and slots.fits(len(kinds)) < len(kinds):
            mark_waiting(record, slots.words(), now)
            ledger.save(record)
            return
        self.log(f"{record['name']} ({record['run_key']}): {action.do}: {action.reason}")
        cancel = list(action.cancel)
        if action.do == "resubmit" and action.kind == "train":
            old = latest(record, "train")
            cancel += [old["job_id"]] if old["job_id"] and old["state"] in ("NODE_FAIL", "PREEMPTED") else []
        if cancel:
            try:  # an old evaluation still waiting on the old training; a job Slurm might requeue in place
                self.backend.cancel(cancel)
                for job in record["jobs"]:
                    if job["job_id"] in cancel and job["state"] in LIVE:
                        job.update(state="CANCELLED", reason=f"cancelled by the watcher: {action.do}")
            except SlurmError as err:
                note(record, "cancel_failed", f"scancel {' '.join(cancel)}: {err}", now)
        if action.do in ("give_up", "complete"):
            # the gradient its training computed and the code that did (trainer/objective/fingerprint.py), beside the
            # verdict
            record["objective"] = objective_fields(read_json(RunDir(record["run_dir"]).objective))
            finish(record, action.status, action.reason, now, error=action.error)
            if action.do == "complete" and action.status == "completed" and ledger is self.ledger:
                self._retain(record, now)  # the evaluation succeeded: only now may checkpoints go
            ledger.save(record)
            return
        note(record, action.do, action.reason, now)
        if slots is None:
            submit_jobs(self.backend, ledger, [record], kinds)
        elif not slots.submit(self.backend, ledger, [Group([record], kinds, 1, ledger)]):
            note(record, "wait", f"{slots.words()}; submitted at a later poll, no retry budget spent", now)
            ledger.save(record)

    def _retain(self, record: dict, now: float) -> None:
        """The profile's checkpoint_retention (recorded in submission.json) on a cell just settled as evaluated."""
        if load_options(self.ledger.sweep_dir).checkpoint_retention != FINAL_EXPORT:
            return
        try:
            freed, said = keep_final_export(record["run_dir"])
        except OSError as err:  # a file that will not go is disk left used, never a failed poll
            freed, said = 0, f"checkpoint retention failed: {err}"
        record["retention"] = {"policy": FINAL_EXPORT, "freed_bytes": freed, "at": now}
        note(record, "retention", said, now)

    def _start_queued(self, records: dict[str, dict]) -> None:
        live = sum(1 for r in records.values() for k in KINDS if (j := latest(r, k)) and j["state"] in LIVE)
        queued = [r for r in records.values() if not r["final"] and r.get("params")
                  and latest(r, "train") is None]
        for record in queued[:max(self.parallelism - live, 0)]:
            note(record, "start", "local executor: a slot is free", time.time())
            submit_jobs(self.backend, self.ledger, [record], ("train",))

    def run(self, poll_s: float = 30.0, timeout_s: float | None = None, on_poll=None, keep_alive=None,
            stop=None, guard=None) -> dict[str, dict]:
        """Poll until every cell is final, `timeout_s` has passed or `stop()` says so: returns the records.
        `guard()`: a context held around each poll (the sweep's lock, for a watcher that holds it poll by poll); a
        poll it finds busy (`SweepBusy`: a relaunch at work) is skipped until the next."""
        deadline = time.monotonic() + (timeout_s if timeout_s is not None else float("inf"))
        stop = stop or (lambda: False)
        while True:
            try:
                with guard() if guard else contextlib.nullcontext():
                    records = self.poll()
            except SweepBusy as err:
                self.log(f"poll skipped, the sweep is busy: {err}")
                records = self.ledger.records()
            except SlurmError as err:  # slurmctld busy or restarting: say so, try again at the next poll
                self.log(f"poll failed, retrying in {poll_s:.0f} s: {err}")
                records = self.ledger.records()
            if keep_alive:
                keep_alive()
            if on_poll:
                on_poll(records)
            next_poll = min(time.monotonic() + poll_s, deadline)
            while time.monotonic() < next_poll and not stop():
                time.sleep(min(1.0, max(0.0, next_poll - time.monotonic())))
            if self.settled(records) or time.monotonic() >= deadline or stop():
                return records


def _progressed(record: dict) -> frozenset:
    """The evaluation jobs of the cell that finished a shard (eval/shard_plan.py), read only where its latest evaluation
    ended otherwise than COMPLETED: what `decide` needs to spare their attempts the retry budget."""
    ev = latest(record, "eval")
    if record.get("final") or ev is None or ev["state"] in LIVE or ev["state"] == "COMPLETED":
        return frozenset()
    return frozenset(jobs_with_shards(Path(record["run_dir"])))


def _verdict(record: dict) -> str | None:
    train = latest(record, "train")
    if record.get("final") or train is None or train["state"] in LIVE or train["state"] == "COMPLETED":
        return None  # only a failed training asks whether the run had collapsed
    try:
        verdict = read_verdict(RunDir(record["run_dir"]).verdict)
    except ValueError:
        return None
    return verdict.verdict if verdict else None
