"""`orchestrate validate` and `orchestrate sweep` through the CLI entry point: exit codes, output, and a dry run
that touches nothing on disk."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.cli import main
from orchestrator.launch.ledger import Ledger

REPO = Path(__file__).resolve().parents[2]
SWEEPS = REPO / "sweeps"


def snapshot(*roots: Path) -> dict:
    """Every file and directory under the roots with its size and mtime."""
    seen = {}
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
            for name in [*dirnames, *filenames]:
                path = Path(dirpath) / name
                stat = path.stat()
                seen[str(path)] = (stat.st_size, stat.st_mtime_ns)
    return seen


def test_validate_a_valid_sweep(capsys):
    assert main(["validate", str(SWEEPS / "onpolicy.yaml")]) == 0
    out = capsys.readouterr().out
    assert "onpolicy.yaml: valid" in out and "102 cells" in out and "profile a100" in out


@pytest.mark.parametrize("name", sorted(p.stem for p in SWEEPS.glob("*.yaml")))
def test_validate_every_shipped_sweep(name, capsys):
    assert main(["validate", str(SWEEPS / f"{name}.yaml")]) == 0
    assert f"sweep {name}: " in capsys.readouterr().out


def test_validate_an_invalid_sweep_lists_every_problem(capsys):
    code = main(["validate", str(SWEEPS / "onpolicy.yaml"), "kl.estimator=k4,k1", "optim.stepz=3", "+new.key=1"])
    captured = capsys.readouterr()
    assert code == 2
    assert "Traceback" not in captured.err
    assert "3 problem(s)" in captured.err
    assert "cells with kl.estimator=k4" in captured.err and "valid: k1, k2, k3" in captured.err
    assert "optim.stepz: unknown key (did you mean 'steps'?)" in captured.err
    assert "new: unknown key; valid: model, data" in captured.err


@pytest.mark.parametrize("argv, message", [
    (["validate", "sweeps/nope.yaml"], "no such file"),
    (["validate", str(SWEEPS / "smoke.yaml"), "model=nope"], "Could not find 'model/nope'; valid:"),
    (["validate", str(SWEEPS / "smoke.yaml"), "optim.steps=1,"], "not Hydra override syntax"),
    (["sweep", "--dry-run", str(SWEEPS / "smoke.yaml"), "sweep.slurm.profile=gone"], "'gone' not found"),
])
def test_user_mistakes_end_in_one_message_and_exit_2(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and "Traceback" not in err


def test_dry_run_of_a_sweep_with_list_values_and_two_arrays(capsys):
    assert main(["sweep", "--dry-run", str(SWEEPS / "async.yaml")]) == 0
    out = capsys.readouterr().out
    assert "[countdown]" in out and "train-1 (15 tasks) --aftercorr--> eval-1 (15 tasks)" in out


def test_dry_run_prints_the_plan_and_touches_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    before = snapshot(tmp_path, SWEEPS, REPO / "slurm" / "profiles")
    assert main(["sweep", "--dry-run", str(SWEEPS / "onpolicy.yaml")]) == 0
    out = capsys.readouterr().out
    assert snapshot(tmp_path, SWEEPS, REPO / "slurm" / "profiles") == before
    assert not (tmp_path / "runs").exists()
    from orchestrator.launch.intents import array_name
    from orchestrator.sweep.expand import load_sweep
    cells = load_sweep(SWEEPS / "onpolicy.yaml").cells
    for cell in cells[:20]:  # the table's rows carry the run_keys
        assert cell.run_key in out and cell.name in out
    train = array_name("onpolicy", "train", [c.run_key for c in cells], [1] * len(cells))  # what sbatch will get
    for text in ("sweep onpolicy: 102 cells", "job arrays on profile a100", "train-0 (102 tasks) --aftercorr--> eval-0",
                 "#SBATCH --array=0-101%8", f"#SBATCH --job-name={train}",
                 f"#SBATCH --dependency='aftercorr:<job id of {train}>'",
                 "dry run: nothing written, nothing submitted",
                 f"each objective's bias on the toy model: orchestrate validate {SWEEPS / 'onpolicy.yaml'}"):
        assert text in out, text


def test_sweep_without_dry_run_writes_run_dirs_and_follows_the_local_executor(tmp_path, monkeypatch, capsys):
    """The local executor (never the Slurm cluster: a unit test must not queue jobs), with the probe job
    functions standing in for training and evaluation."""
    monkeypatch.chdir(tmp_path)
    rc = main(["sweep", str(SWEEPS / "smoke.yaml"), "optim.steps=2", "--executor", "local",
               "--train-entry", "orchestrator.jobs:probe_train",
               "--eval-entry", "orchestrator.jobs:probe_eval",
               "--poll", "1"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    sweep_dir = tmp_path / "runs" / "smoke"
    assert (sweep_dir / "manifest.json").is_file()
    assert len(list(sweep_dir.glob("*/config.yaml"))) == 2
    assert len(Ledger(sweep_dir).records()) == 2


def test_an_invalid_sweep_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["sweep", str(SWEEPS / "smoke.yaml"), "kl.estimator=k9"]) == 2
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["validate", "sweep"])
def test_help_has_examples(command, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([command, "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "examples:" in out and f"orchestrate {command}" in out


def test_out_of_range_numbers_are_one_message_and_write_nothing(tmp_path, capsys):
    """A --signal-delay Slurm cannot take, and a number too long for Python to read, each end in one message
    before anything is written (they used to pass, or end in a traceback)."""
    out = tmp_path / "runs"
    assert main(["sweep", str(SWEEPS / "smoke.yaml"), f"sweep.output_root={out}", "--signal-delay", "0"]) == 2
    err = capsys.readouterr().err
    assert "--signal-delay 0: give seconds in [1, 65535]" in err and "Traceback" not in err
    assert not out.exists()
    huge = tmp_path / "huge.yaml"
    huge.write_text(f"sweep: {{name: huge}}\nbase: {{optim: {{lr: {'9' * 5000}}}}}\n")
    assert main(["validate", str(huge)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "a number in it is too long to read" in err and "Traceback" not in err


# What a first run used to print that no user can act on (issue 26), matched in the whole output of the command.
NOISE = ("INFO mlflow", "Creating initial MLflow database tables", "Updating database tables", "Writing model shards",
         "real_accelerator", "Traceback")


def test_a_first_run_prints_no_third_party_noise_and_leaves_no_literal_job_id_folder(tmp_path):
    """`orchestrate sweep` in a fresh directory, a fresh SQLite store and the local executor, as `make demo` runs
    it (the probe jobs stand in for training: the tiny model's build is the next test's), in a process of its own,
    so that every logger and bar writes where a user would see it."""
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}"}
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "sweep", str(SWEEPS / "smoke.yaml"),
                           "optim.steps=2", "--executor", "local", "--train-entry", "orchestrator.jobs:probe_train",
                           "--eval-entry", "orchestrator.jobs:probe_eval", "--poll", "1"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "complete: trained" in out  # the run did run
    assert not [n for n in NOISE if n in out], out
    assert not list((tmp_path / "runs").rglob("%j")), "a folder literally named %j"


def test_building_the_tiny_model_prints_nothing_but_its_progress(tmp_path):
    """save_pretrained imports DeepSpeed (which warns while it guesses an accelerator) and draws a bar: neither
    reaches a user's terminal when the build reports through its callback."""
    code = ("import sys; from tests.support.tiny_model import fast_config; "
            "from trainer.model.tiny_model import build_tiny_model; "
            f"build_tiny_model(fast_config(sft_steps=2), {str(tmp_path / 'model')!r}, progress=lambda *s: None)")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={k: v for k, v in os.environ.items() if k != "DS_ACCELERATOR"})
    assert done.returncode == 0, done.stderr
    assert not [n for n in NOISE if n in done.stdout + done.stderr], done.stdout + done.stderr
