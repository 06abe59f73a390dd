"""Checkpoint retention (orchestrator/watch/retention.py): a real run directory with ZeRO-3-like checkpoints and a
final export; only a cell settled as evaluated frees its checkpoints, and never its final export. The seam test
drives the Watcher itself (a backend that answers fixed Slurm states) over real files."""

from __future__ import annotations

import json
import time
from pathlib import Path

from orchestrator.cli import main
from orchestrator.cluster.options import Options, save_options
from orchestrator.launch import ledger as L
from orchestrator.launch.ledger import Ledger
from orchestrator.watch.retention import FINAL_EXPORT, freed_line, keep_final_export
from orchestrator.watch.watcher import Watcher
from record.files import atomic_write
from record.rundir import EXPORT_MARKER, RunDir, tag_for

SHARD = 4096  # bytes of each fake shard file


def run_dir(root: Path, evaluated: bool = True, exported: bool = True) -> Path:
    """Two checkpoints (steps 2 and 4, a shard directory and rng states each), latest.json naming step 4, the
    export of step 4, and (optionally) the evaluation's result."""
    run = RunDir(root)
    for step in (2, 4):
        ckpt = run.checkpoint(tag_for(step))
        (ckpt / "global_step").mkdir(parents=True)
        (ckpt / "global_step" / "zero_pp_rank_0_mp_rank_00_optim_states.pt").write_bytes(b"o" * SHARD)
        (ckpt / "rng_rank0.pt").write_bytes(b"r" * SHARD)
        (ckpt / "state.json").write_text(json.dumps({"step": step}))
    run.latest_checkpoint.write_text(json.dumps({"tag": tag_for(4), "step": 4}))
    export = run.export(4)
    export.mkdir(parents=True)
    (export / "model.safetensors").write_bytes(b"w" * SHARD)
    if exported:
        (export / EXPORT_MARKER).write_text("{}")
    if evaluated:
        atomic_write(run.eval_result, json.dumps({"result": {}}))
    return root


def test_keep_final_export_frees_the_checkpoints_and_keeps_the_export_and_states(tmp_path):
    root = run_dir(tmp_path / "cell")
    freed, said = keep_final_export(root)
    assert freed == 4 * SHARD and "kept export/step_000004" in said
    run = RunDir(root)
    assert sorted(p.name for p in run.checkpoint(tag_for(2)).iterdir()) == ["state.json"]
    assert sorted(p.name for p in run.checkpoint(tag_for(4)).iterdir()) == ["state.json"]
    assert (run.export(4) / "model.safetensors").stat().st_size == SHARD and run.export_done(4).is_file()
    assert run.latest_checkpoint.is_file()
    assert keep_final_export(root)[0] == 0  # a second time: nothing left to free


def test_nothing_is_freed_without_the_evaluations_result_or_a_complete_final_export(tmp_path):
    for root, why in ((run_dir(tmp_path / "a", evaluated=False), "no evaluation result"),
                      (run_dir(tmp_path / "b", exported=False), "final export")):
        freed, said = keep_final_export(root)
        assert freed == 0 and why in said
        assert (RunDir(root).checkpoint(tag_for(2)) / "rng_rank0.pt").is_file()


class Answers:
    """Slurm's answers for fixed job states (no sbatch is expected: every cell here is settled by the poll)."""

    kind = "slurm"

    def __init__(self, states: dict[str, tuple[str, str]]):
        self.states = states  # job id -> (name, state)

    def rows(self, job_ids):
        return {j: [L.JobRow(j, *self.states[j], "0:0", submit=time.time() - 50, end=time.time() - 10)]
                for j in job_ids if j in self.states}

    def queued(self, names):
        return {}

    def find(self, names, since):
        return {}

    def cancel(self, job_ids):
        pass


def evaluated_cell(sweep_dir: Path, key: str, eval_state: str, answers: dict) -> None:
    record = L.new_record("sw", key, key, {}, str(run_dir(sweep_dir / key, evaluated=eval_state == "COMPLETED")))
    for kind, state in (("train", "COMPLETED"), ("eval", "RUNNING")):
        name, job_id = f"sw-{kind}-{key}-a1", str(len(answers) + 1)
        L.add_attempt(record, kind, name, time.time() - 100, job_id=job_id, state=state)
        answers[job_id] = (name, "COMPLETED" if kind == "train" else eval_state)
    record.update(code="/code", entries={"train": "t", "eval": "e"}, params={"train": {}, "eval": {}})
    Ledger(sweep_dir).save(record)


def test_the_watcher_frees_checkpoints_only_when_it_settles_an_evaluated_cell(tmp_path, capsys):
    """Seam: the watcher's poll settles one cell as completed (its evaluation COMPLETED) and frees its checkpoints;
    the cell whose evaluation failed keeps every one; status says what was freed."""
    answers: dict = {}
    evaluated_cell(tmp_path, "good", "COMPLETED", answers)
    evaluated_cell(tmp_path, "bad", "FAILED", answers)
    save_options(tmp_path, Options(checkpoint_retention=FINAL_EXPORT))
    records = Watcher(Ledger(tmp_path), Answers(answers), max_retries=0, grace_s=0.0).poll()
    good, bad = records["good"], records["bad"]
    assert good["final"]["status"] == "completed" and good["retention"]["freed_bytes"] == 4 * SHARD
    assert good["decisions"][-1]["action"] == "retention"
    assert not (RunDir(tmp_path / "good").checkpoint(tag_for(4)) / "rng_rank0.pt").exists()
    assert RunDir(tmp_path / "good").export_done(4).is_file()
    assert not bad.get("retention") and (RunDir(tmp_path / "bad").checkpoint(tag_for(4)) / "rng_rank0.pt").is_file()
    assert Ledger(tmp_path).load("good")["retention"]["freed_bytes"] == 4 * SHARD  # saved with the verdict
    assert f"{4 * SHARD:,} bytes" in freed_line(records)
    # status --json: the same bytes, on the cell that freed them (rows the table's line sums)
    assert main(["status", str(tmp_path), "--json"]) == 0
    rows = {r["run_key"]: r for r in json.loads(capsys.readouterr().out) if "run_key" in r}
    assert rows["good"]["checkpoints_freed_bytes"] == 4 * SHARD and rows["bad"]["checkpoints_freed_bytes"] is None


def test_the_default_keeps_every_checkpoint(tmp_path):
    answers: dict = {}
    evaluated_cell(tmp_path, "good", "COMPLETED", answers)
    save_options(tmp_path, Options())
    records = Watcher(Ledger(tmp_path), Answers(answers), grace_s=0.0).poll()
    assert records["good"]["final"]["status"] == "completed" and not records["good"].get("retention")
    assert (RunDir(tmp_path / "good").checkpoint(tag_for(4)) / "rng_rank0.pt").is_file()
    assert freed_line(records) is None
