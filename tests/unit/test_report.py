"""`orchestrate report`'s pure parts (orchestrator/report/paper.py, its page: page.py) and the command over a small
sweep directory whose files come from the real writers: the ledger's records (orchestrator/launch/ledger.py), the
collapse monitor's verdict and checkpoint history (trainer/run/collapse.py), eval/job_result.json as
orchestrator/cluster/entry.py writes it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from orchestrator.cli import main
from orchestrator.cluster.entry import write_json
from orchestrator.launch import ledger as L
from orchestrator.report import page, paper
from orchestrator.status import cells
from record.display import cell_name
from record.rundir import RunDir, tag_for
from record.tracking.ui import shown_uri
from trainer.run.collapse import CollapseMonitor

STEPS = 12


def eval_summary(score: float) -> dict:
    """eval.evaluate.evaluate()'s summary shape, one task, mean@4."""
    return {"tasks": {"tiny": {"status": "evaluated", "metrics": {"eval/tiny/mean_at_4": score}}}}


def add_cell(sweep_dir: Path, axes: dict, *, blowup_at: int | None = None, score: float | None = None,
             train_state: str = "COMPLETED", final: str | None = "completed", last_step: int = STEPS) -> str:
    """One cell as a local-executor run leaves it: ledger record, config.yaml, the checkpoint's collapse history
    and verdict (CollapseMonitor), last_metrics.json and, when `score` is given, eval/job_result.json."""
    key = "".join(f"{v}" for v in axes.values()).replace(".", "")
    run_dir = sweep_dir / key
    record = L.new_record(sweep_dir.name, key, cell_name(tuple(axes.items())), axes, run_dir)
    L.add_attempt(record, "train", f"x-train-{key}", 1.0, job_id=f"{key}-t", state=train_state, executor="local")
    if score is not None:
        L.add_attempt(record, "eval", f"x-eval-{key}", 1.0, job_id=f"{key}-e", state="COMPLETED", executor="local")
    record["final"] = {"status": final, "reason": "job failed twice", "at": 2.0} if final else None
    L.Ledger(sweep_dir).save(record)
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump({"kl": {"estimator": "k1", "placement": "reward",
                                                                "beta": 0.1}, "seed": axes.get("seed", 0)}))
    if not last_step:
        return key
    monitor = CollapseMonitor()
    for step in range(1, last_step + 1):  # KL flat, or far above 10x its early value from `blowup_at` on
        kl = 50.0 if blowup_at is not None and step >= blowup_at else 0.02
        monitor.update(step, {"train/kl_k1": kl, "train/response_length": 10.0 + step, "train/loss": 0.1})
    tag = tag_for(last_step)
    write_json(run_dir / "checkpoints" / tag / "state.json", {"step": last_step, "collapse": monitor.state()})
    write_json(run_dir / "checkpoints" / "latest.json", {"tag": tag, "step": last_step})
    monitor.write(run_dir / "verdict.json")
    write_json(run_dir / "last_metrics.json", {"step": last_step, "metrics": {"train/reward_mean": 0.5,
                                                                              "train/kl_k1": 0.02}})
    if score is not None:
        write_json(RunDir(run_dir).eval_result, {"result": eval_summary(score), "code": "/c", "at": 1.0})
    return key


@pytest.fixture
def sweep(tmp_path) -> Path:
    """k1-reward at beta 0.1 and 1, k3-loss at 0.1, and the beta = 0 reference, 2 seeds each; k3-loss blows up
    its KL from step 8 on (collapsed); one more cell still training and one given up."""
    sweep_dir = tmp_path / "mini"
    for seed in (0, 1):
        add_cell(sweep_dir, {"kl.estimator": "k1", "kl.placement": "reward", "kl.beta": 0.1, "seed": seed},
                 score=0.6 + 0.1 * seed)
        add_cell(sweep_dir, {"kl.estimator": "k1", "kl.placement": "reward", "kl.beta": 1, "seed": seed},
                 score=0.5)
        add_cell(sweep_dir, {"kl.estimator": "k3", "kl.placement": "loss", "kl.beta": 0.1, "seed": seed},
                 blowup_at=8 if seed else None, score=0.4)
        add_cell(sweep_dir, {"kl.placement": "none", "kl.beta": 0, "seed": seed}, score=0.5)
    add_cell(sweep_dir, {"kl.estimator": "k3", "kl.placement": "reward", "kl.beta": 0.1, "seed": 0},
             train_state="RUNNING", final=None, last_step=3)
    add_cell(sweep_dir, {"kl.estimator": "k3", "kl.placement": "reward", "kl.beta": 0.1, "seed": 1},
             train_state="FAILED", final="gave_up", last_step=2)
    return sweep_dir


def loaded(sweep_dir: Path):
    records = cells.current_records(sweep_dir)
    data = cells.cell_rows(records)
    kls = {k: paper.kl_settings(r["axes"], {}) for k, r in records.items()}
    return data, kls


def test_band_spans_the_seeds_at_every_step_any_seed_logged():
    line = paper.band([[(1, 1.0), (2, 3.0)], [(2, 5.0), (3, 7.0)]])
    assert line == {"steps": [1, 2, 3], "mean": [1.0, 4.0, 7.0], "min": [1.0, 3.0, 7.0], "max": [1.0, 5.0, 7.0],
                    "n": [1, 2, 1]}
    assert paper.band([])["steps"] == []


def test_kl_settings_take_the_axes_over_the_config_and_know_the_reference():
    flat = {"kl.estimator": "k1", "kl.placement": "reward", "kl.beta": 0.1}
    assert paper.kl_settings({"kl.beta": 1}, flat) == {"estimator": "k1", "placement": "reward", "beta": 1,
                                                        "reference": False}
    assert paper.kl_settings({"kl.placement": "none"}, flat)["reference"]
    assert paper.kl_settings({"kl.beta": 0}, flat)["reference"]


def test_final_scores_compare_with_the_beta_0_cell_of_the_same_model(sweep):
    data, kls = loaded(sweep)
    scores = {s["config"]: s for s in paper.final_scores(data, kls)}
    k1 = scores["k1-reward-b0.1"]
    assert k1["mean"] == pytest.approx(0.65) and (k1["min"], k1["max"], k1["n"]) == (0.6, 0.7, 2)
    assert k1["reference"] == 0.5 and k1["relative"] == pytest.approx(0.3)
    assert scores["k3-loss-b0.1"]["relative"] == pytest.approx(-0.2)
    assert scores["none-b0"]["relative"] is None  # the reference itself
    assert "k3-reward-b0.1" not in scores  # nothing evaluated


def test_another_models_reference_is_never_the_baseline():
    rows = [{"run_key": f"{m}{p}", "name": f"{m}-{p}-s0", "config": f"{m}-{p}", "state": "done",
             "axes": {"model": m, "kl.placement": p, "seed": 0}, "eval": {"eval/t/mean_at_1": s}, "metrics": {}}
            for m, p, s in (("a", "reward", 0.6), ("a", "none", 0.5), ("b", "reward", 0.9))]
    kls = {r["run_key"]: paper.kl_settings(r["axes"], {"kl.estimator": "k1", "kl.beta": 0.1}) for r in rows}
    scores = {s["config"]: s for s in paper.final_scores(rows, kls)}
    assert scores["a-reward"]["relative"] == pytest.approx(0.2)
    assert scores["b-reward"]["reference"] is None and scores["b-reward"]["relative"] is None


def test_behaviour_counts_the_verdicts_with_their_steps_beside_the_paper(sweep):
    data, kls = loaded(sweep)
    rows = {b["config"]: b for b in paper.behaviour(data, kls)}
    k3 = rows["k3-loss-b0.1"]
    assert k3["behaviour"] == "collapsed 1/2 (step 8); stable 1/2"
    assert "train/kl_k1" in k3["reason"] and k3["paper_behaviour"] == "stable"
    assert rows["k1-reward-b0.1"]["behaviour"] == "stable 2/2" and rows["none-b0"]["family"] == "no KL (beta = 0)"


def test_coverage_says_which_cells_are_missing_and_why(sweep):
    data, _ = loaded(sweep)
    gaps = {g["cell"]: g for g in paper.coverage(data, [{"name": "k9-x-s0", "run_key": "nope"}])}
    assert set(gaps) == {"k3-reward-b0.1-s0", "k3-reward-b0.1-s1", "k9-x-s0"}
    assert gaps["k3-reward-b0.1-s0"]["kind"] == "running"
    assert gaps["k3-reward-b0.1-s1"]["kind"] == "failed" and "job failed twice" in gaps["k3-reward-b0.1-s1"]["why"]
    assert gaps["k9-x-s0"]["kind"] == "not submitted"


def test_panels_draw_the_reference_in_each_configuration_of_its_model(sweep):
    data, kls = loaded(sweep)
    cells = [{"row": r, "kl": kls[r["run_key"]], "history": {"train/kl_k1": [(1, 0.1)]}} for r in data]
    panels = {p["title"]: p for p in paper.panels(cells)}
    assert set(panels) == {"K1 in reward", "K3 in loss", "K3 in reward"}
    assert list(panels["K1 in reward"]["lines"]) == ["beta = 0", "beta = 0.1", "beta = 1"]
    assert panels["K1 in reward"]["seeds"] == {"beta = 0": 2, "beta = 0.1": 2, "beta = 1": 2}


def test_the_html_page_embeds_its_images_and_escapes_text():
    blocks = [("h", 1, "a <b>"), ("table", ("x", "y"), [("1|2", "<3")]), ("img", "f.png", "cap")]
    html = page.render_html(blocks, {"f.png": b"\x89PNG"}, "t")
    assert "data:image/png;base64,iVBORw==" in html and "a &lt;b&gt;" in html and "&lt;3" in html
    assert "| 1\\|2 | <3 |" in page.render_markdown(blocks)


def test_the_templates_render_every_kind_of_block_exactly():
    """The whole text of both renderings of one block of each kind (report.md.jinja, report.html.jinja): a blank
    line between Markdown blocks, one line per HTML block, an empty table's header alone."""
    blocks = [("h", 2, "Claims"), ("p", "2 & \"3\""), ("table", ("a", "b"), [(1, None)]), ("table", ("c",), []),
              ("img", "f.png", "cap")]
    assert page.render_markdown(blocks) == ("## Claims\n\n2 & \"3\"\n\n| a | b |\n|---|---|\n| 1 | None |\n\n| c |\n"
                                            "|---|\n\n![cap](f.png)\n\n*cap*\n")
    html = page.render_html(blocks, {"f.png": b"\x89PNG"}, "Sweep <x>")
    assert html.startswith('<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>Sweep &lt;x&gt;</title><style>'
                           "body{font-family:sans-serif;")
    assert html.endswith("</style></head><body>\n<h2>Claims</h2>\n<p>2 &amp; &#34;3&#34;</p>\n<table><thead><tr>"
                         "<th>a</th><th>b</th></tr></thead><tbody><tr><td>1</td><td>None</td></tr></tbody></table>\n"
                         "<table><thead><tr><th>c</th></tr></thead><tbody></tbody></table>\n<figure><img alt=\"cap\" "
                         'src="data:image/png;base64,iVBORw=="><figcaption>cap</figcaption></figure>\n</body></html>\n')


def test_the_command_writes_markdown_html_and_pngs(sweep, tmp_path, capsys):
    assert main(["report", str(sweep), "--out", str(tmp_path / "out")]) == 0
    out = tmp_path / "out"
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert pngs == ["curves-K1-in-reward.png", "curves-K3-in-loss.png", "curves-K3-in-reward.png",
                    "scores-every-cell.png"]
    md, html = (out / "report.md").read_text(), (out / "report.html").read_text()
    assert all(f"]({p})" in md for p in pngs) and html.count("data:image/png;base64,") == len(pngs)
    assert "| k3-reward-b0.1-s0 | training | running |" in md and "| k1-reward-b0.1 | tiny@4 | 0.65 ± 0.0707" in md
    assert "never opened an MLflow run" in md and "10 cells, 8 finished" in capsys.readouterr().out
    # The end-of-training table, before the curves: finished cells only (the running k3-reward seed is not in it).
    assert md.index("## End of training") < md.index("## Training curves")
    assert "| k1-reward-b0.1 | K1 in reward | beta = 0.1 | 2 | 0.02 ± 0 (n=2) |" in md
    assert "| k3-reward-b0.1 |" not in md.split("## End of training")[1].split("## Training curves")[0]


def test_an_unreachable_store_falls_back_to_the_run_directories(sweep, tmp_path, capsys):
    for run_dir in (d for d in sweep.iterdir() if (d / "config.yaml").exists()):
        write_json(run_dir / "mlflow_run.json", {"tracking_uri": f"sqlite:///{tmp_path / 'gone.db'}",
                                                 "run_id": "r", "experiment_id": "1", "parent_run_id": None})
    assert main(["report", str(sweep), "--out", str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err
    assert err.count("warning:") == 1 and "unreachable" in err and "gone.db" in err
    md = (tmp_path / "out" / "report.md").read_text()
    assert "is unreachable" in md and "come from their run directories" in md
    assert str(tmp_path) not in md  # a report travels: no machine's absolute path in it
    assert (tmp_path / "out" / "curves-K1-in-reward.png").exists()
    assert not (tmp_path / "gone.db").exists()  # reading never creates a store


def test_a_sweep_directory_that_does_not_exist_is_one_message(tmp_path, capsys):
    assert main(["report", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "no such sweep directory" in err and "Traceback" not in err


def test_a_sweep_with_no_finished_cell_gives_an_empty_report_that_says_so(tmp_path, capsys):
    sweep_dir = tmp_path / "early"
    add_cell(sweep_dir, {"kl.estimator": "k1", "kl.placement": "reward", "seed": 0}, train_state="PENDING",
             final=None, last_step=0)
    assert main(["report", str(sweep_dir)]) == 0
    md = (sweep_dir / "report" / "report.md").read_text()
    assert "No cell has finished training yet" in md and "| k1-reward-s0 | pending | running |" in md
    assert not list((sweep_dir / "report").glob("*.png"))
    assert json.loads(json.dumps(capsys.readouterr().out))  # printed a line, no traceback


def test_a_report_names_a_store_without_a_machines_path_or_a_password(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert shown_uri(f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}") == "sqlite:///runs/mlflow.db"
    assert shown_uri("sqlite:////elsewhere/x/mlflow.db?mode=ro") == "a SQLite store named mlflow.db"
    assert shown_uri("http://me:secret@10.0.0.1:5000") == "http://10.0.0.1:5000"
    assert shown_uri("http://127.0.0.1:5000") == "http://127.0.0.1:5000"


def test_the_report_says_when_cells_were_evaluated_two_ways_or_trained_under_two_gradients(sweep):
    """The report reads what the evaluation and the trainer wrote (eval/evaluations/<id>.json, objective.json) and
    says so."""
    from record.rundir import atomic_write
    from trainer.config.run import RunConfig
    from trainer.train import objective_manifest

    key = next(p.name for p in sweep.iterdir() if p.name.startswith("k1reward01"))
    other = RunDir(sweep / key)
    atomic_write(other.evaluation("b2"), json.dumps({"evaluation_id": "b2", "at": 5.0, "settings": {"k": 8},
                                                     "tasks": {"tiny": {"metrics": {"eval/tiny/mean_at_8": 0.9}}}}))
    config = RunConfig.from_dict({"model": {"name_or_path": "tiny"}, "kl": {"estimator": "k1", "placement": "reward",
                                                                            "beta": 0.1}})
    atomic_write(other.objective, json.dumps(objective_manifest(config)))
    seed1 = next(p.name for p in sweep.iterdir() if p.name.startswith("k1reward01") and p.name != key)
    atomic_write(RunDir(sweep / seed1).objective, json.dumps({"fingerprint": {"hash": "0123456789ab"},
                                                              "code": "/old/snapshot"}))
    data, kls = loaded(sweep)
    text = page.render_markdown(paper.document("mini", data, kls, [], {}, []))
    assert "## Evaluated more than one way" in text and "k=8" in text
    assert "## Configurations trained under different gradients" in text and "/old/snapshot" in text
    assert "0123456789ab" in text
