"""How straight the launch path is (issue 40, item 4): the files a launch passes through, in call order.

`orchestrator/launch/submit.py:launch` is run once on a smoke sweep with one baseline, against a Slurm stand-in
that answers at once (sacct: nothing known; sbatch: ids), with every call into the project's own code traced.

- a *stop* is a call that crosses into another file of orchestrator/ or record/ (a call inside one file is no stop);
- a *return* is a stop into a file the path had already left once (the path weaves back);
- per file: how many times the path entered it.

Counted twice: every stop (helpers included, each call of a loop over the cells), and the path's steps alone: stops
at most two crossings below `launch` (what launch calls, and what those call: the level a reader follows), each
call site once (a loop over the cells is one step, whatever the number of cells; the same function called again
from another place, a second pass, is another step).

`--command` measures the whole of `orchestrate sweep` instead (issue 53, item 2): the command's `run` on the same
sweep, submitted to the same stand-in (--no-watcher), from the top of the launch path: orchestrator/pipeline/path.py
`run_sweep` where it exists, else the command's `run` itself (where the path lived before); the same counts.

Run: `.venv/bin/python bench/launch_path.py [--command]`. Prints the sequence of stops and the three counts;
docs/architecture.md "The launch path" keeps the numbers before and after.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from orchestrator import cli  # noqa: E402
from orchestrator.cluster import executor, query  # noqa: E402
from orchestrator.cluster.executor import Options, Submitted  # noqa: E402
from orchestrator.launch.materialise import materialise  # noqa: E402
from orchestrator.launch.plan import make_plan  # noqa: E402
from orchestrator.launch.submit import launch  # noqa: E402
from orchestrator.sweep.expand import load_sweep  # noqa: E402

TRACED = ("orchestrator/", "record/")
TOPS = ("orchestrator/pipeline/path.py:run_sweep", "orchestrator/commands/sweep.py:run")  # the path's top, by era


class Answering:
    """A Slurm backend that knows no job and hands out ids: what a first submission meets."""

    kind = "slurm"

    def __init__(self) -> None:
        self.next_id = 500

    def rows(self, job_ids):
        return {}

    def queued(self, names):
        return {}

    def find(self, names, since):
        return {}

    def submit(self, kind, entry, run_dirs, params, name, code, dependency=None, parallelism=1):
        self.next_id += 1
        return [Submitted(f"{self.next_id}_{i}", "o", "e") for i in range(len(run_dirs))]

    def array_limit(self):
        return 1000


def trace(fn):
    """The files of orchestrator/ and record/ that `fn()` calls into, in order, one entry per crossing."""
    stops: list[tuple[str, int, str]] = []  # (file:function, crossings below launch, the caller's file:function)
    stack: list[tuple[str | None, int, str]] = []

    def profile(frame, event, arg):
        if event == "call":
            path = frame.f_code.co_filename
            rel = path[len(str(REPO)) + 1:] if path.startswith(str(REPO)) else None
            mine = rel if rel and rel.startswith(TRACED) else None
            caller, depth, site = next(((f, d, w) for f, d, w in reversed(stack) if f is not None), (None, -1, ""))
            name = f"{mine}:{frame.f_code.co_name}"
            if mine and mine != caller:
                depth += 1
                stops.append((name, depth, site))
            stack.append((mine, depth, name if mine else site))
        elif event == "return" and stack:
            stack.pop()

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return stops


def measure(stops: list[str]) -> tuple[int, int, Counter]:
    files = [s.split(":")[0] for s in stops]
    if not files:
        return 0, 0, Counter()
    entered, left, returns = Counter(files), set(), 0
    previous = None
    for f in files:
        if f in left and f != previous:
            returns += 1
        if previous is not None:
            left.add(previous)
        previous = f
    return len(stops), returns, entered


def one_launch(tmp: str):
    """`launch` alone, on run dirs written beforehand: the stops of orchestrator/launch/submit.py."""
    overrides = [f"sweep.output_root={tmp}", "sweep.baselines=[{model: tiny}]"]
    sweep = load_sweep(REPO / "sweeps" / "smoke.yaml", overrides)
    sweep_dir = materialise(sweep, make_plan(sweep)).sweep_dir
    return trace(lambda: launch(sweep, sweep_dir, Answering(), Options(executor="slurm")))


def one_command(tmp: str):
    """`orchestrate sweep` on the same sweep, with Slurm's answers from the stand-in wherever the path asks."""
    argv = ["sweep", "--no-watcher", "--executor", "slurm", "--train-entry", "orchestrator.jobs:probe_train",
            "--eval-entry", "orchestrator.jobs:probe_eval", str(REPO / "sweeps" / "smoke.yaml"),
            f"sweep.output_root={tmp}", "sweep.baselines=[{model: tiny}]"]
    args = cli.build_parser("sweep").parse_args(argv)
    stand_ins = {executor.make_backend: lambda sweep_dir, options: Answering(), query.max_array_size: lambda: 1000}
    for module in [m for name, m in sys.modules.items() if name.startswith("orchestrator")]:
        for name, value in list(vars(module).items()):
            if callable(value) and value in stand_ins:
                setattr(module, name, stand_ins[value])
    stops = trace(lambda: args.func(args))
    top = next((d for s, d, _ in stops if s in TOPS[:1]), 0)
    return [(s, d - top, site) for s, d, site in stops]


def main() -> None:
    parser = argparse.ArgumentParser(description="The files a launch passes through, in call order.")
    parser.add_argument("--command", action="store_true",
                        help="the whole of `orchestrate sweep` from the top of the launch path, not `launch` alone")
    command = parser.parse_args().command
    with tempfile.TemporaryDirectory() as tmp:
        stops = one_command(tmp) if command else one_launch(tmp)
    sites = list(dict.fromkeys((s, depth, site) for s, depth, site in stops if 1 <= depth <= 2))
    for s, depth, _ in sites:
        print("  " * depth, s)
    steps = [s for s, _, _ in sites]
    for label, chosen in (("every stop", [s for s, d, _ in stops if d >= 1]), ("the path's steps", steps)):
        n, returns, entered = measure(chosen)
        print(f"{label}: {n} stops in {len(entered)} files, {returns} returns to a file already left; entered: "
              + ", ".join(f"{f.rsplit('/', 1)[1]} {c}" for f, c in entered.most_common(4)))


if __name__ == "__main__":
    main()
