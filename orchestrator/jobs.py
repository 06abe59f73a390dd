"""What a Slurm (or local) job runs on its node: `train_job(run_dir)` and `eval_job(run_dir)`, named by the entry
strings a sweep records ("orchestrator.jobs:train_job") and imported from the sweep's code snapshot
(orchestrator/cluster/entry.py calls them). The compute node's side of the orchestrator, as cli.py is the login
node's: it may import anything below it.

`probe_train` / `probe_eval` are a tiny checkpointing job with the same contract (count to N, one checkpoint per
step): what the integration tests and the benchmark submit to exercise the machinery in seconds (and
`--train-entry` offers). They live here, not in tests/support/, because a job imports its entry from the sweep's
code snapshot (orchestrator/cluster/snapshot.py), which copies the four packages and not tests/.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import yaml

from orchestrator.cluster.entry import PREEMPTED_EXIT, code_dir, write_json
from orchestrator.launch.ledger import Ledger
from record.identity.run_key import eval_id
from record.rundir import RunDir, tag_for
from trainer.config.run import RunConfig


def train_job(run_dir: Path) -> dict:
    """Read the run's resolved config.yaml and train (or resume) it."""
    from trainer.train import RunContext, train  # noqa: PLC0415 (torch: only inside a training job)

    cfg = RunConfig.from_dict(yaml.safe_load(RunDir(run_dir).config.read_text(encoding="utf-8")))
    record = _record(run_dir)
    sweep = record.get("sweep") or run_dir.parent.name
    ctx = RunContext(run_dir=run_dir, run_key=run_dir.name, sweep_id=sweep, parent_run_key=f"sweep-{sweep}",
                     axes=record.get("axes"))
    result = train(cfg, ctx)
    if result.get("preempted"):  # checkpointed and asked Slurm to requeue; if it did, this exit code is moot
        raise SystemExit(PREEMPTED_EXIT)
    return result


def eval_job(run_dir: Path) -> dict:
    """Evaluate the run's final checkpoint (eval/evaluate.py)."""
    from eval.evaluate import evaluate  # noqa: PLC0415 (lm-eval, torch: only inside an evaluation job)

    return evaluate(run_dir)


def _record(run_dir: Path) -> dict:
    """The cell's ledger record ({} for a run dir outside a sweep)."""
    try:
        return Ledger(run_dir.parent).load(run_dir.name) or {}
    except Exception:  # noqa: BLE001 - a run outside a sweep, or an unreadable record: train without the axes
        return {}


# --- the probe: a real job that counts to N, one checkpoint per step --------------------------------------------

def probe_settings(run_dir: Path) -> dict:
    """`<run_dir>/probe.json`: steps (default: config.yaml's optim.steps), sleep_s, fail_exit (exit with it from
    fail_at_step on), collapse_at_step (write a collapsed verdict from then on)."""
    defaults = {"steps": _config_steps(run_dir), "sleep_s": 0.0, "fail_exit": None, "fail_at_step": 1,
                "collapse_at_step": None}
    try:
        return {**defaults, **json.loads(RunDir(run_dir).probe.read_text(encoding="utf-8"))}
    except (OSError, json.JSONDecodeError):
        return defaults


def _config_steps(run_dir: Path) -> int:
    try:
        return int(yaml.safe_load(RunDir(run_dir).config.read_text(encoding="utf-8"))["optim"]["steps"])
    except (OSError, KeyError, TypeError, ValueError, yaml.YAMLError):
        return 3


def probe_train(run_dir: Path) -> dict:
    """Resume from checkpoints/latest.json, count to `steps` writing a checkpoint each step; may fail or
    collapse on request. Every start is logged in starts.jsonl (step it resumed from, job id, code)."""
    s, run = probe_settings(run_dir), RunDir(run_dir)
    latest = run.latest_checkpoint
    step = json.loads(latest.read_text())["step"] if latest.exists() else 0
    with open(run.starts, "a") as f:
        f.write(json.dumps({"from_step": step, "job": os.environ.get("SLURM_JOB_ID"), "code": code_dir(),
                            "restart": os.environ.get("SLURM_RESTART_COUNT", "0"), "at": time.time()}) + "\n")
    while step < s["steps"]:
        time.sleep(s["sleep_s"])
        step += 1
        write_json(latest, {"tag": tag_for(step), "step": step})
        if s["collapse_at_step"] is not None and step >= s["collapse_at_step"]:
            write_json(run.verdict, {"verdict": "collapsed", "step": step,
                                                   "reason": "probe asked to collapse", "findings": []})
        if s["fail_exit"] is not None and step >= s["fail_at_step"]:
            raise SystemExit(int(s["fail_exit"]))
    return {"step": step, "code": code_dir()}


def probe_eval(run_dir: Path) -> dict:
    """A stand-in evaluation (for the machinery's tests): reads the final checkpoint's step and fails unless
    training had finished, so a chained evaluation that ran too early shows up. A baseline's (nothing trained)
    logs its start in starts.jsonl and takes `steps` x `sleep_s` seconds, as a base model's evaluation would."""
    run = RunDir(run_dir)
    if run.baseline.exists():
        s = probe_settings(run_dir)
        with open(run.starts, "a") as f:
            f.write(json.dumps({"job": os.environ.get("SLURM_JOB_ID"), "code": code_dir(), "at": time.time()}) + "\n")
        time.sleep(s["steps"] * s["sleep_s"])
        return {"step": 0, "eval/probe/mean_at_1": 1.0}
    step = json.loads(run.latest_checkpoint.read_text())["step"]
    target = probe_settings(run_dir)["steps"]
    if step != target:
        raise RuntimeError(f"evaluated at step {step} of {target}: training had not finished")
    return _probe_evaluation(run, step)


def _probe_evaluation(run: RunDir, step: int) -> dict:
    """The real evaluation's contract (eval/evaluate.py): a mean@k of 1.0 per task of config.yaml's eval section, the
    result kept per evaluation (eval/evaluations/<id>.json) beside the run's earlier ones."""
    config = yaml.safe_load(run.config.read_text(encoding="utf-8"))
    ev = config.get("eval") or {}
    evaluation = eval_id(config)
    tasks = {t: {"status": "evaluated", "metrics": {f"eval/{t}/mean_at_{ev.get('k', 1)}": 1.0}}
             for t in ev.get("tasks") or ()}
    result = {"step": step, "eval/probe/mean_at_1": 1.0, "tasks": tasks, "evaluation_id": evaluation,
              "settings": {k: v for k, v in ev.items() if k != "tasks"}}
    write_json(run.evaluation(evaluation), {**result, "at": time.time()})
    return result
