"""The watcher's decisions (pure: a ledger record, the collapse verdict and the time in; one action out) and what a
(re)launch submits."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.cluster.entry import PREEMPTED_EXIT
from orchestrator.launch import ledger as L
from orchestrator.launch.baseline_jobs import baseline_ledger
from orchestrator.launch.ledger import Ledger
from orchestrator.launch.plan import triage
from orchestrator.watch.watcher import REQUEUE_GRACE_S, Watcher, decide, decide_baseline
from record.rundir import RunDir

NOW = 10_000.0


def cell(*jobs, cancelled=False, final=None) -> dict:
    """A record whose attempts are (kind, state, extra fields) in order."""
    record = L.new_record("sw", "k", "cell", {}, "/runs/sw/k")
    for i, (kind, state, extra) in enumerate(jobs):
        job = L.add_attempt(record, kind, f"sw-{kind}-k-a{i}", 100.0, job_id=f"{i + 1}", state=state,
                            exit_code="0:0", end=NOW - 2 * REQUEUE_GRACE_S)
        job.update(extra)
    record["user_cancelled"] = {"at": 1.0} if cancelled else None
    record["final"] = final
    return record


def train(state, **extra):
    return ("train", state, extra)


def evaluation(state, **extra):
    return ("eval", state, extra)


@pytest.mark.parametrize("state", ["NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "TIMEOUT", "CANCELLED", "VANISHED"])
def test_infrastructure_failures_are_resubmitted_and_the_waiting_evaluation_cancelled(state):
    action = decide(cell(train(state), evaluation("PENDING")), None, NOW)
    assert (action.do, action.kind, action.cancel) == ("resubmit", "train", ("2",))
    assert state in action.reason and "attempt 2" in action.reason and "1 of at most 3" in action.reason


def test_an_ended_job_slurm_may_requeue_in_place_gets_a_grace_period():
    assert decide(cell(train("NODE_FAIL", end=NOW - 5)), None, NOW) is None
    assert decide(cell(train("FAILED", end=NOW - 5, exit_code="1:0")), None, NOW).do == "resubmit"


def test_a_users_cancellation_is_never_resubmitted():
    for state in ("CANCELLED", "VANISHED"):  # a pending array task cancelled by the user leaves no sacct record
        action = decide(cell(train(state), cancelled=True), None, NOW)
        assert (action.do, action.status) == ("give_up", "cancelled") and "orchestrate cancel" in action.reason


def test_an_error_that_repeats_on_the_cell_is_not_resubmitted():
    once = decide(cell(train("FAILED", exit_code="1:0")), None, NOW)
    assert once.do == "resubmit"
    twice = decide(cell(train("FAILED", exit_code="1:0"), train("FAILED", exit_code="1:0")), None, NOW)
    assert (twice.do, twice.status) == ("give_up", "gave_up") and "failed twice with exit code 1:0" in twice.reason
    other = decide(cell(train("FAILED", exit_code="1:0"), train("FAILED", exit_code="0:9")), None, NOW)
    assert other.do == "resubmit"


def test_a_job_stopped_by_the_warning_signal_but_not_requeued_is_resubmitted_every_time():
    code = f"{PREEMPTED_EXIT}:0"
    twice = decide(cell(train("FAILED", exit_code=code), train("FAILED", exit_code=code)), None, NOW)
    assert twice.do == "resubmit" and "not requeued by Slurm" in twice.reason


def test_a_collapsed_run_is_not_resubmitted_whatever_ended_it():
    for state in ("NODE_FAIL", "FAILED", "TIMEOUT"):
        action = decide(cell(train(state)), "collapsed", NOW)
        assert (action.do, action.status) == ("give_up", "collapsed"), state
    assert decide(cell(train("NODE_FAIL")), "unstable", NOW).do == "resubmit"


def test_out_of_memory_is_reported_with_the_memory_used():
    action = decide(cell(train("OUT_OF_MEMORY", max_rss=int(1.5 * 1024**3), req_mem="1G", node="vm")), None, NOW)
    assert (action.do, action.status) == ("give_up", "out_of_memory")
    assert "MaxRSS 1.5G of ReqMem 1G" in action.reason and "on vm" in action.reason


def test_the_retry_budget_is_kept():
    spent = cell(train("NODE_FAIL"), train("NODE_FAIL"), train("PREEMPTED"))
    assert decide(spent, None, NOW, max_retries=2).status == "gave_up"
    assert "budget spent (2 of 2" in decide(spent, None, NOW, max_retries=2).reason
    assert decide(spent, None, NOW, max_retries=3).do == "resubmit"


def test_an_intent_that_never_reached_slurm_is_submitted_again_without_spending_the_budget():
    action = decide(cell(train("NODE_FAIL"), train("LOST")), None, NOW, max_retries=1)
    assert action.do == "resubmit" and "never reached Slurm" in action.reason


def test_after_training_the_evaluation_is_followed():
    assert decide(cell(train("COMPLETED")), None, NOW).do == "submit_eval"
    assert decide(cell(train("COMPLETED"), evaluation("PENDING", after="1")), None, NOW) is None
    done = decide(cell(train("COMPLETED"), evaluation("COMPLETED", after="1")), None, NOW)
    assert (done.do, done.status) == ("complete", "completed")
    retry = decide(cell(train("COMPLETED"), evaluation("NODE_FAIL", after="1")), None, NOW)
    assert (retry.do, retry.kind, retry.cancel) == ("resubmit", "eval", ())
    # cancelled because it waited on an older training attempt: submitted again, not a failure
    stale = cell(train("NODE_FAIL"), evaluation("CANCELLED", after="1"), train("COMPLETED"))
    assert decide(stale, None, NOW).do == "submit_eval"


def test_nothing_to_decide_while_live_or_final():
    for state in ("INTENT", "SUBMITTED", "PENDING", "RUNNING", "REQUEUED"):
        assert decide(cell(train(state)), None, NOW) is None
    assert decide(cell(train("FAILED"), final={"status": "gave_up"}), None, NOW) is None
    assert decide(cell(), None, NOW) is None


STATES = ["COMPLETED", "FAILED", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "TIMEOUT", "CANCELLED", "OUT_OF_MEMORY",
          "DEADLINE"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(STATES), st.sampled_from(["1:0", "0:9"])), min_size=1, max_size=8),
       st.integers(0, 4), st.sampled_from([None, "stable", "collapsed"]), st.booleans())
def test_never_more_resubmissions_than_the_budget_and_never_a_cancelled_or_collapsed_run(history, budget, verdict,
                                                                                         cancelled):
    """Replay a cell whose every training attempt ends as drawn: the watcher stops at the budget, and never
    resubmits a user's cancellation or a collapsed run."""
    record = cell(cancelled=cancelled)
    for state, code in history:
        L.add_attempt(record, "train", "n", 100.0, job_id="1", state=state, exit_code=code, end=0.0)
        action = decide(record, verdict, NOW, max_retries=budget)
        if action is None or action.do != "resubmit":
            break
        assert not cancelled and verdict != "collapsed" and state != "COMPLETED"
    assert len(L.attempts(record, "train")) - 1 <= budget


def records(**states) -> dict:
    out = {}
    for key, jobs in states.items():
        record = cell(*jobs[0]) if jobs else None
        if record is not None:
            record["run_key"], record["final"] = key, jobs[1]
            out[key] = record
    return out


def test_a_relaunch_submits_only_what_is_missing():
    recs = records(live=([train("RUNNING")], None), done=([train("COMPLETED"), evaluation("COMPLETED")],
                                                          {"status": "completed"}),
                   no_eval=([train("COMPLETED")], None), lost=([train("LOST")], None),
                   failed=([train("FAILED")], {"status": "gave_up"}),
                   collapsed=([train("FAILED")], {"status": "collapsed"}),
                   deciding=([train("NODE_FAIL")], None))
    keys = [*recs, "new"]
    t = triage(recs, keys)
    assert (t.train, t.eval) == (("lost", "new"), ("no_eval",))
    assert t.kept == {"training live": 1, "done": 1, "gave_up": 1, "collapsed": 1,
                      "training NODE_FAIL (the watcher decides)": 1}
    again = triage(recs, keys, retry_failed=True)
    assert set(again.train) == {"lost", "new", "failed", "deciding"} and set(again.reopened) == {"failed"}
    assert "collapsed" not in again.train


def test_sweep_status_of_a_settled_sweep():
    from orchestrator.tracking.sweep import sweep_status

    def records(*ends):
        return {str(i): {"final": {"status": e}} for i, e in enumerate(ends)}

    assert sweep_status(records("completed", "collapsed")) == "FINISHED"  # a collapse is a result
    assert sweep_status(records("completed", "cancelled")) == "KILLED"
    assert sweep_status(records("cancelled", "gave_up")) == "FAILED"
    assert sweep_status(records("completed", "out_of_memory")) == "FAILED"


def test_a_watcher_holding_the_lock_poll_by_poll_skips_a_poll_while_the_sweep_is_busy(tmp_path):
    """The watcher job takes the sweep's lock for one poll at a time; while a relaunch holds it, it skips the
    poll (and says so) instead of failing, and polls again once the lock is free."""
    ledger = Ledger(tmp_path)

    class Idle:  # a sweep with no jobs: a poll asks the backend nothing
        kind = "slurm"

        def rows(self, job_ids):
            raise AssertionError(f"no job to ask about, yet asked for {job_ids}")

        queued = find = rows

    def one_poll():
        return ledger.lock("watcher poll")

    busy: list[str] = []
    with ledger.lock("orchestrate sweep"):
        Watcher(ledger, Idle(), log=busy.append).run(poll_s=0.05, timeout_s=0.3, guard=one_poll)
    assert busy and all(line.startswith("poll skipped, the sweep is busy") for line in busy), busy
    free: list[str] = []
    Watcher(ledger, Idle(), log=free.append).run(poll_s=0.05, timeout_s=0.3, guard=one_poll)
    assert free == [] and not (ledger.dir / ".lock").exists()


# --- the baselines: one evaluation each, followed by the cells' rules -------------------------------------------

@pytest.mark.parametrize("state", ["NODE_FAIL", "PREEMPTED", "TIMEOUT", "CANCELLED", "VANISHED", "LOST"])
def test_a_baseline_ended_by_the_infrastructure_is_evaluated_again(state):
    action = decide_baseline(cell(evaluation(state)), NOW)
    assert action.do == "resubmit" and action.kind == "eval" and not action.cancel


def test_a_baseline_follows_the_cells_rules_for_the_rest():
    assert decide_baseline(cell(evaluation("COMPLETED")), NOW).status == "completed"
    assert decide_baseline(cell(evaluation("RUNNING")), NOW) is None  # in Slurm's hands
    assert decide_baseline(cell(), NOW) is None  # not submitted yet: the launch's
    assert decide_baseline(cell(evaluation("FAILED"), final={"status": "gave_up"}), NOW) is None
    assert decide_baseline(cell(evaluation("FAILED", exit_code="1:0")), NOW).do == "resubmit"  # once
    twice = cell(evaluation("FAILED", exit_code="1:0"), evaluation("FAILED", exit_code="1:0"))
    assert decide_baseline(twice, NOW).status == "gave_up"
    assert decide_baseline(cell(evaluation("CANCELLED"), cancelled=True), NOW).status == "cancelled"
    spent = cell(*[evaluation("NODE_FAIL")] * 4)
    assert decide_baseline(spent, NOW, max_retries=3).status == "gave_up"


class FakeBackend:
    """Slurm's answers for fixed job states, and the sbatch calls made (job ids 9xx)."""

    kind = "slurm"

    def __init__(self, jobs: dict[str, tuple[str, str, float]]):
        self.jobs, self.submitted = jobs, []  # job id -> (name, state, submit time)

    def rows(self, job_ids):
        return {j: [L.JobRow(j, name, state, "0:0", submit=at, end=at)]
                for j in job_ids if j in self.jobs for name, state, at in [self.jobs[j]]}

    def queued(self, names):
        return {}

    def find(self, names, since):
        return {}

    def cancel(self, job_ids):
        pass

    def submit(self, kind, entry, run_dirs, params, name, code, dependency=None, parallelism=1):
        self.submitted.append((kind, name))
        job_id = f"9{len(self.submitted):02d}"
        self.jobs[job_id] = (name, "PENDING", time.time())
        return [SimpleNamespace(job_id=job_id, stdout="", stderr="") for _ in run_dirs]


def test_the_watcher_resubmits_a_baseline_killed_by_a_node_failure_and_waits_for_it(tmp_path):
    """A settled set of cells is not a settled sweep while a baseline's evaluation is still to run: the watcher
    resubmits the baseline (its own ledger, the eval entry) and ends only once it is final."""
    ledger, bases = Ledger(tmp_path), baseline_ledger(tmp_path)
    done = cell(train("COMPLETED"), evaluation("COMPLETED"), final={"status": "completed"})
    ledger.save({**done, "run_key": "c1"})
    base = L.new_record("sw", "b1", "qwen-base", {}, str(tmp_path / "baselines" / "b1"))
    L.add_attempt(base, "eval", "sw-eval-b1-a1", 100.0, job_id="77", state="RUNNING")
    base.update(code="/code", entries={"eval": "orchestrator.jobs:eval_job"}, params={"eval": {"time": 5}})
    bases.save(base)
    backend = FakeBackend({"77": ("sw-eval-b1-a1", "NODE_FAIL", 150.0)})
    watcher = Watcher(ledger, backend, grace_s=0.0)
    records = watcher.poll()
    assert backend.submitted == [("eval", "sw-eval-b1-a2")] and not watcher.settled(records)
    again = bases.load("b1")
    assert [j["state"] for j in again["jobs"]] == ["NODE_FAIL", "SUBMITTED"] and again["decisions"][-1]["action"] \
        == "resubmit"
    job = again["jobs"][-1]["job_id"]
    backend.jobs[job] = (*backend.jobs[job][:1], "COMPLETED", backend.jobs[job][2])
    records = watcher.poll()
    assert watcher.settled(records) and bases.load("b1")["final"]["status"] == "completed"
    assert backend.submitted == [("eval", "sw-eval-b1-a2")]  # nothing more


def test_a_job_slurm_requeues_in_place_is_never_submitted_again_beside_it(tmp_path):
    """The race behind the fault matrix's requeue in place, forced: a training ends CANCELLED (killed), and while
    the watcher polls, Slurm brings the same job id back (sacct's newest record PENDING, then RUNNING), as it does for
    a node failure of a --requeue job. The watcher submits no second training beside it; it submits only the
    evaluation once the requeued job has completed."""
    ledger = Ledger(tmp_path)
    record = L.new_record("sw", "k1", "cell", {}, str(tmp_path / "k1"))
    L.add_attempt(record, "train", "sw-train-k1-a1", time.time() - 100, job_id="5", state="RUNNING")
    record.update(code="/code", entries={"train": "t", "eval": "e"}, params={"train": {}, "eval": {}})
    ledger.save(record)
    now = time.time()
    killed = ("sw-train-k1-a1", "CANCELLED", now - 90)  # a requeue moves Submit forward: the newer record wins
    history = [[killed], [killed, ("sw-train-k1-a1", "PENDING", now - 60)],
               [killed, ("sw-train-k1-a1", "RUNNING", now - 60)], [killed, ("sw-train-k1-a1", "COMPLETED", now - 60)]]

    class Requeuing(FakeBackend):
        def rows(self, job_ids):
            return {"5": [L.JobRow("5", name, state, "0:15", submit=at, end=now - 1) for name, state, at in
                          self.history[0]]} if "5" in job_ids else {}

    backend = Requeuing({})
    # Inside the grace period every poll waits; past it, a poll that sees the requeue (the same id live again)
    # still waits. (Past the grace with no requeue in sight, the kill is resubmitted: the rule's other side.)
    for grace, seen in ((120.0, history[:3]), (0.0, history[1:3])):
        for rows in seen:
            backend.history = [rows]
            Watcher(ledger, backend, grace_s=grace).poll()
            assert backend.submitted == [], (grace, rows)
    backend.history = [history[3]]
    Watcher(ledger, backend, grace_s=0.0).poll()
    assert [kind for kind, _ in backend.submitted] == ["eval"]
    assert len(L.attempts(ledger.load("k1"), "train")) == 1


def test_an_evaluation_attempt_that_finished_shards_spends_no_retry_budget():
    """A 26 h evaluation in 4 h jobs needs seven attempts: those that finished a shard (eval/shard_plan.py markers
    name their job) advanced it and are not counted; an attempt that finished none is, so a shard that can never
    fit still ends."""
    timeouts = [evaluation("TIMEOUT") for _ in range(5)]
    record = cell(train("COMPLETED"), *timeouts)  # job ids 2..6 are the evaluations
    assert decide(record, None, NOW, max_retries=3).status == "gave_up"
    action = decide(record, None, NOW, max_retries=3, progressed=frozenset({"2", "3", "4", "5", "6"}))
    assert action.do == "resubmit" and action.kind == "eval"
    assert "(0 of at most 3 resubmissions; 5 attempt(s) that finished evaluation shards not counted)" in action.reason
    stuck = decide(record, None, NOW, max_retries=3, progressed=frozenset({"2"}))  # four attempts without a shard
    assert stuck.status == "gave_up" and "budget spent (3 of 3" in stuck.reason


def test_the_jobs_that_finished_shards_are_read_from_the_shard_markers(tmp_path, monkeypatch):
    from eval import shard_plan

    monkeypatch.setenv("SLURM_JOB_ID", "77")
    monkeypatch.delenv("SLURM_ARRAY_JOB_ID", raising=False)
    root = RunDir(tmp_path).eval_step(4)
    shard = shard_plan.Shard(0, 1, 0, 1)
    row = {"doc_id": 0, "samples": ["x"], "scores": [1.0], "answers": ["1"]}
    shard_plan.save(root, "tiny", 0, shard, [row], {}, 0.1)
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "80")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "3")
    shard_plan.save(root, "tiny", 1, shard, [row], {}, 0.1)
    assert shard_plan.jobs_with_shards(tmp_path) == {"77", "80_3"}


def test_status_says_how_many_shards_a_running_evaluation_has_done():
    from orchestrator.status.outcomes import cell_row, shards_done

    assert shards_done({"tiny/seed_0": [3, 10], "tiny_ood/seed_0": [10, 10]}) == (13, 20)
    assert shards_done(None) is None and shards_done({"x": "bad"}) is None
    record = cell(train("COMPLETED"), evaluation("RUNNING"))
    row = cell_row(record, {"eval_shards": (13, 20)})
    assert row["state"] == "evaluating" and row["reason"] == "evaluation: 13 of 20 shards done"
    assert cell_row(cell(train("RUNNING")), {"eval_shards": (13, 20)})["reason"] is None
