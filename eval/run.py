"""The evaluation job: mean@k of one checkpoint on the eval tasks, through lm-eval, logged into the training run.

    evaluate(run_dir, tasks=None, step=None, force=False, limit=None) -> summary dict

1. Resolve the target (eval/target.py): a run directory (or its run_key, or one of its checkpoints), or a plain
   HF model directory. Settings come from the run's `eval` config (k, temperature, top_p, max_tokens, chat
   template, seeds); arguments override them.
2. Skip every task whose marker `<run_dir>/eval/step_N/<task>.done.json` records the same settings and data
   (unless `force`). Then export the checkpoint to HF format (trainer/export.py), render the task YAMLs
   (eval/taskfiles.py) and run `lm_eval.simple_evaluate` once per evaluation seed over the pending tasks.
3. Per task: the per-sample outputs as jsonl, lm-eval's numbers as json, the mean over seeds logged as
   `eval/<task>/mean_at_<k>`, `pass_at_1`, `pass_at_<k>`, `maj_at_<k>` at the checkpoint's step into the SAME
   MLflow run as the training (reopened by its run_key), then the marker, written last.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from trainer.checkpoint import atomic_write_text, tag_for

from . import backends, data, taskfiles
from .answers import grade
from .metrics import eval_metric_keys
from .target import EvalError, Target, resolve

LM_EVAL_METRICS = ("acc", "pass_at_1", "pass_at_n", "maj_at_n", "n_samples")
BASE_EXPERIMENT = "comedy-base-models"


@dataclass(frozen=True)
class Settings:
    """Everything that changes the numbers; a marker counts as done only for equal settings."""

    k: int
    temperature: float
    top_p: float
    max_tokens: int
    chat_template: bool
    seeds: tuple[int, ...]
    backend: str
    limit: int | None = None

    def record(self) -> dict:
        """As JSON reads it back (seeds a list), for comparing with a marker."""
        return {**asdict(self), "seeds": list(self.seeds)}


def evaluate(run_dir: Path | str, tasks: list[str] | None = None, step: int | None = None, force: bool = False,
             limit: int | None = None, *, k: int | None = None, seeds: list[int] | None = None,
             backend: str | None = None, max_tokens: int | None = None, chat_template: bool | None = None,
             data_dir: Path | None = None,
             tracking_uri: str | None = None, experiment: str | None = None, out_dir: Path | None = None,
             runs_root: Path = Path("runs"), engine_args: dict | None = None,
             log: Callable[[str], None] = print) -> dict:
    """Evaluate a run's checkpoint (default: its latest) or a plain model; see the module docstring."""
    from trainer.config import EvalConfig

    target = resolve(run_dir, runs_root)
    cfg = _run_config(target)
    ev = cfg.eval if cfg else EvalConfig()
    settings = _settings(ev, k, seeds, backend, max_tokens, limit, chat_template)
    tasks = _check_tasks(list(tasks or ev.tasks))
    step = _step(target, step)
    root = (target.path if target.is_run else Path(out_dir or runs_root / "eval" / target.run_key)) / "eval"
    root = root / tag_for(step)
    files = _data_files(tasks, Path(data_dir or data.default_data_dir()), root / "data")
    marks = {t: _marker(root, t, settings, files[t]) for t in tasks}
    pending = [t for t in tasks if force or marks[t] is None]
    summary = {"target": str(target.path), "run_key": target.run_key, "step": step, "settings": settings.record(),
               "tasks": {t: {"status": "skipped", "metrics": marks[t]["metrics"]} for t in tasks if t not in pending}}
    for t in summary["tasks"]:
        log(f"[eval] {t}: already evaluated at step {step} with these settings ({root / (t + '.done.json')}); "
            f"skipped (--force re-runs it)")
    if not pending:
        return summary
    model_dir = _model_dir(target, step, log)
    per_seed = _generate(model_dir, pending, files, settings, root, cfg, force, engine_args or {}, log)
    summary["run_id"] = _log(target, cfg, pending, per_seed, settings, step, root, files, tracking_uri,
                             experiment, model_dir)
    for t in pending:
        summary["tasks"][t] = {"status": "evaluated", "metrics": _marker(root, t, settings, files[t])["metrics"]}
    return summary


def _run_config(target: Target):
    if not target.is_run:
        return None
    from trainer.export import ExportError, load_run_config

    try:
        return load_run_config(target.path)
    except ExportError as err:
        raise EvalError(str(err)) from None


def _settings(ev, k, seeds, backend, max_tokens, limit, chat_template) -> Settings:
    problems = [f"{name}={v!r}: give an integer >= 1" for name, v in (("k", k), ("limit", limit), ("max_tokens",
                max_tokens)) if v is not None and (not isinstance(v, int) or v < 1)]
    if problems:
        raise EvalError("; ".join(problems))
    try:
        chosen = backends.pick_backend(backend)
    except ValueError as err:
        raise EvalError(str(err)) from None
    chat = ev.chat_template if chat_template is None else chat_template
    return Settings(k or ev.k, ev.temperature, ev.top_p, max_tokens or ev.max_tokens, chat,
                    tuple(seeds if seeds is not None else ev.seeds), chosen, limit)


def _check_tasks(tasks: list[str]) -> list[str]:
    valid = taskfiles.available_tasks()
    unknown = [t for t in tasks if t not in valid]
    if unknown:
        raise EvalError(f"unknown eval task(s) {', '.join(unknown)}; valid: {', '.join(valid)}")
    return list(dict.fromkeys(tasks))


def _step(target: Target, step: int | None) -> int:
    if not target.is_run:
        return 0
    from trainer.export import ExportError, checkpoint_step

    try:
        return checkpoint_step(target.path, step if step is not None else target.step)
    except ExportError as err:
        raise EvalError(str(err)) from None


def _data_files(tasks: list[str], data_dir: Path, scratch: Path) -> dict[str, Path]:
    """Each task's data file; the tiny sets are generated (no network) when the data dir lacks them."""
    files, missing = {}, []
    for task in tasks:
        path = data_dir / taskfiles.data_file(task)
        name = path.stem
        if not path.exists() and name.startswith("tiny_"):
            path = scratch / path.name
            if not path.exists():
                data.write_rows(scratch, name, data.tiny_rows(name))
        if not path.exists():
            missing.append(f"{task} needs {path}")
        files[task] = path.resolve()
    if missing:
        raise EvalError(f"missing eval data ({'; '.join(missing)}); run `orchestrate data prepare --out {data_dir}` "
                        f"where the hub is reachable, or point --data-dir / $COMEDY_DATA at a prepared directory")
    return files


def _marker(root: Path, task: str, settings: Settings, data_file: Path) -> dict | None:
    path = root / f"{task}.done.json"
    try:
        mark = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    same = mark.get("settings") == settings.record()
    return mark if same and mark.get("data_sha256") == data.sha256_file(data_file) else None


def _model_dir(target: Target, step: int, log) -> Path:
    if not target.is_run:
        return target.path
    from trainer.export import ExportError, export_dir, export_hf

    if not (export_dir(target.path, step) / "export.json").is_file():
        log(f"[eval] exporting checkpoint step {step} of {target.path} to Hugging Face format")
    try:
        return export_hf(target.path, step)
    except ExportError as err:
        raise EvalError(str(err)) from None


def _generation_kwargs(model_dir: Path, settings: Settings) -> dict:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    if settings.chat_template and not tokenizer.chat_template:
        raise EvalError(f"{model_dir} has no chat template but eval.chat_template is on; turn it off "
                        f"(--no-chat-template) or give a model with one")
    longest = backends.model_max_length(model_dir)
    if longest is not None and settings.max_tokens >= longest:
        raise EvalError(f"max_tokens {settings.max_tokens} leaves no room for the prompt in {model_dir}'s "
                        f"{longest} positions; lower eval.max_tokens (--max-tokens)")
    until = backends.stop_strings(tokenizer, settings.chat_template)
    return backends.generation_kwargs(settings.backend, settings.temperature, settings.top_p, settings.max_tokens,
                                      until)


def _generate(model_dir, tasks, files, settings, root, cfg, force, engine_args, log) -> dict[str, dict[int, dict]]:
    """task -> seed -> lm-eval metrics; one simple_evaluate per seed over the tasks that still need that seed."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    gen = _generation_kwargs(model_dir, settings)
    rendered = taskfiles.render({t: files[t] for t in tasks}, root / "tasks", settings.k, gen)
    manager = TaskManager(include_path=str(rendered), include_defaults=False)
    results: dict[str, dict[int, dict]] = {t: {} for t in tasks}
    hf = None
    for seed in settings.seeds:
        todo = []
        for t in tasks:
            saved = _seed_result(root, t, seed, settings, files[t])
            if saved is not None and not force:
                results[t][seed] = saved
            else:
                todo.append(t)
        if not todo:
            continue
        if settings.backend == "hf":
            hf = hf or backends.hf_lm(model_dir, device=_device())
            model, model_args = hf, None
        else:
            model, model_args = "vllm", _vllm_args(model_dir, seed, cfg, settings, engine_args)
        log(f"[eval] seed {seed}: {', '.join(todo)} with k={settings.k} on {settings.backend} ({model_dir})")
        start = time.monotonic()
        out = lm_eval.simple_evaluate(
            model=model, model_args=model_args, tasks=todo, task_manager=manager, limit=settings.limit,
            apply_chat_template=settings.chat_template, fewshot_as_multiturn=settings.chat_template,
            log_samples=True, bootstrap_iters=0, random_seed=seed, numpy_random_seed=seed, torch_random_seed=seed,
            fewshot_random_seed=seed)
        for t in todo:
            results[t][seed] = _save_seed(root, t, seed, out, settings, files[t], time.monotonic() - start)
            log(f"[eval] {t} seed {seed}: mean@{settings.k} {results[t][seed]['acc']:.4f} over "
                f"{results[t][seed]['docs']} problems")
    return results


def _device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _vllm_args(model_dir: Path, seed: int, cfg, settings: Settings, engine_args: dict) -> dict:
    prompt_budget = cfg.rollout.max_prompt_tokens if cfg else 1024
    longest = backends.model_max_length(model_dir)
    max_len = prompt_budget + settings.max_tokens
    args = {"tensor_parallel_size": cfg.rollout.tensor_parallel if cfg else 1,
            "max_model_len": min(max_len, longest) if longest else max_len, **engine_args}
    return backends.vllm_model_args(model_dir, seed, **args)


def _seed_file(root: Path, task: str, seed: int, kind: str) -> Path:
    return root / task / f"seed_{seed}.{kind}"


def _seed_result(root, task, seed, settings, data_file) -> dict | None:
    try:
        saved = json.loads(_seed_file(root, task, seed, "results.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None
    same = saved.get("settings") == settings.record()
    return saved["metrics"] if same and saved.get("data_sha256") == data.sha256_file(data_file) else None


def _save_seed(root, task, seed, out, settings, data_file, seconds) -> dict:
    """Write the seed's per-sample jsonl and results json; return its metrics (checked: k samples per problem)."""
    family = taskfiles.family(task)
    rows = []
    for s in sorted(out["samples"][task], key=lambda s: s["doc_id"]):
        kept = s["filtered_resps"][0]
        samples = [kept] if isinstance(kept, str) else list(kept)  # a str: a take_first filter (caught below)
        graded = [grade(family, text, s["doc"]) for text in samples]
        rows.append({"doc_id": s["doc_id"], "unique_id": s["doc"].get("unique_id"), "target": s["target"],
                     "prompt": s["arguments"][0][0], "samples": samples, "scores": [g[0] for g in graded],
                     "answers": [g[1] for g in graded], **{m: s.get(m) for m in LM_EVAL_METRICS}})
    reported = out["results"][task]
    metrics = {m: float(reported[f"{m},all"]) for m in LM_EVAL_METRICS}
    bad = [r["doc_id"] for r in rows if len(r["samples"]) != settings.k]
    if bad or metrics["n_samples"] != settings.k:
        raise RuntimeError(f"{task}: lm-eval scored {metrics['n_samples']} samples per problem, not k={settings.k} "
                           f"(docs {bad[:5]}): the task's filter must keep all repeats")
    metrics["docs"] = len(rows)
    samples_path = _seed_file(root, task, seed, "samples.jsonl")
    samples_path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(samples_path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    record = {"task": task, "seed": seed, "metrics": metrics, "lm_eval": reported, "seconds": round(seconds, 2),
              "settings": settings.record(), "data_sha256": data.sha256_file(data_file)}
    atomic_write_text(_seed_file(root, task, seed, "results.json"), json.dumps(record, indent=1, default=str))
    return metrics


def _log(target, cfg, tasks, per_seed, settings, step, root, files, tracking_uri, experiment, model_dir) -> str | None:
    """Means over seeds into the MLflow run of `target` (reopened by run_key), the files as artifacts, then the
    markers. The tracker buffers in the run dir while the store is unreachable, so nothing is lost."""
    from orchestrator.tracking import MlflowTracker
    from trainer.train import default_tracking_uri

    run_dir = root.parents[1]
    uri = tracking_uri or (cfg.tracking.tracking_uri if cfg else "") or default_tracking_uri()
    name = experiment or ((cfg.tracking.experiment or "comedy") if cfg else BASE_EXPERIMENT)
    tracker = MlflowTracker(run_dir)
    params = {} if target.is_run else {"model.name_or_path": str(model_dir)}
    tracker.open_run(target.run_key, name, uri, params, {})
    try:
        for task in tasks:
            seeds = per_seed[task]
            mean = {m: sum(r[m] for r in seeds.values()) / len(seeds) for m in LM_EVAL_METRICS}
            keys = eval_metric_keys(task, settings.k)
            metrics = {keys[m]: mean[m] for m in keys}
            tracker.log_metrics(metrics, step)
            for seed in seeds:
                for kind in ("samples.jsonl", "results.json"):
                    tracker.log_artifact(_seed_file(root, task, seed, kind), f"eval/{tag_for(step)}/{task}")
            tracker.log_artifact(root / "tasks" / f"{task}.yaml", f"eval/{tag_for(step)}/{task}")
            mark = {"task": task, "step": step, "metrics": metrics, "per_seed": {str(s): r for s, r in seeds.items()},
                    "settings": settings.record(), "data_sha256": data.sha256_file(files[task]),
                    "model_dir": str(model_dir), "run_key": target.run_key, "finished_unix": int(time.time()),
                    "pid": os.getpid()}
            atomic_write_text(root / f"{task}.done.json", json.dumps(mark, indent=1, sort_keys=True))
    finally:
        tracker.close("FINISHED")
    return tracker.run_id
