"""Benchmark: the whole default toy study against a naive per-sequence autograd loop on the same work.

    python bench/synthetic.py [--naive-sequences 40]

Ours: `trainer.analysis.toy_study.run_study` with the defaults of `orchestrate synthetic` (9 configurations x T in
2,4,8,16,32 x 200 trials x 1000 sequences), timed end to end.
Baseline ("naive"): what one writes first: for every sampled sequence, a fresh (a, b) leaf, the trainer's
`shaped_advantages` and `rl_loss` on that one sequence, and one backward. Running it on all 9 million
sequence-configurations takes hours, so it is timed on --naive-sequences sequences per (configuration, T) and
extrapolated linearly to the full count (its cost per sequence does not depend on how many follow). Both numbers
and the ratio are printed in the same run.
Targets (issue 2): ours under 30 s on a 2-core machine, and at least 20x faster than the naive loop.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a script, bench/ comes first on sys.path, and bench/trainer.py would shadow the trainer package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import time

import torch

from trainer.analysis.toy import DTYPE, sample, token_logprobs
from trainer.analysis.toy_study import PAPER_CONFIGS, kl_config, run_study
from trainer.objective.loss import rl_loss, shaped_advantages
from trainer.objective.settings import AlgorithmConfig

THETA, REF = (0.5, -0.1), (0.0, 0.1)
LENGTHS, TRIALS, SEQUENCES = (2, 4, 8, 16, 32), 200, 1000


def naive_seconds_per_sequence(T: int, name: str, n: int) -> float:
    theta, ref = torch.tensor(THETA, dtype=DTYPE), torch.tensor(REF, dtype=DTYPE)
    y = sample(theta, n, T, torch.Generator().manual_seed(0))
    kl = kl_config(name)
    algo = AlgorithmConfig(advantage="none", aggregation="seq_mean_token_sum", group_size=1, clip_eps=None)
    mask = torch.ones(1, T, dtype=torch.bool)
    start = time.perf_counter()
    total = torch.zeros(2, dtype=DTYPE)
    for i in range(n):
        p = theta.clone().requires_grad_(True)
        yi = y[i : i + 1]
        logp = token_logprobs(p[None], yi)
        terms, adv = shaped_advantages(logp, token_logprobs(ref[None], yi), mask, torch.zeros(1, dtype=DTYPE), kl,
                                       algo, with_metrics=False)
        loss, _ = rl_loss(logp, adv, terms, mask, algo, with_metrics=False)
        (g,) = torch.autograd.grad(loss, p)
        total += g
    return (time.perf_counter() - start) / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--naive-sequences", type=int, default=40, help="sequences timed per (configuration, T)")
    args = ap.parse_args()
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}")

    start = time.perf_counter()
    run_study(theta=THETA, ref=REF, lengths=LENGTHS, trials=TRIALS, sequences=SEQUENCES, configs=PAPER_CONFIGS)
    ours = time.perf_counter() - start

    per_cell = {(T, c): naive_seconds_per_sequence(T, c, args.naive_sequences) for T in LENGTHS for c in PAPER_CONFIGS}
    naive = sum(per_cell.values()) * TRIALS * SEQUENCES
    print(f"work: {len(PAPER_CONFIGS)} configurations x T in {LENGTHS} x {TRIALS} trials x {SEQUENCES} sequences")
    print(f"ours (vectorised, one backward per configuration and T): {ours:8.1f} s   target < 30 s: "
          f"{'met' if ours < 30 else 'NOT met'}")
    print(f"naive per-sequence autograd loop (timed on {args.naive_sequences} sequences per cell, extrapolated): "
          f"{naive:8.0f} s")
    print(f"ratio naive / ours: {naive / ours:8.0f}x   target >= 20x: {'met' if naive / ours >= 20 else 'NOT met'}")


if __name__ == "__main__":
    main()
