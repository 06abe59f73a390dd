"""The sweep's watcher job, decided from watcher.json and Slurm's answer (pure): is one following the sweep, should
`orchestrate sweep` start one (never two), what `status` says; and the profile's `watcher` key."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.cluster.executor import Options, Submitted, watcher_params
from orchestrator.cluster.profile import load_profile
from orchestrator.cluster.query import JobRow
from orchestrator.launch.materialise import materialise
from orchestrator.launch.plan import make_plan
from orchestrator.launch.submit import launch
from orchestrator.status import watcher_info as ws
from orchestrator.sweep.expand import load_sweep

REPO = Path(__file__).resolve().parents[2]

NOW = 1_000_000.0
INFO = {"job_id": "812", "name": "sw-watcher", "at": NOW - 600, "params": {"partition": "service"}}


def said(*args, **kwargs) -> str:
    """What `orchestrate status` prints about the watcher."""
    return ws.status_of(*args, **kwargs)["said"]


def rows(state: str, name: str = "sw-watcher", submit: float = NOW - 600) -> dict:
    return {"812": [JobRow("812", name, state, submit=submit)]}


@pytest.mark.parametrize("state", ["PENDING", "RUNNING", "REQUEUED", "COMPLETING", "SUSPENDED"])
def test_a_pending_or_running_watcher_is_never_doubled(state):
    start, why = ws.should_start(INFO, rows(state), settled=False, now=NOW)
    assert not start and why == f"watcher job 812 is {state}: it follows the sweep"


@pytest.mark.parametrize("state", ["COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"])
def test_a_watcher_that_is_gone_or_finished_is_replaced(state):
    start, why = ws.should_start(INFO, rows(state), settled=False, now=NOW)
    assert start and why == f"watcher job 812 is {state}"


def test_no_watcher_yet_starts_one_and_a_settled_sweep_needs_none():
    assert ws.should_start(None, {}, settled=False, now=NOW) == (True, "no watcher job was started for this sweep")
    start, why = ws.should_start(INFO, rows("CANCELLED"), settled=True, now=NOW)
    assert not start and "settled" in why
    assert not ws.should_start(None, {}, settled=True, now=NOW)[0]


def test_a_job_sacct_does_not_know_yet_is_live_for_a_while_then_gone():
    fresh = {**INFO, "at": NOW - 10}
    assert ws.should_start(fresh, {}, settled=False, now=NOW) == (
        False, "watcher job 812 was just submitted (not in Slurm's accounting yet): it follows the sweep")
    assert ws.should_start(INFO, {}, settled=False, now=NOW) == (True, "watcher job 812 is unknown to Slurm")


def test_a_watcher_that_polled_runs_even_before_slurm_s_accounting_has_its_record():
    """slurmdbd lags under load (CI saw squeue say RUNNING while sacct had no row): a poll written after the
    submission shows the job runs; a poll older than the lag allowance shows nothing."""
    polled = {**INFO, "at": NOW - 30, "last_poll": NOW - 2}
    assert ws.following(polled, {}, now=NOW) == (True, "watcher job 812 is RUNNING")
    said = ws.status_of(polled, {}, settled=False, sweep_dir=Path("sw"), now=NOW)["said"]
    assert said.startswith("watcher: job 812 is RUNNING in partition service, last poll") and \
        "Slurm's accounting has no record of it yet" in said, said
    stale = {**INFO, "last_poll": NOW - 500}
    assert ws.following(stale, {}, now=NOW) == (False, "watcher job 812 is unknown to Slurm")


def test_a_reused_job_id_is_not_our_watcher():
    """After a controller reset Slurm reuses ids: a row with another name, or submitted well before watcher.json
    says ours was, is someone else's job."""
    assert ws.should_start(INFO, rows("RUNNING", name="other-job"), settled=False, now=NOW)[0]
    assert ws.should_start(INFO, rows("RUNNING", submit=NOW - 3600), settled=False, now=NOW)[0]
    # the newest of several records of our job wins (a requeue after a node failure)
    requeued = {"812": [JobRow("812", "sw-watcher", "NODE_FAIL", submit=NOW - 600),
                        JobRow("812", "sw-watcher", "PENDING", submit=NOW - 600)]}
    assert not ws.should_start(INFO, requeued, settled=False, now=NOW)[0]


def test_a_watcher_that_ended_on_a_settled_sweep_is_replaced_once_a_relaunch_reopens_it():
    """It said so under the lock: while its job is still finishing (RUNNING), a relaunch that added cells must not
    count on it."""
    ended = {**INFO, "ended": {"at": NOW - 5, "why": "the sweep is settled: 2 done"}}
    assert ws.ids_to_ask(ended) == [] and ws.ids_to_ask(INFO) == ["812"] and ws.ids_to_ask(None) == []
    start, why = ws.should_start(ended, rows("RUNNING"), settled=False, now=NOW)
    assert start and "ended at" in why and "the sweep is settled: 2 done" in why


def test_status_names_the_job_its_state_partition_and_last_poll():
    polled = {**INFO, "last_poll": NOW - 20}
    line = said(polled, rows("RUNNING"), settled=False, sweep_dir="/r/sw", now=NOW)
    assert line.startswith("watcher: job 812 is RUNNING in partition service, last poll ") and "(20 s ago)" in line
    line = said(INFO, rows("PENDING"), settled=False, sweep_dir="/r/sw", now=NOW)
    assert "job 812 is PENDING" in line and "no poll yet" in line


def test_status_hints_how_to_start_a_watcher_for_an_unsettled_sweep_without_one():
    for info, state in ((None, None), (INFO, "CANCELLED")):
        line = said(info, rows(state) if state else {}, settled=False, sweep_dir="/r/sw", now=NOW)
        assert line.startswith("watcher: none follows this sweep") and "orchestrate watch /r/sw --as-job" in line
    ended = {**INFO, "ended": {"at": NOW, "why": "the sweep is settled: 2 done"}}
    line = said(ended, {}, settled=True, sweep_dir="/r/sw", now=NOW)
    assert line.startswith("watcher: job 812 ended at") and line.endswith("the sweep is settled: 2 done")


def test_status_json_carries_the_watcher_as_the_table_says_it():
    """Every case above: --json's entry holds the line the table prints, and the fields behind it."""
    polled = {**INFO, "last_poll": NOW - 20, "polls": 3}
    running = ws.status_of(polled, rows("RUNNING"), settled=False, sweep_dir="/r/sw", now=NOW)
    assert running["said"] == said(polled, rows("RUNNING"), False, "/r/sw", NOW)
    assert {k: running[k] for k in ("watcher", "job_id", "following", "state", "partition", "last_poll", "polls",
                                    "ended")} == {"watcher": True, "job_id": "812", "following": True,
                                                  "state": "RUNNING", "partition": "service", "last_poll": NOW - 20,
                                                  "polls": 3, "ended": None}
    ended = {**INFO, "ended": {"at": NOW, "why": "the sweep is settled: 2 done"}}
    closed = ws.status_of(ended, {}, settled=True, sweep_dir="/r/sw", now=NOW)
    assert not closed["following"] and closed["ended"]["why"] == "the sweep is settled: 2 done"
    assert closed["said"].endswith("the sweep is settled: 2 done")
    none = ws.status_of(None, {}, settled=False, sweep_dir="/r/sw", now=NOW)
    assert none["job_id"] is None and not none["following"] and "--as-job" in none["said"]


def test_the_watcher_marks_its_polls_and_its_end_only_while_watcher_json_names_it(tmp_path):
    ws.write_info(tmp_path, dict(INFO))
    ws.mark_poll(tmp_path, "999", NOW)  # an old watcher Slurm brought back: not the one named
    assert "last_poll" not in ws.read_info(tmp_path)
    ws.mark_poll(tmp_path, "812", NOW)
    ws.mark_poll(tmp_path, "812", NOW + 5)
    assert ws.read_info(tmp_path)["last_poll"] == NOW + 5 and ws.read_info(tmp_path)["polls"] == 2
    ws.mark_ended(tmp_path, "812", "the sweep is settled: 1 done", NOW + 9)
    assert ws.read_info(tmp_path)["ended"] == {"at": NOW + 9, "why": "the sweep is settled: 1 done"}


def test_the_profiles_watcher_partition_falls_back_to_the_training_partition():
    problems: list[str] = []
    local = load_profile("local", {}, problems)
    assert watcher_params(local) == {"partition": "service", "time": 60, "mem": "256M"}
    a100 = load_profile("a100", {}, problems)
    assert watcher_params(a100)["partition"] == "cpu"
    unset = load_profile("a100", {"watcher": {"partition": None}, "account": "proj"}, problems)
    assert watcher_params(unset) == {"partition": "gpu", "account": "proj", "time": 240, "mem": "1G"}
    assert problems == []


def test_a_bad_watcher_key_is_one_message_per_problem():
    problems: list[str] = []
    bad = {"watcher": {"partition": "service\n#SBATCH --wrap=x", "mem_gb": 0, "time_min": 0}}
    assert load_profile("local", bad, problems) is None
    assert [p.split(":")[0] for p in problems] == ["sweep.slurm.overrides.watcher.partition",
                                                   "sweep.slurm.overrides.watcher.mem_gb",
                                                   "sweep.slurm.overrides.watcher.time_min"]
    assert "a control character '\\n'" in problems[0]
    problems.clear()
    assert load_profile("local", {"watcher": {"cpus": 4}}, problems) is None
    assert problems == ["sweep.slurm.overrides.watcher.cpus: unknown key; valid: partition, mem_gb, time_min"]


class FakeSlurm:
    """A Slurm backend that records its calls: sacct answers from `states`, sbatch hands out ids."""

    kind = "slurm"

    def __init__(self, states: dict[str, str], calls: list):
        self.states, self.calls, self.next_id = states, calls, 500

    def rows(self, job_ids):
        self.calls.append(("sacct", sorted(job_ids)))
        return {j: [JobRow(j, "sw-watcher" if j == "812" else "x", self.states[j], submit=NOW)]
                for j in job_ids if j in self.states}

    def queued(self, names):
        return {}

    def find(self, names, since):
        return {}

    def submit(self, kind, entry, run_dirs, params, name, code, dependency=None, parallelism=1):
        self.calls.append(("sbatch", kind))
        self.next_id += 1
        return [Submitted(f"{self.next_id}_{i}", "o", "e") for i in range(len(run_dirs))]

    def array_limit(self):
        return 1000


class FakeStarter:
    def __init__(self, calls: list, ids=()):
        self.calls, self._ids = calls, list(ids)

    def ids(self):
        return self._ids

    def __call__(self, records, rows, declared=()):
        self.calls.append(("watcher", sorted(rows), len(records)))
        return "started"


def test_launch_asks_about_the_watcher_in_its_one_sacct_and_starts_it_before_the_cells_sbatch(tmp_path):
    sweep = load_sweep(REPO / "sweeps" / "smoke.yaml", [f"sweep.output_root={tmp_path}"])
    sweep_dir = materialise(sweep, make_plan(sweep)).sweep_dir
    calls: list = []
    report = launch(sweep, sweep_dir, FakeSlurm({}, calls), Options(executor="slurm"), watcher=FakeStarter(calls))
    assert calls == [("watcher", [], 2), ("sbatch", "train"), ("sbatch", "eval")] and report.watcher == "started"
    calls.clear()  # a relaunch: nothing to submit; one sacct for the cells' jobs and the watcher job together
    backend = FakeSlurm({"501_0": "RUNNING", "501_1": "PENDING", "502_0": "PENDING", "502_1": "PENDING",
                         "812": "RUNNING"}, calls)
    again = launch(sweep, sweep_dir, backend, Options(executor="slurm"), watcher=FakeStarter(calls, ["812"]))
    [(query, ids), watcher] = calls
    assert query == "sacct" and "812" in ids and "501_0" in ids
    assert watcher[:2] == ("watcher", ["501_0", "501_1", "502_0", "502_1", "812"]) and again.sbatch == 0
