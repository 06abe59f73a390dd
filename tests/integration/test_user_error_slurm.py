"""A user's mistake that only the job can find (issue 43, item 6), on the real local cluster: the model
(`smollm2-135m-instruct`) is in a model cache only the jobs see (the site's `env` sets their COMEDY_CACHE;
tests/support/job_only_model.py), the login node's cache is empty, so validation says the prompt budget is left to
the job; the real training entry then finds the template too long for
rollout.max_prompt_tokens, ends with USER_ERROR_EXIT and user_error.json, and the sweep's watcher job gives each
cell up as `user_error` after its one attempt (no resubmission), which `status` and `status --json` show with the
message and its fix."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from orchestrator.cluster.entry import USER_ERROR_EXIT
from orchestrator.launch.ledger import Ledger, attempts
from tests.support.job_only_model import make_job_only_cache
from tests.support.slurm_queue import cancel_named

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
ENV = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "COMEDY_CACHE")}
# Both cells at once, one CPU each; room for torch, DeepSpeed and transformers to import.
ONE_CPU = ["sweep.slurm.overrides.cpus_per_task=1", "sweep.slurm.overrides.mem_gb=1.5",
           "sweep.slurm.overrides.eval.cpus_per_task=1", "sweep.slurm.overrides.eval.mem_gb=0.5",
           "sweep.slurm.overrides.array_parallelism=2"]


def orchestrate(*args: str, cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess:
    """The login node's command, with a model cache of its own where SmolLM2 was never fetched."""
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env={**ENV, "COMEDY_CACHE": str(cwd / "login-cache")})


@pytest.fixture
def sweep_args(tmp_path):
    name = f"u{uuid.uuid4().hex[:8]}"
    make_job_only_cache(tmp_path / "job-cache")
    # fractions: its template and instruction take 42 tokens with the tokenizer the jobs find, over 32
    args = [str(REPO / "sweeps" / "smoke.yaml"), f"sweep.name={name}", f"sweep.output_root={tmp_path}",
            f"tracking.tracking_uri=sqlite:///{tmp_path / 'mlflow.db'}", "data=fractions",
            "rollout.max_prompt_tokens=32", "model=smollm2-135m-instruct",
            f"+sweep.slurm.overrides.site.env.COMEDY_CACHE={tmp_path / 'job-cache'}", *ONE_CPU]
    yield name, args, tmp_path / name
    cancel_named(name)


def test_a_user_error_found_in_the_job_runs_once_is_not_resubmitted_and_is_shown_in_status(
        sweep_args, tmp_path, slurm_cluster):
    name, args, sweep_dir = sweep_args
    checked = orchestrate("validate", *args, "--no-bias", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    said = " ".join(checked.stdout.split())
    assert "model smollm2-135m-instruct: not readable on this node" in said and "left to the job" in said, said

    launched = orchestrate("sweep", *args, "--poll", "2", cwd=tmp_path)
    assert launched.returncode == 0, launched.stdout + launched.stderr
    deadline = time.monotonic() + 480
    while not ((ledger := Ledger(sweep_dir)).exists() and (records := ledger.records())
               and all(r["final"] for r in records.values())):
        assert time.monotonic() < deadline, f"the cells were not settled in time: {Ledger(sweep_dir).records()}"
        time.sleep(2)

    for record in records.values():
        assert record["final"]["status"] == "user_error", record["final"]
        train = attempts(record, "train")
        assert len(train) == 1 and train[0]["exit_code"] == f"{USER_ERROR_EXIT}:0", train  # run once
        assert not [d for d in record["decisions"] if d["action"] == "resubmit"], record["decisions"]
        written = json.loads((Path(record["run_dir"]) / "user_error.json").read_text())
        assert written["job_id"] == train[0]["job_id"] and "alone take 42 tokens" in written["message"]

    shown = orchestrate("status", str(sweep_dir), "--json", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    rows = [r for r in json.loads(shown.stdout) if not r.get("baseline") and "run_key" in r]
    assert len(rows) == 2 and all(r["state"] == "user_error" for r in rows), rows
    for row in rows:
        assert "rollout.max_prompt_tokens=32 does not fit the chat template" in row["user_error"]["message"]
        assert "--retry-failed" in row["user_error"]["fix"] and "fix:" in row["reason"]
    table = orchestrate("status", str(sweep_dir), cwd=tmp_path)
    assert "user_error" in table.stdout and "alone take 42" in " ".join(table.stdout.split()), table.stdout

    # a relaunch keeps them: nothing is submitted again
    again = orchestrate("sweep", *args, "--no-watcher", cwd=tmp_path)
    assert again.returncode == 0 and "kept: 2 user_error" in again.stdout, again.stdout + again.stderr
