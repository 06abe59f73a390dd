"""Two nodes on one machine (`slurm/local-cluster up --nodes 2`): the second slurmd is its own host, and a training
cell laid out as 2 nodes x 1 rank logs what 1 node x 2 ranks logs, and resumes across placements. A cell on node 2
logs through the address the profile names, and preflight's probes on node 2 fail a tracking URI (127.0.0.1) that
only the login node reaches.

The module brings the second node up and, when it is done, restores the one-node cluster every other test module
expects. Where this machine cannot make network namespaces the tests skip, naming what they would need.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.support.fault_row import histories, measured
from tests.support.fault_sweep import REAL, REAL_CELL, FaultSweep, job_environment
from tests.support.slurm_jobs import TrainFromYaml
from tests.support.slurm_queue import step_pids
from tests.support.trainer_run import config_dict, history

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.two_nodes]
ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "slurm" / "local-cluster"
EXIT_NO_NAMESPACES = 3  # slurm/node2.sh
PAIR = "pair"


@dataclass(frozen=True)
class TwoNodes:
    partition: str  # both nodes
    nodes: tuple[str, str]


def _up(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(CLUSTER), "up", *args], capture_output=True, text=True, timeout=1200)


@pytest.fixture(scope="module")
def two_nodes(slurm_cluster) -> Iterator[TwoNodes]:
    proc = _up("--nodes", "2")
    if proc.returncode == EXIT_NO_NAMESPACES:
        pytest.skip(f"no second node: {proc.stderr.strip()} (needs root with CAP_NET_ADMIN and CAP_SYS_ADMIN)")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    yield TwoNodes(PAIR, (slurm_cluster.hostname, f"{slurm_cluster.hostname}-node2"))
    restored = _up("--nodes", "1")  # the one-node cluster again for the tests after this module
    assert restored.returncode == 0, restored.stdout + restored.stderr


@pytest.fixture
def pair(two_nodes) -> TwoNodes:
    """Each test finds the second node up (an `up --nodes 1` elsewhere may have removed it meanwhile)."""
    proc = _up("--nodes", "2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return two_nodes


def _srun(partition: str, *cmd: str, nodes: int = 2) -> list[str]:
    out = subprocess.run(["srun", "-p", partition, f"-N{nodes}", "--ntasks-per-node=1", "-c1", "--mem=200",
                          "-t", "2", "-l", *cmd], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stdout + out.stderr
    return sorted(out.stdout.splitlines())


def test_the_second_node_is_its_own_host_and_one_node_jobs_stay_on_the_first(pair):
    first, second = pair.nodes
    # One task per node, each on its own host with its own address; srun on node 1 gathers node 2's output.
    lines = _srun(pair.partition, "bash", "-c", "echo $(hostname) $(ip -o -4 addr show scope global | wc -l)")
    assert [line.split()[1] for line in lines] == [first, second]
    assert lines[1].split()[2] == "1"  # node 2 sees only its own veth: a network of its own
    # Node 2 reaches node 1 by its name (its own /etc/hosts), the controller by its own slurm.conf.
    lines = _srun(pair.partition, "bash", "-c", "getent hosts $(echo $SLURM_JOB_NODELIST | cut -d, -f1)"
                                                " && scontrol ping | grep -c UP")
    assert "10.213.2.1" in " ".join(lines)
    parts = subprocess.run(["sinfo", "-h", "-o", "%P %N"], capture_output=True, text=True, check=True).stdout
    nodes_of = {p.rstrip("*"): n for p, n in (line.split() for line in parts.splitlines())}
    assert second not in nodes_of["local"] and second not in nodes_of["service"]
    assert second in subprocess.run(["sinfo", "-h", "-p", PAIR, "-N", "-o", "%N"], capture_output=True,
                                    text=True, check=True).stdout


def test_up_again_is_a_fast_no_op(pair):
    started = time.monotonic()
    proc = _up("--nodes", "2")
    assert proc.returncode == 0 and "already up" in proc.stdout, proc.stdout + proc.stderr
    assert time.monotonic() - started < 5


# --- a training cell over two hosts ------------------------------------------------------------------------

STEPS = 8


def _config(tmp: Path) -> Path:
    d = config_dict(tmp, {"estimator": "k3", "placement": "loss", "beta": 0.1},
                    optim={"steps": STEPS, "batch_prompts": 4, "minibatch_prompts": 4},
                    checkpoint={"every": 1, "keep_last": 2})
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "run.yaml").write_text(yaml.safe_dump(d))
    return tmp / "run.yaml"


def _submit(tmp: Path, partition: str, nodes: int, tasks_per_node: int, run_dir: Path, requeue: bool = True):
    import submitit

    ex = submitit.AutoExecutor(folder=str(tmp / "logs"), cluster="slurm")
    ex.update_parameters(slurm_partition=partition, nodes=nodes, tasks_per_node=tasks_per_node, cpus_per_task=1,
                         mem_gb=4, timeout_min=15, slurm_additional_parameters={} if requeue else {"no-requeue": True},
                         slurm_setup=[f"export PYTHONPATH={ROOT}", "export DS_ACCELERATOR=cpu", f"cd {ROOT}"])
    return ex.submit(TrainFromYaml(), str(_config(tmp)), str(run_dir))


def _latest_step(run_dir: Path) -> int:
    latest = run_dir / "checkpoints" / "latest.json"
    return json.loads(latest.read_text())["step"] if latest.exists() else 0


def _assert_same_history(want: dict, got: dict) -> None:
    """Every metric but wall-clock timings (perf/), step for step and bitwise: a sum over 2 ranks is the same
    sum whichever hosts the ranks are on. No step logged twice, none missing."""
    assert set(want) == set(got)
    for key, points in got.items():
        steps = [s for s, _ in points]
        assert steps == sorted(set(steps)), f"{key}: a step was logged twice: {steps}"
        assert steps == [s for s, _ in want[key]], f"{key}: steps differ"
        if not key.startswith("perf/"):
            assert points == want[key], f"{key} differs"


def _key(tmp: Path) -> str:
    from orchestrator.launch.foreground import load_run_config
    from record.identity.run_key import run_key

    return run_key(load_run_config(tmp / "run.yaml", []))


def _hosts(job_id: str) -> str:
    return subprocess.run(["sacct", "-j", job_id, "-X", "-n", "-o", "NodeList%40"], capture_output=True,
                          text=True).stdout.strip()


def test_two_nodes_log_what_one_node_logs_and_resume_on_the_other_layout(pair, tmp_path):
    one = tmp_path / "one_node"  # 1 node x 2 ranks, undisturbed: the reference
    two = tmp_path / "two_nodes"  # 2 nodes x 1 rank, undisturbed
    moved = tmp_path / "moved"  # 2 nodes x 1 rank, cancelled after a checkpoint, resumed as 1 node x 2 ranks
    ref = _submit(one, "local", 1, 2, one / "run")
    spread = _submit(two, pair.partition, 2, 1, two / "run")
    # --no-requeue: killed, it must stay down (with requeue, something asked `scontrol requeue` as it died and it
    # ran on to its end on two nodes before the test saw it end).
    cut = _submit(moved, pair.partition, 2, 1, moved / "run", requeue=False)
    # Frozen at step 2 (SIGSTOP to its tasks on both hosts), then killed. On an idle machine a step takes ~0.2 s:
    # a scancel goes through slurmctld and slurmd and landed after the last step; so the tasks are found once the
    # first checkpoint is there, and stopped directly the moment latest.json says 2.
    deadline = time.monotonic() + 600
    while _latest_step(moved / "run") < 1:
        assert time.monotonic() < deadline and not cut.done(), f"no checkpoint at step 1; sacct: {_hosts(cut.job_id)}"
        time.sleep(0.05)
    tasks = step_pids(cut.job_id)
    assert tasks, f"no task of job {cut.job_id} found"
    while _latest_step(moved / "run") < 2:
        assert time.monotonic() < deadline and not cut.done(), f"no checkpoint at step 2; sacct: {_hosts(cut.job_id)}"
        time.sleep(0.002)
    for pid in tasks:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)
    subprocess.run(["scancel", "--signal=KILL", "--full", cut.job_id], check=True)
    while not cut.done():
        assert time.monotonic() < deadline, f"{cut.job_id} still runs after SIGKILL"
        time.sleep(0.5)
    killed_at = _latest_step(moved / "run")
    assert ref.results() and spread.results()
    assert _hosts(spread.job_id) == ",".join(pair.nodes)

    # Both hosts' ranks wrote the checkpoint: one ZeRO-3 shard each.
    tag = json.loads((two / "run" / "checkpoints" / "latest.json").read_text())["tag"]
    shards = sorted((two / "run" / "checkpoints" / tag).glob("zero_pp_rank_*_model_states.pt"))
    assert len(shards) == 2, shards
    want = history(one, _key(one))
    _assert_same_history(want, history(two, _key(two)))

    assert 2 <= killed_at < STEPS
    resumed = _submit(moved, "local", 1, 2, moved / "run")
    assert resumed.results()
    assert _latest_step(moved / "run") == STEPS
    _assert_same_history(want, history(moved, _key(moved)))


# --- the fault matrix's two-node row (docs/reliability.md) -------------------------------------------------------

@pytest.mark.fault_matrix
@pytest.mark.reliability
def test_a_node_set_down_under_a_two_node_job_is_resumed_and_matches_an_undisturbed_run(pair, tmp_path_factory):
    """A cell on 2 nodes x 1 rank, launched as a user does (its watcher job in `service`), loses node 2 after its
    step-2 checkpoint: NODE_FAIL. Once the node is back, the run resumes from that checkpoint (Slurm's requeue in
    place, or the watcher's resubmission) and ends with the metrics of an undisturbed run, every step once. The
    undisturbed run is the same cell on 1 node x 2 ranks, which logs bitwise what 2 x 1 logs (the test above)."""
    started = time.monotonic()
    job_environment()
    second = pair.nodes[1]
    layout = ("sweep.slurm.overrides.cpus_per_task=1",)
    across = (*REAL_CELL, *layout, f"sweep.slurm.overrides.partition={pair.partition}",
              "sweep.slurm.overrides.nodes=2", "sweep.slurm.overrides.tasks_per_node=1")
    reference = FaultSweep(tmp_path_factory.mktemp("one-node"), (*REAL_CELL, *layout,
                           "sweep.slurm.overrides.tasks_per_node=2"), REAL, max_retries=0)
    fs = FaultSweep(tmp_path_factory.mktemp("two-nodes"), across, REAL)
    try:
        reference.launch()  # on partition local: node 2 going down does not touch it
        fs.launch()
        # Stopped on both hosts at its step-2 checkpoint, then the node set down: the job cannot have finished
        # first (idle, a step takes ~0.2 s); its processes run on (into Slurm's kill) once Slurm saw NODE_FAIL.
        frozen = fs.freeze_at_checkpoint(2, timeout_s=1200)
        job = frozen.job_id
        subprocess.run(["scontrol", "update", f"nodename={second}", "state=down", "reason=fault matrix"], check=True)
        deadline = time.monotonic() + 120
        while "NODE_FAIL" not in subprocess.run(["sacct", "-j", job, "-D", "-X", "-n", "-o", "State"],
                                                capture_output=True, text=True).stdout:
            assert time.monotonic() < deadline, f"{job} not NODE_FAIL after {second} went down"
            time.sleep(0.5)
        frozen.thaw()
        # The node back (ReturnToService may have brought it back already: then resume is refused, harmlessly).
        subprocess.run(["scontrol", "update", f"nodename={second}", "state=resume"], capture_output=True)
        undisturbed = reference.follow(timeout_s=1800)
        assert undisturbed["final"]["status"] == "completed", undisturbed["decisions"]
        fs.follow(timeout_s=1800)
    finally:
        subprocess.run(["scontrol", "update", f"nodename={second}", "state=resume"], capture_output=True)
        reference.cancel_leftovers()
        fs.cancel_leftovers()
    nodes = subprocess.run(["sacct", "-j", job, "-X", "-n", "-P", "-o", "NodeList"], capture_output=True,
                           text=True).stdout
    assert second in nodes, nodes  # it did run across both hosts
    measured("node-fail-2-nodes", "a node set down under a running 2-node job (NODE_FAIL)",
             f"`scontrol update nodename={second} state=down` with a 2 nodes x 1 rank cell stopped (SIGSTOP) at "
             f"its step-{frozen.latest['step']} checkpoint; the node resumed once the job failed", fs,
             histories(reference.run_dir), started)


# --- a cell on node 2, logging to the tracking server through the address the profile names (issue 30, item 6) ---

def _reaches(node: str, partition: str, host: str, port: int) -> bool:
    """Whether a process on `node` opens a TCP connection to host:port (bash's /dev/tcp: nothing to install)."""
    out = subprocess.run(["srun", "-p", partition, "-w", node, "-N1", "-n1", "-c1", "--mem=100", "-t", "1", "bash",
                          "-c", f"timeout 5 bash -c 'echo > /dev/tcp/{host}/{port}' && echo open || echo closed"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() in ("open", "closed"), out.stdout + out.stderr
    return out.stdout.strip() == "open"


@pytest.mark.reliability
def test_a_cell_on_the_second_node_logs_every_step_through_the_profiles_tracking_address(pair, tmp_path):
    """`orchestrate tracking up --host 0.0.0.0` on node 1 (the login node), whose URI names the machine (`vm`):
    node 2's network reaches it only there (127.0.0.1 is node 2's own loopback). A Slurm profile naming that URI as
    its `tracking_uri`, and nothing in the sweep: `orchestrate sweep` puts it into the cell's config, the cell trains
    on node 2 (the tiny model under DeepSpeed) and MLflow holds every step once, nothing left buffered."""
    from orchestrator.cluster.executor import SlurmBackend  # noqa: PLC0415
    from orchestrator.cluster.options import load_options  # noqa: PLC0415
    from orchestrator.launch.ledger import Ledger, latest  # noqa: PLC0415
    from orchestrator.tracking.postgres import free_port  # noqa: PLC0415
    from orchestrator.tracking.server import down, up  # noqa: PLC0415
    from orchestrator.watch.watcher import Watcher  # noqa: PLC0415
    from record.rundir import RunDir  # noqa: PLC0415
    from tests.support.slurm_queue import cancel_named  # noqa: PLC0415
    from tests.support.tracking_server import open_tmp_dir  # noqa: PLC0415
    from trainer.model.tiny_model import ensure_tiny_model  # noqa: PLC0415

    ensure_tiny_model()  # built once per machine (minutes): not inside the launch's time limit below
    started = time.monotonic()
    second = pair.nodes[1]
    data_dir = open_tmp_dir("node2-tracking") / "data"
    state = up(data_dir, host="0.0.0.0", port=free_port(), workers=1, install=False, say=lambda _: None)
    name = f"n{os.getpid()}{int(time.time()) % 100000}"
    try:
        uri = state.uri()
        host = uri.split("//", 1)[1].rsplit(":", 1)[0]
        assert _reaches(second, pair.partition, host, state.port)
        assert not _reaches(second, pair.partition, "127.0.0.1", state.port)  # only through the profile's address
        profile = yaml.safe_load((ROOT / "slurm" / "profiles" / "local.yaml").read_text())
        profile.update(partition=pair.partition, cpus_per_task=1, tasks_per_node=1, mem_gb=2, tracking_uri=uri,
                       site={"sbatch": {"nodelist": second}})  # every job of the sweep on node 2
        profile["eval"].update(cpus_per_task=1, mem_gb=0.5)
        (tmp_path / "node2.yaml").write_text(yaml.safe_dump(profile))
        env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK",
                                                                 "MLFLOW_TRACKING_URI")}
        env["OMP_NUM_THREADS"] = "1"
        done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "sweep", str(ROOT / "sweeps" / "smoke.yaml"),
                               f"sweep.name={name}", f"sweep.output_root={tmp_path}", "~sweep.grid",  # 1 cell
                               "kl.estimator=k3", "kl.placement=loss",
                               f"sweep.slurm.profile={tmp_path / 'node2.yaml'}", f"optim.steps={STEPS}",
                               "--no-watcher", "--eval-entry", "orchestrator.jobs:probe_eval"],
                              cwd=tmp_path, capture_output=True, text=True, env=env, timeout=600)
        assert done.returncode == 0, done.stdout + done.stderr
        sweep_dir = tmp_path / name
        ledger = Ledger(sweep_dir)
        [key] = ledger.records()
        # the cell's config (its array's file until the job writes config.yaml: issue 25) carries the profile's URI
        assert RunDir(sweep_dir / key).read_config()["tracking"]["tracking_uri"] == uri
        with ledger.lock("the two-node tracking test", wait_s=60.0) as keep_alive:
            records = Watcher(ledger, SlurmBackend(sweep_dir, load_options(sweep_dir)), 0, log=print).run(
                poll_s=2.0, timeout_s=900, keep_alive=keep_alive)
        record = records[key]
        assert record["final"] and record["final"]["status"] == "completed", record
        assert _hosts(latest(record, "train")["job_id"]) == second
        got = histories(sweep_dir / key)
        assert got, "nothing reached MLflow"
        for metric, points in got.items():
            steps = [s for s, _ in points]
            assert steps == sorted(set(steps)), f"{metric}: a step logged twice: {steps}"
        assert len({s for s, _ in got["train/loss"]}) == STEPS, got["train/loss"]
        assert not (sweep_dir / key / "tracking_buffer.jsonl").exists()  # nothing waiting for a later delivery
    finally:
        cancel_named(name)
        down(data_dir, say=lambda _: None)
        shutil.rmtree(data_dir.parent, ignore_errors=True)
    print(f"a cell on {second} through {uri}: {time.monotonic() - started:.0f} s")


# --- preflight: a tracking server only the login node reaches (issue 31, a planted fault) ----------------------

@pytest.fixture
def node2_only(pair) -> Iterator[str]:
    """A partition of node 2 alone, this test's own: the sweep's arrays (and so their probes) run on node 2, while
    its watcher's probe stays on node 1 (`service`, the profile's watcher partition)."""
    name = f"n2only{os.getpid()}"
    subprocess.run(["scontrol", "create", f"PartitionName={name}", f"Nodes={pair.nodes[1]}", "MaxTime=INFINITE",
                    "State=UP"], check=True, capture_output=True)
    try:
        yield name
    finally:
        subprocess.run(["scontrol", "delete", f"PartitionName={name}"], check=False, capture_output=True)


@pytest.mark.reliability
def test_preflight_fails_a_tracking_uri_that_only_the_login_node_reaches(pair, node2_only, tmp_path):
    """A live MLflow server on node 1 (the login node), listening on every address; the sweep names it as
    `http://127.0.0.1:<port>`. The login node's check passes, and every job would buffer its points on node 2, whose
    127.0.0.1 is its own loopback. Preflight's probes on node 2 say so, each tracking row naming the node and the
    fix (the address the nodes reach), exit 1; nothing of the sweep is written, nothing reaches the store."""
    from mlflow import MlflowClient  # noqa: PLC0415

    from orchestrator.tracking.postgres import free_port  # noqa: PLC0415
    from orchestrator.tracking.server import down, up  # noqa: PLC0415
    from orchestrator.tracking.store import check_stores  # noqa: PLC0415
    from tests.support.probe_sweep import SMALL, orchestrate  # noqa: PLC0415
    from tests.support.tracking_server import open_tmp_dir  # noqa: PLC0415

    started = time.monotonic()
    second = pair.nodes[1]
    data_dir = open_tmp_dir("node2-preflight") / "data"
    state = up(data_dir, host="0.0.0.0", port=free_port(), workers=1, install=False, say=lambda _: None)
    uri = f"http://127.0.0.1:{state.port}"
    name = f"p{os.getpid()}{int(time.time()) % 100000}"
    try:
        check_stores([uri])  # the login node's check (orchestrate sweep's): the server answers here
        done = orchestrate("preflight", str(ROOT / "sweeps" / "smoke.yaml"), f"sweep.name={name}",
                           f"sweep.output_root={tmp_path}", *SMALL, f"sweep.slurm.overrides.partition={node2_only}",
                           f"tracking.tracking_uri={uri}", "--json", "--probe-timeout", "300", cwd=tmp_path,
                           timeout=400)
        assert done.returncode == 1, done.stdout + done.stderr
        rows = json.loads(done.stdout)["rows"]
        failed = [r for r in rows if not r["ok"]]
        assert {r["group"] for r in failed} == {"train-0", "eval-0"}, failed  # the watcher's probe (node 1) passes
        for row in failed:  # the tracking row and nothing else: imports, model, data, run dir pass on node 2
            assert row["check"] == f"tracking {uri}", row
            assert f"from node {second}:" in row["words"], row
            assert "that node itself" in row["fix"] and "tracking_uri" in row["fix"], row
        assert sorted(p.name for p in (tmp_path / name).iterdir()) == ["preflight"]  # nothing of the sweep
        experiments = {e.name for e in MlflowClient(tracking_uri=uri).search_experiments()}
        assert experiments <= {"Default"}, experiments  # not the sweep's, and no probe got through
    finally:
        down(data_dir, say=lambda _: None)
        shutil.rmtree(data_dir.parent, ignore_errors=True)
    print(f"preflight on {second} against {uri}: {time.monotonic() - started:.0f} s")
