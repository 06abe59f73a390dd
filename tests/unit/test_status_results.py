"""`orchestrate status`'s results: the rows and per-configuration summary (orchestrator/status/outcomes.py, pure)
and the tables as a 100-column terminal and a pipe show them. The files here are written by hand in the writers' shapes;
tests/integration/test_status_seam.py has the real writers produce them."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from rich.console import Console

from orchestrator.cli import main
from orchestrator.launch import ledger as L
from orchestrator.status import cells, outcomes, tables
from record.files import atomic_write
from record.rundir import RunDir

REASON = "train/kl_k1 went above 10x its early value (0.1) at step 8"
TASKS = {"tiny": 0.524, "tiny_ood": 0.161}
WORD = r"[\w./@-]+"  # what a line break must not split: names, keys, numbers


def eval_result(shift: float = 0.0, k: int = 4) -> dict:
    """eval/job_result.json as orchestrator/cluster/entry.py run_eval writes it around eval.evaluate.evaluate()'s
    summary."""
    tasks = {t: {"status": "evaluated", "metrics": {f"eval/{t}/mean_at_{k}": v + shift, f"eval/{t}/pass_at_1": v}}
             for t, v in TASKS.items()}
    return {"result": {"target": "/r", "run_key": "k", "step": 4, "settings": {"k": k}, "tasks": tasks,
                       "run_id": "abc"}, "code": "/c", "at": 1.0}


def verdict(name: str = "unstable", reason: str = REASON, step: int | None = 8) -> dict:
    return {"verdict": name, "step": step, "reason": reason, "findings": [reason]}


def write_cell(sweep_dir: Path, estimator: str, placement: str, seed: int, *, evaluated=None, judged=None,
               final=None) -> dict:
    """A ledger record (local executor, trained and evaluated) and its run directory's files."""
    axes = {"kl.estimator": estimator, "kl.placement": placement, "seed": seed}
    key = f"{estimator}{placement}{seed}"
    record = L.new_record("smoke", key, f"{estimator}-{placement}-s{seed}", axes, sweep_dir / key)
    for kind, job_id in (("train", f"{seed}1"), ("eval", f"{seed}2")):
        L.add_attempt(record, kind, f"smoke-{kind}-{key}-a1", 1.0, job_id=job_id, state="COMPLETED",
                      executor="local")
    record["final"] = final or {"status": "completed", "reason": "trained and evaluated", "at": 2.0}
    run_dir = sweep_dir / key
    (run_dir / "checkpoints" / "step_000004").mkdir(parents=True)
    (run_dir / "checkpoints" / "latest.json").write_text(json.dumps({"tag": "step_000004", "step": 4}))
    history = {"train/kl_k1": [[1, 0.01], [4, 0.02 + seed]], "train/reward_mean": [[4, 0.25 + 0.1 * seed]]}
    (run_dir / "checkpoints" / "step_000004" / "state.json").write_text(
        json.dumps({"step": 4, "collapse": {"history": history}}))
    if evaluated is not None:
        atomic_write(RunDir(run_dir).eval_result, json.dumps(evaluated))
    if judged is not None:
        (run_dir / "verdict.json").write_text(json.dumps(judged))
    L.Ledger(sweep_dir).save(record)
    return record


@pytest.fixture
def sweep_dir(tmp_path) -> Path:
    """Two configurations x two seeds: one seed unstable, one seed not evaluated yet."""
    root = tmp_path / "smoke"
    write_cell(root, "k1", "reward", 0, evaluated=eval_result(0.0), judged=verdict())
    write_cell(root, "k1", "reward", 1, evaluated=eval_result(0.1), judged=verdict("stable", "no rule fired", None))
    write_cell(root, "k3", "loss", 0, evaluated=eval_result(0.2), judged=verdict("stable", "no rule fired", None))
    write_cell(root, "k3", "loss", 1, judged=verdict("collapsed", "val/pass_at_1 fell to 0 from a best of 0.5", 3),
               final={"status": "collapsed", "reason": "the run collapsed (verdict.json)", "at": 2.0})
    return root


def test_eval_metrics_come_from_each_task_and_from_the_probe_form():
    got = outcomes.eval_metrics(eval_result()["result"])
    assert got == {"eval/tiny/mean_at_4": 0.524, "eval/tiny/pass_at_1": 0.524, "eval/tiny_ood/mean_at_4": 0.161,
                   "eval/tiny_ood/pass_at_1": 0.161}
    assert outcomes.eval_metrics({"step": 3, "eval/probe/mean_at_1": 1.0}) == {"eval/probe/mean_at_1": 1.0}
    assert outcomes.eval_metrics(None) == {} and outcomes.eval_metrics({"tasks": {"t": {"metrics": None}}}) == {}
    assert outcomes.mean_at_k_keys(got) == ["eval/tiny/mean_at_4", "eval/tiny_ood/mean_at_4"]


def test_headers_are_short():
    assert [outcomes.short(k) for k in ("eval/tiny/mean_at_4", "eval/math500/mean_at_32", "train/reward_mean",
                                       "kl.estimator", "seed")] == ["tiny@4", "math500@32", "reward", "estimator",
                                                                    "seed"]


def test_rows_carry_the_evaluation_and_the_verdict_with_its_reason(sweep_dir):
    rows = {r["name"]: r for r in cells.cell_rows(cells.current_records(sweep_dir))}
    unstable = rows["k1-reward-s0"]
    assert unstable["eval"]["eval/tiny/mean_at_4"] == 0.524 and unstable["eval"]["eval/tiny_ood/mean_at_4"] == 0.161
    assert (unstable["verdict"], unstable["verdict_step"], unstable["verdict_reason"]) == ("unstable", 8, REASON)
    assert unstable["reason"] == REASON and unstable["state"] == "done" and unstable["config"] == "k1-reward"
    assert rows["k1-reward-s1"]["reason"] is None  # stable and completed: nothing to explain
    # a collapse: the verdict's reason, not only the ledger's "it collapsed"
    assert rows["k3-loss-s1"]["reason"] == "val/pass_at_1 fell to 0 from a best of 0.5"
    assert rows["k3-loss-s1"]["eval"] == {} and rows["k3-loss-s1"]["state"] == "collapsed"
    # the keys existing consumers read stay
    assert {"run_key", "name", "axes", "state", "train_attempts", "eval_attempts", "job_id", "job_state", "step",
            "metrics", "verdict", "eval", "reason"} <= set(unstable)


def test_a_give_up_reason_and_a_verdict_reason_both_show():
    record = L.new_record("s", "k", "k1-reward-s0", {"seed": 0}, Path("/r"))
    record["final"] = {"status": "gave_up", "reason": "failed twice with exit code 3:0", "at": 1.0}
    row = outcomes.cell_row(record, {"step": None, "metrics": {}, "eval": {}, **outcomes.verdict_fields(verdict())})
    assert row["reason"] == f"failed twice with exit code 3:0; {REASON}"
    none = outcomes.cell_row(record, {"step": None, "metrics": {}, "eval": {}, **outcomes.verdict_fields(None)})
    assert none["reason"] == "failed twice with exit code 3:0" and none["verdict"] is None


def test_a_pending_cell_says_why_it_waits():
    """Slurm's pending reason (sacct's Reason, copied into the attempt by the one query status makes)."""
    record = L.new_record("s", "k", "k1-reward-s0", {"seed": 0}, Path("/r"))
    L.add_attempt(record, "train", "n", 1.0, job_id="7_1", state="PENDING", reason="QOSMaxJobsPerUserLimit")
    facts = {"step": None, "metrics": {}, "eval": {}, **outcomes.verdict_fields(None)}
    assert outcomes.cell_row(record, facts)["reason"] == \
        "waiting (Slurm: QOSMaxJobsPerUserLimit): the QOS's limit on jobs per user: it starts as others end"
    record["jobs"][0]["reason"] = "SomethingNew"
    assert outcomes.cell_row(record, facts)["reason"] == "waiting (Slurm: SomethingNew)"
    record["jobs"][0].update(state="RUNNING", reason="None")
    assert outcomes.cell_row(record, facts)["reason"] is None


def test_the_summary_gives_mean_and_spread_over_the_seeds_that_have_it(sweep_dir):
    rows = cells.cell_rows(cells.current_records(sweep_dir))
    by_config = {s["config"]: s for s in outcomes.summary(rows)}
    assert list(by_config) == ["k1-reward", "k3-loss"]
    k1 = by_config["k1-reward"]
    assert k1["seeds"] == [0, 1] and k1["axes"] == {"kl.estimator": "k1", "kl.placement": "reward"}
    tiny = k1["metrics"]["eval/tiny/mean_at_4"]
    assert tiny["mean"] == pytest.approx(0.574) and tiny["sd"] == pytest.approx(0.1 / 2 ** 0.5)
    assert (tiny["min"], tiny["max"], tiny["n"]) == (pytest.approx(0.524), pytest.approx(0.624), 2)
    assert k1["metrics"]["train/reward_mean"]["mean"] == pytest.approx(0.3)
    assert k1["verdicts"] == {"unstable": 1, "stable": 1}
    k3 = by_config["k3-loss"]
    assert k3["metrics"]["eval/tiny/mean_at_4"] == {"mean": pytest.approx(0.724), "sd": None,
                                                     "min": pytest.approx(0.724), "max": pytest.approx(0.724), "n": 1}
    assert k3["verdicts"] == {"stable": 1, "collapsed": 1}
    assert all(r["summary"]["config"] == r["config"] for r in rows)  # each row carries its configuration's


def test_json_is_still_a_list_of_rows_now_with_the_eval_reason_and_summary(sweep_dir, capsys):
    assert main(["status", str(sweep_dir), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert isinstance(out, list) and {r["run_key"] for r in out} == {"k1reward0", "k1reward1", "k3loss0", "k3loss1"}
    first = next(r for r in out if r["name"] == "k1-reward-s0")
    assert first["eval"]["eval/tiny/mean_at_4"] == 0.524 and first["reason"] == REASON
    assert first["summary"]["verdicts"] == {"unstable": 1, "stable": 1}


def render(sweep_dir: Path, width: int) -> str:
    console = Console(width=width, file=io.StringIO(), highlight=False, markup=False)
    console.print(tables.render(sweep_dir, console.width))
    return console.file.getvalue()


@pytest.mark.parametrize("width", [100, 240])
def test_tables_at_100_columns_and_in_a_pipe_split_no_word(sweep_dir, width):
    text = render(sweep_dir, width)
    assert max(len(line) for line in text.splitlines()) <= width
    words = set(re.findall(WORD, text))
    for name in ("k1-reward-s0", "k1-reward-s1", "k3-loss-s0", "k3-loss-s1", "k1-reward", "k3-loss"):
        assert name in words, f"{name} split or missing:\n{text}"
    for word in ("tiny@4", "tiny_ood@4", "unstable", "collapsed", "0.524", "0.161", *re.findall(WORD, REASON)):
        assert word in words, f"{word!r} split or missing:\n{text}"
    assert "0.574 ± 0.071" in text  # k1-reward's tiny@4 over its two seeds
    if width == 100:
        assert "not shown at 100 columns" in text and "estimator" not in text.split("not shown")[0].splitlines()[2]
    else:
        assert "not shown" not in text and "estimator" in text


def test_status_prints_both_tables_where_stdout_is_a_pipe(sweep_dir, capsys):
    assert main(["status", str(sweep_dir)]) == 0
    out = capsys.readouterr().out
    assert "k1-reward-s0" in out and "2 configurations over seeds" in out and REASON.split()[0] in out


def test_fit_keeps_columns_by_priority_and_the_first_always():
    widths, priority = [12, 10, 8, 40], [0, 3, 1, 2]
    assert tables.fit(widths, priority, 200, flexible=3) == [0, 1, 2, 3]
    assert tables.fit(widths, priority, 50, flexible=3, flex_min=20) == [0, 2, 3]  # the flexible one counts 20
    assert tables.fit(widths, priority, 10, flexible=3) == [0]
