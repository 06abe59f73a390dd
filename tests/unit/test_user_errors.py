"""Mistakes before the queue (issue 43, item 6): what a job would find at its start with the tokenizer and the data
is found at validation; a user's mistake a job finds anyway ends its cell as `user_error`, never resubmitted, with
its message and fix in status; an unknown config group in the file is one problem among the others; preflight names
a partition the cluster lacks as such. Infrastructure failures are retried as before."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.cluster.entry import USER_ERROR_EXIT
from orchestrator.launch.ledger import add_attempt, cell_status, new_record
from orchestrator.launch.plan import triage
from orchestrator.preflight import testonly
from orchestrator.status.outcomes import cell_row
from orchestrator.sweep.expand import load_sweep
from orchestrator.sweep.resource_plan import plan_report
from orchestrator.watch.watcher import decide
from record.errors import ConfigError, UserError

REPO = Path(__file__).resolve().parents[2]
SMOKE = REPO / "sweeps" / "smoke.yaml"


def test_the_prompt_budget_sweep_is_refused_at_validation():
    """The tiny model with `data: math` and the smoke sweep's max_prompt_tokens 64: the job's own check, made
    here once for both cells, beside every other problem."""
    _, problems = plan_report(load_sweep(SMOKE, ["data=math"]))
    budget = [p for p in problems if "max_prompt_tokens=64 does not fit the chat template of tiny" in p]
    assert len(budget) == 1, problems
    assert "math instruction alone take 73 tokens" in budget[0] and "2 cell(s)" in budget[0]
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "validate", str(SMOKE), "data=math",
                           "--no-bias"], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 2 and "alone take 73 tokens" in done.stdout, done.stdout + done.stderr


def test_a_model_only_the_job_can_read_is_left_to_the_job_and_said_so():
    lines, problems = plan_report(load_sweep(SMOKE, ["model.name_or_path=comedy-test/not-on-this-node",
                                                     "rollout.max_prompt_tokens=8"]))
    assert any("comedy-test/not-on-this-node" in line and "left to the job" in line for line in lines), lines
    assert not [p for p in problems if "chat template" in p], problems


def _failed(exit_code: str, attempts: int = 1) -> dict:
    record = new_record("s", "key1", "k1-reward-s0", {}, Path("/nowhere/key1"))
    for i in range(attempts):
        job = add_attempt(record, "train", "s-train-key1", 0.0, job_id=f"{10 + i}_0")
        job.update(state="FAILED", exit_code=exit_code, end=0.0)
    return record


def test_a_user_error_ends_the_cell_at_once_with_the_jobs_message_and_fix():
    error = {"message": "rollout.max_prompt_tokens=32 does not fit ...", "fix": "fix it, then --retry-failed",
             "job_id": "10_0"}
    action = decide(_failed(f"{USER_ERROR_EXIT}:0"), None, 1000.0, user_error=error)
    assert action.do == "give_up" and action.status == "user_error"
    assert action.error == {"message": error["message"], "fix": error["fix"]}
    assert "not resubmitted" in action.reason and error["message"] in action.reason
    # without the file (a job killed while writing it), still the user's: where to read the message is said
    action = decide(_failed(f"{USER_ERROR_EXIT}:0"), None, 1000.0)
    assert action.status == "user_error" and "orchestrate logs key1" in action.error["message"]


def test_infrastructure_failures_are_retried_as_before():
    assert decide(_failed("1:0"), None, 1000.0).do == "resubmit"  # a first FAILED: maybe transient
    assert decide(_failed("1:0", 2), None, 1000.0).status == "gave_up"  # the same exit twice


def test_a_relaunch_keeps_a_user_error_and_retry_failed_reopens_it_once_fixed():
    record = _failed(f"{USER_ERROR_EXIT}:0")
    record["final"] = {"status": "user_error", "reason": "r", "at": 1.0, "error": {"message": "m", "fix": "f"}}
    assert triage({"key1": record}, ["key1"]).kept == {"user_error": 1}
    assert triage({"key1": record}, ["key1"], retry_failed=True).train == ("key1",)
    assert cell_status(record) == "user_error"


def test_status_shows_the_message_and_its_fix_beside_the_cell():
    record = _failed(f"{USER_ERROR_EXIT}:0")
    record["final"] = {"status": "user_error", "reason": "train job 10_0 FAILED: not resubmitted: too long",
                       "at": 1.0, "error": {"message": "too long", "fix": "raise it, then --retry-failed"}}
    row = cell_row(record, {"step": None, "metrics": {}})
    assert row["state"] == "user_error" and row["user_error"] == {"message": "too long",
                                                                   "fix": "raise it, then --retry-failed"}
    assert "too long" in row["reason"] and "fix: raise it, then --retry-failed" in row["reason"]
    json.dumps(row)  # what --json prints


JOB = """
import sys
from orchestrator.cluster.entry import run_train
run_train(sys.argv[1], sys.argv[2])
"""


def raise_user_error(run_dir):
    raise UserError("data.train_path: /x does not exist; run `orchestrate data prepare`")


def raise_config_error(run_dir):
    raise ConfigError(["optim.lr: -1; give a number in (0, 1]"], "run config")


@pytest.mark.parametrize("entry", ["raise_user_error", "raise_config_error"])
def test_the_job_entry_ends_a_user_error_with_its_exit_code_and_user_error_json(tmp_path, entry):
    run_dir = tmp_path / "sweep" / "key1"
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text("seed: 0\n")
    done = subprocess.run([sys.executable, "-c", JOB, f"tests.unit.test_user_errors:{entry}", str(run_dir)],
                          cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO), "SLURM_ARRAY_JOB_ID": "10",
                               "SLURM_ARRAY_TASK_ID": "0"})
    assert done.returncode == USER_ERROR_EXIT, done.stderr
    written = json.loads((run_dir / "user_error.json").read_text())
    assert written["kind"] == "train" and written["job_id"] == "10_0" and "--retry-failed" in written["fix"]
    assert ("does not exist" if entry == "raise_user_error" else "optim.lr") in written["message"]


def test_an_unknown_config_group_in_the_file_is_listed_beside_its_other_problems(tmp_path):
    text = SMOKE.read_text().replace("model: tiny", "model: tinyy").replace("estimator: k1", "estimator: k4")
    (tmp_path / "typo.yaml").write_text(text)
    with pytest.raises(ConfigError) as err:
        load_sweep(tmp_path / "typo.yaml", [])
    problems = err.value.problems
    assert any("Could not find 'model/tinyy'" in p and "model=tiny in its place" in p for p in problems), problems
    assert any("unknown value 'k4'" in p for p in problems), problems


def test_preflight_names_a_partition_the_cluster_lacks(monkeypatch):
    sweep = load_sweep(SMOKE, ["sweep.slurm.overrides.partition=gpu-typo"])
    from orchestrator.launch.plan import make_plan

    asked = []
    monkeypatch.setattr(testonly, "partitions", lambda: {"local", "service"})
    monkeypatch.setattr(testonly, "test_only", lambda args, script=None: (asked.append(args) or (True, "ok")))
    rows = testonly.rows(sweep, make_plan(sweep))
    bad = [r for r in rows if not r.ok]
    assert {r.group for r in bad} == {g.name for g in make_plan(sweep).groups}  # the watcher is in `service`
    assert all("partition 'gpu-typo' does not exist on this cluster (sinfo lists: local, service)" in r.words
               and "sinfo" in r.fix for r in bad)
    assert len(asked) == 1  # only the watcher was put to Slurm
