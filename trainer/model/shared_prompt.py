"""One forward pass per prompt group: the group's prompt once, then its G responses, each attending to the prompt and
to itself only. The log-probs are those of G separate rows; the prompt's layers run once instead of G times.

Why: RLOO samples G responses per prompt, and the log-prob passes (the policy's forward and backward, the
reference's forward) are where a step spends its time after generation. Run row by row they repeat every prompt
token G times. On SmolLM2 with the tiny task's prompts (37 tokens under the chat template) and 32-token responses, a
group of 4 is 276 token positions as rows and 165 packed (docs/trainer.md, "Speed"). The saving shrinks as responses
outgrow the prompt; it never costs more, because attention is computed exactly as for separate rows: the prompt's
queries against the prompt, and each response's queries against [prompt keys, its own keys], batched over the G
responses (a block-diagonal mask over one long row would compute the masked blocks too, (P + GR)^2 against G(P + R)^2
pairs, and lose at long responses).

The layout travels to the attention as a keyword argument (`shared_prompt=`), which transformers passes from the
model's forward down to its attention function; the model's attention implementation is set to this module's (it
runs torch's SDPA, and is transformers' SDPA attention when the argument is absent, as in generation, but for one
thing: on CPU, grouped key/value heads go to SDPA as they are under a padding mask, instead of being copied to every
query head per layer and token, `_grouped_heads_with_mask`). A model whose attention is not SDPA is left alone and
its groups are run as rows (`supports`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.nn.functional import scaled_dot_product_attention
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

NAME = "comedy_shared_prompt"
AttentionInterface.register(NAME, lambda *a, **k: attention(*a, **k))
AttentionMaskInterface.register(NAME, sdpa_mask)


def enable(model) -> bool:
    """Give `model` (an HF causal LM on SDPA, every layer full causal attention) the shared-prompt attention; False,
    and nothing changed, otherwise: a sliding window or a logit soft-cap is not what `attention` computes."""
    config = model.config
    if config._attn_implementation not in ("sdpa", NAME) or _not_plain_causal(config):
        return False
    model.set_attn_implementation(NAME)
    return True


def _not_plain_causal(config) -> bool:
    layer_types = getattr(config, "layer_types", None) or ()
    return bool(getattr(config, "sliding_window", None) is not None or getattr(config, "use_sliding_window", False)
                or getattr(config, "attn_logit_softcapping", None) or any(t != "full_attention" for t in layer_types))


def supports(model) -> bool:
    """Whether `model` (an HF model, or a DeepSpeed engine around one) runs packed groups."""
    config = getattr(getattr(model, "module", model), "config", None)
    return getattr(config, "_attn_implementation", None) == NAME


@dataclass(frozen=True)
class SharedPrompt:
    """The layout of packed rows: a prompt of P columns (left-padded), then `slots` responses of R columns each."""

    prompt_len: int                 # P
    slots: int                      # S: responses per row (the group size)
    response_len: int               # R
    prompt_mask: torch.Tensor       # [n, 1, P, P] bool: which prompt keys each prompt query sees
    response_mask: torch.Tensor     # [n * S, 1, R, P + R] bool: which [prompt, own response] keys a response query sees


@dataclass(frozen=True)
class Packed:
    """A batch of B = n * S rows as n packed rows: the model's inputs, and the columns whose hidden states predict
    the response tokens, S * R of them, in row order (reshaped to [B, R] after the head)."""

    input_ids: torch.Tensor     # [n, P + S * R]
    position_ids: torch.Tensor  # [n, P + S * R]: a response's positions continue its prompt's, as in its own row
    layout: SharedPrompt
    keep: torch.Tensor          # [S * R]


def group_runs(batch) -> int:
    """S when the rows of `batch` (trainer/model/logprobs.py's TokenBatch) are consecutive runs of S >= 2 rows with
    one prompt each (a micro-batch of whole groups), else 0 (distinct prompts, or runs of unequal length: rows)."""
    B, P = batch.input_ids.shape[0], batch.prompt_len
    if B < 2:
        return 0
    ids, mask = batch.input_ids[:, :P], batch.attention_mask[:, :P]
    same = ((ids[1:] == ids[:-1]) & (mask[1:] == mask[:-1])).all(-1)
    starts = [0] + [i + 1 for i in torch.nonzero(~same).flatten().tolist()]
    lengths = {b - a for a, b in zip(starts, starts[1:] + [B])}
    S = lengths.pop() if len(lengths) == 1 else 0
    return S if S >= 2 else 0


def pack(batch, slots: int) -> Packed:
    """The rows of `batch` (a TokenBatch: left-padded prompts, right-padded responses), in runs of `slots` rows
    sharing a prompt, as B / slots packed rows. Positions are the rows' own, so a response's continue its prompt's."""
    B, L = batch.input_ids.shape
    P, S, R, device = batch.prompt_len, slots, L - batch.prompt_len, batch.input_ids.device
    n = B // S

    def packed(x: torch.Tensor) -> torch.Tensor:  # [B, P + R] -> [n, P + S R]: the prompt once, then its S responses
        return torch.cat([x[::S, :P], x[:, P:].reshape(n, S * R)], dim=1)

    prompt_real = batch.attention_mask[::S, :P].bool()                                      # [n, P]
    response_real = batch.attention_mask[:, P:].bool().reshape(n, S, R)
    # A query always sees itself, so a padding query (never read) has one key and no row of SDPA is empty (NaN).
    eye_p, eye_r = torch.eye(P, dtype=torch.bool, device=device), torch.eye(R, dtype=torch.bool, device=device)
    causal_p = torch.ones(P, P, dtype=torch.bool, device=device).tril()
    causal_r = torch.ones(R, R, dtype=torch.bool, device=device).tril()
    prompt_mask = (causal_p & prompt_real[:, None, :]) | eye_p                               # [n, P, P]
    own = (causal_r & response_real.reshape(B, 1, R)) | eye_r                                # [B, R, R]
    sees_prompt = prompt_real.repeat_interleave(S, dim=0)[:, None, :].expand(B, R, P)        # [B, R, P]
    layout = SharedPrompt(P, S, R, prompt_mask[:, None], torch.cat([sees_prompt, own], dim=-1)[:, None])
    # Response token t of slot j is predicted at its previous column: the prompt's last (t = 0), else its own t - 1.
    cols = P + torch.arange(S, device=device)[:, None] * R + torch.arange(R, device=device) - 1
    cols[:, 0] = P - 1
    return Packed(packed(batch.input_ids), packed(batch.position_ids), layout, cols.reshape(S * R))


def attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling: float | None = None,
              shared_prompt: SharedPrompt | None = None, **kwargs):
    """transformers' attention interface: SDPA over packed rows when `shared_prompt` is given, else plain SDPA.
    query [n, H, P + S R, d], key and value [n, H_kv, P + S R, d]; returns [n, P + S R, H, d]."""
    grouped = _grouped_heads_with_mask(query, key)
    if shared_prompt is None:
        if not (grouped and attention_mask is not None and kwargs.get("position_bias") is None
                and kwargs.get("cache") is None):
            return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                          **kwargs)
        out = scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, dropout_p=dropout,
                                           scale=scaling, enable_gqa=True)
        return out.transpose(1, 2).contiguous(), None
    if kwargs.get("sliding_window") is not None or kwargs.get("softcap") is not None:  # `enable` keeps these out
        raise NotImplementedError("shared-prompt attention computes full causal attention only; "
                                  "set memory.shared_prompt=false for this model")
    P, S, R = shared_prompt.prompt_len, shared_prompt.slots, shared_prompt.response_len
    n, H, _, d = query.shape
    if not grouped:
        key, value = repeat_kv(key, H // key.shape[1]), repeat_kv(value, H // value.shape[1])
    sdpa = {"dropout_p": dropout, "scale": scaling, "enable_gqa": grouped}
    out_prompt = scaled_dot_product_attention(query[:, :, :P], key[:, :, :P], value[:, :, :P],
                                              attn_mask=shared_prompt.prompt_mask, **sdpa)

    def per_response(x: torch.Tensor) -> torch.Tensor:  # [n, h, S R, d] -> [n S, h, R, d]
        h = x.shape[1]
        return x.reshape(n, h, S, R, d).transpose(1, 2).reshape(n * S, h, R, d)

    def with_prompt(x: torch.Tensor) -> torch.Tensor:   # [prompt's keys, the response's own] per response
        h = x.shape[1]
        prompt = x[:, :, :P].unsqueeze(1).expand(n, S, h, P, d).reshape(n * S, h, P, d)
        return torch.cat([prompt, per_response(x[:, :, P:])], dim=2)

    out_responses = scaled_dot_product_attention(per_response(query[:, :, P:]), with_prompt(key), with_prompt(value),
                                                 attn_mask=shared_prompt.response_mask, **sdpa)
    out_responses = out_responses.reshape(n, S, H, R, d).transpose(1, 2).reshape(n, H, S * R, d)
    return torch.cat([out_prompt, out_responses], dim=2).transpose(1, 2).contiguous(), None


def _grouped_heads_with_mask(query: torch.Tensor, key: torch.Tensor) -> bool:
    """Whether SDPA is given the key/value heads as they are (grouped-query attention) with a mask, instead of
    each repeated to the query heads first. On CPU, torch's flash kernel takes them with a mask: the same output
    bitwise, without copying K and V per layer (at decoding, the whole KV cache, every token). transformers repeats
    them whenever there is a mask, which on CUDA keeps SDPA off its math kernel: there we do as it does."""
    return query.device.type == "cpu" and key.shape[1] != query.shape[1]
