"""A sweep axis over RL libraries' settings (issue 57; orchestrator/sweep/library_axis.py): each value expands, by the
library map `orchestrate bias --library` reads, to the project's kl.* keys, so a library's default runs beside the
paper's configurations; validate and the dry run print what each value expands to; a bad name is one problem that
lists the choices."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.sweep.expand import load_sweep
from orchestrator.sweep.resource_plan import plan_report
from record.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
SMOKE = (REPO / "sweeps" / "smoke.yaml").read_text()
PAPER = "    - {kl.estimator: k1, kl.placement: reward}\n    - {kl.estimator: k3, kl.placement: loss}\n"


def sweep_file(tmp_path: Path, grid: str, name: str = "libs.yaml") -> Path:
    """The smoke sweep with its grid replaced by `grid` (blocks, one a line)."""
    assert PAPER in SMOKE
    path = tmp_path / name
    path.write_text(SMOKE.replace(PAPER, grid))
    return path


def test_library_values_expand_beside_the_papers_configurations(tmp_path):
    path = sweep_file(tmp_path, "    - {kl.estimator: k1, kl.placement: reward}\n"
                                '    - {library: ["verl:kl_loss_type=low_var_kl", "TRL:use_bias_correction_kl=true",'
                                ' "Tinker cookbook:kl_discount_factor=1.0"]}\n')
    cells = {c.name: c for c in load_sweep(path).cells}
    assert list(cells) == ["k1-reward-s0", "verl:kl_loss_type=low_var_kl-s0", "TRL:use_bias_correction_kl=true-s0",
                           "Tinkercookbook:kl_discount_factor=1.0-s0"]  # a name holds no space
    verl = cells["verl:kl_loss_type=low_var_kl-s0"].config
    assert (verl.kl.estimator, verl.kl.placement, verl.kl.clamp, verl.kl.beta) == ("k3", "loss", 20.0, 0.1)
    trl = cells["TRL:use_bias_correction_kl=true-s0"].config.kl
    assert (trl.estimator, trl.placement, trl.loss_form, trl.clamp) == ("k3", "loss", "rho", None)
    tinker = cells["Tinkercookbook:kl_discount_factor=1.0-s0"].config
    assert (tinker.kl.placement, tinker.kl.credit, tinker.algorithm.advantage) == ("reward", "reward_to_go", "none")


def test_a_library_value_is_the_same_cell_as_the_configuration_it_equals(tmp_path):
    named = load_sweep(sweep_file(tmp_path, '    - {library: "verl:kl_loss_type=low_var_kl"}\n', "a.yaml"))
    spelled = load_sweep(sweep_file(tmp_path, "    - {kl.estimator: k3, kl.placement: loss, kl.clamp: 20.0}\n",
                                    "b.yaml"))
    assert [c.run_key for c in named.cells] == [c.run_key for c in spelled.cells]


def test_the_sweeps_own_kl_settings_do_not_leak_into_the_librarys(tmp_path):
    path = sweep_file(tmp_path, '    - {library: "TRL:use_bias_correction_kl=false"}\n')
    (cell,) = load_sweep(path, ["kl.clamp=5.0"]).cells  # every cell's clamp, but TRL clamps nothing
    assert (cell.config.kl.estimator, cell.config.kl.loss_form, cell.config.kl.clamp) == ("k3", "plain", None)


def test_validate_and_the_dry_run_show_the_expanded_keys(tmp_path):
    path = sweep_file(tmp_path, '    - {library: ["verl:kl_loss_type=low_var_kl"]}\n')
    lines, _ = plan_report(load_sweep(path))  # what both print (orchestrator/commands/validate.py, pipeline/dry_run.py)
    assert lines[0].startswith("library verl:kl_loss_type=low_var_kl = kl.estimator=k3 kl.placement=loss "
                               "kl.loss_form=plain kl.credit=sequence kl.clamp=20.0, beta the sweep's kl.beta "
                               "(verl use_kl_loss=true kl_loss_type=low_var_kl: exact;")
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "validate", str(path), "--no-bias"], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "library verl:kl_loss_type=low_var_kl = kl.estimator=k3 kl.placement=loss" in done.stdout


def test_a_library_setting_on_the_command_line(tmp_path):
    path = sweep_file(tmp_path, "    - {kl.beta: 0.05}\n")
    (cell,) = load_sweep(path, ["library='OpenRLHF:use_loss=true,estimator=k2'"]).cells
    assert (cell.config.kl.estimator, cell.config.kl.placement, cell.config.kl.beta) == ("k2", "loss", 0.05)


def test_a_block_that_sets_a_key_the_library_value_sets_too_is_refused(tmp_path):
    path = sweep_file(tmp_path, "    - {kl.estimator: k1, kl.placement: reward}\n")
    with pytest.raises(ConfigError) as err:
        load_sweep(path, ["library='OpenRLHF:use_loss=true,estimator=k2'"])
    assert err.value.problems == ["sweep.grid[0]: kl.estimator, kl.placement and library in one block: the library "
                                  "value sets kl.estimator, kl.placement; drop one of the two (a library setting's "
                                  "coefficient is kl.beta)"]


@pytest.mark.parametrize(("value", "said"), [
    ("verl:kl_loss_type=low_var", "no verl setting in the map has kl_loss_type=low_var; its values there: abs, k3+, "
                                  "kl, low_var_kl, mse"),
    ("verk", "unknown library 'verk' in 'verk'; valid: verl, TRL, OpenRLHF, NeMo-RL, slime, SkyRL, prime-rl, "
             "torchforge, ROLL, Tinker cookbook"),
    ("TRL:beta=0.04", "names 3 configurations: TRL GRPOConfig.beta>0 GRPOConfig.use_bias_correction_kl=false (= "
                      "kl.estimator=k3 kl.placement=loss); TRL GRPOConfig.beta>0 GRPOConfig.use_bias_correction_kl="
                      "true (= kl.estimator=k3 kl.placement=loss kl.loss_form=rho); TRL RLOOConfig.beta>0"),
    ("verl:kl_loss_type=abs", "has no equal configuration here (~verl use_kl_loss=true kl_loss_type=abs: |log "
                              "pi/pi_ref| is not a registered estimator"),
])
def test_a_bad_library_value_is_one_problem_with_the_choices(tmp_path, value, said):
    path = sweep_file(tmp_path, f'    - {{library: ["verl:kl_loss_type=low_var_kl", "{value}"]}}\n')
    with pytest.raises(ConfigError) as err:
        load_sweep(path)
    (problem,) = err.value.problems
    assert problem.startswith("sweep.grid[0].library: ") and said in problem
