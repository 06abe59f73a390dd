"""The tests' build of the project's tiny model (trainer/model/tiny_model.py): the same recipe, smaller and quicker.
"""

from __future__ import annotations

from dataclasses import replace

from trainer.model.tiny_model import TinyModelConfig


def fast_config(**overrides) -> TinyModelConfig:
    """A smaller, quicker build for unit tests: same recipe, fewer steps, no build-time evaluation."""
    base = dict(hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=1, intermediate_size=192, sft_steps=60,
                eval_size=0)  # head size 32, as the default's
    return replace(TinyModelConfig(), **{**base, **overrides})
