"""MlflowTracker against real MLflow: a local sqlite store, and a real `mlflow server` stopped and restarted.

One server for the module (it takes ~10 s to start on 2 cores); the outage test stops it and brings it back on
the same store and port, as a crashed tracking server that an admin restarts would come back.
"""

from __future__ import annotations

import subprocess
import time

import pytest

from record.tracking.tracker import MlflowTracker
from record.tracking.ui import EXPERIMENT_KIND, EXPERIMENT_KIND_TAG, experiment_url
from tests.support.browser import chromium
from tests.support.mlflow_server import MlflowServer
from trainer.run.collapse_rules import CollapseVerdict

pytestmark = pytest.mark.slow
mlflow = pytest.importorskip("mlflow")
AXES = {"estimator": "k3", "placement": "reward", "beta": 0.1, "seed": 0, "model": "tiny"}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = MlflowServer(tmp_path_factory.mktemp("mlflow-server"))
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture(autouse=True)
def fail_fast(monkeypatch):
    # One attempt per request: a refused connection fails at once instead of after MLflow's default backoff.
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")


def open_cell(run_dir, uri, run_key, experiment="sweep-test", **kw) -> MlflowTracker:
    tracker = MlflowTracker(run_dir, **kw)
    tracker.open_run(run_key, experiment, uri, AXES, {"objective/target": "reverse KL"},
                     parent_run_key="sweep1", sweep_id="sweep1")
    return tracker


def steps_of(client, run_id, key) -> list[int]:
    return sorted(m.step for m in client.get_metric_history(run_id, key))


def test_local_sqlite_store_opens_or_reopens_by_run_key_under_one_parent(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    kw = {"retry_after_s": 0}
    first = open_cell(tmp_path / "cellA", uri, "cellA", **kw)
    first.log_metrics({"train/loss": 1.0, "val/pass_at_1": 0.25}, step=1)
    first.log_dict({"kl": {"beta": 0.1}}, "config.json")
    first.close()
    again = open_cell(tmp_path / "cellA", uri, "cellA", **kw)  # a requeued job: a new tracker, same run_key
    other = open_cell(tmp_path / "cellB", uri, "cellB", **kw)
    assert again.run_id == first.run_id != other.run_id

    client = mlflow.MlflowClient(uri)
    run = client.get_run(first.run_id)
    assert run.info.status == "RUNNING"  # reopened
    assert {k: run.data.params[k] for k in AXES} == {k: str(v) for k, v in AXES.items()}
    assert run.data.metrics == {"train/loss": 1.0, "val/pass_at_1": 0.25}
    assert run.data.tags["run_key"] == "cellA" and run.data.tags["sweep_id"] == "sweep1"
    parent_id = run.data.tags["mlflow.parentRunId"]
    assert client.get_run(other.run_id).data.tags["mlflow.parentRunId"] == parent_id
    assert client.get_run(parent_id).data.tags["run_key"] == "sweep1"
    children = client.search_runs([first.experiment_id], f"tags.mlflow.parentRunId = '{parent_id}'")
    assert sorted(r.data.tags["run_key"] for r in children) == ["cellA", "cellB"]
    assert len(client.search_runs([first.experiment_id])) == 3  # parent + 2 cells, no duplicates
    assert [a.path for a in client.list_artifacts(first.run_id)] == ["config.json"]
    experiment = client.get_experiment(first.experiment_id)
    assert experiment.tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND


def test_a_step_the_store_took_before_a_kill_is_not_sent_again_by_the_resumed_job(tmp_path):
    """The killed job's tracker sent step 3 and died before the trainer recorded it (no close, no logged_step);
    the resumed job re-trains step 3 and logs it again, then step 4: the store holds each step once."""
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    killed = open_cell(tmp_path / "cellA", uri, "cellA", retry_after_s=0)
    for step in (1, 2, 3):
        killed.log_metrics({"train/loss": float(step), "train/reward_mean": 0.5}, step=step)
    resumed = open_cell(tmp_path / "cellA", uri, "cellA", retry_after_s=0,  # a new process, the same run
                        check_first_metrics=True)  # as the trainer opens it
    resumed.log_metrics({"train/loss": 3.0, "train/reward_mean": 0.5}, step=3)
    resumed.log_metrics({"train/loss": 4.0, "train/reward_mean": 0.5}, step=4)
    client = mlflow.MlflowClient(uri)
    assert steps_of(client, resumed.run_id, "train/loss") == [1, 2, 3, 4]
    assert steps_of(client, resumed.run_id, "train/reward_mean") == [1, 2, 3, 4]


def test_server_run_is_reopened_not_duplicated_and_nested_under_the_sweep(server, tmp_path):
    a = open_cell(tmp_path / "a", server.uri, "srvA")
    b = open_cell(tmp_path / "b", server.uri, "srvB")
    assert open_cell(tmp_path / "a2", server.uri, "srvA").run_id == a.run_id
    client = mlflow.MlflowClient(server.uri)
    parent = client.get_run(a.run_id).data.tags["mlflow.parentRunId"]
    assert client.get_run(b.run_id).data.tags["mlflow.parentRunId"] == parent
    assert len(client.search_runs([a.experiment_id], "tags.run_key = 'sweep1'")) == 1
    assert client.get_run(a.run_id).data.params["estimator"] == "k3"
    assert client.get_experiment(a.experiment_id).tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND
    assert experiment_url(server.uri, a.experiment_id).endswith("/runs?workflowType=machine_learning")
    a.set_tags(CollapseVerdict("collapsed", 120, "val/pass_at_1 fell to 0").tags())
    hits = client.search_runs([a.experiment_id], "tags.`collapse/verdict` = 'collapsed'")
    assert [r.info.run_id for r in hits] == [a.run_id]


def test_an_outage_loses_nothing_and_the_replay_logs_every_step_once(server, tmp_path):
    keys = ("train/loss", "val/pass_at_1")
    tracker = open_cell(tmp_path / "cell", server.uri, "outage", retry_after_s=3600)
    for step in range(5):
        tracker.log_metrics({k: step / 10 for k in keys}, step)
    server.stop()
    t0 = time.monotonic()
    for step in range(5, 15):  # no exception: they go to the buffer
        tracker.log_metrics({k: step / 10 for k in keys}, step)
    tracker.log_params({"late_param": "x"})
    tracker.set_tags({"phase": "after-outage"})
    assert time.monotonic() - t0 < 10, "an outage must not block the training loop on every call"
    assert len(tracker.buffer) == 12
    assert tracker.flush() is False  # still down: nothing lost, nothing raised
    tracker.close()  # a warning, not an exception; the status waits in the buffer too
    assert len(tracker.buffer) == 13

    server.start()
    tracker.log_metrics({k: 1.5 for k in keys}, 15)  # inside retry_after_s: buffered, not tried
    assert len(tracker.buffer) == 14
    assert tracker.flush() is True
    assert not tracker.buffer.path.exists()
    client = mlflow.MlflowClient(server.uri)
    for key in keys:
        assert steps_of(client, tracker.run_id, key) == list(range(16))
    run = client.get_run(tracker.run_id)
    assert run.data.params["late_param"] == "x" and run.data.tags["phase"] == "after-outage"

    # The job died after sending its last batch but before writing the ledger: the buffer still holds points
    # the store has. The next job's open_run replays it and asks the store first, so nothing doubles.
    tracker.buffer.append({"kind": "metrics", "points": [[k, 1.5, 15, 0] for k in keys]
                           + [["train/loss", 1.6, 16, 0]]})
    again = open_cell(tmp_path / "cell", server.uri, "outage")
    assert again.run_id == tracker.run_id and not again.buffer.path.exists()
    assert steps_of(client, tracker.run_id, "train/loss") == list(range(17))
    assert steps_of(client, tracker.run_id, "val/pass_at_1") == list(range(16))


def test_a_close_during_an_outage_is_delivered_later_and_never_kills_a_resumed_run(server, tmp_path):
    """The status a job closes with while the store is down waits in the buffer with its metrics: the same job's
    later flush delivers it; a job that reopens the run takes it as `status_before` instead of replaying it (a
    replayed KILLED would mark the resumed run dead while it trains)."""
    client = mlflow.MlflowClient(server.uri)
    first = open_cell(tmp_path / "a", server.uri, "close-a", retry_after_s=3600)
    first.log_metrics({"train/loss": 0.5}, 1)
    server.stop()
    try:
        first.log_metrics({"train/loss": 0.4}, 2)
        first.close("FAILED")  # a warning: the store is down
    finally:
        server.start()
    assert client.get_run(first.run_id).info.status == "RUNNING"  # nothing reached the store yet
    assert first.flush() is True
    assert client.get_run(first.run_id).info.status == "FAILED"
    assert steps_of(client, first.run_id, "train/loss") == [1, 2]

    preempted = open_cell(tmp_path / "b", server.uri, "close-b", retry_after_s=3600)
    server.stop()
    try:
        preempted.log_metrics({"train/loss": 0.3}, 3)
        preempted.close("KILLED")
    finally:
        server.start()
    resumed = open_cell(tmp_path / "b", server.uri, "close-b")  # the requeued job, same run dir
    assert resumed.run_id == preempted.run_id and resumed.status_before == "KILLED"
    assert client.get_run(resumed.run_id).info.status == "RUNNING"  # training again, not marked dead
    assert steps_of(client, resumed.run_id, "train/loss") == [3]
    resumed.close("FINISHED")
    assert client.get_run(resumed.run_id).info.status == "FINISHED"


def test_a_run_that_ends_during_a_short_outage_delivers_everything_itself(server, tmp_path):
    """close(wait_s): a job ending while the store restarts keeps trying, and delivers its points and status
    itself once the store is back, instead of leaving them for a later job (the trainer waits up to 2 min)."""
    import threading

    client = mlflow.MlflowClient(server.uri)
    tracker = open_cell(tmp_path / "c", server.uri, "close-wait")
    tracker.log_metrics({"train/loss": 0.5}, 1)
    server.stop()
    tracker.log_metrics({"train/loss": 0.4}, 2)
    back = threading.Timer(6.0, server.start)
    back.start()
    try:
        tracker.close("FINISHED", wait_s=120)
    finally:
        back.join()
    assert not tracker.buffer.path.exists()
    assert client.get_run(tracker.run_id).info.status == "FINISHED"
    assert steps_of(client, tracker.run_id, "train/loss") == [1, 2]


def test_a_job_that_starts_during_an_outage_opens_its_run_later(server, tmp_path):
    server.stop()
    try:
        tracker = MlflowTracker(tmp_path / "late", retry_after_s=0)
        assert tracker.open_run("late", "sweep-test", server.uri, AXES, {}, sweep_id="sweep1") is None
        tracker.log_metrics({"train/loss": 0.5}, 1)
    finally:
        server.start()
    assert tracker.flush() is True and tracker.run_id is not None
    assert steps_of(mlflow.MlflowClient(server.uri), tracker.run_id, "train/loss") == [1]


def test_the_experiment_link_lands_on_the_runs_table(server, tmp_path):
    binary = chromium()
    tracker = open_cell(tmp_path / "ui", server.uri, "uiCell", experiment="ui-landing")
    url = experiment_url(server.uri, tracker.experiment_id)
    dom = subprocess.run(
        [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=20000", "--dump-dom", url],
        capture_output=True, text=True, timeout=120).stdout
    # The runs table, with the cell nested (collapsed) under its sweep's parent row: 2 runs, 1 row shown.
    assert "runs-search-autocomplete" in dom, "the page is not the runs table"
    assert "sweep1" in dom and "<strong>2</strong> matching runs" in dom


def test_sweep_parent_is_closed_when_settled_and_reopened_by_a_resubmitted_cell(tmp_path):
    from record.tracking.sweep import close_sweep_parent
    from record.tracking.tracker import read_run_file

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    cell = open_cell(tmp_path / "cellA", uri, "cellA", retry_after_s=0)
    cell.close()
    parent = read_run_file(tmp_path / "cellA")["parent_run_id"]
    client = mlflow.MlflowClient(uri)
    assert client.get_run(parent).info.status == "RUNNING"
    # The eval job reopens the cell without a parent: the file keeps the one training found.
    MlflowTracker(tmp_path / "cellA", retry_after_s=0).open_run("cellA", "sweep-test", uri, {}, {})
    assert read_run_file(tmp_path / "cellA")["parent_run_id"] == parent
    assert "marked FAILED" in close_sweep_parent([tmp_path / "nothing-here", tmp_path / "cellA"], "FAILED")
    run = client.get_run(parent)
    assert run.info.status == "FAILED" and run.info.end_time is not None
    open_cell(tmp_path / "cellA", uri, "cellA", retry_after_s=0)  # resubmitted with --retry-failed
    assert client.get_run(parent).info.status == "RUNNING"
    assert "nothing to close" in close_sweep_parent([tmp_path / "nothing-here"], "FINISHED")


def test_a_reopening_tracker_knows_the_status_it_found(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    first = open_cell(tmp_path / "cellA", uri, "cellA", retry_after_s=0)
    assert first.status_before == "RUNNING"  # just created
    first.close("FAILED")
    again = MlflowTracker(tmp_path / "cellA", retry_after_s=0)  # the eval job
    again.open_run("cellA", "sweep-test", uri, {}, {})
    assert again.status_before == "FAILED"
    again.close(again.status_before)
    assert mlflow.MlflowClient(uri).get_run(first.run_id).info.status == "FAILED"
