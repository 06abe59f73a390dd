"""A job's environment is its sweep's, wherever it was submitted from (orchestrator/cluster/environment.py): the
first launch's environment is recorded and every later sbatch runs in it; each job records what it was given."""

from __future__ import annotations

import json
import os
import subprocess

from orchestrator.cluster.environment import (
    differences,
    job_environment,
    launch_environment,
    record_job_environment,
    submitting_with,
)
from orchestrator.cluster.executor import Options, first_launch, save_options

SHELL = {"PATH": "/usr/bin:/bin", "HOME": "/home/me", "OMP_NUM_THREADS": "8", "MLFLOW_TRACKING_PASSWORD": "pw",
         "HF_TOKEN": "hf_x", "SLURM_JOB_ID": "41", "SUBMITIT_FOLDER": "/x", "COMEDY_CODE": "/old/code"}


def test_the_recorded_environment_holds_neither_secrets_nor_slurm_variables():
    recorded = launch_environment(None, SHELL)
    assert recorded == {"PATH": "/usr/bin:/bin", "HOME": "/home/me", "OMP_NUM_THREADS": "8"}
    assert launch_environment({"A": "1"}, SHELL) == {"A": "1"}  # the first launch's, once there is one


def test_sbatch_runs_in_the_recorded_environment_plus_this_process_secrets_and_os_environ_comes_back(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # what a watcher job's prologue set
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "now")
    before = dict(os.environ)
    with submitting_with({"PATH": os.environ["PATH"], "OMP_NUM_THREADS": "8"}):
        seen = subprocess.run(["env"], capture_output=True, text=True, check=True).stdout.splitlines()
    seen = [line for line in seen if not line.startswith(("COLUMNS=", "LINES="))]  # a terminal's size, if any
    assert sorted(seen) == sorted([f"PATH={os.environ['PATH']}", "OMP_NUM_THREADS=8",
                                   "MLFLOW_TRACKING_PASSWORD=now"])
    assert dict(os.environ) == before
    with submitting_with(None):
        assert dict(os.environ) == before


def test_a_relaunch_from_another_shell_keeps_the_first_launch(tmp_path, monkeypatch):
    monkeypatch.setenv("COMEDY_TEST_SHELL", "first")
    first = first_launch(tmp_path, Options(data_dir="/data/a"))
    save_options(tmp_path, first)
    assert first.environment["COMEDY_TEST_SHELL"] == "first" and first.python
    monkeypatch.setenv("COMEDY_TEST_SHELL", "second")
    again = first_launch(tmp_path, Options(data_dir="/data/b", python="/other/python"))
    assert again.environment == first.environment and again.python == first.python
    assert again.data_dir == "/data/a"
    assert "MLFLOW_TRACKING_PASSWORD" not in (tmp_path / "submission.json").read_text()


def test_a_job_records_what_it_was_given_and_two_records_compare(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    monkeypatch.setenv("MASTER_PORT", "21234")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "pw")
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    path = record_job_environment(tmp_path, "train")
    assert path == tmp_path / "env" / "train-7.json"
    first = json.loads(path.read_text())
    assert first["omp_num_threads"] == "2" and "SLURM_JOB_ID" not in first["env"]
    assert "MASTER_PORT" not in first["env"] and first["env"]["MLFLOW_TRACKING_PASSWORD"].startswith("sha256:")
    monkeypatch.setenv("SLURM_JOB_ID", "8")
    monkeypatch.setenv("MASTER_PORT", "29999")
    assert differences(first, json.loads(record_job_environment(tmp_path, "train").read_text())) == []
    monkeypatch.setenv("SLURM_JOB_ID", "9")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    third = json.loads(record_job_environment(tmp_path, "train").read_text())
    assert differences(first, third) == ["OMP_NUM_THREADS: '2' != '1'", "omp_num_threads: '2' != '1'"]
    assert job_environment({"SLURM_X": "1", "A": "b"}) == {"A": "b"}
