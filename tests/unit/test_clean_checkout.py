"""The suite leaves the checkout as it found it: a representative slice of the unit tests (the CLI's dry run and a
sweep through the local executor, MLflow stores, the ledger, a job's entry writing user_error.json, the data
checks) runs in an inner pytest session in a copy of the checkout, and no file of the copy may appear, change or go.

The copy, not the checkout itself: under `make test` other workers write beside this test, and a before/after
comparison of a checkout they share could not tell their files from the slice's. The copy has the checkout's files
(tracked, and untracked but not ignored) and its project cache (`.cache/`, a link: the shared models are built
there once, on purpose, like the code snapshot of a sweep links it); nothing else is left out of the comparison but
Python's and the tools' own caches."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.support.inner_pytest import clean_env

REPO = Path(__file__).resolve().parents[2]
# Tests that write files: run directories and a sweep through the local executor, an MLflow store, the ledger and its
# lock, a job's entry writing user_error.json, the data checks before a submission. About 25 s of CPU (95 s on a
# loaded 2-core machine).
SLICE = (
    "tests/unit/test_cli_sweep.py::test_dry_run_prints_the_plan_and_touches_nothing",
    "tests/unit/test_cli_sweep.py::test_sweep_without_dry_run_writes_run_dirs_and_follows_the_local_executor",
    "tests/unit/test_tracking_names.py::test_a_cell_is_named_as_status_names_it_with_every_axis_and_its_parent_"
    "carries_the_sweep",
    "tests/unit/test_ledger.py",
    "tests/unit/test_user_errors.py",
    "tests/unit/test_paths.py::test_the_sweep_command_refuses_missing_data_before_writing_anything",
)
# Caches a Python process or a tool may leave and a checkout ignores; `.cache` is the project's own (a link here).
CACHES = frozenset({"__pycache__", ".pytest_cache", ".ruff_cache", ".hypothesis", ".cache"})


def files(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under `root` but the caches, as path -> (size, mtime in ns)."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in CACHES]
        for name in filenames:
            path = Path(dirpath, name)
            stat = path.lstat()
            found[str(path.relative_to(root))] = (stat.st_size, stat.st_mtime_ns)
    return found


def changes(before: dict, after: dict) -> list[str]:
    """`+ path` (new), `~ path` (changed), `- path` (gone), sorted."""
    return sorted([f"+ {p}" for p in after.keys() - before.keys()] + [f"- {p}" for p in before.keys() - after.keys()]
                  + [f"~ {p}" for p in before.keys() & after.keys() if before[p] != after[p]])


def copy_of_checkout(dest: Path) -> Path:
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, capture_output=True,
                            check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name, follow_symlinks=False)
    (REPO / ".cache").mkdir(exist_ok=True)
    (dest / ".cache").symlink_to(REPO / ".cache", target_is_directory=True)
    return dest


def litter(checkout: Path, tests: tuple[str, ...], basetemp: Path) -> list[str]:
    """What an inner pytest session over `tests`, run in `checkout`, added to it, changed or removed."""
    before = files(checkout)
    env = clean_env(PYTHONPATH=str(checkout), OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-o",
                           "addopts=", "--basetemp", str(basetemp), *tests], cwd=checkout, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    return changes(before, files(checkout))


def test_a_slice_of_the_suite_leaves_the_checkout_unchanged(tmp_path):
    found = litter(copy_of_checkout(tmp_path / "checkout"), SLICE, tmp_path / "basetemp")
    assert not found, "the suite wrote into the checkout (a test writes under its own tmp_path):\n" + "\n".join(found)


def test_a_test_that_writes_into_the_checkout_is_caught(tmp_path):
    """A planted test writes what the committed leftovers were: MLflow's default store in the working directory and
    a file beside the code."""
    checkout = copy_of_checkout(tmp_path / "checkout")
    (checkout / "tests" / "unit" / "test_planted.py").write_text(
        "from pathlib import Path\n\ndef test_litters():\n    Path('mlflow.db').write_text('')\n"
        "    (Path(__file__).parents[2] / 'slurm-8.out').write_text('')\n")
    assert litter(checkout, ("tests/unit/test_planted.py",), tmp_path / "basetemp") == ["+ mlflow.db",
                                                                                       "+ slurm-8.out"]


def test_the_comparison_sees_a_new_a_changed_and_a_removed_file_but_not_a_cache(tmp_path):
    (tmp_path / "a.py").write_text("a")
    (tmp_path / "b.py").write_text("b")
    (tmp_path / "__pycache__").mkdir()
    before = files(tmp_path)
    (tmp_path / "a.py").write_text("changed")
    (tmp_path / "b.py").unlink()
    (tmp_path / "mlflow.db").write_text("")
    (tmp_path / "__pycache__" / "a.pyc").write_text("")
    assert changes(before, files(tmp_path)) == ["+ mlflow.db", "- b.py", "~ a.py"]
