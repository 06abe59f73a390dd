"""`sbatch --test-only` on the very scripts a launch would submit (orchestrator/cluster/executor.py renders them;
nothing is rebuilt here) and on the watcher job's parameters: Slurm answers where and when it would start them, or
why it refuses. No job starts."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

from orchestrator.cluster.executor import render_sbatch, watcher_params
from orchestrator.launch.plan import Plan
from orchestrator.sweep.expand import Sweep


@dataclass(frozen=True)
class Row:
    check: str
    group: str
    ok: bool
    words: str  # Slurm's answer, as it gave it
    fix: str = ""

    def to_dict(self) -> dict:
        return {"check": self.check, "group": self.group, "ok": self.ok, "words": self.words, "fix": self.fix}


FIXES = (("invalid partition", "name a partition `sinfo` lists in the profile's partition (or watcher.partition)"),
         # Slurm says "Invalid account or account/partition combination": the user has no association there
         ("invalid account", "you have no association in that account (for that partition): set the profile's account "
                             "(sweep.slurm.overrides.account) to one `sacctmgr show assoc user=$USER "
                             "format=account,partition` lists, or ask your site's admin to add you to it"),
         ("qos", "set the profile's qos to one your association allows (`sacctmgr show assoc user=$USER`)"),
         ("time limit", "lower the group's time_min (or the watcher's) under the partition's MaxTime"),
         ("memory", "lower mem_gb under what the partition's nodes have"),
         ("gres", "ask for GPUs a partition has (`sinfo -o '%P %G'`)"))


def fix_for(words: str) -> str:
    low = words.lower()
    return next((fix for key, fix in FIXES if key in low), "read Slurm's words above; `scontrol show partition`")


def test_only(args: list[str], script: str | None = None) -> tuple[bool, str]:
    done = subprocess.run(["sbatch", "--test-only", *args], input=script, capture_output=True, text=True,
                          timeout=60, check=False)
    words = " ".join((done.stderr + done.stdout).split())
    return done.returncode == 0, words


def partitions() -> set[str] | None:
    """The partitions the cluster has (`sinfo -a -h -o %R`: hidden ones too), or None where sinfo cannot say (then
    Slurm's verdict alone stands)."""
    try:
        done = subprocess.run(["sinfo", "-a", "-h", "-o", "%R"], capture_output=True, text=True, timeout=60,
                              check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return set(done.stdout.split()) if done.returncode == 0 and done.stdout.strip() else None


def unknown_partition(group: str, partition: str | None, known: set[str] | None) -> Row | None:
    """A row naming a partition the cluster lacks as such: Slurm's own answer to a job asking for GPUs there can be
    a gres error that names neither the partition nor the fix."""
    unknown = [p for p in (partition or "").split(",") if p and known is not None and p not in known]
    if not unknown:
        return None
    return Row("sbatch --test-only", group, False, f"partition {', '.join(map(repr, unknown))} does not exist on "
               f"this cluster (sinfo lists: {', '.join(sorted(known))})", FIXES[0][1])


def watcher_flags(profile) -> list[str]:
    """The watcher job's parameters as sbatch flags (asked here, and from the watcher's node by its probe)."""
    return [f"--{k.replace('_', '-')}={v}" for k, v in watcher_params(profile).items()]


def rows(sweep: Sweep, plan: Plan, python: str | None = None, data_dir: str | None = None) -> list[Row]:
    """One row per array of the plan and one for the watcher (unless the profile runs none)."""
    out, known = [], partitions()
    for group in plan.groups:
        script = render_sbatch(sweep, plan, group, python, data_dir)
        # the chained evaluation's dependency names a job that does not exist yet: Slurm is asked without it
        script = "\n".join(line for line in script.splitlines() if not line.startswith("#SBATCH --dependency"))
        named = next((line.split("=", 1)[1].strip().strip("'\"") for line in script.splitlines()
                      if line.startswith("#SBATCH --partition=")), None)
        missing = unknown_partition(group.name, named, known)
        ok, words = (False, "") if missing else test_only([], script)
        out.append(missing or Row("sbatch --test-only", group.name, ok, words, "" if ok else fix_for(words)))
    flags = watcher_flags(sweep.profile)
    missing = unknown_partition("watcher", watcher_params(sweep.profile).get("partition"), known)
    ok, words = (False, "") if missing else test_only([*flags, "--ntasks=1", "--cpus-per-task=1", "--wrap=true"])
    out.append(missing or Row("sbatch --test-only", "watcher", ok, words, "" if ok else fix_for(words)))
    return out
