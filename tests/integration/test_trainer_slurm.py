"""The trainer as Slurm runs it: 2 ranks of DeepSpeed ZeRO-3 under srun through submitit, and a time limit that
the job survives by checkpointing on Slurm's warning signal and requeueing itself."""

import json
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests.support.slurm_jobs import TrainFromYaml
from tests.support.trainer_run import config_dict
from trainer.rollout import vllm_support

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


@pytest.mark.parametrize("engine", ["hf", pytest.param("vllm", marks=pytest.mark.skipif(
    not vllm_support.installed(), reason="vLLM is not installed (make setup)"))])
def test_two_rank_zero3_run_through_submitit(tmp_path, slurm_cluster, engine):
    """With vLLM: one engine per rank over the ranks' own process group (external_launcher), as on 8 GPUs."""
    config = _write(tmp_path, "two", optim={"steps": 2, "batch_prompts": 4, "minibatch_prompts": 4},
                    rollout={"engine": engine})
    job = _executor(tmp_path / "logs", slurm_cluster, tasks_per_node=2, timeout_min=10).submit(
        TrainFromYaml(), str(config), str(tmp_path / "run"))
    results = job.results()
    assert sorted(r["rank"] for r in results) == [0, 1] and {r["world"] for r in results} == {2}
    tag = json.loads((tmp_path / "run" / "checkpoints" / "latest.json").read_text())["tag"]
    shards = sorted(p.name for p in (tmp_path / "run" / "checkpoints" / tag).glob("zero_pp_rank_*_model_states.pt"))
    assert len(shards) == 2, shards  # ZeRO-3 partitioned the model over both ranks


def test_warning_signal_checkpoints_requeues_and_finishes_the_run(tmp_path, slurm_cluster):
    """Slurm's time-limit/preemption warning is SIGUSR2 (`--signal=USR2@<delay>`, submitit's signal_delay_s).
    Slurm checks for it only every ~30 s, which makes a 1-minute limit fire at random points, so the test sends
    the same signal itself with scancel, at a known moment: mid-run, with no periodic checkpoint to fall back on."""
    steps = 60
    config = _write(tmp_path, "limit", optim={"steps": steps, "batch_prompts": 4, "minibatch_prompts": 4},
                    checkpoint={"every": 1000, "keep_last": 1})
    job = _executor(tmp_path / "logs", slurm_cluster, tasks_per_node=1, timeout_min=10, slurm_signal_delay_s=60).submit(
        TrainFromYaml(), str(config), str(tmp_path / "run"))
    logged, latest = tmp_path / "run" / "logged_step", tmp_path / "run" / "checkpoints" / "latest.json"
    _wait(lambda: logged.exists() and int(logged.read_text()) >= 3, job, "the run to log 3 steps")
    subprocess.run(["scancel", "--signal=USR2", job.job_id], check=True)
    _wait(lambda: latest.exists(), job, "the checkpoint taken on the signal")
    cut = json.loads(latest.read_text())["step"]
    assert 3 <= cut < steps
    _wait(lambda: json.loads(latest.read_text())["step"] == steps, job, "the requeued run to finish")
    assert "REQUEUED" in _sacct(job.job_id)
    assert int(logged.read_text()) == steps
    subprocess.run(["scancel", job.job_id], check=False)


def _wait(cond, job, what: str, timeout: float = 600) -> None:
    deadline = time.time() + timeout
    while not cond():
        assert time.time() < deadline, f"timed out waiting for {what}; sacct:\n{_sacct(job.job_id)}"
        time.sleep(1)


def _sacct(job_id: str) -> str:
    return subprocess.run(["sacct", "-j", job_id, "-D", "--parsable2", "-o", "JobID,State,Start,End"],
                          capture_output=True, text=True).stdout


def _restarts(job_id: str) -> int:
    out = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True).stdout
    for token in out.split():
        if token.startswith("Restarts="):
            return int(token.split("=")[1])
    return 0
