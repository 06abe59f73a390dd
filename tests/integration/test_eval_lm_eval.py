"""Evaluation end to end on CPU, with real parts: a DeepSpeed ZeRO-3 checkpoint of the tiny model, its HF export,
lm-eval's hf backend sampling k completions per problem, and a real MLflow sqlite store holding the training run."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from eval.evaluate import evaluate
from eval.target import EvalError
from record.rundir import RunDir
from trainer.tasks.rewards import tiny_reward

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
K, LIMIT, STEP = 4, 8, 3
# The fast tiny model answers the arithmetic almost never right (it is barely trained). So that mean@k is strictly
# between 0 and 1 and its recomputation means something, the test set's answers are relabelled to the model's own
# greedy answers and sampling runs cooler than the paper's 1.0; the arithmetic under test is the same.
TEMPERATURE = 0.3


@pytest.fixture(scope="module")
def tiny_model() -> Path:
    from tests.support.tiny_model import fast_config
    from trainer.model.tiny_model import ensure_tiny_model

    torch.set_num_threads(2)
    return ensure_tiny_model(fast_config())  # cached under .cache/tiny-model after the first build


def client(uri: str):
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=uri)


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory, tiny_model):
    """A run directory as the trainer leaves it: config.yaml, a ZeRO-3 checkpoint, and its MLflow run."""
    from record.identity.run_key import run_key
    from record.tracking.tracker import MlflowTracker
    from trainer.config.run import RunConfig

    root = tmp_path_factory.mktemp("eval-run")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    cfg = RunConfig.from_dict({
        "model": {"name_or_path": str(tiny_model), "dtype": "fp32"},
        "data": {"dataset": "tiny", "val_every": 0},
        "rollout": {"engine": "hf", "max_response_tokens": 12, "max_prompt_tokens": 64},
        "optim": {"steps": STEP, "batch_prompts": 4, "minibatch_prompts": 4},
        "algorithm": {"group_size": 4},
        "eval": {"tasks": ["tiny"], "k": K, "max_tokens": 12, "temperature": TEMPERATURE},
        "tracking": {"tracking_uri": uri, "experiment": "eval-tests"},
    })
    key = run_key(cfg)
    run_dir = root / key
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
    subprocess.run([sys.executable, str(REPO / "tests" / "fixtures" / "make_zero_checkpoint.py"), str(run_dir),
                    str(tiny_model), key, str(STEP)], cwd=REPO, check=True, capture_output=True, timeout=300)
    tracker = MlflowTracker(run_dir)
    run_id = tracker.open_run(key, "eval-tests", uri, {"kl.beta": 0.1}, {}, artifact_location=str(root / "art"))
    tracker.log_metrics({"train/reward_mean": 0.5}, STEP)
    tracker.close("FINISHED")
    relabel_to_greedy_answers(run_dir, root / "data")
    return {"dir": run_dir, "key": key, "uri": uri, "run_id": run_id, "data": root / "data", "root": root}


def relabel_to_greedy_answers(run_dir: Path, data_dir: Path) -> None:
    """data_dir/tiny_test.jsonl: test problems whose answer is what the trained model says greedily."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainer.run.export import export_hf
    from trainer.tasks.common import write_jsonl
    from trainer.tasks.rewards import last_boxed
    from trainer.tasks.tiny import make_split

    model_dir = export_hf(run_dir)
    model, tokenizer = AutoModelForCausalLM.from_pretrained(model_dir), AutoTokenizer.from_pretrained(model_dir)
    rows = make_split("test", 3 * LIMIT)
    prompts = [tokenizer.apply_chat_template([{"role": "user", "content": r["problem"]}], tokenize=False,
                                             add_generation_prompt=True) for r in rows]
    enc = tokenizer(prompts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
    out = model.generate(**enc, do_sample=False, max_new_tokens=12, pad_token_id=tokenizer.pad_token_id)
    greedy = [last_boxed(t) for t in tokenizer.batch_decode(out[:, enc["input_ids"].shape[1]:],
                                                            skip_special_tokens=True)]
    kept = [{**r, "answer": g} for r, g in zip(rows, greedy) if g][:LIMIT]
    assert len(kept) == LIMIT, f"the model boxed an answer for only {len(kept)} problems"
    write_jsonl(kept, data_dir / "tiny_test.jsonl")


@pytest.fixture(scope="module")
def evaluated(trained_run):
    start = time.monotonic()
    summary = evaluate(trained_run["dir"], limit=LIMIT, data_dir=trained_run["data"], log=lambda _: None)
    return summary, time.monotonic() - start


def test_export_reproduces_the_trained_weights(trained_run, tiny_model):
    from transformers import AutoModelForCausalLM

    from trainer.run.export import ExportError, export_hf

    out = export_hf(trained_run["dir"])
    assert out == trained_run["dir"] / "export" / "step_000003"
    exported = dict(AutoModelForCausalLM.from_pretrained(out).named_parameters())
    expected = torch.load(trained_run["dir"] / "expected.pt")
    assert set(expected) == set(exported)
    assert all(torch.equal(expected[n], exported[n]) for n in expected)
    base = dict(AutoModelForCausalLM.from_pretrained(tiny_model).named_parameters())
    assert any(not torch.equal(base[n], exported[n]) for n in base), "training changed nothing?"
    assert {"config.json", "model.safetensors", "tokenizer.json", "generation_config.json"} <= {
        p.name for p in out.iterdir()}
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        assert (out / name).read_bytes() == (tiny_model / name).read_bytes(), name
    stamp = (out / "export.json").stat().st_mtime_ns
    assert export_hf(trained_run["dir"], STEP) == out and (out / "export.json").stat().st_mtime_ns == stamp
    with pytest.raises(ExportError, match="no complete checkpoint for step 7; steps there: 3"):
        export_hf(trained_run["dir"], 7)


def test_mean_at_k_is_the_mean_of_the_logged_samples(trained_run, evaluated):
    summary, _ = evaluated
    assert summary["step"] == STEP and summary["tasks"]["tiny"]["status"] == "evaluated"
    rows = [json.loads(line) for line in
            (trained_run["dir"] / "eval" / "step_000003" / "tiny" / "seed_0.samples.jsonl").read_text().splitlines()]
    assert len(rows) == LIMIT and all(len(r["samples"]) == K for r in rows)
    # Recomputed from the raw samples with the training reward itself, not with the eval code.
    scores = [[tiny_reward(s, r["target"]) for s in r["samples"]] for r in rows]
    metrics = summary["tasks"]["tiny"]["metrics"]
    assert metrics[f"eval/tiny/mean_at_{K}"] == pytest.approx(sum(map(sum, scores)) / (K * LIMIT))
    assert metrics[f"eval/tiny/pass_at_{K}"] == pytest.approx(sum(any(s) for s in scores) / LIMIT)
    assert 0 < sum(map(sum, scores)) < K * LIMIT, "a degenerate sample: every answer right or every answer wrong"
    assert any(len(set(r["samples"])) > 1 for r in rows), "the k samples of a problem are not independent draws"
    assert all(r["prompt"].startswith("<|user|>") and r["prompt"].endswith("=?<|end|><|assistant|>") for r in rows)
    # One character is one token here: the 12-token budget held, although the model's saved generation_config
    # says max_new_tokens=32 (the hf backend would otherwise inherit it).
    assert json.loads((trained_run["dir"] / "export" / "step_000003" / "generation_config.json").read_text())[
        "max_new_tokens"] == 32
    assert max(len(s) for r in rows for s in r["samples"]) <= 12


def test_metrics_land_in_the_training_runs_mlflow_run(trained_run, evaluated):
    summary, _ = evaluated
    mlflow = client(trained_run["uri"])
    runs = mlflow.search_runs([mlflow.get_experiment_by_name("eval-tests").experiment_id],
                              filter_string=f"tags.run_key = '{trained_run['key']}'")
    assert [r.info.run_id for r in runs] == [trained_run["run_id"]] == [summary["run_id"]]
    data = runs[0].data
    assert data.metrics["train/reward_mean"] == 0.5 and data.params["kl.beta"] == "0.1"
    history = mlflow.get_metric_history(trained_run["run_id"], f"eval/tiny/mean_at_{K}")
    assert [(m.step, m.value) for m in history] == [(STEP, summary["tasks"]["tiny"]["metrics"][
        f"eval/tiny/mean_at_{K}"])]
    artifacts = {a.path for a in mlflow.list_artifacts(trained_run["run_id"], "eval/step_000003/tiny")}
    assert "eval/step_000003/tiny/seed_0.samples.jsonl" in artifacts
    assert runs[0].info.status == "FINISHED"


def test_a_second_evaluation_is_skipped_unless_forced(trained_run, evaluated):
    _, first_seconds = evaluated
    start = time.monotonic()
    again = evaluate(trained_run["dir"], limit=LIMIT, data_dir=trained_run["data"], log=lambda _: None)
    assert again["tasks"]["tiny"]["status"] == "skipped"
    assert time.monotonic() - start < first_seconds
    key = f"eval/tiny/mean_at_{K}"
    assert len(client(trained_run["uri"]).get_metric_history(trained_run["run_id"], key)) == 1
    # Other settings are another evaluation: not skipped.
    other = evaluate(trained_run["dir"], limit=LIMIT - 1, data_dir=trained_run["data"], log=lambda _: None)
    assert other["tasks"]["tiny"]["status"] == "evaluated"
    forced = evaluate(trained_run["dir"], limit=LIMIT - 1, data_dir=trained_run["data"], force=True,
                      log=lambda _: None)
    assert forced["tasks"]["tiny"]["status"] == "evaluated"
    assert len(client(trained_run["uri"]).get_metric_history(trained_run["run_id"], key)) == 3


def test_bad_input_gives_one_clear_error(trained_run, tmp_path):
    cases = [
        (dict(tasks=["math500"], data_dir=tmp_path / "empty"),
         f"missing eval data (math500 needs {tmp_path / 'empty' / 'math500.jsonl'}); run `orchestrate data prepare"),
        (dict(tasks=["tiny", "gsm8k"]), "unknown eval task(s) gsm8k; valid: countdown, math500"),
        (dict(step=99), "no complete checkpoint for step 99; steps there: 3"),
        (dict(max_tokens=4096), "max_tokens 4096 leaves no room for the prompt"),
    ]
    for kwargs, message in cases:
        with pytest.raises(EvalError) as err:
            evaluate(trained_run["dir"], **{"data_dir": trained_run["data"], "log": lambda _: None, **kwargs})
        assert message in str(err.value)
    untrained = tmp_path / "untrained"
    untrained.mkdir()
    (untrained / "config.yaml").write_text((trained_run["dir"] / "config.yaml").read_text())
    with pytest.raises(EvalError, match="no complete checkpoint .no latest.json"):
        evaluate(untrained, data_dir=trained_run["data"], log=lambda _: None)


def test_a_plain_model_directory_gets_its_own_run(trained_run, tiny_model, tmp_path):
    summary = evaluate(tiny_model, tasks=["tiny_ood"], k=2, limit=2, max_tokens=12, data_dir=trained_run["data"],
                       tracking_uri=trained_run["uri"], out_dir=tmp_path, log=lambda _: None)
    assert summary["run_key"].startswith(f"base-{tiny_model.name}-") and summary["step"] == 0
    history = client(trained_run["uri"]).get_metric_history(summary["run_id"], "eval/tiny_ood/mean_at_2")
    assert [m.step for m in history] == [0]
    assert (tmp_path / "eval" / "step_000000" / "tiny_ood.done.json").exists()


def test_the_cli_evaluates_a_checkpoint_directory_then_skips_it(trained_run, capsys):
    from orchestrator.cli import main

    argv = ["eval", str(trained_run["dir"] / "checkpoints" / "step_000003"), "--k", "2", "--limit", "2",
            "--data-dir", str(trained_run["data"])]
    assert main(argv) == 0
    first = capsys.readouterr().out
    assert main(argv) == 0
    second = capsys.readouterr().out
    assert "│ tiny │ evaluated │" in first and "mean@2" in first
    assert "│ tiny │ skipped │" in second and "--force re-runs it" in second


def unevaluated_copies(trained_run, tmp_path: Path, *names: str) -> dict[str, Path]:
    """Copies of the trained run directory without its evaluations, one per name."""
    import shutil

    copies = {}
    for name in names:
        copies[name] = tmp_path / name / trained_run["key"]
        shutil.copytree(trained_run["dir"], copies[name],
                        ignore=shutil.ignore_patterns("eval"))
    return copies


def test_shards_give_the_whole_tasks_samples_and_a_cut_evaluation_resumes_at_its_first_unfinished_shard(
        trained_run, tmp_path, monkeypatch):
    """The same run evaluated whole (one shard, eval.shard_samples set), and in shards of 3 samples (one problem's
    repeats split 3 + 1), cut by a stand-in for the time limit after 5 shards, then run again: the second run
    computes only the shards the first did not finish, and the joined per-sample file is byte for byte the whole
    task's (each HF sample seeded on its own)."""
    from eval import shard_plan, shard_run

    copies = unevaluated_copies(trained_run, tmp_path, "whole", "sharded")
    options = dict(limit=LIMIT, data_dir=trained_run["data"], tracking_uri=f"sqlite:///{tmp_path / 'other.db'}",
                   log=lambda _: None)
    whole = evaluate(copies["whole"], **options, shard_samples=LIMIT * K)  # one shard, each sample seeded alone
    run_dir, options = copies["sharded"], {**options, "shard_samples": 3}
    saved, calls = shard_plan.save, []

    def cut_after_five(*args, **kwargs):
        if len(calls) == 5:
            raise TimeoutError("the job's time limit (a stand-in)")
        calls.append(args[3].name)
        return saved(*args, **kwargs)

    monkeypatch.setattr(shard_plan, "save", cut_after_five)
    with pytest.raises(TimeoutError):
        evaluate(run_dir, **options)
    where = RunDir(run_dir).eval_step(3).shards("tiny", 0)
    assert sorted(p.name.removesuffix(".json") for p in where.glob("*.json")) == sorted(calls)
    from orchestrator.status.cells import run_dir_facts  # what `orchestrate status` reads of the running evaluation

    assert run_dir_facts(run_dir)["eval_shards"] == (5, 2 * LIMIT)
    monkeypatch.setattr(shard_plan, "save", saved)
    one_call, ran = shard_run._one_call, []
    monkeypatch.setattr(shard_run, "_one_call", lambda *a: ran.append(a[4].name) or one_call(*a))
    summary = evaluate(run_dir, **options)
    planned = shard_plan.plan(LIMIT, K, 3)
    assert len(planned) == 2 * LIMIT and set(ran) == {s.name for s in planned} - set(calls) and len(ran) == 11
    joined = copies["whole"] / "eval" / "step_000003" / "tiny" / "seed_0.samples.jsonl"
    assert (where.parent.parent / "seed_0.samples.jsonl").read_bytes() == joined.read_bytes()
    assert summary["tasks"]["tiny"]["metrics"] == whole["tasks"]["tiny"]["metrics"]


def test_the_warning_signal_ends_an_evaluation_between_nothing_and_its_next_run_resumes(trained_run, tmp_path):
    """The evaluation job's entry (orchestrator/cluster/entry.py run_eval) in its own process, sent SIGUSR2 (what
    Slurm sends before the time limit) once three shards are saved: outside Slurm no requeue is possible, so it
    leaves with the preempted exit code (75, which the watcher resubmits) at once, in the middle of a shard; the
    next run computes only the shards still missing."""
    import os
    import shutil
    import signal

    from eval import shard_plan

    run_dir = tmp_path / trained_run["key"]
    shutil.copytree(trained_run["dir"], run_dir, ignore=shutil.ignore_patterns("eval"))
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    config["eval"].update({"limit": LIMIT, "shard_samples": 2})
    config["tracking"]["tracking_uri"] = f"sqlite:///{tmp_path / 'other.db'}"
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    env = {**os.environ, "COMEDY_DATA": str(trained_run["data"]), "OMP_NUM_THREADS": "1"}
    env.pop("SLURM_JOB_ID", None)
    code = ("import sys; from orchestrator.cluster.entry import run_eval, EVAL_ENTRY; "
            "run_eval(EVAL_ENTRY, sys.argv[1])")
    where = RunDir(run_dir).eval_step(3).shards("tiny", 0)
    job = subprocess.Popen([sys.executable, "-c", code, str(run_dir)], cwd=tmp_path, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 300
    while len(list(where.glob("*.json"))) < 3:
        assert job.poll() is None and time.monotonic() < deadline, job.communicate()[0][-3000:]
        time.sleep(0.05)
    job.send_signal(signal.SIGUSR2)
    out = job.communicate(timeout=120)[0]
    assert job.returncode == 75, out[-3000:]
    done = {p.name for p in where.glob("*.json")}
    planned = shard_plan.plan(LIMIT, K, 2)
    assert 3 <= len(done) < len(planned), done
    assert not (run_dir / "eval" / "step_000003" / "tiny" / "seed_0.samples.jsonl").exists()
    again = subprocess.run([sys.executable, "-c", code, str(run_dir)], cwd=tmp_path, env=env, capture_output=True,
                           text=True, timeout=300)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert f"{len(done)} of {len(planned)} shards finished" in again.stdout + again.stderr
    assert {p.name for p in where.glob("*.json")} == {f"{s.name}.json" for s in planned}
    result = json.loads(RunDir(run_dir).eval_result.read_text())["result"]
    assert result["tasks"]["tiny"]["status"] == "evaluated"


def test_two_workers_share_the_shards_each_once_and_give_the_whole_runs_samples(trained_run, tmp_path):
    """Two CPU processes stand in for a job's two GPUs (eval/workers.py): both take shards, each shard is run once,
    and the joined per-sample file is the single process's, byte for byte."""
    import re

    copies = unevaluated_copies(trained_run, tmp_path, "one", "two")
    options = dict(limit=LIMIT, data_dir=trained_run["data"], tracking_uri=f"sqlite:///{tmp_path / 'other.db'}",
                   shard_samples=4)
    evaluate(copies["one"], **options, log=lambda _: None)
    said: list[str] = []
    summary = evaluate(copies["two"], **options, n_workers=2, log=said.append)
    done = [re.search(r"shard (\S+) done by worker (\d)", line) for line in said]
    ran = [(m.group(1), m.group(2)) for m in done if m]
    assert len(ran) == LIMIT and len({name for name, _ in ran}) == LIMIT, said  # 8 shards of one problem, once each
    assert {w for _, w in ran} == {"0", "1"}, ran  # both workers took shards
    path = Path("eval") / "step_000003" / "tiny" / "seed_0.samples.jsonl"
    assert (copies["two"] / path).read_bytes() == (copies["one"] / path).read_bytes()
    assert summary["tasks"]["tiny"]["status"] == "evaluated"
    with pytest.raises(EvalError, match="workers=0"):
        evaluate(copies["two"], **options, n_workers=0, force=True)
