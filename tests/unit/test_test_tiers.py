"""The line between the unit and integration tiers (tests/support/tiers.py), checked on the real guard: a unit test
that submits a Slurm job or starts a service fails at that call, before anything is forked, whether or not the
program is installed; the test's own stand-ins and the project's own processes pass."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.inner_pytest import clean_env
from tests.support.tiers import ServiceInUnitTier, misplaced_markers, refusal, tier_of

TESTS = Path(__file__).resolve().parents[1]


def test_every_test_is_marked_with_the_tier_of_its_directory(request):
    assert request.node.get_closest_marker("unit") is not None
    assert tier_of(TESTS / "integration" / "test_x.py", TESTS) == "integration"
    assert tier_of(TESTS / "gpu" / "test_x.py", TESTS) == "gpu"
    assert tier_of(TESTS / "support" / "x.py", TESTS) is None


def test_a_unit_test_may_not_say_it_needs_a_service():
    assert misplaced_markers("unit", {"slurm", "parametrize", "unit"}) == {"slurm"}
    assert misplaced_markers("unit", {"slow", "reliability"}) == {"slow", "reliability"}
    assert misplaced_markers("integration", {"slurm", "slow"}) == set()


@pytest.mark.parametrize("command", [
    ["sbatch", "--wrap", "true"], ["srun", "true"], ["/usr/bin/salloc"], ["slurm/local-cluster", "up"],
    ["pg_ctl", "start"], ["chromedriver", "--port=0"],
    [sys.executable, "-m", "mlflow", "server", "--port", "0"],
    [sys.executable, "-m", "orchestrator.cli", "tracking", "up"], ["bash", "-c", "sbatch --wrap true"],
])
def test_a_unit_test_that_starts_a_job_or_a_service_fails_at_that_call(command, tmp_path):
    with pytest.raises(ServiceInUnitTier, match="move it to tests/integration"):
        subprocess.run(command, cwd=tmp_path, capture_output=True)
    with pytest.raises(ServiceInUnitTier):
        os.system(" ".join(map(str, command)))


def test_stand_ins_and_the_projects_own_processes_pass(tmp_path):
    stand_in = tmp_path / "bin" / "sbatch"
    stand_in.parent.mkdir()
    stand_in.write_text("#!/bin/sh\necho 'Submitted batch job 7'\n")
    stand_in.chmod(0o755)
    env = {**os.environ, "PATH": f"{stand_in.parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(["sbatch", "--wrap", "true"], env=env, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "Submitted batch job 7"
    version = subprocess.run([sys.executable, "-m", "orchestrator.cli", "--help"], capture_output=True, text=True)
    assert version.returncode == 0, version.stderr


def test_refusal_reads_the_command_not_its_arguments():
    roots = (Path("/nonexistent-stand-ins"),)
    assert refusal(["echo", "sbatch"], roots) is None
    assert refusal([sys.executable, "-m", "orchestrator.cli", "tracking", "status"], roots) is None
    assert refusal(["mlflow", "server"], roots) == "`mlflow server` starts a server"
    assert refusal(["sbatch"], roots) == "`sbatch` submits a Slurm job"


def test_a_program_of_the_checkout_is_never_a_stand_in_even_under_the_temporary_directory(tmp_path):
    """A fresh clone under /tmp: the system's temporary directory holds both the checkout and the tests' stand-ins.
    The closest directory above the program decides; a stand-in must be a file the test wrote."""
    def program(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
        return str(path)
    checkout = tmp_path / "clone"
    cluster = program(checkout / "slurm" / "local-cluster")
    own = program(tmp_path / "pytest-0" / "test_x0" / "bin" / "sbatch")
    inside = program(checkout / ".basetemp" / "test_x0" / "sbatch")  # a --basetemp inside the checkout
    roots = (tmp_path, checkout / ".basetemp")
    assert refusal([cluster, "up"], roots, checkout=checkout) == "`local-cluster` is or starts a service"
    assert refusal(["slurm/local-cluster", "up"], roots, checkout=checkout, cwd=str(checkout)) is not None
    assert refusal([own], roots, checkout=checkout) is None
    assert refusal([inside], roots, checkout=checkout) is None
    assert refusal([str(tmp_path / "bin" / "srun")], roots, checkout=checkout) == "`srun` submits a Slurm job"  # none
    assert refusal(["sbatch"], roots, path=str(Path(own).parent), checkout=checkout) is None
    assert refusal(["bash", "-c", f"{cluster} up"], roots, checkout=checkout) is not None


def test_a_unit_test_marked_as_needing_a_service_stops_the_collection(tmp_path):
    """The real tests/conftest.py over a tree of its own: a slurm-marked test under unit/ is refused, by name."""
    tests = tmp_path / "tests"
    (tests / "unit").mkdir(parents=True)
    (tests / "conftest.py").write_text((TESTS / "conftest.py").read_text())
    (tests / "unit" / "test_x.py").write_text(
        "import pytest\n\n@pytest.mark.slurm\ndef test_needs_slurm():\n    pass\n\ndef test_pure():\n    pass\n")
    env = clean_env(PYTHONPATH=os.pathsep.join(filter(None, [str(TESTS.parent), os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
                           "--rootdir", str(tmp_path), "tests"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    out = done.stdout + done.stderr
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, out
    assert "tests/unit/test_x.py::test_needs_slurm: slurm" in out and "test_pure" not in out, out


SLURM_ROWS = """
import os
import pytest

def record(name):
    with open(os.environ["WORKER_LOG"], "a") as f:
        f.write(f"{name} {os.environ.get('PYTEST_XDIST_WORKER')}\\n")

@pytest.mark.parametrize("n", range(6))
def test_elsewhere(n):
    record(f"other{n}")

@pytest.mark.parametrize("n", range(6))
@pytest.mark.slurm
def test_on_the_cluster(n):
    record(f"slurm{n}")
"""


def test_under_xdist_the_slurm_tests_share_one_worker_and_come_first(tmp_path):
    """The real tests/conftest.py under `-n 3 --dist loadgroup`: every slurm-marked test on one worker (they change
    the one cluster), handed out before the rest."""
    tests = tmp_path / "tests"
    (tests / "integration").mkdir(parents=True)
    (tests / "conftest.py").write_text((TESTS / "conftest.py").read_text())
    (tests / "integration" / "test_rows.py").write_text(SLURM_ROWS)
    log = tmp_path / "workers.log"
    env = clean_env(WORKER_LOG=str(log),
                    PYTHONPATH=os.pathsep.join(filter(None, [str(TESTS.parent), os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
                           "-n", "3", "--dist", "loadgroup", "--rootdir", str(tmp_path), "tests"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line.split() for line in log.read_text().splitlines()]
    workers = {worker for name, worker in rows if name.startswith("slurm")}
    assert len(workers) == 1 and len([n for n, _ in rows if n.startswith("slurm")]) == 6, rows
    # handed out first: the collection puts the chain before everything else (xdist deals work in that order)
    order = subprocess.run([sys.executable, "-m", "pytest", "-q", "--collect-only", "-p", "no:cacheprovider", "-o",
                            "addopts=", "--rootdir", str(tmp_path), "tests"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=180).stdout.split()
    tests = [line.split("::")[1] for line in order if "::" in line]
    assert tests == [f"test_on_the_cluster[{n}]" for n in range(6)] + [f"test_elsewhere[{n}]" for n in range(6)], \
        order
