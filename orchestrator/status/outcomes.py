"""A sweep's results as `orchestrate status` shows them: pure functions over ledger records and the facts read from
each run directory (status.py does the reading and the printing).

The contract with the writers (tested across the seam in tests/integration/test_status_seam.py):
- `<run_dir>/eval/job_result.json` (orchestrator/cluster/entry.py `run_eval`; read by record/rundir.py
  `RunDir.read_eval_result`, which also reads the old layout's `eval_result.json`) is
  `{"result": <eval.evaluate.evaluate()'s summary>}`; the metrics sit under `result["tasks"][<task>]["metrics"]`,
  keyed as record/metric_keys.py `eval_metric_keys` names them (`eval/<task>/mean_at_<k>`, ...). The probe
  evaluation (orchestrator/jobs.py) puts `eval/...` keys at the top of `result`; both are read.
- `<run_dir>/verdict.json` (trainer/run/collapse.py `write_verdict`) is `{"verdict", "step", "reason", "findings"}`.

A configuration is a cell's axes without its seed; its summary gives each metric's mean and spread over the
seeds that have it (sd: the sample standard deviation, n - 1; also min and max) and the seeds counted by verdict.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Mapping

from orchestrator.launch.intents import WAITING
from orchestrator.launch.ledger import attempts, cell_status, latest
from record.display import cell_name, format_value

MEAN_AT_K = re.compile(r"eval/(?P<task>[^/]+)/mean_at_(?P<k>\d+)")
REWARD = "train/reward_mean"  # the final reward of the summary: the last value the run directory holds
NO_VERDICT = "none"  # a seed without verdict.json yet (not trained, or a probe job)
_SHORT = {REWARD: "reward", "train/kl_k1": "kl_k1", "val/pass_at_1": "val_pass@1",
          "train/response_length": "length"}


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def eval_metrics(result) -> dict[str, float]:
    """Every numeric `eval/...` metric of an evaluation summary: each task's `metrics`, and keys at the top."""
    if not isinstance(result, Mapping):
        return {}
    out = {k: float(v) for k, v in result.items() if k.startswith("eval/") and _number(v)}
    tasks = result.get("tasks")
    for task in (tasks.values() if isinstance(tasks, Mapping) else ()):
        metrics = task.get("metrics") if isinstance(task, Mapping) else None
        if isinstance(metrics, Mapping):
            out.update({k: float(v) for k, v in metrics.items() if k.startswith("eval/") and _number(v)})
    return out


def evaluations(kept: list[dict], latest) -> list[dict]:
    """Each evaluation of a run, oldest first: {"id", "settings", "tasks", "eval"} from its own result
    (`eval/evaluations/<id>.json`, eval/evaluate.py), and the evaluation job's latest result (`eval/job_result.json`)
    where it is not one of them (a run evaluated before results were kept apart, or the probe's stand-in)."""
    out = [{"id": k.get("evaluation_id"), "settings": k.get("settings"), "tasks": sorted(k.get("tasks") or ()),
            "step": k.get("step"), "eval": eval_metrics(k)}
           for k in sorted(kept, key=lambda k: k.get("at") or 0)]
    ids = {e["id"] for e in out}
    if isinstance(latest, Mapping) and (latest.get("evaluation_id") not in ids or latest.get("evaluation_id") is None):
        out.append({"id": latest.get("evaluation_id"), "settings": latest.get("settings"),
                    "tasks": sorted(latest.get("tasks") or ()), "step": latest.get("step"),
                    "eval": eval_metrics(latest)})
    return [e for e in out if e["eval"]]


def merged_eval(evals: list[dict]) -> dict[str, float]:
    """Every metric of every evaluation, keyed by task and k (`eval/<task>/mean_at_<k>`); where two evaluations
    give one key (the same task and k under other settings), the newest."""
    merged: dict[str, float] = {}
    for e in evals:
        merged.update(e["eval"])
    return merged


def evaluation_settings(rows: list[dict]) -> list[tuple[str, int]]:
    """(setting, cells) per distinct evaluation setting among the rows' evaluations (tasks, k, max_tokens, backend,
    seeds), or nothing when there is one: what status and report say when a sweep was evaluated more than one way."""
    seen: dict[str, int] = {}
    for row in rows:
        for e in row.get("evals") or ():
            s = e.get("settings") or {}
            line = (f"{','.join(e['tasks']) or 'probe'}: k={s.get('k', '?')} max_tokens={s.get('max_tokens', '?')} "
                    f"backend={s.get('backend', '?')} seeds={s.get('seeds', '?')}")
            seen[line] = seen.get(line, 0) + 1
    return list(seen.items()) if len(seen) > 1 else []


def objective_fields(objective) -> dict:
    """`objective.json` (trainer/train.py `objective_manifest`) as the row's fingerprint (the hash of the gradient
    its code computed, trainer/objective/fingerprint.py) and the code that computed it; None where it has not
    trained."""
    if not isinstance(objective, Mapping) or not isinstance(objective.get("fingerprint"), Mapping):
        return {"fingerprint": None, "code": None}
    return {"fingerprint": objective["fingerprint"].get("hash"), "code": objective.get("code")}


def split_objectives(rows: list[dict]) -> list[dict]:
    """Configurations whose cells were trained under more than one gradient: the same settings, code that computes
    another gradient (a change between launches). Each: {"config", "fingerprints": {hash: {"cells", "code"}}}."""
    groups: dict[str, dict[str, dict]] = {}
    for row in rows:
        if row.get("fingerprint"):
            seen = groups.setdefault(row.get("config") or config_label(row["axes"]), {})
            entry = seen.setdefault(row["fingerprint"], {"cells": [], "code": []})
            entry["cells"].append(row["name"])
            if row.get("code") and row["code"] not in entry["code"]:
                entry["code"].append(row["code"])
    return [{"config": config, "fingerprints": seen} for config, seen in groups.items() if len(seen) > 1]


def split_lines(splits: list[dict]) -> list[str]:
    """What status and report say of `split_objectives`: one line per configuration, each gradient with its cells
    and the code snapshots that computed it."""
    def one(h: str, e: dict) -> str:
        return f"gradient {h} in {', '.join(e['cells'])} (code {', '.join(e['code']) or '?'})"

    return [f"{s['config']}: " + "; ".join(one(h, e) for h, e in s["fingerprints"].items()) for s in splits]


def verdict_fields(verdict) -> dict:
    """`verdict.json` as the row's verdict, verdict_step and verdict_reason (None where there is none)."""
    if not isinstance(verdict, Mapping) or not isinstance(verdict.get("verdict"), str):
        return {"verdict": None, "verdict_step": None, "verdict_reason": None}
    return {"verdict": verdict["verdict"], "verdict_step": verdict.get("step"),
            "verdict_reason": str(verdict.get("reason") or "") or None}


def mean_at_k_keys(keys) -> list[str]:
    """The mean@k keys among `keys`, by task then k."""
    found = {k: MEAN_AT_K.fullmatch(k) for k in keys}
    return sorted((k for k, m in found.items() if m), key=lambda k: (found[k]["task"], int(found[k]["k"])))


def short(key: str) -> str:
    """A column header: eval/tiny/mean_at_4 -> tiny@4, train/reward_mean -> reward, kl.estimator -> estimator."""
    match = MEAN_AT_K.fullmatch(key)
    if match:
        return f"{match['task']}@{match['k']}"
    return _SHORT.get(key) or key.rsplit("/", 1)[-1].rsplit(".", 1)[-1]


def config_label(axes: Mapping) -> str:
    """The cell name without its seed: k1-reward-s0 -> k1-reward (what the seeds of one configuration share)."""
    return cell_name(tuple((k, v) for k, v in axes.items() if k != "seed")) or "all"


# Slurm's pending reasons (sacct's Reason, from the one query status makes) as a researcher reads them.
PENDING = {"Priority": "other jobs have priority", "Resources": "waiting for free resources",
           "Dependency": "waiting for the job it depends on", "JobArrayTaskLimit": "the array's parallelism limit",
           "QOSMaxJobsPerUserLimit": "the QOS's limit on jobs per user: it starts as others end",
           "AssocMaxJobsLimit": "the account's limit on running jobs", "BeginTime": "its start time is later",
           "PartitionTimeLimit": "its time limit is above the partition's: it will never start; lower time_min",
           "PartitionNodeLimit": "it asks for more nodes than the partition has: it will never start",
           "ReqNodeNotAvail": "the nodes it needs are down or reserved",
           "DependencyNeverSatisfied": "its dependency failed: it will never start"}


def pending_reason(reason: str) -> str:
    """`waiting (Slurm: Resources): waiting for free resources`; an unknown reason as Slurm says it."""
    key = reason.split(",")[0].split("(")[0].strip()
    return f"waiting (Slurm: {reason})" + (f": {PENDING[key]}" if key in PENDING else "")


def shards_done(shards) -> tuple[int, int] | None:
    """(done, total) over the running evaluation's tasks and seeds (`eval/progress.json`, eval/shard_run.py)."""
    if not isinstance(shards, dict) or not shards:
        return None
    pairs = [v for v in shards.values() if isinstance(v, list) and len(v) == 2 and all(_number(x) for x in v)]
    return (int(sum(p[0] for p in pairs)), int(sum(p[1] for p in pairs))) if pairs else None


def cell_row(record: dict, facts: dict) -> dict:
    """One cell's status row: the ledger's view (state, attempts, latest job, give-up reason) and the run
    directory's (`facts`: step, metrics, eval, verdict fields). `reason` says why the cell is not a plain
    success: the ledger's reason for giving up and the collapse verdict's reason when it is not stable."""
    train, ev = latest(record, "train"), latest(record, "eval")
    job = ev if train and train["state"] == "COMPLETED" and ev and ev["job_id"] else train
    final = record.get("final") or {}
    reasons = []
    if final.get("status") not in (None, "completed", "collapsed") or (
            final.get("status") == "collapsed" and not facts.get("verdict_reason")):
        reasons.append(final.get("reason"))
    if final.get("error"):  # a user_error: the job's message is in the reason; its fix beside it
        reasons.append(f"fix: {final['error'].get('fix')}")
    if facts.get("verdict") not in (None, "stable"):  # a collapse's own reason says more than "it collapsed"
        reasons.append(facts.get("verdict_reason"))
    if job and job["state"] == "PENDING" and job.get("reason") not in (None, "", "None"):
        reasons.append(pending_reason(job["reason"]))
    state = cell_status(record)
    if (waiting := record.get(WAITING)) and not final:  # cleared when a submission of it goes out
        reasons.append(waiting.get("why") or "waiting for a submission slot")  # never reached Slurm: not an attempt
    if state == "evaluating" and facts.get("eval_shards"):
        done, total = facts["eval_shards"]
        reasons.append(f"evaluation: {done} of {total} shards done")
    if facts.get("undelivered"):
        reasons.append(f"{facts['undelivered']} tracking event(s) not delivered to the store yet "
                       f"(orchestrate tracking flush)")
    return {"run_key": record["run_key"], "name": record["name"], "axes": record["axes"],
            "config": config_label(record["axes"]), "state": state,
            "train_attempts": len(attempts(record, "train")), "eval_attempts": len(attempts(record, "eval")),
            "job_id": job["job_id"] if job else None, "job_state": job["state"] if job else None, **facts,
            "reason": "; ".join(r for r in reasons if r) or None,
            "user_error": final.get("error"),  # {"message", "fix"} of a cell ended as user_error, else None
            # what checkpoint_retention freed once the cell was evaluated (orchestrator/watch/retention.py)
            "checkpoints_freed_bytes": (record.get("retention") or {}).get("freed_bytes")}


def clashing_names(records) -> set[str]:
    """Names that more than one cell carries: the same sweep launched with different overrides (optim.steps=4,
    then optim.steps=6) gives cells with the same axes, hence the same name, and different run_keys."""
    counts: dict[str, int] = {}
    for record in records:
        counts[record["name"]] = counts.get(record["name"], 0) + 1
    return {name for name, n in counts.items() if n > 1}


def told_apart(rows: list[dict], configs: dict[str, dict]) -> list[dict]:
    """The rows with what tells same-named cells apart: the config keys whose values differ among cells of one
    name (`configs`: run_key -> flat resolved config), under "differs" on every row, appended to the name and
    to the configuration (k1-reward-s0-steps6, k1-reward-steps6), so seeds of one launch stay together."""
    groups: dict[str, list[dict]] = {}
    for row in rows:
        groups.setdefault(row["name"], []).append(row)
    differing: set[str] = set()
    for members in groups.values():
        flats = [configs.get(r["run_key"], {}) for r in members]
        differing |= {k for k in set().union(*flats) if len({format_value(f.get(k)) for f in flats}) > 1}
    keys = sorted(differing)
    if not keys:
        return rows
    out = []
    for row in rows:
        flat = configs.get(row["run_key"], {})
        differs = {k: flat.get(k) for k in keys}
        suffix = cell_name(tuple(differs.items()))
        out.append({**row, "differs": differs, "name": f"{row['name']}-{suffix}",
                    "config": f"{row.get('config') or config_label(row['axes'])}-{suffix}"})
    return out


def flatten(data, prefix: str = "") -> dict:
    """A nested config as dotted keys (lists stay values)."""
    out = {}
    for key, value in (data.items() if isinstance(data, Mapping) else ()):
        if isinstance(value, Mapping):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def spread(values: list[float]) -> dict:
    """mean, sd (sample, n - 1; None for one value), min, max and n of `values`."""
    if not values:
        return {"mean": None, "sd": None, "min": None, "max": None, "n": 0}
    return {"mean": statistics.fmean(values), "sd": statistics.stdev(values) if len(values) > 1 else None,
            "min": min(values), "max": max(values), "n": len(values)}


def summary(rows: list[dict]) -> list[dict]:
    """One entry per configuration, in the rows' order: its seeds, each task's mean@k and the final reward over
    the seeds that have them, and the seeds counted by verdict."""
    groups: dict[str, list[dict]] = {}
    for row in rows:
        groups.setdefault(row.get("config") or config_label(row["axes"]), []).append(row)
    keys = mean_at_k_keys({k for row in rows for k in row["eval"]})
    out = []
    for label, members in groups.items():
        verdicts: dict[str, int] = {}
        for row in members:
            verdict = row.get("verdict") or NO_VERDICT
            verdicts[verdict] = verdicts.get(verdict, 0) + 1
        metrics = {k: spread([r["eval"][k] for r in members if k in r["eval"]]) for k in keys}
        metrics[REWARD] = spread([r["metrics"][REWARD] for r in members if REWARD in r["metrics"]])
        out.append({"config": label, "axes": {k: v for k, v in members[0]["axes"].items() if k != "seed"},
                    "seeds": [r["axes"].get("seed") for r in members], "cells": [r["name"] for r in members],
                    "metrics": metrics, "verdicts": verdicts})
    return out


def with_summary(rows: list[dict]) -> list[dict]:
    """The rows, each with its configuration's summary under "summary" (the JSON stays a list of rows)."""
    by_config = {s["config"]: s for s in summary(rows)}
    return [{**row, "summary": by_config[row["config"]]} for row in rows]


def best_by_mean_at_k(entries: list[dict]) -> dict[str, dict]:
    """For each mean@k key of `summary`'s entries: the configuration with the highest mean over its seeds, as
    {"config", "mean", "sd", "n"} (the first one on a tie)."""
    keys = mean_at_k_keys({k for e in entries for k in e["metrics"]})
    best = {}
    for key in keys:
        scored = [e for e in entries if e["metrics"][key]["n"]]
        if scored:
            top = max(scored, key=lambda e: e["metrics"][key]["mean"])  # max keeps the first of equals
            stats = top["metrics"][key]
            best[key] = {"config": top["config"], "mean": stats["mean"], "sd": stats["sd"], "n": stats["n"]}
    return best


def counts(rows: list[dict], field: str, missing: str = NO_VERDICT) -> dict[str, int]:
    """How many rows have each value of `field` ("verdict", "state"), `missing` for None, most common first."""
    out: dict[str, int] = {}
    for row in rows:
        value = row.get(field) or missing
        out[value] = out.get(value, 0) + 1
    return dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0])))
