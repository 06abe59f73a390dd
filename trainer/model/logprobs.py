"""Per-token log-probs of response tokens under a causal LM: the bridge from a model to trainer/objective/kl.py.

A sample is (prompt_ids, response_ids). Prompts are LEFT-padded and responses right-padded, so every response
starts at the same column P and the logits that predict them are one slice [:, P-1 : P-1+R] (no gather over the
vocabulary). Position ids come from the attention mask, so left padding does not shift positions.
The response mask [B, R] marks real response tokens, R = the longest response. Log-probs are taken from logits
in float32 whatever the model's dtype, because k3 exponentiates log-ratios and bf16 rounding there is visible.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.utils.checkpoint import checkpoint

from trainer.model import shared_prompt


@dataclass
class TokenBatch:
    input_ids: torch.Tensor       # [B, P + R]: left-padded prompt, then right-padded response
    attention_mask: torch.Tensor  # [B, P + R]
    prompt_len: int               # P: the column where every response starts
    response_mask: torch.Tensor   # [B, R] bool
    response_ids: torch.Tensor    # [B, R] (pad where masked)

    @property
    def position_ids(self) -> torch.Tensor:
        return (self.attention_mask.cumsum(-1) - 1).clamp(min=0)

    def to(self, device: torch.device) -> TokenBatch:
        return TokenBatch(self.input_ids.to(device), self.attention_mask.to(device), self.prompt_len,
                          self.response_mask.to(device), self.response_ids.to(device))


def model_device(model) -> torch.device:
    """Where a model's inputs must go: its own `device` (an HF model's, a DeepSpeed engine's), else its first
    parameter's. On CPU an input left where it was built is already there; on a GPU it fails at the embedding."""
    device = getattr(model, "device", None)
    if isinstance(device, (torch.device, str)):
        return torch.device(device)
    return next(model.parameters()).device


def collate(prompts: list[list[int]], responses: list[list[int]], pad_id: int) -> TokenBatch:
    """Left-pad prompts, right-pad responses. Empty responses are allowed (their mask row is all False)."""
    B = len(prompts)
    P, R = max(len(p) for p in prompts), max(1, max(len(r) for r in responses))
    input_ids = torch.full((B, P + R), pad_id, dtype=torch.long)
    attention = torch.zeros(B, P + R, dtype=torch.long)
    response_mask = torch.zeros(B, R, dtype=torch.bool)
    for i, (p, r) in enumerate(zip(prompts, responses)):
        input_ids[i, P - len(p) : P] = torch.tensor(p, dtype=torch.long)
        attention[i, P - len(p) : P + len(r)] = 1
        if r:
            input_ids[i, P : P + len(r)] = torch.tensor(r, dtype=torch.long)
            response_mask[i, : len(r)] = True
    return TokenBatch(input_ids, attention, P, response_mask, input_ids[:, P:].clone())


def response_logprobs(
    model, batch: TokenBatch, temperature: float = 1.0, with_entropy: bool = False, chunk_tokens: int = 256
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log pi(y_t | x, y<t) for every response token, [B, R], and optionally the entropy of pi(.|x, y<t), [B, R].

    The logits are divided by the sampling temperature so that the log-probs are those of the distribution the
    rollout engine sampled from (at temperature 1.0, the paper's setting, this is the identity).
    """
    R, P = batch.response_mask.shape[1], batch.prompt_len
    # The token at column c is predicted by the logits at column c - 1, so the responses need the logits of
    # columns P - 1 .. P + R - 2 only: no vocabulary-wide logits for the prompt (for a 150k vocabulary and long
    # prompts, most of the logits memory). Kept by an index, not a slice: the hidden states it picks are then one
    # contiguous [B, R, d] block, which the head multiplies as one matrix; a slice of them, with grad on, went
    # through a batched matmul of the head broadcast per row, twice the time on CPU (docs/trainer.md, "Speed").
    slots = shared_prompt.group_runs(batch) if shared_prompt.supports(model) else 0
    if slots:  # whole prompt groups: each group's prompt once (trainer/model/shared_prompt.py)
        packed = shared_prompt.pack(batch, slots)
        out = model(input_ids=packed.input_ids, position_ids=packed.position_ids, use_cache=False,
                    logits_to_keep=packed.keep, shared_prompt=packed.layout)
    else:
        keep = torch.arange(P - 1, P - 1 + R, device=batch.input_ids.device)
        out = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                    position_ids=batch.position_ids, use_cache=False, logits_to_keep=keep)
    logits = out.logits.reshape(batch.input_ids.shape[0], R, -1)
    logp, entropy = chunked_logprobs(logits, batch.response_ids, temperature, with_entropy, chunk_tokens)
    logp = logp.masked_fill(~batch.response_mask, 0.0)
    if entropy is not None:
        entropy = entropy.masked_fill(~batch.response_mask, 0.0)
    return logp, entropy


def _token_logprobs(logits: torch.Tensor, ids: torch.Tensor, temperature: float) -> torch.Tensor:
    """log softmax(logits / T)[ids] in fp32, [b, c]: the chosen logit minus the logsumexp (TRL's selective
    log-softmax); no [b, c, V] log-softmax is kept."""
    z = logits.float()
    if temperature != 1.0:
        z = z / temperature
    return z.gather(-1, ids[..., None]).squeeze(-1) - torch.logsumexp(z, dim=-1)


def chunked_logprobs(logits: torch.Tensor, ids: torch.Tensor, temperature: float = 1.0,
                     with_entropy: bool = False, chunk_tokens: int = 256
                     ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs of `ids` [B, R] under `logits` [B, R, V] (any dtype), and the entropy per position (no grad),
    `chunk_tokens` positions (rows x columns) at a time.

    Why chunks: an fp32 log-softmax over the paper's micro-batch (20 x 1,025 positions x 152,064) is ~12 GB, and
    autograd keeps it and its exp for backward. Each chunk's fp32 work runs under non-reentrant activation
    checkpointing, so backward keeps only the logits (in the model's dtype) and recomputes one chunk at a time:
    the fp32 peak is one chunk's [chunk_tokens, V], whatever the micro-batch.
    """
    B, R, V = logits.shape
    flat, flat_ids = logits.reshape(B * R, V), ids.reshape(B * R)
    parts, ents = [], []
    for start in range(0, B * R, chunk_tokens):
        z, i = flat[start:start + chunk_tokens], flat_ids[start:start + chunk_tokens]
        if torch.is_grad_enabled() and z.requires_grad:
            parts.append(checkpoint(_token_logprobs, z, i, temperature, use_reentrant=False))
        else:
            parts.append(_token_logprobs(z, i, temperature))
        if with_entropy:
            with torch.no_grad():
                zf = z.float() / temperature if temperature != 1.0 else z.float()
                logq = torch.log_softmax(zf, dim=-1)
                ents.append(-(logq.exp() * logq).sum(-1))
    logp = torch.cat(parts).reshape(B, R)
    entropy = torch.cat(ents).reshape(B, R) if with_entropy else None
    return logp, entropy


@torch.no_grad()
def score_logprobs(model, prompt_ids: list[list[int]], response_ids: list[list[int]], pad_id: int, micro: int,
                   temperature: float, chunk_tokens: int = 256) -> torch.Tensor:
    """log-probs of every response token under `model`, [B, R_max] on the CPU, `micro` rows at a time, without grad:
    the reference's for the KL, and the sampling policy's (mu) for a batch that will be trained off-policy."""
    R = max(1, max(len(r) for r in response_ids))
    out, device = torch.zeros(len(response_ids), R), model_device(model)
    for start in range(0, len(response_ids), micro):
        rows = slice(start, start + micro)
        tb = collate(prompt_ids[rows], response_ids[rows], pad_id).to(device)
        logp, _ = response_logprobs(model, tb, temperature, chunk_tokens=chunk_tokens)
        out[rows, : logp.shape[1]] = logp.float().cpu()
    return out
