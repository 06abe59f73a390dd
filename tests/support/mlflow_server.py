"""A real `mlflow server` for integration tests: a store on disk, a free port on 127.0.0.1, stopped with every
worker it spawned."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from orchestrator.tracking.postgres import free_port


class MlflowServer:
    """`mlflow server` on 127.0.0.1 in its own process group, so stop() ends it and every worker it spawned."""

    def __init__(self, root: Path, backend_uri: str | None = None):
        self.root = root
        self.backend_uri = backend_uri or f"sqlite:///{root}/mlflow.db"
        self.port = free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = 120) -> None:
        # The job runner's extra processes race the web worker on a fresh sqlite schema and eat the 2 cores.
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        cmd = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", self.backend_uri,
               "--artifacts-destination", str(self.root / "artifacts"), "--host", "127.0.0.1",
               "--port", str(self.port), "--workers", "1"]
        with open(self.root / "server.log", "a") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                urllib.request.urlopen(f"{self.uri}/health", timeout=2)
                return
            except OSError:
                time.sleep(0.3)
        self.stop()
        pytest.fail(f"mlflow server did not come up:\n{(self.root / 'server.log').read_text()[-3000:]}")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
