"""Benchmark: our trainer's steps/s and tokens/s against TRL's GRPOTrainer on the same work, on CPU.

    pip install -e '.[bench]'   # TRL, for this benchmark only
    python bench/trainer.py [--steps 16] [--prompts 8] [--group 4] [--max-new 16]

Same tiny model (trainer/model/tiny_model.py), same prompts (the tiny task's train split), same batch (prompts x group),
same sampling (temperature 1.0, top_p 1.0, top_k off, max_new tokens), one CPU process each, KL beta 0.1 against
the frozen reference in both (ours: k1 in the reward, RLOO; TRL: its k3 in the loss), a learning rate of 1e-4.
TRL runs twice: as it runs by default on one CPU process (plain PyTorch, no DeepSpeed), and on DeepSpeed ZeRO-3
with the same ZeRO settings as ours, the like-for-like baseline (ours always runs ZeRO-3: that is the trainer).
The first step of each is a warm-up and is not timed. Each trainer runs in its own fresh Python process, so
neither inherits the other's state (DeepSpeed, for one, patches torch.nn.functional.linear process-wide).
Printed: median step time, steps/s, generated tokens/s, and the ratio TRL / ours (target: >= 1, our step no
slower than TRL's).
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


def ours(args) -> tuple[list[float], float]:
    from record.identity.run_key import run_key
    from trainer.config.run import RunConfig
    from trainer.train import RunContext, train

    tmp = Path(tempfile.mkdtemp(prefix="bench-ours-"))
    cfg = RunConfig.from_dict({
        "model": {"name_or_path": "tiny", "dtype": "fp32"},
        "data": {"dataset": "tiny", "val_every": 0},
        "rollout": {"engine": "hf", "max_response_tokens": args.max_new, "max_prompt_tokens": 64},
        "optim": {"lr": 1e-4, "steps": args.steps, "batch_prompts": args.prompts, "minibatch_prompts": args.prompts},
        "algorithm": {"group_size": args.group},
        "checkpoint": {"every": 10**6, "keep_last": 1},
        "kl": {"estimator": "k1", "placement": "reward", "beta": 0.1},
        "tracking": {"tracking_uri": f"sqlite:///{tmp / 'mlflow.db'}", "experiment": "bench"},
    })
    key = run_key(cfg)
    train(cfg, RunContext(run_dir=tmp / "run", run_key=key, micro_groups=args.prompts))
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp / 'mlflow.db'}")
    exp = client.get_experiment_by_name("bench")
    rid = client.search_runs([exp.experiment_id], filter_string=f"tags.run_key = '{key}'")[0].info.run_id
    times = [m.value for m in sorted(client.get_metric_history(rid, "perf/step_time_s"), key=lambda m: m.step)]
    lengths = [m.value for m in client.get_metric_history(rid, "train/response_length")]
    return times[1:], statistics.mean(lengths) * args.prompts * args.group


# TRL on ZeRO-3: the settings our trainer uses on CPU (trainer/model/distributed.py), "auto" where HF fills them in.
TRL_ZERO3 = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
             "gradient_clipping": "auto", "bf16": {"enabled": False},
             "zero_optimization": {"stage": 3, "memory_efficient_linear": False}}


def trl(args, zero3: bool = False) -> tuple[list[float], float]:
    import os

    import datasets
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from trainer.model.tiny_model import ensure_tiny_model
    from trainer.tasks.rewards import tiny_reward
    from trainer.tasks.tiny import make_split

    if zero3:  # a one-process "distributed" job, as our trainer sets up for itself outside Slurm
        for key, value in {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29531", "RANK": "0", "WORLD_SIZE": "1",
                           "LOCAL_RANK": "0"}.items():
            os.environ.setdefault(key, value)
    path = str(ensure_tiny_model())
    tok = AutoTokenizer.from_pretrained(path)
    rows = [{"prompt": [{"role": "user", "content": ex["problem"]}], "answer": ex["answer"]}
            for ex in make_split("train", args.prompts * (args.steps + 1))]

    def reward(completions, answer, **_):
        return [tiny_reward(c[0]["content"] if isinstance(c, list) else c, a) for c, a in zip(completions, answer)]

    class Timer(TrainerCallback):
        def __init__(self):
            self.times, self.t0 = [], None

        def on_step_begin(self, *a, **k):
            self.t0 = time.perf_counter()

        def on_step_end(self, *a, **k):
            self.times.append(time.perf_counter() - self.t0)

    timer = Timer()
    cfg = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="bench-trl-"), per_device_train_batch_size=args.prompts * args.group,
        num_generations=args.group, max_completion_length=args.max_new, max_steps=args.steps, learning_rate=1e-4,
        beta=0.1, temperature=1.0, top_p=1.0, top_k=0, use_cpu=True, report_to=[], logging_steps=10**6,
        save_strategy="no", bf16=False, seed=0, deepspeed=TRL_ZERO3 if zero3 else None,
    )
    torch.manual_seed(0)
    trainer = GRPOTrainer(model=AutoModelForCausalLM.from_pretrained(path), reward_funcs=reward, args=cfg,
                          train_dataset=datasets.Dataset.from_list(rows), processing_class=tok, callbacks=[timer])
    trainer.train()
    return timer.times[1:], float("nan")


def contestant(name: str, args) -> tuple[list[float], float] | None:
    """Step times of one trainer, measured in a child process; None when TRL is not installed."""
    cmd = [sys.executable, __file__, "--only", name, "--steps", str(args.steps), "--prompts", str(args.prompts),
           "--group", str(args.group), "--max-new", str(args.max_new)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    if out.returncode != 0 or not lines:
        raise SystemExit(f"{name} failed (exit {out.returncode}):\n{out.stderr[-3000:]}")
    result = json.loads(lines[-1][len("RESULT "):])
    if result.get("missing"):
        print(f"TRL is not installed ({result['missing']}); run `pip install -e '.[bench]'` for the comparison")
        return None
    return result["times"], result["tokens"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--max-new", type=int, default=16)
    ap.add_argument("--only", choices=("ours", "trl", "trl-zero3"), help=argparse.SUPPRESS)  # a child's role
    args = ap.parse_args()
    if args.only:
        try:
            run = {"ours": ours, "trl": trl, "trl-zero3": lambda a: trl(a, zero3=True)}[args.only]
            times, tokens = run(args)
            print("RESULT " + json.dumps({"times": times, "tokens": tokens}))
        except ImportError as err:
            print("RESULT " + json.dumps({"missing": str(err)}))
        return
    print(f"work: {args.prompts} prompts x {args.group} rollouts, <= {args.max_new} new tokens, {args.steps} steps",
          flush=True)
    ours_t, tokens = contestant("ours", args)
    o = statistics.median(ours_t)
    print(f"ours: median step {o:.3f} s, {1 / o:.2f} steps/s, {tokens / o:.0f} generated tokens/s", flush=True)
    for name, label in (("trl-zero3", "TRL GRPOTrainer on DeepSpeed ZeRO-3 (like for like)"),
                        ("trl", "TRL GRPOTrainer, plain PyTorch (no DeepSpeed)")):
        theirs = contestant(name, args)
        if not theirs:
            break
        t = statistics.median(theirs[0])
        print(f"{label}: median step {t:.3f} s, {1 / t:.2f} steps/s")
        print(f"  ratio its step / our step: {t / o:.2f}x   target >= 1: {'met' if t >= o else 'NOT met'}", flush=True)


if __name__ == "__main__":
    main()
