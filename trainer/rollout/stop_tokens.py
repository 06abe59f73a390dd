"""The tokens that end a response: one rule for training rollouts (HF generate, vLLM) and lm-eval, so that a policy
is trained and evaluated on the same responses.

    stop_tokens(tokenizer) -> ["<|endoftext|>", "<|im_end|>"]   strings, lm-eval's `until`
    stop_token_ids(tokenizer) -> (151643, 151645)                   ids, the rollout engines' stop_token_ids

The set: the tokenizer's eos; the model's generation_config eos ids (Llama-3.1-8B-Instruct lists <|end_of_text|>,
<|eom_id|> and <|eot_id|>; Qwen3-4B-Instruct-2507 <|im_end|> and <|endoftext|>); and every end-of-turn token of the
chat templates we use that the vocabulary has. The last matters for Qwen2.5 base: its eos is <|endoftext|>, but
with the chat template a turn ends with <|im_end|>, and a rollout stopping only at eos would run on into a new turn
(tests/unit/test_stop_tokens.py holds the published facts of every shipped model).
"""

from __future__ import annotations

import json
from pathlib import Path

# End-of-turn strings of the chat templates we use (Qwen, Llama 3, the tiny model, Llama 2 / Mistral).
END_OF_TURN = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>", "<|end|>", "</s>")


def generation_eos(model_dir: str | Path | None) -> list[int]:
    """eos_token_id of `model_dir`'s generation_config.json (an int or a list), [] where there is none (a hub id:
    its cached snapshot is read by the tokenizer's own path, never fetched here)."""
    try:
        eos = json.loads((Path(model_dir) / "generation_config.json").read_text()).get("eos_token_id")
    except (OSError, TypeError, ValueError, AttributeError):
        return []
    eos = eos if isinstance(eos, list) else [eos]
    return [int(e) for e in eos if isinstance(e, int)]


def stop_tokens(tokenizer) -> list[str]:
    """The tokens (as strings) that end a response: eos, the generation_config's eos, the end-of-turn tokens."""
    vocab = tokenizer.get_vocab()
    by_id = {i: t for t, i in vocab.items()}
    stops = [tokenizer.eos_token] if tokenizer.eos_token else []
    stops += [by_id[i] for i in generation_eos(getattr(tokenizer, "name_or_path", None)) if i in by_id]
    stops += [s for s in END_OF_TURN if s in vocab]
    return list(dict.fromkeys(stops))


def stop_token_ids(tokenizer) -> tuple[int, ...]:
    vocab = tokenizer.get_vocab()
    return tuple(sorted({vocab[t] for t in stop_tokens(tokenizer) if t in vocab}))
