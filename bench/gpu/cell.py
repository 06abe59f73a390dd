"""A training cell of the paper's shape for a few steps, with its step split, tokens/s and MFU (issue 27).

    python bench/gpu/cell.py [--shape qwen2.5-0.5b] [--layers 0] [--steps 3] [--prompts 8] [--group 5]
                             [--response 1024] [--prompt 256] [--json FILE]

The cell is sweeps/onpolicy.yaml's: RLOO, K1 in the reward (beta 0.1), DeepSpeed ZeRO-3 (bf16 on a GPU, fp32 on
CPU), HF rollouts, `--response` tokens a response. The model is built from a published shape
(trainer/analysis/model_shapes.py: its widths, its vocabulary, all its layers unless --layers; random weights, no hub),
with the tiny byte-level tokenizer: token ids past the tokenizer decode to nothing, and with 151,936-way random logits a
stop token is all but never sampled, so every response runs to `--response` tokens, as the paper's do at the start.
Rewards are 0: this measures time, not learning.

Printed per step (the first is a warm-up and is left out of the summary): the split into generation, the reference's
log-probs, the policy's forward, backward, optimizer step, checkpoint and the rest (timed around each call, the
device synchronised at each edge); generated tokens/s; and the update's model FLOPs utilisation, against a bf16
(GPU) or fp32 (CPU) matmul measured in the same run, PaLM's count: 6N + 12 L q_dim T FLOPs a trained token, N the
matmul parameters (the layers and the head), T the sequence length; recomputation for checkpointing not counted.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # bench/gpu/ would otherwise stand first on sys.path

import argparse
import json
import statistics
import tempfile
import time
from collections import defaultdict

import torch


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def matmul_flops(size: int, dtype: torch.dtype, repeats: int = 10) -> float:
    """FLOP/s of one size x size x size matrix product on this device, after three warm-ups."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    a, b = (torch.randn(size, size, device=device, dtype=dtype) for _ in range(2))
    for _ in range(3):
        a @ b
    sync()
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    sync()
    return 2 * size**3 * repeats / (time.perf_counter() - start)


class Split:
    """Seconds per phase of the current step, each call timed between two device synchronisations."""

    def __init__(self):
        self.now: dict[str, float] = defaultdict(float)
        self.tokens = {"generated": 0, "trained": 0, "seq": 0}

    def timed(self, phase: str, fn):
        def call(*args, **kwargs):
            sync()
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                sync()
                self.now[phase] += time.perf_counter() - start
        return call


def shaped_model(directory: Path, name: str, layers: int) -> Path:
    from trainer.analysis.model_shapes import SHAPES, tiny_hf_model
    from trainer.model.tiny_model import build_tokenizer

    tokenizer, shape = build_tokenizer(), SHAPES[name]
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):  # a 1.5B random init is minutes on a CPU
        model = tiny_hf_model(shape, layers=layers or shape.layers, seed=0)
    if torch.cuda.is_available():
        model = model.to(torch.bfloat16)  # what the trainer loads there: half the bytes to write and read
    model.config.pad_token_id, model.config.eos_token_id = tokenizer.pad_token_id, tokenizer.eos_token_id
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def instrument(split: Split) -> None:
    """Wrap the calls a step makes (trainer/train.py `_step`) with the split's timers."""
    import trainer.rollout.hf_engine
    import trainer.run.checkpoint
    import trainer.run.export
    import trainer.train

    generate = trainer.rollout.hf_engine.HFEngine.generate

    def counted(self, prompt_ids, n, sampling, seed):
        rollouts = generate(self, prompt_ids, n, sampling, seed)
        split.tokens["generated"] += sum(len(r) for r in rollouts.response_ids)
        split.tokens["trained"] += sum(len(p) + len(r) for p, r in zip(rollouts.prompt_ids, rollouts.response_ids))
        split.tokens["seq"] = max(split.tokens["seq"], *(len(p) + len(r) for p, r in
                                                        zip(rollouts.prompt_ids, rollouts.response_ids)))
        return rollouts

    trainer.rollout.hf_engine.HFEngine.generate = split.timed("generation", counted)
    trainer.train.score_logprobs = split.timed("reference", trainer.train.score_logprobs)
    trainer.train.response_logprobs = split.timed("forward", trainer.train.response_logprobs)
    trainer.run.checkpoint.save = split.timed("checkpoint", trainer.run.checkpoint.save)
    trainer.run.export.save_final = split.timed("export", trainer.run.export.save_final)
    build_engine = trainer.train.build_engine

    def built(*args, **kwargs):
        engine, reference, tokenizer = build_engine(*args, **kwargs)
        engine.backward = split.timed("backward", engine.backward)  # instance attributes: train.py calls these
        engine.step = split.timed("optimizer", engine.step)
        return engine, reference, tokenizer

    trainer.train.build_engine = built


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", default="qwen2.5-0.5b")
    p.add_argument("--layers", type=int, default=0, help="decoder layers (0: the published number)")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--group", type=int, default=5, help="samples per prompt (the paper's RLOO: 5)")
    p.add_argument("--response", type=int, default=1024)
    p.add_argument("--prompt", type=int, default=256, help="rollout.max_prompt_tokens")
    p.add_argument("--json", type=Path, help="also write the summary here")
    args = p.parse_args()

    from record.identity.run_key import run_key
    from trainer.analysis.model_shapes import SHAPES
    from trainer.config.run import RunConfig
    from trainer.train import RunContext, train

    gpu = torch.cuda.is_available()
    try:
        import mlflow  # noqa: F401 - carried as wheels (bench/gpu/wheels.sh); without it the cell still times
    except Exception as err:  # noqa: BLE001 - whatever stops it importing there
        print(f"MLflow does not import here ({type(err).__name__}: {err}); the cell runs without tracking")
        import trainer.train
        from record.tracking.null import NullTracker

        trainer.train._open_tracker = lambda *args, **kwargs: NullTracker()
    peak = matmul_flops(8192 if gpu else 1024, torch.bfloat16 if gpu else torch.float32)
    tmp = Path(tempfile.mkdtemp(prefix="gpu-cell-"))
    shape = SHAPES[args.shape]
    layers = args.layers or shape.layers
    path = shaped_model(tmp / "model", args.shape, layers)
    split = Split()
    instrument(split)
    steps: list[dict] = []

    import trainer.train

    step = trainer.train._step

    def each(cfg, run, index, dist, preempt):
        split.now.clear()
        split.tokens.update(generated=0, trained=0, seq=0)
        start = time.perf_counter()
        out = step(cfg, run, index, dist, preempt)
        sync()
        total = time.perf_counter() - start
        row = {"step": index + 1, "total_s": total, **{k: round(v, 3) for k, v in split.now.items()},
               "rest_s": total - sum(split.now.values()), **split.tokens}
        print(json.dumps(row), flush=True)
        steps.append(row)
        return out

    trainer.train._step = each
    cfg = RunConfig.from_dict({
        "model": {"name_or_path": str(path), "dtype": "bf16", "chat_template": False},
        "data": {"dataset": "tiny", "val_every": 0},
        "rollout": {"engine": "hf", "max_response_tokens": args.response, "max_prompt_tokens": args.prompt},
        "optim": {"lr": 1e-6, "steps": args.steps, "batch_prompts": args.prompts, "minibatch_prompts": args.prompts},
        "algorithm": {"group_size": args.group},
        "checkpoint": {"every": args.steps, "keep_last": 1},
        "kl": {"estimator": "k1", "placement": "reward", "beta": 0.1},
        "tracking": {"tracking_uri": f"sqlite:///{tmp / 'mlflow.db'}", "experiment": "gpu-cell"},
    })
    if gpu:
        torch.cuda.reset_peak_memory_stats()
    train(cfg, RunContext(run_dir=tmp / "run", run_key=run_key(cfg), micro_groups=args.prompts))

    timed = steps[1:] or steps
    n_matmul = layers * shape.layer_params + shape.vocab * shape.hidden  # the head's matmul whether tied or not
    q_dim = shape.heads * shape.dim_head

    def median(key):
        return statistics.median(r.get(key, 0.0) for r in timed)

    update_s = median("forward") + median("backward") + median("optimizer")
    trained, seq = median("trained"), median("seq")
    update_flops = (6 * n_matmul + 12 * layers * q_dim * seq) * trained
    summary = {
        "device": torch.cuda.get_device_name() if gpu else "cpu", "torch": torch.__version__,
        "shape": args.shape, "layers": layers, "params_matmul": n_matmul, "dtype": "bf16" if gpu else "fp32",
        "prompts": args.prompts, "group": args.group, "response_tokens": args.response,
        "steps_timed": len(timed), "step_s": median("total_s"),
        "split_s": {k: median(k) for k in ("generation", "reference", "forward", "backward", "optimizer",
                                            "checkpoint", "export", "rest_s")},
        "generated_tokens_per_s": median("generated") / max(median("generation"), 1e-9),
        "matmul_flops": peak, "update_flops": update_flops,
        "update_mfu": update_flops / max(update_s, 1e-9) / peak,
        "peak_gpu_gib": torch.cuda.max_memory_allocated() / 2**30 if gpu else None,
    }
    print(json.dumps(summary, indent=1))
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "steps": steps}, indent=1))


if __name__ == "__main__":
    main()
