"""`orchestrate sweep`'s launch path on one screen: validate -> plan -> checks -> materialise -> submit -> follow.
The dry run and the submission pass the same stops up to the checks, which both make from one list (stops.py);
the dry run then prints what the submission would do and stops, the submission goes on."""

from __future__ import annotations

from rich.console import Console

from orchestrator.launch.fingerprints import said
from orchestrator.pipeline.dry_run import show
from orchestrator.pipeline.planning import Request, plan
from orchestrator.pipeline.stops import found
from orchestrator.pipeline.submission import follow_sweep, materialise_sweep, preflight_passes, submit
from record.errors import raise_if


def run_sweep(request: Request, out: Console) -> int:
    """The exit status: 0 when submitted (or, followed, every cell completed), 1 when a preflight row or a followed
    cell failed; a problem of the checks raises ConfigError before anything is written or submitted."""
    planned = plan(request)  # validate, expand, decide what a launch would submit now: nothing written
    for line in said(planned.changed, request.rerun_changed):
        out.print(line, soft_wrap=True, style="bold red" if planned.changed and not request.rerun_changed else None)
    problems = found(planned)  # checks: every stop of STOPS, the same for both
    if request.dry_run:
        show(planned, problems, out)
        return 0
    if request.preflight and not preflight_passes(planned, out):
        return 1
    raise_if(problems, f"sweep {request.sweep}: nothing written, nothing submitted")
    written = materialise_sweep(planned, out)  # run dirs, manifest, configs by array
    launched = submit(planned, written, out)  # options, backend, watcher, one sbatch per array
    return follow_sweep(planned, written, launched, out)
