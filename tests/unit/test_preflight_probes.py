"""The preflight's probes without Slurm: the node-side checks on real files (orchestrator/preflight/probe_job.py),
the probes a plan gets (one per resource group and the watcher's, at a short time limit), a report read as rows,
and how a probe's Slurm state is said and judged (orchestrator/preflight/wait.py). The jobs themselves run on the
local cluster in tests/integration/test_preflight.py."""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator.cluster.query import JobRow
from orchestrator.launch.plan import make_plan
from orchestrator.preflight.probe_job import data_check, disk_check, imports, model_check, tracking_fix
from orchestrator.preflight.probes import PROBE_TIME_MIN, plan_probes, report_rows
from orchestrator.preflight.wait import hopeless, words
from orchestrator.sweep.expand import load_sweep

REPO = Path(__file__).resolve().parents[2]


def test_an_import_that_fails_is_its_own_row():
    ok, missing = imports(("json", "no_such_module_for_preflight"))
    assert ok["ok"] and ok["check"] == "import json"
    assert not missing["ok"] and "ModuleNotFoundError" in missing["words"] and "make setup-gpu" in missing["fix"]


def test_model_check_reads_the_files_and_names_what_is_missing(tmp_path):
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "tokenizer.json").write_text("{}")
    bad = model_check(str(model))
    assert not bad["ok"] and "weights" in bad["words"] and bad["fix"]
    (model / "model.safetensors").write_bytes(b"\0" * 8)
    assert model_check(str(model))["ok"]
    assert model_check("tiny")["ok"]  # built by the job from the project's source


def test_data_check_counts_rows_and_fails_a_missing_or_empty_file(tmp_path):
    file = tmp_path / "train.jsonl"
    file.write_text('{"problem": "1+1", "answer": "2"}\n\n{"problem": "2+2", "answer": "4"}\n')
    assert data_check(str(file)) == {"check": f"data {file}", "ok": True, "words": "2 rows", "fix": ""}
    missing = data_check(str(tmp_path / "nope.jsonl"))
    assert not missing["ok"] and "cannot read" in missing["words"] and missing["fix"]
    (tmp_path / "empty.jsonl").write_text("")
    assert not data_check(str(tmp_path / "empty.jsonl"))["ok"]


def test_disk_check_writes_there_and_compares_free_space_with_the_plan(tmp_path):
    spec = {"report": str(tmp_path / "train-0.json"), "group": "train-0", "root": str(tmp_path), "need_bytes": 1}
    assert disk_check(spec)["ok"]
    assert list(tmp_path.iterdir()) == []  # the test file is gone
    huge = disk_check({**spec, "need_bytes": 10**18})
    assert not huge["ok"] and "needs" in huge["words"] and "output_root" in huge["fix"]
    gone = disk_check({**spec, "report": str(tmp_path / "missing" / "x.json")})
    assert not gone["ok"] and "cannot write" in gone["words"]


def test_a_plan_gets_one_probe_per_resource_group_and_one_for_the_watcher(tmp_path):
    sweep = load_sweep(str(REPO / "sweeps" / "smoke.yaml"), [f"sweep.output_root={tmp_path}"])
    where = tmp_path / sweep.name / "preflight" / "t"
    probes = plan_probes(sweep, make_plan(sweep), where, 123, tmp_path / "data")
    assert [p.group for p in probes] == ["train-0", "eval-0", "watcher"]
    assert all(p.params["time"] == PROBE_TIME_MIN for p in probes)
    assert probes[0].params["partition"] == "local" and probes[2].params["partition"] == "service"
    assert probes[0].spec["models"] == ["tiny"] and probes[0].spec["need_bytes"] == 123
    assert probes[0].spec["root"] == str(tmp_path / sweep.name)
    assert any(f.startswith("--partition=service") for f in probes[2].spec["watcher_flags"])


def test_a_report_becomes_rows_and_a_probe_without_one_says_why(tmp_path):
    (tmp_path / "train-0.json").write_text(json.dumps({"checks": [
        {"check": "gpus", "ok": False, "words": "0 visible, 4 asked per node", "fix": "check gpus_per_node"}]}))
    [row] = report_rows("train-0", tmp_path, "COMPLETED", "", "log")
    assert (row.check, row.group, row.ok, row.fix) == ("gpus", "train-0", False, "check gpus_per_node")
    [never] = report_rows("watcher", tmp_path, "PENDING", "PartitionDown", "log")
    assert not never.ok and "PartitionDown" in never.words and "scontrol show partition" in never.fix
    [died] = report_rows("eval-0", tmp_path, "FAILED", "NonZeroExitCode", "/x/log.err")
    assert not died.ok and "/x/log.err" in died.words


def test_a_probe_state_is_said_and_a_down_partition_ends_the_wait():
    assert words(None) == "queued (Slurm: submitted)"
    assert words(JobRow("1", "p", "PENDING", reason="Priority")) == "queued (Slurm: Priority)"
    assert words(JobRow("1", "p", "PENDING", reason="None")) == "queued (Slurm: submitted)"
    assert words(JobRow("1", "p", "RUNNING", node="n1")) == "running on n1"
    assert words(JobRow("1", "p", "COMPLETED")) == "done (COMPLETED)"
    assert hopeless(JobRow("1", "p", "PENDING", reason="PartitionDown"))
    assert not hopeless(JobRow("1", "p", "PENDING", reason="Resources")) and not hopeless(None)


def test_a_loopback_tracking_uri_gets_the_fix_that_names_the_address_the_nodes_reach():
    for uri in ("http://127.0.0.1:5000", "http://localhost:5000/", "http://[::1]:5000"):
        fix = tracking_fix(uri)
        assert "that node itself" in fix and "tracking_uri" in fix, (uri, fix)
    assert "that node itself" not in tracking_fix("http://login1:5000")
    assert "--host 0.0.0.0" in tracking_fix("http://login1:5000")
