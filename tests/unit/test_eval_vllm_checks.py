"""`orchestrate eval --backend vllm`: what cannot run is one message before any engine starts, and the engine
arguments fit the device (CPU: float32, eager, no GPU memory share; GPU: vLLM's defaults). No engine is built here."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

from eval import backends
from orchestrator.cli import main
from trainer.rollout import vllm_support


def run(capsys, *argv) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().err


def model_dir(root: Path, hidden: int = 64, heads: int = 2, positions: int = 128) -> Path:
    """A model directory as far as the checks read it: config.json and the tiny model's tokenizer, no weights."""
    from trainer.model.tiny_model import build_tokenizer

    root.mkdir()
    build_tokenizer().save_pretrained(root)
    (root / "config.json").write_text(json.dumps({
        "model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "hidden_size": hidden,
        "num_attention_heads": heads, "num_key_value_heads": 1, "max_position_embeddings": positions}))
    return root


@pytest.fixture
def cpu_with_vllm(monkeypatch):
    """vLLM's CPU build is here (whether or not this machine has it installed, or has a GPU)."""
    monkeypatch.setattr(vllm_support, "installed", lambda: True)
    monkeypatch.setattr(vllm_support, "on_gpu", lambda: False)


def eval_argv(tmp_path: Path, model: Path, *extra: str) -> list[str]:
    return ["eval", str(model), "--backend", "vllm", "--tasks", "tiny", "--limit", "2", "--max-tokens", "12",
            "--runs-root", str(tmp_path / "runs"), "--data-dir", str(tmp_path / "data"), *extra]


def test_vllm_not_installed(tmp_path, capsys, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a))
    code, err = run(capsys, *eval_argv(tmp_path, model_dir(tmp_path / "m")))
    assert code == 2 and "Traceback" not in err and err.count("\n") == 1
    assert "error: --backend vllm needs vLLM, which is not installed in this environment" in err
    assert "or --backend hf" in err
    assert not (tmp_path / "runs").exists(), "nothing is written before the check"


def test_a_head_size_the_cpu_attention_cannot_run(tmp_path, capsys, cpu_with_vllm):
    model = model_dir(tmp_path / "m", hidden=40, heads=2)
    code, err = run(capsys, *eval_argv(tmp_path, model))
    assert code == 2 and "Traceback" not in err and err.count("\n") == 1
    assert f"--backend vllm cannot evaluate {model}: head size 20 of {model} is not one vLLM's CPU attention" in err
    assert "32, 64, 80" in err


def test_a_max_model_len_that_cannot_hold_prompt_and_budget(tmp_path, capsys, cpu_with_vllm):
    # The tiny prompts are about 10 tokens ("<|user|>4-8=?<|end|><|assistant|>", one token per character).
    model = model_dir(tmp_path / "m", positions=16)
    code, err = run(capsys, *eval_argv(tmp_path, model))
    assert code == 2 and "Traceback" not in err and err.count("\n") == 1
    assert "max_model_len 16 cannot hold the prompt plus the generation budget" in err


def settings(max_tokens: int = 12):
    from eval.outcome import Settings

    return Settings(k=4, temperature=1.0, top_p=1.0, max_tokens=max_tokens, chat_template=True, seeds=(0,),
                    backend="vllm")


def test_both_problems_at_once(tmp_path, cpu_with_vllm):
    from eval.evaluate import _vllm_args
    from eval.target import EvalError

    with pytest.raises(EvalError, match="head size 20 .*; max_model_len 16 cannot hold"):
        _vllm_args(model_dir(tmp_path / "m", hidden=40, positions=16), None, settings(), {}, prompt_tokens=10)


def test_max_model_len_is_the_budget_capped_by_the_model(tmp_path, cpu_with_vllm):
    from eval.evaluate import _vllm_args

    assert _vllm_args(model_dir(tmp_path / "a"), None, settings(), {}, prompt_tokens=10)["max_model_len"] == 22
    assert _vllm_args(model_dir(tmp_path / "b", positions=20), None, settings(), {}, 8)["max_model_len"] == 20


def test_engine_arguments_on_cpu_and_on_gpu():
    cpu = backends.vllm_model_args(Path("/m"), seed=3, max_model_len=64, gpu=False)
    assert cpu["dtype"] == "float32" and cpu["enforce_eager"] is True and cpu["seed"] == 3
    assert "gpu_memory_utilization" not in cpu  # a share of host RAM on CPU: meaningless there
    gpu = backends.vllm_model_args(Path("/m"), seed=3, max_model_len=64, gpu=True)
    assert gpu["dtype"] == "auto" and gpu["gpu_memory_utilization"] == backends.DEFAULT_GPU_MEMORY_UTILIZATION
    assert "enforce_eager" not in gpu
    assert backends.vllm_model_args(Path("/m"), 0, gpu=False, dtype="bfloat16", enforce_eager=False)[
        "enforce_eager"] is False  # engine_args win


def test_the_environment_is_set_before_lm_eval_builds_the_engine(monkeypatch, cpu_with_vllm):
    from lm_eval.api import registry

    for name in ("VLLM_CPU_KVCACHE_SPACE", "VLLM_ENABLE_V1_MULTIPROCESSING"):
        monkeypatch.delenv(name, raising=False)
    seen = {}

    def get_model(name):
        seen.update({k: os.environ.get(k) for k in ("VLLM_CPU_KVCACHE_SPACE", "VLLM_ENABLE_V1_MULTIPROCESSING")})
        return type("Model", (), {"create_from_arg_obj": staticmethod(lambda args: args)})

    monkeypatch.setattr(registry, "get_model", get_model)
    assert backends.vllm_lm({"pretrained": "/m"}) == {"pretrained": "/m"}
    assert seen == {"VLLM_CPU_KVCACHE_SPACE": str(vllm_support.CPU_KV_CACHE_GIB), "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


@pytest.mark.parametrize("gpu,installed,expected", [(False, True, "hf"), (True, False, "hf"), (True, True, "vllm")])
def test_the_default_backend_is_vllm_only_with_a_gpu(monkeypatch, gpu, installed, expected):
    monkeypatch.setattr(vllm_support, "on_gpu", lambda: gpu)
    monkeypatch.setattr(vllm_support, "installed", lambda: installed)
    assert backends.pick_backend() == expected
