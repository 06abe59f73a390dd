"""The user's submission limit against a sweep, as validate, the dry run, the launch and preflight state it: how many
jobs the sweep needs at once, how many go out now and that the watcher submits the rest as slots free
(orchestrator/cluster/limits.py reads the limit; orchestrator/launch/plan.py `fit_counts` fits the arrays to it)."""

from __future__ import annotations

from orchestrator.cluster.limits import SubmitLimit, submit_limit
from orchestrator.cluster.profile import resources_params
from orchestrator.cluster.query import available as query_available
from orchestrator.cluster.query import controller_problem
from orchestrator.launch.plan import Plan, fit_counts, make_plan
from orchestrator.preflight.testonly import Row
from orchestrator.sweep.expand import Sweep


def read_limit(sweep: Sweep) -> SubmitLimit:
    """The user's submission limit for the sweep's jobs (its account, QOS, partition) and the jobs queued now."""
    params = resources_params(sweep.profile, sweep.profile.eval)
    return submit_limit(params.get("account"), params.get("qos"), params.get("partition"))


def slurm_limit_line(sweep: Sweep) -> str | None:
    """validate's line on the submission limit, where a Slurm controller answers (nothing said where none does)."""
    if not query_available() or controller_problem():
        return None
    return limit_line(read_limit(sweep), make_plan(sweep), watcher=True)


def limit_line(limit: SubmitLimit | None, plan: Plan, watcher: bool) -> str | None:
    """"submission limit: 3 of 100 queued (...); this sweep needs 207 job(s) at once: 96 go out now ..." for the
    dry run, validate and the launch (`watcher`: the sweep's watcher job is counted, it takes a slot too)."""
    if limit is None or not plan.groups:
        return None
    free = None if limit.free is None else max(limit.free - watcher, 0)
    now, needed = fit_counts(plan, free)
    slot = watcher if limit.free is None else min(int(watcher), limit.free)
    return limit.line(needed + watcher, now + slot)


def limit_row(sweep: Sweep, plan: Plan) -> Row:
    """preflight's row: the limit against the sweep. It never fails the preflight: a sweep over the limit goes out
    in parts (the watcher submits the rest as slots free); a limit that cannot be read is said so."""
    line = limit_line(read_limit(sweep), plan, watcher=True) or "no job to submit"
    return Row("submission limit", "all", True, line.removeprefix("submission limit: "))
