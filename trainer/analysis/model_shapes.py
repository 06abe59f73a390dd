"""The shapes of the shipped models, copied from their published config.json (no hub here): what the memory plan
(trainer/analysis/memory_plan.py) computes with, and what the tests build small models from (random weights, reduced
depth).

Sources, each the model repository's config.json on huggingface.co:
    Qwen/Qwen2.5-0.5B, Qwen/Qwen2.5-1.5B, Qwen/Qwen2.5-7B, Qwen/Qwen3-4B-Instruct-2507,
    meta-llama/Llama-3.2-1B, meta-llama/Llama-3.1-8B-Instruct, HuggingFaceTB/SmolLM2-135M-Instruct.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Shape:
    """The config.json values the memory terms depend on."""

    arch: str                 # "qwen2", "qwen3" or "llama": the HF config class
    hidden: int               # hidden_size
    intermediate: int         # intermediate_size
    layers: int               # num_hidden_layers
    heads: int                # num_attention_heads
    kv_heads: int             # num_key_value_heads
    vocab: int                # vocab_size
    tied: bool                # tie_word_embeddings
    head_dim: int | None = None  # head_dim where the config states one (Qwen3), else hidden / heads

    @property
    def dim_head(self) -> int:
        return self.head_dim or self.hidden // self.heads

    @property
    def layer_params(self) -> int:
        """One decoder layer: attention (q, k, v with Qwen2's biases, o; Qwen3's q/k norms), MLP, two norms."""
        d, h = self.hidden, self.dim_head
        q, kv = self.heads * h, self.kv_heads * h
        bias = q + 2 * kv if self.arch == "qwen2" else 0
        attn = d * q + 2 * d * kv + q * d + bias + (2 * h if self.arch == "qwen3" else 0)
        return attn + 3 * d * self.intermediate + 2 * d

    @property
    def params(self) -> int:
        """Parameters: embeddings (+ head unless tied), the layers, the final norm."""
        return self.vocab * self.hidden * (1 if self.tied else 2) + self.layers * self.layer_params + self.hidden

    @property
    def largest_layer_params(self) -> int:
        """The largest module ZeRO-3 gathers whole: the embedding (or head) or one decoder layer."""
        return max(self.vocab * self.hidden, self.layer_params)

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        """vLLM's KV cache per token: K and V for every layer and KV head."""
        return 2 * self.layers * self.kv_heads * self.dim_head * dtype_bytes


SHAPES: dict[str, Shape] = {
    "qwen2.5-0.5b": Shape("qwen2", 896, 4864, 24, 14, 2, 151_936, True),
    "qwen2.5-1.5b": Shape("qwen2", 1536, 8960, 28, 12, 2, 151_936, True),
    "qwen2.5-7b": Shape("qwen2", 3584, 18_944, 28, 28, 4, 152_064, False),
    "qwen3-4b-instruct-2507": Shape("qwen3", 2560, 9728, 36, 32, 8, 151_936, True, head_dim=128),
    "llama-3.2-1b": Shape("llama", 2048, 8192, 16, 32, 8, 128_256, True),
    "llama-3.1-8b-instruct": Shape("llama", 4096, 14_336, 32, 32, 8, 128_256, False),
    "smollm2-135m-instruct": Shape("llama", 576, 1536, 30, 9, 3, 49_152, True),
}


def shape_of(name_or_path: str) -> Shape | None:
    """The shape of a model named as a sweep names it (a hub id, a short name, or a local directory holding a
    config.json); None where it is unknown."""
    key = name_or_path.rstrip("/").rsplit("/", 1)[-1].lower()
    if key in SHAPES:
        return SHAPES[key]
    config = Path(name_or_path) / "config.json"
    if not config.is_file():
        return None
    c = json.loads(config.read_text())
    arch = "qwen2" if c.get("model_type") == "qwen2" else "qwen3" if c.get("model_type") == "qwen3" else "llama"
    try:
        return Shape(arch, c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"],
                     c["num_attention_heads"], c.get("num_key_value_heads") or c["num_attention_heads"],
                     c["vocab_size"], bool(c.get("tie_word_embeddings", False)), c.get("head_dim"))
    except KeyError:
        return None


def tiny_hf_model(shape: Shape, layers: int, vocab: int | None = None, seed: int = 0):
    """An HF causal LM of `shape` with `layers` decoder layers (and optionally a smaller vocabulary), random
    weights, fp32, dropout 0: the published widths at a depth a CPU test can run."""
    import torch  # noqa: PLC0415 - heavy; the plan imports this module on the login node for SHAPES only
    import transformers  # noqa: PLC0415 - as above

    cls = {"qwen2": transformers.Qwen2Config, "qwen3": transformers.Qwen3Config,
           "llama": transformers.LlamaConfig}[shape.arch]
    extra = {"head_dim": shape.head_dim} if shape.head_dim else {}
    config = cls(hidden_size=shape.hidden, intermediate_size=shape.intermediate, num_hidden_layers=layers,
                 num_attention_heads=shape.heads, num_key_value_heads=shape.kv_heads, vocab_size=vocab or shape.vocab,
                 tie_word_embeddings=shape.tied, max_position_embeddings=4096, attention_dropout=0.0, **extra)
    config._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    return transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
