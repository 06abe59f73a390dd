"""A real job on the local Slurm cluster starts from a run dir that only its array's file describes (issue 25):
`orchestrate sweep` writes no config.yaml per cell; the job writes it at its start, trains to the config's
`optim.steps`, and its chained evaluation evaluates what the config's eval section names; status reads it."""

from __future__ import annotations

import json

import pytest
import yaml

from orchestrator.launch.ledger import Ledger
from record.config_table import config_tables_dir
from record.files import config_text
from record.identity.run_key import eval_id
from record.rundir import RunDir
from tests.support.probe_sweep import PROBE, orchestrate


@pytest.mark.slurm
def test_a_job_writes_its_config_yaml_from_the_array_file_and_runs_it(sweep_args, tmp_path):
    _, args, sweep_dir = sweep_args
    args = [*args, "optim.steps=3", "eval.k=2"]  # no probe.json: the probe counts to the config's optim.steps
    submitted = orchestrate("sweep", *args, *PROBE, "--no-watcher", cwd=tmp_path)
    assert submitted.returncode == 0, submitted.stderr
    keys = sorted(Ledger(sweep_dir).records())
    assert len(keys) == 2 and [p.name for p in config_tables_dir(sweep_dir).iterdir()] == ["train-0.json"]
    configs = {k: RunDir(sweep_dir / k).read_config() for k in keys}  # before any job: the array's file
    watch = orchestrate("watch", str(sweep_dir), "--poll", "2", "--timeout", "240", cwd=tmp_path)
    assert watch.returncode == 0, watch.stdout + watch.stderr
    for key in keys:
        run = RunDir(sweep_dir / key)
        assert run.config.read_text() == config_text(configs[key])  # written by the job, the same text
        assert json.loads(run.latest_checkpoint.read_text())["step"] == 3
        assert json.loads(run.evaluation(eval_id(configs[key])).read_text())["settings"]["k"] == 2
        starts = [json.loads(line) for line in run.starts.read_text().splitlines()]
        assert [s["from_step"] for s in starts] == [0]
    records = Ledger(sweep_dir).records()
    assert all(r["final"]["status"] == "completed" for r in records.values()), records
    status = orchestrate("status", str(sweep_dir), "--json", cwd=tmp_path)
    rows = [r for r in json.loads(status.stdout) if not r.get("watcher")]
    assert {r["state"] for r in rows} == {"done"}, rows
    assert yaml.safe_load(RunDir(sweep_dir / keys[0]).config.read_text())["optim"]["steps"] == 3
