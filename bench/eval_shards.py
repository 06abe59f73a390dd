"""Benchmark: evaluation throughput of our path (whole, in shards, on two workers) against lm-eval's own command line.

    .venv/bin/python bench/eval_shards.py                          # HF backend, 200 problems x k=8, 2 rounds
    .venv/bin/python bench/eval_shards.py --backends hf,vllm       # and vLLM's CPU build

Same model (the default tiny model, fp32 on CPU), task (the tiny task, its 200 test problems, chat template on), k,
token budget and sampling (temperature 1.0, top_p 1.0): the task file lm-eval's command line reads is the one our
evaluation renders (eval/taskfiles.py). Each contestant runs in a fresh process, timed from start to exit (imports
and model load included, as a job pays them), the contestants interleaved round by round so that a load spike
hits all of them; each figure is the median over the rounds. Baseline: `lm_eval` on the command line.

- ours, whole: `orchestrate eval MODEL_DIR` with no shards: one lm-eval call a task, but on HF each sample
  generated alone (eval/backends.py `seeded_samples`: the price of samples that do not depend on the shards);
- ours, sharded: `--shard-samples S` (each shard one lm-eval call, saved as it ends);
- ours, 2 workers: the same shards on two worker processes (what two GPUs would run; here two CPU processes on a
  2-core machine, so it shows the cost of the second engine as much as the parallelism).
Generated tokens are counted with the model's tokenizer from the samples each contestant wrote.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from transformers import AutoTokenizer  # noqa: E402

from eval import backends, taskfiles  # noqa: E402
from eval.local_data import tiny_rows, write_rows  # noqa: E402
from trainer.model.tiny_model import ensure_tiny_model  # noqa: E402
from trainer.rollout import vllm_support  # noqa: E402

BIN = Path(sys.executable).parent


def ours(model: Path, data: Path, out: Path, backend: str, k: int, shard: int | None, workers: int | None) -> list:
    cmd = [str(BIN / "orchestrate"), "eval", str(model), "--tasks", "tiny", "--k", str(k), "--max-tokens", "16",
           "--backend", backend, "--runs-root", str(out), "--tracking-uri", f"sqlite:///{out / 'm.db'}",
           "--data-dir", str(data)]
    cmd += ["--shard-samples", str(shard)] if shard else []
    cmd += ["--workers", str(workers)] if workers else []
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    (samples,) = out.glob("eval/*/eval/step_000000/tiny/seed_0.samples.jsonl")
    return [s for line in samples.read_text().splitlines() for s in json.loads(line)["samples"]]


def cli(model: Path, tasks: Path, out: Path, backend: str) -> list:
    engine = {k: v for k, v in backends.vllm_model_args(model, 0, gpu=False).items()
              if v is not None and k != "batch_size"}  # the CLI's --batch_size says it
    args = f"pretrained={model},dtype=float32" if backend == "hf" else ",".join(f"{k}={v}" for k, v in engine.items())
    cmd = [str(BIN / "lm_eval"), "--model", backend, "--model_args", args, "--tasks", "tiny", "--include_path",
           str(tasks), "--apply_chat_template", "--fewshot_as_multiturn", "--log_samples", "--output_path", str(out),
           "--seed", "0"]
    cmd += ["--batch_size", str(backends.HF_CPU_BATCH_SIZE), "--device", "cpu"] if backend == "hf" else \
        ["--batch_size", "auto"]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    (samples,) = out.rglob("samples_tiny_*.jsonl")
    return [s for line in samples.read_text().splitlines() for s in json.loads(line)["filtered_resps"][0]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--shard", type=int, default=200, help="samples a shard for the sharded contestants")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--backends", default="hf", help="comma-separated: hf, vllm (vLLM's CPU build)")
    args = parser.parse_args()
    chosen = args.backends.split(",")
    vllm_support.prepare_environment(in_process=True)  # the CLI's vLLM reads the same environment as ours
    model = ensure_tiny_model()
    tokenizer = AutoTokenizer.from_pretrained(model)
    work = Path(tempfile.mkdtemp(prefix="bench-eval-shards-"))
    data = work / "data"
    write_rows(data, "tiny_test", tiny_rows("tiny_test"))
    results: dict[tuple[str, str], list[tuple[float, int, int]]] = {}
    for backend in chosen:
        gen = backends.generation_kwargs(backend, 1.0, 1.0, 16, backends.stop_strings(tokenizer, True))
        tasks = taskfiles.render({"tiny": data / "tiny_test.jsonl"}, work / f"tasks-{backend}", args.k, gen)
        contestants = {"lm_eval CLI (baseline)": lambda o, b=backend, t=tasks: cli(model, t, o, b),
                       "ours, whole": lambda o, b=backend: ours(model, data, o, b, args.k, None, 1),
                       f"ours, shards of {args.shard}": lambda o, b=backend: ours(model, data, o, b, args.k,
                                                                                   args.shard, 1),
                       f"ours, shards of {args.shard}, 2 workers": lambda o, b=backend: ours(
                           model, data, o, b, args.k, args.shard, 2)}
        for r in range(args.rounds):
            for name, run in contestants.items():
                out = work / f"{backend}-{r}-{len(results.get((backend, name), []))}-{abs(hash(name))}"
                out.mkdir(parents=True)
                start = time.perf_counter()
                samples = run(out)
                took = time.perf_counter() - start
                tokens = sum(len(ids) for ids in tokenizer(samples, add_special_tokens=False)["input_ids"])
                results.setdefault((backend, name), []).append((took, len(samples), tokens))
                print(f"  {backend} round {r}: {name}: {took:.1f} s, {len(samples)} samples, {tokens} tokens",
                      flush=True)
    print(f"\n200 problems x k={args.k} of the tiny task, wall time of a fresh process (median of {args.rounds}):")
    print(f"{'backend':8} {'contestant':38} {'seconds':>8} {'samples/s':>10} {'tokens/s':>9} {'time vs CLI':>11}")
    for backend in chosen:
        base = statistics.median(t for t, _, _ in results[(backend, "lm_eval CLI (baseline)")])
        for (b, name), runs in results.items():
            if b != backend:
                continue
            took = statistics.median(t for t, _, _ in runs)
            samples, tokens = runs[0][1], statistics.median(n for _, _, n in runs)
            print(f"{b:8} {name:38} {took:8.1f} {samples / took:10.1f} {tokens / took:9.0f} {took / base:10.2f}x")


if __name__ == "__main__":
    main()
