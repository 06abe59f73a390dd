"""A real `orchestrate tracking` server (PostgreSQL + mlflow server) for tests, in a directory of its own.

As root, PostgreSQL runs as Debian's `postgres` user, which cannot enter pytest's tmp_path (/tmp/pytest-of-root
is 0700): the data directory goes under a fresh /tmp directory that others may enter (0711, no listing).
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from pathlib import Path

import pytest

from orchestrator.tracking.postgres import free_port
from orchestrator.tracking.server import State, down, read_state, up


def open_tmp_dir(prefix: str) -> Path:
    path = Path(tempfile.mkdtemp(prefix=f"comedy-{prefix}-"))
    path.chmod(0o711)
    return path


class TrackingServer:
    """`up` into `root/data` with free ports; `stop()` is `down` and removes the directory."""

    def __init__(self, prefix: str, workers: int = 2):
        self.root = open_tmp_dir(prefix)
        self.data_dir = self.root / "data"
        self.port, self.workers = free_port(), workers
        self.state: State | None = None

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> State:
        self.state = up(self.data_dir, port=self.port, workers=self.workers, say=lambda _: None)
        return self.state

    def stop(self, remove: bool = True) -> None:
        down(self.data_dir, say=lambda _: None)
        if remove:
            shutil.rmtree(self.root, ignore_errors=True)


def server_fixture(prefix: str, workers: int = 2, scope: str = "module"):
    """A pytest fixture that brings a TrackingServer up for the tests of a module and down after them:
    `server = server_fixture("faults")` at a test module's top level."""

    @pytest.fixture(scope=scope)
    def server():
        srv = TrackingServer(prefix, workers=workers)
        srv.start()
        yield srv
        srv.stop()

    return server


def kill_mlflow(data_dir: Path) -> None:
    """SIGKILL the server's mlflow process group, as a crash (PostgreSQL stays up)."""
    pid = read_state(data_dir).mlflow_pid
    os.killpg(pid, signal.SIGKILL)
    os.waitpid(pid, 0)  # our child (the fixture started it): no zombie that looks alive
