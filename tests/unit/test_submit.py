"""Submission pieces that need no cluster: the code snapshot (and that a job really imports it), the sbatch
parameters of multi-node multi-GPU jobs, job names, and the intent-before-sbatch order of `submit_jobs`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.cluster.executor import (
    Submitted,
    render_sbatch,
)
from orchestrator.cluster.profile import resources_params
from orchestrator.cluster.site import SiteSetup, prologue
from orchestrator.cluster.snapshot import snapshot_code
from orchestrator.launch import ledger as L
from orchestrator.launch.intents import Group, array_name, submit_groups, submit_jobs
from orchestrator.launch.plan import make_plan
from orchestrator.sweep.expand import load_sweep

REPO = Path(__file__).resolve().parents[2]
SWEEPS = REPO / "sweeps"


def setup_lines(code: Path | str) -> list[str]:
    """The shell lines before a job's python with no site setup (orchestrator/cluster/site.py `prologue`)."""
    return prologue(SiteSetup(), str(code), None)


def fake_repo(root: Path, marker: str) -> Path:
    for pkg in ("orchestrator", "trainer", "eval", "record"):
        (root / pkg).mkdir(parents=True, exist_ok=True)
        (root / pkg / "__init__.py").write_text(f"WHERE = {marker!r}\n")
    (root / "orchestrator" / "__pycache__").mkdir(exist_ok=True)
    (root / "orchestrator" / "__pycache__" / "x.pyc").write_bytes(b"junk")
    (root / "README.md").write_text("not copied")
    return root


def test_the_snapshot_is_keyed_by_content_and_holds_only_the_packages(tmp_path):
    repo = fake_repo(tmp_path / "repo", "v1")
    first = snapshot_code(tmp_path / "sweep", repo)
    assert snapshot_code(tmp_path / "sweep", repo) == first  # same content: same directory, no copy
    copied = sorted(p.relative_to(first).as_posix() for p in first.glob("[!.]*/**/*") if p.is_file())
    assert copied == ["eval/__init__.py", "orchestrator/__init__.py", "record/__init__.py", "trainer/__init__.py"]
    assert (first / ".cache").resolve() == (repo / ".cache").resolve()
    (repo / "trainer" / "__init__.py").write_text("WHERE = 'edited'\n")
    second = snapshot_code(tmp_path / "sweep", repo)
    assert second != first and (first / "trainer" / "__init__.py").read_text() == "WHERE = 'v1'\n"


def test_a_job_imports_the_snapshot_even_when_started_in_the_working_tree(tmp_path):
    """The job's setup lines put the snapshot first and keep the working directory off sys.path (the editable
    install of the real tree would otherwise win)."""
    tree = fake_repo(tmp_path / "tree", "working tree")
    snap = snapshot_code(tmp_path / "sweep", fake_repo(tmp_path / "submitted", "snapshot"))
    command = f"{sys.executable} -c 'import orchestrator; print(orchestrator.WHERE)'"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH")}
    plain = subprocess.run(["bash", "-c", command], cwd=tree, capture_output=True, text=True, env=env)
    assert plain.stdout.strip() == "working tree", plain.stderr  # what a job would run without the lines
    job = subprocess.run(["bash", "-c", "; ".join([*setup_lines(snap), command])], cwd=tree, capture_output=True,
                         text=True, env=env)
    assert job.stdout.strip() == "snapshot", job.stderr


@pytest.mark.parametrize(("given", "expected"), [
    ({"SLURM_CPUS_PER_TASK": "3"}, "3"),  # one OpenMP thread per CPU Slurm gave the task
    # An inherited value (a resubmitting watcher's one thread) never wins; the profile's site.env does
    # (tests/unit/test_site.py).
    ({"SLURM_CPUS_PER_TASK": "3", "OMP_NUM_THREADS": "1"}, "3"),
    ({}, "unset"),  # outside Slurm, torch's default
])
def test_a_job_runs_one_openmp_thread_per_cpu_slurm_gave_it(tmp_path, given, expected):
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "SLURM_CPUS_PER_TASK")}
    lines = [*setup_lines(tmp_path), 'echo "${OMP_NUM_THREADS:-unset}"']
    job = subprocess.run(["bash", "-c", "\n".join(lines)], capture_output=True, text=True, env={**env, **given})
    assert job.stdout.strip() == expected, job.stderr


def test_multi_node_multi_gpu_resources_one_task_per_gpu():
    sweep = load_sweep(SWEEPS / "onpolicy.yaml")
    params = resources_params(sweep.profile, sweep.cells[0].resources)
    assert params == {"partition": "gpu", "time": 1440, "nodes": 2, "ntasks_per_node": 4, "cpus_per_task": 8,
                      "gpus_per_node": 4, "mem": "400G"}
    local = load_sweep(SWEEPS / "smoke.yaml")
    assert "gpus_per_node" not in resources_params(local.profile, local.cells[0].resources)


def test_the_dry_run_script_carries_the_snapshot_requeue_and_signal():
    sweep = load_sweep(SWEEPS / "onpolicy.yaml")
    plan = make_plan(sweep)
    script = render_sbatch(sweep, plan, plan.groups[1], python="python").splitlines()
    for line in ("#SBATCH --requeue", "#SBATCH --kill-on-invalid-dep=yes", "#SBATCH --signal=USR2@600",
                 "export PYTHONSAFEPATH=1"):
        assert line in script, line
    assert any(line.startswith("export PYTHONPATH=") and "runs/onpolicy/code/" in line for line in script)


def test_job_names_carry_the_run_key_or_the_cells_digest():
    assert array_name("sw", "train", ["abc"], [2]) == "sw-train-abc-a2"
    digest = array_name("sw", "eval", ["a", "b"], [1, 1])
    assert digest.startswith("sw-eval-") and digest == array_name("sw", "eval", ["a", "b"], [1, 1])
    assert digest != array_name("sw", "eval", ["a", "b"], [1, 2])


class RecordingBackend:
    """Records what would be submitted and what the ledger said at that moment."""

    kind = "slurm"

    def __init__(self, ledger, fail_on: str | None = None):
        self.ledger, self.fail_on, self.calls = ledger, fail_on, []

    def submit(self, kind, entry, run_dirs, params, name, code, dependency=None, parallelism=1):
        on_disk = {k: [j["state"] for j in r["jobs"] if j["kind"] == kind] for k, r in self.ledger.records().items()}
        self.calls.append({"kind": kind, "name": name, "dependency": dependency, "on_disk": on_disk})
        if kind == self.fail_on:
            raise RuntimeError("sbatch: timed out")
        base = 100 + len(self.calls)
        ids = [f"{base}_{i}" for i in range(len(run_dirs))] if len(run_dirs) > 1 else [str(base)]
        return [Submitted(i, f"{i}.out", f"{i}.err") for i in ids]


def records(n: int) -> list[dict]:
    out = []
    for i in range(n):
        r = L.new_record("sw", f"k{i}", f"c{i}", {}, f"/runs/sw/k{i}")
        r.update(code="/code", entries={"train": "m:t", "eval": "m:e"}, params={"train": {}, "eval": {}})
        out.append(r)
    return out


def test_intents_are_on_disk_before_sbatch_and_evaluations_chain_task_by_task(tmp_path):
    ledger = L.Ledger(tmp_path)
    backend = RecordingBackend(ledger)
    recs = records(3)
    submit_jobs(backend, ledger, recs)
    train, ev = backend.calls
    assert train["on_disk"] == {f"k{i}": ["INTENT"] for i in range(3)}
    assert ev["on_disk"] == {f"k{i}": ["INTENT"] for i in range(3)}
    assert ev["dependency"] == "aftercorr:101"
    saved = ledger.records()
    assert [L.latest(saved[f"k{i}"], "eval")["after"] for i in range(3)] == ["101_0", "101_1", "101_2"]
    assert [L.latest(saved[f"k{i}"], "train")["array_index"] for i in range(3)] == [0, 1, 2]
    single = records(1)
    submit_jobs(backend, ledger, single)
    assert backend.calls[-1]["dependency"] == "afterok:103" and backend.calls[-2]["name"] == "sw-train-k0-a1"


def test_a_failed_sbatch_leaves_the_intent_for_the_next_orchestrator(tmp_path):
    ledger = L.Ledger(tmp_path)
    with pytest.raises(RuntimeError, match="timed out"):
        submit_jobs(RecordingBackend(ledger, fail_on="train"), ledger, records(2))
    saved = ledger.records()
    assert all(L.unresolved(r) and len(L.unresolved(r)) == 2 for r in saved.values())


def test_several_arrays_write_every_intent_before_the_first_sbatch_and_every_id_after(tmp_path):
    # a sweep above MaxArraySize: one save of all intents, one of all ids (issue 25), and a failed sbatch midway
    # leaves the arrays that went out with their ids and the rest as intents for the next orchestrator
    ledger = L.Ledger(tmp_path)
    recs = records(6)
    backend = RecordingBackend(ledger, fail_on=None)
    groups = [Group(recs[0:2]), Group(recs[2:4]), Group(recs[4:6], ("eval",))]
    submit_groups(backend, ledger, groups)
    first = backend.calls[0]["on_disk"]
    assert first == {**{f"k{i}": ["INTENT"] for i in range(4)}, "k4": [], "k5": []}  # train kind: 4 intents
    assert backend.calls[1]["on_disk"]["k5"] == ["INTENT"]  # the eval-only array's intents too, before any sbatch
    assert [c["kind"] for c in backend.calls] == ["train", "eval", "train", "eval", "eval"]
    assert backend.calls[3]["dependency"] == "aftercorr:103" and backend.calls[4]["dependency"] is None
    saved = ledger.records()
    assert all(j["state"] == "SUBMITTED" and j["job_id"] for r in saved.values() for j in r["jobs"])

    ledger2 = L.Ledger(tmp_path / "again")
    recs2 = records(6)
    failing = RecordingBackend(ledger2)
    failing.fail_after = 2  # the second array's training sbatch fails

    def submit(kind, *args, _real=failing.submit, **kw):
        if len(failing.calls) == failing.fail_after:
            failing.calls.append({"kind": kind})
            raise RuntimeError("sbatch: timed out")
        return _real(kind, *args, **kw)

    failing.submit = submit
    with pytest.raises(RuntimeError, match="timed out"):
        submit_groups(failing, ledger2, [Group(recs2[0:2]), Group(recs2[2:4]), Group(recs2[4:6])])
    saved = ledger2.records()
    assert [L.latest(saved[f"k{i}"], "train")["state"] for i in range(6)] == ["SUBMITTED"] * 2 + ["INTENT"] * 4
    assert all(len(L.unresolved(saved[f"k{i}"])) == 2 for i in range(2, 6))


def test_an_arrays_log_paths_made_from_the_first_are_submitits_own(tmp_path):
    # issue 25: the tasks' log names are made from the first task's, not asked of submitit 10,000 times
    from submitit.slurm.slurm import SlurmJob

    from orchestrator.cluster.arrays import array_folder
    from orchestrator.cluster.executor import _logs

    folder = array_folder(tmp_path / "slurm" / "%j")
    for ids in (["101"], [f"1003_{i}" for i in range(12)], [f"77_{i}" for i in (0, 1, 10, 100, 1000)]):
        jobs = [SlurmJob(folder=folder, job_id=i, tasks=[0]) for i in ids]
        assert _logs(jobs) == [(str(j.paths.stdout), str(j.paths.stderr)) for j in jobs]
    odd = [SlurmJob(folder=tmp_path / "%j", job_id=f"5_{i}", tasks=[0]) for i in range(4)]  # a folder per job
    assert _logs(odd) == [(str(j.paths.stdout), str(j.paths.stderr)) for j in odd]
