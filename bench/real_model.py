"""Benchmark: one RL step on a real pretrained model, SmolLM2-135M-Instruct, split into its parts, for each engine.

    python bench/real_model.py [--prompts 4] [--n 4] [--max-new 24] [--repeats 3]

The model (trainer/model/source.py: the pinned PyPI wheel's GGUF, converted once to fp32) under DeepSpeed ZeRO-3
on one CPU rank as the trainer puts it, its frozen reference copy, and both rollout engines on the same policy:
HF generate (baseline) and vLLM's CPU build beside it. Same prompts (the tiny task's test split under the model's
own chat template), same sampling (temperature 1.0, top_p 1.0, top_k off), the trainer's own functions for each
part, in the order `_step` runs them (docs/trainer.md):

  generation   RolloutEngine.generate: --prompts x --n samples, at most --max-new tokens each
  reference    score_logprobs on the frozen reference (the KL's log pi_ref)
  fwd+bwd      response_logprobs on the policy and engine.backward of a policy-gradient loss on them
  optimizer    engine.step (ZeRO-3 AdamW)
  sync         RolloutEngine.sync_weights (vLLM: gather the ZeRO-3 parameters, reload them; HF: nothing)

Each part is the median of --repeats after one warm-up; the two engines alternate within each repeat, so a load
spike on the shared machine hits both. Printed: seconds per part, its share of the step, the ratio vLLM / HF per
part, and generated tokens/s of each engine. vLLM's engine start is printed on its own, never counted.

What a CPU can say: how the parts of a step compare on this model here (the reference and the backward are as
large as the generation when responses are this short), that vLLM's weight sync costs what it costs, and that both
engines run the same step. What it cannot: any GPU figure (vLLM on CPU runs its eager CPU path, not CUDA graphs or
paged attention kernels), nor the split at the paper's 1024-token responses, where generation dominates.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a script, bench/ comes first on sys.path, and bench/trainer.py would shadow the trainer package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import statistics
import time

PARTS = ("generation", "reference", "fwd+bwd", "optimizer", "sync")


def setup(args):
    import deepspeed
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainer.model import distributed
    from trainer.model.source import ensure_smollm2
    from trainer.rollout.hf_engine import HFEngine
    from trainer.rollout.sampler import encode
    from trainer.rollout.vllm_engine import VLLMEngine
    from trainer.tasks import tiny as tiny_task
    from trainer.tasks.data import prompt_text
    from trainer.train import CACHE

    path = str(ensure_smollm2())
    tok = AutoTokenizer.from_pretrained(path)
    distributed.init(CACHE)
    policy = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    reference = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval().requires_grad_(False)
    distributed.hook_whole_layers(policy)
    engine, *_ = deepspeed.initialize(model=policy, optimizer=torch.optim.AdamW(policy.parameters(), lr=1e-6),
                                      config=distributed.deepspeed_config(bf16=False, grad_clip=1.0, micro_batches=1,
                                                                          memory_efficient_linear=False))
    start = time.perf_counter()
    vllm = VLLMEngine(engine.module, tok, path, dtype=torch.float32, seed=0, max_model_len=64 + args.max_new)
    print(f"vLLM engine start: {time.perf_counter() - start:.1f} s (not counted below)")
    prompts = [encode(tok, prompt_text(tok, ex, "tiny", True), 64) for ex in tiny_task.make_split("test", args.prompts)]
    return {"hf": HFEngine(engine.module, tok, ds_engine=engine), "vllm": vllm}, engine, reference, tok, prompts


def one_step(rollout, engine, reference, tok, prompts, args, seed: int) -> tuple[dict, int]:
    """Seconds of each part of one step with `rollout`, and the tokens it generated."""
    import torch

    from trainer.model.logprobs import collate, response_logprobs, score_logprobs
    from trainer.rollout.engine import Sampling

    t = {}
    clock = time.perf_counter()
    ro = rollout.generate(prompts, args.n, Sampling(max_new_tokens=args.max_new), seed=seed)
    t["generation"] = time.perf_counter() - clock
    clock = time.perf_counter()
    score_logprobs(reference, ro.prompt_ids, ro.response_ids, tok.pad_token_id, 64, 1.0)
    t["reference"] = time.perf_counter() - clock
    clock = time.perf_counter()
    batch = collate(ro.prompt_ids, ro.response_ids, tok.pad_token_id)
    logp, _ = response_logprobs(engine, batch)
    advantages = torch.randn(len(ro.response_ids), 1)  # the loss's shape is what costs, not its values
    engine.backward(-(advantages * logp * batch.response_mask).sum() / batch.response_mask.sum())
    t["fwd+bwd"] = time.perf_counter() - clock
    clock = time.perf_counter()
    engine.step()
    t["optimizer"] = time.perf_counter() - clock
    clock = time.perf_counter()
    rollout.sync_weights(engine.module)
    t["sync"] = time.perf_counter() - clock
    return t, sum(map(len, ro.response_ids))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--max-new", type=int, default=24)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    engines, engine, reference, tok, prompts = setup(args)
    times = {name: {p: [] for p in PARTS} for name in engines}
    tokens = {name: [] for name in engines}
    for r in range(args.repeats + 1):  # repeat 0 warms both engines up and is not counted
        for name, rollout in engines.items():
            t, n_tokens = one_step(rollout, engine, reference, tok, prompts, args, seed=100 + r)
            if r:
                for p in PARTS:
                    times[name][p].append(t[p])
                tokens[name].append(n_tokens / t["generation"])
            print(f"[{name} repeat {r}] " + ", ".join(f"{p} {t[p]:.2f}s" for p in PARTS), flush=True)
    med = {name: {p: statistics.median(v) for p, v in parts.items()} for name, parts in times.items()}
    print(f"\nSmolLM2-135M-Instruct, {args.prompts} prompts x {args.n} samples, <= {args.max_new} tokens, fp32, "
          f"ZeRO-3 on 1 CPU rank; median of {args.repeats} (seconds, share of the step)")
    print(f"{'part':<12}{'HF':>16}{'vLLM':>16}{'vLLM / HF':>12}")
    for p in (*PARTS, "step"):
        hf, vl = (sum(med[n].values()) if p == "step" else med[n][p] for n in ("hf", "vllm"))
        share = {n: (med[n][p] / sum(med[n].values()) if p != "step" else 1.0) for n in ("hf", "vllm")}
        ratio = f"{vl / hf:.2f}" if hf > 1e-4 else "-"
        print(f"{p:<12}{hf:>9.2f} ({share['hf']:>4.0%}){vl:>9.2f} ({share['vllm']:>4.0%}){ratio:>12}")
    hf_tps, vl_tps = statistics.median(tokens["hf"]), statistics.median(tokens["vllm"])
    print(f"generated tokens/s: HF {hf_tps:.1f}, vLLM {vl_tps:.1f}, vLLM / HF {vl_tps / hf_tps:.2f}")
    print("CPU figures, 2 shared cores: ratios within this run only; nothing here says what a GPU does.")
    engines["vllm"].close()


if __name__ == "__main__":
    main()
