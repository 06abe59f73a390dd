"""A sweep on a cluster made as unfriendly as a real one (issue 30), on the project's local Slurm cluster:

- launched by an unprivileged user (`setpriv` to `comedy-user`, created here; not root), from a login shell that
  has `SBATCH_EXPORT=NONE` (a job sees none of the launching shell's variables) and nothing else of ours;
- the profile's site setup in use (`site.setup` lines, `site.env` variables: the caches on "scratch");
- `data: math` with its default paths: small math-schema files where `orchestrate data prepare` puts them
  (<checkout>/data), and a `math_test` evaluation reading the same directory;
- the model given as a local directory (relative to the launch directory), compute nodes offline
  (HF_HUB_OFFLINE=1 from the prologue);
- the checkout renamed the moment `orchestrate sweep` returns: nothing a job reads may come from it.

Every cell trains and evaluates, MLflow holds every step once, one cell killed mid-training is resubmitted by the
watcher job, and that resubmission's recorded environment equals its first launch's. A second, cheaper test does
the same comparison where sbatch exports the submitting environment (the default), the case in which a watcher's
own variables used to reach the jobs it resubmitted.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml

from orchestrator.cluster.environment import differences
from orchestrator.launch.ledger import Ledger, attempts, latest
from orchestrator.launch.materialise import materialise
from orchestrator.launch.plan import make_plan
from orchestrator.sweep.expand import load_sweep
from record.files import config_text
from record.rundir import RunDir
from tests.support.fault_row import histories
from tests.support.slurm_queue import cancel_named, step_pids
from trainer.model.tiny_model import TinyModelConfig, ensure_tiny_model

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
# Real training by an unprivileged user: 4-6 minutes on the loaded 2-core CI machine (a first DeepSpeed op build
# into the site's scratch adds one more), past this share of CI: `make reliability` runs it.
UNFRIENDLY = pytest.mark.reliability

REPO = Path(__file__).resolve().parents[2]
USER = "comedy-user"
# The project's interpreter lives under /root (0700 here), which no user may enter: the site's Python is a copy of
# it in a shared place, reading the project's virtual environment's packages, named by the profile's site.python.
SITE_PYTHON = Path("/opt/comedy-site-python")
# The site's scratch cache of JIT-built ops, kept between runs as a site's would be (a first build takes a minute).
SITE_OPS = Path("/opt/comedy-site-scratch/torch_extensions")
CARRIED = ("orchestrator", "trainer", "eval", "record", "sweeps", "slurm")  # what a checkout copy needs
STEPS = 4
PROBE = ["--train-entry", "orchestrator.jobs:probe_train", "--eval-entry", "orchestrator.jobs:probe_eval"]


def wait(what: str, check, timeout_s: float, every_s: float = 2.0):
    deadline = time.monotonic() + timeout_s
    while not (found := check()):
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s:.0f} s"
        time.sleep(every_s)
    return found


@pytest.fixture(scope="module")
def user(slurm_cluster) -> pwd.struct_passwd:
    """An ordinary account (uid >= 1000, no capabilities), made once on this machine, with a Slurm association."""
    if os.geteuid() != 0:
        pytest.skip("making the unprivileged user needs root (the local cluster itself does too)")
    try:
        pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", USER], check=True)
    # The cluster enforces associations, as real ones do: sbatch refuses a user without one. A real site's admin
    # runs `sacctmgr add user` for each new user; add-user does that here, every session (idempotent), since a
    # fresh accounting database (slurm/local-cluster, reset_accounting) holds only the users `up` adds.
    added = subprocess.run([str(slurm_cluster.script), "add-user", USER], capture_output=True, text=True, timeout=300)
    assert added.returncode == 0, added.stdout + added.stderr
    return pwd.getpwnam(USER)


@pytest.fixture(scope="module")
def site_python() -> Path:
    """`<SITE_PYTHON>/bin/python`: a wrapper (the copied binary's library path is absolute under /root) starting
    a copy of this interpreter and its standard library, with a readable copy of this virtual environment's packages
    on its path: the checkout, and so its venv, may sit in a directory the user cannot enter (mode 700, as /root or
    most home directories are)."""
    wrapper = SITE_PYTHON / "bin" / "python"
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    if not wrapper.is_file():
        base = Path(sys.base_prefix)
        tmp = SITE_PYTHON.with_name(SITE_PYTHON.name + f".{os.getpid()}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        (tmp / "bin").mkdir(parents=True)
        shutil.copy2(Path(sys.base_exec_prefix) / "bin" / version, tmp / "bin" / version)
        shutil.copytree(base / "lib", tmp / "lib", symlinks=True,
                        ignore=shutil.ignore_patterns("site-packages", "test", "pkgconfig"))
        shutil.copytree(base / "include", tmp / "include", symlinks=True)  # Python.h: DeepSpeed builds its CPU op
        (tmp / "lib" / version / "site-packages").mkdir()
        library = f"LD_LIBRARY_PATH={SITE_PYTHON}/lib${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}"
        (tmp / "bin" / "python").write_text(f'#!/bin/sh\n{library} exec {SITE_PYTHON}/bin/{version} "$@"\n')
        (tmp / "bin" / "python").chmod(0o755)
        os.rename(tmp, SITE_PYTHON)
    # It outlives the checkout: its packages are made this run's venv's each time (a deleted clone's venv left it
    # without rich, and `orchestrate` failed to start).
    packages = readable_packages(Path(sys.prefix) / "lib" / version / "site-packages")
    pth = SITE_PYTHON / "lib" / version / "site-packages" / "comedy-venv.pth"
    if not pth.is_file() or pth.read_text().strip() != str(packages):
        tmp = pth.with_name(f".{pth.name}.{os.getpid()}.tmp")
        tmp.write_text(f"{packages}\n")
        os.replace(tmp, pth)
    return wrapper


def readable_packages(venv_packages: Path) -> Path:
    """A copy of the venv's site-packages under SITE_PYTHON that any user can read, made again when the venv is
    another or has changed. Hard links where the filesystem allows (seconds, no space: the files are 0644; only the
    directories on the way were unreadable), a plain copy where it does not."""
    stamp = f"{venv_packages} {venv_packages.stat().st_mtime_ns}"
    copy = SITE_PYTHON / "venv-packages"
    key = SITE_PYTHON / "venv-packages.key"
    if copy.is_dir() and key.is_file() and key.read_text() == stamp:
        return copy
    tmp = copy.with_name(f"{copy.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    if subprocess.run(["cp", "-al", str(venv_packages), str(tmp)], capture_output=True).returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(venv_packages, tmp, symlinks=True)
    old = copy.with_name(f"{copy.name}.{os.getpid()}.old")
    if copy.exists():
        copy.rename(old)
    tmp.rename(copy)
    shutil.rmtree(old, ignore_errors=True)
    key.write_text(stamp)
    return copy


def readable_code(root: Path) -> Path:
    """The project's packages copied where the user can read them (the checkout itself may be private)."""
    code = root / "code"
    for name in CARRIED:
        shutil.copytree(REPO / name, code / name, ignore=shutil.ignore_patterns("__pycache__", ".*"))
    return code


@pytest.fixture
def workspace(user):
    """A directory the user owns (pytest's own tmp dirs are 0700 root): checkout copy, scratch, store."""
    root = Path(f"/tmp/comedy-unfriendly-{uuid.uuid4().hex[:8]}")
    root.mkdir(mode=0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def kill_training(sweep_dir: Path, key: str) -> None:
    """SIGKILL the cell's training processes (a node's OOM killer, say): the watcher resubmits it at its next poll
    (a job cancelled through Slurm would wait out the watcher's grace period first)."""
    job = latest(Ledger(sweep_dir).load(key), "train")["job_id"]
    pids = wait(f"the processes of job {job}", lambda: step_pids(job), timeout_s=60, every_s=0.5)
    for pid in pids:
        os.kill(pid, signal.SIGKILL)


def log_tails(sweep_dir: Path, lines: int = 12) -> str:
    """The end of every job log of the sweep: what a failed assertion shows."""
    out = []
    for log in sorted((sweep_dir / "slurm").glob("*/*_log.*")):
        text = log.read_text(errors="replace").strip().splitlines()[-lines:]
        out.append(f"--- {log.relative_to(sweep_dir)}\n" + "\n".join(text))
    return "\n".join(out)


def as_user(user, command: list[str], cwd: Path, env: dict[str, str], timeout: float = 300):
    """`command` as `user`, with a login-like environment: only what setpriv's --reset-env gives and `env`."""
    return subprocess.run(["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--init-groups",
                           "--reset-env", "env", *(f"{k}={v}" for k, v in env.items()), *command], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


def chown(path: Path, user) -> None:
    subprocess.run(["chown", "-R", f"{user.pw_uid}:{user.pw_gid}", str(path)], check=True)


def unfriendly_site(root: Path, python: Path) -> dict:
    return {"setup": ["echo comedy site setup ran", "export COMEDY_SITE_SETUP=ran"], "python": str(python),
            "env": {"COMEDY_SITE_ENV": "from the profile", "COMEDY_CACHE": str(root / "scratch" / "cache"),
                    "TORCH_EXTENSIONS_DIR": str(SITE_OPS),
                    "HF_HOME": str(root / "scratch" / "hf")},
            "sqlite_jobs": True}  # one machine's local disk here; a real cluster serves the store


def make_checkout(root: Path, user, python: Path) -> Path:
    """A checkout of the project owned by the user, with the unfriendly profile and a prepared math data dir."""
    checkout = readable_code(root).rename(root / "checkout")
    profile = yaml.safe_load((REPO / "slurm" / "profiles" / "local.yaml").read_text())
    profile.update(cpus_per_task=1, array_parallelism=2, site=unfriendly_site(root, python))  # both cells at once
    profile["eval"]["cpus_per_task"] = 1
    (checkout / "slurm" / "profiles" / "unfriendly.yaml").write_text(yaml.safe_dump(profile))
    data = checkout / "data"  # where `orchestrate data prepare` writes by default
    data.mkdir()
    rows = [{"problem": f"What is {a} + {b}?", "answer": str(a + b), "unique_id": f"q{a}{b}"}
            for a in range(1, 5) for b in range(1, 4)]
    for name in ("math_train", "math_test"):
        (data / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    model = root / "models" / "tiny-local"  # a model given as a local directory, outside the checkout
    shutil.copytree(ensure_tiny_model(TinyModelConfig()), model)
    (root / "scratch" / "hf").mkdir(parents=True, exist_ok=True)
    (root / "store").mkdir()
    chown(root, user)
    SITE_OPS.mkdir(parents=True, exist_ok=True)
    chown(SITE_OPS, user)
    return checkout


@UNFRIENDLY
def test_a_sweep_by_an_unprivileged_user_with_export_none_survives_a_renamed_checkout(user, workspace, site_python):
    checkout = make_checkout(workspace, user, site_python)
    name = f"u{uuid.uuid4().hex[:8]}"
    args = [str(Path("sweeps") / "smoke.yaml"), "data=math", "model.name_or_path=../models/tiny-local",
            "model.params_b=null", f"sweep.name={name}", "sweep.output_root=../runs", "sweep.slurm.profile=unfriendly",
            "tracking.tracking_uri=sqlite:///../store/mlflow.db", f"optim.steps={STEPS}", "data.val_every=2",
            "data.val_size=4", "eval.tasks=[tiny,math_test]", "eval.k=2",
            "rollout.max_prompt_tokens=128"]  # the local model's chat template and the math instruction
    env = {"SBATCH_EXPORT": "NONE", "HOME": user.pw_dir}
    try:
        launched = as_user(user, [str(site_python), "-m", "orchestrator.cli", "sweep", "--poll", "2", *args],
                           cwd=checkout, env=env)
        moved = checkout.rename(workspace / "checkout-renamed")  # at once: queued jobs must not need it
        assert launched.returncode == 0, launched.stdout + launched.stderr
        assert "watcher job" in launched.stdout, launched.stdout
        sweep_dir = workspace / "runs" / name
        keys = sorted(Ledger(sweep_dir).records())
        assert len(keys) == 2
        configs = {k: config_text(RunDir(sweep_dir / k).read_config()) for k in keys}
        carried = sweep_dir / "data"
        for text in configs.values():  # every path a job reads, absolute, none in the checkout
            assert f"train_path: {carried}/" in text and f"val_path: {carried}/" in text, text
            assert f"name_or_path: {workspace}/models/tiny-local" in text, text
            assert f"tracking_uri: sqlite:///{workspace}/store/mlflow.db" in text, text

        killed = keys[0]
        try:
            wait("a first checkpoint of the cell to kill", lambda: (sweep_dir / killed / "checkpoints" /
                                                                    "latest.json").exists(), timeout_s=420)
        except AssertionError as err:
            raise AssertionError(f"{err}\n{log_tails(sweep_dir)}") from None
        kill_training(sweep_dir, killed)
        ended = wait("the watcher ending on the settled sweep", lambda: json.loads(
            (sweep_dir / "watcher.json").read_text()).get("ended"), timeout_s=900, every_s=3)
        assert ended["why"] == "the sweep is settled: 2 done", f"{ended}\n{log_tails(sweep_dir)}"

        records = Ledger(sweep_dir).records()
        assert all(r["final"]["status"] == "completed" for r in records.values()), records
        assert [a["state"] for a in attempts(records[killed], "train")] == ["FAILED", "COMPLETED"]
        for key in keys:
            result = json.loads(RunDir(sweep_dir / key).eval_result.read_text())
            assert {"tiny", "math_test"} <= set(result["result"]["tasks"]), result
            got = histories(sweep_dir / key)
            assert got and all(len(v) == len({s for s, _ in v}) for v in got.values()), got  # every step once
            assert len({s for s, _ in got["train/loss"]}) == STEPS, got["train/loss"]

        first, again = sorted((sweep_dir / killed / "env").glob("train-*.json"), key=lambda p: p.stat().st_mtime)
        first, again = json.loads(first.read_text()), json.loads(again.read_text())
        assert differences(first, again) == []
        given = first["env"]
        assert given["USER"] == USER and given["COMEDY_SITE_SETUP"] == "ran"
        assert given["COMEDY_SITE_ENV"] == "from the profile" and given["HF_HUB_OFFLINE"] == "1"
        assert given["COMEDY_DATA"].startswith(str(carried)) and first["omp_num_threads"] == "1"
        assert "SBATCH_EXPORT" not in given  # the launching shell's variables never reached the job
        assert not moved.joinpath("runs").exists() and not (workspace / "checkout").exists()
    finally:
        cancel_named(name)


def probes(args: list[str], cwd: Path, *settings: dict) -> list[str]:
    here = Path.cwd()
    os.chdir(cwd)
    try:
        sweep = load_sweep(args[0], args[1:])
        done = materialise(sweep, make_plan(sweep))
    finally:
        os.chdir(here)
    for cell, probe in zip(sweep.cells, settings):
        (cwd / done.sweep_dir / cell.run_key).mkdir(parents=True, exist_ok=True)  # made by its job (issue 25)
        (cwd / done.sweep_dir / cell.run_key / "probe.json").write_text(json.dumps(probe))
    return [c.run_key for c in sweep.cells]


def test_a_cell_the_watcher_resubmits_gets_its_first_launchs_environment(tmp_path):
    """sbatch exporting the submitter's environment (the default): the watcher job resubmits a killed cell in the
    environment recorded at the sweep's first launch, not its own (its PYTHONPATH, one-CPU OMP_NUM_THREADS)."""
    name = f"e{uuid.uuid4().hex[:8]}"
    args = [str(REPO / "sweeps" / "smoke.yaml"), f"sweep.name={name}", f"sweep.output_root={tmp_path}",
            f"tracking.tracking_uri=sqlite:///{tmp_path / 'mlflow.db'}", "sweep.slurm.overrides.cpus_per_task=1",
            "sweep.slurm.overrides.mem_gb=0.5", "sweep.slurm.overrides.eval.cpus_per_task=1",
            "sweep.slurm.overrides.eval.mem_gb=0.5", "sweep.slurm.overrides.array_parallelism=2"]
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "OMP_NUM_THREADS")}
    killed, _ = probes(args, tmp_path, {"steps": 12, "sleep_s": 0.5}, {"steps": 2, "sleep_s": 0.2})
    try:
        done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "sweep", *args, *PROBE, "--poll", "2"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=240, env=env)
        assert done.returncode == 0, done.stdout + done.stderr
        sweep_dir = tmp_path / name
        wait("the cell's first checkpoint", lambda: (sweep_dir / killed / "checkpoints" / "latest.json").exists(),
             timeout_s=300, every_s=0.5)
        kill_training(sweep_dir, killed)
        wait("the watcher ending on the settled sweep", lambda: json.loads(
            (sweep_dir / "watcher.json").read_text()).get("ended"), timeout_s=420, every_s=2)
        records = Ledger(sweep_dir).load(killed)
        assert [a["state"] for a in attempts(records, "train")] == ["FAILED", "COMPLETED"]
        first, again = sorted((sweep_dir / killed / "env").glob("train-*.json"), key=lambda p: p.stat().st_mtime)
        first, again = json.loads(first.read_text()), json.loads(again.read_text())
        assert differences(first, again) == []
        assert first["omp_num_threads"] == "1" and first["env"]["PYTHONPATH"] == first["env"]["COMEDY_CODE"]
    finally:
        cancel_named(name)


def test_tracking_up_without_root_serves_from_the_postgresql_it_is_given(user, workspace, site_python):
    """`orchestrate tracking up` as the unprivileged user, PostgreSQL's binaries named with --pg-bin (as a
    conda-forge install would give them): the server starts, takes a metric over HTTP, and stops."""
    from mlflow import MlflowClient  # noqa: PLC0415 - mlflow: only this test talks to the server

    from orchestrator.tracking.postgres import ensure_installed, free_port  # noqa: PLC0415

    # Root (the fixture `user` needs it) installs Debian's PostgreSQL on a fresh machine, as `tracking up` would;
    # the unprivileged user is then handed its binaries, as a conda-forge install would give them.
    pg_bin = ensure_installed(True, workspace / "pg-install.log", lambda line: None)
    code = readable_code(workspace)  # not the checkout's: it may sit in a directory the user cannot enter
    chown(workspace, user)
    env = {"HOME": user.pw_dir, "PYTHONPATH": str(code)}
    tracking = workspace / "tracking"
    command = [str(site_python), "-m", "orchestrator.cli", "tracking"]
    try:
        up = as_user(user, [*command, "up", "--data-dir", str(tracking), "--port", str(free_port()), "--pg-bin",
                            str(pg_bin), "--no-install", "--workers", "1"], cwd=workspace, env=env)
        assert up.returncode == 0, up.stdout + up.stderr
        uri = as_user(user, [*command, "status", "--data-dir", str(tracking), "--uri"], cwd=workspace,
                      env=env).stdout.strip()
        assert uri.startswith("http://"), uri
        client = MlflowClient(uri)
        run = client.create_run(client.create_experiment(f"unfriendly-{uuid.uuid4().hex[:6]}")).info.run_id
        client.log_metric(run, "train/loss", 1.0, step=0)
        assert [m.step for m in client.get_metric_history(run, "train/loss")] == [0]
        postgres = [p for p in Path("/proc").iterdir() if p.name.isdigit() and (p / "comm").exists()
                    and (p / "comm").read_text().strip() == "postgres"]
        owners = {p.stat().st_uid for p in postgres if str(tracking) in (p / "cmdline").read_text(errors="replace")
                  .replace("\0", " ")}
        assert owners == {user.pw_uid}, owners  # run by the user, not root
    finally:
        as_user(user, [*command, "down", "--data-dir", str(tracking)], cwd=workspace, env=env)
