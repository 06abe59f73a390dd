"""Probe: where does SmolLM2-135M-Instruct start above zero? Candidate (problems, prompt) pairs, measured before any RL.

    OMP_NUM_THREADS=1 nice -n 10 python bench/learnable_probe.py [--n 32] [--max-new 24] [--only NAME ...]

GRPO learns nothing from a group whose rewards are all equal, so a task for a CPU-sized run must start between
about 10% and 60%. For each candidate: greedy and sampled (temperature 1.0, top_k 0, top_p 1.0, one sample per
problem, seed 0) completions of --n problems under the chat template, graded by the training reward
(trainer/tasks/rewards.py: math_reward, the last `\\boxed{}`, Math-Verify when the strings differ). Printed per
candidate: accuracy and the fraction of replies that box anything, greedy and sampled, mean response tokens,
seconds, and the first two greedy replies.

Problem families (answers in the form the MATH datasets use):
- `signed`: `Compute a + b.` / `a - b` with a, b in -9..9 (negatives in parentheses): integer answers, negatives;
- `positive`: `a + b` and `a - b` with a, b in 1..9 and a > b for a difference: the easiest row;
- `samedenom`: `Compute a/d + b/d.` (d 2-9, a, b 1..d-1): reduced fractions and whole numbers;
- `mixed`: the two above alternating, one worked example of each (the fraction one written `p/q`, so a copied
  form takes Math-Verify's path against the `\\frac{p}{q}` gold);
- `fractions`: trainer/tasks/fraction.py's `a/b ± c/d` (measured at 0/16 before: the reference row).
Prompt forms:
- `suffix`: the problem and " Give the final answer within \\boxed{}." (the fractions task's instruction);
- `inline`: one user message holding two worked examples (`Compute 2 + 3.` -> `\\boxed{5}`) then the problem;
- `shots`: the same two examples as earlier chat turns (user, assistant), then the problem as the last user turn;
- `echo`: as `shots`, the replies restating the sum before the box (`2 + 3 = \\boxed{5}`).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/trainer.py would shadow the trainer package

import argparse
import random
import time
from fractions import Fraction

SUFFIX = " Give the final answer within \\boxed{}."
SHOTS = {  # two worked examples per family, answers not in the probe's problems' form by coincidence only
    "signed": [("Compute 2 + 3.", "\\boxed{5}"), ("Compute -4 - (-1).", "\\boxed{-3}")],
    "positive": [("Compute 2 + 3.", "\\boxed{5}"), ("Compute 8 - 6.", "\\boxed{2}")],
    "samedenom": [("Compute 1/5 + 2/5.", "\\boxed{\\frac{3}{5}}"), ("Compute 3/4 + 3/4.", "\\boxed{\\frac{3}{2}}")],
    "mixed": [("Compute 2 + 3.", "\\boxed{5}"), ("Compute 3/4 + 3/4.", "\\boxed{3/2}")],
    "fractions": [("Compute 1/2 + 1/3 as a fraction in lowest terms.", "\\boxed{\\frac{5}{6}}"),
                  ("Compute 1/4 - 1/2 as a fraction in lowest terms.", "\\boxed{-\\frac{1}{4}}")],
}


def _latex(v: Fraction) -> str:
    if v.denominator == 1:
        return str(v.numerator)
    return f"{'-' if v < 0 else ''}\\frac{{{abs(v.numerator)}}}{{{v.denominator}}}"


def problems(family: str, n: int) -> list[tuple[str, str]]:
    rng = random.Random(f"probe:{family}")
    out = []
    if family == "fractions":
        from trainer.tasks import fraction as fraction_task

        return [(e["problem"], e["answer"]) for e in fraction_task.make_split("test", n, seed=0)]
    while len(out) < n:
        kind = family if family != "mixed" else ("signed", "samedenom")[len(out) % 2]
        if kind == "positive":
            a, b, op = rng.randint(1, 9), rng.randint(1, 9), rng.choice("+-")
            a, b = (max(a, b), min(a, b)) if op == "-" else (a, b)
            text, value = f"Compute {a} {op} {b}.", Fraction(a + b if op == "+" else a - b)
        elif kind == "signed":
            a, b, op = rng.randint(-9, 9), rng.randint(-9, 9), rng.choice("+-")
            text = f"Compute {a} {op} {f'({b})' if b < 0 else b}."
            value = Fraction(a + b if op == "+" else a - b)
        else:
            d = rng.randint(2, 9)
            a, b = rng.randint(1, d - 1), rng.randint(1, d - 1)
            text, value = f"Compute {a}/{d} + {b}/{d}.", Fraction(a + b, d)
        if (text, _latex(value)) not in out and text not in {q for shots in SHOTS.values() for q, _ in shots}:
            out.append((text, _latex(value)))
    return out


def messages(family: str, form: str, problem: str) -> list[dict]:
    if form == "suffix":
        return [{"role": "user", "content": problem + SUFFIX}]
    if form == "inline":
        shown = "\n".join(f"{q}\n{a}" for q, a in SHOTS[family])
        return [{"role": "user", "content": f"Answer with only the final answer in \\boxed{{}}, like these:\n{shown}"
                                            f"\n\n{problem}"}]
    turns = []
    for q, a in SHOTS[family]:
        a = f"{q.removeprefix('Compute ').removesuffix('.')} = {a}" if form == "echo" else a
        turns += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
    return turns + [{"role": "user", "content": problem}]


def run(model, tok, family, form, args, torch, grade):
    items = problems(family, args.n)
    texts = [tok.apply_chat_template(messages(family, form, q), tokenize=False, add_generation_prompt=True)
             for q, _ in items]
    enc = tok(texts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
    row, t0 = {}, time.time()
    for mode in ("greedy", "sampled"):
        torch.manual_seed(0)
        with torch.no_grad():
            out = model.generate(**enc, do_sample=mode == "sampled", max_new_tokens=args.max_new,
                                 temperature=1.0 if mode == "sampled" else None, top_k=0 if mode == "sampled" else None,
                                 top_p=1.0 if mode == "sampled" else None, pad_token_id=tok.pad_token_id)
        resp = out[:, enc["input_ids"].shape[1]:]
        replies = tok.batch_decode(resp, skip_special_tokens=True)
        row[mode] = (sum(grade(r, {"answer": g}) for r, (_, g) in zip(replies, items, strict=True)) / len(items),
                     sum("\\boxed" in r for r in replies) / len(items),
                     float((resp != tok.pad_token_id).sum(1).float().mean()), replies[:2])
    g, s = row["greedy"], row["sampled"]
    print(f"{family:10s} {form:7s} greedy {g[0]:.3f} (boxed {g[1]:.2f}, {g[2]:.1f} tok)  sampled {s[0]:.3f} "
          f"(boxed {s[1]:.2f}, {s[2]:.1f} tok)  {time.time() - t0:.0f}s  e.g. {g[3]!r}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=32)
    ap.add_argument("--max-new", type=int, default=24)
    ap.add_argument("--only", nargs="*", default=None, help="family:form pairs, e.g. signed:shots")
    args = ap.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainer.model.source import ensure_smollm2
    from trainer.tasks.rewards import reward_fn

    torch.set_num_threads(1)
    path = str(ensure_smollm2())
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    grade = reward_fn("fractions")  # math_reward on example["answer"]
    pairs = [p.split(":") for p in args.only] if args.only else [
        (f, m) for f in ("signed", "samedenom", "mixed", "fractions") for m in ("suffix", "inline", "shots")]
    print(f"{args.n} problems each, max_new {args.max_new}", flush=True)
    for family, form in pairs:
        run(model, tok, family, form, args, torch, grade)


if __name__ == "__main__":
    main()
