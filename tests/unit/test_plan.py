"""The plan: arrays by resources, chunked to the array limit, each chained to its evaluation array; and the
sbatch scripts submitit would render for them."""

from __future__ import annotations

from pathlib import Path

from orchestrator.cluster.executor import render_sbatch, sbatch_parameters
from orchestrator.launch.plan import make_plan, summary_lines
from orchestrator.sweep.expand import load_sweep

SWEEPS = Path(__file__).resolve().parents[2] / "sweeps"


def test_cells_with_the_same_resources_share_one_array():
    sweep = load_sweep(SWEEPS / "async.yaml")
    plan = make_plan(sweep)
    assert [(g.name, g.kind, g.size) for g in plan.groups] == [
        ("train-0", "train", 15), ("eval-0", "eval", 15), ("train-1", "train", 15), ("eval-1", "eval", 15)]
    for group in plan.train:
        assert len({sweep.cells[i].resources for i in group.cells}) == 1
        assert group.run_keys == tuple(sweep.cells[i].run_key for i in group.cells)
    assert {plan.train[0].resources.nodes, plan.train[1].resources.nodes} == {1, 2}


def test_eval_arrays_follow_their_train_array_task_by_task():
    sweep = load_sweep(SWEEPS / "onpolicy.yaml")
    plan = make_plan(sweep)
    assert plan.edges() == [("train-0", "aftercorr", "eval-0")]
    train, evaluation, baselines = plan.groups
    assert evaluation.after == train.name and evaluation.cells == train.cells and evaluation.run_keys == train.run_keys
    # the three base models the sweep declares: one array on the evaluation's resources, in the totals
    assert baselines.kind == "baseline" and baselines.after is None and baselines.resources == evaluation.resources
    assert baselines.run_keys == tuple(b.key for b in sweep.baselines) and len(baselines.run_keys) == 3
    assert plan.counts() == {"cells": 102, "skipped": 0, "train_arrays": 1, "eval_arrays": 1, "baselines": 3,
                             "baseline_arrays": 1, "array_tasks": 207,
                             "gpu_hours_max": 102 * 8 * 24 + 102 * 1 * 4 + 3 * 1 * 4}


def test_arrays_are_split_at_the_profiles_limit():
    sweep = load_sweep(SWEEPS / "onpolicy.yaml", ["sweep.slurm.overrides.max_array_size=40"])
    plan = make_plan(sweep)
    assert [g.size for g in plan.train] == [40, 40, 22]
    assert plan.edges() == [(f"train-{i}", "aftercorr", f"eval-{i}") for i in range(3)]
    assert sorted(i for g in plan.train for i in g.cells) == list(range(102))


def test_skip_leaves_cells_out():
    sweep = load_sweep(SWEEPS / "correct-gradients.yaml")
    done = {c.run_key for c in sweep.cells[:5]}
    plan = make_plan(sweep, skip=done)
    assert set(plan.skipped) == done and plan.counts()["cells"] == 7
    assert not done & {k for g in plan.groups for k in g.run_keys}


def test_sbatch_scripts_render_through_submitit():
    sweep = load_sweep(SWEEPS / "onpolicy.yaml")
    plan = make_plan(sweep)
    train = render_sbatch(sweep, plan, plan.groups[0], python="python")
    assert train.startswith("#!/bin/bash")
    for line in ("#SBATCH --array=0-101%8", "#SBATCH --job-name=onpolicy-train-0", "#SBATCH --nodes=2",
                 "#SBATCH --gpus-per-node=4", "#SBATCH --ntasks-per-node=4", "#SBATCH --partition=gpu",
                 "#SBATCH --time=1440", "#SBATCH --mem=400G", "#SBATCH --signal=USR2@600"):
        assert line in train.splitlines(), line
    assert "python -u -m orchestrator.cluster.arrays" in train  # one pickle for the array (issue 25)
    evaluation = render_sbatch(sweep, plan, plan.groups[1], python="python")
    assert "#SBATCH --dependency='aftercorr:<job id of onpolicy-train-0>'" in evaluation
    assert "#SBATCH --kill-on-invalid-dep=yes" in evaluation


def test_no_gpu_flag_on_a_cpu_profile():
    sweep = load_sweep(SWEEPS / "smoke.yaml")
    plan = make_plan(sweep)
    params = sbatch_parameters(sweep, plan, plan.groups[0])
    assert "gpus_per_node" not in params and params["partition"] == "local" and params["mem"] == "2G"
    assert "--gpus-per-node" not in render_sbatch(sweep, plan, plan.groups[0])


def test_the_grid_summary_counts_the_base_value_a_block_overrides(tmp_path):
    """One block sets rollout.engine: vllm; the other block's cells keep the file's hf: two values, not one."""
    block = "    - {kl.estimator: k3, kl.placement: loss}"
    text = (SWEEPS / "smoke.yaml").read_text().replace(block, block[:-1] + ", rollout.engine: vllm}")
    assert "rollout.engine: vllm" in text
    (tmp_path / "blocks.yaml").write_text(text)
    sweep = load_sweep(tmp_path / "blocks.yaml")
    [axes] = [line for line in summary_lines(sweep, make_plan(sweep)) if line.startswith("axes")]
    assert axes == "axes (distinct values): kl.estimator (2), kl.placement (2), rollout.engine (2)"
