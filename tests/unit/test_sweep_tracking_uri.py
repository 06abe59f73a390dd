"""Where a sweep's jobs log: the sweep's tracking.tracking_uri, else the Slurm profile's tracking_uri; and
`orchestrate sweep` refuses, before writing or submitting anything, a store its jobs could not reach."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import yaml

from orchestrator.cli import main
from orchestrator.cluster.profile import PROFILES
from orchestrator.sweep.expand import load_sweep
from orchestrator.tracking.store import job_uris, problems
from trainer.config.run import ConfigError

SMOKE = Path(__file__).resolve().parents[2] / "sweeps" / "smoke.yaml"


def profile_with(tmp_path: Path, **extra) -> str:
    data = {**yaml.safe_load((PROFILES / "local.yaml").read_text()), **extra}
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def closed_port() -> int:
    with socket.socket() as s:  # bound, never listening: a connection is refused at once
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_profile_names_the_uri_and_the_sweep_overrides_it(tmp_path):
    profile = profile_with(tmp_path, tracking_uri="http://login1:5000")
    sweep = load_sweep(SMOKE, [f"sweep.slurm.profile={profile}"])
    assert sweep.profile.tracking_uri == "http://login1:5000"
    assert {c.config.tracking.tracking_uri for c in sweep.cells} == {"http://login1:5000"}
    own = load_sweep(SMOKE, [f"sweep.slurm.profile={profile}", "tracking.tracking_uri=http://mine:5000"])
    assert {c.config.tracking.tracking_uri for c in own.cells} == {"http://mine:5000"}
    assert {c.run_key for c in own.cells} == {c.run_key for c in sweep.cells}  # where it logs is not identity
    assert {c.config.tracking.tracking_uri for c in load_sweep(SMOKE).cells} == {""}  # the shipped profile


def test_a_bad_profile_uri_is_reported_with_the_others(tmp_path):
    profile = profile_with(tmp_path, tracking_uri="login1:5000", array_parallelism=0)
    with pytest.raises(ConfigError) as err:
        load_sweep(SMOKE, [f"sweep.slurm.profile={profile}"])
    text = str(err.value)
    assert "tracking_uri: 'login1:5000'; give a tracking URI such as http://" in text and "array_parallelism" in text


def test_an_unreachable_server_stops_the_sweep_before_anything_is_written(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    uri = f"http://127.0.0.1:{closed_port()}"
    code = main(["sweep", str(SMOKE), "--executor", "local", f"tracking.tracking_uri={uri}",
                 f"sweep.output_root={tmp_path / 'runs'}"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("error:") == 1 and "Traceback" not in err
    assert "nothing written, nothing submitted:\n  - " in err  # one of the checks' problems (pipeline/stops.py)
    assert f"tracking store {uri} (from tracking.tracking_uri) is unreachable" in err
    assert "orchestrate tracking up" in err
    assert not (tmp_path / "runs").exists()


def test_the_jobs_environment_uri_is_checked_when_the_sweep_names_none(monkeypatch):
    dead = f"http://127.0.0.1:{closed_port()}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", dead)
    assert job_uris(["", ""]) == {dead: "MLFLOW_TRACKING_URI"}
    both = problems({dead: "MLFLOW_TRACKING_URI", f"postgresql://u@127.0.0.1:{closed_port()}/db": "profile"})
    assert len(both) == 2 and all("is unreachable" in p for p in both)
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    assert job_uris([""]) == {}  # the local SQLite default: nothing to reach
    assert problems({"sqlite:///runs/mlflow.db": "tracking.tracking_uri"}) == []
