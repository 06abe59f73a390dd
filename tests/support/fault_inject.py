"""What the fault-matrix rows of tests/integration/test_fault_matrix.py read and do besides the sweep itself: a job's
log, Slurm's accounting of a job (its requeues, its elapsed time), a filled disk, a JIT build under way."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from trainer.model.build_lock import BUILD_TOOLS


def job_log(job: dict) -> str:
    return "".join(Path(job[k]).read_text(errors="replace") for k in ("stdout", "stderr")
                   if job.get(k) and Path(job[k]).exists())


def fill(path: Path, leave: int) -> Path:
    """Fill the filesystem of `path` up to `leave` free bytes with one file; returns it."""
    filler = path / "filler"
    free = shutil.disk_usage(path).free
    subprocess.run(["fallocate", "-l", str(max(free - leave, 1)), str(filler)], check=True)
    return filler


def requeues(job_id: str) -> int:
    """How many times Slurm ran `job_id` again under its own id (sacct -D: one line per run, REQUEUED before)."""
    out = subprocess.run(["sacct", "-j", job_id, "-X", "-D", "-n", "-P", "-o", "State"], capture_output=True,
                         text=True).stdout.split()
    return sum(state == "REQUEUED" for state in out)


def elapsed_s(job_id: str) -> float:
    out = subprocess.run(["sacct", "-j", job_id, "-X", "-n", "-P", "-o", "ElapsedRaw"], capture_output=True,
                         text=True).stdout.split()
    return float(out[-1]) if out else 0.0


def wait_for_the_build(lock: Path, timeout_s: float = 600.0) -> str:
    """Until a job is compiling the op: its lock there and a build tool (ninja, a compiler) working in the op's
    directory, seen in /proc (not a fixed wait after build.ninja appears)."""
    deadline, workdir = time.monotonic() + timeout_s, os.path.realpath(lock.parent)
    while not (lock.exists() and (tools := build_tools_in(workdir))):
        assert time.monotonic() < deadline, f"no build of {lock.parent.name} under way in {timeout_s}s"
        time.sleep(0.2)
    return f"{', '.join(tools)} built in {workdir}"


def build_tools_in(workdir: str) -> list[str]:
    """The build tools (trainer/model/build_lock.py's BUILD_TOOLS) working in `workdir`, as "pid (name)"."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            comm = (proc / "comm").read_text().strip()
            if proc.name.isdigit() and comm in BUILD_TOOLS and os.readlink(proc / "cwd") == workdir:
                found.append(f"{proc.name} ({comm})")
        except OSError:
            continue  # ended while we looked
    return found



# The cgroup freezer: v1's hierarchy (this machine), or a v2 (unified) one with cgroup.freeze.
FREEZERS = (Path("/sys/fs/cgroup/freezer"), Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified"))


def _freezer() -> tuple[Path, str, str, str] | None:
    """(hierarchy, control file, freeze value, thaw value) of the first freezer found."""
    for root in FREEZERS:
        if root.name == "freezer" and (root / "cgroup.procs").exists():
            return root, "freezer.state", "FROZEN", "THAWED"
        if (root / "cgroup.subtree_control").exists() and (root / "cgroup.procs").exists():
            return root, "cgroup.freeze", "1", "0"
    return None


@contextlib.contextmanager
def hung(pids: list[int]):
    """The processes frozen by the cgroup freezer: a hung job, which no signal wakes (SIGSTOP does not do: Slurm's
    SIGCONT at the time limit resumes it, with the warning signal pending). Signals stay pending until the group
    is thawed, always on leaving (frozen past Slurm's UnkillableStepTimeout, 60 s, the node would be drained);
    under cgroup v2 a SIGKILL ends a frozen process at once."""
    found = _freezer()
    if found is None:
        pytest.skip(f"no cgroup freezer under {', '.join(map(str, FREEZERS))}: cannot hang a job")
    root, control, frozen, thawed = found
    group = root / f"comedy-fault-{uuid.uuid4().hex[:8]}"
    group.mkdir()
    try:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, OSError):
                (group / "cgroup.procs").write_text(str(pid))
        (group / control).write_text(frozen)
        while not _is_frozen(group, control):
            time.sleep(0.05)
        yield group
    finally:
        (group / control).write_text(thawed)
        deadline = time.monotonic() + 30
        while (group / "cgroup.procs").read_text().strip() and time.monotonic() < deadline:
            time.sleep(0.1)  # the thawed processes die of their pending SIGKILL
        with contextlib.suppress(OSError):
            group.rmdir()


def _is_frozen(group: Path, control: str) -> bool:
    if control == "freezer.state":
        return (group / control).read_text().strip() == "FROZEN"
    return "frozen 1" in (group / "cgroup.events").read_text() or not (group / "cgroup.procs").read_text().strip()


def wait_until_killed(pids: list[int], timeout_s: float = 300.0) -> None:
    """Until SIGKILL is pending in every one of `pids` still there: Slurm has sent its last signal."""
    deadline = time.monotonic() + timeout_s
    while True:
        waiting = []
        for pid in pids:
            try:
                status = Path(f"/proc/{pid}/status").read_text().splitlines()
            except OSError:
                continue
            masks = [int(line.split(":")[1], 16) for line in status if line.startswith(("SigPnd", "ShdPnd"))]
            dead = any(line.startswith("State:") and "Z" in line.split()[1] for line in status)  # cgroup v2
            if not dead and not any(m & (1 << (signal.SIGKILL - 1)) for m in masks):
                waiting.append(pid)
        if not waiting:
            return
        assert time.monotonic() < deadline, f"no SIGKILL reached {waiting} in {timeout_s}s"
        time.sleep(0.1)
