"""The reference as a ZeRO-3 inference engine on two real DeepSpeed CPU ranks scores what a full replica does
(trainer/model/memory_knobs.py `build_reference`): sharding moves the weights, never a log-prob."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tests" / "support" / "reference_ranks.py"
# The same fp32 ops on the same full weights (ZeRO-3 gathers each layer whole before its forward): equal to the
# last bit is expected; 1e-6 absolute leaves room for a different BLAS path on another machine.
ATOL = 1e-6


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_sharded_reference_logprobs_equal_the_replicas_on_two_ranks(tmp_path):
    port = _port()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_",
                                                                      "SLURM_"))}
    procs = [subprocess.Popen([sys.executable, str(SCRIPT), str(tmp_path)], cwd=REPO,
                              env={**base, "RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": "2",
                                   "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1"},
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(2)]
    logs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], "\n".join(log[-3000:] for log in logs)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for got in ranks:
        assert got["world"] == 2
        held, whole = got["kinds"].pop("held")
        assert got["kinds"] == {"zero3": "DeepSpeedEngine", "replica": "Qwen2ForCausalLM"}
        assert held <= whole / 2 + 1000, (held, whole)  # half the weights per rank (each tensor padded)
        sharded, replica = got["scores"]["zero3"], got["scores"]["replica"]
        assert len(sharded) == 4
        diff = max(abs(a - b) for ra, rb in zip(sharded, replica) for a, b in zip(ra, rb))
        assert diff <= ATOL, diff
        assert any(v != 0.0 for row in sharded for v in row)
    assert ranks[0]["scores"]["zero3"] != ranks[1]["scores"]["zero3"]  # each rank scored its own rows


def test_memory_knobs_train_the_same_weights(tmp_path):
    """One run with every memory knob turned (checkpointing on, one prompt group per micro-batch by token budget,
    5-position log-prob chunks, the reference under ZeRO-3, every response its own row instead of the shared prompt)
    against the defaults: the same losses and weights up to fp32 summation order (micro-batches add the minibatch's
    gradient in another order; a packed group multiplies matrices of other shapes)."""
    import torch

    from tests.support.trainer_run import CONFIGS, final_weights, history, run

    kl = CONFIGS["k3-loss"]
    # Two stores: the knobs are machinery, so both runs may carry one run_key (record/identity/run_key.py).
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    _, plain_dir, _, plain = run(tmp_path / "a", "plain", kl)
    knobs = {"gradient_checkpointing": True, "micro_batch_tokens": 4 * 76, "logprob_chunk_tokens": 5,
             "reference": "zero3", "shared_prompt": False}
    _, knob_dir, _, turned = run(tmp_path / "b", "knobs", kl, memory=knobs)
    a, b = history(tmp_path / "a", plain), history(tmp_path / "b", turned)
    # train/loss too: the step logs each minibatch's loss (the sum of its micro-batches' shares), not a mean of
    # shares that would shrink with the micro-batch count (trainer/batch.py UpdateMetrics).
    for key in ("train/loss", "train/pg_loss", "train/kl_loss", "train/kl_k3", "train/kl_k1", "train/entropy",
                "train/reward_mean", "train/grad_norm"):
        torch.testing.assert_close(torch.tensor(b[key]), torch.tensor(a[key]), rtol=1e-4, atol=1e-6, msg=key)
    # Adam divides each gradient element by its own scale, so an element whose gradient is ~0 can take a
    # different-sized update from a summation-order difference: 1e-4 absolute, against 2 steps x lr 1e-3.
    wa, wb = final_weights(plain_dir), final_weights(knob_dir)
    for name in wa:
        torch.testing.assert_close(wb[name], wa[name], rtol=0, atol=1e-4)
