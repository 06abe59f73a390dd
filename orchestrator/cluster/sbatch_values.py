"""What a value that reaches an sbatch script may be: pure checks, each appending one problem (key path, the
value, what is allowed) to a list, in the style of record/checks.py.

Every Slurm value of a profile or of a sweep's overrides becomes an `#SBATCH --key=value` line (partition,
account, qos, constraint, the resources), and the sweep's name and output_root become the job names and the
log paths in them. submitit shell-quotes each value but writes it as it is otherwise, so a newline in a
value would start a line of its own (a directive or a command), and sbatch reads `%` in a log path as a
filename pattern. Names are therefore held to Slurm's own syntax, paths to a plain set of characters, and
numbers to Slurm's field sizes (or a bound past which a value can only be a typo).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping

# Slurm's names (partitions, accounts, QOS) in slurm.conf and sacctmgr: letters, digits, '_', '-', '.'.
SLURM_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}", re.ASCII)
# A job or sweep name: also a directory name, so no leading '.' or '-'.
JOB_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", re.ASCII)
# A node-feature expression (sbatch --constraint): feature names joined by & | , *N [ ] ( ) !
CONSTRAINT = re.compile(r"[A-Za-z0-9_.:=&|,*\[\]()!-]{1,256}", re.ASCII)
PATH_PUNCTUATION = set(" /._-+,=@:~")
MAX_PATH = 1024  # the log paths add the sweep name and submitit's file names; PATH_MAX is 4096
SHELL = set("$`'\"\\;&|<>(){}[]*?!#%^")

# (low, high, why high) of each count. Slurm's job fields: tasks and CPUs per task are 16 bits with 0xfffe and
# 0xffff reserved (NO_VAL16, INFINITE16); MaxArraySize may not exceed 4000001 (slurm.conf); --signal's delay
# is at most 65535 s. Where Slurm's field is wider than any cluster, the bound is where a value is a typo.
LIMITS = {
    "nodes": (1, 65533, "more nodes than any cluster has"),
    "gpus_per_node": (0, 256, "more GPUs than any node has"),
    "tasks_per_node": (1, 65533, "Slurm counts tasks per node in 16 bits"),
    "cpus_per_task": (1, 65533, "Slurm counts CPUs per task in 16 bits"),
    "time_min": (1, 525600, "longer than a year"),
    "array_parallelism": (1, 4000001, "Slurm's MaxArraySize is at most 4000001"),
    "max_array_size": (1, 4000001, "Slurm's MaxArraySize is at most 4000001"),
    "signal_delay_s": (1, 65535, "Slurm's --signal allows at most 65535 s"),
}
MEM_GB = (0.001, 1048576.0)  # 1 MB (Slurm reads --mem=0 as all of a node's memory) to 1 PiB per node
SHOWN = 60  # characters of a long value shown in a message


def show(value) -> str:
    """The value as the user wrote it (repr: a newline shows as \\n), cut to SHOWN characters when long."""
    try:
        text = repr(value)
    except ValueError:  # an int past Python's 4300-digit str limit
        return f"an integer of {value.bit_length()} bits"
    if len(text) <= SHOWN + 10:
        return text
    size = f"{len(value)} characters" if isinstance(value, str) else type(value).__name__
    return f"{text[:SHOWN]}... ({size})"


def offender(value: str, allowed) -> str | None:
    """What is wrong with the first character `allowed` refuses, in words; None when every one is allowed."""
    for i, ch in enumerate(value):
        if allowed(ch):
            continue
        category = unicodedata.category(ch)
        if category[0] == "C" or category in ("Zl", "Zp"):
            kind = "a control character"  # \n, \r, \0, bidi overrides, lone surrogates: never in a script line
        elif ch == "%":
            kind = "a Slurm filename pattern character"  # %j, %x, ... expand in log paths
        elif ch.isspace():
            kind = "whitespace"
        elif ch in SHELL:
            kind = "a shell character"
        elif not ch.isascii():
            kind = "a non-ASCII character"
        else:
            kind = "the character"
        return f"{kind} {ch!r} (character {i + 1})"
    return None


def slurm_name(p: list[str], path: str, value, what: str, optional: bool = False, several: bool = False) -> None:
    """A partition, account or QOS name; `several`: a comma-separated list (sbatch --partition takes one)."""
    if value is None and optional:
        return
    null = ", or null" if optional else ""
    allowed = f"1-64 letters, digits, '_', '-' or '.'{' (several comma-separated)' if several else ''}{null}"
    if not isinstance(value, str) or not value:
        p.append(f"{path}: {show(value)}; give {what}: {allowed}")
        return
    parts = value.split(",") if several else [value]
    if all(SLURM_NAME.fullmatch(part) for part in parts):
        return
    bad = offender(value, lambda ch: SLURM_NAME.fullmatch(ch) is not None or (several and ch == ","))
    why = f"has {bad}" if bad else "is too long or has an empty name"
    p.append(f"{path}: {show(value)} {why}; give {what}: {allowed}")


def job_name(p: list[str], path: str, value, what: str) -> None:
    """A name that becomes Slurm job names and a directory (the sweep's)."""
    if isinstance(value, str) and JOB_NAME.fullmatch(value):
        return
    bad = offender(value, lambda ch: JOB_NAME.fullmatch("a" + ch) is not None) if isinstance(value, str) else None
    long = isinstance(value, str) and len(value) > 64
    why = f" has {bad}" if bad else " is longer than 64 characters" if long else ""
    p.append(f"{path}: {show(value)}{why}; give 1-64 letters, digits, '.', '_' or '-', starting with a letter or "
             f"digit ({what})")


def constraint(p: list[str], path: str, value) -> None:
    """A node-feature expression (sbatch --constraint): Slurm checks its grammar; here only its characters."""
    if value is None or (isinstance(value, str) and CONSTRAINT.fullmatch(value)):
        return
    bad = offender(value, lambda ch: CONSTRAINT.fullmatch(ch) is not None) if isinstance(value, str) else None
    why = f" has {bad}" if bad else ""
    p.append(f"{path}: {show(value)}{why}; give node features (1-256 letters, digits, '_', '.', '-', joined by "
             f"& | , [ ] ( ) ! or *N, e.g. a100&ib), or null")


def file_path(p: list[str], path: str, value, what: str) -> None:
    """A path that reaches a script (#SBATCH --output, the setup lines): no control, shell or pattern characters
    (Slurm expands % in log paths and expands none once a backslash appears)."""
    ok = isinstance(value, str) and value.strip() and len(value) <= MAX_PATH
    bad = offender(value, lambda ch: ch.isalnum() or ch in PATH_PUNCTUATION) if isinstance(value, str) else None
    if ok and not bad:
        return
    why = f" has {bad}" if bad else f" is longer than {MAX_PATH} characters" if isinstance(value, str) and \
        len(value) > MAX_PATH else ""
    p.append(f"{path}: {show(value)}{why}; give {what}: up to {MAX_PATH} letters, digits, spaces and / . _ - + , "
             f"= @ : ~")


def count(p: list[str], path: str, value, key: str) -> None:
    low, high, why = LIMITS[key]
    integer = isinstance(value, int) and not isinstance(value, bool)
    if not integer or not low <= value <= high:
        above = f"{why}: " if integer and value > high else ""
        p.append(f"{path}: {show(value)}; {above}give an integer from {low} to {high}")


def memory_gb(p: list[str], path: str, value) -> None:
    low, high = MEM_GB
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    # A float's NaN fails both comparisons; an int is compared as it is (one past 1e308 has no float).
    if not number or not low <= value <= high:
        p.append(f"{path}: {show(value)}; give the memory per node in GB, a number from {low} (1 MB; Slurm reads "
                 f"--mem=0 as all of a node's memory) to {high:.0f}")


def profile_scalars(values: Mapping, path: str) -> list[str]:
    """The problems of a profile's scalars present in `values` (orchestrator/cluster/profile.py SlurmProfile): each one
    becomes an #SBATCH line, or its array's `%N`."""
    p: list[str] = []
    for key, what in (("partition", "the Slurm partition (sinfo -s lists them)"),
                      ("account", "the Slurm account (sacctmgr show assoc)"), ("qos", "the Slurm QOS")):
        if key in values:
            slurm_name(p, f"{path}.{key}", values[key], what, optional=key != "partition", several=key == "partition")
    for key in ("array_parallelism", "max_array_size", "signal_delay_s"):
        if key in values:
            count(p, f"{path}.{key}", values[key], key)
    return p


def screen_memory(raw: Mapping, path: str, problems: list[str]) -> dict:
    """`raw` without a `mem_gb` integer too large to become a float (its problem appended): the conversion to
    float at build time would raise OverflowError instead of reporting it."""
    value = raw.get("mem_gb")
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 2**1023:
        memory_gb(problems, f"{path}.mem_gb", value)
        return {k: v for k, v in raw.items() if k != "mem_gb"}
    return dict(raw)


def blame_overrides(problems: list[str], prefix: str, overrides: Mapping, to: str) -> list[str]:
    """Problems under `prefix` (the profile file's key paths) whose value came from `overrides` renamed to the
    key the user wrote (`to`, e.g. sweep.slurm.overrides): the profile file is not where to fix them."""
    out = []
    for problem in problems:
        rest = problem[len(prefix) + 1:] if problem.startswith(prefix + ".") else None
        if rest is not None and _set_by(overrides, rest.split(":", 1)[0]):
            problem = f"{to}.{rest}"
        out.append(problem)
    return out


def _set_by(overrides: Mapping, key_path: str) -> bool:
    node = overrides
    for part in re.findall(r"[^.\[\]]+", key_path):
        if not isinstance(node, Mapping):
            return True  # a list or scalar override replaces the whole value, parts and all
        if part not in node:
            return False
        node = node[part]
    return True
