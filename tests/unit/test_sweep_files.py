"""Every shipped sweep validates and expands to the cell count the paper implies (sweeps/README.md)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from orchestrator.sweep.expand import load_sweep

SWEEPS = Path(__file__).resolve().parents[2] / "sweeps"
COUNTS = {"onpolicy": 102, "offpolicy": 36, "async": 30, "correct-gradients": 12, "smoke": 2, "smoke-vllm": 2,
          "smoke-real": 2, "tiny-study": 27}


def configs(name: str):
    return [c.config for c in load_sweep(SWEEPS / f"{name}.yaml").cells]


def test_every_shipped_sweep_is_listed():
    assert {p.stem for p in SWEEPS.glob("*.yaml")} == set(COUNTS)


@pytest.mark.parametrize("name, count", COUNTS.items())
def test_shipped_sweep_validates_with_the_papers_cell_count(name, count):
    sweep = load_sweep(SWEEPS / f"{name}.yaml")
    assert len(sweep.cells) == count and sweep.duplicates == 0
    assert sweep.name == name
    assert len({c.name for c in sweep.cells}) == count


def test_onpolicy_is_section_4_1():
    cells = configs("onpolicy")
    kl = Counter((c.kl.estimator, c.kl.placement, c.kl.beta) for c in cells if c.kl.placement != "none")
    assert len(kl) == 16 and set(kl.values()) == {6}  # 2 models x 3 seeds each
    assert {c.kl.beta for c in cells} == {0.0, 0.05, 0.1, 0.3, 1.0}
    assert sum(c.kl.placement == "none" for c in cells) == 6
    assert Counter(c.model.name_or_path for c in cells) == {"Qwen/Qwen2.5-7B": 51,
                                                            "meta-llama/Llama-3.1-8B-Instruct": 51}
    one = cells[0]
    assert (one.algorithm.advantage, one.algorithm.aggregation, one.algorithm.group_size) == ("rloo", "token_mean", 5)
    optim = one.optim
    assert (optim.batch_prompts, optim.minibatch_prompts, optim.lr, optim.steps) == (256, 256, 1e-6, 250)
    assert (one.rollout.max_response_tokens, one.rollout.temperature, one.eval.k) == (1024, 1.0, 32)
    assert {c.seed for c in cells} == {0, 1, 2}


def test_offpolicy_is_d2():
    cells = configs("offpolicy")
    assert {c.optim.updates_per_batch for c in cells} == {4}
    assert {(c.optim.batch_prompts, c.optim.minibatch_prompts) for c in cells} == {(1024, 256)}
    assert set(Counter((c.kl.estimator, c.kl.placement) for c in cells)) == {("k1", "loss"), ("k1", "reward"),
                                                                               ("k3", "reward")}
    assert {c.kl.beta for c in cells} == {0.05, 0.1, 0.3, 1.0}


def test_async_is_section_4_2():
    sweep = load_sweep(SWEEPS / "async.yaml")
    cells = [c.config for c in sweep.cells]
    assert {(c.rollout.async_level, c.kl.beta if c.kl.placement != "none" else 0.005) for c in cells} == {(10, 0.005)}
    assert {(c.algorithm.advantage, c.algorithm.group_size, c.algorithm.norm_length) for c in cells} == {
        ("dr_grpo", 16, 4096)}
    assert {(c.optim.batch_prompts * c.algorithm.group_size, c.optim.steps) for c in cells} == {(512, 350)}
    pairs = Counter((c.model.name_or_path, c.data.dataset) for c in cells)
    assert pairs == {("Qwen/Qwen2.5-7B", "math"): 15, ("Qwen/Qwen3-4B-Instruct-2507", "countdown"): 15}
    assert {c.eval.tasks for c in cells if c.data.dataset == "countdown"} == {("countdown",)}
    # 4.2 tracks progress on MATH500, not the whole 5,000-problem MATH test (Pass@1 of 4.1).
    assert Counter((c.data.dataset, c.data.val_split) for c in cells) == {("math", "math500"): 15,
                                                                       ("countdown", "test"): 15}
    nodes = {c.config.model.name_or_path: c.resources.nodes for c in sweep.cells}
    assert nodes == {"Qwen/Qwen2.5-7B": 2, "Qwen/Qwen3-4B-Instruct-2507": 1}  # appendix B


def test_tiny_study_is_section_4_1s_grid_on_the_tiny_model():
    cells = configs("tiny-study")
    kl = Counter((c.kl.estimator, c.kl.placement, c.kl.beta) for c in cells if c.kl.placement != "none")
    assert len(kl) == 8 and set(kl.values()) == {3}  # K1/K3 x reward/loss x beta 0.3, 1; 3 seeds
    assert sum(c.kl.placement == "none" and c.kl.beta == 0 for c in cells) == 3
    assert {(c.model.name_or_path, c.rollout.engine, c.optim.batch_prompts, c.optim.minibatch_prompts)
            for c in cells} == {("tiny", "hf", 32, 32)}
    assert {c.seed for c in cells} == {0, 1, 2}


def test_correct_gradients_is_section_4_3():
    cells = configs("correct-gradients")
    assert Counter((c.kl.estimator, c.kl.placement) for c in cells) == {
        ("k1", "reward"): 3, ("k3", "loss"): 3, ("k1", "reward+loss"): 3, ("k3", "reward+loss"): 3}
    assert {(c.kl.beta, c.optim.steps) for c in cells} == {(0.1, 150)}


def test_smoke_runs_the_tiny_model_on_the_local_cluster():
    sweep = load_sweep(SWEEPS / "smoke.yaml")
    assert sweep.profile.name == "local" and sweep.profile.partition == "local"
    assert {(c.config.model.name_or_path, c.config.rollout.engine, c.resources.gpus) for c in sweep.cells} == {
        ("tiny", "hf", 0)}
    assert all(c.config.optim.steps <= 10 for c in sweep.cells)


def test_a_sweep_that_pulls_in_another_by_its_defaults_keeps_its_own_name(tmp_path):
    """Issue 43, item 5: the name is the file's unless the file itself sets it. A file whose defaults pull in
    onpolicy.yaml inherited `sweep.name: onpolicy` and would have written into that sweep's directory and ledger."""
    import shutil

    shutil.copy(SWEEPS / "onpolicy.yaml", tmp_path / "onpolicy.yaml")
    (tmp_path / "mine.yaml").write_text("defaults:\n  - onpolicy\n  - _self_\n")
    (tmp_path / "named.yaml").write_text("defaults:\n  - onpolicy\n  - _self_\nsweep:\n  name: chosen\n")
    assert load_sweep(tmp_path / "mine.yaml").name == "mine"
    assert load_sweep(tmp_path / "named.yaml").name == "chosen"
    assert load_sweep(tmp_path / "onpolicy.yaml").name == "onpolicy"
    assert load_sweep(tmp_path / "mine.yaml", ["sweep.name=other"]).name == "other"


def test_another_sweep_file_of_the_same_name_is_refused_its_directory(tmp_path, monkeypatch):
    """Issue 43, item 5: a sweep directory records the file that made it (manifest.json `source`); another file of
    the same name is refused at validate, in the dry run and at submission, with the fix. The same file, given by
    another path, is the same sweep."""
    from orchestrator.cli import main
    from orchestrator.launch.materialise import materialise
    from orchestrator.launch.plan import make_plan
    from record.errors import UserError

    smoke = (SWEEPS / "smoke.yaml").read_text()
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first, second = tmp_path / "a" / "smoke.yaml", tmp_path / "b" / "smoke.yaml"
    first.write_text(smoke)
    second.write_text(smoke.replace("steps: 4", "steps: 5"))
    root = [f"sweep.output_root={tmp_path / 'runs'}"]
    sweep = load_sweep(first, root)
    materialise(sweep, make_plan(sweep))
    monkeypatch.chdir(tmp_path / "a")
    materialise(load_sweep("smoke.yaml", root), make_plan(sweep))  # the same file by a relative path: its own
    other = load_sweep(second, root)
    with pytest.raises(UserError, match="is the directory of the sweep .*a/smoke.yaml .*Give it a name of its own"):
        materialise(other, make_plan(other))
    assert main(["validate", str(second), *root, "--no-bias"]) == 2
    assert main(["sweep", str(second), *root, "--dry-run"]) == 0  # the dry run says what a submission would do
    assert main(["sweep", str(second), *root, "--executor", "local"]) != 0
    assert load_sweep(second, [*root, "sweep.name=mine"]).name == "mine"
    moved = tmp_path / "c" / "smoke.yaml"  # the first file moved, unchanged: recognised by its content
    moved.parent.mkdir()
    moved.write_text(smoke)
    materialise(load_sweep(moved, root), make_plan(sweep))
