"""The Slurm profiles (slurm/profiles/*.yaml): what one job of a cell asks for, validated once at load (CONTRIBUTING.md
rule 4), and the cross-checks of a run config against it. Every problem is collected with its key path, the bad
value and what to write instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from orchestrator.cluster import sbatch_values as sv
from orchestrator.cluster.profile_shares import KEY as SHARE_KEY
from orchestrator.cluster.profile_shares import ShareRule, parse_rules
from orchestrator.cluster.site import SiteSetup
from record.errors import ConfigError, raise_if
from record.plain import build
from trainer.config.run import RunConfig

PROFILES = Path(__file__).resolve().parents[2] / "slurm" / "profiles"
CPU_PARAMS_B = 2.0  # a model larger than this (billions of parameters) needs a profile with GPUs
# checkpoint_retention: "all" keeps every checkpoint; "final-export" frees a cell's checkpoints once its evaluation
# has succeeded, keeping the export it read (orchestrator/watch/retention.py).
RETENTION = ("all", "final-export")
SCALARS = ("partition", "account", "qos", "array_parallelism", "max_array_size", "signal_delay_s")
RESOURCE_KEYS = ("nodes", "gpus_per_node", "tasks_per_node", "cpus_per_task", "mem_gb", "time_min", "constraint")


@dataclass(frozen=True)
class SlurmResources:
    """What one array task asks for: `nodes` x `tasks_per_node` ranks, each with `cpus_per_task` CPUs."""

    nodes: int = 1
    gpus_per_node: int = 0
    tasks_per_node: int = 1
    cpus_per_task: int = 1
    mem_gb: float = 4.0  # per node
    time_min: int = 60
    constraint: str | None = None

    def __post_init__(self) -> None:
        raise_if(self.problems(), "resources")

    def problems(self, path: str = "resources") -> list[str]:
        # Every value here becomes an #SBATCH line: held to Slurm's syntax and bounds
        # (orchestrator/cluster/sbatch_values.py).
        p: list[str] = []
        for key in ("nodes", "gpus_per_node", "tasks_per_node", "cpus_per_task", "time_min"):
            sv.count(p, f"{path}.{key}", getattr(self, key), key)
        sv.memory_gb(p, f"{path}.mem_gb", self.mem_gb)
        sv.constraint(p, f"{path}.constraint", self.constraint)
        return p

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node


@dataclass(frozen=True)
class WatcherResources:
    """The sweep's watcher job (orchestrator/watch/job.py): one CPU that polls and sleeps, started by
    `orchestrate sweep`. Its own partition keeps it off the CPUs a training job waits for (on the local cluster a
    watcher holding one of the two CPUs would leave a 2-rank training pending forever); None: the training jobs'
    partition. It resubmits itself before `time_min`, so a short limit is fine (and queues faster)."""

    partition: str | None = None
    mem_gb: float = 1.0
    time_min: int = 120

    def __post_init__(self) -> None:
        raise_if(self.problems(), "watcher")

    def problems(self, path: str = "watcher") -> list[str]:
        p: list[str] = []
        sv.slurm_name(p, f"{path}.partition", self.partition, "the watcher's Slurm partition (sinfo -s lists them; "
                      "null: the training partition)", optional=True, several=True)
        sv.memory_gb(p, f"{path}.mem_gb", self.mem_gb)
        sv.count(p, f"{path}.time_min", self.time_min, "time_min")
        return p


@dataclass(frozen=True)
class SizeClass:
    """Training resources for models of at most `max_params_b` billion parameters."""

    max_params_b: float
    resources: SlurmResources


@dataclass(frozen=True)
class SlurmProfile:
    """A cluster: where jobs go (partition, account, qos), the training resources (by model size where the
    size changes them), the evaluation resources, and the array limits (`%N` throttle, MaxArraySize)."""

    name: str
    partition: str
    train: SlurmResources
    eval: SlurmResources
    account: str | None = None
    qos: str | None = None
    array_parallelism: int = 16
    max_array_size: int = 1000
    by_model_size: tuple[SizeClass, ...] = ()
    # Seconds between Slurm's warning signal and the end of a job: the trainer checkpoints at the next step
    # boundary, so it must cover one step plus one checkpoint (`--signal-delay` overrides it per submission).
    signal_delay_s: int = 90
    # Where this cluster's jobs log (`orchestrate tracking status` prints it); a sweep's tracking.tracking_uri wins.
    tracking_uri: str | None = None
    # Memory of one GPU of this cluster: what the memory plan (trainer/analysis/memory_plan.py) checks a cell against in
    # `orchestrate validate` and the dry run; null: not checked.
    gpu_mem_gb: float | None = None
    checkpoint_retention: str = "all"  # RETENTION
    watcher: WatcherResources = WatcherResources()
    # The site's own job setup: shell lines, variables, interpreter, srun flags, GPU request form, extra #SBATCH
    # options (orchestrator/cluster/site.py).
    site: SiteSetup = SiteSetup()
    # rollout.gpu_memory_utilization by model, for cells whose sweep sets none (orchestrator/cluster/profile_shares.py:
    # a sweep's explicit value wins over this map, which wins over the config default).
    rollout_shares: tuple[ShareRule, ...] = ()

    def __post_init__(self) -> None:
        raise_if(self.problems(), f"slurm profile {self.name}")

    def problems(self, path: str = "slurm") -> list[str]:
        return sv.profile_scalars({k: getattr(self, k) for k in SCALARS}, path) + _uri_problems(
            self.tracking_uri, f"{path}.tracking_uri") + _gpu_mem_problems(self.gpu_mem_gb, f"{path}.gpu_mem_gb") + (
            [] if self.checkpoint_retention in RETENTION else
            [f"{path}.checkpoint_retention: {self.checkpoint_retention!r}; valid: {', '.join(RETENTION)}"])

    def train_resources(self, params_b: float | None) -> SlurmResources:
        """The smallest size class that holds a model of `params_b` billion parameters, else the defaults."""
        if params_b is not None:
            for size in self.by_model_size:
                if params_b <= size.max_params_b:
                    return size.resources
        return self.train

    @classmethod
    def from_dict(cls, data: Any, name: str, path: str = "slurm") -> SlurmProfile:
        """Flat resource keys are the training resources; `eval:` and `by_model_size:` entries hold theirs."""
        problems: list[str] = []
        if not isinstance(data, Mapping):
            raise_if([f"{path}: {data!r} is not a mapping; see slurm/profiles/local.yaml"], f"slurm profile {name}")
        valid = (*SCALARS, "tracking_uri", "gpu_mem_gb", "checkpoint_retention", "eval", "by_model_size", "watcher",
                 "site", SHARE_KEY, *RESOURCE_KEYS)
        problems += [f"{path}.{k}: unknown key; valid: {', '.join(valid)}" for k in data if k not in valid]
        top = {k: data[k] for k in (*SCALARS, "tracking_uri", "gpu_mem_gb", "checkpoint_retention") if k in data}
        flat = sv.screen_memory({k: data[k] for k in RESOURCE_KEYS if k in data}, path, problems)
        train = build(SlurmResources, flat, path, problems)
        evals = data.get("eval")
        evals = sv.screen_memory(evals, f"{path}.eval", problems) if isinstance(evals, Mapping) else evals
        evals = build(SlurmResources, evals, f"{path}.eval", problems)
        sizes = _size_classes(data.get("by_model_size", []), train, f"{path}.by_model_size", problems)
        watcher = data.get("watcher")
        watcher = sv.screen_memory(watcher, f"{path}.watcher", problems) if isinstance(watcher, Mapping) else watcher
        watcher = build(WatcherResources, watcher, f"{path}.watcher", problems)
        site = SiteSetup.from_dict(data.get("site"), f"{path}.site", problems)
        shares = parse_rules(data.get(SHARE_KEY), f"{path}.{SHARE_KEY}", problems)
        if "partition" not in top:
            problems.append(f"{path}.partition: missing; give the Slurm partition (sinfo lists them)")
        if problems:  # the scalars' own problems too: construction, which checks them, is not reached
            raise_if(problems + sv.profile_scalars(top, path) + _uri_problems(top.get("tracking_uri"),
                                                                               f"{path}.tracking_uri")
                     + _gpu_mem_problems(top.get("gpu_mem_gb"), f"{path}.gpu_mem_gb"),
                     f"slurm profile {name}")
        try:
            return cls(name=name, train=train, eval=evals, by_model_size=sizes, watcher=watcher, site=site,
                       rollout_shares=shares, **top)
        except ConfigError as err:
            raise ConfigError([path + p[len("slurm"):] for p in err.problems], f"slurm profile {name}") from None

    def to_dict(self) -> dict:
        out = {"name": self.name, "partition": self.partition, "account": self.account, "qos": self.qos,
               "array_parallelism": self.array_parallelism, "max_array_size": self.max_array_size,
               "signal_delay_s": self.signal_delay_s, "tracking_uri": self.tracking_uri, "gpu_mem_gb": self.gpu_mem_gb,
               "checkpoint_retention": self.checkpoint_retention}
        out.update(_resources_dict(self.train))
        out["eval"] = _resources_dict(self.eval)
        out["watcher"] = {k: getattr(self.watcher, k) for k in ("partition", "mem_gb", "time_min")}
        out["by_model_size"] = [{"max_params_b": s.max_params_b, **_resources_dict(s.resources)}
                                for s in self.by_model_size]
        out["site"] = self.site.to_dict()
        out[SHARE_KEY] = [r.to_dict() for r in self.rollout_shares]
        return out


def _gpu_mem_problems(value: Any, path: str) -> list[str]:
    ok = value is None or isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < 10_000
    return [] if ok else [f"{path}: {value!r}; give one GPU's memory in GB (80 for an A100 80GB), or null"]


def _uri_problems(uri: Any, path: str) -> list[str]:
    if uri is None or isinstance(uri, str) and "://" in uri and " " not in uri:
        return []
    return [f"{path}: {uri!r}; give a tracking URI such as http://login1:5000 (`orchestrate tracking status` "
            f"prints it), or null for the jobs' MLFLOW_TRACKING_URI"]


def _resources_dict(res: SlurmResources) -> dict:
    return {k: getattr(res, k) for k in RESOURCE_KEYS}


def _size_classes(raw: Any, train: SlurmResources | None, path: str, problems: list[str]) -> tuple:
    if not isinstance(raw, list):
        problems.append(f"{path}: {raw!r}; give a list of {{max_params_b: N, <resource keys>}}")
        return ()
    sizes = []
    for i, entry in enumerate(raw):
        where = f"{path}[{i}]"
        if not isinstance(entry, Mapping) or "max_params_b" not in entry:
            problems.append(f"{where}: {entry!r}; give a mapping with max_params_b and resource keys")
            continue
        limit = entry["max_params_b"]
        if not isinstance(limit, (int, float)) or isinstance(limit, bool) or not 0 < limit <= 1e6:
            problems.append(f"{where}.max_params_b: {limit!r}; give a number in (0, 1e6] (billions of parameters)")
            continue
        overrides = sv.screen_memory({k: v for k, v in entry.items() if k != "max_params_b"}, where, problems)
        base = _resources_dict(train) if train is not None else {}
        res = build(SlurmResources, {**base, **overrides}, where, problems)
        if res is not None:
            sizes.append(SizeClass(float(limit), res))
    limits = [s.max_params_b for s in sizes]
    if len(set(limits)) != len(limits):
        problems.append(f"{path}: max_params_b values {limits} repeat; give each size class once")
    return tuple(sorted(sizes, key=lambda s: s.max_params_b))


# --- loading a profile and checking a run against it -----------------------------------------------------------

def load_profile(name: str, overrides: Mapping, problems: list[str]) -> SlurmProfile | None:
    """`slurm/profiles/<name>.yaml` (or a .yaml path) with the sweep's overrides merged in; None (and every
    problem appended) when it cannot be used."""
    path = Path(name) if name.endswith((".yaml", ".yml")) else PROFILES / f"{name}.yaml"
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        known = ", ".join(sorted(p.stem for p in PROFILES.glob("*.yaml")))
        problems.append(f"sweep.slurm.profile: {name!r} not found ({path}); valid: {known}, or a .yaml path")
        return None
    except yaml.YAMLError as err:
        problems.append(f"sweep.slurm.profile: {path}: YAML syntax error: {str(err).splitlines()[0]}")
        return None
    except ValueError as err:  # a value YAML's own constructors refuse, e.g. an integer of 4300+ digits
        problems.append(f"sweep.slurm.profile: {path} cannot be read: {str(err)[:200]}; fix the value in the file")
        return None
    if isinstance(raw, Mapping):
        raw = _merge(raw, overrides)
    where = f"slurm profile {Path(name).stem}"
    try:
        return SlurmProfile.from_dict(raw, Path(name).stem, path=where)
    except ConfigError as err:
        problems.extend(sv.blame_overrides(err.problems, where, overrides, "sweep.slurm.overrides"))
        return None


def _merge(base: Mapping, over: Mapping) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, Mapping) and isinstance(out.get(k), Mapping) else v
    return out


def resource_problems(config: RunConfig, res: SlurmResources, profile: str) -> list[str]:
    """Cross-checks of a run config against the resources its profile gives it."""
    p = []
    # vLLM on a profile without GPUs runs its CPU build (the tiny model in CI); a large model there is refused below.
    if config.rollout.engine == "vllm" and res.gpus_per_node == 0 and config.rollout.tensor_parallel > 1:
        p.append(f"rollout.tensor_parallel: {config.rollout.tensor_parallel} on profile {profile!r}, which has no "
                 f"GPUs; set it to 1 or use a GPU profile (sweep.slurm.profile=a100)")
    elif config.rollout.engine == "vllm" and 0 < res.gpus_per_node < config.rollout.tensor_parallel:
        p.append(f"rollout.tensor_parallel: {config.rollout.tensor_parallel} > {res.gpus_per_node} GPUs per node "
                 f"on profile {profile!r}; lower it or ask for more GPUs")
    size = config.model.params_b
    if size is not None and size > CPU_PARAMS_B and res.gpus == 0:
        p.append(f"model.name_or_path: {config.model.name_or_path} ({size:g}B parameters) on profile "
                 f"{profile!r}, which has no GPUs; use a GPU profile (sweep.slurm.profile=a100) or model=tiny")
    return p


def resources_params(profile: SlurmProfile, res: SlurmResources) -> dict:
    """submitit's Slurm parameters for one job: one task per GPU (tasks_per_node), CPUs per task, memory per
    node; no --gpus-per-node=0 on clusters without GPUs; the GPUs as `--gres` where the site asks for that form."""
    params = {"partition": profile.partition, "account": profile.account, "qos": profile.qos, "time": res.time_min,
              "nodes": res.nodes, "ntasks_per_node": res.tasks_per_node, "cpus_per_task": res.cpus_per_task,
              "gpus_per_node": res.gpus_per_node or None, "mem": mem_param(res.mem_gb), "constraint": res.constraint}
    site = profile.site.params(res.gpus_per_node)
    params.update({k: site[k] for k in ("gpus_per_node", "gres") if k in site})
    return {k: v for k, v in params.items() if v is not None}


def mem_param(gb: float) -> str:
    return f"{int(gb)}G" if float(gb).is_integer() else f"{int(gb * 1024)}M"
