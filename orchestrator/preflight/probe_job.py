"""What a preflight probe job runs on its compute node (issue 31): `probe(spec_file)` reads the spec the login node
wrote (orchestrator/preflight/probes.py), runs the checks a cell of its resource group would need to pass, and writes
one JSON report beside the spec. It writes nowhere else: not the ledger, not a run directory, not the sweep's
MLflow experiment (its tracking check uses an experiment of its own, `preflight`). It never loads weights.

Each check is `{"check", "ok", "words", "fix"}`; a check that raises is a failed check, never a failed job, so the
login node gets every row even when the node is badly broken.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import os
import shutil
import socket
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

from orchestrator.cluster.entry import is_rank0, write_json
from orchestrator.cluster.paths import NAMED_MODELS, hub_snapshot, missing_parts
from record.tracking.store import write_and_read

# What a cell's jobs import: training (torch, DeepSpeed, transformers), evaluation (vLLM, lm-eval), tracking.
IMPORTS = ("torch", "deepspeed", "vllm", "lm_eval", "transformers", "mlflow")


def check(name: str, ok: bool, words: str, fix: str = "") -> dict:
    return {"check": name, "ok": bool(ok), "words": words, "fix": "" if ok else fix}


def probe(spec_file: str) -> dict:
    """Run the spec's checks here and write `spec["report"]` (rank 0 only; a multi-node probe runs on every task)."""
    spec = json.loads(Path(spec_file).read_text(encoding="utf-8"))
    if spec["kind"] == "watcher":
        checks = [sbatch_check(spec["watcher_flags"]), disk_check(spec)]
    else:
        found = imports()
        checks = [*found, gpus_check(spec["gpus_per_node"]), *[model_check(m) for m in spec["models"]],
                  *[data_check(f) for f in spec["data"]], *[tracking_check(u) for u in spec["tracking"]],
                  disk_check(spec)]
    report = {"group": spec["group"], "node": socket.gethostname(), "job": os.environ.get("SLURM_JOB_ID"),
              "checks": checks}
    if is_rank0():
        write_json(Path(spec["report"]), report)
    return report


def imports(names: tuple[str, ...] = IMPORTS) -> list[dict]:
    out = []
    for name in names:
        try:
            module = importlib.import_module(name)
        except Exception as err:  # noqa: BLE001 - any failure to import is the row (a missing .so, a CUDA mismatch)
            out.append(check(f"import {name}", False, f"{type(err).__name__}: {str(err)[:300]}",
                             "install the GPU stack into the jobs' interpreter (`make setup-gpu`, "
                             "constraints-gpu.txt) or set the profile's site.python / site.setup to one that has it"))
            continue
        words = getattr(module, "__version__", None) or _version(name)
        if name == "torch":
            words = f"{words}; CUDA available: {module.cuda.is_available()} (CUDA {module.version.cuda})"
        out.append(check(f"import {name}", True, str(words)))
    return out


def _version(name: str) -> str:
    try:
        return importlib.metadata.version(name.replace("_", "-"))
    except importlib.metadata.PackageNotFoundError:
        return "imported (version unknown)"


def gpus_check(asked: int) -> dict:
    try:
        import torch  # noqa: PLC0415 - on the node only, after the import check
        visible = torch.cuda.device_count()
    except Exception as err:  # noqa: BLE001
        return check("gpus", asked == 0, f"cannot count GPUs ({type(err).__name__}: {err}); {asked} asked per node",
                     "the jobs' torch cannot see the GPUs: check the driver and the site's module loads")
    where = os.environ.get("CUDA_VISIBLE_DEVICES", "unset")
    return check("gpus", visible >= asked, f"{visible} visible (CUDA_VISIBLE_DEVICES={where}), {asked} asked per node",
                 "each task must see every GPU of its node (the trainer takes cuda:LOCAL_RANK): check "
                 "gpus_per_node, the site's GPU request form and srun flags (site:, no per-task GPU binding) and the "
                 "partition's GPUs (`sinfo -o '%P %G'`)")


def model_check(name: str) -> dict:
    """The model's config, tokenizer and weight files present, read offline, as the resolver reads them."""
    label = f"model {name}"
    if name in NAMED_MODELS:
        return check(label, True, "built by the job from the project's own source where missing "
                     "(trainer/model/source.py)")
    path = Path(name)
    if path.suffix == ".gguf":
        return check(label, path.is_file(), "the GGUF file is there" if path.is_file() else "no such file",
                     "give a GGUF file every node can read")
    if not path.is_absolute():  # a hub id the login node did not find cached: look here, offline
        snapshot = hub_snapshot(name)
        if snapshot is None:
            return check(label, False, "not in this node's Hugging Face cache (HF_HUB_CACHE)",
                         "run `orchestrate models fetch` on a login node into a cache the nodes share (HF_HOME)")
        path = snapshot
    missing = missing_parts(path)
    return check(label, not missing, f"config, tokenizer and weights in {path}" if not missing else
                 f"{path} has no {', '.join(missing)}",
                 "give a directory that save_pretrained wrote (config.json, tokenizer, weights), on a filesystem "
                 "the nodes mount, or fetch the model (`orchestrate models fetch`)")


def data_check(file: str) -> dict:
    try:
        with open(file, "rb") as f:
            rows = sum(1 for line in f if line.strip())
    except OSError as err:
        return check(f"data {file}", False, f"cannot read it here: {err.strerror or err}",
                     "put the data on a filesystem the nodes mount (`orchestrate data prepare --out DIR`, "
                     "COMEDY_DATA) or fix data.train_path / data.val_path")
    return check(f"data {file}", rows > 0, f"{rows} rows", "the file is empty: prepare the data again")


def tracking_check(uri: str) -> dict:
    """A test write and read from this node, in the store's own `preflight` experiment (never the sweep's). No URI:
    the job's MLFLOW_TRACKING_URI (one with credentials stays out of config.yaml and out of the spec)."""
    label = f"tracking {uri or '$MLFLOW_TRACKING_URI'}"
    uri = uri or os.environ.get("MLFLOW_TRACKING_URI", "")
    try:
        return check(label, True, write_and_read(uri))
    except Exception as err:  # noqa: BLE001 - whatever the store answers (or the network) is the row
        return check(label, False, f"from node {socket.gethostname()}: {type(err).__name__}: "
                     f"{' '.join(str(err).split())[:300]}", tracking_fix(uri))


def tracking_fix(uri: str) -> str:
    # A loopback URI passes the login node's own check and names, on every other node, that node itself.
    host = urlsplit(uri).hostname or ""
    if host == "localhost" or host.startswith("127.") or host == "::1":
        return (f"{host} on a compute node is that node itself: give the jobs the address the compute nodes reach "
                "(the Slurm profile's tracking_uri, e.g. the URI `orchestrate tracking up --host 0.0.0.0` prints, "
                "which names the login node's host)")
    return ("the nodes cannot use the store: bind the server to an address they reach (`orchestrate tracking up "
            "--host 0.0.0.0`) and name that address (the Slurm profile's tracking_uri), open its port, check its "
            "credentials, or use a store on a filesystem the nodes share")


def disk_check(spec: dict) -> dict:
    """The run directory's filesystem, from the node: a file written and read back, free space against the plan."""
    here, need = Path(spec["report"]).parent, int(spec["need_bytes"])
    test = here / f".write-test-{spec['group']}-{os.getpid()}"
    label = f"run dir {spec['root']}"
    try:
        test.write_bytes(b"preflight\n" * 1000)
        ok = test.read_bytes() == b"preflight\n" * 1000
        free = shutil.disk_usage(here).free
    except OSError as err:
        return check(label, False, f"cannot write there from this node: {err.strerror or err}",
                     "set sweep.output_root to a writable directory every node mounts")
    finally:
        test.unlink(missing_ok=True)
    enough = free >= need
    return check(label, ok and enough, f"written and read back; {free / 1e9:,.2f} GB free, the plan needs "
                 f"{need / 1e9:,.2f} GB at the peak",
                 "put sweep.output_root on a larger filesystem, lower array_parallelism or checkpoint.keep_last, "
                 "split the sweep, or (you know the filesystem) submit with --ignore-disk-peak")


def sbatch_check(flags: list[str]) -> dict:
    """`sbatch --test-only` from the watcher's node, with the watcher's own flags (it resubmits from there)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_"))}
    try:
        done = subprocess.run(["sbatch", "--test-only", *flags, "--ntasks=1", "--cpus-per-task=1", "--wrap=true"],
                              capture_output=True, text=True, timeout=60, check=False, env=env)
    except (OSError, subprocess.TimeoutExpired) as err:
        return check("sbatch from the watcher's node", False, str(err),
                     "the watcher resubmits cells from its node: put sbatch on PATH there (site.setup)")
    words = " ".join((done.stderr + done.stdout).split())
    return check("sbatch from the watcher's node", done.returncode == 0, words,
                 "the watcher resubmits cells from its node: give it a partition whose nodes can submit jobs")
