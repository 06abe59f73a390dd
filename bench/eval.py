"""Two comparisons of mean@k evaluation on CPU, with the tiny model.

1. (default) Harness overhead: lm-eval's hf backend against a direct batched `model.generate` loop. Both sample
   k completions for the same N tiny-task prompts (chat template applied) with the same settings (temperature 1.0,
   top_p 1.0, top_k off, the same token budget and batch size) on CPU, and grade them with the same reward; the
   model is loaded once, outside the timings, and the two are timed alternately (best of --repeats) so that both
   see the same load on a shared machine. Prints samples/s of each and their ratio.
2. (--vllm) lm-eval's vLLM backend (vLLM's CPU build, eval/backends.py's CPU settings) against its hf backend, same
   model, task file and sampling. Model load / engine start is timed apart from the evaluations (best of --repeats
   on one engine), and the time inside the engine's `generate` apart from lm-eval's own work. These are not vLLM's
   speed: on a 2-core machine its engine start (import, model load, KV cache, scheduler; paid once per evaluation
   seed, since the seed is an engine argument) costs seconds that hf does not pay, its CPU kernels are built for
   many-core servers, and a tiny model gives each engine step too little arithmetic for paged attention and
   continuous batching to show. Expect vLLM at par with hf here at best (measured twice, 200 x 8 samples of the
   default tiny model: evaluation 1.28x and 0.95x hf's samples/s, engine start about 5 s against 4-5 s to load hf,
   one-shot 1.00x both times; absolute figures moved 4x with the shared machine's other load).
   Its speed is a GPU question (CUDA graphs, continuous batching of a 7B model); this run checks that it works
   and what CPU CI pays for it.

    .venv/bin/python bench/eval.py                 # N=32 prompts x k=8, the fast tiny model, 2 threads
    .venv/bin/python bench/eval.py --n 64 --k 16 --model default
    .venv/bin/python bench/eval.py --vllm --n 200 --k 8 --model default
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

# This file is bench/eval.py: run as a script, its own directory comes first on sys.path and `import eval` would
# import this file instead of the project's eval package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: tests/support's tiny-model build

from eval import backends, taskfiles  # noqa: E402
from tests.support.tiny_model import fast_config  # noqa: E402
from trainer.model.tiny_model import ensure_tiny_model  # noqa: E402
from trainer.tasks import tiny as tiny_task  # noqa: E402
from trainer.tasks.common import write_jsonl  # noqa: E402
from trainer.tasks.rewards import tiny_reward  # noqa: E402


def direct(model, tokenizer, prompts: list[str], k: int, max_tokens: int, batch_size: int) -> list[str]:
    """k samples per prompt with plain `generate`, in batches of `batch_size` rows (prompt-major)."""
    rows = [p for p in prompts for _ in range(k)]
    texts = []
    for start in range(0, len(rows), batch_size):
        enc = tokenizer(rows[start:start + batch_size], return_tensors="pt", padding=True, padding_side="left",
                        add_special_tokens=False)
        with torch.no_grad():
            out = model.generate(**enc, do_sample=True, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=max_tokens,
                                 pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
        texts += tokenizer.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    return texts


class GenerateTimer:
    """Seconds spent inside `model.generate`: wall time minus this is the harness's own work, a figure that a
    shared machine's load (which slows the forward passes of both paths alike) does not distort."""

    def __init__(self, model):
        self.seconds, self._generate = 0.0, model.generate

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return self._generate(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start

        model.generate = timed

    def take(self) -> float:
        seconds, self.seconds = self.seconds, 0.0
        return seconds


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=32, help="prompts (tiny test split)")
    parser.add_argument("--k", type=int, default=8, help="samples per prompt")
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--model", choices=("fast", "default"), default="fast")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of each; the fastest is reported")
    parser.add_argument("--vllm", action="store_true", help="compare lm-eval's vLLM backend with its hf backend")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    (vllm_vs_hf if args.vllm else harness_vs_direct)(args)


def harness_vs_direct(args) -> None:
    import lm_eval
    from lm_eval.tasks import TaskManager

    model_dir = ensure_tiny_model(fast_config() if args.model == "fast" else None)
    examples = tiny_task.make_split("test", args.n)
    with tempfile.TemporaryDirectory() as tmp:
        data_file = write_jsonl(examples, Path(tmp) / "tiny_test.jsonl")
        lm = backends.hf_lm(model_dir, device="cpu", batch_size=args.batch_size)
        until = backends.stop_strings(lm.tokenizer, chat_template=True)
        gen = backends.generation_kwargs("hf", 1.0, 1.0, args.max_tokens, until)
        rendered = taskfiles.render({"tiny": data_file}, Path(tmp) / "tasks", args.k, gen)
        manager = TaskManager(include_path=str(rendered), include_defaults=False)
        prompts = [lm.tokenizer.apply_chat_template([{"role": "user", "content": ex["problem"]}], tokenize=False,
                                                    add_generation_prompt=True) for ex in examples]
        direct(lm.model, lm.tokenizer, prompts[:2], 1, args.max_tokens, args.batch_size)  # warm-up
        timer = GenerateTimer(lm.model)

        harness, direct_runs = [], []  # (wall seconds, seconds inside generate) per run
        for _ in range(args.repeats):  # interleaved, so both see the same load on a shared machine
            timer.take()
            start = time.perf_counter()
            res = lm_eval.simple_evaluate(model=lm, tasks=["tiny"], task_manager=manager, apply_chat_template=True,
                                          log_samples=True, bootstrap_iters=0, random_seed=0, numpy_random_seed=0,
                                          torch_random_seed=0, fewshot_random_seed=0)
            harness.append((time.perf_counter() - start, timer.take()))
            torch.manual_seed(0)
            start = time.perf_counter()
            texts = direct(lm.model, lm.tokenizer, prompts, args.k, args.max_tokens, args.batch_size)
            direct_acc = sum(tiny_reward(t, ex["answer"]) for t, ex in zip(texts, [e for e in examples
                                                                                for _ in range(args.k)]))
            direct_runs.append((time.perf_counter() - start, timer.take()))
        (harness_s, harness_gen), (direct_s, direct_gen) = min(harness), min(direct_runs)

    samples = args.n * args.k
    got = res["samples"]["tiny"]
    assert sum(len(s["filtered_resps"][0]) for s in got) == samples, "lm-eval did not keep all k samples"
    print(f"tiny model {args.model} ({model_dir.name}), {args.n} prompts x k={args.k}, max {args.max_tokens} tokens, "
          f"batch {args.batch_size}, {args.threads} threads, CPU; best of {args.repeats} interleaved runs")
    for name, wall, gen, acc in (("lm-eval hf backend", harness_s, harness_gen, res["results"]["tiny"]["acc,all"]),
                                 ("direct generate   ", direct_s, direct_gen, direct_acc / samples)):
        print(f"  {name}: {wall:7.2f} s {samples / wall:8.1f} samples/s   in generate {gen:6.2f} s, "
              f"outside {wall - gen:5.2f} s ({(wall - gen) / wall:.0%})   mean@{args.k} {acc:.3f}")
    print(f"  harness / direct wall-time ratio: {harness_s / direct_s:.2f}x; lm-eval's own work outside generate: "
          f"{harness_s - harness_gen:.2f} s for {samples} samples ({(harness_s - harness_gen) / samples * 1e3:.2f} ms "
          f"per sample)")



def timed_evaluations(lm, backend: str, args, examples, tmp: Path) -> tuple[list[tuple[float, float]], dict]:
    """`--repeats` evaluations of the tiny task on `lm`: (wall seconds, seconds inside generate) each, and the
    last result."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    data_file = write_jsonl(examples, tmp / "tiny_test.jsonl")
    until = backends.stop_strings(lm.tokenizer, chat_template=True)
    gen = backends.generation_kwargs(backend, 1.0, 1.0, args.max_tokens, until)
    manager = TaskManager(include_path=str(taskfiles.render({"tiny": data_file}, tmp / backend, args.k, gen)),
                          include_defaults=False)
    timer, runs = GenerateTimer(lm.model), []
    for _ in range(args.repeats):
        start = time.perf_counter()
        res = lm_eval.simple_evaluate(model=lm, tasks=["tiny"], task_manager=manager, apply_chat_template=True,
                                      log_samples=True, bootstrap_iters=0, random_seed=0, numpy_random_seed=0,
                                      torch_random_seed=0, fewshot_random_seed=0)
        runs.append((time.perf_counter() - start, timer.take()))
    assert sum(len(s["filtered_resps"][0]) for s in res["samples"]["tiny"]) == args.n * args.k, "samples lost"
    return runs, res


def vllm_vs_hf(args) -> None:
    model_dir = ensure_tiny_model(fast_config() if args.model == "fast" else None)
    examples = tiny_task.make_split("test", args.n)
    samples, figures = args.n * args.k, {}
    with tempfile.TemporaryDirectory() as tmp:
        # hf first: an in-process vLLM engine on CPU changes this process's torch threading.
        for backend in ("hf", "vllm"):
            start = time.perf_counter()
            if backend == "hf":
                lm = backends.hf_lm(model_dir, device="cpu", batch_size=args.batch_size)
            else:
                lm = backends.vllm_lm(backends.vllm_model_args(model_dir, seed=0, max_model_len=128))
            ready = time.perf_counter() - start
            runs, res = timed_evaluations(lm, backend, args, examples, Path(tmp))
            figures[backend] = (ready, *min(runs), res["results"]["tiny"]["acc,all"])
            if backend == "vllm":
                backends.release_vllm(lm)
    print(f"tiny model {args.model} ({model_dir.name}), {args.n} prompts x k={args.k}, max {args.max_tokens} tokens, "
          f"{args.threads} threads, CPU; evaluations: best of {args.repeats} on one loaded model / engine")
    for name, (ready, wall, gen, acc) in figures.items():
        label = "engine start" if name == "vllm" else "model load  "
        print(f"  {name:4}: {label} {ready:6.2f} s | evaluation {wall:6.2f} s {samples / wall:7.1f} samples/s, in "
              f"generate {gen:6.2f} s {samples / gen:7.1f} samples/s | one-shot (start + evaluation) "
              f"{samples / (ready + wall):6.1f} samples/s | mean@{args.k} {acc:.3f}")
    (hf_ready, hf_wall, hf_gen, _), (v_ready, v_wall, v_gen, _) = figures["hf"], figures["vllm"]
    print(f"  vllm / hf samples/s: evaluation {hf_wall / v_wall:.2f}x, in generate {hf_gen / v_gen:.2f}x, one-shot "
          f"{(hf_ready + hf_wall) / (v_ready + v_wall):.2f}x (above 1: vLLM faster)")
    print("  Not vLLM's speed: on a few CPU cores its engine start is paid per evaluation seed, its CPU kernels are "
          "made for many-core servers, and a tiny model leaves paged attention and continuous batching nothing to win. "
          "Its speed is a GPU question.")


if __name__ == "__main__":
    main()
