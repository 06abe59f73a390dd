"""The contestants of bench/trainer.py, each run in its own fresh process: our trainer, and TRL's GRPOTrainer on
DeepSpeed ZeRO-3 and on plain PyTorch. Each returns the timed steps (the warm-up step dropped), each step split
into its parts where the trainer lets us see them.

Both trainers load the model from one directory (`fixed_length_model`): the model's own files, with a
generation_config that forbids a stop token before `max_new` tokens (`min_new_tokens`), and TRL is given the same
bound, so every response of every contestant is exactly `max_new` tokens long: the same work, whatever each
trainer happens to sample.

The split is read without changing either trainer: ours by timing the functions `_step` calls (the trainer's
own `perf/step_time_s` and `perf/weight_sync_s` for the step and the sync), TRL's from its own profiling records
(`profiling/Time taken: ...`, caught instead of logged), a timer around its `training_step` and DeepSpeed's
`engine.step`, and the Trainer's optimizer callbacks.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from pathlib import Path

PARTS = ("generation", "reference", "fwd+bwd", "optimizer", "sync", "other")
# TRL 1.x's one-process DeepSpeed job, with the ZeRO settings our trainer uses on CPU (trainer/model/distributed.py)
# and "auto" where HF fills them in.
TRL_ZERO3 = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
             "gradient_clipping": "auto", "bf16": {"enabled": False},
             "zero_optimization": {"stage": 3, "memory_efficient_linear": False}}


def model_source(name: str) -> str:
    """The checkpoint directory of `tiny` or `smollm2`, as the trainer resolves those names."""
    from trainer.model.source import resolve

    return resolve({"tiny": "tiny", "smollm2": "smollm2-135m-instruct"}[name])


def fixed_length_model(source: str, max_new: int) -> str:
    """A directory of links to `source`'s files, with a generation_config.json that sets min_new_tokens."""
    out = Path(tempfile.mkdtemp(prefix="bench-model-"))
    for f in Path(source).iterdir():
        if f.name != "generation_config.json":
            (out / f.name).symlink_to(f)
    gen = json.loads((Path(source) / "generation_config.json").read_text())
    (out / "generation_config.json").write_text(json.dumps({**gen, "min_new_tokens": max_new}))
    return str(out)


def ours_config(args, model_dir: str, scratch: Path):
    """Our trainer's run of the bench's work."""
    from trainer.config.run import RunConfig

    return RunConfig.from_dict({
        "model": {"name_or_path": model_dir, "dtype": "fp32"},
        "data": {"dataset": "tiny", "val_every": 0},
        "rollout": {"engine": "hf", "max_response_tokens": args.max_new, "max_prompt_tokens": 128},
        "optim": {"lr": 1e-4, "steps": args.steps, "batch_prompts": args.prompts, "minibatch_prompts": args.prompts},
        "algorithm": {"group_size": args.group},
        "checkpoint": {"every": 10**6, "keep_last": 1},
        "kl": {"estimator": "k1", "placement": "reward", "beta": 0.1},
        "tracking": {"tracking_uri": f"sqlite:///{scratch / 'mlflow.db'}", "experiment": "bench"},
    })


def prompts(args, tokenizer) -> list[dict]:
    """The problems our trainer draws, step after step, as the exact text it conditions on (its chat template
    included). TRL takes them in this order (no shuffle), so every step of every contestant runs the same prompts:
    the same lengths, so the same padding (a padded batch decodes under a mask, an unpadded one without: not the
    same work)."""
    from trainer.tasks.data import PromptOrder, load_examples, prompt_text

    cfg = ours_config(args, "unused", Path("unused"))
    examples = load_examples(cfg.data, "train")
    order = PromptOrder(len(examples), cfg.seed)
    return [{"prompt": prompt_text(tokenizer, examples[i], "tiny", True), "answer": examples[i]["answer"]}
            for step in range(args.steps) for i in order.indices(step, args.prompts)]


@contextlib.contextmanager
def recorded_work(work: list):
    """Appends, for each HF `generate` call in the block (every contestant samples through it), the prompts it
    was given (each row's tokens, padding dropped) and the length of what it returned: the bench's proof that the
    contestants did the same work."""
    from transformers.generation.utils import GenerationMixin

    generate = GenerationMixin.generate

    def recording(self, *args, **kwargs):
        out = generate(self, *args, **kwargs)
        ids, mask = kwargs["input_ids"], kwargs["attention_mask"].bool()
        work.append({"prompts": [row[m].tolist() for row, m in zip(ids, mask)],
                     "new_tokens": out.shape[1] - ids.shape[1]})
        return out

    GenerationMixin.generate = recording
    try:
        yield
    finally:
        GenerationMixin.generate = generate


class _Parts:
    """Seconds per named part, summed since the last `take`."""

    def __init__(self):
        self.sums: dict[str, float] = {}

    def add(self, name: str, seconds: float) -> None:
        self.sums[name] = self.sums.get(name, 0.0) + seconds

    def timed(self, name: str, fn):
        import torch

        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                with torch.profiler.record_function(f"bench/{name}"):  # a label in --profile's table
                    return fn(*args, **kwargs)
            finally:
                self.add(name, time.perf_counter() - start)
        return wrapper

    def take(self) -> dict[str, float]:
        sums, self.sums = self.sums, {}
        return sums


@contextlib.contextmanager
def profiled(path: str | None, max_new: int):
    """torch.profiler over the block, its busiest ops (self CPU time; per input shape up to PROFILE_SHAPES_MAX_NEW
    response tokens) and the bench's part labels written to `path`; nothing when `path` is None."""
    if path is None:
        yield
        return
    import torch

    shapes = max_new <= PROFILE_SHAPES_MAX_NEW

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=shapes) as prof:
        yield
    table = prof.key_averages(group_by_input_shape=shapes)
    Path(path).write_text(table.table(sort_by="self_cpu_time_total", row_limit=60, max_name_column_width=70,
                                      max_shapes_column_width=60)
                          + prof.key_averages().table(sort_by="cpu_time_total", row_limit=60,
                                                      max_name_column_width=70))


# Recording every op's input shapes over a whole step of long responses outgrew 23 GB (a SmolLM2 step of 8 x 256
# tokens); beyond this length the profile is per op only.
PROFILE_SHAPES_MAX_NEW = 64


def _with_other(parts: dict[str, float], step: float) -> dict[str, float]:
    return {**{p: parts.get(p, 0.0) for p in PARTS if p != "other"}, "step": step,
            "other": step - sum(parts.get(p, 0.0) for p in PARTS if p != "other")}


def ours(args, model_dir: str) -> list[dict[str, float]]:
    from deepspeed import DeepSpeedEngine

    from record.identity.run_key import run_key
    from record.metric_keys import PERF_STEP_TIME_S, PERF_WEIGHT_SYNC_S
    from trainer import train as loop
    from trainer.rollout.sampler import BatchSampler

    parts, steps = _Parts(), []
    loop.score_logprobs = parts.timed("reference", loop.score_logprobs)
    loop.response_logprobs = parts.timed("fwd+bwd", loop.response_logprobs)
    DeepSpeedEngine.backward = parts.timed("fwd+bwd", DeepSpeedEngine.backward)
    DeepSpeedEngine.step = parts.timed("optimizer", DeepSpeedEngine.step)
    BatchSampler.sample = parts.timed("generation", BatchSampler.sample)
    one_step = loop._step

    def step(*a, **k):
        parts.take()
        with profiled(args.profile if len(steps) == args.steps - 1 else None, args.max_new):  # the last step
            metrics, stop, preempted = one_step(*a, **k)
        steps.append(_with_other({**parts.take(), "sync": metrics[PERF_WEIGHT_SYNC_S]}, metrics[PERF_STEP_TIME_S]))
        return metrics, stop, preempted

    loop._step = step
    tmp = Path(tempfile.mkdtemp(prefix="bench-ours-"))
    cfg = ours_config(args, model_dir, tmp)
    loop.train(cfg, loop.RunContext(run_dir=tmp / "run", run_key=run_key(cfg), micro_groups=args.prompts))
    return steps[1:]


def trl(args, model_dir: str, zero3: bool) -> list[dict[str, float]]:
    import datasets
    import torch
    import trl.extras.profiling as profiling
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from trainer.tasks.rewards import tiny_reward

    if zero3:  # a one-process "distributed" job, as our trainer sets up for itself outside Slurm
        for key, value in {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29531", "RANK": "0", "WORLD_SIZE": "1",
                           "LOCAL_RANK": "0"}.items():
            os.environ.setdefault(key, value)
    parts, records = _Parts(), []
    # TRL times its own phases (generate, each log-prob pass, _prepare_inputs) under "<class>.<phase>": keep them
    # instead of logging them.
    profiling.ProfilingContext._log_metrics = lambda self, s: records.append((self.name.split(".", 1)[-1], s))
    calls, training_step = [], parts.timed("training_step", GRPOTrainer.training_step)

    def step(*a, **k):  # TRL generates inside training_step: profile the last step's, as `ours` does
        calls.append(None)
        with profiled(args.profile if len(calls) == args.steps else None, args.max_new):
            return training_step(*a, **k)

    GRPOTrainer.training_step = step
    if zero3:  # accelerate steps DeepSpeed's optimizer inside its backward
        from deepspeed import DeepSpeedEngine

        DeepSpeedEngine.step = parts.timed("optimizer", DeepSpeedEngine.step)

    class Timer(TrainerCallback):
        def __init__(self):
            self.steps, self.t0, self.opt0 = [], 0.0, 0.0

        def on_step_begin(self, *a, **k):
            parts.take()
            records.clear()
            self.t0 = time.perf_counter()

        def on_pre_optimizer_step(self, *a, **k):
            self.opt0 = time.perf_counter()

        def on_optimizer_step(self, *a, **k):
            parts.add("optimizer", time.perf_counter() - self.opt0)

        def on_step_end(self, *a, **k):
            step, p = time.perf_counter() - self.t0, parts.take()
            names = [name for name, _ in records]
            prepared = names.index("_prepare_inputs") if "_prepare_inputs" in names else len(names)
            # Records land as each phase ends: the log-prob passes before _prepare_inputs' are its own (the
            # reference's), the one after it is the policy's forward inside compute_loss.
            ref = sum(s for name, s in records[:prepared] if name == "_get_per_token_logps_and_entropies")
            prepare = sum(s for name, s in records if name == "_prepare_inputs")
            # Under ZeRO-3, accelerate's backward runs engine.step: it is the optimizer's, not the backward's.
            fwd_bwd = p.get("training_step", 0.0) - prepare - (p.get("optimizer", 0.0) if zero3 else 0.0)
            self.steps.append(_with_other({
                "generation": sum(s for name, s in records if name == "transformers.generate"), "reference": ref,
                "fwd+bwd": fwd_bwd, "optimizer": p.get("optimizer", 0.0)}, step))

    timer = Timer()
    tok = AutoTokenizer.from_pretrained(model_dir)
    rows = prompts(args, tok)

    def reward(completions, answer, **_):
        return [tiny_reward(c, a) for c, a in zip(completions, answer)]

    cfg = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="bench-trl-"), per_device_train_batch_size=args.prompts * args.group,
        num_generations=args.group, max_completion_length=args.max_new, max_steps=args.steps, learning_rate=1e-4,
        beta=0.1, temperature=1.0, top_p=1.0, top_k=0, use_cpu=True, report_to=[], logging_steps=10**6,
        save_strategy="no", bf16=False, seed=0, deepspeed=TRL_ZERO3 if zero3 else None, shuffle_dataset=False,
        # Like ours at this size (trainer/config/memory.py: checkpointing from 1B parameters); TRL's default is on.
        gradient_checkpointing=False,
        generation_kwargs={"min_new_tokens": args.max_new},
    )
    torch.manual_seed(0)
    trainer = GRPOTrainer(model=AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32),
                          reward_funcs=reward, args=cfg, train_dataset=datasets.Dataset.from_list(rows),
                          processing_class=tok, callbacks=[timer])
    trainer.train()
    return timer.steps[1:]
