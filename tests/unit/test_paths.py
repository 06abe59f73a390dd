"""Every path a job reads is resolved at submission into the cell's config, checked with one problem per missing
thing and its fix, and never changes the cell's identity (orchestrator/cluster/paths.py); a Slurm sweep whose jobs
would write SQLite directly is refused (orchestrator/tracking/store.py)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from huggingface_hub import constants as hf_constants

from orchestrator.cluster import paths
from orchestrator.cluster.paths import Resolver, missing_parts
from orchestrator.sweep.expand import load_sweep
from orchestrator.tracking.store import sqlite_written_by_jobs
from record.identity.run_key import run_key

REPO = Path(__file__).resolve().parents[2]
SMOKE = REPO / "sweeps" / "smoke.yaml"


def config(*overrides: str):
    return load_sweep(SMOKE, list(overrides)).cells[0].config


def math_files(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name in ("math_train", "math_test"):
        (root / f"{name}.jsonl").write_text(json.dumps({"problem": "1+1?", "answer": "2"}) + "\n")
    return root


def checkpoint_dir(path: Path, *, tokenizer: bool = True) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    (path / "model.safetensors").write_bytes(b"w")
    if tokenizer:
        (path / "tokenizer.json").write_text("{}")
    return path


def test_default_data_paths_become_the_prepared_files_absolutely_and_identity_stays(tmp_path):
    cfg = config("data=math")
    assert cfg.data.train_path is None
    here = Resolver("s.yaml", data=math_files(tmp_path / "a"), cwd=tmp_path)
    resolved = here.resolve(cfg)
    assert resolved.data.train_path == str(tmp_path / "a" / "math_train.jsonl")
    assert resolved.data.val_path == str(tmp_path / "a" / "math_test.jsonl")
    assert not here.problems
    elsewhere = Resolver("s.yaml", data=math_files(tmp_path / "moved"), cwd=tmp_path).resolve(cfg)
    assert run_key(cfg) == run_key(resolved) == run_key(elsewhere)  # where the data lives is no identity


def test_every_missing_thing_is_one_problem_with_the_command_that_fixes_it(tmp_path):
    here = Resolver("s.yaml", data=tmp_path / "empty", cwd=tmp_path)
    for seed in range(3):  # three cells sharing the same missing files: each problem once
        here.resolve(dataclasses.replace(config("data=math"), seed=seed))
    assert list(here.problems) == [
        f"data.train_path: {tmp_path}/empty/math_train.jsonl does not exist; run `orchestrate data prepare --out "
        f"{tmp_path}/empty`",
        f"data.val_path: {tmp_path}/empty/math_test.jsonl does not exist; run `orchestrate data prepare --out "
        f"{tmp_path}/empty`"]


def test_a_relative_data_path_is_read_from_the_launch_directory(tmp_path):
    math_files(tmp_path / "d")
    here = Resolver("s.yaml", data=tmp_path / "none", cwd=tmp_path)
    out = here.resolve(config("data=math", "data.train_path=d/math_train.jsonl", "data.val_path=d/nothere.jsonl"))
    assert out.data.train_path == str(tmp_path / "d" / "math_train.jsonl")
    assert list(here.problems) == [f"data.val_path: {tmp_path}/d/nothere.jsonl does not exist; fix data.val_path in "
                                   f"s.yaml (relative paths are read from {tmp_path})"]


def test_a_model_directory_is_made_absolute_and_checked_whole(tmp_path):
    checkpoint_dir(tmp_path / "models" / "good")
    checkpoint_dir(tmp_path / "models" / "half", tokenizer=False)
    here = Resolver("s.yaml", data=tmp_path, cwd=tmp_path)
    good = here.resolve(config("model.name_or_path=models/good"))
    assert good.model.name_or_path == str(tmp_path / "models" / "good") and not here.problems
    here.resolve(config("model.name_or_path=./models/half"))
    here.resolve(config("model.name_or_path=/nowhere/model"))
    assert [p.split(" has no ")[-1].split(";")[0] for p in here.problems] == [
        "tokenizer (tokenizer.json, tokenizer.model or vocab.json)", "directory (it does not exist)"]
    assert missing_parts(tmp_path / "models" / "good") == []


def test_a_hub_id_must_be_fetched_and_becomes_its_cached_snapshot(tmp_path, monkeypatch):
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    here = Resolver("sweeps/x.yaml", data=tmp_path, cwd=tmp_path)
    out = here.resolve(config("model.name_or_path=Org/Model-1B"))
    assert out.model.name_or_path == "Org/Model-1B"
    assert len(here.problems) == 1 and "run `orchestrate models fetch sweeps/x.yaml` on a login node" in \
        next(iter(here.problems))
    repo = tmp_path / "hub" / "models--Org--Model-1B"
    checkpoint_dir(repo / "snapshots" / "abc123")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    fetched = Resolver("sweeps/x.yaml", data=tmp_path, cwd=tmp_path)
    out = fetched.resolve(config("model.name_or_path=Org/Model-1B"))
    assert out.model.name_or_path == str(repo / "snapshots" / "abc123") and not fetched.problems
    assert run_key(out) == run_key(config("model.name_or_path=Org/Model-1B"))  # a hub id and its snapshot: one model


def test_the_tracking_store_is_fixed_at_submission(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    here = Resolver("s.yaml", data=tmp_path, cwd=tmp_path)
    assert here.resolve(config()).tracking.tracking_uri == f"sqlite:///{tmp_path}/runs/mlflow.db"
    assert here.resolve(config("tracking.tracking_uri=sqlite:///x/m.db")).tracking.tracking_uri == \
        f"sqlite:///{tmp_path}/x/m.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://login1:5000")
    assert here.resolve(config()).tracking.tracking_uri == "http://login1:5000"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://me:pw@login1:5000")
    assert not here.resolve(config()).tracking.tracking_uri  # a password never lands in config.yaml


def test_a_slurm_sweep_writing_sqlite_from_its_jobs_is_refused_with_the_two_ways_out():
    [problem] = sqlite_written_by_jobs(["sqlite:////shared/runs/mlflow.db", "sqlite:////shared/other.db"])
    assert "sqlite:////shared/other.db (and 1 more)" in problem
    assert "`orchestrate tracking up`" in problem and "site.sqlite_jobs: true" in problem
    assert sqlite_written_by_jobs(["http://login1:5000"]) == []


@pytest.mark.parametrize("executor", ["local"])
def test_the_sweep_command_refuses_missing_data_before_writing_anything(tmp_path, executor):
    env = {**os.environ, "COMEDY_DATA": str(tmp_path / "nodata"), "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "sweep", "--executor", executor, str(SMOKE),
                           "data=math", "optim.steps=1"], cwd=tmp_path, capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode != 0
    out = done.stdout + done.stderr
    assert "math_train.jsonl does not exist" in out and "math_test.jsonl does not exist" in out, out
    assert f"orchestrate data prepare --out {tmp_path}/nodata" in out and "Traceback" not in out
    assert not (tmp_path / "runs").exists()


def test_data_inside_the_checkout_travels_with_the_sweep(tmp_path, monkeypatch):
    """Files under the checkout (the default <checkout>/data) are copied once per content into the sweep's
    directory, the configs and the evaluation's data directory point there: renaming the checkout reaches no job."""
    checkout = tmp_path / "checkout"
    monkeypatch.setattr(paths, "REPO", checkout.resolve())
    data = math_files(checkout / "data")
    (data / "math500.jsonl").write_text(json.dumps({"problem": "p", "answer": "a"}) + "\n")
    here = Resolver("s.yaml", data=data, cwd=checkout)
    configs = [here.resolve(config("data=math", "eval.tasks=[math500]"))]
    carried = here.carry(tmp_path / "sweep", configs)
    target = Path(carried[0].data.train_path).parent
    assert target.parent == tmp_path / "sweep" / "data" and here.data == target
    assert sorted(p.name for p in target.iterdir()) == ["math500.jsonl", "math_test.jsonl", "math_train.jsonl"]
    assert Path(carried[0].data.val_path) == target / "math_test.jsonl"
    again = Resolver("s.yaml", data=data, cwd=checkout)
    assert again.carry(tmp_path / "sweep", [again.resolve(configs[0])]) == carried  # same content, same copy
    outside = Resolver("s.yaml", data=math_files(tmp_path / "shared"), cwd=checkout)
    cfg = outside.resolve(config("data=math", "eval.tasks=[tiny]"))
    assert outside.carry(tmp_path / "sweep", [cfg]) == [cfg]  # a shared data directory is read in place
