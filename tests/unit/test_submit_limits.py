"""A sweep larger than the user's submission limit (Slurm's MaxSubmitJobs and its kin): the limit read from sacctmgr's
and squeue's answers (pure parsers, on the shapes Slurm 22.05 prints), the plan cut to the free slots, and the
watcher submitting the rest poll by poll with at most one refused sbatch a poll and no retry budget spent."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

from orchestrator.cluster import limits as lim
from orchestrator.cluster import query as Q
from orchestrator.cluster.executor import Options
from orchestrator.launch import ledger as L
from orchestrator.launch.intents import WAITING, submit_jobs
from orchestrator.launch.materialise import materialise
from orchestrator.launch.plan import fit, fit_counts, jobs_needed, make_plan
from orchestrator.launch.submit import launch
from orchestrator.pipeline.submission import limit_lines
from orchestrator.preflight.limit import limit_line
from orchestrator.status.outcomes import cell_row
from orchestrator.sweep.expand import load_sweep
from orchestrator.watch.watcher import Watcher

SWEEPS = Path(__file__).resolve().parents[2] / "sweeps"

# `sacctmgr -nP show assoc where user=root format=Account,User,Partition,MaxSubmitJobs,MaxJobs,GrpSubmitJobs,
# GrpJobs,QOS,DefaultQOS` on the local cluster after `sacctmgr modify user root set MaxSubmitJobs=4`
ASSOC = "root|root||4||||normal|\n"
ASSOC_TWO = "lab|alice||20||||normal,long|normal\nlab|alice|gpu|8||||normal,long|long\nother|alice|||||||normal\n"
QOS = "normal|100|50||\n"  # format=Name,MaxSubmitJobsPerUser,MaxJobsPerUser,GrpSubmitJobs,GrpJobs
CONFIG = "MaxArraySize            = 1001\nAccountingStorageEnforce = associations,limits,qos\n"
REFUSED = ("sbatch: error: AssocMaxSubmitJobLimit\nsbatch: error: Batch job submission failed: Job violates "
           "accounting/QOS policy (job submit limit, user's size and/or time limits)")


def test_the_association_and_qos_limits_are_read_and_the_smallest_submit_limit_wins():
    assoc = lim.pick_association(lim.parse_rows(ASSOC, lim.ASSOC_FORMAT), "root", None, "debug")
    limit = lim.submit_limit_of(lim.parse_enforce(CONFIG), assoc, lim.parse_rows(QOS, lim.QOS_FORMAT), 1, "root/root")
    assert (limit.limit, limit.queued, limit.free) == (4, 1, 3)
    assert limit.source == "MaxSubmitJobs of association root/root" and limit.scope == ("root", None)
    assert "MaxJobsPerUser=50 of QOS normal" in limit.running_limit
    alone = lim.submit_limit_of("associations,limits", {"MaxSubmitJobs": ""}, lim.parse_rows(QOS, lim.QOS_FORMAT), 7,
                              "a/b")
    assert (alone.limit, alone.source, alone.scope) == (100, "MaxSubmitJobsPerUser of QOS normal", (None, "normal"))


def test_the_association_is_the_profiles_account_and_partition():
    rows = lim.parse_rows(ASSOC_TWO, lim.ASSOC_FORMAT)
    assert lim.pick_association(rows, "alice", "lab", "gpu")["MaxSubmitJobs"] == "8"
    assert lim.pick_association(rows, "alice", "lab", "cpu")["MaxSubmitJobs"] == "20"
    assert lim.pick_association(rows, "alice", None, None) is None  # two accounts, no default known: not guessed
    assert lim.pick_association(rows, "alice", None, None, default_account="other")["Account"] == "other"


def test_a_limit_that_cannot_be_read_or_is_not_enforced_is_said_so():
    off = lim.submit_limit_of("associations", None, [], 3, "root/root")
    assert off.limit is None and "not enforced" in off.words()
    missing = lim.submit_limit_of(lim.parse_enforce(CONFIG), None, [], 3, "bob/lab")
    assert missing.words().startswith("unknown: no association of bob/lab")
    blind = lim.submit_limit_of(lim.parse_enforce(CONFIG), {"MaxSubmitJobs": "4"}, [], None, "root/root")
    assert blind.limit is None and blind.words().startswith("unknown: squeue")
    none = lim.submit_limit_of(lim.parse_enforce(CONFIG), {"MaxSubmitJobs": ""}, [], 2, "root/root")
    assert none.limit is None and none.free is None and "no submit limit" in none.words()


def test_the_queue_counts_array_tasks_one_by_one_and_the_partition_qos_is_read():
    assert lim.count_queued("101_0\n101_1\n102\n103_[4-6]\n") == 6
    assert lim.parse_partition_qos("PartitionName=debug AllowQos=ALL QoS=part_q DefaultTime=NONE") == "part_q"
    assert lim.parse_partition_qos("PartitionName=debug QoS=N/A") is None
    assert lim.refused_by_limit(REFUSED) and not lim.refused_by_limit("sbatch: error: invalid partition")


def test_the_plan_is_cut_to_the_free_slots_trainings_first_then_their_evaluations():
    sweep = load_sweep(SWEEPS / "smoke.yaml", ["sweep.seeds=[0,1,2]"])
    plan = make_plan(sweep)
    cells = sum(g.size for g in plan.train)
    needed = jobs_needed(plan)
    assert fit_counts(plan, None) == (needed, needed)
    train = plan.train[0].name
    assert fit(plan, cells + 1)[train] == (cells, 1)  # every training, one chained evaluation
    assert fit(plan, 2)[train] == (2, 0)
    assert fit_counts(plan, 0) == (0, needed)
    limit = lim.SubmitLimit(10, "MaxSubmitJobs of association root/root", queued=8 - 1)
    line = limit_line(limit, plan, watcher=True)
    assert line.startswith(f"submission limit: 7 of 10 queued (MaxSubmitJobs of association root/root); this sweep "
                           f"needs {needed + 1} job(s) at once: 3 go out now (arrays split to fit), the watcher "
                           f"submits the rest as slots free")


class LimitedSlurm:
    """A Slurm that refuses an sbatch over `limit` queued jobs (array tasks one by one), as MaxSubmitJobs does;
    every queued job completes at each `tick`. `known`: whether the limit can be read."""

    kind = "slurm"

    def __init__(self, limit: int, known: bool = True):
        self.limit, self.known = limit, known
        self.jobs: dict[str, list] = {}  # job id -> [name, state]
        self.calls, self.refusals, self.most_queued = [], 0, 0

    def queued_count(self) -> int:
        return sum(1 for _, state in self.jobs.values() if state == "PENDING")

    def submit_limit(self, params):
        if not self.known:
            return lim.SubmitLimit(None, unknown="sacctmgr: permission denied")
        return lim.SubmitLimit(self.limit, "MaxSubmitJobs of association root/root", self.queued_count())

    def submit(self, kind, entry, run_dirs, params, name, code, dependency=None, parallelism=1):
        self.calls.append((kind, len(run_dirs)))
        if self.queued_count() + len(run_dirs) > self.limit:
            self.refusals += 1
            raise Q.SubmitRefused(f"sbatch of {name} refused by a submission limit: {REFUSED}")
        base = str(1000 + len(self.calls))
        ids = [f"{base}_{i}" for i in range(len(run_dirs))] if len(run_dirs) > 1 else [base]
        for job_id in ids:
            self.jobs[job_id] = [name, "PENDING"]
        self.most_queued = max(self.most_queued, self.queued_count())
        return [SimpleNamespace(job_id=i, stdout="", stderr="") for i in ids]

    def tick(self) -> None:
        for job in self.jobs.values():
            job[1] = "COMPLETED"

    def rows(self, job_ids):
        out = {}
        for job_id in job_ids:
            for task, (name, state) in self.jobs.items():
                if task == job_id or task.split("_")[0] == job_id:
                    now = time.time()
                    out.setdefault(task, []).append(L.JobRow(task, name, state, "0:0", submit=now, end=now))
        return out

    def queued(self, names):
        return {}

    def find(self, names, since):
        return {}

    def cancel(self, job_ids):
        pass


def held(ledger: L.Ledger, n: int) -> dict[str, dict]:
    """n cells the launch held back (records written, nothing submitted), as orchestrator/launch/submit.py does."""
    for i in range(n):
        r = L.new_record("sw", f"k{i:02d}", f"c{i}", {}, f"/runs/sw/k{i:02d}")
        r.update(code="/code", entries={"train": "m:t", "eval": "m:e"}, params={"train": {}, "eval": {}})
        r[WAITING] = {"at": 1.0, "why": "waiting for a submission slot (4 of 4 queued, limit MaxSubmitJobs)"}
        ledger.save(r)
    return ledger.records()


def follow(watcher: Watcher, backend: LimitedSlurm, polls: int = 60) -> dict[str, dict]:
    for _ in range(polls):
        records = watcher.poll()
        if watcher.settled(records):
            return records
        backend.tick()
    raise AssertionError("the sweep did not finish")


def test_the_watcher_trickles_a_sweep_over_the_limit_with_no_refusal_where_the_limit_is_known(tmp_path):
    ledger = L.Ledger(tmp_path)
    held(ledger, 12)  # 24 jobs under a limit of 4
    backend = LimitedSlurm(4)
    watcher = Watcher(ledger, backend)
    records = follow(watcher, backend)
    assert all(r["final"]["status"] == "completed" for r in records.values())
    assert all(len(L.attempts(r, "train")) == 1 and len(L.attempts(r, "eval")) == 1 for r in records.values())
    assert backend.refusals == 0 and backend.most_queued <= 4
    assert all(n <= 4 for _, n in backend.calls)  # arrays of up to the free slots, not one job a cell
    assert len(backend.calls) < 24 and not any(WAITING in r for r in records.values())


def test_where_the_limit_cannot_be_read_a_poll_makes_at_most_one_refused_call(tmp_path):
    ledger = L.Ledger(tmp_path)
    held(ledger, 12)
    backend = LimitedSlurm(4, known=False)
    watcher = Watcher(ledger, backend)
    records = follow(watcher, backend)
    assert all(r["final"]["status"] == "completed" for r in records.values())
    assert backend.refusals >= 1 and max(watcher.refusals) == 1  # refused, then halved: one refused call a poll
    assert all(len(L.attempts(r, "train")) == 1 and len(L.attempts(r, "eval")) == 1 for r in records.values())


def test_a_refused_submission_leaves_no_attempt_and_status_says_it_waits_for_a_slot(tmp_path):
    ledger = L.Ledger(tmp_path)
    records = list(held(ledger, 3).values())
    for r in records:
        r.pop(WAITING)
    backend = LimitedSlurm(2)
    try:
        submit_jobs(backend, ledger, records)
    except Q.SubmitRefused:
        pass
    saved = ledger.records()
    assert all(r["jobs"] == [] for r in saved.values())  # nothing reached Slurm: no attempt to count
    row = cell_row(saved["k00"], {"verdict": None})
    assert (row["train_attempts"], row["eval_attempts"]) == (0, 0)
    assert "waiting for a submission slot (sbatch refused" in row["reason"]


def test_the_launch_submits_what_fits_and_leaves_the_rest_waiting_for_the_watcher(tmp_path):
    sweep = load_sweep(SWEEPS / "smoke.yaml", [f"sweep.output_root={tmp_path}", "sweep.seeds=[0,1,2]"])
    sweep_dir = materialise(sweep, make_plan(sweep)).sweep_dir
    backend = LimitedSlurm(5)
    backend.array_limit = lambda: 1000
    report = launch(sweep, sweep_dir, backend, Options(executor="slurm"))
    cells = len(sweep.cells)
    assert (report.needed, report.sent, report.refused, backend.refusals) == (2 * cells, 5, None, 0)
    records = L.Ledger(sweep_dir).records()
    waiting = [r for r in records.values() if WAITING in r]
    assert len(waiting) == cells - 5 and all(r["jobs"] == [] and r["params"] for r in waiting)
    assert "5 of 10 queued" not in report.limit.words() and report.limit.words().startswith("0 of 5 queued")
    lines = limit_lines(report, watcher=True)
    assert lines[0].endswith("5 go out now (arrays split to fit), the watcher submits the rest as slots free")
    assert "the sweep's watcher submits them as slots free" in lines[1] and "run the same command" not in lines[1]
    assert "--as-job" in limit_lines(report, watcher=False)[1]


def test_the_limit_is_read_once_a_process_and_a_failure_is_said_not_asked_again(monkeypatch):
    asked: list = []

    def run(cmd):
        asked.append(cmd[0])
        if cmd[0] == "sacctmgr":
            raise Q.SlurmError("sacctmgr show assoc ... failed (1): Access denied")
        return {"scontrol": CONFIG, "squeue": "7\n8_1\n"}[cmd[0]]

    monkeypatch.setattr(Q, "run_tool", run)
    monkeypatch.setattr(lim, "_LIMITS", {})
    first, again = lim.submit_limit("lab", None, None), lim.submit_limit("lab", None, None)
    assert first.words() == again.words() == "unknown: sacctmgr show assoc ... failed (1): Access denied"
    assert asked == ["scontrol", "sacctmgr"]
    replies = {"scontrol": CONFIG, "squeue": "7\n8_1\n", "assoc": ASSOC, "qos": QOS}
    monkeypatch.setattr(Q, "run_tool",
                        lambda cmd: asked.append(cmd) or replies[cmd[3] if cmd[0] == "sacctmgr" else cmd[0]])
    monkeypatch.setattr(lim, "user_name", lambda: "root")
    known = lim.submit_limit("root", None, None)
    assert (known.limit, known.queued) == (4, 2) and ["squeue", "-h", "-r", "-u", "root", "-A", "root", "-o", "%i"] \
        in asked


def test_preflight_states_the_limit_as_a_row_that_never_fails_it(monkeypatch):
    """preflight says what validate and the dry run say: the limit against the sweep (a row that passes: a sweep
    over the limit goes out in parts), and a limit it cannot read as unknown, with why."""
    from orchestrator.preflight import limit as preflight_limit

    sweep = load_sweep(SWEEPS / "smoke.yaml", ["sweep.seeds=[0,1,2]"])
    plan = make_plan(sweep)
    monkeypatch.setattr(preflight_limit, "submit_limit", lambda *a: lim.SubmitLimit(4, "MaxSubmitJobs of x", queued=1))
    row = preflight_limit.limit_row(sweep, plan)
    assert row.check == "submission limit" and row.ok
    assert row.words.startswith("1 of 4 queued (MaxSubmitJobs of x); this sweep needs") and "the watcher" in row.words
    monkeypatch.setattr(preflight_limit, "submit_limit", lambda *a: lim.SubmitLimit(None, unknown="sacctmgr: denied"))
    row = preflight_limit.limit_row(sweep, plan)
    assert row.ok and row.words.startswith("unknown: sacctmgr: denied")
