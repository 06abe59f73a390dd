"""A site's own job setup, from the profile's `site:` block: shell lines before the job (`setup`: module load, a
venv's activate), variables (`env`), the interpreter or a container wrapper (`python`), extra `srun` flags
(`srun_args`), the GPU request form (`gpus: gpus_per_node` or `gres`, with `gpu_type`) and extra `#SBATCH`
options (`sbatch`: wckey, reservation, mail-type, ...). Checked at load like every Slurm value
(orchestrator/cluster/sbatch_values.py): nothing with a newline reaches the script, and every value but the
`setup` lines (shell by design) is quoted.

What every job's prologue holds, in this order (`prologue`): the site's `setup`; the code snapshot first on
sys.path; the data directory and the Hugging Face offline switches; one OpenMP thread and one srun CPU count per
CPU Slurm gave the task; the site's `env` last, so a site can override any of them (HF_HUB_OFFLINE=0 where nodes
reach the hub).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from orchestrator.cluster import sbatch_values as sv
from record.errors import raise_if

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}", re.ASCII)
SBATCH_KEY = re.compile(r"[a-z][a-z0-9-]{0,63}", re.ASCII)
SRUN_ARG = re.compile(r"--?[A-Za-z][A-Za-z0-9-]*(=[A-Za-z0-9_.,:=/@%+-]*)?", re.ASCII)
GPU_TYPE = re.compile(r"[A-Za-z0-9_.-]{1,64}", re.ASCII)
SBATCH_VALUE = set("_.,:=/@+-")
# Options the orchestrator writes itself: a profile setting them would fight the plan (arrays, chaining, logs).
OWNED = ("array", "dependency", "output", "error", "job-name", "partition", "account", "qos", "time", "nodes",
         "ntasks-per-node", "cpus-per-task", "gpus-per-node", "gres", "mem", "constraint", "signal", "open-mode",
         "requeue", "no-requeue", "kill-on-invalid-dep", "export")
GPU_FORMS = ("gpus_per_node", "gres")
KEYS = ("setup", "env", "python", "srun_args", "gpus", "gpu_type", "sbatch", "sqlite_jobs")
# Every job, whatever the site: compute nodes are offline; the site's env may say otherwise.
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


@dataclass(frozen=True)
class SiteSetup:
    setup: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    python: str | None = None  # e.g. "apptainer exec --nv /shared/comedy.sif python"; None: the launching python
    srun_args: tuple[str, ...] = ()
    gpus: str = "gpus_per_node"
    gpu_type: str | None = None
    sbatch: tuple[tuple[str, Any], ...] = field(default=())
    # Jobs may write a SQLite tracking store directly: only where every job runs on one machine's local disk
    # (the local cluster). Elsewhere SQLite under concurrent writers on a shared filesystem loses writes.
    sqlite_jobs: bool = False

    def __post_init__(self) -> None:
        raise_if(self.problems(), "site")

    def problems(self, path: str = "site") -> list[str]:
        p: list[str] = []
        for i, line in enumerate(self.setup):
            _one_line(p, f"{path}.setup[{i}]", line, "a shell line (module load cuda/12.4, source /venv/bin/activate)")
        for name, value in self.env:
            if not isinstance(name, str) or not ENV_NAME.fullmatch(name):
                p.append(f"{path}.env: {sv.show(name)} is not a variable name; use letters, digits and _")
            _one_line(p, f"{path}.env.{name}", value, "a value (written quoted: no $ expansion; use setup for that)")
        if self.python is not None:
            _one_line(p, f"{path}.python", self.python, "an interpreter or a wrapper, e.g. /shared/venv/bin/python")
            if isinstance(self.python, str) and not self.python.strip():
                p.append(f"{path}.python: empty; give an interpreter, or null for the launching python")
        for i, arg in enumerate(self.srun_args):
            if not isinstance(arg, str) or not SRUN_ARG.fullmatch(arg):
                p.append(f"{path}.srun_args[{i}]: {sv.show(arg)}; give one --flag or --flag=value per entry "
                         f"(e.g. --container-image=/shared/comedy.sqsh), no spaces or shell text")
        if self.gpus not in GPU_FORMS:
            p.append(f"{path}.gpus: {sv.show(self.gpus)}; valid: {', '.join(GPU_FORMS)}")
        if self.gpu_type is not None and (not isinstance(self.gpu_type, str) or not GPU_TYPE.fullmatch(self.gpu_type)):
            p.append(f"{path}.gpu_type: {sv.show(self.gpu_type)}; give the gres type, e.g. a100 (sinfo -o %G)")
        for key, value in self.sbatch:
            _sbatch_option(p, f"{path}.sbatch.{key}", key, value)
        if not isinstance(self.sqlite_jobs, bool):
            p.append(f"{path}.sqlite_jobs: {sv.show(self.sqlite_jobs)}; give true or false")
        return p

    @classmethod
    def from_dict(cls, raw: Any, path: str, problems: list[str]) -> SiteSetup:
        if raw is None:
            return cls()
        if not isinstance(raw, Mapping):
            problems.append(f"{path}: {sv.show(raw)}; give a mapping with {', '.join(KEYS)}")
            return cls()
        problems += [f"{path}.{k}: unknown key; valid: {', '.join(KEYS)}" for k in raw if k not in KEYS]
        values: dict[str, Any] = {}
        for key in ("setup", "srun_args"):
            if key in raw:
                items = raw[key]
                if isinstance(items, str):
                    items = [items]
                if not isinstance(items, list):
                    problems.append(f"{path}.{key}: {sv.show(items)}; give a list of strings")
                    continue
                values[key] = tuple(items)
        for key in ("env", "sbatch"):
            if key in raw and raw[key] is not None:
                if not isinstance(raw[key], Mapping):
                    problems.append(f"{path}.{key}: {sv.show(raw[key])}; give a mapping NAME: value")
                    continue
                values[key] = tuple((str(k), _scalar(v)) for k, v in raw[key].items())
        values.update({k: raw[k] for k in ("python", "gpus", "gpu_type", "sqlite_jobs") if k in raw})
        site = object.__new__(cls)  # checked below, with every problem at once
        for name, default in cls.__dataclass_fields__.items():
            object.__setattr__(site, name, values.get(name, default.default))
        found = site.problems(path)
        problems += found
        return cls() if found else site

    def to_dict(self) -> dict:
        return {"setup": list(self.setup), "env": dict(self.env), "python": self.python,
                "srun_args": list(self.srun_args), "gpus": self.gpus, "gpu_type": self.gpu_type,
                "sbatch": dict(self.sbatch), "sqlite_jobs": self.sqlite_jobs}

    # --- rendering -----------------------------------------------------------------------------------------------

    def params(self, gpus_per_node: int | None) -> dict:
        """submitit's parameters the site changes: the GPU request form, the wckey (none unless named: submitit
        writes `--wckey=submitit` by default, which sites enforcing wckeys refuse) and the extra #SBATCH options."""
        extra = dict(self.sbatch)
        out: dict[str, Any] = {"wckey": extra.pop("wckey", None), "srun_args": ["--export=ALL", *self.srun_args]}
        if gpus_per_node and self.gpus == "gres":
            out["gres"] = f"gpu:{self.gpu_type}:{gpus_per_node}" if self.gpu_type else f"gpu:{gpus_per_node}"
            out["gpus_per_node"] = None
        elif gpus_per_node and self.gpu_type:
            out["gpus_per_node"] = f"{self.gpu_type}:{gpus_per_node}"
        out["extra"] = {k: (True if v is True else str(v)) for k, v in extra.items() if v not in (False, None)}
        return out

    def command(self, default: str) -> str:
        """The interpreter submitit starts the job with: the profile's, each word quoted, else `default`."""
        return " ".join(shlex.quote(w) for w in shlex.split(self.python)) if self.python else default


def prologue(site: SiteSetup, code: str, data_dir: str | None) -> list[str]:
    """The shell lines before every job's python (see the module docstring). PYTHONPATH is the snapshot alone
    after the site's setup, so a resubmitting watcher's (or any shell's) PYTHONPATH never leaks into a job; a
    module the setup loads may set its own, kept behind the snapshot."""
    q = shlex.quote
    lines = [*site.setup, f"export PYTHONPATH={q(code)}${{PYTHONPATH:+:$PYTHONPATH}}", "export PYTHONSAFEPATH=1",
             f"export COMEDY_CODE={q(code)}"]
    if data_dir:
        lines.append(f"export COMEDY_DATA={q(data_dir)}")
    lines += [f"export {k}={v}" for k, v in OFFLINE.items()]
    # Torch starts a thread per core of the node without OMP_NUM_THREADS (two jobs on 2 loaded cores took 20-47 s
    # a step instead of ~1 s, docs/results.md); srun in Slurm 22.05-23.02 does not pass --cpus-per-task on, so each
    # rank would be pinned to one core without SRUN_CPUS_PER_TASK. (Not TQDM_DISABLE: vLLM 0.32 divides by a
    # disabled bar's elapsed time, 0, and the evaluation dies.)
    lines.append('if [ -n "${SLURM_CPUS_PER_TASK:-}" ]; then export OMP_NUM_THREADS=$SLURM_CPUS_PER_TASK '
                 'SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK; fi')
    lines += [f"export {k}={q(v)}" for k, v in site.env]
    return lines


def _scalar(value: Any) -> Any:
    return value if isinstance(value, (str, bool)) or value is None else str(value) \
        if isinstance(value, (int, float)) else value


def _one_line(p: list[str], path: str, value: Any, what: str) -> None:
    if not isinstance(value, str):
        p.append(f"{path}: {sv.show(value)}; give {what}")
    elif any(ch in value for ch in "\n\r\0") or len(value) > 4096:
        p.append(f"{path}: {sv.show(value)} has a newline, a NUL or is over 4096 characters; give one line")


def _sbatch_option(p: list[str], path: str, key: str, value: Any) -> None:
    if not SBATCH_KEY.fullmatch(key):
        p.append(f"{path}: not an sbatch option name; write it as sbatch spells it without dashes (reservation)")
    elif key in OWNED:
        p.append(f"{path}: set by the orchestrator itself; use the profile's own key for it (e.g. partition, "
                 f"time_min, gpus_per_node with site.gpus: gres)")
    if isinstance(value, bool) or value is None:  # a flag, or (null, false) no option
        return
    if not isinstance(value, str) or not value or sv.offender(value, lambda ch: ch.isalnum() and ch.isascii()
                                                                or ch in SBATCH_VALUE):
        p.append(f"{path}: {sv.show(value)}; give a value of letters, digits and {''.join(sorted(SBATCH_VALUE))} "
                 f"(or true for a flag)")
