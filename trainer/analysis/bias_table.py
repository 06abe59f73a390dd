"""Each distinct objective of a sweep, on the section 3.3 toy model, before anything is submitted: its exact expected
gradient through the trainer's own loss (trainer/analysis/toy_study.py `TrialBatch`: `shaped_advantages`, then
`rl_loss`), against the sequence-level reverse-KL gradient (the paper's truth) and the token-level one beside it.

The toy's task reward is 0, so a gradient here is the KL part alone (descent direction, as `orchestrate synthetic`).
Every objective runs with its betas divided by the one that sets the objective's strength (the reward's, else the
loss's): with no task reward the KL gradient is linear in beta (GRPO's std aside, which divides it out), so only
the split between reward and loss matters, and the 102 cells of a sweep fold into a handful of rows.

Exactly, with groups: the expectation of a group's estimate needs every group of G sequences, (2^T)^G of them. A
group's average is symmetric in the other G - 1 members, so enumerating the first member and the multiset of the
others (weighted by its multinomial probability) is exact: 2^T * C(2^T + G - 2, G - 1) groups. T is the longest of
LENGTHS for which every objective of the table fits ROW_BUDGET rows (RLOO's G = 5: T = 3), else 2 up to MAX_ROWS
(Dr. GRPO's G = 16; G up to 27).
Off-policy, the batch is drawn from mu, the policy one update behind: mu = theta + STEP * (unit gradient of the
sequence KL at theta), so theta is mu after one step of size STEP down the KL, far enough that PPO's clip at 0.2
bites on some tokens.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import math
from dataclasses import dataclass, replace

import torch

from trainer.analysis import library_map
from trainer.analysis.toy import DTYPE, all_sequences, sample, sequence_kl_grad, token_logprobs, token_reverse_kl_grad
from trainer.analysis.toy_study import TrialBatch
from trainer.objective.settings import AlgorithmConfig, KLConfig

THETA, REF = (0.5, -0.1), (0.0, 0.1)  # `orchestrate synthetic`'s defaults: the policy A and the reference B
LENGTHS = (4, 3, 2)
ROW_BUDGET = 60_000  # sequences enumerated for one objective at T > 2 (G = 5: T = 3): ~0.1 s
MAX_ROWS = 400_000  # at T = 2, the shortest that tells the two targets apart: G up to 27 (~1 s a row)
STEP = 0.25  # per-token |log pi/mu| up to 0.19 (T = 2) and 0.26 (T = 3): PPO clips 11% and 17% of tokens at 0.2
TRIALS, SEQUENCES, SEED = 100, 200, 0  # the variance: batches of 200 sequences, 100 of them
TOL = 1e-8  # relative to |truth|^2; exact sums in float64 put an unbiased objective near 1e-20
VERDICTS = {
    "unbiased": "bias^2 vs the sequence-level gradient <= TOL * |it|^2",
    "token-level": "unbiased for the token-level reverse-KL gradient (prefixes from the sampler), not the sequence's",
    "no-KL": "|E[g]|^2 <= TOL * |sequence-level|^2: the KL does nothing in expectation",
    "scaled": "parallel to the sequence-level gradient (cosine >= 1 - TOL), another length: a changed beta",
    "wrong-sign": "E[g] . sequence-level < 0: descent increases the sequence KL",
    "biased": "none of the above",
}


@dataclass(frozen=True)
class Objective:
    """What a cell optimises on the toy: its KL settings (betas relative to the leading one), its algorithm, and
    whether its updates are off-policy (minibatches of a batch, or an asynchronous sampler)."""

    kl: KLConfig
    algo: AlgorithmConfig
    off_policy: bool

    def label(self) -> str:
        kl, a = self.kl, self.algo
        if kl.placement == "none":
            text = "no KL"
        else:
            text = f"{kl.estimator}-{kl.placement}"
            if kl.placement == "reward+loss" and kl.beta_reward_value != kl.beta_loss_value:
                text += f" (beta reward {kl.beta_reward_value:.3g}, loss {kl.beta_loss_value:.3g})"
            text += "-rho" if kl.loss_form == "rho" else ""
            text += {"sequence": "", "reward_to_go": "-rtg", "token": "-tok"}[kl.credit]
            text += f" clamp {kl.clamp:g}" if kl.clamp is not None else ""
        clip = "" if a.clip_eps is None else f" clip {a.clip_eps:g}"
        return f"{text} | {a.advantage} G={a.group_size} {a.aggregation}{clip}"


def objective(kl: KLConfig, algo: AlgorithmConfig, off_policy: bool) -> Objective:
    """The canonical objective: beta 1 on the leading placement (the reward's, else the loss's), the other as a
    ratio; the estimator of a no-KL cell dropped (every one is the same objective)."""
    if kl.placement == "none":
        return Objective(KLConfig(), algo, off_policy)
    lead = kl.beta_reward_value or kl.beta_loss_value
    rel = {name: round(value / lead, 12) for name, value in
           (("beta_reward", kl.beta_reward_value), ("beta_loss", kl.beta_loss_value))}
    split = {k: v for k, v in rel.items() if kl.placement == "reward+loss" and v != 1.0}
    return Objective(replace(kl, beta=1.0, beta_reward=split.get("beta_reward"), beta_loss=split.get("beta_loss")),
                     algo, off_policy)


def objective_of_run(config) -> Objective:
    """A RunConfig's objective: off-policy when a batch feeds several updates or the sampler runs ahead."""
    off = config.optim.minibatch_prompts < config.optim.batch_prompts or config.rollout.async_level > 0
    return objective(config.kl, config.algorithm, off)


@dataclass(frozen=True)
class Row:
    """One objective in one regime ("on": mu = theta; "off": mu one update behind). Vectors are d/d(a, b)."""

    objective: Objective
    regime: str
    T: int
    expected: tuple[float, float]       # E[g], exact
    sequence: tuple[float, float]       # grad of the sequence-level reverse KL at theta
    token: tuple[float, float]          # token-level reverse KL, prefixes from the sampler (mu off-policy)
    bias_sq: float                      # |E[g] - sequence|^2, exact
    bias_sq_token: float                # |E[g] - token|^2, exact
    variance: float                     # trace of the covariance of one batch's estimate (sampled, seeded)
    verdict: str


def groups_for(T: int, group_size: int) -> int:
    """Groups enumerated for one exact expectation: the first member's 2^T values times the others' multisets."""
    return 2**T * math.comb(2**T + group_size - 2, group_size - 1)


def length_for(objectives) -> int | None:
    """The longest of LENGTHS at which every objective's enumeration fits ROW_BUDGET (MAX_ROWS at the shortest);
    None if none does."""
    sizes = {o.algo.group_size for o in objectives} or {1}
    for T in LENGTHS:
        budget = MAX_ROWS if T == LENGTHS[-1] else ROW_BUDGET
        if all(groups_for(T, g) * g <= budget for g in sizes):
            return T
    return None


def behaviour(theta: torch.Tensor, ref: torch.Tensor, T: int) -> torch.Tensor:
    """mu: theta one update of size STEP behind, along the sequence KL's gradient."""
    g = sequence_kl_grad(theta, ref, T)
    return theta + STEP * g / g.norm()


def exact_expected(obj: Objective, T: int, theta: torch.Tensor, ref: torch.Tensor,
                   mu: torch.Tensor | None) -> torch.Tensor:
    """E[one batch's estimate], [2], by enumerating every first member and multiset of the others (module doc)."""
    G, seqs = obj.algo.group_size, all_sequences(T)
    sampler = theta if mu is None else mu
    p = token_logprobs(sampler[None], seqs).sum(-1).exp()
    multisets = list(itertools.combinations_with_replacement(range(len(seqs)), G - 1))
    rest = torch.tensor(multisets, dtype=torch.long).reshape(len(multisets), G - 1)
    counts = torch.stack([(rest == k).sum(-1) for k in range(len(seqs))], -1)  # [multisets, 2^T]
    log_multinomial = math.lgamma(G) - torch.lgamma(counts.to(DTYPE) + 1).sum(-1)
    w_rest = (log_multinomial + (counts * p.log()).sum(-1)).exp()
    first = torch.arange(len(seqs)).repeat_interleave(len(rest))
    members = torch.cat([first[:, None], rest.repeat(len(seqs), 1)], 1)  # [groups, G]
    weight = p[first] * w_rest.repeat(len(seqs))
    est = TrialBatch(seqs[members], theta, ref, mu).gradients(obj.kl, algo=obj.algo)
    return (weight[:, None] * est).sum(0)


def verdict(expected: torch.Tensor, seq: torch.Tensor, tok: torch.Tensor) -> str:
    """The one word of VERDICTS, from the exact numbers."""
    s2 = float(seq @ seq)
    if float(expected @ expected) <= TOL * s2:
        return "no-KL"
    if float((expected - seq) @ (expected - seq)) <= TOL * s2:
        return "unbiased"
    if float((expected - tok) @ (expected - tok)) <= TOL * float(tok @ tok):
        return "token-level"
    cos = float(expected @ seq) / math.sqrt(float(expected @ expected) * s2)
    if cos >= 1 - TOL:
        return f"scaled x{math.sqrt(float(expected @ expected) / s2):.3g}"
    return "wrong-sign" if cos < 0 else "biased"


@functools.lru_cache(maxsize=256)
def _samples(sampler: tuple[float, float], T: int, trials: int, sequences: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return sample(torch.tensor(sampler, dtype=DTYPE), trials * sequences, T, gen).reshape(trials, sequences, T)


@contextlib.contextmanager
def _one_thread():
    """Intra-op threads cost more than they give on these small tensors: measured 0.29 s against 5.7 s for eight
    rows with 2 threads on the 2-core development machine under load. Restored after, for the caller's sake."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@functools.lru_cache(maxsize=256)
def row(obj: Objective, regime: str, T: int, theta=THETA, ref=REF, trials: int = TRIALS, sequences: int = SEQUENCES,
        seed: int = SEED) -> Row:
    """One objective in one regime ("on" or "off"); cached, since a sweep's cells share a few objectives.

    The variance: `trials` batches of `sequences` (rounded down to whole groups) drawn with `seed`, the same batches
    for every objective of one regime and T (paired, as in `orchestrate synthetic`)."""
    with _one_thread():
        return _row(obj, regime, T, theta, ref, trials, sequences, seed)


def _row(obj: Objective, regime: str, T: int, theta, ref, trials: int, sequences: int, seed: int) -> Row:
    th, rf = torch.tensor(theta, dtype=DTYPE), torch.tensor(ref, dtype=DTYPE)
    mu = behaviour(th, rf, T) if regime == "off" else None
    seq = sequence_kl_grad(th, rf, T)
    tok = token_reverse_kl_grad(th, rf, T, prefix=mu)
    expected = exact_expected(obj, T, th, rf, mu)
    n = max(obj.algo.group_size, sequences // obj.algo.group_size * obj.algo.group_size)
    y = _samples(tuple((th if mu is None else mu).tolist()), T, trials, n, seed)
    est = TrialBatch(y, th, rf, mu).gradients(obj.kl, algo=obj.algo)
    return Row(obj, regime, T, tuple(expected.tolist()), tuple(seq.tolist()), tuple(tok.tolist()),
               float(((expected - seq) ** 2).sum()), float(((expected - tok) ** 2).sum()),
               float(est.var(0, unbiased=True).sum()), verdict(expected, seq, tok))


def table(objectives, progress=None) -> tuple[int | None, list[Row]]:
    """(T, rows) for distinct objectives: on-policy rows for all, and off-policy rows for the off-policy ones.
    progress: optional callable(done, total). T None: no length fits (a group too large to enumerate), no rows."""
    objectives = list(dict.fromkeys(objectives))
    T = length_for(objectives)
    if T is None:
        return None, []
    jobs = [(o, "on") for o in objectives] + [(o, "off") for o in objectives if o.off_policy]
    rows = []
    for i, (o, regime) in enumerate(jobs):
        rows.append(row(o, regime, T))
        if progress:
            progress(i + 1, len(jobs))
    return T, rows


HEADER = ("objective", "policy", "E[g] (a, b)", "bias^2 seq", "bias^2 token", "variance", "verdict", "library settings")


def cells(r: Row) -> tuple[str, ...]:
    """A row's table cells, in HEADER's order."""
    policy = "on" if r.regime == "on" else "off (mu 1 update behind)"
    a, b = (round(v, 4) + 0.0 for v in r.expected)  # + 0.0: no "-0.0000" for a zero gradient
    return (r.objective.label(), policy, f"({a:+.4f}, {b:+.4f})", f"{r.bias_sq:.2e}",
            f"{r.bias_sq_token:.2e}", f"{r.variance:.2e}", r.verdict, libraries(r.objective))


def libraries(obj: Objective) -> str:
    """The library settings that compute this objective's KL gradient (trainer/analysis/library_map.yaml; "~": the
    same expected gradient, another estimate; a differing clamp shown), or "-"."""
    return library_map.load().labels(obj.kl, obj.algo)


def caption(T: int, rows: list[Row]) -> str:
    """What the numbers are: the toy, the truths and the verdicts' thresholds."""
    seq = rows[0].sequence if rows else (float("nan"),) * 2
    return (f"Toy model of section 3.3 (theta={THETA}, ref={REF}, T={T}, task reward 0, beta 1 on the leading "
            f"placement); E[g] exact through the trainer's loss, per sequence (the aggregation's constant divided "
            f"out). Sequence-level reverse-KL gradient ({seq[0]:+.4f}, {seq[1]:+.4f}); token-level beside it (its "
            f"prefixes from the sampler). Variance: one batch of {SEQUENCES} sequences, {TRIALS} batches, seed "
            f"{SEED}. Verdicts (TOL={TOL:g}, relative): " + "; ".join(f"{k}: {v}" for k, v in VERDICTS.items())
            + ". Library settings: those computing the same KL gradient (trainer/analysis/library_map.yaml; "
              "\"~\" the same expected gradient by another estimate; a clamp in brackets where it differs).")
