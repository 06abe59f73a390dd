"""The colocated vLLM engine's wake discipline (issue 29, item 2), as calls in order: PyTorch's cached blocks given
back before every wake; a sync wakes the weights, loads, empties the cache again, then wakes the KV cache; sleep at
level 1, so a wake without a sync finds the weights last synced. A recorder stands in for `vllm.LLM` (vLLM's CPU
build has no sleep mode: docs/vllm.md); that these calls exist in the pinned vLLM is tests/unit/test_gpu_pins.py's."""

from __future__ import annotations

import pytest

from trainer.rollout import vllm_engine as rollout_vllm
from trainer.rollout.vllm_engine import VLLMEngine


class Recorder:
    def __init__(self, calls: list):
        self.calls = calls

    def __getattr__(self, name):
        return lambda *args, **kwargs: self.calls.append((name, kwargs.get("tags", kwargs.get("level"))))


@pytest.fixture
def engine(monkeypatch):
    calls: list = []
    monkeypatch.setattr(rollout_vllm, "_release_cached_blocks", lambda: calls.append(("empty_cache", None)))
    monkeypatch.setattr(rollout_vllm, "gathered_parameters", lambda model: iter(()))
    e = object.__new__(VLLMEngine)
    e.llm, e.sleep_mode, e.asleep = Recorder(calls), True, False
    return e, calls


def test_a_sync_wakes_the_weights_then_the_kv_cache_with_the_cache_emptied_first(engine):
    e, calls = engine
    e.sleep()
    assert calls == [("sleep", 1)] and e.asleep
    calls.clear()
    e.sync_weights(model=None)
    assert calls == [("empty_cache", None), ("wake_up", ["weights"]), ("collective_rpc", None),
                     ("empty_cache", None), ("wake_up", ["kv_cache"]), ("reset_prefix_cache", None)]
    assert not e.asleep


def test_a_wake_without_a_sync_empties_the_cache_and_wakes_everything(engine):
    e, calls = engine
    e.sleep()
    calls.clear()
    e.wake()
    assert calls == [("empty_cache", None), ("wake_up", None)] and not e.asleep
    calls.clear()
    e.sync_weights(model=None)  # awake: no wake, no emptying, just the load
    assert calls == [("collective_rpc", None), ("reset_prefix_cache", None)]


def test_the_sleep_level_keeps_the_weights_for_a_wake_without_a_sync():
    assert rollout_vllm.SLEEP_LEVEL == 1
