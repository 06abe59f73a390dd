"""Tracking logic that needs no MLflow: key checks, the offline buffer and its ledger, NullTracker, UI links.

The real store (server up, down and back) is tests/integration/test_mlflow_tracking.py.
"""

from __future__ import annotations

import inspect
import json

import pytest
import requests

from record.tracking.buffer import OfflineBuffer, is_transient
from record.tracking.key_rules import TrackingKeyError, check_keys, flatten_params, metric_points
from record.tracking.null import NullTracker, Tracker
from record.tracking.tracker import MlflowTracker
from record.tracking.ui import experiment_url
from trainer.run.collapse_rules import CollapseVerdict


def test_an_at_sign_is_refused_naming_the_key_and_the_fix():
    with pytest.raises(TrackingKeyError) as err:
        check_keys(["val/pass_at_1", "val/pass@1", "eval/math500/mean@32"], "metric")
    assert err.value.problems == [
        "metric key 'val/pass@1' contains '@', which MLflow refuses; write 'val/pass_at_1' (use '_at_')",
        "metric key 'eval/math500/mean@32' contains '@', which MLflow refuses; write "
        "'eval/math500/mean_at_32' (use '_at_')",
    ]


@pytest.mark.parametrize("key", ["", "a//b", "/abs", "a/", "a/../b", "x" * 251, "tab\there", "kl:k1?"])
def test_keys_mlflow_would_refuse_are_refused_before_anything_is_sent(key):
    with pytest.raises(TrackingKeyError):
        check_keys([key], "param")


def test_house_keys_pass():
    check_keys(["train/kl_k1", "eval/math500/mean_at_32", "axis/beta", "collapse/verdict", "mlflow.parentRunId",
                "kl.beta", "perf/step_time_s", "with space-and.dot"], "metric")


def test_metric_points_refuse_non_numbers_and_non_integer_steps():
    assert metric_points({"train/loss": 1}, 3, timestamp_ms=7) == [["train/loss", 1.0, 3, 7]]
    with pytest.raises(TrackingKeyError, match="'train/loss': value 'x' is not a number"):
        metric_points({"train/loss": "x"}, 3)
    with pytest.raises(TrackingKeyError, match="step"):
        metric_points({"train/loss": 1.0}, 3.0)


def test_flatten_params_dots_nested_keys_and_stringifies():
    assert flatten_params({"kl": {"beta": 0.1, "estimator": "k3"}, "seed": 0, "x": None}) == {
        "kl.beta": "0.1", "kl.estimator": "k3", "seed": "0", "x": "None"}


def test_null_tracker_records_what_a_run_would_hold():
    t = NullTracker()
    run_id = t.open_run("abc123", "exp", "sqlite:///x.db", {"kl": {"beta": 0.1}}, {"model": "tiny"},
                        parent_run_key="sweep1", sweep_id="sweep1")
    assert run_id == t.run_id == "null-abc123"
    assert t.tags == {"model": "tiny", "run_key": "abc123", "sweep_id": "sweep1"}
    t.log_metrics({"train/loss": 0.5, "val/pass_at_1": 0.25}, step=10)
    t.log_dict({"a": 1}, "config.json")
    t.log_params({"kl": {"beta": 0.1}})  # the same value again is fine, as in MLflow
    assert t.metrics == [("train/loss", 0.5, 10), ("val/pass_at_1", 0.25, 10)]
    assert t.params == {"kl.beta": "0.1"} and t.dicts == {"config.json": {"a": 1}}
    t.close("FAILED")
    assert t.status == "FAILED"


def test_null_tracker_refuses_what_mlflow_would_refuse():
    t = NullTracker()
    t.open_run("abc123", "exp", "", {"seed": 0}, {})
    with pytest.raises(TrackingKeyError, match="val/pass_at_1"):
        t.log_metrics({"val/pass@1": 0.5}, step=1)
    assert t.metrics == []
    with pytest.raises(ValueError, match="params cannot change"):
        t.log_params({"seed": 1})
    with pytest.raises(ValueError, match="run_key"):
        t.open_run("a'b", "exp", "", {}, {})
    with pytest.raises(ValueError, match="valid: FINISHED, FAILED, KILLED"):
        t.close("DONE")


def test_both_trackers_have_the_interface_the_trainer_calls():
    methods = [(n, f) for n, f in inspect.getmembers(Tracker, inspect.isfunction) if not n.startswith("_")]
    assert {n for n, _ in methods} >= {"open_run", "log_metrics", "log_dict", "flush", "close"}
    for name, proto in methods:
        want = list(inspect.signature(proto).parameters)
        for cls in (NullTracker, MlflowTracker):
            got = list(inspect.signature(getattr(cls, name)).parameters)
            assert got[: len(want)] == want, (cls.__name__, name, got)


def test_collapse_tags_match_the_verdicts_own_and_land_on_the_run():
    verdict = CollapseVerdict("collapsed", 120, "val/pass_at_1 fell to 0")
    assert CollapseVerdict.from_dict(verdict.to_dict()).tags() == verdict.tags() == {
        "collapse/verdict": "collapsed", "collapse/step": "120", "collapse/reason": "val/pass_at_1 fell to 0"}
    assert CollapseVerdict().tags()["collapse/step"] == ""
    t = NullTracker()
    t.set_tags(verdict.tags())
    assert t.tags["collapse/verdict"] == "collapsed"


def test_experiment_url_opens_the_runs_table_of_a_server_or_of_the_local_ui_for_a_local_store():
    assert experiment_url("http://127.0.0.1:5000/", "7") == \
        "http://127.0.0.1:5000/#/experiments/7/runs?workflowType=machine_learning"
    # A SQLite store has no UI of its own: the link is the one `make mlflow-ui` serves.
    assert experiment_url("sqlite:///mlflow.db", "7") == \
        "http://127.0.0.1:5000/#/experiments/7/runs?workflowType=machine_learning"


def _wrapped_like_mlflow(cause: BaseException) -> Exception:
    # rest_utils.http_request: `except Exception as e: raise MlflowException(f"... {e}")`, no `from`.
    try:
        try:
            raise cause
        except Exception as e:
            raise RuntimeError(f"API request failed with exception {e}")  # noqa: B904
    except RuntimeError as wrapped:
        return wrapped


def test_unreachable_store_errors_are_transient_and_bad_requests_are_not():
    assert is_transient(_wrapped_like_mlflow(requests.exceptions.ConnectionError("refused")))
    assert is_transient(_wrapped_like_mlflow(requests.exceptions.ReadTimeout("slow")))
    assert is_transient(ConnectionRefusedError())
    assert not is_transient(_wrapped_like_mlflow(ValueError("INVALID_PARAMETER_VALUE")))
    assert not is_transient(TrackingKeyError(["x"]))


def metrics_event(step, **values):
    return {"kind": "metrics", "points": [[k, v, step, 1000 + step] for k, v in values.items()]}


def test_buffer_survives_a_new_process_and_replays_in_order_merging_metrics(tmp_path):
    first = OfflineBuffer(tmp_path)
    first.append(metrics_event(1, loss=1.0))
    first.append(metrics_event(2, loss=0.5))
    first.append({"kind": "tags", "values": {"a": "1"}})
    first.append(metrics_event(3, loss=0.25))
    sent = []
    assert OfflineBuffer(tmp_path).replay(sent.append) == 3
    assert sent == [{"kind": "metrics", "points": [["loss", 1.0, 1, 1001], ["loss", 0.5, 2, 1002]]},
                    {"kind": "tags", "values": {"a": "1"}},
                    {"kind": "metrics", "points": [["loss", 0.25, 3, 1003]]}]
    assert not first.path.exists() and not first.ledger_path.exists()


def test_a_replay_cut_short_never_sends_a_point_twice(tmp_path):
    buf = OfflineBuffer(tmp_path)
    buf.append(metrics_event(1, loss=1.0))
    buf.append({"kind": "params", "values": {"seed": "0"}})
    buf.append(metrics_event(2, loss=0.5))
    sent = []

    def down_after_first(event):
        if sent:
            raise requests.exceptions.ConnectionError("server went away")
        sent.append(event)

    with pytest.raises(requests.exceptions.ConnectionError):
        buf.replay(down_after_first)
    assert len(buf) == 3  # nothing dropped
    again = []
    buf.replay(again.append)
    assert again == [{"kind": "params", "values": {"seed": "0"}},  # idempotent in MLflow, so resent
                     {"kind": "metrics", "points": [["loss", 0.5, 2, 1002]]}]


def test_replay_skips_points_the_store_already_has_and_repeats_within_the_buffer(tmp_path):
    buf = OfflineBuffer(tmp_path)
    buf.append(metrics_event(1, loss=1.0, acc=0.1))
    buf.append(metrics_event(1, loss=9.0))  # the same (key, step) logged twice while offline
    sent = []
    buf.replay(sent.append, already_logged=lambda keys: {("acc", 1)} if "acc" in keys else set())
    assert sent == [{"kind": "metrics", "points": [["loss", 1.0, 1, 1001]]}]


def test_replay_batches_at_most_1000_points_per_request(tmp_path):
    buf = OfflineBuffer(tmp_path)
    for step in range(3):
        buf.append({"kind": "metrics", "points": [[f"m{i}", 0.0, step, 0] for i in range(500)]})
    sizes = []
    buf.replay(lambda e: sizes.append(len(e["points"])))
    assert sizes == [1000, 500]


def test_a_torn_last_line_from_a_crash_is_skipped_and_the_next_event_kept(tmp_path):
    buf = OfflineBuffer(tmp_path)
    buf.append(metrics_event(1, loss=1.0))
    with open(buf.path, "a") as f:
        f.write('{"kind": "metr')  # the process died mid-write
    repaired = OfflineBuffer(tmp_path)
    repaired.append(metrics_event(2, loss=0.5))
    assert [e["points"][0][2] for e in repaired.events()] == [1, 2]
    assert all(json.loads(line) for line in repaired.path.read_text().splitlines()[-1:])


def test_logging_before_open_run_is_a_clear_error(tmp_path, monkeypatch):
    for name in ("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR",
                 "MLFLOW_HTTP_REQUEST_TIMEOUT"):
        monkeypatch.setenv(name, "1")  # the tracker sets these when unset; keep that out of later tests
    with pytest.raises(RuntimeError, match="open_run"):
        MlflowTracker(tmp_path).log_metrics({"train/loss": 1.0}, 1)
