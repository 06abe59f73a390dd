"""Run dirs hold the RESOLVED config: edits to a sweep or a config group after planning never reach a planned
run (Hydra's lazy-composition leak). The manifest records the sweep, its cells, the code and the version."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from orchestrator.launch.materialise import materialise
from orchestrator.launch.plan import make_plan
from orchestrator.sweep.expand import load_sweep
from record.errors import UserError
from record.files import atomic_write, config_text
from record.identity.run_key import run_key
from record.rundir import RunDir
from trainer.config.run import RunConfig

SWEEP = """
defaults:
  - base
  - model: mine
  - data: tiny
  - algorithm: rloo
  - _self_
rollout: {engine: hf, max_response_tokens: 16, max_prompt_tokens: 64}
sweep:
  name: leak
  grid: [{kl.estimator: "k1,k3", kl.placement: reward, kl.beta: 0.1}]
"""


@pytest.fixture
def sweep_file(tmp_path: Path) -> Path:
    (tmp_path / "conf" / "model").mkdir(parents=True)
    (tmp_path / "conf" / "model" / "mine.yaml").write_text("name_or_path: tiny\nparams_b: 0.001\ndtype: fp32\n")
    path = tmp_path / "leak.yaml"
    path.write_text(SWEEP)
    return path


def materialise_file(path: Path, root: Path):
    sweep = load_sweep(path)
    return sweep, materialise(sweep, make_plan(sweep), root)


def test_run_dirs_hold_the_resolved_config_and_later_edits_do_not_leak(sweep_file, tmp_path):
    root = tmp_path / "runs"
    sweep, done = materialise_file(sweep_file, root)
    assert (done.written, done.unchanged, done.kept) == (2, 0, 0)
    before = {}
    for cell in sweep.cells:  # no config.yaml yet (its job writes it): the array's file holds the config
        run = RunDir(root / "leak" / cell.run_key)
        data = run.read_config()
        assert not run.config.exists() and run.is_run()
        assert RunConfig.from_dict(data) == cell.config and run_key(data) == cell.run_key
        assert "${" not in config_text(data)
        before[run] = data
    # Someone edits the config group after the sweep was planned: planned runs keep what they were planned with.
    (sweep_file.parent / "conf" / "model" / "mine.yaml").write_text("name_or_path: tiny\nparams_b: 0.001\n"
                                                                    "dtype: bf16\n")
    edited, again = materialise_file(sweep_file, root)
    assert {c.run_key for c in edited.cells}.isdisjoint({c.run_key for c in sweep.cells})
    assert again.written == 2
    assert all(run.read_config() == data for run, data in before.items())


def test_materialising_twice_is_idempotent(sweep_file, tmp_path):
    root = tmp_path / "runs"
    materialise_file(sweep_file, root)
    manifest = (root / "leak" / "manifest.json").read_text()
    _, again = materialise_file(sweep_file, root)
    assert (again.written, again.unchanged) == (0, 2)
    assert (root / "leak" / "manifest.json").read_text() == manifest  # no timestamps: a rerun writes it equal
    assert not list((root / "leak").rglob("*.tmp"))


def test_manifest_records_sweep_cells_plan_code_and_version(sweep_file, tmp_path):
    sweep, _ = materialise_file(sweep_file, tmp_path / "runs")
    manifest = json.loads((tmp_path / "runs" / "leak" / "manifest.json").read_text())
    assert manifest["sweep"] == "leak" and manifest["resolved_sweep"]["name"] == "leak"
    assert [c["run_key"] for c in manifest["cells"]] == [c.run_key for c in sweep.cells]
    assert manifest["cells"][0]["axes"] == {"kl.estimator": "k1", "kl.placement": "reward", "kl.beta": 0.1,
                                            "seed": 0}
    assert manifest["plan"]["counts"]["cells"] == 2 and manifest["plan"]["edges"] == [["train-0", "aftercorr",
                                                                                         "eval-0"]]
    assert set(manifest["git"]) == {"commit", "dirty", "diff", "untracked"}
    assert manifest["git"]["commit"] is None or len(manifest["git"]["commit"]) == 40
    assert manifest["orchestrator_version"] and manifest["profile"]["partition"] == "local"


def test_a_tampered_run_dir_is_refused_and_a_tracking_change_keeps_it(sweep_file, tmp_path):
    root = tmp_path / "runs"
    sweep, _ = materialise_file(sweep_file, root)
    for cell in sweep.cells:  # their jobs started: each wrote its config.yaml
        RunDir(root / "leak" / cell.run_key).ensure_config()
    moved = load_sweep(sweep_file, ["tracking.tracking_uri=http://elsewhere:5000"])
    assert [c.run_key for c in moved.cells] == [c.run_key for c in sweep.cells]
    done = materialise(moved, make_plan(moved), root)
    assert done.kept == 2  # a resumed run keeps logging to the store it started in
    path = root / "leak" / sweep.cells[0].run_key / "config.yaml"
    path.write_text(path.read_text().replace("lr: 1.0e-06", "lr: 0.5"))
    with pytest.raises(UserError, match="holds a run config that trains something else"):
        materialise(sweep, make_plan(sweep), root)


def test_atomic_write_replaces_whole_files(tmp_path):
    target = tmp_path / "a" / "b.txt"
    atomic_write(target, "one")
    atomic_write(target, "two")
    assert target.read_text() == "two" and [p.name for p in target.parent.iterdir()] == ["b.txt"]


def test_an_unwritable_output_root_is_a_user_error(sweep_file, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    sweep = load_sweep(sweep_file)
    with pytest.raises(UserError, match="cannot write the run dirs"):
        materialise(sweep, make_plan(sweep), blocker)


def test_the_fast_yaml_dumper_writes_what_the_pure_python_one_writes():
    """Run dirs are compared byte for byte on a rerun; the libyaml dumper must not change a file PyYAML wrote."""

    from orchestrator.sweep.expand import load_sweep
    from record.files import _DUMPER

    sweeps = sorted((Path(__file__).resolve().parents[2] / "sweeps").glob("*.yaml"))
    configs = [c.config.to_dict() for f in sweeps for c in load_sweep(f).cells]
    assert len(configs) > 100
    for config in configs:
        assert yaml.dump(config, Dumper=_DUMPER, sort_keys=False) == yaml.safe_dump(config, sort_keys=False)
