"""A site's own setup in the profile (orchestrator/cluster/site.py): checked values, what the sbatch script carries,
and the prologue every job runs; the snapshot a job imports is complete (record/ included)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from orchestrator.cluster.executor import Options, render_sbatch
from orchestrator.cluster.profile import load_profile
from orchestrator.cluster.site import SiteSetup, prologue
from orchestrator.cluster.snapshot import snapshot_code
from orchestrator.launch.plan import make_plan
from orchestrator.sweep.expand import load_sweep

REPO = Path(__file__).resolve().parents[2]
SMOKE = REPO / "sweeps" / "smoke.yaml"
LOCAL = yaml.safe_load((REPO / "slurm" / "profiles" / "local.yaml").read_text())
SITE = {"setup": ["module load cuda/12.4", "source /shared/venv/bin/activate"],
        "env": {"HF_HOME": "/shared/hf cache", "NCCL_DEBUG": "WARN"},
        "python": "apptainer exec --nv /shared/comedy.sif python",
        "srun_args": ["--cpu-bind=cores"], "gpus": "gres", "gpu_type": "a100",
        "sbatch": {"reservation": "paper", "mail-type": "END,FAIL", "mail-user": "me@example.org"}}


def sweep_with(tmp_path: Path, profile: dict):
    (tmp_path / "site.yaml").write_text(yaml.safe_dump(profile))
    text = SMOKE.read_text().replace("    profile: local\n", f"    profile: {tmp_path / 'site.yaml'}\n")
    (tmp_path / "smoke.yaml").write_text(text)
    return load_sweep(tmp_path / "smoke.yaml")


def script_of(sweep) -> str:
    plan = make_plan(sweep)
    return render_sbatch(sweep, plan, plan.train[0], data_dir="/shared/data")


def test_every_bad_site_value_is_one_problem_naming_its_key():
    found: list[str] = []
    bad = {"setup": ["ok", "two\nlines"], "env": {"1BAD": "x", "GOOD": "a\nb"}, "python": "",
           "srun_args": ["--ok", "--x y", "; rm -rf /"], "gpus": "both", "gpu_type": "a 100",
           "sbatch": {"partition": "x", "Reservation": "r", "comment": "a b", "mail-type": "END"},
           "colour": 1, "sqlite_jobs": "yes"}
    assert load_profile("local", {"site": bad}, found) is None
    keys = sorted(p.split(":")[0].removeprefix("sweep.slurm.overrides.site.") for p in found)
    assert keys == ["colour", "env", "env.GOOD", "gpu_type", "gpus", "python", "sbatch.Reservation",
                    "sbatch.comment", "sbatch.partition", "setup[1]", "sqlite_jobs", "srun_args[1]",
                    "srun_args[2]"], found
    assert all("; " in p or "give" in p or "use" in p or "valid" in p for p in found)


def test_the_script_carries_the_site_setup_quoted_in_order(tmp_path):
    script = script_of(sweep_with(tmp_path, {**LOCAL, "gpus_per_node": 4, "tasks_per_node": 4, "site": SITE}))
    lines = script.splitlines()
    setup = [ln for ln in lines[lines.index("# setup") + 1: lines.index("# command")] if ln]
    assert setup[:2] == SITE["setup"]  # the site's lines first: a module may set PYTHONPATH, kept behind ours
    assert setup[2].startswith("export PYTHONPATH=") and "export COMEDY_DATA=/shared/data" in setup
    assert {"export HF_HUB_OFFLINE=1", "export HF_DATASETS_OFFLINE=1"} <= set(setup)
    assert setup[-2:] == ["export HF_HOME='/shared/hf cache'", "export NCCL_DEBUG=WARN"]  # last: they win
    assert "#SBATCH --gres=gpu:a100:4" in lines and not any("--gpus-per-node" in ln for ln in lines)
    assert {"#SBATCH --reservation=paper", "#SBATCH --mail-type=END,FAIL",
            "#SBATCH --mail-user=me@example.org"} <= set(lines)
    assert not any("wckey" in ln for ln in lines)  # submitit's default --wckey=submitit is gone
    srun = next(ln for ln in lines if ln.startswith("srun "))
    # an array's tasks start from its one pickle (orchestrator/cluster/arrays.py), through the site's interpreter
    assert ("--export=ALL --cpu-bind=cores apptainer exec --nv /shared/comedy.sif python -u -m "
            "orchestrator.cluster.arrays") in srun


def test_a_wckey_only_when_the_profile_names_one_and_gpus_per_node_with_a_type(tmp_path):
    site = {"sbatch": {"wckey": "proj42"}, "gpu_type": "a100"}
    lines = script_of(sweep_with(tmp_path, {**LOCAL, "gpus_per_node": 2, "site": site})).splitlines()
    assert "#SBATCH --wckey=proj42" in lines and "#SBATCH --gpus-per-node=a100:2" in lines
    plain = script_of(sweep_with(tmp_path, LOCAL)).splitlines()
    assert not any("wckey" in ln or "gres" in ln or "gpus-per-node" in ln for ln in plain)


def test_the_dry_run_shows_the_site_setup(tmp_path):
    sweep_with(tmp_path, {**LOCAL, "site": {"setup": ["module load cuda"], "env": {"X": "1"}}})
    command = [sys.executable, "-m", "orchestrator.cli", "sweep", "--dry-run", str(tmp_path / "smoke.yaml")]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "250"})
    assert done.returncode == 0, done.stderr
    assert "module load cuda" in done.stdout and "export X=1" in done.stdout and "--export=ALL" in done.stdout


@pytest.mark.parametrize(("site_env", "given", "expected"), [
    ({}, {"SLURM_CPUS_PER_TASK": "3", "OMP_NUM_THREADS": "1", "PYTHONPATH": ""}, "3 3 1 1"),
    ({"OMP_NUM_THREADS": "5"}, {"SLURM_CPUS_PER_TASK": "3"}, "5 3 1 1"),  # the profile's choice wins
    ({"HF_HUB_OFFLINE": "0"}, {}, "unset unset 0 1"),  # a site whose nodes reach the hub says so
])
def test_the_prologue_sets_threads_srun_cpus_and_offline_whatever_was_inherited(tmp_path, site_env, given,
                                                                                expected):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMP_", "SRUN_", "HF_"))}
    site = SiteSetup(env=tuple(site_env.items()))
    lines = [*prologue(site, str(tmp_path), None),
             'echo "${OMP_NUM_THREADS:-unset} ${SRUN_CPUS_PER_TASK:-unset} $HF_HUB_OFFLINE $HF_DATASETS_OFFLINE"']
    job = subprocess.run(["bash", "-c", "\n".join(lines)], capture_output=True, text=True, env={**env, **given})
    assert job.stdout.strip() == expected, job.stderr


def test_options_round_trip_the_site_and_refuse_a_corrupt_one(tmp_path):
    site = SiteSetup.from_dict(SITE, "site", problems := [])
    assert not problems
    options = Options(site=site.to_dict())
    assert options.site_setup() == site
    assert options.interpreter() == "apptainer exec --nv /shared/comedy.sif python"
    assert options.site_params()[0]["wckey"] is None
    with pytest.raises(Exception, match="submission.json"):
        Options(site={"env": {"A": "x\ny"}}).site_setup()


def test_the_snapshot_holds_every_package_a_job_imports(tmp_path):
    """A job's modules all come from the snapshot, none from the checkout (record/ was missing: an edit there
    reached queued jobs). A fresh interpreter imports the job entries with only the snapshot on its path."""
    snap = snapshot_code(tmp_path / "sweep")
    probe = ("import sys, orchestrator.jobs, eval.evaluate, trainer.train, record.tracking.tracker\n"
             "print('\\n'.join(m.__file__ for name, m in list(sys.modules.items()) if getattr(m, '__file__', None)\n"
             "      and name.split('.')[0] in ('orchestrator', 'trainer', 'eval', 'record')))")
    env = {**os.environ, "PYTHONPATH": str(snap), "PYTHONSAFEPATH": "1"}
    done = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = done.stdout.split()
    outside = [f for f in loaded if not f.startswith(str(snap) + "/") and "/.venv/" not in f]
    assert loaded and not outside, outside
    assert any("/record/" in f for f in loaded)


@pytest.mark.parametrize("example", sorted((REPO / "slurm" / "profiles" / "examples").glob("*.yaml")),
                         ids=lambda p: p.stem)
def test_the_example_site_profiles_load_and_render(example, tmp_path):
    """Each common site shape (modules + venv, Apptainer, pyxis/enroot) passes the checks and renders a script."""
    found: list[str] = []
    assert load_profile(str(example), {}, found) is not None, found
    script = script_of(sweep_with(tmp_path, yaml.safe_load(example.read_text())))
    assert "srun " in script and "export HF_HUB_OFFLINE=1" in script
