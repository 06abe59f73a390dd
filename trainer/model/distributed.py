"""Process group and DeepSpeed ZeRO-3 setup, the same code on a GPU cluster and on CPU ranks.

Under Slurm (srun, one task per GPU) the rank layout comes from SLURM_* variables; standalone (`orchestrate train`
in a shell) it is one rank on localhost. On CPU, DeepSpeed runs with DS_ACCELERATOR=cpu over gloo (docs/trainer.md,
"Distributed"); the process group is always destroyed before exit, or the interpreter
aborts ("terminate called without an active exception").
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from trainer.model import build_lock


@dataclass(frozen=True)
class DistInfo:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0


_STANDALONE_KEYS: dict[str, str] = {}  # what a standalone init put in os.environ, removed by teardown
_SENTINELS: list[build_lock.Sentinel] = []  # the build-lock watch of an init, stopped by teardown


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _slurm_env() -> dict[str, str] | None:
    """torch.distributed's env:// variables from an srun step's SLURM_* variables (None outside srun)."""
    if "SLURM_PROCID" not in os.environ or "SLURM_NTASKS" not in os.environ:
        return None
    nodes = os.environ.get("SLURM_JOB_NODELIST") or os.environ.get("SLURM_NODELIST", "localhost")
    try:
        master = subprocess.run(["scontrol", "show", "hostnames", nodes], capture_output=True, text=True,
                                check=True).stdout.split()[0]
    except (OSError, subprocess.CalledProcessError, IndexError):
        master = nodes.split(",")[0]
    job = int(os.environ.get("SLURM_JOB_ID", "0"))
    return {
        "RANK": os.environ["SLURM_PROCID"],
        "WORLD_SIZE": os.environ["SLURM_NTASKS"],
        "LOCAL_RANK": os.environ.get("SLURM_LOCALID", "0"),
        "MASTER_ADDR": master,
        # Same port on every rank, different for jobs sharing a node.
        "MASTER_PORT": str(20000 + job % 20000),
    }


def setup_environment(cache_dir: Path) -> None:
    """Choose the accelerator before DeepSpeed is imported, and keep its JIT builds in the project cache."""
    if not torch.cuda.is_available():
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(cache_dir / "torch_extensions"))


def _say(text: str) -> None:
    print(text, flush=True)  # a job log read while the job waits


def init(cache_dir: Path) -> DistInfo:
    """Initialise the process group (gloo on CPU, nccl on GPU) through DeepSpeed, from Slurm or standalone."""
    setup_environment(cache_dir)
    # Under srun, Slurm's layout wins over anything inherited: sbatch exports the submitting shell's environment,
    # which may hold a standalone run's RANK/MASTER_PORT. Standalone, one rank on a fresh port, undone at teardown.
    env = _slurm_env()
    if env is None and "RANK" not in os.environ:
        env = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": str(_free_port())}
        _STANDALONE_KEYS.update(env)
    os.environ.update(env or {})
    # A build lock left by a job killed mid-build would hold DeepSpeed's first op load for ever
    # (trainer/model/build_lock.py).
    extensions = Path(os.environ["TORCH_EXTENSIONS_DIR"])
    build_lock.clear(extensions, say=_say)
    if not _SENTINELS:
        _SENTINELS.append(build_lock.Sentinel(extensions, say=_say).start())
    # Here, not at the top: DeepSpeed picks its accelerator when first imported, so after setup_environment.
    import deepspeed  # noqa: PLC0415

    cuda = torch.cuda.is_available()
    if not torch.distributed.is_initialized():
        deepspeed.init_distributed(dist_backend="nccl" if cuda else "gloo")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    return DistInfo(torch.distributed.get_rank(), torch.distributed.get_world_size(), local, device)


def teardown() -> None:
    """Destroy the process group, and forget DeepSpeed's cached groups of it, so that a later `init` in the
    same process (a test, a notebook) starts clean instead of broadcasting over a destroyed group."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    for key, value in list(_STANDALONE_KEYS.items()):
        if os.environ.get(key) == value:
            del os.environ[key]
    _STANDALONE_KEYS.clear()
    while _SENTINELS:
        _SENTINELS.pop().stop()
    groups = sys.modules.get("deepspeed.utils.groups")
    if groups is not None:
        for name in ("_WORLD_GROUP", "_ZERO_PARAM_INTRA_PARALLEL_GROUP", "_TENSOR_MODEL_PARALLEL_GROUP",
                     "_MODEL_PARALLEL_GROUP", "_DATA_PARALLEL_GROUP"):
            setattr(groups, name, None)
        for name in ("_EXPERT_PARALLEL_GROUP", "_EXPERT_PARALLEL_GROUP_RANKS", "_EXPERT_DATA_PARALLEL_GROUP",
                     "_EXPERT_DATA_PARALLEL_GROUP_RANKS", "_ALL_TO_ALL_GROUP"):
            getattr(groups, name).clear()


def deepspeed_config(*, bf16: bool, grad_clip: float | None, micro_batches: int,
                     memory_efficient_linear: bool = True) -> dict:
    """ZeRO stage 3 for the policy. We feed DeepSpeed our own micro-batches and whole-batch loss denominators,
    so its loss scaling by the accumulation count is switched off at backward (scale_wrt_gas=False).

    `memory_efficient_linear` (DeepSpeed's default) replaces torch.nn.functional.linear process-wide with an
    autograd Function that re-gathers weights in backward: it saves GPU memory on large models, and on CPU only
    costs time, in every linear of every module (the frozen reference and generation included). The trainer turns
    it off on CPU (docs/trainer.md, "Speed")."""
    return {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": micro_batches,
        "zero_optimization": {"stage": 3, "stage3_gather_16bit_weights_on_model_save": True,
                              "memory_efficient_linear": memory_efficient_linear},
        "bf16": {"enabled": bf16},
        "gradient_clipping": grad_clip or 0.0,
        "zero_allow_untested_optimizer": True,
        "wall_clock_breakdown": False,
        "steps_per_print": 10**9,
    }


@contextlib.contextmanager
def serial_helper_threads(gpu: bool):
    """Around deepspeed.initialize on CPU: torch's intra-op threads set to one while it runs, so that the gloo
    threads it starts (collectives run there) take one thread each for their copies, for good.

    Why: a thread's first parallel op sizes its OpenMP team from torch's thread count then. A gloo thread that
    starts a team of two makes GNU OpenMP count more threads than cores, and from then on every team in the process
    sleeps at a barrier instead of spinning: on 2 cores, 97,000 sleeps in three SmolLM2 rollouts that had ~200, and
    generation 4.4 s instead of 3.8 s (docs/trainer.md, "Speed"). Gloo's own copies then run on one core each; the
    step measured faster as a whole. On GPU a no-op."""
    threads = torch.get_num_threads()
    if not gpu:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def hook_whole_layers(model) -> None:
    """Make each decoder layer (the classes HF lists in `_no_split_modules`) a ZeRO-3 leaf: DeepSpeed then hooks,
    fetches and releases a layer as one unit instead of each of its ~10 submodules. Gradients are unchanged
    (tests/integration/test_trainer.py checks the weights); on CPU the per-module hooks are most of a small
    model's step overhead, and this cuts the policy's forward + backward by about a fifth (docs/trainer.md)."""
    from deepspeed.utils import set_z3_leaf_modules  # noqa: PLC0415 - after init chose the accelerator, as above

    names = set(getattr(model, "_no_split_modules", None) or ())
    classes = list({type(m) for m in model.modules() if type(m).__name__ in names})
    if classes:
        set_z3_leaf_modules(model, classes)


def all_reduce_sum(values: list[float], device: torch.device) -> list[float]:
    """Sum scalars over ranks (whole-batch token counts, metric totals); identity on one rank."""
    t = torch.tensor(values, dtype=torch.float64, device=device)
    if torch.distributed.is_initialized() and torch.distributed.get_world_size() > 1:
        torch.distributed.all_reduce(t)
    return t.tolist()


def all_reduce_max(values: list[float], device: torch.device) -> list[float]:
    t = torch.tensor(values, dtype=torch.float64, device=device)
    if torch.distributed.is_initialized() and torch.distributed.get_world_size() > 1:
        torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
    return t.tolist()
