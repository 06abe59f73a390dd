"""The dry run and the submission stop on the same list (orchestrator/pipeline/stops.py `STOPS`): for each stop a
sweep that fails it, which the dry run reports as "a submission would stop here" and the submission refuses, before
anything is written. A stop added to STOPS without a case here fails the first test. No real Slurm: the stand-in of
tests/unit/test_cli_first_run.py (an sbatch and an scontrol that find no controller) where a stop needs the Slurm
executor, and a closed local port for a store that does not answer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.cli import main
from orchestrator.pipeline import planning
from orchestrator.pipeline.planning import Request, plan
from orchestrator.pipeline.stops import STOPS
from tests.unit.test_cli_first_run import fake_slurm
from tests.unit.test_cli_sweep import snapshot
from tests.unit.test_sweep_tracking_uri import closed_port

SMOKE = str(Path(__file__).resolve().parents[2] / "sweeps" / "smoke.yaml")
QWEN_ON_40GB = ["model.name_or_path=Qwen/Qwen2.5-7B", "sweep.slurm.overrides.gpu_mem_gb=40"]


def missing_data(tmp_path, monkeypatch):
    monkeypatch.setenv("COMEDY_DATA", str(tmp_path / "nodata"))
    return ["data=math"], "local"


def model_too_big(tmp_path, monkeypatch):
    return QWEN_ON_40GB, "local"


def another_sweeps_directory(tmp_path, monkeypatch):
    (tmp_path / "runs" / "smoke").mkdir(parents=True)
    (tmp_path / "runs" / "smoke" / "manifest.json").write_text(json.dumps(
        {"source_path": str(tmp_path / "elsewhere" / "smoke.yaml"), "source_sha256": "0" * 64}))
    return [], "local"


def no_room(tmp_path, monkeypatch):
    monkeypatch.setattr(planning, "free_space", lambda root: 1)  # one byte free under sweep.output_root
    return [], "local"


def sqlite_written_on_slurm(tmp_path, monkeypatch):
    fake_slurm(tmp_path, monkeypatch)  # --executor slurm is taken as said; the dry run's scontrol finds none
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return ["sweep.slurm.overrides.site.sqlite_jobs=false"], "slurm"


def store_not_answering(tmp_path, monkeypatch):
    return [f"tracking.tracking_uri=http://127.0.0.1:{closed_port()}"], "local"


CASES = {"paths": missing_data, "memory": model_too_big, "owner": another_sweeps_directory, "disk": no_room,
         "sqlite_from_jobs": sqlite_written_on_slurm, "stores": store_not_answering}


def test_every_stop_has_a_case():
    assert [s.name for s in STOPS] == list(CASES)


def flat(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("stop", STOPS, ids=lambda s: s.name)
def test_the_dry_run_reports_what_the_submission_refuses(stop, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    overrides, executor = CASES[stop.name](tmp_path, monkeypatch)
    args = [SMOKE, f"sweep.output_root={tmp_path / 'runs'}", *overrides, "--executor", executor]
    problems = stop.problems(plan(Request(args[0], args[1:-2], executor=executor)))
    assert problems, f"the case of {stop.name} does not fail it"
    before = snapshot(tmp_path)

    assert main(["sweep", "--dry-run", *args]) == 0
    out = flat(capsys.readouterr().out)
    for problem in problems:
        assert flat(f"a submission would stop here: {problem}") in out
    assert snapshot(tmp_path) == before

    assert main(["sweep", *args]) == 2
    err = flat(capsys.readouterr().err)
    assert "nothing written, nothing submitted" in err
    for problem in problems:
        assert flat(problem) in err
    assert snapshot(tmp_path) == before  # no run dir, manifest, ledger, store or snapshot of the code
