"""An evaluation longer than its job's time allows finishes (issue 41), on the local Slurm cluster: the smoke cell
trained for real (the tiny model, DeepSpeed ZeRO-3), then its REAL evaluation job in shards (eval.shard_samples),
sent Slurm's warning signal twice while it runs (what --signal=USR2@delay sends before a time limit; sent at known
moments, as the fault matrix does, since Slurm checks the limit only every ~30 s). Each time the job asks for its
own requeue at once and Slurm runs it again under the same id; the requeued job starts at its first unfinished
shard. It ends COMPLETED with every shard there once, no shard computed twice, and the joined per-sample file byte
for byte an uninterrupted, unsharded evaluation's of the same checkpoint.

Slow (a training job, then an evaluation run three times): marked `reliability`, run by `make reliability`."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from orchestrator.cluster.executor import Options
from record.rundir import RunDir
from tests.support.fault_inject import requeues
from tests.support.fault_row import trainer_requeues
from tests.support.fault_sweep import REAL_CELL, FaultSweep, job_environment

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.fault_matrix, pytest.mark.reliability]
K, SHARD = 16, 96  # 200 problems x 16 samples in shards of 6 problems: 34 shards, a few seconds each
EVAL = ["eval.tasks=[tiny]", f"eval.k={K}", "eval.max_tokens=16", f"eval.shard_samples={SHARD}",
        "sweep.slurm.overrides.eval.time_min=30"]
REAL_BOTH = Options(executor="slurm")  # the real training and the real evaluation entries


def markers(fs: FaultSweep) -> set[str]:
    return {p.name for p in (fs.run_dir / "eval").glob("step_*/tiny/seed_0/shards/*.json")}


def eval_job(fs: FaultSweep) -> dict:
    return next((j for j in reversed(fs.record()["jobs"]) if j["kind"] == "eval"), {})


def wait_for(what, check, timeout_s: float = 900.0):
    deadline = time.monotonic() + timeout_s
    while not (found := check()):
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s}s"
        time.sleep(0.2)
    return found


def running(job_id: str) -> bool:
    out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True).stdout.split()
    return out == ["RUNNING"]


def test_an_evaluation_cut_twice_resumes_at_its_first_unfinished_shard_and_matches_one_whole_run(tmp_path):
    from eval import shard_plan
    from eval.evaluate import evaluate

    job_environment()
    fs = FaultSweep(tmp_path, (*REAL_CELL, *EVAL), REAL_BOTH, max_retries=1)
    try:
        fs.launch()
        seen = []
        for cut in (1, 2):
            job = wait_for("the evaluation job", lambda: eval_job(fs).get("job_id"))
            before = len(markers(fs))
            wait_for(f"two more shards before cut {cut}",
                     lambda job=job, before=before: running(job) and len(markers(fs)) >= before + 2)
            subprocess.run(["scancel", "--signal=USR2", job], check=True)
            seen.append(len(markers(fs)))
            wait_for(f"the requeue of cut {cut}", lambda job=job, cut=cut: requeues(job) >= cut)
        record = fs.follow()
    finally:
        fs.cancel_leftovers()
    assert record["final"]["status"] == "completed", record["decisions"]
    evals = [j for j in record["jobs"] if j["kind"] == "eval"]
    assert len(evals) == 1 and requeues(evals[0]["job_id"]) == 2, evals  # the same job, requeued in place twice
    asked = [r for r in trainer_requeues(fs.run_dir) if "evaluation" in r["by"]]
    assert [r["accepted"] for r in asked] == [True, True], asked
    planned = shard_plan.plan(200, K, SHARD)
    assert markers(fs) == {f"{s.name}.json" for s in planned}
    # Each run of the job says how many shards it found finished; none is computed again after that.
    log = Path(evals[0]["stdout"]).read_text() + Path(evals[0]["stderr"]).read_text()
    found = [int(n) for n in re.findall(rf"(\d+) of {len(planned)} shards finished", log)]
    assert found[-2:] == sorted(found[-2:]) and found[-1] >= seen[-1] > 0, (found, seen)
    done = re.findall(r"shard (p\d+-\d+\.r\d+-\d+) done", log)
    assert len(done) == len(set(done)), "a shard was computed twice"

    step = json.loads(RunDir(fs.run_dir).eval_result.read_text())["result"]["step"]
    whole = tmp_path / "whole" / fs.key
    shutil.copytree(fs.run_dir, whole, ignore=shutil.ignore_patterns("eval"))
    evaluate(whole, tracking_uri=f"sqlite:///{tmp_path / 'whole.db'}", shard_samples=200 * K, log=lambda _: None)
    name = f"step_{step:06d}"
    assert (fs.run_dir / "eval" / name / "tiny" / "seed_0.samples.jsonl").read_bytes() == \
        (whole / "eval" / name / "tiny" / "seed_0.samples.jsonl").read_bytes()
