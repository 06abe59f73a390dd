"""The suite's tiers, and the line between them (tests/conftest.py applies it; README "Tests" names the targets).

- `unit`: tests/unit. Pure code, the project's own processes and in-process stand-ins; no service. Under 5 minutes.
- `integration`: tests/integration. The real parts: the local Slurm cluster, DeepSpeed ranks, vLLM, MLflow servers,
  PostgreSQL, a browser. Its slow fault-matrix rows are also marked `reliability` and run under `make reliability`.
- `gpu`: tests/gpu, skipped where there is no CUDA device.

A test's tier is the directory it lives in, written on it as a marker at collection (`-m unit` selects the tier).
A unit test may not carry a marker that says it needs a service, and while it runs it may not start a Slurm job or a
service: the audit hook below refuses the process before it is forked, naming the test's way out (move it to
tests/integration). A stand-in the test wrote itself (a script under its own temporary directory: pytest's basetemp
or a `tempfile` directory) is not a service, but a program of the checkout never is one, even when the checkout
itself lives under the system's temporary directory (a fresh clone under /tmp): the closest of these directories
above the program decides.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

TIERS = ("unit", "integration", "gpu")
# Markers that say a test needs something only the integration tier brings up.
SERVICE_MARKERS = frozenset({"slurm", "slow", "fault_matrix", "reliability", "long", "two_nodes", "gpu"})
# Programs that submit a Slurm job, or are (or start) a service.
SLURM_JOBS = frozenset({"sbatch", "srun", "salloc"})
SERVICES = frozenset({
    "local-cluster", "slurmctld", "slurmd", "slurmdbd", "munged", "mariadbd", "mysqld", "mysqld_safe",
    "postgres", "pg_ctl", "pg_ctlcluster", "initdb", "chromium", "chromedriver", "gunicorn", "uvicorn",
})
# `python -m X ...` (or a console script X) with these leading arguments starts a server.
SERVER_COMMANDS = (("mlflow", "server"), ("mlflow", "ui"), ("orchestrator.cli", "tracking", "up"),
                   ("orchestrate", "tracking", "up"))


class ServiceInUnitTier(RuntimeError):
    """A unit test tried to start a Slurm job or a service."""


def tier_of(path: Path, tests_root: Path) -> str | None:
    """The tier of a test file: the first directory under tests/ when it names one, else None."""
    try:
        first = path.resolve().relative_to(tests_root.resolve()).parts[0]
    except (ValueError, IndexError):
        return None
    return first if first in TIERS else None


def misplaced_markers(tier: str | None, markers: set[str]) -> set[str]:
    """The markers a test of `tier` may not carry (only the unit tier is restricted)."""
    return markers & SERVICE_MARKERS if tier == "unit" else set()


def is_stand_in(program: str, stand_in_roots: tuple[Path, ...], checkout: Path | None = None,
                cwd: str | None = None) -> bool:
    """Whether `program` is a file a test wrote itself: it exists, and of the directories that hold it, the closest
    is one of `stand_in_roots` (the test's temporary directories), not `checkout` (whose programs are the real ones,
    wherever the checkout lives: /tmp/clone/slurm/local-cluster is under /tmp and still the real cluster)."""
    found = Path(cwd or ".", program).resolve()
    if not found.is_file():
        return False
    roots = [(root, False) for root in stand_in_roots] + ([(checkout.resolve(), True)] if checkout else [])
    holders = [(len(root.parts), is_checkout) for root, is_checkout in roots if found.is_relative_to(root)]
    return bool(holders) and not max(holders)[1]  # the closest; on a tie the checkout's


def refusal(args, stand_in_roots: tuple[Path, ...], path: str | None = None, checkout: Path | None = None,
            cwd: str | None = None) -> str | None:
    """Why a unit test may not run `args` (a Popen argument list or a command string), or None when it may.
    `stand_in_roots`: directories whose programs are the test's own stand-ins (its temporary directories);
    `checkout`: the repository, whose programs never are; `path`, `cwd`: where the process looks the program up."""
    if isinstance(args, bytes):
        args = os.fsdecode(args)
    argv = [os.fsdecode(a) if isinstance(a, bytes) else str(a) for a in (args.split() if isinstance(args, str)
                                                                          else args)]
    if not argv:
        return None
    name = os.path.basename(argv[0])
    if name in ("sh", "bash") and len(argv) > 2 and argv[1] == "-c":
        return refusal(argv[2], stand_in_roots, path, checkout, cwd)  # what the shell runs first
    if name in SLURM_JOBS | SERVICES:
        found = shutil.which(argv[0], path=path) if os.sep not in argv[0] else argv[0]
        if found and is_stand_in(found, stand_in_roots, checkout, cwd):
            return None  # a script the test wrote in its own temporary directory
        what = "submits a Slurm job" if name in SLURM_JOBS else "is or starts a service"
        return f"`{name}` {what}"
    rest = argv[1:]
    if name.startswith("python") and rest[:1] == ["-m"]:
        rest = rest[1:]
    elif name.startswith("python"):
        return None
    else:
        rest = [name, *rest]
    for command in SERVER_COMMANDS:
        if tuple(rest[: len(command)]) == command:
            return f"`{' '.join(command)}` starts a server"
    return None


class Guard:
    """An audit hook (Python's sys.audit events, fired before any fork or exec) that refuses a service to the test
    that is running while `active` is set. Installed once per process: audit hooks cannot be removed."""

    def __init__(self, stand_in_roots: tuple[Path, ...], checkout: Path | None = None):
        self.active: str | None = None  # the running unit test's node id
        self.stand_in_roots = stand_in_roots
        self.checkout = checkout
        sys.addaudithook(self)

    def __call__(self, event: str, args: tuple) -> None:
        if self.active is None or event not in ("subprocess.Popen", "os.posix_spawn", "os.exec", "os.system"):
            return
        command = args[0] if event == "os.system" else args[1]
        env = args[3] if event == "subprocess.Popen" else None
        path = (env or {}).get("PATH") if isinstance(env, dict) else None
        cwd = os.fsdecode(args[2]) if event == "subprocess.Popen" and args[2] is not None else None
        why = refusal(command, self.stand_in_roots, path=path, checkout=self.checkout, cwd=cwd)
        if why:
            raise ServiceInUnitTier(f"{self.active}: {why}, and a unit test starts no service: move it to "
                                    "tests/integration (README, 'Tests')")
