"""The memory plans of a sweep: per distinct model and memory setting of its cells, the training job's estimated
peak per GPU and the evaluation job's host and GPU memory (trainer/analysis/memory_plan.py), against the profile's
`gpu_mem_gb` and eval `mem_gb`, and the checks a job makes at its start with the tokenizer and the data
(orchestrator/sweep/job_start.py). `orchestrate validate` and the sweep's dry run print them; validate and a
submission refuse a plan that does not fit, naming the knob to turn. Beside them, the evaluation's time: its
largest task at the token cap, and the shards it runs in (eval/shard_plan.py): each at most a third of the eval job's
time limit, so a job cut by its limit loses at most one shard and its requeue resumes at the next; `eval.shard_samples`
is planned here for every cell that leaves it null (`with_shard_plan`), and a sweep where one decode batch alone
exceeds a third of the limit is refused. Nothing is written; read are the sweep, the task files and (job_start.py)
the tokenizers and training data this node has.

The time is an estimate, never measured (no GPU has run this project): vLLM decodes as many samples at once as
the KV cache holds (at most 256, its max_num_seqs), one token each per decode step of ~EVAL_DECODE_STEP_S for a 4-8B
model on one A100 (its bf16 weights read once a step, ~10 ms, plus attention over long contexts), every sample
running to eval.max_tokens: the worst case."""

from __future__ import annotations

from dataclasses import replace

from eval import local_data, taskfiles
from eval.shard_plan import plan as plan_shards
from orchestrator.sweep import library_axis
from orchestrator.sweep.job_start import job_start_report
from orchestrator.sweep.rollout_share import source
from trainer.analysis.memory_plan import EvalPlan, MemoryPlan, eval_plan, plan
from trainer.analysis.model_shapes import shape_of
from trainer.config.run import TINY_MODEL

EVAL_DECODE_STEP_S = 0.03  # one decode step of a full batch, 4-8B model, one A100: an estimate (the docstring)
VLLM_MAX_SEQS = 256        # vLLM's default max_num_seqs
SHARD_SHARE = 1 / 3        # a shard's worst case takes at most this share of the eval job's time limit
DEFAULT_ROWS = 500         # a task whose data size is set at prepare time (countdown_heldout: 500)


def memory_plans(sweep) -> list[MemoryPlan]:
    """One estimated training plan per distinct model and memory setting of the sweep's cells (known shapes)."""
    plans, seen = [], set()
    for cell in sweep.cells:
        c = cell.config
        key = (c.model, c.memory, c.rollout, c.optim, c.algorithm.group_size, c.kl.placement, c.kl.beta > 0)
        if key in seen:
            continue
        seen.add(key)
        res = sweep.profile.train_resources(c.model.params_b)
        planned = plan(c, max(res.gpus, 1), sweep.profile.gpu_mem_gb, gpu=res.gpus > 0)
        if planned is not None and planned not in plans:
            plans.append(planned)
    return plans


def eval_plans(sweep) -> list[EvalPlan]:
    """One evaluation plan per distinct model and generation budget of the sweep's cells (known shapes)."""
    plans, memo = [], {}
    for cell in sweep.cells:
        planned = _eval_plan(cell.config, sweep.profile, memo)
        if planned is not None and planned not in plans:
            plans.append(planned)
    return plans


def _eval_plan(c, profile, memo: dict) -> EvalPlan | None:
    """`eval_plan` once per distinct model and token budgets (all it reads): 10,000 cells share a few (issue 25)."""
    key = (c.model.name_or_path, c.rollout.max_prompt_tokens, c.eval.max_tokens)
    if key not in memo:
        memo[key] = eval_plan(c, profile.eval.mem_gb, profile.gpu_mem_gb)
    return memo[key]


def plan_report(sweep) -> tuple[list[str], list[str]]:
    """The lines to print (training, then evaluation) and the problems: one line each, with its fix."""
    # first, the library settings the sweep names as the keys they expand to: the one report validate and the dry
    # run both print (orchestrator/sweep/library_axis.py)
    queries = [v for a in (*sweep.spec.axes, *(a for b in sweep.spec.grid for a in b)) if a.key == library_axis.KEY
               for v in a.values]
    lines, problems = library_axis.lines(queries) + share_lines(sweep), []
    for planned in [*memory_plans(sweep), *eval_plans(sweep)]:
        lines += planned.lines()
        problems += [planned.problem()] if planned.problem() else []
    time_lines, time_problems = eval_time_report(sweep)
    size_lines, size_problems = model_sizes(sweep)
    start_lines, start_problems = job_start_report(sweep)  # the tokenizer's and the data's: a job's first checks
    return (lines + time_lines + size_lines + start_lines,
            problems + time_problems + size_problems + start_problems)


SIZE_TOLERANCE = 0.15  # model.params_b against the config's count: rounding ("7B" for 7.6B) passes, another model not


def model_sizes(sweep) -> tuple[list[str], list[str]]:
    """Each distinct model's parameter count from its config (a local directory's config.json, or a shipped model's
    published shape) against `model.params_b`, which picks the resources: a disagreement is a problem naming both
    fixes; a model whose shape is unknown gets a line saying that its memory is not planned."""
    lines, problems, seen = [], [], set()
    for cell in sweep.cells:
        model = cell.config.model
        if (model.name_or_path, model.params_b) in seen:
            continue
        seen.add((model.name_or_path, model.params_b))
        shape = shape_of(model.name_or_path)
        if shape is None:
            if model.params_b is not None and model.name_or_path != TINY_MODEL:  # built here: no plan needed
                lines.append(f"model {model.name_or_path}: no known shape (not a shipped model, no config.json at "
                             f"that path), so its memory is not planned; resources follow model.params_b="
                             f"{model.params_b:g} as given")
            continue
        real = shape.params / 1e9
        if model.params_b is not None and abs(model.params_b - real) > SIZE_TOLERANCE * real:
            problems.append(f"model {model.name_or_path}: its config gives {real:.2f}B parameters, but model.params_b "
                            f"is {model.params_b:g} (the config group's?), and resources, memory and disk are "
                            f"planned from it: set model.params_b={real:.2f}, or pick the model's own group")
    return lines, problems


def share_lines(sweep) -> list[str]:
    """Each vLLM-rollout model's resolved rollout.gpu_memory_utilization on a GPU profile, and where it came from
    (orchestrator/sweep/rollout_share.py: the sweep's value, else the profile's map, else the default). On a CPU
    profile vLLM's KV cache is bounded by VLLM_CPU_KVCACHE_SPACE instead, so nothing is said."""
    lines, seen = [], set()
    for cell in sweep.cells:
        c, res = cell.config, cell.resources
        key = (c.model.name_or_path, c.rollout.gpu_memory_utilization)
        if c.rollout.engine != "vllm" or res.gpus == 0 or key in seen:
            continue
        seen.add(key)
        gpu = sweep.profile.gpu_mem_gb
        share = f": {c.rollout.gpu_memory_utilization * gpu:.1f} GB of each {gpu:g} GB GPU" if gpu else ""
        lines.append(f"rollout.gpu_memory_utilization {c.rollout.gpu_memory_utilization:g} for {c.model.name_or_path} "
                     f"({source(c, sweep.profile.rollout_shares, sweep.profile.name)}){share}")
    return lines


def shard_samples(c, profile, planned: EvalPlan) -> int:
    """The most samples a shard may hold so that, every sample running to eval.max_tokens, it takes at most
    SHARD_SHARE of the eval job's time limit: whole decode batches of `max_tokens` steps each. 0: not even one
    sample fits (validation refuses the sweep)."""
    seqs = _batch(planned)
    batch_s = c.eval.max_tokens * EVAL_DECODE_STEP_S
    return int(profile.eval.time_min * 60 * SHARD_SHARE // batch_s) * seqs


def with_shard_plan(cells, profile) -> list:
    """The cells with eval.shard_samples planned where the sweep leaves it null, on a profile that states
    gpu_mem_gb (a GPU cluster: the time estimate needs the KV cache). Machinery: no run_key changes."""
    if not profile.gpu_mem_gb:
        return list(cells)
    out, memo, sections = [], {}, {}
    for cell in cells:
        c = cell.config
        planned = _eval_plan(c, profile, memo) if c.eval.shard_samples is None else None
        size = shard_samples(c, profile, planned) if planned is not None else 0
        if size > 0:  # one new eval section per distinct one and size: cells keep sharing it (issue 25)
            key = (id(c.eval), size)
            if key not in sections:
                sections[key] = (c.eval, replace(c.eval, shard_samples=size))  # the old one kept: ids stay unique
            cell = replace(cell, config=replace(c, eval=sections[key][1]))
        out.append(cell)
    return out


def eval_time_report(sweep) -> tuple[list[str], list[str]]:
    """Per evaluation plan: its largest task's worst-case hours, and the shards it runs in (each at most a third of
    the eval job's time limit, eval/shard_plan.py), or a problem where one sample alone does not fit. Nothing where the
    profile states no gpu_mem_gb (no vLLM share)."""
    lines, problems, seen, memo = [], [], set(), {}
    limit_h = sweep.profile.eval.time_min / 60
    for cell in sweep.cells:
        c = cell.config
        key = (c.model.name_or_path, c.eval.tasks, c.eval.k, c.eval.max_tokens, c.eval.limit, c.eval.shard_samples)
        if not sweep.profile.gpu_mem_gb or key in seen:
            continue
        planned = _eval_plan(c, sweep.profile, memo)
        if planned is None:
            continue
        seen.add(key)
        rows = {t: _rows(t, c.eval.limit) for t in c.eval.tasks}
        task = max(rows, key=rows.get)
        samples, seqs = rows[task] * c.eval.k, _batch(planned)
        per_s = seqs / EVAL_DECODE_STEP_S
        hours = samples * c.eval.max_tokens / per_s / 3600
        size = c.eval.shard_samples or shard_samples(c, sweep.profile, planned)
        if size < 1:
            one_h = c.eval.max_tokens * EVAL_DECODE_STEP_S / 3600
            problems.append(f"evaluation time: one decode batch of {planned.model} at eval.max_tokens "
                            f"{c.eval.max_tokens:,} takes ~{one_h:.1f} h, more than a third of the eval job's "
                            f"{limit_h:g} h: raise eval time_min in the Slurm profile or lower eval.max_tokens")
            continue
        count = len(plan_shards(rows[task], c.eval.k, size))
        shard_h = min(size, samples) * c.eval.max_tokens / per_s / 3600 if size >= seqs else \
            c.eval.max_tokens * EVAL_DECODE_STEP_S / 3600
        gpus = max(sweep.profile.eval.gpus_per_node, 1)  # one engine per GPU, shards side by side (eval/workers.py)
        side = f" on {gpus} GPUs side by side: ~{hours / min(gpus, count):.1f} h" if gpus > 1 else ""
        lines.append(f"evaluation time {planned.model} (estimated, every sample at the cap): largest task {task}, "
                     f"{samples:,} samples x {c.eval.max_tokens:,} tokens, ~{hours:.1f} h at ~{per_s:,.0f} tokens/s "
                     f"a GPU, in {count:,} shard(s) of at most {size:,} samples (~{shard_h:.2f} h each; the eval "
                     f"job's limit {limit_h:g} h){side}; a job cut by its limit resumes at its first unfinished shard")
    return lines, problems


def _batch(planned: EvalPlan) -> int:
    """Samples vLLM decodes at once: as many as the KV cache holds, at most its max_num_seqs."""
    return min(max(planned.kv_tokens // max(planned.seq_tokens, 1), 1), VLLM_MAX_SEQS)


def _rows(task: str, limit: int | None) -> int:
    spec = local_data.SPECS.get(taskfiles.data_file(task).removesuffix(".jsonl"))
    rows = (spec.rows if spec is not None else None) or DEFAULT_ROWS
    return min(rows, limit) if limit else rows
