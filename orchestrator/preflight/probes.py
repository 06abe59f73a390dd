"""The probe jobs of `orchestrate preflight` (issue 31): after Slurm's `--test-only` verdicts pass, one short job per
distinct resource group of the plan and one in the watcher's partition, on the real partitions, with the prologue,
interpreter, environment and code snapshot the cells get (orchestrator/cluster/: options, snapshot, executor). Each
runs orchestrator/preflight/probe_job.py on its node and writes one JSON report. Everything lives under
`<sweep dir>/preflight/<timestamp>/` (specs, reports, the code snapshot, Slurm's logs): nothing of the sweep itself.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from eval import local_data, taskfiles
from orchestrator.cluster import query
from orchestrator.cluster.executor import Options, Submitted, first_launch, submit_probe, watcher_params
from orchestrator.cluster.profile import resources_params
from orchestrator.cluster.snapshot import snapshot_code
from orchestrator.launch.plan import Plan
from orchestrator.preflight.probe_job import probe
from orchestrator.preflight.testonly import Row, watcher_flags
from orchestrator.sweep.expand import Sweep

PROBE_TIME_MIN = 5  # a probe's time limit: it imports, stats files and writes one run; seconds here


@dataclass(frozen=True)
class Probe:
    group: str  # the plan's groups it stands for ("train-0,train-1"), or "watcher"
    params: dict  # submitit's Slurm parameters: the group's resources, PROBE_TIME_MIN
    spec: dict  # what probe_job.py checks


def plan_probes(sweep: Sweep, plan: Plan, where: Path, need_bytes: int, data_dir: Path) -> list[Probe]:
    """One probe per distinct (kind, resources) of the plan's arrays, then the watcher's. `sweep`: its paths
    resolved (orchestrator/cluster/paths.py), as the cells' jobs will read them."""
    by_resources: dict[tuple, list] = {}
    for group in plan.groups:  # a baseline is an evaluation job: probed with the cells' evaluations
        kind = "eval" if group.kind == "baseline" else group.kind
        by_resources.setdefault((kind, group.resources), []).append(group)
    base = {"root": str(where.parent.parent), "need_bytes": need_bytes}
    baselines = {b.key: b.config for b in sweep.baselines}
    out = []
    for (kind, resources), groups in by_resources.items():
        label = ",".join(g.name for g in groups)
        configs = [*(sweep.cells[i].config for g in groups for i in g.cells),
                   *(baselines[k] for g in groups if g.kind == "baseline" for k in g.run_keys)]
        spec = {**base, "group": label, "kind": kind, "gpus_per_node": resources.gpus_per_node,
                "models": _distinct(c.model.name_or_path for c in configs),
                "data": _distinct(_files(c, kind, data_dir) for c in configs),
                "tracking": _distinct(c.tracking.tracking_uri or "" for c in configs)}
        out.append(Probe(label, {**resources_params(sweep.profile, resources), "time": PROBE_TIME_MIN}, spec))
    params = {**watcher_params(sweep.profile), "time": PROBE_TIME_MIN, "nodes": 1, "ntasks_per_node": 1,
              "cpus_per_task": 1}
    out.append(Probe("watcher", params, {**base, "group": "watcher", "kind": "watcher",
                                         "watcher_flags": watcher_flags(sweep.profile)}))
    return out


def _distinct(items) -> list:
    seen: dict = {}
    for item in items:
        for one in item if isinstance(item, list) else [item]:
            seen.setdefault(one, None)
    return list(seen)


def _files(config, kind: str, data_dir: Path) -> list[str]:
    """The data files a job of this kind reads: training and validation files, or the evaluation tasks' files
    (the generated sets are written in the job)."""
    if kind == "train":
        d = config.data
        return [p for p in (d.train_path, d.val_path if d.val_every > 0 else None) if p]
    out = []
    for task in config.eval.tasks:
        try:
            name = taskfiles.data_file(task)
        except (OSError, KeyError, TypeError, ValueError):
            continue
        if not local_data.is_generated(name):
            out.append(str(data_dir / name))
    return out


def submit_probes(sweep: Sweep, probes: list[Probe], where: Path, data_dir: Path) -> dict[str, Submitted]:
    """Write each spec and submit its job, as the sweep's cells would go out (first_launch: the interpreter and
    environment of an earlier launch of this sweep, else this process's)."""
    options = first_launch(where.parent.parent, Options(executor="slurm", data_dir=str(data_dir),
                                                       site=sweep.profile.site.to_dict()))
    code = snapshot_code(where)
    out: dict[str, Submitted] = {}
    try:
        for p in probes:
            slug = p.group.replace(",", "+")
            spec_file = where / f"{slug}.spec.json"
            spec_file.write_text(json.dumps({**p.spec, "report": str(where / f"{slug}.json")}, indent=1))
            out[p.group] = submit_probe(probe, str(spec_file), where / "slurm", p.params,
                                        f"{sweep.name}-preflight-{slug}", str(code), options)
    except BaseException:  # a refused sbatch, a full disk, Ctrl-C: no probe outlives the preflight that sent it
        if out:
            query.scancel([s.job_id for s in out.values()])
        raise
    return out


def report_rows(group: str, where: Path, state: str, reason: str, log: str) -> list[Row]:
    """The report's checks as rows; a probe that wrote none is one row saying why, with its log."""
    report = where / f"{group.replace(',', '+')}.json"
    if report.is_file():
        checks = json.loads(report.read_text(encoding="utf-8"))["checks"]
        return [Row(c["check"], group, c["ok"], c["words"], c["fix"]) for c in checks]
    if state == "PENDING":
        return [Row("probe job", group, False, f"never started (Slurm: {reason or 'pending'})",
                    "the partition cannot run it now: `scontrol show partition` (its State), `sinfo`; "
                    "or wait longer (--probe-timeout)")]
    return [Row("probe job", group, False, f"{state} without a report ({reason}); its log: {log}",
                "read the log: the job's prologue (site.setup) or its interpreter (site.python) fails on the node")]
