"""The memory plans of a sweep: per distinct model and memory setting of its cells, the training job's estimated
peak per GPU and the evaluation job's host and GPU memory (trainer/memory_plan.py), against the profile's
`gpu_mem_gb` and eval `mem_gb`. `orchestrate validate` and the sweep's dry run print them; validate and a
submission refuse a plan that does not fit, naming the knob to turn. Pure: nothing is read but the sweep."""

from __future__ import annotations

from trainer.memory_plan import EvalPlan, MemoryPlan, eval_plan, plan


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
    plans = []
    for cell in sweep.cells:
        planned = eval_plan(cell.config, sweep.profile.eval.mem_gb, sweep.profile.gpu_mem_gb)
        if planned is not None and planned not in plans:
            plans.append(planned)
    return plans


def plan_report(sweep) -> tuple[list[str], list[str]]:
    """The lines to print (training, then evaluation) and the problems: one line each, with its fix."""
    lines, problems = [], []
    for planned in [*memory_plans(sweep), *eval_plans(sweep)]:
        lines += planned.lines()
        problems += [planned.problem()] if planned.problem() else []
    return lines, problems
