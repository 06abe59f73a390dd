"""Stale JIT build locks taken over, so that a job killed mid-build never stalls the jobs after it.

DeepSpeed builds its ops on first use (on CPU `deepspeed_shm_comm`, and the CPU Adam op where it is used) through
torch.utils.cpp_extension, which lets one process build at a time with a `FileBaton`: `<TORCH_EXTENSIONS_DIR>/<op>/
lock`, created with O_EXCL, empty, removed when the build ends. A builder killed mid-build (SIGKILL, preemption, a
node lost) never removes it, and every later load of that op spins in `FileBaton.wait` for as long as the file
exists: for ever, and silently. On a cluster that directory sits on a shared home, so one dead first job stalls a
whole sweep.

The lock is empty (no pid, no host), so "no live builder holds it" is judged from what can be seen:
- on this host, a process that has the lock open (FileBaton keeps the descriptor of the lock it holds until it
  releases it) or a build tool (ninja, the compiler) working in the op's directory is a live builder: the lock is
  kept, however old;
- from any host (a shared filesystem), the only sign of a builder's life is activity: the build writes into the
  op's directory only as each compile step ends, so a lock whose directory has not changed for `stale_s` is
  stale. The bound must exceed the longest build with margin: measured on the 2-core CI machine under load, the
  whole `deepspeed_shm_comm` build took 59 s (28 s idle) and CPU Adam's 120 s, each one silent compile; CUDA ops
  take minutes. The default, 15 minutes, is well above; `COMEDY_BUILD_LOCK_STALE_S` sets it (tests use seconds).
  Too low a bound costs two builds racing in one directory; too high, one wait of that length after a dead build.
- ages are read on the filesystem's clock (the mtime of a probe file written beside the locks), so two hosts'
  clocks disagreeing does not shorten or lengthen them.

A fresh lock is waited on here (`clear`), never handed to torch, whose wait has no end. And since jobs that start
together all pass that check before one of them takes the lock, `Sentinel` keeps applying the rule while the job
runs: a job left waiting inside torch on a builder that died is released once the lock goes stale; it then fails
to load the op that was never built, and the watcher resubmits it (a first failure), instead of a job held until
its time limit.
"""

from __future__ import annotations

import math
import os
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from record.errors import UserError

STALE_ENV = "COMEDY_BUILD_LOCK_STALE_S"
DEFAULT_STALE_S = 900.0
# What torch's JIT build runs in the op's directory (ninja's cwd, inherited by the compilers it starts).
BUILD_TOOLS = frozenset({"ninja", "c++", "g++", "gcc", "cc", "cc1plus", "cc1", "as", "ld", "collect2", "nvcc",
                         "cicc", "ptxas", "fatbinary", "nvlink", "clang", "clang++", "hipcc"})


@dataclass(frozen=True)
class Lock:
    """One build lock as seen now: `age_s` since the last activity in its op's directory (the filesystem's clock);
    `holder`, a live builder on this host, looked for only once the lock is old enough to be taken over."""

    path: Path
    age_s: float
    holder: str | None = None


# --- the rule (pure) -------------------------------------------------------------------------------------------------

def stale_after_s(env: Mapping[str, str] = os.environ) -> float:
    """The bound from `COMEDY_BUILD_LOCK_STALE_S` (seconds), else the default."""
    raw = env.get(STALE_ENV, "").strip()
    if not raw:
        return DEFAULT_STALE_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise UserError(f"{STALE_ENV}={raw!r} is not a number of seconds > 0; unset it for the default "
                        f"({DEFAULT_STALE_S:.0f} s), which is well above the longest build")
    return value


def judge(lock: Lock, stale_s: float) -> tuple[bool, str]:
    """(take it over?, why). Kept while a builder on this host holds it or its directory changed within `stale_s`."""
    host = socket.gethostname()
    if lock.holder:
        return False, f"a live builder on {host} holds it ({lock.holder})"
    if lock.age_s < stale_s:
        return False, f"its directory changed {lock.age_s:.0f} s ago, within the {stale_s:.0f} s bound: a build " \
                      f"may be running on some host"
    return True, f"its directory unchanged for {lock.age_s:.0f} s (over the {stale_s:.0f} s bound, {STALE_ENV}) " \
                 f"and no process on {host} holds it or builds there: its builder died mid-build"


def line(lock: Lock, took_over: bool, why: str) -> str:
    """The job log's line for a lock taken over, or waited on."""
    verb = "took over the stale build lock" if took_over else "waiting on the build lock"
    return f"[build-lock] {verb} {lock.path} (age {lock.age_s:.0f} s): {why}"


# --- what the filesystem and this host show -------------------------------------------------------------------------

def find_locks(root: Path) -> list[Path]:
    """The build locks under an extensions directory (none when it does not exist yet)."""
    return sorted(root.glob("*/lock")) if root.is_dir() else []


def fs_now(root: Path) -> float:
    """The filesystem's current time: the mtime of a probe file it stamps (on NFS, the server's clock)."""
    try:
        fd, name = tempfile.mkstemp(dir=root, prefix=".clock-")
    except OSError:
        return time.time()  # not writable: torch could not build here either; this host's clock will do
    try:
        return os.fstat(fd).st_mtime
    finally:
        os.close(fd)
        os.unlink(name)


def last_activity(lock: Path) -> float:
    """The newest mtime of the lock, its op's directory and the files in it."""
    times = [lock.stat().st_mtime, lock.parent.stat().st_mtime]
    for entry in os.scandir(lock.parent):
        try:
            times.append(entry.stat(follow_symlinks=False).st_mtime)
        except FileNotFoundError:
            continue  # removed while we looked
    return max(times)


def local_holder(lock: Path) -> str | None:
    """A process on this host that has `lock` open, or a build tool working in its directory (paths resolved:
    /proc shows real paths, and a job's code snapshot reaches the cache through a link)."""
    target, workdir = os.path.realpath(lock), os.path.realpath(lock.parent)
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            comm = (proc / "comm").read_text().strip()
            if comm in BUILD_TOOLS and os.readlink(proc / "cwd") == workdir:
                return f"pid {proc.name} ({comm}) builds in {workdir}"
            if any(os.readlink(fd) == target for fd in (proc / "fd").iterdir()):
                return f"pid {proc.name} ({comm}) has it open"
        except OSError:
            continue  # ended while we looked, or another user's
    return None


def look(lock: Path, now: float, stale_s: float) -> Lock | None:
    """The lock as seen now (None once it is gone); /proc is read only for a lock old enough to be taken over."""
    try:
        age = max(0.0, now - last_activity(lock))
    except FileNotFoundError:
        return None
    return Lock(lock, age, local_holder(lock) if age >= stale_s else None)


def take_over(lock: Path) -> bool:
    """Remove a stale lock; False when another job took it over (or its builder finished) first."""
    try:
        lock.unlink()
    except FileNotFoundError:
        return False
    return True


# --- the check a job runs -------------------------------------------------------------------------------------------

def sweep(root: Path, stale_s: float, say: Callable[[str], None]) -> list[Lock]:
    """Take over every stale lock under `root`, saying so; returns the locks kept (a build may hold them)."""
    paths = find_locks(root)
    now = fs_now(root) if paths else 0.0
    kept = []
    for path in paths:
        lock = look(path, now, stale_s)
        if lock is None:
            continue
        stale, why = judge(lock, stale_s)
        if not stale:
            kept.append(lock)
        elif take_over(path):
            say(line(lock, True, why))
    return kept


def clear(root: Path, say: Callable[[str], None] = print, stale_s: float | None = None,
          poll_s: float | None = None) -> None:
    """Before DeepSpeed loads an op: return once no lock is left under `root`, waiting for the fresh ones to be
    released or to go stale (one line per lock waited on)."""
    stale_s = stale_after_s() if stale_s is None else stale_s
    poll_s = min(5.0, stale_s / 4) if poll_s is None else poll_s
    told: set[Path] = set()
    while kept := sweep(root, stale_s, say):
        for lock in kept:
            if lock.path not in told:
                say(line(lock, False, judge(lock, stale_s)[1]))
                told.add(lock.path)
        time.sleep(poll_s)


class Sentinel:
    """`sweep` every `poll_s` on a daemon thread while the job runs, for the locks that appear after `clear`."""

    def __init__(self, root: Path, say: Callable[[str], None] = print, stale_s: float | None = None,
                 poll_s: float | None = None):
        self.root, self.say = root, say
        self.stale_s = stale_after_s() if stale_s is None else stale_s
        self.poll_s = min(30.0, self.stale_s / 4) if poll_s is None else poll_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="build-lock-sentinel", daemon=True)

    def start(self) -> Sentinel:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                sweep(self.root, self.stale_s, self.say)
            except OSError as exc:  # a flaky shared filesystem must not end the job; the next poll tries again
                self.say(f"[build-lock] could not check {self.root}: {exc}")
