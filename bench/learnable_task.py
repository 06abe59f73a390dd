"""Bench: can SmolLM2-135M-Instruct learn a generated task (`--data`, default `small_sums`) on CPU, across seeds?

    OMP_NUM_THREADS=1 nice -n 10 python bench/learnable_task.py [--data small_sums] [--seeds 0 1 2] [--steps 8]

For each seed: greedy accuracy on the first --eval held-out `test` problems before training, then --steps of
group-relative policy gradient (GRPO advantages: reward minus the group mean, over the group's std) with a
k3 KL penalty to the frozen start, --prompts train problems x --n samples each (--temperature, 1.0 by default;
top_k and top_p off), AdamW at --lr, then the same greedy evaluation. Prompts are the trainer's own
(trainer/tasks/data.py: prompt_text, chat template on), graded by the training reward (trainer/tasks/rewards.py:
reward_fn(--data)). The response mask holds the end-of-turn token, as the trainer's does (docs/trainer.md), and
position ids follow the left padding, as generate's do.

This loop is plain PyTorch and HF generate, not the trainer's DeepSpeed step (bench/real_model.py times that);
it answers one question cheaply: does accuracy move on CPU at all, and by more than seed noise.

Printed per step: the mean reward, the mean per-token k3 KL to the start, seconds. Per seed: accuracy
before/after, the rewards of every step, the KL at the last step, and the parameters' relative movement
||theta - theta_0|| / ||theta_0||. Then the mean change, its std over seeds, and a one-sided sign test over the
per-problem flips pooled across seeds (exact binomial: P(at least this many wrong->right of all flips | p = 1/2)).
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a script, bench/ comes first on sys.path, and bench/trainer.py would shadow the trainer package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import math
import random
import statistics
import time


def generate(model, tok, prompts, max_new, sample, torch, temperature=1.0):
    tok.padding_side = "left"
    enc = tok(prompts, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = model.generate(**enc, max_new_tokens=max_new, do_sample=sample, pad_token_id=tok.pad_token_id,
                             temperature=temperature if sample else None, top_p=1.0 if sample else None,
                             top_k=0 if sample else None)
    return enc, out[:, enc["input_ids"].shape[1]:]


def accuracy(model, tok, examples, prompts, args, grade, torch):
    right = []
    for i in range(0, len(examples), 16):
        _, resp = generate(model, tok, prompts[i:i + 16], args.max_new, False, torch)
        for e, r in zip(examples[i:i + 16], tok.batch_decode(resp, skip_special_tokens=True), strict=True):
            right.append(grade(r, e) == 1.0)
    return right


def response_mask(resp, eos, torch):
    """1 up to and including the first end-of-turn token (the pad is the same id, so padding is what follows it)."""
    is_eos = (resp == eos).long()
    return ((is_eos.cumsum(1) - is_eos) == 0).float()


def token_logprobs(model, ids, mask, start, torch):
    positions = (mask.cumsum(1) - 1).clamp(min=0)  # left padding must not shift positions (generate's rule)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits[:, start - 1:-1].float()
    return torch.log_softmax(logits, -1).gather(-1, ids[:, start:, None])[..., 0]


def run_seed(seed, args, path, heldout, heldout_prompts, grade):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainer.config.run import DataConfig
    from trainer.tasks.data import load_examples, prompt_text

    torch.manual_seed(seed)
    tok = AutoTokenizer.from_pretrained(path)
    policy = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    reference = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval().requires_grad_(False)
    start = [p.detach().clone() for p in policy.parameters()]
    policy.eval()
    before = accuracy(policy, tok, heldout, heldout_prompts, args, grade, torch)
    train = load_examples(DataConfig(dataset=args.data), "train")
    random.Random(f"{seed}:train").shuffle(train)
    opt = torch.optim.AdamW(policy.parameters(), lr=args.lr, weight_decay=0.0)
    kl, step_rewards, began = float("nan"), [], time.time()
    for step in range(args.steps):
        if args.budget_min and time.time() - began > 60 * args.budget_min:  # a shared machine: stop in time
            print(f"  seed {seed}: --budget-min {args.budget_min} spent after {step} steps", flush=True)
            break
        t0 = time.time()
        batch = train[step * args.prompts:(step + 1) * args.prompts]
        prompts = [prompt_text(tok, e, args.data, True) for e in batch for _ in range(args.n)]
        enc, resp = generate(policy, tok, prompts, args.max_new, True, torch, args.temperature)
        texts = tok.batch_decode(resp, skip_special_tokens=True)
        rewards = torch.tensor([grade(t, e) for t, e in zip(texts, [e for e in batch for _ in range(args.n)],
                                                            strict=True)]).view(args.prompts, args.n)
        adv = ((rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True) + 1e-4)).view(-1)
        ids = torch.cat([enc["input_ids"], resp], 1)
        rmask = response_mask(resp, tok.eos_token_id, torch)
        mask = torch.cat([enc["attention_mask"], rmask.long()], 1)
        policy.train()
        logp = token_logprobs(policy, ids, mask, enc["input_ids"].shape[1], torch)
        with torch.no_grad():
            ref = token_logprobs(reference, ids, mask, enc["input_ids"].shape[1], torch)
        k3 = torch.exp(ref - logp) - (ref - logp) - 1
        per_tok = -adv[:, None] * torch.exp(logp - logp.detach()) + args.beta * k3
        loss = (per_tok * rmask).sum() / rmask.sum().clamp(min=1)
        opt.zero_grad()
        loss.backward()
        opt.step()
        policy.eval()
        kl = float((k3.detach() * rmask).sum() / rmask.sum().clamp(min=1))
        step_rewards.append(float(rewards.mean()))
        print(f"  seed {seed} step {step}: reward {rewards.mean():.3f} kl {kl:.4f} {time.time() - t0:.0f}s",
              flush=True)
    after = accuracy(policy, tok, heldout, heldout_prompts, args, grade, torch)
    moved = math.sqrt(sum(float((p.detach() - s).pow(2).sum()) for p, s in zip(policy.parameters(), start,
                                                                                   strict=True)))
    norm = math.sqrt(sum(float(s.pow(2).sum()) for s in start))
    return before, after, kl, moved / norm, step_rewards


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="small_sums", choices=["small_sums", "fractions"])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--max-new", type=int, default=48)
    ap.add_argument("--eval", type=int, default=64)
    ap.add_argument("--budget-min", type=float, default=0.0, help="stop training after this many minutes (0: off)")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--beta", type=float, default=0.01)
    args = ap.parse_args()

    import torch
    from transformers import AutoTokenizer

    from trainer.config.run import DataConfig
    from trainer.model.source import ensure_smollm2
    from trainer.tasks.data import load_examples, prompt_text
    from trainer.tasks.rewards import reward_fn

    torch.set_num_threads(1)
    path = str(ensure_smollm2())
    tok = AutoTokenizer.from_pretrained(path)
    heldout = load_examples(DataConfig(dataset=args.data), "test")[: args.eval]
    heldout_prompts = [prompt_text(tok, e, args.data, True) for e in heldout]
    grade = reward_fn(args.data)
    print(f"{args.data}: held-out {len(heldout)}, {args.steps} steps x {args.prompts} prompts x {args.n} samples, "
          f"max_new {args.max_new}, temperature {args.temperature}, lr {args.lr}, beta {args.beta}", flush=True)
    deltas, up, down = [], 0, 0
    for seed in args.seeds:
        before, after, kl, rel, step_rewards = run_seed(seed, args, path, heldout, heldout_prompts, grade)
        b, a = sum(before) / len(before), sum(after) / len(after)
        deltas.append(a - b)
        gained = sum(1 for x, y in zip(before, after, strict=True) if y and not x)
        lost = sum(1 for x, y in zip(before, after, strict=True) if x and not y)
        up, down = up + gained, down + lost
        print(f"seed {seed}: accuracy {b:.3f} -> {a:.3f} ({sum(before)}/{len(before)} -> {sum(after)}/"
              f"{len(after)}; flips wrong->right {gained}, right->wrong {lost}), kl {kl:.4f}, relative parameter "
              f"movement {rel:.2e}, rewards per step "
              f"{' '.join(f'{r:.2f}' for r in step_rewards)} (mean {statistics.mean(step_rewards):.3f})", flush=True)
    flips = up + down
    p = sum(math.comb(flips, k) for k in range(up, flips + 1)) / 2 ** flips if flips else 1.0
    sd = statistics.stdev(deltas) if len(deltas) > 1 else float("nan")
    print(f"mean change {statistics.mean(deltas):+.3f} (std over {len(deltas)} seeds {sd:.3f}); flips wrong->right "
          f"{up}, right->wrong {down}; one-sided sign test p = {p:.3f}")


if __name__ == "__main__":
    main()
