"""The trainer as Slurm runs it: 2 ranks of DeepSpeed ZeRO-3 under srun through submitit, and a time limit that
the job survives by checkpointing on Slurm's warning signal and requeueing itself."""

import json
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests.support.slurm_jobs import train_from_yaml
from tests.support.trainer_run import config_dict

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def _executor(folder, slurm_cluster, **params):
    import submitit

    ex = submitit.AutoExecutor(folder=str(folder), cluster="slurm")
    ex.update_parameters(slurm_partition=slurm_cluster.partition, nodes=1, cpus_per_task=1, mem_gb=8,
                         slurm_setup=[f"export PYTHONPATH={ROOT}", "export DS_ACCELERATOR=cpu", f"cd {ROOT}"],
                         **params)
    return ex


def _write(tmp_path, name, **sections):
    d = config_dict(tmp_path, {"estimator": "k1", "placement": "loss", "beta": 0.1}, **sections)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(d))
    return path


def test_two_rank_zero3_run_through_submitit(tmp_path, slurm_cluster):
    config = _write(tmp_path, "two", optim={"steps": 2, "batch_prompts": 4, "minibatch_prompts": 4})
    job = _executor(tmp_path / "logs", slurm_cluster, tasks_per_node=2, timeout_min=10).submit(
        train_from_yaml, str(config), str(tmp_path / "run"))
    results = job.results()
    assert sorted(r["rank"] for r in results) == [0, 1] and {r["world"] for r in results} == {2}
    tag = json.loads((tmp_path / "run" / "checkpoints" / "latest.json").read_text())["tag"]
    shards = sorted(p.name for p in (tmp_path / "run" / "checkpoints" / tag).glob("zero_pp_rank_*_model_states.pt"))
    assert len(shards) == 2, shards  # ZeRO-3 partitioned the model over both ranks


def test_time_limit_signal_checkpoint_requeue_finishes_the_run(tmp_path, slurm_cluster):
    steps = 40
    config = _write(tmp_path, "limit", optim={"steps": steps, "batch_prompts": 4, "minibatch_prompts": 4},
                    checkpoint={"every": 1000, "keep_last": 1})
    # Slurm warns 45 s before the 1-minute limit: the run needs longer than that, so it must be requeued.
    job = _executor(tmp_path / "logs", slurm_cluster, tasks_per_node=1, timeout_min=1, signal_delay_s=45).submit(
        train_from_yaml, str(config), str(tmp_path / "run"))
    latest = tmp_path / "run" / "checkpoints" / "latest.json"
    deadline = time.time() + 600
    while not (latest.exists() and json.loads(latest.read_text())["step"] == steps):
        assert time.time() < deadline, f"run did not finish; sacct:\n{_sacct(job.job_id)}"
        time.sleep(2)
    saved = json.loads(latest.read_text())
    assert saved["step"] == steps
    # It was requeued at least once, each time from a checkpoint taken on the signal (every=1000 never fires).
    assert "REQUEUED" in _sacct(job.job_id) or _restarts(job.job_id) >= 1
    verdict = json.loads((tmp_path / "run" / "verdict.json").read_text())
    assert verdict["verdict"] in ("stable", "unstable", "collapsed")
    subprocess.run(["scancel", job.job_id], check=False)


def _sacct(job_id: str) -> str:
    return subprocess.run(["sacct", "-j", job_id, "-D", "--parsable2", "-o", "JobID,State,Start,End"],
                          capture_output=True, text=True).stdout


def _restarts(job_id: str) -> int:
    out = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True).stdout
    for token in out.split():
        if token.startswith("Restarts="):
            return int(token.split("=")[1])
    return 0
