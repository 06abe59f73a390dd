"""`orchestrate tracking up|down|status` for real: Debian's PostgreSQL and `mlflow server`, through the CLI.

Each server start takes ~10-20 s on 2 cores, so one test walks the whole life of a server (up, up again, log,
down, up on the same data) and the auth test starts one more.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from base64 import b64encode

import pytest

from orchestrator.tracking.postgres import free_port
from orchestrator.tracking.store import problems
from tests.support.tracking_server import open_tmp_dir

pytestmark = pytest.mark.slow
mlflow = pytest.importorskip("mlflow")
ORCHESTRATE = [sys.executable, "-m", "orchestrator.cli"]


def orchestrate(*args: str, check: bool = False) -> subprocess.CompletedProcess:
    done = subprocess.run([*ORCHESTRATE, "tracking", *args], capture_output=True, text=True, timeout=300)
    if check and done.returncode:
        pytest.fail(f"orchestrate tracking {' '.join(args)} -> {done.returncode}\n{done.stdout}\n{done.stderr}")
    return done


@pytest.fixture
def data_root():
    root = open_tmp_dir("tracking-cli")
    yield root
    for data in root.iterdir():
        if (data / "tracking.json").exists():
            orchestrate("down", "--data-dir", str(data))
    shutil.rmtree(root, ignore_errors=True)


def test_up_is_idempotent_status_names_the_uri_and_data_survives_down_and_up(data_root, tmp_path):
    from record.tracking.tracker import MlflowTracker

    data, port = data_root / "server", free_port()
    first = orchestrate("up", "--data-dir", str(data), "--port", str(port), "--workers", "1", check=True)
    uri = f"http://127.0.0.1:{port}"
    assert f"URI for jobs: {uri}" in first.stdout and "warning" not in first.stdout
    again = orchestrate("up", "--data-dir", str(data), check=True)  # safe twice: nothing new started
    assert "postgresql: already running" in again.stdout and "mlflow server: already running" in again.stdout
    assert orchestrate("status", "--data-dir", str(data), "--uri", check=True).stdout.strip() == uri
    moved = orchestrate("up", "--data-dir", str(data), "--port", str(free_port()))
    assert moved.returncode == 2 and "to change --port" in moved.stderr and "tracking down" in moved.stderr
    state = json.loads((data / "tracking.json").read_text())
    assert state["host"] == "127.0.0.1" and state["port"] == port
    assert oct((data / "tracking.json").stat().st_mode & 0o777) == "0o600"

    tracker = MlflowTracker(tmp_path / "cell", retry_after_s=0)  # the jobs' own tracker
    tracker.open_run("cellA", "server-test", uri, {"kl": {"beta": 0.1}}, {}, parent_run_key="sweep1", sweep_id="s1")
    tracker.log_metrics({"train/loss": 1.0}, step=1)
    tracker.log_dict({"a": 1}, "config.json")
    tracker.close()
    stored = list((data / "artifacts").rglob("config.json"))
    assert len(stored) == 1, "the artifact goes to the server's artifact root"
    # the backend store is PostgreSQL, not a SQLite file somewhere
    backend = orchestrate("status", "--data-dir", str(data), "--json").stdout
    assert json.loads(backend)["backend"].startswith("postgresql+psycopg2://mlflow@127.0.0.1:")
    assert not list(data.rglob("*.db"))

    assert problems({uri: "tracking.tracking_uri"}) == []  # what `orchestrate sweep` checks before submitting
    assert "mlflow server: stopped" in orchestrate("down", "--data-dir", str(data), check=True).stdout
    assert "is unreachable" in problems({uri: "tracking.tracking_uri"})[0]
    stopped = orchestrate("status", "--data-dir", str(data))
    assert stopped.returncode == 1 and "NOT up" in stopped.stdout
    assert "not running" in orchestrate("down", "--data-dir", str(data), check=True).stdout  # safe twice
    orchestrate("up", "--data-dir", str(data), check=True)
    client = mlflow.MlflowClient(uri)
    assert [m.step for m in client.get_metric_history(tracker.run_id, "train/loss")] == [1]
    assert client.get_run(tracker.run_id).info.status == "FINISHED"


def test_another_address_asks_for_auth_and_auth_refuses_anonymous_requests(data_root, monkeypatch):
    data, port = data_root / "exposed", free_port()
    done = orchestrate("up", "--data-dir", str(data), "--host", "0.0.0.0", "--port", str(port), "--auth",
                       "--workers", "1", check=True)
    assert "basic-auth" in done.stdout and "MLFLOW_TRACKING_PASSWORD" in done.stdout
    assert f":{port}" in done.stdout and f"URI for jobs: http://127.0.0.1:{port}" not in done.stdout  # a name
    url = f"http://127.0.0.1:{port}/api/2.0/mlflow/experiments/search?max_results=1"
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(url, timeout=10)
    assert refused.value.code == 401
    password = json.loads((data / "tracking.json").read_text())["admin_password"]
    token = b64encode(f"admin:{password}".encode()).decode()
    request = urllib.request.Request(url, headers={"Authorization": f"Basic {token}"})
    assert urllib.request.urlopen(request, timeout=10).status == 200
    # the jobs' way in: MLflow's client reads the credentials from the environment
    env = {**os.environ, "MLFLOW_TRACKING_USERNAME": "admin", "MLFLOW_TRACKING_PASSWORD": password}
    probe = subprocess.run([sys.executable, "-c", f"import mlflow; print(mlflow.MlflowClient("
                            f"'http://127.0.0.1:{port}').create_experiment('authed'))"],
                           env=env, capture_output=True, text=True, timeout=120)
    assert probe.returncode == 0, probe.stderr[-2000:]
    # `orchestrate sweep` checks the same before it submits (orchestrator/tracking/store.py)
    for name in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    refused = problems({f"http://127.0.0.1:{port}": "tracking.tracking_uri"})
    assert len(refused) == 1 and "export MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD" in refused[0]
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "admin")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", password)
    assert problems({f"http://127.0.0.1:{port}": "tracking.tracking_uri"}) == []


def test_a_taken_port_is_one_message_and_nothing_is_made(data_root):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = orchestrate("up", "--data-dir", str(data_root / "x"), "--port", str(port))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.startswith(f"error: port {port} on 127.0.0.1 is taken") and "--port" in done.stderr
    assert not (data_root / "x").exists()


def test_a_data_dir_owned_by_someone_else_is_one_message(data_root):
    if os.geteuid() != 0:
        pytest.skip("needs root to give a directory to another user")
    theirs = data_root / "theirs"
    theirs.mkdir()
    os.chown(theirs, 65534, 65534)  # nobody
    done = orchestrate("up", "--data-dir", str(theirs), "--port", str(free_port()))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"--data-dir {theirs} belongs to" in done.stderr and "not to you" in done.stderr
    assert list(theirs.iterdir()) == []


def test_every_tracking_command_has_help():
    for action in ("up", "down", "status"):
        done = subprocess.run([*ORCHESTRATE, "tracking", action, "--help"], capture_output=True, text=True)
        assert done.returncode == 0 and "--data-dir" in done.stdout and "examples:" in done.stdout
