"""A KL term whose gradient fingerprint equals beta = 0's does nothing, and is named (issue 57): by validate before
anything is submitted (orchestrator/sweep/knobs.py `inert_kl`), by the report from what each cell recorded
(orchestrator/report/kl_fingerprint.py) and by status (orchestrator/status/kl_flags.py). The planted no-op is a real
configuration, not a patched loss: K1 in the reward under Dr. GRPO with a group of one, whose baseline (the group's
own mean) centres the whole shaped reward, KL included, away."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from orchestrator.cli import main
from orchestrator.launch import ledger as L
from orchestrator.report import kl_fingerprint
from orchestrator.report.page import render_markdown
from orchestrator.status import kl_flags
from orchestrator.status.cells import cell_rows, run_config
from orchestrator.status.tables import render
from orchestrator.sweep.expand import load_sweep
from orchestrator.sweep.knobs import inert_kl, zero_beta, zero_hash
from record.files import atomic_write
from record.rundir import RunDir
from trainer.objective.fingerprint import fingerprint
from trainer.objective.settings import AlgorithmConfig, KLConfig
from trainer.train import objective_manifest

REPO = Path(__file__).resolve().parents[2]
SMOKE = REPO / "sweeps" / "smoke.yaml"  # two cells: K1 in the reward, K3 in the loss
GROUP_OF_ONE = ["algorithm.advantage=dr_grpo", "algorithm.group_size=1"]


def trained(tmp_path, overrides):
    """The smoke sweep's cells as trained: config.yaml and objective.json (the trainer's own writer), a ledger
    record each with a completed training."""
    sweep = load_sweep(SMOKE, [f"sweep.output_root={tmp_path}", *overrides])
    records = {}
    for cell in sweep.cells:
        run = RunDir(tmp_path / "smoke" / cell.run_key)
        atomic_write(run.config, yaml.safe_dump(cell.config.to_dict()))
        atomic_write(run.objective, json.dumps(objective_manifest(cell.config)))
        record = L.new_record("smoke", cell.run_key, cell.name, dict(cell.axes), run.path)
        L.add_attempt(record, "train", "t", 1.0, job_id="1", state="COMPLETED", executor="local")
        L.Ledger(tmp_path / "smoke").save(record)
        records[cell.run_key] = record
    return sweep, records


def report_check(records):
    rows = cell_rows(records)
    return {e["name"]: e for e in kl_fingerprint.check(rows, {k: run_config(Path(r["run_dir"]))
                                                             for k, r in records.items()})}


def test_beta_zeroed_is_the_no_kl_configuration():
    kl = KLConfig(estimator="k1", placement="reward", beta=0.3, credit="reward_to_go", clamp=5.0)
    assert zero_beta(kl) == KLConfig(estimator="k1", placement="none", clamp=5.0)
    algo = AlgorithmConfig()
    assert zero_hash(kl, algo) == fingerprint(KLConfig(), algo)["hash"]  # every no-KL spelling: one gradient


def test_validate_names_a_kl_whose_coefficient_never_reaches_the_gradient():
    (inert,) = inert_kl(load_sweep(SMOKE, GROUP_OF_ONE))
    assert inert.name == "k1-reward" and inert.cells == 1  # K3 in the loss still acts under a group of one
    assert "equals the same settings' at beta = 0" in inert.line()


@pytest.mark.parametrize("sweep", ["smoke", "onpolicy", "tiny-study"])
def test_the_shipped_sweeps_have_none(sweep):
    assert inert_kl(load_sweep(REPO / "sweeps" / f"{sweep}.yaml")) == []


def test_the_report_flags_the_planted_no_op_and_not_a_real_kl(tmp_path):
    _, records = trained(tmp_path / "planted", GROUP_OF_ONE)
    entries = report_check(records)
    assert entries["k1-reward"]["flagged"] and "never reaches the gradient" in entries["k1-reward"]["why"]
    assert not entries["k3-loss"]["flagged"]
    text = render_markdown(kl_fingerprint.blocks(list(entries.values())))
    assert "Flagged: k1-reward." in text and "FLAGGED" in text
    _, real = trained(tmp_path / "real", ["kl.beta=0.3"])  # K1 in the reward at beta 0.3 under RLOO
    entries = report_check(real)
    assert not entries["k1-reward"]["flagged"] and "differs from beta = 0's" in entries["k1-reward"]["why"]


def test_status_shows_the_flags_by_name_with_why(tmp_path, capsys):
    _, records = trained(tmp_path, GROUP_OF_ONE)
    sweep_dir = tmp_path / "smoke"
    slope = {"check": "slope", "name": "K3 in loss [model=tiny]", "flagged": True,
             "why": "flat across betas: the KL term does not act (a coefficient dropped?)"}
    kl_flags.save(sweep_dir, [slope, *report_check(records).values()])  # what `orchestrate report` leaves
    console = Console(width=200, record=True)
    console.print(render(sweep_dir, 200, records, None, {}))
    shown = console.export_text()
    assert "KL terms flagged as doing nothing" in shown
    assert "k1-reward (gradient fingerprint against beta = 0's): its gradient fingerprint" in shown
    assert "K3 in loss [model=tiny] (measured KL against beta): flat across betas" in shown
    assert "k3-loss (" not in shown
    capsys.readouterr()  # the console above printed too
    assert main(["status", str(sweep_dir), "--json"]) == 0
    flags = [r for r in json.loads(capsys.readouterr().out) if r.get("kl_flag")]
    assert [(f["check"], f["name"]) for f in flags] == [("slope", "K3 in loss [model=tiny]"),
                                                        ("fingerprint", "k1-reward")]
    assert main(["status", str(sweep_dir)]) == 0
    assert "k1-reward (gradient fingerprint against beta = 0's)" in capsys.readouterr().out


def test_status_checks_the_recorded_fingerprints_against_the_beta_0_cells_itself(tmp_path):
    """Without a report: a cell whose recorded hash equals its context's beta = 0 cell's is flagged."""
    algo = AlgorithmConfig()
    none = fingerprint(KLConfig(), algo)["hash"]
    rows = [{"config": "none-b0", "axes": {"model": "tiny", "kl.placement": "none", "kl.beta": 0, "seed": 0},
             "fingerprint": none},
            {"config": "k3-loss-b0.1", "axes": {"model": "tiny", "kl.placement": "loss", "kl.beta": 0.1, "seed": 0},
             "fingerprint": none},  # as a loss that drops its KL term records it
            {"config": "k1-reward-b0.1", "seed": 0,
             "axes": {"model": "tiny", "kl.placement": "reward", "kl.beta": 0.1, "seed": 0},
             "fingerprint": fingerprint(KLConfig(placement="reward", beta=0.1), algo)["hash"]},
            {"config": "k1-reward-b0.1-other", "axes": {"model": "big", "kl.placement": "reward", "seed": 0},
             "fingerprint": none}]  # another context, no beta = 0 cell there: nothing to compare with
    (flag,) = kl_flags.flagged(tmp_path, rows)
    assert flag == {"check": "fingerprint", "name": "k3-loss-b0.1",
                    "why": f"its gradient fingerprint {none} equals beta = 0's (the context's beta = 0 cells): the "
                           f"KL coefficient never reaches the gradient"}
    assert kl_flags.lines([flag])[0].startswith("k3-loss-b0.1 (gradient fingerprint against beta = 0's): ")


def test_validate_prints_the_flag_before_anything_is_submitted():
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "validate", str(SMOKE), *GROUP_OF_ONE],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "warning: k1-reward: the KL term does nothing: its gradient fingerprint" in done.stdout
    assert "k3-loss: the KL term" not in done.stdout
