"""A run's gradient fingerprint: proof, computed by the code that trains, of which gradient its KL settings produce.

The paper's finding is that code which says "KL penalty" often optimises something else, and that a change of
code can change the gradient under unchanged option names. So each run records, at its start, the gradient its
own loss path gives on a fixed probe: the same two calls the training step makes (`shaped_advantages`, then
`rl_loss`: trainer/objective/loss.py), with the run's KL and algorithm settings, on a tiny deterministic batch in
float64 on the CPU, on-policy and off-policy (a behaviour policy one update behind). The gradient with respect to
the policy's log-probabilities is rounded to 12 decimals and hashed: the same settings through the same
gradient give the same hash on any machine; a change that alters the gradient (a stop-gradient moved, an estimator
or a normaliser changed, a term dropped) changes it; a refactor that leaves every gradient alone does not.

What it cannot catch: anything outside the loss path (the rollout, the reward, the optimiser, the model), and a
change whose effect on this probe rounds away (the probe's values are chosen so every term contributes).
"""

from __future__ import annotations

import hashlib

import torch

from trainer.objective.loss import rl_loss, shaped_advantages
from trainer.objective.settings import AlgorithmConfig, KLConfig

VERSION = 1  # bump when the probe below changes (every hash changes with it)
TOKENS = 6
DECIMALS = 12  # absolute: a gradient entry that is zero up to float noise (1e-17) hashes as 0


def _probe(group_size: int) -> dict[str, torch.Tensor]:
    """Two prompt groups of `group_size` responses, TOKENS long with ragged lengths; log-probs and rewards from fixed
    formulas (no random generator: the same numbers everywhere), each term of the objective non-zero."""
    batch = 2 * group_size
    i = torch.arange(batch, dtype=torch.float64)[:, None]
    t = torch.arange(TOKENS, dtype=torch.float64)[None, :]
    logp = -0.2 - 0.07 * i - 0.11 * t + 0.03 * torch.sin(1.7 * i * t + 0.3)
    ref_logp = logp - 0.05 - 0.04 * torch.cos(0.9 * i + 1.3 * t)
    # The behaviour policy of an off-policy minibatch, far enough that PPO clips some ratios at 0.1 but not 0.2.
    old_logp = logp + 0.15 * torch.sin(2.3 * i - 0.7 * t)
    lengths = TOKENS - (torch.arange(batch) % 3)
    mask = (torch.arange(TOKENS)[None, :] < lengths[:, None]).to(torch.float64)
    reward = (torch.arange(batch) % 2).to(torch.float64) * (1.0 + 0.25 * (torch.arange(batch) % 3))
    return {"logp": logp, "ref_logp": ref_logp, "old_logp": old_logp, "mask": mask, "reward": reward}


def gradient(kl_cfg: KLConfig, algo_cfg: AlgorithmConfig, off_policy: bool) -> torch.Tensor:
    """d loss / d logp [B, T] of the probe through the training step's own loss calls."""
    probe = _probe(algo_cfg.group_size)
    logp = probe["logp"].clone().requires_grad_(True)
    old = probe["old_logp"] if off_policy else None
    kl, advantages = shaped_advantages(logp, probe["ref_logp"], probe["mask"], probe["reward"], kl_cfg, algo_cfg,
                                       old_logp=old, with_metrics=False)
    loss, _ = rl_loss(logp, advantages, kl, probe["mask"], algo_cfg, old_logp=old, with_metrics=False)
    (grad,) = torch.autograd.grad(loss, logp)
    return grad


def fingerprint(kl_cfg: KLConfig, algo_cfg: AlgorithmConfig) -> dict:
    """{"version", "hash" (12 hex digits), "on_policy" and "off_policy": the gradient's first row, 6 significant
    digits, for a person to compare}: what objective.json, the run's MLflow tags and the ledger carry."""
    grads = {mode: gradient(kl_cfg, algo_cfg, mode == "off_policy") for mode in ("on_policy", "off_policy")}
    text = ";".join(f"{mode}:" + ",".join(f"{_rounded(v):.{DECIMALS}f}" for v in g.flatten().tolist())
                    for mode, g in grads.items())
    digest = hashlib.sha256(f"v{VERSION};{text}".encode()).hexdigest()[:12]
    return {"version": VERSION, "hash": digest,
            **{mode: [float(f"{v:.6g}") for v in g[0].tolist()] for mode, g in grads.items()}}


def _rounded(value: float) -> float:
    return round(value, DECIMALS) + 0.0  # + 0.0: -0.0 and 0.0 hash alike
