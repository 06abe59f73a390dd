"""Baselines in a sweep file (orchestrator/sweep/spec.py, orchestrator/sweep/baselines.py): each entry checked, every
problem of every entry at once beside the cells', each resolved like a cell with its own model and eval settings,
its identity what the evaluation computes; the relaunch rule (orchestrator/launch/plan.py `triage_baselines`);
and the report's matching of baselines to the cells of their model (orchestrator/report/base_models.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from orchestrator.launch.materialise import materialise_baselines
from orchestrator.launch.plan import triage_baselines
from orchestrator.report.base_models import references
from orchestrator.sweep.expand import load_sweep
from orchestrator.sweep.spec import SweepSpec
from record.errors import ConfigError, UserError
from record.rundir import RunDir

HEAD = """
defaults:
  - base
  - model: tiny
  - data: tiny
  - algorithm: rloo
  - _self_
rollout: {engine: hf, max_response_tokens: 16, max_prompt_tokens: 64}
eval: {tasks: [tiny], k: 4, max_tokens: 16}
kl: {beta: 0.1}
"""
GRID = """
sweep:
  grid:
    - {kl.estimator: k1, kl.placement: reward}
"""


def write(tmp_path: Path, baselines: str, grid: str = GRID) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(HEAD + grid + baselines)
    return path


def test_every_bad_entry_is_named_at_once_with_the_cells_problems(tmp_path):
    path = write(tmp_path, """
  baselines:
    - {model: gpt9}
    - {model: tiny, optim.lr: 0.1}
    - {model: tiny, eval.kk: 3}
    - {model: tiny}
    - {model: tiny}
    - {model: tiny, eval.k: 4}
    - {eval.k: 8}
    - 3
""", grid="""
sweep:
  grid:
    - {kl.estimator: k4, kl.placement: reward}
""")
    with pytest.raises(ConfigError) as err:
        load_sweep(path)
    found = err.value.problems
    expected = [
        "sweep.baselines[0].model: ",  # the model option does not exist: Hydra's choices listed
        "sweep.baselines[1].optim.lr: unknown key; a baseline sets model",
        "sweep.baselines[2]: eval.kk: unknown key (did you mean 'k'?)",
        "sweep.baselines[4]: the same baseline as sweep.baselines[3]",
        "sweep.baselines[5]: the same evaluation as sweep.baselines[3] once resolved (base-tiny-ct)",
        "sweep.baselines[6].model: None; name the model's config group option",
        "sweep.baselines[7]: 3 is not a mapping",
        "cell 0 (kl.estimator=k4, kl.placement=reward, seed=0): kl.estimator: unknown value 'k4'",
    ]
    for start in expected:
        assert sum(p.startswith(start) for p in found) == 1, (start, found)
    assert "valid: llama-3.1-8b-instruct, qwen2.5-7b, qwen3-4b-instruct-2507, smollm2-135m-instruct, tiny" in found[
        [p.startswith("sweep.baselines[0]") for p in found].index(True)]
    assert len(found) == len(expected), found


def test_the_spec_alone_raises_its_problems_and_lists_must_be_lists():
    with pytest.raises(ConfigError, match=r"sweep.baselines\[0\].data: unknown key"):
        SweepSpec.from_dict({"baselines": [{"model": "tiny", "data": "math"}]}, "s")
    with pytest.raises(ConfigError, match="sweep.baselines: 'tiny'; give a list"):
        SweepSpec.from_dict({"baselines": "tiny"}, "s")
    spec = SweepSpec.from_dict({"baselines": [{"eval.tasks": ["tiny", "tiny_ood"], "model": "tiny"}]}, "s")
    assert spec.baselines[0].settings == (("model", "tiny"), ("eval.tasks", ("tiny", "tiny_ood")))
    assert spec.to_dict()["baselines"] == [{"model": "tiny", "eval.tasks": ["tiny", "tiny_ood"]}]


def test_expansion_resolves_each_baseline_with_its_own_model_and_eval_settings(tmp_path):
    path = write(tmp_path, """
  baselines:
    - {model: tiny}
    - {model: tiny, eval.chat_template: false}
    - {model: qwen2.5-7b, eval.chat_template: false, eval.k: 32}
""")
    sweep = load_sweep(path, ["eval.max_tokens=12", "model=tiny"])  # fixed overrides reach them; model= does not
    by_name = {b.name: b for b in sweep.baselines}
    assert sorted(by_name) == ["base-qwen2.5-7b-no-ct-k32", "base-tiny-ct", "base-tiny-no-ct"]
    qwen = by_name["base-qwen2.5-7b-no-ct-k32"].config
    assert (qwen.model.name_or_path, qwen.eval.chat_template, qwen.eval.k, qwen.eval.max_tokens) == (
        "Qwen/Qwen2.5-7B", False, 32, 12)
    assert by_name["base-tiny-ct"].config.eval.chat_template is True
    assert by_name["base-tiny-ct"].config.kl.placement == "none"  # a baseline trains nothing
    assert all(b.key.startswith(b.name + "-") for b in sweep.baselines)
    assert len(sweep.cells) == 1  # the cells are what they were

    # What the training does is not the baseline's identity; what the evaluation does is.
    same = load_sweep(path, ["eval.max_tokens=12", "optim.steps=99", "optim.lr=0.5"])
    assert [b.key for b in same.baselines] == [b.key for b in sweep.baselines]
    other = load_sweep(path, ["eval.max_tokens=13"])
    assert not {b.key for b in other.baselines} & {b.key for b in sweep.baselines}
    assert load_sweep(path, ["sweep.baselines=[]"]).baselines == ()


def test_run_dirs_carry_the_marker_and_refuse_another_evaluation(tmp_path):
    path = write(tmp_path, "  baselines: [{model: tiny}]\n")
    sweep = load_sweep(path)
    assert materialise_baselines(sweep.baselines, tmp_path / "sw") == (1, 0)
    assert materialise_baselines(sweep.baselines, tmp_path / "sw") == (0, 1)
    run = RunDir(tmp_path / "sw" / "baselines" / sweep.baselines[0].key)
    assert run.is_baseline() and json.loads(run.baseline.read_text())["name_or_path"] == "tiny"
    data = yaml.safe_load(run.config.read_text())
    data["eval"]["k"] = 7
    run.config.write_text(yaml.safe_dump(data))
    with pytest.raises(UserError, match="holds another evaluation"):
        materialise_baselines(sweep.baselines, tmp_path / "sw")


def job(state: str) -> dict:
    return {"kind": "eval", "state": state, "job_id": "1"}


def test_a_relaunch_submits_only_baselines_never_submitted_or_lost_to_the_infrastructure():
    records = {k: {"jobs": [job(s)]} for k, s in (("done", "COMPLETED"), ("live", "RUNNING"), ("lost", "LOST"),
                                                  ("node", "NODE_FAIL"), ("failed", "FAILED"))}
    todo, kept = triage_baselines(records, [*records, "new"])
    assert todo == ["lost", "node", "new"]
    assert kept == {"evaluated": 1, "live": 1, "FAILED": 1}
    todo, _ = triage_baselines(records, [*records, "new"], retry_failed=True)
    assert todo == ["lost", "node", "failed", "new"]


def test_the_report_draws_a_baseline_with_the_cells_of_its_model():
    rows = [{"model": "qwen2.5-7b", "chat_template": False, "eval": {"eval/math500/mean_at_32": 0.4}},
            {"model": "llama-3.1-8b-instruct", "chat_template": True, "eval": {"eval/math500/mean_at_32": 0.3}},
            {"model": "qwen2.5-7b", "chat_template": True, "eval": {}}]  # not evaluated yet
    assert references(rows, (("model", "qwen2.5-7b"),)) == [
        {"label": "qwen2.5-7b base (no CT)", "key": "eval/math500/mean_at_32", "mean": 0.4}]
    assert len(references(rows, ())) == 2  # one model in the sweep: every baseline
