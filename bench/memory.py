"""Benchmark: what the memory knobs save on one training micro-batch, measured on CPU (issue 29, item 8).

    python bench/memory.py [--model qwen2.5-0.5b] [--layers 0] [--batch 2] [--prompt 128] [--response 256]
                           [--chunk 256]

A model built from its published shape (trainer/analysis/model_shapes.py; random weights, fp32, full depth unless
--layers), one micro-batch of --batch sequences of --prompt + --response random tokens, one forward and backward of
the log-probs and entropy the loss uses. Two ways, each in its own fresh process (the high-water mark of one cannot
hide the other's):
  before  the path before issue 29: no gradient checkpointing, one fp32 log-softmax over the full vocabulary for
          every response position, kept by autograd (entropy without grad, as now)
  after   the trainer's path: non-reentrant gradient checkpointing (trainer/model/memory_knobs.py) and the chunked
          selective log-softmax (trainer/model/logprobs.py response_logprobs, --chunk positions a chunk)
Printed per way: bytes autograd saves for backward (every tensor saved_tensors_hooks sees, each storage once,
parameters excluded), the peak RSS the step adds over the process after the model is built (VmHWM, reset before
the step; each gradient dropped once accumulated, as ZeRO's partitioning frees it), and the step's time;
then the ratios after / before. The baseline is `before`, in the same run.

The largest shipped shape that fits this machine (2 cores, 23 GB shared) at full depth is Qwen2.5-0.5B (494M
parameters, 2 GB of fp32 weights). Measured here (2026-11-25, loaded machine), 2 x (128 + 256) tokens, 24 layers:
saved for backward 2.30 GB before, 0.38 GB after (0.167); peak RSS added 3.27 GB before, 1.67 GB after (0.51);
time 1.33x after (the recomputation; the timings move with the load). CPU SDPA in fp32: a bf16 GPU keeps half the
bytes; the ratios are the point.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a script, bench/ comes first on sys.path, and bench/trainer.py would shadow the trainer package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import json
import os
import subprocess
import time

import torch


def _kib_to_gb(kib: int) -> float:
    return kib * 1024 / 1e9


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def _reset_peak_rss() -> int:
    """The RSS now, with the kernel's high-water mark (VmHWM) reset to it: building the model peaks higher than it
    settles (weights initialised, then copied), and that transient must not hide the step's own peak."""
    Path("/proc/self/clear_refs").write_text("5")
    return _status_kib("VmRSS")


def _peak_rss_kib() -> int:
    return max(_status_kib("VmHWM"), 0)


def measure(args: argparse.Namespace) -> dict:
    """One way (args.way), in this process: bytes saved for backward, peak RSS added, seconds."""
    from trainer.analysis.model_shapes import SHAPES, tiny_hf_model
    from trainer.model.logprobs import collate, response_logprobs

    torch.manual_seed(0)
    shape = SHAPES[args.model]
    model = tiny_hf_model(shape, args.layers or shape.layers)
    model.train()
    if args.way == "after":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(10, shape.vocab, (args.prompt,), generator=g).tolist() for _ in range(args.batch)]
    responses = [torch.randint(10, shape.vocab, (args.response,), generator=g).tolist() for _ in range(args.batch)]
    batch = collate(prompts, responses, 0)
    # Each gradient dropped once accumulated, as ZeRO reduces and partitions them bucket by bucket: the 4 bytes a
    # parameter of whole fp32 gradients would otherwise be most of either way's peak, and hide the activations.
    for p in model.parameters():
        p.register_post_accumulate_grad_hook(lambda q: setattr(q, "grad", None))
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            saved[storage.data_ptr()] = storage.nbytes()
        return t

    base_rss = _reset_peak_rss()
    start = time.perf_counter()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        if args.way == "after":
            logp, _ = response_logprobs(model, batch, with_entropy=True, chunk_tokens=args.chunk)
        else:
            logp = _before(model, batch)
    (-logp.sum()).backward()
    seconds = time.perf_counter() - start
    peak = _peak_rss_kib()
    return {"way": args.way, "saved_gb": sum(saved.values()) / 1e9, "peak_rss_added_gb": _kib_to_gb(peak - base_rss),
            "seconds": seconds, "params_m": sum(p.numel() for p in model.parameters()) / 1e6,
            "tokens": args.batch * (args.prompt + args.response)}


def _before(model, batch) -> torch.Tensor:
    """The log-probs as the trainer computed them before issue 29: the full-vocabulary fp32 log-softmax."""
    R = batch.response_mask.shape[1]
    out = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=batch.position_ids,
                use_cache=False, logits_to_keep=R + 1)
    logq = torch.log_softmax(out.logits[:, :R].float(), dim=-1)
    with torch.no_grad():
        (-(logq.exp() * logq).sum(-1)).mean()  # the entropy, as the step computes it
    return logq.gather(-1, batch.response_ids[..., None]).squeeze(-1).masked_fill(~batch.response_mask, 0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="qwen2.5-0.5b")
    parser.add_argument("--layers", type=int, default=0, help="decoder layers; 0: the published depth")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--response", type=int, default=256)
    parser.add_argument("--chunk", type=int, default=256)
    parser.add_argument("--way", choices=("before", "after"), help=argparse.SUPPRESS)  # one measurement, internal
    args = parser.parse_args()
    if args.way:
        torch.set_num_threads(2)
        print(json.dumps(measure(args)))
        return
    rows = {}
    for way in ("before", "after"):
        cmd = [sys.executable, __file__, "--way", way, *sys.argv[1:]]
        print(f"[bench] {way}: {args.model}, {args.batch} x ({args.prompt} + {args.response}) tokens ...", flush=True)
        # A fixed mmap threshold: glibc otherwise raises it after the first large free and serves later tensors
        # from a heap it never shrinks, and the RSS would count memory autograd has long released.
        env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072"}
        done = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
        rows[way] = json.loads(done.stdout.strip().splitlines()[-1])
    for way, r in rows.items():
        print(f"{way:>6}: {r['params_m']:.0f}M parameters, {r['tokens']} tokens: saved for backward "
              f"{r['saved_gb']:.2f} GB, peak RSS +{r['peak_rss_added_gb']:.2f} GB, {r['seconds']:.1f} s")
    b, a = rows["before"], rows["after"]
    print(f" ratio after/before: saved for backward {a['saved_gb'] / b['saved_gb']:.3f}, peak RSS added "
          f"{a['peak_rss_added_gb'] / max(b['peak_rss_added_gb'], 1e-9):.3f}, time {a['seconds'] / b['seconds']:.2f}")


if __name__ == "__main__":
    main()
