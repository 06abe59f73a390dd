"""The evaluation job: mean@k of one checkpoint on the eval tasks, through lm-eval, logged into the training run.

    evaluate(run_dir, tasks=None, step=None, force=False, limit=None) -> summary dict

1. Resolve the target (eval/target.py): a run directory (or its run_key, or one of its checkpoints), a sweep's
   baseline directory (its config's `model.name_or_path` itself, at step 0, nothing exported), or a plain HF model
   directory. Settings come from the run's `eval` config (k, temperature, top_p, max_tokens, chat
   template, seeds); arguments override them.
2. Skip every task whose marker `<run_dir>/eval/step_N/<task>.done.json` (record/rundir.py `EvalStep`) records the
   same settings and data (unless `force`). Then export the checkpoint to HF format (trainer/run/export.py), render
   the task YAMLs (eval/taskfiles.py) and run `lm_eval.simple_evaluate` once per evaluation seed over the pending
   tasks.
3. Per task (eval/outcome.py): the per-sample outputs as jsonl, lm-eval's numbers as json, the mean over seeds
   logged as `eval/<task>/mean_at_<k>`, `pass_at_1`, `pass_at_<k>`, `maj_at_<k>` at the checkpoint's step into the
   SAME MLflow run as the training (reopened by its run_key), then the marker, written last.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import lm_eval
import lm_eval.evaluator
import torch
from transformers import AutoTokenizer

from eval import backends, local_data, outcome, shard_plan, shard_run, taskfiles, workers
from eval.outcome import Settings
from eval.target import EvalError, Target, resolve
from record.files import atomic_write
from record.identity.run_key import canonical_json
from record.rundir import RunDir
from trainer.config.run import EvalConfig, RunConfig
from trainer.model.build import model_path
from trainer.rollout import vllm_support
from trainer.run.export import ExportError, checkpoint_step, export_hf, load_run_config
from trainer.tasks import data as task_data
from trainer.tasks.common import read_jsonl


def evaluate(run_dir: Path | str, tasks: list[str] | None = None, step: int | None = None, force: bool = False,
             limit: int | None = None, *, k: int | None = None, seeds: list[int] | None = None,
             backend: str | None = None, max_tokens: int | None = None, chat_template: bool | None = None,
             data_dir: Path | None = None, tracking_uri: str | None = None, experiment: str | None = None,
             out_dir: Path | None = None, runs_root: Path = Path("runs"), engine_args: dict | None = None,
             shard_samples: int | None = None, n_workers: int | None = None,
             log: Callable[[str], None] = print) -> dict:
    """Evaluate a run's checkpoint (default: its latest) or a plain model; see the module docstring."""
    target = resolve(run_dir, runs_root)
    cfg = _run_config(target)
    ev = cfg.eval if cfg else EvalConfig()
    settings = _settings(ev, k, seeds, backend, max_tokens, limit, chat_template)
    tasks = _check_tasks(list(tasks or ev.tasks))
    step = _step(target, step)
    # A plain model has no run directory: its evaluation gets one of its own, laid out the same way.
    home = RunDir(target.path if target.has_run_dir else Path(out_dir or runs_root / "eval" / target.run_key))
    root = home.eval_step(step)
    files = _data_files(tasks, Path(data_dir or task_data.data_dir()), root.data)
    shard_samples = shard_samples if shard_samples is not None else ev.shard_samples
    if shard_samples is not None and (isinstance(shard_samples, bool) or not isinstance(shard_samples, int)
                                      or shard_samples < 1):
        raise EvalError(f"shard_samples={shard_samples!r}: give an integer >= 1 (samples a shard), or none")
    if n_workers is not None and (isinstance(n_workers, bool) or not isinstance(n_workers, int) or n_workers < 1):
        raise EvalError(f"workers={n_workers!r}: give an integer >= 1 (engines side by side), or none")
    # One evaluation of this checkpoint at a time; what is done is read once the lock is held, so an evaluation
    # that waited finds what the other finished and logs nothing twice.
    with shard_plan.exclusive(root, log):
        marks = {t: outcome.marker(root, t, settings, files[t]) for t in tasks}
        pending = [t for t in tasks if force or marks[t] is None]
        summary = {"target": str(target.path), "run_key": target.run_key, "step": step,
                   "settings": settings.record(),
                   "tasks": {t: {"status": "skipped", "metrics": marks[t]["metrics"]} for t in tasks
                             if t not in pending}}
        for t in summary["tasks"]:
            log(f"[eval] {t}: already evaluated at step {step} with these settings ({root.done(t)}); "
                f"skipped (--force re-runs it)")
        if not pending:
            return _kept(home, summary, target.has_run_dir)
        model_dir = _model_dir(target, cfg, step, log)
        per_seed = _generate(model_dir, pending, files, settings, root, cfg, force, engine_args or {},
                             shard_samples, workers.count(n_workers), log)
        summary["run_id"] = outcome.log_to_run(target, cfg, pending, per_seed, settings, step, home, files,
                                              tracking_uri, experiment, model_dir)
        for t in pending:
            done = outcome.marker(root, t, settings, files[t])
            summary["tasks"][t] = {"status": "evaluated", "metrics": done["metrics"]}
    return _kept(home, summary, target.has_run_dir)


def _kept(home: RunDir, summary: dict, has_run_dir: bool) -> dict:
    """The summary, also kept as this evaluation's own result (`eval/evaluations/<id>.json`, id: its tasks and
    settings), beside the results of the run's other evaluations (status and report read them all)."""
    if has_run_dir:
        settings = {**summary["settings"], "tasks": sorted(summary["tasks"])}
        summary["evaluation_id"] = hashlib.sha256(canonical_json(settings).encode()).hexdigest()[:12]
        atomic_write(home.evaluation(summary["evaluation_id"]),
                     json.dumps({**summary, "at": time.time()}, indent=1, sort_keys=True, default=str))
    return summary


def _run_config(target: Target) -> RunConfig | None:
    if not target.has_run_dir:
        return None
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
        chosen = backends.pick_backend(backend or ev.backend)  # the argument, else the run config's eval.backend
        if chosen == "vllm":  # before the export: the model's own checks come when it is there (_vllm_args)
            vllm_support.require("--backend vllm")
    except (ValueError, vllm_support.VLLMUnavailable) as err:
        raise EvalError(str(err)) from None
    chat = ev.chat_template if chat_template is None else chat_template
    return Settings(k or ev.k, ev.temperature, ev.top_p, max_tokens or ev.max_tokens, chat,
                    tuple(seeds if seeds is not None else ev.seeds), chosen, limit or ev.limit, ev.grader)


def _check_tasks(tasks: list[str]) -> list[str]:
    valid = taskfiles.available_tasks()
    unknown = [t for t in tasks if t not in valid]
    if unknown:
        raise EvalError(f"unknown eval task(s) {', '.join(unknown)}; valid: {', '.join(valid)}")
    return list(dict.fromkeys(tasks))


def _step(target: Target, step: int | None) -> int:
    if not target.is_run:
        return 0
    try:
        return checkpoint_step(target.path, step if step is not None else target.step)
    except ExportError as err:
        raise EvalError(str(err)) from None


def _data_files(tasks: list[str], data_dir: Path, scratch: Path) -> dict[str, Path]:
    """Each task's data file; the generated sets (tiny, small sums) are written (no network) when the data dir lacks
    them."""
    files, missing = {}, []
    for task in tasks:
        path = data_dir / taskfiles.data_file(task)
        name = path.stem
        if not path.exists() and local_data.is_generated(name):
            path = scratch / path.name
            if not path.exists():
                local_data.write_rows(scratch, name, local_data.generated_rows(name))
        if not path.exists():
            missing.append(f"{task} needs {path}")
        files[task] = path.resolve()
    if missing:
        raise EvalError(f"missing eval data ({'; '.join(missing)}); run `orchestrate data prepare --out {data_dir}` "
                        f"where the hub is reachable, or point --data-dir / $COMEDY_DATA at a prepared directory")
    return files


def _model_dir(target: Target, cfg: RunConfig | None, step: int, log) -> Path:
    if target.kind == "baseline":  # the base model itself: the tiny model's build, or the hub name / path given
        return Path(model_path(cfg))
    if not target.is_run:
        return target.path

    if not RunDir(target.path).export_done(step).is_file():
        log(f"[eval] exporting checkpoint step {step} of {target.path} to Hugging Face format")
    try:
        return export_hf(target.path, step)
    except ExportError as err:
        raise EvalError(str(err)) from None


def _generation_kwargs(model_dir: Path, settings: Settings, tokenizer) -> dict:
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


def _generate(model_dir, tasks, files, settings, root, cfg, force, engine_args, samples_per_shard, n_workers,
              log) -> dict[str, dict[int, dict]]:
    """task -> seed -> metrics. One engine per seed, and in it each task shard by shard (eval/shard_run.py), each
    shard saved as it ends: a time limit loses at most the shard in progress, and the requeued job resumes at it.
    With several workers (the job's GPUs), a seed's shards run side by side, one engine each (eval/workers.py)."""
    # lm-eval records `git describe` of the working directory and lets git print "fatal: not a git repository"
    # when that is not a checkout (a model evaluated from anywhere); ours asks quietly and records "unknown".
    lm_eval.evaluator.get_git_commit_hash = quiet_git_hash
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    gen = _generation_kwargs(model_dir, settings, tokenizer)
    if settings.backend == "vllm":  # checked before any engine starts: one message, not a trace from inside vLLM
        prompt_tokens = _longest_prompt(tokenizer, tasks, files, settings.limit, settings.chat_template)
        vllm_args = _vllm_args(model_dir, cfg, settings, engine_args, prompt_tokens)
    taskfiles.render({t: files[t] for t in tasks}, root.tasks, settings.k, gen, settings.grader)  # kept
    results: dict[str, dict[int, dict]] = {t: {} for t in tasks}
    hf = None
    for seed in settings.seeds:
        todo = []
        for t in tasks:
            saved = outcome.seed_result(root, t, seed, settings, files[t])
            if saved is not None and not force:
                results[t][seed] = saved
            else:
                todo.append(t)
        if not todo:
            continue
        log(f"[eval] seed {seed}: {', '.join(todo)} with k={settings.k} on {settings.backend} ({model_dir})")
        if n_workers > 1:
            spec = {"backend": settings.backend, "model_dir": str(model_dir), "device": _device(),
                    "vllm_args": vllm_args if settings.backend == "vllm" else {}}
            for t, metrics in _side_by_side(spec, todo, seed, files, settings, root, gen, samples_per_shard,
                                            force, n_workers, log).items():
                results[t][seed] = metrics
            continue
        if settings.backend == "hf":
            model = hf = hf or backends.hf_lm(model_dir, device=_device())
        else:  # the seed is an engine argument: one engine per seed
            model = backends.vllm_lm(backends.vllm_model_args(model_dir, seed, **vllm_args))
        try:
            for t in todo:
                results[t][seed] = shard_run.evaluate(model, t, seed, files[t], settings, root, gen,
                                                    samples_per_shard, force, log)
                log(f"[eval] {t} seed {seed}: mean@{settings.k} {results[t][seed]['acc']:.4f} over "
                    f"{results[t][seed]['docs']} problems")
        finally:
            if settings.backend == "vllm":
                backends.release_vllm(model)
    return results


def _side_by_side(spec, tasks, seed, files, settings, root, gen, samples_per_shard, force, n_workers, log) -> dict:
    """One seed's tasks with their shards spread over `n_workers` engines; task -> metrics."""
    start = time.monotonic()
    plans = [shard_plan.plan_task(t, seed, files[t], settings, root, samples_per_shard, force) for t in tasks]
    for plan in plans:
        shard_run.announce(plan, samples_per_shard, log)
    workers.run(n_workers, spec, plans, settings, gen, log)
    out = {}
    for plan in plans:
        out[plan.task] = shard_run.finish(plan, settings, time.monotonic() - start)
        log(f"[eval] {plan.task} seed {seed}: mean@{settings.k} {out[plan.task]['acc']:.4f} over "
            f"{out[plan.task]['docs']} problems")
    return out


def quiet_git_hash() -> str:
    """`git describe --always` of the working directory, or "unknown" (not a checkout, no git), stderr silenced."""
    try:
        done = subprocess.run(["git", "describe", "--always"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else "unknown"


def _device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def _longest_prompt(tokenizer, tasks: list[str], files: dict[str, Path], limit: int | None, chat: bool) -> int:
    """Tokens of the longest prompt the tasks will send (the first `limit` problems of each), built as lm-eval builds
    it: the task's doc_to_text, inside the chat template when that is on."""
    utils = importlib.import_module("eval.tasks.utils")  # the task files' own prompt functions
    texts = []
    for task in tasks:
        cfg = taskfiles.load_task(task)
        to_text = getattr(utils, str(cfg["doc_to_text"]).rsplit(".", 1)[-1])
        # A task's fixed worked examples (a `samples` function whose rows carry their `reply`) come first.
        samples = (cfg.get("fewshot_config") or {}).get("samples")
        shots = getattr(utils, str(samples).rsplit(".", 1)[-1])() if samples else []
        turns = [(to_text(s), s["reply"]) for s in shots]
        texts += [(turns, to_text(row)) for row in read_jsonl(files[task])[:limit]]
    if chat:
        texts = [tokenizer.apply_chat_template([{"role": r, "content": c} for q, a in turns
                                                for r, c in (("user", q), ("assistant", a))]
                                               + [{"role": "user", "content": t}], tokenize=False,
                                               add_generation_prompt=True) for turns, t in texts]
    else:
        texts = ["".join(f"{q}\n{a}\n\n" for q, a in turns) + t for turns, t in texts]
    return max((len(ids) for ids in tokenizer(texts)["input_ids"]), default=0)


def _vllm_args(model_dir: Path, cfg, settings: Settings, engine_args: dict, prompt_tokens: int) -> dict:
    """vllm_model_args less the seed. max_model_len: the run's prompt budget (at least the longest prompt) plus
    max_tokens, capped by the model, unless engine_args set it; EvalError when it cannot hold the longest prompt plus
    max_tokens (lm-eval would cut the prompt silently), or when anything else keeps vLLM from this model here."""
    needed = prompt_tokens + settings.max_tokens
    longest = backends.model_max_length(model_dir)
    max_len = max(cfg.rollout.max_prompt_tokens if cfg else 0, prompt_tokens) + settings.max_tokens
    args = {"tensor_parallel_size": cfg.rollout.tensor_parallel if cfg else 1,
            "max_model_len": min(max_len, longest) if longest else max_len, **engine_args}
    problems = vllm_support.problems(model_dir, args["max_model_len"], needed)
    if problems:
        raise EvalError(f"--backend vllm cannot evaluate {model_dir}: {'; '.join(problems)}")
    return args
