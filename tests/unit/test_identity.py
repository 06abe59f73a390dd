"""run_key: the same resolved config gives the same key anywhere; any change to what the run computes changes it, and
nothing else does (record/identity/fields.py); eval_id changes with what the evaluation does."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from orchestrator.sweep.expand import load_sweep
from record.identity import fields as fields_table
from record.identity.run_key import canonical_json, eval_id, identity_json, run_key
from tests.support.legacy_identity import legacy_run_key
from trainer.config.run import RunConfig

REPO = Path(__file__).resolve().parents[2]
ONPOLICY = REPO / "sweeps" / "onpolicy.yaml"


def leaves(data: dict, prefix: str = ""):
    for key, value in data.items():
        if isinstance(value, dict) and value:
            yield from leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def changed(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        return value + "x"
    if isinstance(value, list):
        return value + value[:1]
    if value is None:
        return 1
    return {"x": 1}


def test_same_sweep_same_keys_across_loads_and_processes():
    keys = [c.run_key for c in load_sweep(ONPOLICY).cells]
    assert keys == [c.run_key for c in load_sweep(ONPOLICY).cells]
    code = ("import json, sys; from orchestrator.sweep.expand import load_sweep; "
            f"print(json.dumps([c.run_key for c in load_sweep({str(ONPOLICY)!r}).cells]))")
    other = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True,
                           env={"PYTHONHASHSEED": "12345", "PATH": "/usr/bin:/bin"})
    assert json.loads(other.stdout) == keys
    assert len(set(keys)) == len(keys) == 102
    assert all(len(k) == 12 and int(k, 16) >= 0 for k in keys)


def edit(config: dict, path: str, value) -> dict:
    edited = json.loads(json.dumps(config))
    node = edited
    *parents, last = path.split(".")
    for p in parents:
        node = node[p]
    node[last] = value
    return edited


def test_a_change_moves_exactly_the_identity_its_field_belongs_to():
    base = load_sweep(ONPOLICY).cells[0].config.to_dict()
    key, ev = run_key(base), eval_id(base)
    seen = set()
    for path, value in leaves(base):
        kind = fields_table.of("collapse" if path.startswith("collapse") else path)
        seen.add(kind)
        edited = edit(base, path, changed(value))
        # another hub id is other weights; the same weights named another way are one (test_weights.py)
        trains = kind == fields_table.COMPUTES or path == "model.name_or_path"
        assert (run_key(edited) != key) == trains, path
        assert (eval_id(edited) != ev) == (kind == fields_table.EVALUATES), path
    assert seen == {fields_table.COMPUTES, fields_table.EVALUATES, fields_table.MACHINERY}


def test_the_issue_s_relaunch_changes_keep_every_training_key():
    """eval.k, checkpoint.keep_last, checkpoint.every, rollout.gpu_memory_utilization: each gave every cell a new
    key before identity version 2 (a relaunch retrained all of them)."""
    for cell in load_sweep(REPO / "sweeps" / "smoke.yaml").cells:
        base = cell.config.to_dict()
        for path, value in (("eval.k", 2), ("checkpoint.keep_last", 3), ("checkpoint.every", 1),
                            ("rollout.gpu_memory_utilization", 0.5), ("data.train_path", "/elsewhere/t.jsonl")):
            edited = edit(base, path, value)
            assert legacy_run_key(edited) != legacy_run_key(base), path
            assert run_key(edited) == run_key(base) == cell.run_key, path


def test_tracking_is_not_part_of_the_identity():
    config = load_sweep(ONPOLICY).cells[0].config.to_dict()
    moved = {**config, "tracking": {"tracking_uri": "http://elsewhere:5000", "experiment": "other"}}
    assert run_key(moved) == run_key(config)


def test_key_is_independent_of_dict_order():
    config = load_sweep(ONPOLICY).cells[5].config.to_dict()
    reordered = {k: dict(reversed(list(v.items()))) if isinstance(v, dict) else v
                 for k, v in reversed(list(config.items()))}
    assert list(reordered) != list(config)
    assert run_key(reordered) == run_key(config)


def test_a_run_config_and_its_mapping_hash_alike():
    """One path, two inputs: a RunConfig's sections (rendered once per object) and the plain mapping of a legacy
    config.yaml give one identity, and the string assembled a section at a time is the canonical JSON it claims."""
    for cell in load_sweep(REPO / "sweeps" / "async.yaml").cells:
        for kind in (fields_table.COMPUTES, fields_table.EVALUATES):
            text = identity_json(cell.config, kind)
            assert text == identity_json(cell.config.to_dict(), kind) == canonical_json(json.loads(text))
        assert run_key(cell.config) == run_key(cell.config.to_dict())
        assert eval_id(cell.config) == eval_id(cell.config.to_dict())
    config = RunConfig.from_dict({"model": {"name_or_path": "m"}, "collapse": {"b": [1, 2], "a": None}})
    assert run_key(config) == run_key(config.to_dict())


def test_int_and_float_spellings_of_a_value_give_one_key():
    one = RunConfig.from_dict({"model": {"name_or_path": "m"}, "kl": {"placement": "reward", "beta": 1}})
    other = RunConfig.from_dict({"model": {"name_or_path": "m"}, "kl": {"placement": "reward", "beta": 1.0}})
    assert run_key(one) == run_key(other)


def test_a_grader_changes_its_identity_and_the_default_keeps_the_old_keys():
    """data.grader and eval.grader came after cells were keyed: at `ours` (the grading every earlier config had)
    they are left out, so the shipped sweeps keep their keys; another grader is another cell / evaluation."""
    for cell in load_sweep(REPO / "sweeps" / "smoke.yaml").cells:
        base = cell.config.to_dict()
        without = {**base, "data": {k: v for k, v in base["data"].items() if k != "grader"},
                   "eval": {k: v for k, v in base["eval"].items() if k != "grader"}}
        assert base["data"]["grader"] == base["eval"]["grader"] == "ours"
        assert run_key(without) == run_key(base) == cell.run_key and eval_id(without) == eval_id(base)
        for name in ("hendrycks", "math_verify"):
            trained = edit(base, "data.grader", name)
            assert run_key(trained) != cell.run_key and eval_id(trained) == eval_id(base)
            evaluated = edit(base, "eval.grader", name)
            assert run_key(evaluated) == cell.run_key and eval_id(evaluated) != eval_id(base)
            assert run_key(RunConfig.from_dict(trained)) == run_key(trained)
