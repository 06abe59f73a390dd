"""The run directory's evaluation files live under eval/ (record/rundir.py), and a run directory of the old layout
(before issue 53: eval_result.json, eval_progress.json and evals/<id>.json beside eval/) is still read by all that
reads the new one: status, the report's evaluations (status's rows), checkpoint retention, the watcher's shard
markers, and the resume of a half-done sharded evaluation. The old files are built here by their literal names, as
the previous code wrote them; a new file wins over its old name, and a rerun moves both aside."""

from __future__ import annotations

import json
from pathlib import Path

from eval import shard_plan
from eval.outcome import Settings
from orchestrator.status.cells import run_dir_facts
from orchestrator.watch.retention import keep_final_export
from record.files import atomic_write
from record.rundir import LEGACY, RunDir, tag_for

SETTINGS = Settings(k=2, temperature=1.0, top_p=1.0, max_tokens=8, chat_template=False, seeds=(0,), backend="hf")


def summary(score: float, evaluation_id: str) -> dict:
    """eval.evaluate.evaluate()'s summary, one task at step 4."""
    return {"run_key": "cell", "step": 4, "settings": SETTINGS.record(), "evaluation_id": evaluation_id,
            "tasks": {"tiny": {"status": "evaluated", "metrics": {"eval/tiny/mean_at_2": score}}}}


def old_layout(root: Path, monkeypatch) -> tuple[RunDir, Path]:
    """A cell trained to step 4, evaluated once by the previous code, and cut in a second evaluation after the first
    of its two shards (job 77): the old names written by hand. Returns the run and the task's data file."""
    run = RunDir(root)
    run.checkpoint(tag_for(4)).mkdir(parents=True)
    run.checkpoint_state(tag_for(4)).write_text(json.dumps({"step": 4}))
    run.latest_checkpoint.write_text(json.dumps({"tag": tag_for(4), "step": 4}))
    (run.checkpoint(tag_for(4)) / "rng_rank0.pt").write_bytes(b"r" * 10)
    run.export(4).mkdir(parents=True)
    run.export_done(4).write_text("{}")
    (root / "evals").mkdir()
    (root / "evals" / "first.json").write_text(json.dumps({**summary(0.25, "first"), "at": 1.0}))
    (root / "eval_result.json").write_text(json.dumps({"result": summary(0.25, "first"), "code": "/c", "at": 1.0}))
    (root / "eval_progress.json").write_text(json.dumps({"step_dir": tag_for(4), "shards": {"tiny/seed_0": [1, 2]},
                                                         "at": 2.0}))
    data = root.parent / "tiny.jsonl"
    data.write_text("".join(json.dumps({"question": f"q{i}", "answer": str(i)}) + "\n" for i in range(2)))
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    monkeypatch.delenv("SLURM_ARRAY_JOB_ID", raising=False)
    half = shard_plan.plan_task("tiny", 0, data, SETTINGS, run.eval_step(4), 2, force=False)
    row = {"doc_id": 0, "samples": ["0", "1"], "scores": [1.0, 0.0], "answers": ["0", "1"]}
    shard_plan.save(half.root, "tiny", 0, half.planned[0], [row], half.provenance, 0.1)
    return run, data


def test_an_old_layout_run_directory_is_read_by_status_retention_the_watcher_and_a_resume(tmp_path, monkeypatch):
    run, data = old_layout(tmp_path / "cell", monkeypatch)
    # The step directories did not move: the previous code's shard marker is where the new code looks.
    first = shard_plan.plan(2, 2, 2)[0]
    assert (run.path / "eval" / "step_000004" / "tiny" / "seed_0" / "shards" / f"{first.name}.json").is_file()

    facts = run_dir_facts(run.path)
    assert facts["eval"] == {"eval/tiny/mean_at_2": 0.25}
    assert [e["id"] for e in facts["evals"]] == ["first"]
    assert facts["eval_shards"] == (1, 2)

    resumed = shard_plan.plan_task("tiny", 0, data, SETTINGS, run.eval_step(4), 2, force=False)
    assert resumed.planned == shard_plan.plan(2, 2, 2) and resumed.todo == resumed.planned[1:]  # the second only
    assert shard_plan.jobs_with_shards(run.path) == {"77"}  # the watcher's: this attempt made progress

    freed, said = keep_final_export(run.path)  # an evaluated cell: its checkpoints' shards may go
    assert freed == 10 and "freed" in said

    moved = set(run.training_outputs())
    assert {run.path / name for name in LEGACY.values()} <= moved and run.eval_dir in moved


def test_the_new_names_win_over_the_old_and_the_old_ids_stay_listed(tmp_path, monkeypatch):
    run, _ = old_layout(tmp_path / "cell", monkeypatch)
    atomic_write(run.eval_result, json.dumps({"result": summary(0.5, "second"), "code": "/c", "at": 3.0}))
    atomic_write(run.evaluation("second"), json.dumps({**summary(0.5, "second"), "at": 3.0}))
    atomic_write(run.eval_progress, json.dumps({"step_dir": tag_for(4), "shards": {"tiny/seed_0": [2, 2]}}))
    assert run.read_eval_result()["result"]["evaluation_id"] == "second"
    assert run.read_eval_progress()["shards"] == {"tiny/seed_0": [2, 2]}
    assert run.evaluations() == [run.evaluation("second"), run.path / "evals" / "first.json"]
    atomic_write(run.evaluation("first"), json.dumps({**summary(0.75, "first"), "at": 4.0}))  # rewritten since
    assert run.evaluations() == [run.evaluation("first"), run.evaluation("second")]
    facts = run_dir_facts(run.path)
    assert [e["id"] for e in facts["evals"]] == ["second", "first"] and facts["eval_shards"] == (2, 2)
    assert all(p.is_relative_to(run.eval_dir) for p in (run.eval_result, run.eval_progress, run.evaluation("x"),
                                                         run.eval_step(4).path))
