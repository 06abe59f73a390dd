"""Training rollouts and lm-eval stop on the same tokens for every shipped model (issue 29, item 7), from each
model's published tokenizer_config.json (eos_token, the chat template's end of turn) and generation_config.json
(eos_token_id), copied here from the model repositories on huggingface.co (no hub in CI)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from eval.backends import stop_strings
from trainer.rollout.stop_tokens import stop_token_ids, stop_tokens

REPO = Path(__file__).resolve().parents[2]
# name_or_path: (tokenizer eos_token, generation_config eos_token_id, the token that ends an assistant turn under
# the chat template, the special tokens' ids)
PUBLISHED = {
    "Qwen/Qwen2.5-7B": ("<|endoftext|>", [151643], "<|im_end|>",
                        {"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645}),
    "Qwen/Qwen3-4B-Instruct-2507": ("<|im_end|>", [151645, 151643], "<|im_end|>",
                                    {"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645}),
    "meta-llama/Llama-3.1-8B-Instruct": ("<|eot_id|>", [128001, 128008, 128009], "<|eot_id|>",
                                         {"<|begin_of_text|>": 128000, "<|end_of_text|>": 128001,
                                          "<|eom_id|>": 128008, "<|eot_id|>": 128009}),
    "smollm2-135m-instruct": ("<|im_end|>", [2], "<|im_end|>",  # HuggingFaceTB/SmolLM2-135M-Instruct
                              {"<|endoftext|>": 0, "<|im_start|>": 1, "<|im_end|>": 2}),
}


class Published:
    """A tokenizer as the published files make it: its special tokens, eos, and the generation_config beside it."""

    def __init__(self, model_dir: Path, eos: str, ids: dict[str, int]):
        self.eos_token, self.name_or_path = eos, str(model_dir)
        self._vocab = {**ids, "a": 5, "b": 6}

    def get_vocab(self) -> dict[str, int]:
        return dict(self._vocab)


def test_every_shipped_model_has_its_published_facts_here():
    shipped = {yaml.safe_load(f.read_text())["name_or_path"] for f in (REPO / "sweeps/conf/model").glob("*.yaml")}
    assert shipped - {"tiny"} == set(PUBLISHED), "a shipped model without its stop-token facts in this test"


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_training_and_evaluation_stop_on_the_same_tokens_turn_end_included(name, tmp_path):
    eos, gen_eos, turn_end, ids = PUBLISHED[name]
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": gen_eos}))
    tok = Published(tmp_path, eos, ids)
    training = set(stop_token_ids(tok))
    evaluation = set(stop_strings(tok, chat_template=True))
    assert {ids[t] for t in evaluation} == training, "rollouts and lm-eval stop on different tokens"
    assert ids[turn_end] in training and ids[eos] in training and set(gen_eos) <= training
    assert set(stop_strings(tok, chat_template=False)) >= evaluation  # without a template: the same, and cues


def test_qwen25_base_stops_at_the_end_of_turn_though_its_eos_is_endoftext(tmp_path):
    eos, gen_eos, _, ids = PUBLISHED["Qwen/Qwen2.5-7B"]
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": gen_eos}))
    assert stop_tokens(Published(tmp_path, eos, ids)) == ["<|endoftext|>", "<|im_end|>"]


def test_the_tiny_models_real_tokenizer_stops_at_its_end_of_turn():
    from transformers import AutoTokenizer

    from tests.support.tiny_model import fast_config
    from trainer.model.tiny_model import ensure_tiny_model

    tok = AutoTokenizer.from_pretrained(ensure_tiny_model(fast_config()))
    assert stop_tokens(tok) == ["<|end|>"] and stop_token_ids(tok) == (tok.convert_tokens_to_ids("<|end|>"),)
