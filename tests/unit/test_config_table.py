"""One file per array holds its cells' run configs (issue 25): packed exactly, read by every `RunDir` reader,
written into config.yaml by the job at its start; a legacy sweep's per-cell config.yaml still read; and a
submission's files and fsyncs that grow with the arrays, not the cells (counted, not timed)."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from orchestrator.cli import main
from orchestrator.cluster import query
from orchestrator.launch.materialise import _distinct_sections, materialise
from orchestrator.launch.plan import make_plan
from orchestrator.status.cells import run_config
from orchestrator.sweep.expand import load_sweep
from record.config_table import config_tables_dir, pack, unpack
from record.files import atomic_write, config_text
from record.rundir import RunDir
from record.tracking.run_names import sweep_params

REPO = Path(__file__).resolve().parents[2]
SMOKE = REPO / "sweeps" / "smoke.yaml"
SHARDS = 16  # the ledger's shard files, one per first hex digit of a run_key (orchestrator/launch/ledger.py)


def test_pack_round_trips_every_shape_exactly():
    configs = {"a": {"x": {"y": 1, "z": {}}, "l": [1, 2], "f": 1.0, "b": True, "s": "k1"},
               "b": {"x": None, "l": [1], "f": 1, "b": 1, "s": "k1", "new": {"deep": {"er": "s"}}},
               "c": {"x": {"y": 1, "z": {"w": 2}}, "l": [1, 2], "f": 1.0, "s": None},
               "d": {}}
    packed = json.loads(json.dumps(pack(configs)))  # as the file holds it
    for key, config in configs.items():
        # json.dumps tells 1 from 1.0 from True, and keeps the keys' order: config.yaml's text is the same
        assert json.dumps(unpack(packed, key)) == json.dumps(config), key
    assert unpack(packed, "missing") is None
    assert packed["cells"]["a"] == {} and "whole" in packed["cells"]["b"]  # a dict against a scalar: whole
    sweeps = [load_sweep(REPO / "sweeps" / f) for f in ("onpolicy.yaml", "offpolicy.yaml", "async.yaml")]
    configs = {c.run_key: c.config.to_dict() for s in sweeps for c in s.cells}
    packed = json.loads(json.dumps(pack(configs)))
    assert all(config_text(unpack(packed, k)) == config_text(v) for k, v in configs.items())
    assert len(json.dumps(packed)) < len(json.dumps(configs)) / 5  # what the file saves over a config per cell


def test_what_materialise_shares_by_identity_gives_the_same_table_and_parent_params():
    # one dict per section object (issue 25): the packed table and the parent's params are those of a config per
    # cell walked whole, on the paper's grids (estimators x placements x betas x seeds)
    for name in ("onpolicy.yaml", "offpolicy.yaml"):
        sweep = load_sweep(REPO / "sweeps" / name)
        shared: dict = {}
        datas = [c.config.to_dict(shared) for c in sweep.cells]
        fresh = [c.config.to_dict() for c in sweep.cells]
        assert datas == fresh and len(shared) < 2 * len(sweep.cells)  # shared: fewer dicts than cells x sections
        assert pack(dict(zip((c.run_key for c in sweep.cells), datas))) == \
            pack(dict(zip((c.run_key for c in sweep.cells), fresh)))
        distinct = _distinct_sections(datas)
        assert sum(map(len, distinct)) < sum(map(len, datas))
        assert sweep_params("s", (0,), distinct, len(datas)) == sweep_params("s", (0,), fresh)


def test_a_submission_writes_one_file_per_array_and_the_job_writes_its_config_yaml(tmp_path):
    sweep = load_sweep(SMOKE, [f"sweep.output_root={tmp_path}", "sweep.seeds=[0,1]"])
    done = materialise(sweep, make_plan(sweep))
    assert (done.written, done.unchanged) == (len(sweep.cells), 0)
    assert [p.name for p in config_tables_dir(done.sweep_dir).iterdir()] == ["train-0.json"]
    for cell in sweep.cells:
        run = RunDir(done.sweep_dir / cell.run_key)
        assert not run.path.exists() and run.is_run()  # nothing per cell until its job starts
        assert run.read_config() == cell.config.to_dict()
        assert run_config(run.path)["kl.estimator"] == cell.config.kl.estimator  # status and report read it
    run = RunDir(done.sweep_dir / sweep.cells[0].run_key)
    assert run.ensure_config().read_text() == config_text(sweep.cells[0].config.to_dict())  # the job's start
    assert run.read_config() == sweep.cells[0].config.to_dict()  # read back from config.yaml (libyaml's parser)
    again = materialise(sweep, make_plan(sweep))
    assert (again.written, again.unchanged, again.updated) == (0, len(sweep.cells), 0)
    later = load_sweep(SMOKE, [f"sweep.output_root={tmp_path}", "sweep.seeds=[0,1]", "eval.k=3"])
    assert [c.run_key for c in later.cells] == [c.run_key for c in sweep.cells]
    assert materialise(later, make_plan(later)).updated == len(sweep.cells)
    assert all(RunDir(done.sweep_dir / c.run_key).read_config()["eval"]["k"] == 3 for c in later.cells)
    with pytest.raises(FileNotFoundError, match="no array file"):
        RunDir(done.sweep_dir / "0123456789ab").ensure_config()


def test_a_cell_that_moves_to_another_array_is_in_exactly_one_file(tmp_path):
    sweep = load_sweep(SMOKE, [f"sweep.output_root={tmp_path}"])
    plan = make_plan(sweep)
    done = materialise(sweep, plan)
    renamed = dataclasses.replace(plan, groups=tuple(dataclasses.replace(g, name=g.name.replace("train", "moved"))
                                                     for g in plan.groups))
    materialise(sweep, renamed)
    assert [p.name for p in config_tables_dir(done.sweep_dir).iterdir()] == ["moved-0.json"]
    # a cell dropped from the sweep keeps its entry: its queued job and its readers still need it
    fewer = dataclasses.replace(sweep, cells=sweep.cells[:1])
    materialise(fewer, make_plan(fewer))
    assert all(RunDir(done.sweep_dir / c.run_key).read_config() == c.config.to_dict() for c in sweep.cells)


def test_a_legacy_sweep_with_a_config_yaml_per_cell_is_read_and_kept(tmp_path):
    sweep = load_sweep(SMOKE, [f"sweep.output_root={tmp_path}"])
    sweep_dir = tmp_path / sweep.name
    for cell in sweep.cells:  # as orchestrate sweep wrote them before issue 25: no configs/
        atomic_write(RunDir(sweep_dir / cell.run_key).config, config_text(cell.config.to_dict()))
    run = RunDir(sweep_dir / sweep.cells[0].run_key)
    assert run.read_config() == sweep.cells[0].config.to_dict() and run.is_run()
    written = run.config.stat().st_mtime_ns
    done = materialise(sweep, make_plan(sweep))
    assert (done.written, done.unchanged) == (0, len(sweep.cells))
    assert run.ensure_config().stat().st_mtime_ns == written  # a job of a legacy cell finds its file as it was


STANDIN = """#!/bin/sh
echo "$(basename "$0") $*" >> "{log}"
case "$(basename "$0")" in
  sbatch) n=$(wc -l < "{log}"); echo "Submitted batch job $((1000 + n))" ;;
  scontrol) case "$1" in ping) echo "Slurmctld(primary) at standin is UP" ;;
                         show) echo "MaxArraySize = $STANDIN_MAX_ARRAY" ;; esac ;;
esac
exit 0
"""
SWEEP = """defaults: [base, {{model: tiny}}, {{data: tiny}}, {{algorithm: rloo}}, _self_]
rollout: {{engine: hf, max_response_tokens: 16, max_prompt_tokens: 64}}
kl: {{estimator: k1, placement: reward}}
tracking: {{tracking_uri: "file://{root}/mlruns"}}
sweep:
  name: counted{cells}
  output_root: {root}/runs
  seeds: range(0,10)
  axes: {{kl.beta: "{betas}"}}
  slurm: {{profile: local}}
"""


def test_submission_files_and_fsyncs_grow_with_arrays_not_cells(tmp_path, monkeypatch, capsys):
    """`orchestrate sweep --executor slurm` of 20 and of 200 cells in one array, with sbatch and sacct replaced by
    stand-ins that count their calls (a file store: nothing to reach, no schema): the same files outside
    the ledger and the same fsyncs but for the ledger shards the small sweep leaves untouched; before issue 25,
    one config.yaml (and its fsync) per cell and two submitit pickles per cell. Then 30 cells with MaxArraySize 11:
    at most 2 sbatch per chunk."""
    bin_dir, log = tmp_path / "bin", tmp_path / "calls.log"
    bin_dir.mkdir()
    log.touch()
    for name in ("sbatch", "sacct", "squeue", "scontrol", "scancel"):
        (bin_dir / name).write_text(STANDIN.format(log=log))
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    fsyncs, real = [0], os.fsync

    def counted(fd):
        fsyncs[0] += 1
        return real(fd)

    monkeypatch.setattr(os, "fsync", counted)
    seen = {}
    for cells, max_array in ((20, 1001), (200, 1001), (30, 11)):
        monkeypatch.setenv("STANDIN_MAX_ARRAY", str(max_array))
        monkeypatch.setattr(query, "_MAX_ARRAY", [])  # read once per process: this run's
        path = tmp_path / f"counted{cells}.yaml"
        path.write_text(SWEEP.format(root=tmp_path, cells=cells,
                                     betas=",".join(f"{0.001 * (i + 1):g}" for i in range(cells // 10))))
        fsyncs[0], calls = 0, len(log.read_text().splitlines())
        code = main(["sweep", str(path), "--executor", "slurm", "--no-watcher", "--train-entry",
                     "orchestrator.jobs:probe_train", "--eval-entry", "orchestrator.jobs:probe_eval"])
        assert code == 0, capsys.readouterr()
        sweep_dir = tmp_path / "runs" / f"counted{cells}"
        files = [p.relative_to(sweep_dir) for p in sweep_dir.rglob("*") if p.is_file() or p.is_symlink()]
        part = {p.parts[0] for p in files}
        seen[cells] = {"fsyncs": fsyncs[0], **{k: sum(p.parts[0] == k for p in files) for k in part},
                       "sbatch": sum(line.startswith("sbatch") for line in log.read_text().splitlines()[calls:]),
                       "ours": sorted(str(p) for p in files if p.parts[0] not in ("slurm", "code", "ledger"))}
    assert seen[200]["ours"] == seen[20]["ours"], seen  # the array's configs, the manifest, the options
    assert seen[20]["ledger"] <= seen[200]["ledger"] <= SHARDS + 1, seen  # its shards and its lock
    assert seen[200]["fsyncs"] <= seen[20]["fsyncs"] + 2 * (seen[200]["ledger"] - seen[20]["ledger"]), seen
    assert seen[200]["slurm"] == seen[20]["slurm"], seen  # per array: its pickle and its sbatch script
    assert seen[20]["sbatch"] == seen[200]["sbatch"] == 2, seen
    assert seen[30]["sbatch"] <= 2 * 3, seen  # 3 chunks of MaxArraySize 11
    fsyncs[0], calls = 0, len(log.read_text().splitlines())  # a relaunch of the 30: nothing to write, nothing sent
    assert main(["sweep", str(path), "--executor", "slurm", "--no-watcher", "--train-entry",
                 "orchestrator.jobs:probe_train", "--eval-entry", "orchestrator.jobs:probe_eval"]) == 0
    assert fsyncs[0] == 0 and not any(line.startswith("sbatch") for line in log.read_text().splitlines()[calls:])
