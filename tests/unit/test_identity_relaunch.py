"""What a relaunch does when only what evaluates changed (issue 32): pure decisions and the run dirs' files.

The full relaunch on the local Slurm cluster is tests/integration/test_identity_relaunch.py."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from orchestrator.launch import ledger as L
from orchestrator.launch.adopt import adopt, legacy_identities
from orchestrator.launch.materialise import materialise
from orchestrator.launch.plan import make_plan, triage
from orchestrator.status import outcomes
from orchestrator.status.cells import run_dir_facts
from orchestrator.sweep.expand import load_sweep
from orchestrator.watch.watcher import decide
from record.files import atomic_write
from record.identity.run_key import eval_id
from record.rundir import RunDir
from tests.support.legacy_identity import legacy_run_key

REPO = Path(__file__).resolve().parents[2]
SMOKE = REPO / "sweeps" / "smoke.yaml"


def finished(key: str, evaluated: str | None) -> dict:
    record = L.new_record("sw", key, "cell", {}, f"/runs/sw/{key}")
    record["eval_id"] = evaluated
    L.add_attempt(record, "train", "t", 1.0, job_id="1", state="COMPLETED", exit_code="0:0")
    L.add_attempt(record, "eval", "e", 1.0, job_id="2", state="COMPLETED", exit_code="0:0", after="1",
                  eval_id=evaluated)
    record["final"] = {"status": "completed", "reason": "", "at": 2.0}
    return record


def test_a_changed_evaluation_sends_the_trained_cell_to_its_evaluation_alone():
    records = {"a": finished("a", "e1"), "b": finished("b", "e1"), "legacy": finished("legacy", None)}
    same = triage(records, list(records), eval_ids={"a": "e1", "b": "e1", "legacy": "e2"})
    assert (same.train, same.eval, same.kept) == ((), (), {"done": 3})
    changed = triage(records, list(records), eval_ids={"a": "e2", "b": "e1", "legacy": "e2"})
    assert (changed.train, changed.eval, changed.reevaluated) == ((), ("a",), ("a",))
    # a collapsed or failed cell is a result as it is: no new evaluation reopens it
    records["a"]["final"]["status"] = "collapsed"
    assert triage(records, ["a"], eval_ids={"a": "e2"}).eval == ()


def test_the_watcher_evaluates_again_when_the_cell_s_evaluation_is_another():
    record = finished("a", "e1")
    record["final"], record["eval_id"] = None, "e2"
    assert decide(record, None, 10.0).do == "submit_eval"
    L.add_attempt(record, "eval", "e", 5.0, job_id="3", state="COMPLETED", exit_code="0:0", after="1",
                  eval_id="e2")
    assert decide(record, None, 10.0).do == "complete"


def test_materialise_rewrites_what_evaluates_and_never_what_trains(tmp_path):
    sweep = load_sweep(SMOKE, [f"sweep.output_root={tmp_path}"])
    first = materialise(sweep, make_plan(sweep))
    cell = sweep.cells[0]
    config = RunDir(first.sweep_dir / cell.run_key).ensure_config()  # its job started; the others did not
    before = yaml.safe_load(config.read_text())
    before["tracking"]["tracking_uri"] = "sqlite:////where/it/started.db"
    atomic_write(config, yaml.safe_dump(before, sort_keys=False))
    later = load_sweep(SMOKE, [f"sweep.output_root={tmp_path}", "eval.k=3", "checkpoint.keep_last=5"])
    assert [c.run_key for c in later.cells] == [c.run_key for c in sweep.cells]
    done = materialise(later, make_plan(later))
    assert (done.written, done.updated) == (0, len(sweep.cells))
    after = yaml.safe_load(config.read_text())
    assert (after["eval"]["k"], after["checkpoint"]["keep_last"]) == (3, 5)
    assert after["tracking"]["tracking_uri"] == "sqlite:////where/it/started.db"  # logs where it started
    assert eval_id(after) != eval_id(before)
    again = materialise(later, make_plan(later))
    assert (again.updated, again.written) == (0, 0)


def test_a_sweep_launched_before_identity_version_2_keeps_its_cells(tmp_path):
    """Run dirs and ledger records named by the old key (the whole config less tracking) are recognised by what
    their config trains, and keep their key: nothing is retrained, a changed evaluation is evaluated again."""
    sweep = load_sweep(SMOKE, [f"sweep.output_root={tmp_path}"])
    sweep_dir = tmp_path / sweep.name
    ledger = L.Ledger(sweep_dir)
    old_keys = {}
    for cell in sweep.cells:
        old = legacy_run_key(cell.config)
        assert old != cell.run_key
        old_keys[cell.run_key] = old
        atomic_write(RunDir(sweep_dir / old).config, yaml.safe_dump(cell.config.to_dict(), sort_keys=False))
        record = finished(old, None)
        record["run_dir"] = str(sweep_dir / old)
        del record["identity"], record["eval_id"]  # as version 1 wrote it
        record["jobs"][1].pop("eval_id")
        ledger.save(record)
    later = load_sweep(SMOKE, [f"sweep.output_root={tmp_path}", "eval.k=3"])
    adopted = legacy_identities(ledger.records())
    assert len(adopted) == len(sweep.cells)
    renamed = adopt(later, adopted)
    assert [c.run_key for c in renamed.cells] == [old_keys[c.run_key] for c in later.cells]
    done = materialise(renamed, make_plan(renamed))
    assert (done.written, done.updated) == (0, len(sweep.cells))  # the old run dirs, rewritten in place
    records = ledger.records()
    for key, (training, evaluated) in adopted.found.items():  # as orchestrator/launch/submit.py marks them
        records[key].update(identity=L.IDENTITY, training_key=training, eval_id=evaluated)
    todo = triage(records, [c.run_key for c in renamed.cells],
                  eval_ids={c.run_key: eval_id(c.config) for c in renamed.cells})
    assert todo.train == () and set(todo.reevaluated) == set(old_keys.values())


def test_status_keeps_every_evaluation_of_a_run(tmp_path):
    run = RunDir(tmp_path / "run")
    first = {"evaluation_id": "a1", "settings": {"k": 2, "max_tokens": 16, "backend": "hf", "seeds": [0]},
             "step": 2, "tasks": {"tiny": {"metrics": {"eval/tiny/mean_at_2": 0.5}}}, "at": 1.0}
    second = {"evaluation_id": "b2", "settings": {"k": 2, "max_tokens": 16, "backend": "hf", "seeds": [0]},
              "step": 2, "tasks": {"tiny_ood": {"metrics": {"eval/tiny_ood/mean_at_2": 0.25}}}, "at": 2.0}
    for kept in (first, second):
        atomic_write(run.evaluation(kept["evaluation_id"]), json.dumps(kept))
    atomic_write(run.eval_result, json.dumps({"result": second}))  # the latest job's: one of them, not a third
    facts = run_dir_facts(run.path)
    assert [e["id"] for e in facts["evals"]] == ["a1", "b2"]
    assert facts["eval"] == {"eval/tiny/mean_at_2": 0.5, "eval/tiny_ood/mean_at_2": 0.25}
    assert len(outcomes.evaluation_settings([{"evals": facts["evals"]}])) == 2
