"""Benchmark: the vLLM rollout engine against HF generate, on CPU: generation, weight sync, and the trainer's step.

    python bench/rollout.py [--prompts 64] [--n 8] [--max-new 16] [--repeats 3] [--syncs 10]
                            [--steps 10] [--train-prompts 8] [--group 4] [--trainer-runs 2]

Same tiny model (trainer/model/tiny_model.py, ~0.35M parameters, fp32), warm-started and put under DeepSpeed ZeRO-3 on
one CPU rank as the trainer does; same prompts (the tiny task's test split, chat template on), same sampling
(temperature 1.0, top_p 1.0, top_k off). Three measurements, each in its own fresh Python process (DeepSpeed
patches torch process-wide, and vLLM's process groups outlive its engine), baseline HF generate throughout:
1. generation: `VLLMEngine.generate` against `HFEngine.generate` (the whole model gathered once, DeepSpeed's hooks
   off, micro-batches of 64 as in the trainer), generated tokens/s, median of --repeats after one warm-up each, the
   two engines alternating. vLLM's engine start is printed on its own, never counted in tokens/s;
2. weight sync: `VLLMEngine.sync_weights` on the ZeRO-3 module (gather every parameter, reload it into vLLM's
   worker), median of --syncs, and its share of the vLLM trainer's median step (from 3);
3. the trainer: `trainer.train.train` for --steps with rollout.engine=hf and =vllm (sqlite MLflow store in a tmp
   dir), median `perf/step_time_s` and `perf/weight_sync_s` read back from MLflow, the first step not counted;
   --trainer-runs whole runs per engine, alternating, and per engine the run with the lowest median step.
Printed: each number and the ratio vLLM / HF.

What was measured here (2 CPU cores shared with other work, so the figures move with the load): the trainer's step
with vLLM rollouts took 1.2-1.26x the HF engine's in every run without a load spike, and the weight sync (about
21-38 ms, of which the ZeRO-3 gather is 5-7 ms and vLLM's in-place reload the rest) is about 20% of that step.
Generation alone swung from 0.3x to 3.7x over five runs: on big batches vLLM's eager CPU path can beat HF generate,
and on a loaded machine either can lose. vLLM's per-step overhead (scheduling, per-request sampling,
detokenisation) and CPU kernels built for big models weigh most on a 0.35M-parameter model, where HF generate is a
handful of tiny matmuls per token. So these CPU numbers are for correctness and the weight-sync cost; the speed that
matters is vLLM's on a GPU, which this bench does not measure and does not claim. Compare the ratios of one run.
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

FOOTER = """\
On 2 CPU cores these numbers are for correctness and the weight-sync cost, not for vLLM's speed: on a 0.35M-parameter
model its per-step overhead (scheduling, per-request sampling, detokenisation) and CPU kernels built for big models
weigh most, while HF generate is a handful of tiny matmuls per token. The speed that matters is vLLM's on a GPU,
which this bench does not claim. Timings move with the machine's load: compare the ratios within one run."""


def engines(args) -> dict:
    """Items 1 and 2 in one process: the ZeRO-3 policy, an HFEngine on it and a VLLMEngine beside it."""
    import deepspeed
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainer.model import distributed
    from trainer.model.tiny_model import ensure_tiny_model
    from trainer.rollout.engine import Sampling
    from trainer.rollout.hf_engine import HFEngine
    from trainer.rollout.vllm_engine import VLLMEngine, gathered_parameters
    from trainer.tasks.data import prompt_text
    from trainer.tasks.tiny import make_split
    from trainer.train import CACHE

    path = str(ensure_tiny_model())
    tok = AutoTokenizer.from_pretrained(path)
    distributed.init(CACHE)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    distributed.hook_whole_layers(model)  # as the trainer does on CPU
    ds, *_ = deepspeed.initialize(model=model, optimizer=torch.optim.AdamW(model.parameters(), lr=1e-4),
                                  config=distributed.deepspeed_config(bf16=False, grad_clip=None, micro_batches=1,
                                                                      memory_efficient_linear=False))
    prompts = [tok(prompt_text(tok, ex, "tiny", True), add_special_tokens=False)["input_ids"]
               for ex in make_split("test", args.prompts)]
    sampling = Sampling(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=args.max_new)
    hf = HFEngine(ds.module, tok, ds_engine=ds)
    t = time.perf_counter()
    vllm = VLLMEngine(ds.module, tok, path, dtype=torch.float32, seed=0,
                      max_model_len=max(map(len, prompts)) + args.max_new)
    start_s = time.perf_counter() - t
    vllm.sync_weights(ds.module)  # as the trainer does before its first step

    def timed(engine, seed) -> tuple[float, int]:
        t0 = time.perf_counter()
        ro = engine.generate(prompts, args.n, sampling, seed)
        return time.perf_counter() - t0, sum(map(len, ro.response_ids))

    runs = {"hf": [], "vllm": []}
    for rep in range(args.repeats + 1):  # repeat 0 is the warm-up; alternating, so drift hits both alike
        for name, engine in (("hf", hf), ("vllm", vllm)):
            seconds, tokens = timed(engine, seed=100 + rep)
            if rep:
                runs[name].append((seconds, tokens))
    syncs, gathers = [], []
    for _ in range(args.syncs + 1):
        t0 = time.perf_counter()
        vllm.sync_weights(ds.module)
        syncs.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        for _name, _tensor in gathered_parameters(ds.module):  # the ZeRO-3 gather alone, for the split of the cost
            pass
        gathers.append(time.perf_counter() - t0)
    vllm.close()
    distributed.teardown()
    return {"start_s": start_s, "runs": runs, "sync_s": syncs[1:], "gather_s": gathers[1:]}


def trainer_steps(args, engine: str) -> dict:
    """Item 3: the real trainer with rollout.engine=`engine`; its per-step metrics read back from MLflow."""
    from mlflow import MlflowClient

    from record.identity.run_key import run_key
    from trainer.config.run import RunConfig
    from trainer.train import RunContext, train

    tmp = Path(tempfile.mkdtemp(prefix=f"bench-rollout-{engine}-"))
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    cfg = RunConfig.from_dict({
        "model": {"name_or_path": "tiny", "dtype": "fp32"},
        "data": {"dataset": "tiny", "val_every": 0},
        "rollout": {"engine": engine, "max_response_tokens": args.max_new, "max_prompt_tokens": 64},
        "optim": {"lr": 1e-4, "steps": args.steps, "batch_prompts": args.train_prompts,
                  "minibatch_prompts": args.train_prompts},
        "algorithm": {"group_size": args.group},
        "checkpoint": {"every": 10**6, "keep_last": 1},
        "kl": {"estimator": "k1", "placement": "reward", "beta": 0.1},
        "tracking": {"tracking_uri": uri, "experiment": "bench"},
    })
    key = run_key(cfg)
    t0 = time.perf_counter()
    train(cfg, RunContext(run_dir=tmp / "run", run_key=key, micro_groups=args.train_prompts))
    wall = time.perf_counter() - t0
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("bench")
    rid = client.search_runs([exp.experiment_id], filter_string=f"tags.run_key = '{key}'")[0].info.run_id

    def series(name: str) -> list[float]:
        return [m.value for m in sorted(client.get_metric_history(rid, name), key=lambda m: m.step)][1:]

    return {"step_s": series("perf/step_time_s"), "sync_s": series("perf/weight_sync_s"),
            "tokens_per_s": series("perf/tokens_per_s"), "wall_s": wall}


def child(role: str, args) -> dict:
    """The result of one measurement, taken in a fresh Python process."""
    cmd = [sys.executable, __file__, "--only", role] + [f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items()
                                                        if k != "only"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    if out.returncode != 0 or not lines:
        raise SystemExit(f"{role} failed (exit {out.returncode}):\n{out.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=64, help="prompts per generate call (item 1)")
    ap.add_argument("--n", type=int, default=8, help="samples per prompt (item 1)")
    ap.add_argument("--max-new", type=int, default=16, help="new-token budget (items 1 and 3)")
    ap.add_argument("--repeats", type=int, default=3, help="timed generate calls per engine, after one warm-up")
    ap.add_argument("--syncs", type=int, default=10, help="timed weight syncs, after one warm-up")
    ap.add_argument("--steps", type=int, default=10, help="trainer steps per engine (item 3)")
    ap.add_argument("--train-prompts", type=int, default=8, help="prompts per trainer step (item 3)")
    ap.add_argument("--group", type=int, default=4, help="rollouts per prompt in the trainer (item 3)")
    ap.add_argument("--trainer-runs", type=int, default=2, help="whole trainer runs per engine, alternating (item 3)")
    ap.add_argument("--only", choices=("engines", "trainer-hf", "trainer-vllm"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.only:
        run = engines if args.only == "engines" else lambda a: trainer_steps(a, args.only.removeprefix("trainer-"))
        print("RESULT " + json.dumps(run(args)))
        return
    med = statistics.median

    print(f"1. generation: {args.prompts} prompts x n={args.n}, <= {args.max_new} new tokens, temperature 1.0, "
          f"median of {args.repeats} after a warm-up (baseline: HF generate)", flush=True)
    e = child("engines", args)
    rate = {}
    for name, label in (("hf", "HF generate (ZeRO-3, gathered once)"), ("vllm", "vLLM (CPU build, in-process)")):
        seconds = [s for s, _ in e["runs"][name]]
        tokens = [k for _, k in e["runs"][name]]
        rate[name] = med(k / s for s, k in e["runs"][name])
        print(f"   {label:38s} {med(seconds):7.3f} s/call  {rate[name]:8.0f} tokens/s  "
              f"({med(tokens):.0f} tokens/call)")
    print(f"   ratio vLLM / HF tokens/s: {rate['vllm'] / rate['hf']:.2f}x   "
          f"vLLM engine start (not in tokens/s): {e['start_s']:.1f} s", flush=True)

    print(f"2. weight sync: VLLMEngine.sync_weights on the ZeRO-3 module, median of {args.syncs}", flush=True)
    sync_ms, gather_ms = 1e3 * med(e["sync_s"]), 1e3 * med(e["gather_s"])
    print(f"   {sync_ms:.1f} ms per sync (of which the ZeRO-3 gather alone: {gather_ms:.1f} ms)", flush=True)

    print(f"3. the trainer: {args.train_prompts} prompts x {args.group} rollouts, <= {args.max_new} new tokens, "
          f"{args.steps} steps, median over steps 2..{args.steps}, the faster of {args.trainer_runs} runs "
          f"(baseline: rollout.engine=hf)", flush=True)
    # Whole runs take seconds, so load from other work can land on one engine's run only: alternate the engines
    # over --trainer-runs rounds and keep, per engine, its least loaded run (the lowest median step).
    runs = {"hf": [], "vllm": []}
    for _ in range(args.trainer_runs):
        for name in runs:
            runs[name].append(child(f"trainer-{name}", args))
    steps = {name: min(rs, key=lambda r: med(r["step_s"])) for name, rs in runs.items()}
    for name, s in steps.items():
        every = ", ".join(f"{med(r['step_s']):.3f}" for r in runs[name])
        print(f"   rollout.engine={name:4s} step {med(s['step_s']):.3f} s  weight sync {1e3 * med(s['sync_s']):5.1f} "
              f"ms  perf/tokens_per_s {med(s['tokens_per_s']):4.0f}  (run with start-up {s['wall_s']:.1f} s; "
              f"median step of each run: {every})")
    hf_step, vllm_step = med(steps["hf"]["step_s"]), med(steps["vllm"]["step_s"])
    print("   (HF's weight sync is a no-op: it samples from the trained module itself)")
    print(f"   ratio vLLM / HF step time: {vllm_step / hf_step:.2f}x   weight sync in the vLLM step: "
          f"{med(steps['vllm']['sync_s']) / vllm_step:.1%} (item 2's sync: {sync_ms / 1e3 / vllm_step:.1%} of it)")
    print(FOOTER)


if __name__ == "__main__":
    main()
