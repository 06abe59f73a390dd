"""How a job's process ends once submitit returned (orchestrator/cluster/arrays.py `finish`): Python's exit
handlers run and the output is flushed, but nothing of the interpreter's finalisation, where a finished rank could
abort ("terminate called without an active exception", exit 6) and Slurm would mark the job FAILED."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from orchestrator.cluster.arrays import ArrayExecutor, single_command

REPO = Path(__file__).resolve().parents[2]
# An object whose destruction aborts the process, as a C++ thread destroyed at exit does: a module global, so it is
# destroyed during the interpreter's finalisation, after the exit handlers.
SCRIPT = """
import atexit, os, sys, threading, time
from orchestrator.cluster.arrays import finish

class AbortsWhenDestroyed:
    def __del__(self):
        os.abort()

held = AbortsWhenDestroyed()
atexit.register(lambda: open(sys.argv[1], "a").write("exit handler ran"))
# a thread still working when the job returns: Python waits for it before the exit handlers, and so must finish
threading.Thread(target=lambda: (time.sleep(0.5), open(sys.argv[1], "a").write("thread done; "))).start()
print("the job's last line", end="")
if sys.argv[2] == "finish":
    finish()
"""


def _run(tmp_path: Path, how: str) -> tuple[subprocess.CompletedProcess, Path]:
    marker = tmp_path / f"{how}.txt"
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(marker), how], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
    return done, marker


def test_finish_runs_the_exit_handlers_flushes_and_skips_the_finalisation_that_aborts(tmp_path):
    done, marker = _run(tmp_path, "finish")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "the job's last line"  # flushed though it ended without a newline
    assert marker.read_text() == "thread done; exit handler ran"


def test_without_it_the_same_process_aborts_at_exit(tmp_path):
    done, marker = _run(tmp_path, "plain")
    assert done.returncode == -signal.SIGABRT  # what the planted destructor does to a plain exit
    assert marker.read_text() == "thread done; exit handler ran"


def test_single_jobs_run_through_finish(tmp_path):
    command = ArrayExecutor(folder=tmp_path / "%j", python="python3")._submitit_command_str
    assert command == single_command("python3", tmp_path / "%j")
    assert command.startswith("python3 -u -m orchestrator.cluster.arrays --single ")
