"""The run ledger (atomic files, the reused-job-id guard, intents settled by job name, the writer lock) and the
parsers of what sacct, squeue and scontrol say."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.cluster.query import (
    JobRow,
    expand_job_id,
    parse_max_array_size,
    parse_mem,
    parse_sacct,
    parse_squeue,
    parse_time,
)
from orchestrator.launch import ledger as L
from record.errors import UserError

REPO = Path(__file__).resolve().parents[2]

FIELDS = "JobID|JobName|State|ExitCode|Reason|Submit|Start|End|Elapsed|NodeList|MaxRSS|ReqMem"
SACCT = """\
40_0|sw-train-abc|COMPLETED|0:0|None|2026-11-21T06:00:00|2026-11-21T06:00:01|2026-11-21T06:00:09|00:00:08|vm||1G
40_0.batch|batch|COMPLETED|0:0||2026-11-21T06:00:01|2026-11-21T06:00:01|2026-11-21T06:00:09|00:00:08|vm|2048K|
40_0.0|python|COMPLETED|0:0||2026-11-21T06:00:01|2026-11-21T06:00:01|2026-11-21T06:00:09|00:00:08|vm|900M|
40_1|sw-train-abc|OUT_OF_MEMORY|0:125|None|2026-11-21T06:00:00|2026-11-21T06:00:01|2026-11-21T06:00:05|00:00:04|vm||1G
40_1.0|python|OUT_OF_MEMORY|0:125||2026-11-21T06:00:01|2026-11-21T06:00:01|2026-11-21T06:00:05|00:00:04|vm|1.5G|
40_[2-4%2]|sw-train-abc|PENDING|0:0|JobArrayTaskLimit|2026-11-21T06:00:00|Unknown|Unknown|00:00:00|None assigned||1G
41|sw-eval-k-a2|CANCELLED by 0|0:0|None|2026-11-21T06:01:00|2026-11-21T06:01:01|2026-11-21T06:01:02|00:00:01|vm||1G
"""


def test_sacct_rows_per_task_with_steps_feeding_maxrss_and_pending_ranges_expanded():
    rows = parse_sacct(SACCT)
    assert sorted(rows) == ["40_0", "40_1", "40_2", "40_3", "40_4", "41"]
    done = rows["40_0"][0]
    assert (done.state, done.exit_code, done.node, done.max_rss) == ("COMPLETED", "0:0", "vm", 900 * 1024**2)
    assert done.end - done.start == 8
    assert rows["40_1"][0].state == "OUT_OF_MEMORY" and rows["40_1"][0].max_rss == int(1.5 * 1024**3)
    assert [rows[f"40_{i}"][0].state for i in (2, 3, 4)] == ["PENDING"] * 3
    assert rows["40_3"][0].start is None and rows["40_3"][0].reason == "JobArrayTaskLimit"
    assert (rows["41"][0].state, rows["41"][0].cancelled_by) == ("CANCELLED", "0")


def test_sacct_keeps_every_record_of_a_reused_job_id():
    text = ("7|old-sweep-train-x-a1|COMPLETED|0:0|None|2025-01-01T00:00:00|2025-01-01T00:00:01|"
            "2025-01-01T00:01:00|00:00:59|vm||1G\n"
            "7|sw-train-k-a1|RUNNING|0:0|None|2026-11-21T06:00:00|2026-11-21T06:00:01|Unknown|00:00:10|vm||1G\n")
    assert [r.name for r in parse_sacct(text)["7"]] == ["old-sweep-train-x-a1", "sw-train-k-a1"]


def test_small_parsers():
    assert expand_job_id("12_[0-2,5%4]") == ["12_0", "12_1", "12_2", "12_5"]
    assert expand_job_id("12_3") == ["12_3"] and expand_job_id("12") == ["12"]
    assert parse_mem("2048K") == 2 * 1024**2 and parse_mem("4Gn") == 4 * 1024**3 and parse_mem("") is None
    assert parse_time("Unknown") is None and parse_time("None") is None
    assert parse_max_array_size("MaxArraySize            = 1001\nMaxJobCount = 10000\n") == 1001
    squeue = parse_squeue("9_[1-2%1]|sw-eval-x|PENDING|2026-11-21T06:00:00|Dependency\n9_0|sw-eval-x|RUNNING|"
                          "2026-11-21T06:00:00|None\n")
    assert sorted(squeue) == ["9_0", "9_1", "9_2"] and squeue["9_2"][0].reason == "Dependency"


def record_with(tmp_path, *jobs) -> dict:
    record = L.new_record("sw", "k", "cell", {"seed": 0}, tmp_path / "k")
    for kind, name, fields in jobs:
        L.add_attempt(record, kind, name, 1000.0, **fields)
    return record


def row(job_id, name, state, submit=1000.0, **kw) -> JobRow:
    return JobRow(job_id, name, state, submit=submit, **kw)


def test_a_reused_job_id_never_updates_an_attempt(tmp_path):
    record = record_with(tmp_path, ("train", "sw-train-k-a1", {"job_id": "7", "state": "SUBMITTED"}))
    stale = [row("7", "other-sweep-job", "FAILED", submit=1010.0),  # another job's name
             row("7", "sw-train-k-a1", "FAILED", submit=1000.0 - L.CLOCK_SKEW_S - 1)]  # submitted before our intent
    assert not L.apply_rows(record, {"7": stale})
    assert L.latest(record, "train")["state"] == "SUBMITTED"
    assert L.apply_rows(record, {"7": [*stale, row("7", "sw-train-k-a1", "RUNNING", submit=1001.0, node="vm")]})
    assert L.latest(record, "train")["state"] == "RUNNING" and L.latest(record, "train")["node"] == "vm"


def test_intents_are_settled_by_job_name_or_marked_lost(tmp_path):
    record = record_with(tmp_path, ("train", "sw-train-d1", {"array_index": 2}),
                         ("eval", "sw-eval-d1", {"array_index": 2}))
    train, ev = L.unresolved(record)
    L.resolve(train, [row("50_1", "sw-train-d1", "RUNNING", 1001.0), row("50_2", "sw-train-d1", "PENDING", 1001.0)])
    assert (train["job_id"], train["state"]) == ("50_2", "PENDING")
    L.resolve(ev, [row("51_2", "sw-eval-d1", "PENDING", submit=10.0)])  # same name, long before: not ours
    assert ev["state"] == "LOST" and ev["job_id"] is None
    assert L.unresolved(record) == []


def test_what_is_polled_and_the_cell_status(tmp_path):
    record = record_with(tmp_path, ("train", "a", {"job_id": "1", "state": "RUNNING"}),
                         ("eval", "b", {"job_id": "2", "state": "PENDING"}))
    assert L.to_poll(record) == ["1", "2"] and L.cell_status(record) == "training"
    L.latest(record, "train")["state"] = "NODE_FAIL"  # Slurm may still requeue it in place: keep asking
    assert L.to_poll(record) == ["1", "2"]
    L.finish(record, "gave_up", "why", 2000.0)
    assert L.to_poll(record) == ["2"] and L.cell_status(record) == "gave_up"
    assert record["decisions"][-1] == {"at": 2000.0, "action": "gave_up", "reason": "why"}
    done = record_with(tmp_path, ("train", "a", {"job_id": "1", "state": "COMPLETED"}),
                       ("eval", "b", {"job_id": "2", "state": "COMPLETED"}))
    assert L.to_poll(done) == [] and L.cell_status(done) == "done"


def test_records_round_trip_and_a_cancellation_marker_reads_back(tmp_path):
    ledger = L.Ledger(tmp_path)
    record = record_with(tmp_path, ("train", "a", {"job_id": "1"}))
    ledger.save(record)
    assert ledger.records()["k"]["jobs"] == record["jobs"]
    assert ledger.records()["k"]["user_cancelled"] is None
    ledger.mark_cancelled("k", ["1"], 5.0)
    assert ledger.load("k")["user_cancelled"]["job_ids"] == ["1"]
    ledger.save(ledger.load("k"))
    stored = json.loads(ledger.shard_path("k").read_text())["records"]["k"]
    assert "user_cancelled" not in stored  # derived, never stored in the record


def test_a_write_that_dies_leaves_the_old_record_whole(tmp_path, monkeypatch):
    ledger = L.Ledger(tmp_path)
    record = record_with(tmp_path, ("train", "a", {"job_id": "1"}))
    ledger.save(record)
    before = ledger.shard_path("k").read_text()
    record["jobs"][0]["state"] = "RUNNING"

    def crash(fd):
        raise OSError("disk gone")
    monkeypatch.setattr(os, "fsync", crash)
    with pytest.raises(OSError):
        ledger.save(record)
    assert ledger.shard_path("k").read_text() == before
    assert [p.name for p in ledger.shard_path("k").parent.iterdir()] == [ledger.shard_path("k").name]  # no temp file


def test_one_writer_at_a_time_and_a_dead_holder_is_taken_over(tmp_path):
    ledger = L.Ledger(tmp_path)
    with ledger.lock("first"):
        with pytest.raises(UserError, match="being handled by first"):
            with ledger.lock("second"):
                pass
    assert not (ledger.dir / ".lock").exists()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (ledger.dir / ".lock").write_text(json.dumps({"host": os.uname().nodename, "pid": int(dead.stdout), "at": 1e12}))
    with ledger.lock("third"):
        assert json.loads((ledger.dir / ".lock").read_text())["what"] == "third"


def test_a_live_job_sacct_never_heard_of_is_asked_of_squeue_then_vanishes(tmp_path):
    record = record_with(tmp_path, ("train", "sw-train-d1", {"job_id": "60_0", "state": "SUBMITTED",
                                                             "submitted_at": 1000.0}))
    assert L.unanswered(record, {}, now=1000.0 + 5) == []  # sacct lags behind sbatch for a moment
    assert L.unanswered(record, {"60_0": [row("60_0", "sw-train-d1", "PENDING")]}, now=5000.0) == []
    job = L.latest(record, "train")
    assert L.unanswered(record, {}, now=1000.0 + L.VANISH_AFTER_S + 1) == [job]
    L.vanish(job, [row("60_0", "sw-train-d1", "PENDING", reason="Priority")])  # still queued: follow it
    assert (job["state"], job["reason"]) == ("PENDING", "Priority")
    L.vanish(job, [row("60_0", "someone-else", "PENDING")])
    assert job["state"] == "VANISHED"


def test_a_lock_is_waited_for_when_asked_and_refused_at_once_otherwise(tmp_path):
    ledger = L.Ledger(tmp_path)
    code = ("import sys, time\nfrom orchestrator.launch.ledger import Ledger\n"
            "with Ledger(sys.argv[1]).lock('a watcher poll'):\n    print('held', flush=True)\n    time.sleep(1.5)")
    holder = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                              cwd=REPO)
    assert holder.stdout.readline().strip() == "held"
    with pytest.raises(L.SweepBusy, match="being handled by a watcher poll"):
        with ledger.lock("orchestrate sweep"):
            pass
    with ledger.lock("orchestrate sweep", wait_s=30.0):  # the poll ends; the relaunch goes on
        assert json.loads((ledger.dir / ".lock").read_text())["what"] == "orchestrate sweep"
    assert holder.wait(timeout=30) == 0


def test_a_save_of_many_cells_writes_one_file_per_shard_not_per_cell(tmp_path, monkeypatch):
    """Issue 25: the fsyncs and files of a save grow with the shards (16 at most), not with the cells."""
    ledger = L.Ledger(tmp_path)
    records = [L.new_record("s", f"key{i:05d}", f"c{i}", {}, tmp_path / f"c{i}") for i in range(2000)]
    synced, real = [], os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd))[1])
    ledger.save_all(records)
    assert len(synced) <= 16
    assert len(list((ledger.dir / "shards").iterdir())) <= 16 and not list(ledger.dir.glob("*.json"))
    assert sorted(ledger.records()) == sorted(r["run_key"] for r in records)
    assert ledger.load("key01234")["name"] == "c1234"


def test_records_read_before_the_lock_are_reused_only_while_no_ledger_file_changed(tmp_path):
    """Issue 25: `orchestrate sweep` reads the ledger, then again under the lock; the second read reuses the first
    when no file changed, and parses again after any save, cancellation marker or legacy file."""
    ledger = L.Ledger(tmp_path)
    ledger.save_all([L.new_record("s", f"key{i}", f"c{i}", {}, tmp_path / f"c{i}") for i in range(40)])
    before = ledger.records()
    assert L.Ledger(tmp_path).records(unless_changed=before) is before
    assert ledger.records(unless_changed=dict(before)) is not before  # not a ledger's answer: read
    record = before["key3"]
    ledger.save(dict(record, name="renamed"))
    again = ledger.records(unless_changed=before)
    assert again is not before and again["key3"]["name"] == "renamed"
    ledger.mark_cancelled("key5", ["1"], 0.0)
    third = ledger.records(unless_changed=again)
    assert third is not again and third["key5"]["user_cancelled"]["job_ids"] == ["1"]
    (ledger.dir / "legacy.json").write_text(json.dumps(L.new_record("s", "legacy", "c", {}, tmp_path / "c")))
    assert "legacy" in ledger.records(unless_changed=third)


def test_a_writers_second_save_reencodes_only_its_records_yet_never_loses_another_writers(tmp_path):
    """Issue 25: a save remembers the shard's lines it wrote; the next save of the same writer starts from them
    only while the file is what it wrote (a watcher that took the lock in between wrote it: read again)."""
    first = L.Ledger(tmp_path)
    records = [L.new_record("s", f"key{i}", f"c{i}", {}, tmp_path / f"c{i}") for i in range(64)]
    first.save_all(records)
    other = L.Ledger(tmp_path)  # another process, holding the lock after the first let it go
    theirs = other.records()["key7"]
    other.save(dict(theirs, name="by the watcher"))
    first.save(dict(records[8], name="mine"))
    saved = L.Ledger(tmp_path).records()
    assert saved["key7"]["name"] == "by the watcher" and saved["key8"]["name"] == "mine"
    assert len(saved) == 64
    first.save(dict(records[9], name="again"))  # from its remembered lines this time: still every record
    saved = L.Ledger(tmp_path).records()
    assert (saved["key7"]["name"], saved["key9"]["name"], len(saved)) == ("by the watcher", "again", 64)


def test_a_legacy_sweep_with_one_file_per_cell_is_read_and_migrated_on_save(tmp_path):
    """A sweep written before the shards: its per-cell files are read as they are; a save moves a record into its
    shard and removes its old file; a shard's copy wins over a leftover file (a crash between the two steps)."""
    ledger = L.Ledger(tmp_path)
    ledger.dir.mkdir(parents=True)
    for key in ("a", "b"):
        old = L.new_record("s", key, key, {}, tmp_path / key)
        ledger.path(key).write_text(json.dumps(old))
    assert sorted(ledger.records()) == ["a", "b"] and ledger.load("a")["name"] == "a"
    record = ledger.load("a")
    record["name"] = "moved"
    ledger.save(record)
    assert not ledger.path("a").exists() and ledger.path("b").exists()
    assert ledger.records()["a"]["name"] == "moved" and ledger.records()["b"]["name"] == "b"
    ledger.path("a").write_text(json.dumps(L.new_record("s", "a", "stale", {}, tmp_path / "a")))
    assert ledger.records()["a"]["name"] == "moved" and ledger.load("a")["name"] == "moved"
