"""trainer/model/build_lock.py: a build lock no live builder holds is taken over and said so; a fresh one, or one a
process on this host holds, is kept; a missing extensions directory is fine; and a job already waiting inside
torch's FileBaton on a dead builder's lock is released (tests/integration/test_fault_matrix.py kills a real job
mid-build)."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest
from torch.utils.file_baton import FileBaton

from record.errors import UserError
from trainer.model import build_lock
from trainer.model.build_lock import Lock, Sentinel, clear, judge, line, stale_after_s, sweep


def make_lock(root: Path, op: str = "deepspeed_shm_comm", age_s: float = 0.0) -> Path:
    """A lock as torch's FileBaton leaves it (an empty file in the op's directory), its directory untouched for
    `age_s`."""
    lock = root / op / "lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    (lock.parent / "build.ninja").write_text("")
    lock.touch()
    then = time.time() - age_s
    for path in (lock, lock.parent / "build.ninja", lock.parent):
        os.utime(path, (then, then))
    return lock


# --- the rule --------------------------------------------------------------------------------------------------------

def test_a_fresh_lock_is_kept_and_an_old_one_taken_over():
    fresh, old = Lock(Path("x/lock"), age_s=30.0), Lock(Path("x/lock"), age_s=1000.0)
    assert judge(fresh, 900.0)[0] is False
    assert "within the 900 s bound" in judge(fresh, 900.0)[1]
    stale, why = judge(old, 900.0)
    assert stale and "unchanged for 1000 s" in why and "builder died mid-build" in why


def test_a_lock_held_on_this_host_is_kept_however_old():
    stale, why = judge(Lock(Path("x/lock"), age_s=10_000.0, holder="pid 7 (python) has it open"), 900.0)
    assert not stale and "pid 7 (python) has it open" in why


def test_the_log_line_names_the_lock_its_age_and_why():
    lock = Lock(Path("/cache/torch_extensions/deepspeed_shm_comm/lock"), age_s=1234.4)
    text = line(lock, True, judge(lock, 900.0)[1])
    assert text.startswith("[build-lock] took over the stale build lock /cache/torch_extensions/deepspeed_shm_comm/"
                           "lock (age 1234 s): its directory unchanged for 1234 s (over the 900 s bound")
    assert line(lock, False, "why").startswith("[build-lock] waiting on the build lock ")


def test_the_bound_comes_from_the_environment_and_a_bad_one_is_one_message():
    assert stale_after_s({}) == build_lock.DEFAULT_STALE_S
    assert stale_after_s({build_lock.STALE_ENV: "45"}) == 45.0
    for bad in ("soon", "0", "-3", "inf", "nan"):
        with pytest.raises(UserError, match=f"COMEDY_BUILD_LOCK_STALE_S='{bad}' is not a number of seconds > 0"):
            stale_after_s({build_lock.STALE_ENV: bad})


# --- on a real directory ---------------------------------------------------------------------------------------------

def test_a_missing_extensions_directory_is_fine(tmp_path):
    said = []
    clear(tmp_path / "torch_extensions", say=said.append, stale_s=60.0)
    assert said == [] and not (tmp_path / "torch_extensions").exists()


def test_an_old_lock_is_removed_and_said_a_fresh_one_kept(tmp_path):
    old = make_lock(tmp_path, "cpu_adam", age_s=120.0)
    fresh = make_lock(tmp_path, "deepspeed_shm_comm", age_s=0.0)
    said = []
    kept = sweep(tmp_path, 60.0, said.append)
    assert not old.exists() and fresh.exists()
    assert [k.path for k in kept] == [fresh]
    assert len(said) == 1 and said[0].startswith(f"[build-lock] took over the stale build lock {old} (age 12")


def test_a_lock_this_process_holds_is_kept_however_old(tmp_path):
    lock = make_lock(tmp_path, age_s=0.0)
    lock.unlink()
    baton = FileBaton(str(lock))
    assert baton.try_acquire()  # torch's own lock, its descriptor open as while it builds
    try:
        then = time.time() - 120
        os.utime(lock, (then, then))
        os.utime(lock.parent / "build.ninja", (then, then))
        os.utime(lock.parent, (then, then))
        kept = sweep(tmp_path, 60.0, print)
        assert lock.exists() and kept[0].holder == f"pid {os.getpid()} (" + \
            Path(f"/proc/{os.getpid()}/comm").read_text().strip() + ") has it open"
    finally:
        baton.release()


def test_a_build_tool_working_in_the_op_directory_holds_it(tmp_path):
    """ninja (and the compilers it starts) run in the op's directory; one left running by a builder killed outside
    Slurm still writes there, so its lock is not taken over under it."""
    lock = make_lock(tmp_path, age_s=120.0)
    ninja = tmp_path / "ninja"
    shutil.copy(shutil.which("sleep"), ninja)  # a process whose name is ninja's
    proc = subprocess.Popen([str(ninja), "30"], cwd=lock.parent)
    try:
        time.sleep(0.2)
        kept = sweep(tmp_path, 60.0, print)
        assert lock.exists() and kept[0].holder == f"pid {proc.pid} (ninja) builds in {lock.parent.resolve()}"
    finally:
        proc.kill()
        proc.wait()
    assert sweep(tmp_path, 60.0, print) == [] and not lock.exists()


def test_clear_waits_for_a_fresh_lock_to_go_stale_then_takes_it_over(tmp_path):
    lock = make_lock(tmp_path, age_s=0.0)
    said = []
    started = time.monotonic()
    clear(tmp_path, say=said.append, stale_s=1.5, poll_s=0.2)
    assert not lock.exists() and time.monotonic() - started >= 1.0
    assert said[0].startswith(f"[build-lock] waiting on the build lock {lock}")
    assert said[1].startswith(f"[build-lock] took over the stale build lock {lock}")


def test_clear_returns_when_a_live_build_releases_its_lock(tmp_path):
    lock = make_lock(tmp_path, age_s=0.0)
    threading.Timer(0.5, lock.unlink).start()  # the builder finishes
    said = []
    clear(tmp_path, say=said.append, stale_s=60.0, poll_s=0.1)
    assert len(said) == 1 and said[0].startswith("[build-lock] waiting on")


def test_the_sentinel_releases_a_job_waiting_in_torch_on_a_dead_builder(tmp_path):
    """Jobs that start together pass `clear` before one takes the lock; if that one dies, the others wait in
    FileBaton.wait, which only ends when the file goes: the sentinel removes it once stale."""
    lock = make_lock(tmp_path, age_s=0.0)
    said = []
    sentinel = Sentinel(tmp_path, say=said.append, stale_s=1.0, poll_s=0.2).start()
    try:
        waiter = threading.Thread(target=FileBaton(str(lock)).wait, daemon=True)
        waiter.start()
        waiter.join(timeout=20)
        assert not waiter.is_alive(), "FileBaton.wait still waiting on a stale lock"
    finally:
        sentinel.stop()
    assert len(said) == 1 and said[0].startswith(f"[build-lock] took over the stale build lock {lock}")
