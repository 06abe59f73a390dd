"""The memory plan before submission (issue 29, items 3 and 4): the profile states its GPU's memory, the paper's
sweep prints each model's training and evaluation plan, and a plan that does not fit is refused by validate, the
dry run and a submission with the knob to turn (the sums themselves: tests/unit/test_memory_plan.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from orchestrator.cluster.profile import SlurmProfile
from orchestrator.sweep.expand import load_sweep
from orchestrator.sweep.resource_plan import plan_report
from record.errors import ConfigError
from trainer.analysis.memory_plan import eval_plan
from trainer.config.run import RunConfig

REPO = Path(__file__).resolve().parents[2]


def test_the_a100_profile_states_its_gpu_memory_and_checks_the_value():
    a100 = SlurmProfile.from_dict(yaml.safe_load((REPO / "slurm/profiles/a100.yaml").read_text()), "a100")
    data = {k: v for k, v in a100.to_dict().items() if k != "name"}
    assert a100.gpu_mem_gb == 80 and SlurmProfile.from_dict(data, "a100") == a100
    with pytest.raises(ConfigError) as err:
        SlurmProfile.from_dict({"partition": "p", "gpu_mem_gb": "80GB"}, "bad")
    assert "slurm.gpu_mem_gb: '80GB'; give one GPU's memory in GB (80 for an A100 80GB), or null" in str(err.value)


def test_the_papers_sweep_plans_training_and_evaluation_and_fits():
    lines, problems = plan_report(load_sweep(REPO / "sweeps/onpolicy.yaml", []))
    assert problems == []
    assert any(line.startswith("memory Qwen/Qwen2.5-7B on 8 GPU(s)") for line in lines), lines
    assert any(line.startswith("evaluation meta-llama/Llama-3.1-8B-Instruct (estimated): host 26.2 of 32 GB")
               for line in lines), lines


def test_an_evaluation_host_too_small_for_the_bf16_export_is_refused_with_the_fix():
    sweep = load_sweep(REPO / "sweeps/onpolicy.yaml", ["sweep.slurm.overrides.eval.mem_gb=16"])
    _, problems = plan_report(sweep)
    assert problems and all("raise eval.mem_gb in the Slurm profile" in p for p in problems), problems
    assert "Qwen/Qwen2.5-7B needs ~25 GB of host memory, the profile's eval job asks for 16" in problems[0]


def test_an_evaluation_gpu_without_room_for_one_samples_kv_cache_is_refused():
    cfg = RunConfig.from_dict({"model": {"name_or_path": "meta-llama/Llama-3.1-8B-Instruct"}})
    assert eval_plan(cfg, 64, 80).problem() is None
    small = eval_plan(cfg, 64, 20)  # 0.85 x 20 GB - 16.1 GB of weights - 3 GB: nothing left
    assert small.kv_tokens == 0 and "leave no room for one sample's KV cache" in small.problem()


def test_the_dry_run_prints_the_plan_and_says_the_submission_would_stop():
    out = subprocess.run([sys.executable, "-m", "orchestrator.cli", "sweep", "sweeps/onpolicy.yaml", "--dry-run",
                          "--rows", "1", "sweep.slurm.overrides.gpu_mem_gb=40"], cwd=REPO, capture_output=True,
                         text=True, timeout=300)
    text = " ".join(out.stdout.split())
    assert out.returncode == 0, out.stderr[-2000:]
    assert "evaluation Qwen/Qwen2.5-7B (estimated): host 25.4 of 32 GB" in text, text[-3000:]
    assert "a submission would stop here: memory: Qwen/Qwen2.5-7B needs ~46 GB per GPU, the GPU has 40" in text


def test_the_evaluations_largest_task_is_timed_against_the_eval_jobs_limit():
    lines, problems = plan_report(load_sweep(REPO / "sweeps/onpolicy.yaml", []))
    timed = [line for line in lines if line.startswith("evaluation time")]
    assert len(timed) == 2 and all("largest task math500, 16,000 samples x 4,096 tokens" in t for t in timed), timed
    assert "~3.2 h at ~5,633 tokens/s a GPU, in 3 shard(s) of at most 6,591 samples (~1.33 h each; the eval job's " \
        "limit 4 h);" in timed[0]  # Qwen2.5-7B
    assert "~7.6 h at ~2,400 tokens/s a GPU, in 6 shard(s) of at most 2,808 samples" in timed[1]  # longer than a job
    node = [line for line in plan_report(load_sweep(REPO / "sweeps/onpolicy.yaml", [
        "sweep.slurm.overrides.eval.gpus_per_node=4", "sweep.slurm.overrides.eval.tasks_per_node=1"]))[0]
        if line.startswith("evaluation time")]
    assert "in 6 shard(s) of at most 2,808 samples (~1.33 h each; the eval job's limit 4 h) on 4 GPUs side by " \
        "side: ~1.9 h;" in node[1]  # the whole node: Llama's MATH500 in one job
    assert not [line for line in lines if line.startswith("warning:")] and problems == []


def test_the_shard_plan_sets_each_cells_shard_size_and_keeps_what_the_sweep_set():
    sweep = load_sweep(REPO / "sweeps/async.yaml", [])
    sizes = {c.config.model.name_or_path: c.config.eval.shard_samples for c in sweep.cells}
    assert sizes == {"Qwen/Qwen2.5-7B": 1786, "Qwen/Qwen3-4B-Instruct-2507": 779}  # a third of 4 h at the cap each
    by_hand = load_sweep(REPO / "sweeps/async.yaml", ["eval.shard_samples=64"])
    assert {c.config.eval.shard_samples for c in by_hand.cells} == {64}
    assert [c.run_key for c in by_hand.cells] == [c.run_key for c in sweep.cells]  # machinery: nothing retrains
    from record.identity.run_key import eval_id
    assert {eval_id(c.config) for c in by_hand.cells} == {eval_id(c.config) for c in sweep.cells}
    assert not any(c.config.eval.shard_samples for c in load_sweep(REPO / "sweeps/smoke.yaml").cells)  # CPU: whole


def test_a_sweep_whose_one_decode_batch_exceeds_a_third_of_the_eval_limit_is_refused():
    sweep = load_sweep(REPO / "sweeps/async.yaml", ["sweep.slurm.overrides.eval.time_min=10"])
    _, problems = plan_report(sweep)
    assert problems and all(p.startswith("evaluation time: one decode batch of") for p in problems), problems
    assert "raise eval time_min in the Slurm profile or lower eval.max_tokens" in problems[0]


def test_a_model_named_by_path_is_planned_at_its_real_size_or_refused(tmp_path):
    """Issue 43, item 4: a local directory whose config.json says 8B under the 4B group (params_b 4) is one problem
    naming both fixes; a model of unknown shape is said to be unplanned; the shipped sweeps agree with their
    models."""
    import json

    from trainer.analysis.model_shapes import SHAPES

    s = SHAPES["llama-3.1-8b-instruct"]
    (tmp_path / "config.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": s.hidden, "intermediate_size": s.intermediate,
        "num_hidden_layers": s.layers, "num_attention_heads": s.heads, "num_key_value_heads": s.kv_heads,
        "vocab_size": s.vocab, "tie_word_embeddings": s.tied}))
    _, problems = plan_report(load_sweep(REPO / "sweeps/async.yaml", [f"model.name_or_path={tmp_path}"]))
    assert [p for p in problems if "its config gives" in p] == [
        f"model {tmp_path}: its config gives 8.03B parameters, but model.params_b is 4 (the config group's?), and "
        f"resources, memory and disk are planned from it: set model.params_b=8.03, or pick the model's own group"]
    lines, _ = plan_report(load_sweep(REPO / "sweeps/onpolicy.yaml", ["model=qwen3-4b-instruct-2507",
                                                                      "model.name_or_path=Qwen/Qwen3-8B"]))
    assert any(line.startswith("model Qwen/Qwen3-8B: no known shape") for line in lines)
    for name in ("onpolicy", "async", "offpolicy", "correct-gradients", "smoke", "smoke-real"):
        lines, problems = plan_report(load_sweep(REPO / f"sweeps/{name}.yaml", []))
        assert not [p for p in problems if "its config gives" in p], name
        assert not [line for line in lines if "no known shape" in line], name
