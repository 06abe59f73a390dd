"""Benchmark: our trainer's step against TRL's GRPOTrainer on the same work, on CPU, interleaved over rounds.

    pip install -e '.[bench]'   # TRL, for this benchmark only
    python bench/trainer.py --model smollm2 [--rounds 3] [--steps 4] [--prompts 4] [--group 4] [--max-new 32]
    python bench/trainer.py --model tiny    [--rounds 3] [--steps 16] [--prompts 8] [--group 4] [--max-new 16]

Same model (SmolLM2-135M-Instruct from its pinned wheel, or the project's tiny model), same prompts (the tiny task's
train problems under the model's chat template, as our trainer builds them, and at every step the ones it draws:
each contestant's generate calls are recorded and compared, and the bench stops if they differ), same batch (prompts
x group), same sampling (temperature 1.0, top_p 1.0, top_k off) and the same response length: every response is
exactly --max-new tokens (a stop token is forbidden before it, bench/trainer_contestants.py), one CPU process each,
fp32, no gradient checkpointing, KL beta 0.1 against the frozen reference in both (ours: k1 in the reward, RLOO;
TRL: its k3 in the loss), a learning rate of 1e-4. TRL runs twice: on DeepSpeed ZeRO-3 with our ZeRO settings (the
like-for-like baseline: ours always runs ZeRO-3) and as it runs by default in one CPU process (plain PyTorch).

Each contestant runs in a fresh Python process (DeepSpeed, for one, patches torch process-wide), its first step a
warm-up, not timed. The contestants take turns, round after round (the order rotates each round), so a load
spike on a shared machine lands on all of them rather than on one; each round's ratio our step / its step is
taken within the round, and the table gives the median over rounds with its range. Target: our step at most
0.7x TRL-ZeRO-3's and at most 0.85x TRL plain's. Each step is split into generation, reference log-probs, the
policy's forward + backward, the optimizer step, the weight sync and the rest (for TRL, as far as its own
profiling records tell).
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a script, bench/ comes first on sys.path, and bench/trainer.py would shadow the trainer package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import json
import statistics
import subprocess
import tempfile
import time

import trainer_contestants as contestants  # bench/, beside this file

NAMES = {"ours": "ours (DeepSpeed ZeRO-3)", "trl-zero3": "TRL GRPOTrainer, DeepSpeed ZeRO-3 (like for like)",
         "trl": "TRL GRPOTrainer, plain PyTorch"}
TARGETS = {"trl-zero3": 0.7, "trl": 0.85}
DEFAULTS = {"smollm2": {"steps": 4, "prompts": 4, "max_new": 32},
            "tiny": {"steps": 16, "prompts": 8, "max_new": 16}}


def child(name: str, args) -> dict | None:
    """The timed steps of one contestant and the work it did (`contestants.recorded_work`), measured in a fresh
    process; None when TRL is not installed."""
    cmd = [sys.executable, __file__, "--only", name, "--model", args.model, "--steps", str(args.steps),
           "--prompts", str(args.prompts), "--group", str(args.group), "--max-new", str(args.max_new)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    if out.returncode != 0 or not lines:
        raise SystemExit(f"{name} failed (exit {out.returncode}):\n{out.stderr[-3000:]}")
    result = json.loads(lines[-1][len("RESULT "):])
    if result.get("missing"):
        print(f"TRL is not installed ({result['missing']}); run `pip install -e '.[bench]'` for the comparison")
        return None
    return result


def run_child(args) -> None:
    """In a contestant's process: run it, print its steps and work as one RESULT line. Everything it writes (a
    SmolLM2 run's checkpoint is 2 GB) goes into one scratch directory, removed when the child ends."""
    with tempfile.TemporaryDirectory(prefix="bench-trainer-") as scratch:
        tempfile.tempdir = scratch  # the contestants' mkdtemp calls land here
        try:
            model_dir = contestants.fixed_length_model(contestants.model_source(args.model), args.max_new)
            work: list[dict] = []
            with contestants.recorded_work(work):
                if args.only == "ours":
                    steps = contestants.ours(args, model_dir)
                else:
                    steps = contestants.trl(args, model_dir, zero3=args.only == "trl-zero3")
            print("RESULT " + json.dumps({"steps": steps, "work": work}))
        except ImportError as err:
            print("RESULT " + json.dumps({"missing": str(err)}))


def same_work(results: dict[str, dict]) -> None:
    """Stop unless every contestant generated from the same prompts, step for step, the same number of tokens: a
    comparison of different work (another prompt's length is other padding) would measure the work."""
    (first, want), *rest = ((name, r["work"]) for name, r in results.items())
    for name, work in rest:
        if work != want:
            raise SystemExit(f"{name} did not do {first}'s work: prompts or generated lengths differ "
                             f"({len(work)} against {len(want)} generate calls); the comparison would not hold")


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def report(rounds: list[dict[str, list[dict]]], args) -> None:
    """Per contestant: median step and parts over every timed step of every round; per TRL contestant, the ratio
    of the round medians, its median and range over rounds."""
    names = [n for n in NAMES if all(n in r for r in rounds)]
    print(f"\n{args.model}: {args.prompts} prompts x {args.group}, {args.max_new} tokens each, {len(rounds)} rounds of "
          f"{args.steps - 1} timed steps; seconds, median over every timed step (range of the round medians)")
    print(f"{'':<44}" + "".join(f"{p:>12}" for p in (*contestants.PARTS, "step")))
    for n in names:
        steps = [s for r in rounds for s in r[n]]
        per_round = [statistics.median(s["step"] for s in r[n]) for r in rounds]
        cells = [f"{statistics.median(s[p] for s in steps):.3f}" for p in (*contestants.PARTS, "step")]
        print(f"{NAMES[n]:<44}" + "".join(f"{c:>12}" for c in cells)
              + f" ({min(per_round):.3f}-{max(per_round):.3f})")
    tokens = args.prompts * args.group * args.max_new
    ours = [statistics.median(s["step"] for s in r["ours"]) for r in rounds]
    print(f"ours: {tokens / statistics.median(ours):.0f} generated tokens/s")
    for n in names[1:]:
        ratios = [o / statistics.median(s["step"] for s in r[n]) for o, r in zip(ours, rounds)]
        met = "met" if statistics.median(ratios) <= TARGETS[n] else "NOT met"
        print(f"our step / {NAMES[n]}'s: {spread(ratios)} over {len(ratios)} rounds; target <= {TARGETS[n]}: {met}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=tuple(DEFAULTS), default="smollm2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, help="steps per contestant and round, the first untimed")
    ap.add_argument("--prompts", type=int)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--max-new", type=int)
    ap.add_argument("--profile", help="with --only NAME: torch.profiler's table of that contestant's last step, into "
                                      "this file")
    ap.add_argument("--only", choices=tuple(NAMES), help="run one contestant in this process, print its steps")
    args = ap.parse_args()
    for key, value in DEFAULTS[args.model].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.only:
        run_child(args)
        return
    print(f"work: {args.model}, {args.prompts} prompts x {args.group}, {args.max_new} tokens, {args.steps} steps "
          f"(1 warm-up), {args.rounds} rounds", flush=True)
    order, rounds, missing, start = list(NAMES), [], set(), time.perf_counter()
    for r in range(args.rounds):
        got, results = {}, {}
        for name in order[r % 3:] + order[: r % 3]:  # rotated, so no contestant always runs first
            result = None if name in missing else child(name, args)
            if result is None:
                missing.add(name)
                continue
            results[name], got[name] = result, result["steps"]
            print(f"[round {r + 1}] {name}: median step {statistics.median(s['step'] for s in got[name]):.3f} s",
                  flush=True)
        same_work(results)
        rounds.append(got)
    report(rounds, args)
    print(f"bench time {time.perf_counter() - start:.0f} s; ratios within a round are what compare: a shared "
          f"machine moves absolute times")


if __name__ == "__main__":
    main()
