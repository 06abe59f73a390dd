"""Issue 16, the first run and its errors, through `orchestrate`'s entry point: every problem at once, the right
kind of input named, `--executor auto` without a controller, the tiny model built before submitting, same-named
cells told apart, and the small fixes (negative --ref, `data check` help, lm-eval's git call)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from orchestrator.cli import main
from orchestrator.launch.ledger import Ledger
from record.errors import UserError
from tests.support.tiny_model import fast_config

REPO = Path(__file__).resolve().parents[2]
SMOKE = str(REPO / "sweeps" / "smoke.yaml")
PROBES = ["--train-entry", "orchestrator.jobs:probe_train",
          "--eval-entry", "orchestrator.jobs:probe_eval"]


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_a_group_that_does_not_compose_does_not_hide_the_other_problems(capsys):
    code, _, err = run(capsys, "validate", SMOKE, "kl.placement=nowhere", "kl.beta=-1", "model=gpt9")
    assert code == 2 and "Traceback" not in err
    assert err.startswith("error: 3 problem(s)")
    assert "Could not find 'model/gpt9'; valid:" in err
    assert "kl.placement: unknown value 'nowhere'; valid: none, reward, loss, reward+loss" in err
    assert "kl.beta: -1.0 is negative" in err


@pytest.mark.parametrize("command", ["status", "cancel", "watch"])
def test_a_sweep_directory_that_does_not_exist_is_named_as_such(command, tmp_path, capsys):
    (tmp_path / "runs" / "smoke" / "ledger").mkdir(parents=True)
    code, _, err = run(capsys, command, str(tmp_path / "runs" / "doesnotexist"))
    assert code == 2
    assert "doesnotexist: no such sweep directory; sweeps in" in err and "smoke" in err
    assert ".yaml)" not in err.split(";")[0] and "a sweep file is YAML" not in err


def test_sweep_without_arguments_asks_for_the_sweep_file_only(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["sweep"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "the following arguments are required: SWEEP" in err and "OVERRIDE" not in err.splitlines()[-1]


def test_train_on_a_sweep_file_points_to_sweep_and_to_a_run_config(capsys):
    code, _, err = run(capsys, "train", SMOKE)
    assert code == 2
    assert f"{SMOKE} is a sweep file" in err
    assert f"orchestrate sweep {SMOKE}" in err and "orchestrate train runs/smoke/<run_key>/config.yaml" in err
    assert "unknown key" not in err


def test_synthetic_takes_negative_numbers_after_a_space(tmp_path, capsys):
    out = tmp_path / "toy.json"
    code, _, err = run(capsys, "synthetic", "--ref", "-0.2,0.1", "--theta", "-0.5,-0.1", "--trials", "2",
                       "--sequences", "8", "--lengths", "2", "--configs", "k1-reward", "--json", str(out))
    assert code == 0, err
    assert out.is_file()


def test_data_check_help_says_what_it_checks(capsys):
    with pytest.raises(SystemExit):
        main(["data", "check", "--help"])
    out = capsys.readouterr().out
    assert "Check a prepared data directory" in out and "MANIFEST.json" in out
    assert "the data directory `orchestrate data prepare --out` wrote" in out


def fake_slurm(tmp_path: Path, monkeypatch) -> None:
    """sbatch on PATH and a controller that does not answer, as on a machine whose local cluster is down."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text("#!/bin/sh\necho 'sbatch: error: Unable to contact slurm controller' >&2\nexit 1\n")
    (bin_dir / "scontrol").write_text("#!/bin/sh\necho 'Slurmctld(primary) at vm is DOWN'\nexit 1\n")
    for tool in ("sbatch", "scontrol"):
        os.chmod(bin_dir / tool, 0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


def test_auto_falls_back_to_the_local_executor_when_no_controller_answers(tmp_path, monkeypatch, capsys):
    fake_slurm(tmp_path, monkeypatch)
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, "sweep", SMOKE, "optim.steps=2", *PROBES, "--poll", "1")
    assert code == 0, err
    assert "--executor auto: sbatch is on PATH but no Slurm controller answers" in out
    assert "running on the local executor" in out and "slurm/local-cluster up" in out
    records = list(Ledger(tmp_path / "runs" / "smoke").records().values())
    assert records and all(j["executor"] == "local" for r in records for j in r["jobs"])


def test_executor_slurm_without_a_controller_names_both_ways_out(tmp_path, monkeypatch, capsys):
    fake_slurm(tmp_path, monkeypatch)
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, "sweep", SMOKE, "--executor", "slurm", *PROBES)
    assert code == 2 and "Traceback" not in err
    assert "no Slurm controller answers" in err and "DOWN" in err
    assert "`slurm/local-cluster up`" in err and "`--executor local`" in err


def test_sweep_builds_a_missing_tiny_model_before_submitting(tmp_path, monkeypatch, capsys):
    """The real build (a small config, so it takes seconds), into an empty cache; submission stopped after it."""
    from orchestrator.pipeline import submission
    from trainer.model import tiny_model

    monkeypatch.setenv("COMEDY_CACHE", str(tmp_path / "cache"))
    small = fast_config(sft_steps=12)
    monkeypatch.setattr(tiny_model, "TinyModelConfig", lambda: small)
    monkeypatch.chdir(tmp_path)

    def stop(*_, **__):
        raise UserError("stopped before submitting")
    monkeypatch.setattr(submission, "launch", stop)
    code, out, err = run(capsys, "sweep", SMOKE, "--executor", "local")
    assert "stopped before submitting" in err, err
    built = list((tmp_path / "cache" / "tiny-model").glob("*/build.json"))
    assert len(built) == 1 and f"tiny model ready: {built[0].parent}" in out
    assert "[tiny-model]" not in out + err  # the build reports to the bar through its callback, not as log lines


def test_the_tiny_model_build_reports_each_stage_to_its_progress_callback(tmp_path, capsys):
    """Every warm-start step, then each accuracy scored, reach the callback in order; nothing is printed."""
    from trainer.model import tiny_model

    heard = []
    config = fast_config(sft_steps=4, eval_size=2)
    tiny_model.ensure_tiny_model(config, tmp_path, progress=lambda *stage: heard.append(stage))
    assert heard == [*(("warm-start steps", s, 4) for s in range(1, 5)), ("scoring test greedy", 0, 4),
                     ("scoring test sampled", 1, 4), ("scoring ood greedy", 2, 4), ("scoring ood sampled", 3, 4)]
    assert "[tiny-model]" not in capsys.readouterr().out


def test_dry_run_and_probe_jobs_build_no_model(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("COMEDY_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    assert main(["sweep", "--dry-run", SMOKE]) == 0
    assert main(["sweep", SMOKE, "optim.steps=2", "--executor", "local", *PROBES, "--poll", "1"]) == 0
    # no model built or converted; the tokenizer's counts of the job-start checks are the one thing kept
    assert [p.name for p in (tmp_path / "cache").iterdir()] == ["job-start"]


def test_cells_launched_with_different_overrides_are_told_apart(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for steps in (2, 3):
        assert main(["sweep", SMOKE, f"optim.steps={steps}", "--executor", "local", *PROBES, "--poll", "1"]) == 0
    capsys.readouterr()
    code, out, _ = run(capsys, "status", "runs/smoke")
    assert code == 0
    for name in ("k1-reward-s0-steps2", "k1-reward-s0-steps3", "k3-loss-s0-steps2", "k3-loss-s0-steps3"):
        assert name in out
    assert "4 configurations over seeds" in out
    _, out, _ = run(capsys, "status", "runs/smoke", "--json")
    rows = json.loads(out)
    assert sorted(r["differs"]["optim.steps"] for r in rows) == [2, 2, 3, 3]
    assert {r["config"] for r in rows} == {"k1-reward-steps2", "k1-reward-steps3", "k3-loss-steps2",
                                           "k3-loss-steps3"}


def test_one_launch_keeps_its_plain_names(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["sweep", SMOKE, "optim.steps=2", "--executor", "local", *PROBES, "--poll", "1"]) == 0
    capsys.readouterr()
    rows = json.loads(run(capsys, "status", "runs/smoke", "--json")[1])
    assert sorted(r["name"] for r in rows) == ["k1-reward-s0", "k3-loss-s0"]
    assert all("differs" not in r for r in rows)


def test_lm_evals_git_call_is_quiet_outside_a_checkout(tmp_path, monkeypatch, capfd):
    from eval.evaluate import quiet_git_hash

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))  # never find a repository above tmp
    assert quiet_git_hash() == "unknown"
    assert "fatal" not in capfd.readouterr().err
