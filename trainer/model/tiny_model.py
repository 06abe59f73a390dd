"""A tiny Qwen2 causal LM the project builds itself: the CPU stand-in for Qwen2.5-7B (CONTRIBUTING.md rule 8).

`ensure_tiny_model(config) -> Path` returns a directory that `AutoModelForCausalLM.from_pretrained` and
`AutoTokenizer.from_pretrained` load exactly like a hub checkpoint: `config.json` + weights, a byte-level
`tokenizer.json` without merges (one token per ASCII character) with a chat template `<|user|>...<|end|><|assistant|>`,
and a `generation_config.json` that changes nothing at sampling time.

The weights are warm-started by a seeded supervised phase on the synthetic task (`trainer/tasks/tiny.py`):
chat-templated prompt -> `\\boxed{answer}<|end|>`, from a *noisy teacher* that gives a neighbouring wrong answer
(answer +- 1) with probability `label_noise`. The model learns the arithmetic (greedy accuracy near 0.9) but, like a
base model that knows more than it samples, puts about that much mass on wrong answers, so sampled accuracy at
temperature 1.0 is about one half: RL has room to raise it. A merely under-trained model does not serve: its
solution is so sharp that any RL step large enough to help first breaks it (measured; docs/trainer.md).
Numbers of each build are in build.json.

The result is cached under `<root>/<hash of the build config>/`, root = `$COMEDY_CACHE/tiny-model` or
`<repo>/.cache/tiny-model`, built in a temporary sibling directory and renamed into place, so a reader sees a
whole model or none. Builds are deterministic on one machine (seeded, fixed thread count); another CPU's kernels
may round differently, which is why build.json records the measured accuracies rather than promising them.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from trainer.model.cache_lock import comedy_cache, one_builder
from trainer.model.distributed import setup_environment
from trainer.tasks import tiny as tiny_task
from trainer.tasks.rewards import tiny_reward

# transformers (seconds to import) is imported inside the functions that build the model: `orchestrate sweep`
# imports this module on the login node only to find a cached build (TinyModelConfig, cache_root).

Progress = Callable[[str, int, int], None]  # (stage, done, total): how far a build is
BUILD_VERSION = 3  # bump when the recipe below changes what a given config builds
SPECIAL_TOKENS = ("<|pad|>", "<|end|>", "<|system|>", "<|user|>", "<|assistant|>")
PAD, EOS = SPECIAL_TOKENS[:2]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
# Nothing filters the distribution: the paper samples at temperature 1.0, top_p 1.0, and the hf backend
# would otherwise apply its own top_k=50 default.
GENERATION_DEFAULTS = {"do_sample": True, "temperature": 1.0, "top_p": 1.0, "top_k": 0, "max_new_tokens": 32}


@dataclass(frozen=True)
class TinyModelConfig:
    """Architecture, warm-start recipe and build-time evaluation of the tiny model; all of it is hashed."""

    hidden_size: int = 96
    num_layers: int = 3
    # Head size 96 / 3 = 32: the smallest that vLLM's CPU attention runs (it supports 32, 64, 80, ...), so the
    # vLLM rollouts and evaluation run on this model in CI. One KV head: grouped-query attention, as in Qwen2.5.
    num_heads: int = 3
    num_kv_heads: int = 1
    intermediate_size: int = 288
    max_positions: int = 128
    sft_steps: int = 1500
    batch_size: int = 128
    lr: float = 3e-3
    warmup_steps: int = 30
    final_lr_fraction: float = 0.3  # linear decay to this fraction of lr
    label_noise: float = 0.4  # probability that the teacher's answer is off by one (see the module docstring)
    seed: int = 0
    # One thread: on a shared 2-core machine two OpenMP threads spin-wait on each other and a step gets 10x
    # slower than on one (measured); alone, two threads would save under half the time.
    threads: int = 1
    # Appended to every problem in the user message: set it to the trainer's prompt suffix so the warm start
    # sees the prompts RL will use.
    prompt_suffix: str = ""
    eval_size: int = 200  # examples per split scored at build time into build.json; 0 skips

    def __post_init__(self) -> None:
        problems = [f"{k}={v!r} must be > 0" for k, v in asdict(self).items()
                    if isinstance(v, (int, float)) and k not in ("seed", "eval_size", "warmup_steps", "label_noise")
                    and v <= 0]
        problems += [f"{k}={v!r} must be >= 0" for k, v in (("eval_size", self.eval_size),
                                                              ("warmup_steps", self.warmup_steps)) if v < 0]
        problems += [f"{k}={v!r} must be in [0, 1]" for k, v in (("label_noise", self.label_noise),
                                                                   ("final_lr_fraction", self.final_lr_fraction))
                     if not 0 <= v <= 1]
        if self.hidden_size % max(self.num_heads, 1) or self.num_heads % max(self.num_kv_heads, 1):
            problems.append(f"hidden_size={self.hidden_size}, num_heads={self.num_heads}, num_kv_heads="
                            f"{self.num_kv_heads}: heads must divide hidden_size and kv heads must divide heads")
        if problems:
            raise ValueError("TinyModelConfig: " + "; ".join(problems))

    def key(self) -> str:
        """The cache key: a hash of everything that determines the built files."""
        blob = json.dumps([BUILD_VERSION, tiny_task.TASK_VERSION, asdict(self)], sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def cache_root() -> Path:
    return comedy_cache() / "tiny-model"


def ensure_tiny_model(config: TinyModelConfig | None = None, root: str | Path | None = None,
                      progress: Progress | None = None) -> Path:
    """The directory of the tiny model for `config`, built (about 3 minutes on one CPU core) only when missing;
    `progress` hears how far the build is (else it prints to the log).

    Concurrent callers on one machine wait for one build (trainer/model/cache_lock.py); where the filesystem has no
    flock they may each build, and the first rename wins.
    """
    config = config or TinyModelConfig()
    root = Path(root) if root is not None else cache_root()
    final = root / config.key()
    if (final / "build.json").is_file():
        return final
    with one_builder(root / f".{config.key()}.lock"):  # a concurrent caller waits for this build, then uses it
        if (final / "build.json").is_file():
            return final
        return _build_into(config, root, final, progress)


def _build_into(config: TinyModelConfig, root: Path, final: Path, progress: Progress | None) -> Path:
    tmp = Path(tempfile.mkdtemp(prefix=f".{config.key()}.", dir=root))
    try:
        build_tiny_model(config, tmp, progress)
        os.rename(tmp, final)
    except OSError:
        if not (final / "build.json").is_file():
            raise
        print(f"[tiny-model] {final} appeared while building; using it", flush=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def _byte_symbols() -> list[str]:
    """GPT-2's byte -> printable-character map (what ByteLevel pre-tokenisation emits), in byte order."""
    keep = {*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)}
    shifted = iter(range(256, 512))
    return [chr(b) if b in keep else chr(next(shifted)) for b in range(256)]


def build_tokenizer():
    """A byte-level tokenizer with no merges: one token per byte (so per ASCII character), never an unknown.

    It is built as a `Qwen2Tokenizer` (byte-level BPE) on purpose: `AutoTokenizer` rebuilds the tokenizer of any
    qwen2 checkpoint as a Qwen2Tokenizer from the saved vocab and merges, discarding a custom pipeline, so only
    this form loads back exactly as it was trained (a character-level WordLevel tokenizer lost every space).
    """
    from transformers import Qwen2Tokenizer  # noqa: PLC0415 - see the note at the imports

    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS + tuple(_byte_symbols()))}
    tokenizer = Qwen2Tokenizer(vocab=vocab, merges=[], unk_token=None, eos_token=EOS, pad_token=PAD,
                               chat_template=CHAT_TEMPLATE, padding_side="left")
    tokenizer.add_special_tokens({"additional_special_tokens": list(SPECIAL_TOKENS[2:])})
    return tokenizer


def build_model(config: TinyModelConfig, tokenizer):
    from transformers import Qwen2Config, Qwen2ForCausalLM  # noqa: PLC0415 - see the note at the imports

    model_config = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=config.hidden_size, num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads, num_key_value_heads=config.num_kv_heads,
        intermediate_size=config.intermediate_size, max_position_embeddings=config.max_positions,
        tie_word_embeddings=True, pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None, use_sliding_window=False, rope_theta=10000.0,
    )
    torch.manual_seed(config.seed)
    return Qwen2ForCausalLM(model_config)


def chat_prompt(tokenizer, problem: str, prompt_suffix: str = "") -> str:
    """The prompt text for one problem, exactly as the warm start saw it."""
    messages = [{"role": "user", "content": problem + prompt_suffix}]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


class _SFTData:
    """The train split tokenised once: each prompt, and its target for every answer the teacher may give."""

    def __init__(self, config: TinyModelConfig, tokenizer):
        self.pad = tokenizer.pad_token_id
        examples = tiny_task.make_split("train", seed=config.seed)
        self.prompts = [tokenizer(chat_prompt(tokenizer, ex["problem"], config.prompt_suffix))["input_ids"]
                        for ex in examples]
        # targets[i] = (the right answer, one below, one above)
        self.targets = [[tokenizer(f"\\boxed{{{int(ex['answer']) + d}}}{EOS}")["input_ids"] for d in (0, -1, 1)]
                        for ex in examples]

    def batch(self, idx: list[int], choice: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Right-padded `input_ids` and `labels` (-100 on prompt and padding) for examples `idx`, targets `choice`."""
        rows = [self.prompts[i] + self.targets[i][c] for i, c in zip(idx, choice, strict=True)]
        width = max(map(len, rows))
        ids = torch.full((len(rows), width), self.pad)
        labels = torch.full((len(rows), width), -100)
        for r, (i, row) in enumerate(zip(idx, rows, strict=True)):
            ids[r, : len(row)] = torch.tensor(row)
            labels[r, len(self.prompts[i]) : len(row)] = torch.tensor(row[len(self.prompts[i]) :])
        return ids, labels


def warm_start(model, tokenizer, config: TinyModelConfig, log_every_s: float = 5.0,
               progress: Progress | None = None) -> list[float]:
    """Seeded supervised fine-tuning on `train` from the noisy teacher (loss on the answer tokens only); returns
    the loss curve. Each step goes to `progress`; without one, a log line every `log_every_s`."""
    data = _SFTData(config, tokenizer)
    gen = torch.Generator().manual_seed(config.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=0.0, betas=(0.9, 0.98))

    def lr_at(step: int) -> float:  # linear warmup, then linear decay to final_lr_fraction
        if step < config.warmup_steps:
            return (step + 1) / config.warmup_steps
        done = (step - config.warmup_steps) / max(1, config.sft_steps - config.warmup_steps)
        return 1.0 - (1.0 - config.final_lr_fraction) * done

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    model.train()
    losses, last_log, start = [], time.monotonic(), time.monotonic()
    for step in range(config.sft_steps):
        idx = torch.randint(0, len(data.prompts), (config.batch_size,), generator=gen)
        noisy = torch.rand(config.batch_size, generator=gen) < config.label_noise
        side = torch.randint(1, 3, (config.batch_size,), generator=gen)  # 1: answer - 1, 2: answer + 1
        ids, labels = data.batch(idx.tolist(), torch.where(noisy, side, 0).tolist())
        loss = model(input_ids=ids, attention_mask=(ids != data.pad).long(), labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        if progress is not None:
            progress("warm-start steps", step + 1, config.sft_steps)
        elif time.monotonic() - last_log > log_every_s or step == config.sft_steps - 1:
            last_log = time.monotonic()
            print(f"[tiny-model] sft step {step + 1}/{config.sft_steps} loss {loss.item():.4f} "
                  f"({last_log - start:.0f}s)", flush=True)
    model.eval()
    return losses


@torch.no_grad()
def accuracy(model, tokenizer, examples: list[dict], greedy: bool, seed: int = 0,
             prompt_suffix: str = "", batch_size: int = 100) -> float:
    """Fraction of `examples` whose completion earns `tiny_reward` 1.0; sampled at temperature 1.0 unless greedy."""
    torch.manual_seed(seed)
    correct = 0
    for i in range(0, len(examples), batch_size):
        chunk = examples[i : i + batch_size]
        prompts = [chat_prompt(tokenizer, ex["problem"], prompt_suffix) for ex in chunk]
        enc = tokenizer(prompts, return_tensors="pt", padding=True, padding_side="left")
        out = model.generate(**enc, do_sample=not greedy, max_new_tokens=16,
                             pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
        texts = tokenizer.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
        correct += sum(tiny_reward(t, ex["answer"]) for t, ex in zip(texts, chunk, strict=True))
    return correct / max(1, len(examples))


def build_tiny_model(config: TinyModelConfig, out_dir: str | Path, progress: Progress | None = None) -> dict:
    """Build tokenizer, model and warm start into `out_dir` (no caching); returns what build.json records.
    `progress` hears each stage (warm-start steps, then each accuracy scored); without one, the log does."""
    from transformers import GenerationConfig  # noqa: PLC0415 - see the note at the imports
    from transformers.utils import logging as hf_logging  # noqa: PLC0415

    # save_pretrained imports DeepSpeed (its ZeRO-3 check), which warns while it guesses an accelerator unless it
    # is told, and draws a "Writing model shards" bar for a file written in milliseconds: noise on a user's first
    # `orchestrate sweep`, which builds the model.
    setup_environment(cache_root().parent)
    hf_logging.disable_progress_bar()
    out_dir, start = Path(out_dir), time.monotonic()
    threads_before = torch.get_num_threads()
    torch.set_num_threads(config.threads)  # fixed, because the reduction order (hence the weights) depends on it
    try:
        if progress is None:
            print(f"[tiny-model] building {config.key()} into {out_dir}", flush=True)
        tokenizer = build_tokenizer()
        model = build_model(config, tokenizer)
        losses = warm_start(model, tokenizer, config, progress=progress)
        model.generation_config = GenerationConfig(
            **GENERATION_DEFAULTS, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
        model.save_pretrained(out_dir)
        tokenizer.save_pretrained(out_dir)
        record = {"config": asdict(config), "key": config.key(), "build_version": BUILD_VERSION,
                  "parameters": sum(p.numel() for p in model.parameters()),
                  "sft_seconds": round(time.monotonic() - start, 1), "first_loss": losses[0],
                  "final_loss": losses[-1], "accuracy": {}}
        splits = ("test", "ood") if config.eval_size else ()
        for split in splits:
            examples = tiny_task.make_split(split, config.eval_size, seed=config.seed)
            for mode in ("greedy", "sampled"):
                if progress is not None:
                    progress(f"scoring {split} {mode}", len(record["accuracy"]), 2 * len(splits))
                acc = accuracy(model, tokenizer, examples, mode == "greedy", config.seed, config.prompt_suffix)
                record["accuracy"][f"{split}/{mode}"] = acc
                if progress is None:
                    print(f"[tiny-model] {split} {mode} accuracy {acc:.3f}", flush=True)
        record["build_seconds"] = round(time.monotonic() - start, 1)
        # Written last: its presence marks a complete build (ensure_tiny_model checks for it).
        (out_dir / "build.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
        if progress is None:
            print(f"[tiny-model] done in {record['build_seconds']}s", flush=True)
        return record
    finally:
        torch.set_num_threads(threads_before)
