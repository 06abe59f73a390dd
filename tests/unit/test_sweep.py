"""Loading and expanding sweep files: Hydra composition, overrides, the union of grids, seeds, dedup, and
every problem reported at once with the cells and axis values that produced it."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.sweep.expand import load_sweep
from record.errors import ConfigError, UserError

HEAD = """
defaults:
  - base
  - model: tiny
  - data: tiny
  - algorithm: rloo
  - _self_
rollout: {engine: hf, max_response_tokens: 16, max_prompt_tokens: 64}
"""


def write(tmp_path: Path, sweep: str, head: str = HEAD, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(head + sweep)
    return path


def problems(path: Path, overrides=()) -> list[str]:
    with pytest.raises(ConfigError) as err:
        load_sweep(path, overrides)
    return err.value.problems


def test_union_of_grids_times_seeds_deduplicated(tmp_path):
    path = write(tmp_path, """
sweep:
  seeds: [0, 1]
  grid:
    - {kl.estimator: "k1,k3", kl.placement: reward, kl.beta: 0.1}
    - {kl.estimator: k1, kl.placement: reward, kl.beta: 0.1}    # the same config as the first cell
    - {kl.placement: none}
""")
    sweep = load_sweep(path)
    assert [c.name for c in sweep.cells] == ["k1-reward-b0.1-s0", "k1-reward-b0.1-s1", "k3-reward-b0.1-s0",
                                              "k3-reward-b0.1-s1", "none-s0", "none-s1"]
    assert sweep.duplicates == 2
    assert [c.index for c in sweep.cells] == list(range(6))
    assert len({c.run_key for c in sweep.cells}) == 6
    assert sweep.name == "s"  # the file's name when the header gives none
    assert {c.config.tracking.experiment for c in sweep.cells} == {"s"}


def test_shared_axes_cross_every_block_and_groups_compose(tmp_path):
    path = write(tmp_path, """
sweep:
  axes: {optim.lr: "1e-5,1e-4", algorithm: "rloo,grpo"}
  grid:
    - {kl.estimator: k1, kl.placement: reward, kl.beta: "range(1,3)"}
    - {kl.placement: none}
""")
    cells = load_sweep(path).cells
    assert len(cells) == 2 * 2 * (2 + 1)
    assert {c.config.algorithm.advantage for c in cells} == {"rloo", "grpo"}
    assert {c.config.kl.beta for c in cells} == {0.0, 1.0, 2.0}
    assert {c.config.optim.lr for c in cells} == {1e-5, 1e-4}
    grpo = next(c for c in cells if c.config.algorithm.advantage == "grpo")
    assert grpo.config.algorithm.aggregation == "seq_mean_token_mean"  # the whole group option came in


def test_interpolations_resolve_per_cell_after_the_axis_values(tmp_path):
    path = write(tmp_path, """
sweep:
  grid: [{rollout.max_response_tokens: "8,32"}]
""", head=HEAD.replace("algorithm: rloo", "algorithm: dr_grpo"))
    cells = load_sweep(path).cells
    assert [(c.config.rollout.max_response_tokens, c.config.algorithm.norm_length) for c in cells] == [(8, 8), (32, 32)]


def test_interpolations_beyond_plain_references_go_through_omegaconf(tmp_path, monkeypatch):
    monkeypatch.setenv("COMEDY_TEST_EXPERIMENT", "from-env")
    path = write(tmp_path, "sweep: {grid: [{optim.steps: '1,2'}]}\n")
    cells = load_sweep(path, ["tracking.experiment=${oc.env:COMEDY_TEST_EXPERIMENT}"]).cells
    assert {c.config.tracking.experiment for c in cells} == {"from-env"}
    found = problems(path, ["data.val_split=${nowhere.key}"])
    assert len(found) == 1 and found[0].startswith("all 2 cells: interpolation:") and "nowhere" in found[0]


def test_a_bad_cell_names_its_axis_values(tmp_path):
    path = write(tmp_path, """
sweep:
  grid: [{kl.estimator: "k1,k4", kl.placement: reward, kl.beta: 0.1}]
""")
    assert problems(path) == ["cell 1 (kl.estimator=k4, kl.placement=reward, kl.beta=0.1, seed=0): "
                              "kl.estimator: unknown value 'k4'; valid: k1, k2, k3"]


def test_every_problem_at_once_grouped_by_the_values_that_cause_it(tmp_path):
    path = write(tmp_path, """
optim: {steps: 0}
sweep:
  seeds: [0, 1, 2]
  grid:
    - {kl.estimator: "k1,k4", kl.placement: "reward,loss", kl.beta: "0.1,-1"}
""")
    found = problems(path)
    assert "all 24 cells: optim.steps: 0; give an integer >= 1" in found
    assert any(p.startswith("12 cells with kl.estimator=k4 (cells ") and "unknown value 'k4'" in p for p in found)
    assert any(p.startswith("12 cells with kl.beta=-1 (") and "kl.beta: -1.0 is negative" in p for p in found)
    assert len(found) == 3


def test_command_line_overrides_in_hydra_syntax(tmp_path):
    path = write(tmp_path, """
sweep:
  grid: [{kl.estimator: "k1,k3", kl.placement: reward, kl.beta: 0.1}]
""")
    cells = load_sweep(path, ["optim.steps=10", "kl.beta=0.2,0.3", "sweep.seeds=[4]", "data.val_size=8"]).cells
    assert {c.config.optim.steps for c in cells} == {10}
    assert {c.config.kl.beta for c in cells} == {0.2, 0.3}  # the axis is replaced, not crossed
    assert len(cells) == 4 and {c.config.seed for c in cells} == {4}
    assert {c.config.data.val_size for c in cells} == {8}
    assert len(load_sweep(path, ["optim.lr=1e-5,1e-4"]).cells) == 4  # a new axis crosses the grid
    assert load_sweep(path, ["kl.clamp=5", "~kl.clamp"]).cells[0].config.kl.clamp is None


def test_unknown_keys_are_refused_even_with_plus(tmp_path):
    path = write(tmp_path, "sweep: {}\n")
    found = problems(path, ["+new.key=1", "optim.stepz=3"])
    assert found[0] == ("cell 0 (seed=0): new: unknown key; valid: model, data, rollout, optim, checkpoint, eval, "
                        "tracking, kl, algorithm, memory, seed, collapse")
    assert "(did you mean 'steps'?)" in found[1]


def test_bad_override_syntax_is_reported_with_the_rest(tmp_path):
    path = write(tmp_path, "sweep: {}\n")
    found = problems(path, ["kl.beta=0.1,", "optim.steps=0"])
    assert found[0].startswith("override 'kl.beta=0.1,': not Hydra override syntax")
    assert "optim.steps: 0" in found[1]


def test_unknown_group_option_lists_the_valid_ones(tmp_path):
    path = write(tmp_path, "sweep: {grid: [{model: 'tiny,nope'}]}\n")
    found = problems(path)
    assert len(found) == 1 and "cell 1 (model=nope, seed=0)" in found[0]
    assert ("Could not find 'model/nope'; valid: llama-3.1-8b-instruct, qwen2.5-7b, qwen3-4b-instruct-2507, "
            "smollm2-135m-instruct, tiny") in found[0]


def test_cells_are_checked_against_their_slurm_resources(tmp_path):
    path = write(tmp_path, "sweep: {slurm: {profile: local}}\n", head=HEAD.replace("model: tiny", "model: qwen2.5-7b"))
    found = problems(path)
    assert any("Qwen/Qwen2.5-7B (7.6B parameters) on profile 'local', which has no GPUs" in p for p in found)
    assert load_sweep(path, ["rollout.engine=vllm", "model=tiny"]).cells  # vLLM's CPU build runs the tiny model
    found = problems(path, ["rollout.engine=vllm", "model=tiny", "rollout.tensor_parallel=2"])
    assert any("rollout.tensor_parallel: 2 on profile 'local', which has no GPUs" in p for p in found)


def test_profile_problems(tmp_path):
    path = write(tmp_path, "sweep: {slurm: {profile: nowhere}}\n")
    assert problems(path)[0].startswith("sweep.slurm.profile: 'nowhere' not found")
    assert "valid: a100, local" in problems(path)[0]
    path = write(tmp_path, "sweep: {slurm: {profile: local, overrides: {nodes: 0, colour: red}}}\n")
    found = problems(path)
    assert any("colour: unknown key" in p for p in found) and any(".nodes: 0" in p for p in found)


def test_user_mistakes_with_files_are_user_errors(tmp_path):
    with pytest.raises(UserError, match="no such file"):
        load_sweep(tmp_path / "missing.yaml")
    with pytest.raises(UserError, match="a sweep file is YAML"):
        load_sweep(tmp_path / "sweep.txt")
    broken = tmp_path / "broken.yaml"
    broken.write_text("sweep:\n  grid: [\n")
    with pytest.raises(UserError, match=r"broken.yaml:\d+:\d+: YAML syntax error"):
        load_sweep(broken)
    listed = tmp_path / "list.yaml"
    listed.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="not a mapping"):
        load_sweep(listed)


def test_a_conf_dir_beside_the_sweep_file_adds_group_options(tmp_path):
    (tmp_path / "conf" / "model").mkdir(parents=True)
    (tmp_path / "conf" / "model" / "mine.yaml").write_text("name_or_path: tiny\nparams_b: 0.002\ndtype: fp32\n")
    path = write(tmp_path, "sweep: {}\n", head=HEAD.replace("model: tiny", "model: mine"))
    assert load_sweep(path).cells[0].config.model.params_b == 0.002
