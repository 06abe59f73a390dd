"""rollout.gpu_memory_utilization by model from the Slurm profile (orchestrator/sweep/rollout_share.py): a sweep's
explicit value wins over the profile's map, which wins over the config default; the value never changes a cell's
run_key; the dry run shows it with where it came from; and a100.yaml's fractions keep the memory plan's figures."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from orchestrator.cli import main
from orchestrator.cluster.profile import SlurmProfile
from orchestrator.sweep.expand import load_sweep
from record.errors import ConfigError
from trainer.analysis.memory_plan import GB, plan
from trainer.analysis.model_shapes import shape_of
from trainer.config.run import RolloutConfig

REPO = Path(__file__).resolve().parents[2]
ONPOLICY = REPO / "sweeps" / "onpolicy.yaml"
FEW = ["sweep.seeds=[0]", "sweep.baselines=[]"]
QWEN, LLAMA = "Qwen/Qwen2.5-7B", "meta-llama/Llama-3.1-8B-Instruct"


def shares(sweep) -> dict[str, set[float]]:
    out: dict[str, set[float]] = {}
    for cell in sweep.cells:
        out.setdefault(cell.config.model.name_or_path, set()).add(cell.config.rollout.gpu_memory_utilization)
    return out


def test_the_sweeps_value_wins_over_the_profiles_map_which_wins_over_the_default(tmp_path):
    from_profile = load_sweep(ONPOLICY, FEW)
    assert shares(from_profile) == {QWEN: {0.45}, LLAMA: {0.6}}
    override = load_sweep(ONPOLICY, [*FEW, "rollout.gpu_memory_utilization=0.35"])
    assert shares(override) == {QWEN: {0.35}, LLAMA: {0.35}}
    # Set in the sweep file itself (here to the default's own value: explicit still wins over the map).
    text = ONPOLICY.read_text().replace("  - _self_\n", "  - _self_\nrollout:\n  gpu_memory_utilization: 0.3\n")
    (tmp_path / "own.yaml").write_text(text)
    assert shares(load_sweep(tmp_path / "own.yaml", FEW)) == {QWEN: {0.3}, LLAMA: {0.3}}
    # A profile without the map: the config default.
    bare = load_sweep(ONPOLICY, [*FEW, "sweep.slurm.overrides.rollout_gpu_memory_utilization=[]"])
    assert shares(bare) == {QWEN: {RolloutConfig().gpu_memory_utilization},
                            LLAMA: {RolloutConfig().gpu_memory_utilization}}

    # Machinery: where the value came from never changes a cell's identity.
    keys = [c.run_key for c in from_profile.cells]
    assert keys == [c.run_key for c in override.cells] == [c.run_key for c in bare.cells]
    configs = [dataclasses.replace(c.config, rollout=dataclasses.replace(c.config.rollout, gpu_memory_utilization=0.3))
               for c in from_profile.cells]
    assert configs == [c.config for c in bare.cells]  # and nothing else of the cell changed


def test_a_model_entry_wins_over_size_bounds_and_the_smallest_bound_that_holds_it_applies():
    profile = SlurmProfile.from_dict({"partition": "gpu", "rollout_gpu_memory_utilization": [
        {"max_params_b": 9, "fraction": 0.5}, {"max_params_b": 5, "fraction": 0.6},
        {"model": "Org/Named-8B", "fraction": 0.4}]}, "p")
    from orchestrator.sweep.rollout_share import profile_fraction

    rules = profile.rollout_shares
    assert profile_fraction(rules, "Org/Named-8B", 8.0).fraction == 0.4
    assert profile_fraction(rules, "Org/Other-8B", 8.0).fraction == 0.5
    assert profile_fraction(rules, "Org/Small-4B", 4.0).fraction == 0.6
    assert profile_fraction(rules, "Org/Huge-70B", 70.0) is None
    assert profile_fraction(rules, "/a/local/dir", None) is None
    assert profile.to_dict()["rollout_gpu_memory_utilization"][2] == {"model": "Org/Named-8B", "fraction": 0.4}


def test_bad_entries_are_each_named():
    with pytest.raises(ConfigError) as err:
        SlurmProfile.from_dict({"partition": "gpu", "rollout_gpu_memory_utilization": [
            {"max_params_b": 9, "fraction": 1.5}, {"model": "", "fraction": 0.5}, {"fraction": 0.5},
            {"max_params_b": True, "fraction": 0.5}, {"model": "A", "max_params_b": 3, "fraction": 0.5}]}, "p")
    text = "\n".join(err.value.problems)
    for expected in ("[0].fraction: 1.5", "[1].model: ''", "[2]: {'fraction': 0.5}; give fraction and one of",
                     "[3].max_params_b: True", "[4]: "):
        assert expected in text, text
    with pytest.raises(ConfigError, match="give a list"):
        SlurmProfile.from_dict({"partition": "gpu", "rollout_gpu_memory_utilization": 0.5}, "p")


def test_the_dry_run_shows_each_models_share_and_where_it_came_from(capsys):
    assert main(["sweep", "--dry-run", str(ONPOLICY), *FEW]) == 0
    out = capsys.readouterr().out
    assert (f"rollout.gpu_memory_utilization 0.45 for {QWEN} (profile a100, model {QWEN}): 36.0 GB of each 80 GB "
            f"GPU") in out
    assert "vllm 36.0" in out and "vllm 48.0" in out  # the memory plan uses the resolved value
    assert main(["sweep", "--dry-run", str(ONPOLICY), *FEW, "rollout.gpu_memory_utilization=0.35"]) == 0
    assert f"rollout.gpu_memory_utilization 0.35 for {QWEN} (set by the sweep)" in capsys.readouterr().out


def test_a100s_fractions_keep_the_memory_plans_figures():
    """The arithmetic in slurm/profiles/a100.yaml's comment, from the memory plan of the paper's cells."""
    for sweep_file in ("onpolicy.yaml", "async.yaml"):
        sweep = load_sweep(REPO / "sweeps" / sweep_file, FEW)
        for cell in sweep.cells:
            c = cell.config
            planned = plan(c, cell.resources.gpus, sweep.profile.gpu_mem_gb)
            assert planned.terms["vllm"] == pytest.approx(c.rollout.gpu_memory_utilization * 80)
            assert planned.rollout_peak_gb <= 0.9 * 80, (c.model.name_or_path, planned.rollout_peak_gb)
    cell = next(c for c in load_sweep(ONPOLICY, FEW).cells if c.config.model.name_or_path == QWEN)
    c, shape = cell.config, shape_of(QWEN)
    per_rank = c.optim.batch_prompts * c.algorithm.group_size // cell.resources.gpus
    kv = per_rank * (c.rollout.max_prompt_tokens + c.rollout.max_response_tokens) * shape.kv_bytes_per_token()
    assert per_rank == 160 and (kv + 2 * shape.params) / GB < 0.45 * 80  # Qwen's 0.45 holds a rank's 160 at once
