"""Run configs and the sweep manifest: the only files `orchestrate sweep` writes before submission.

`<output_root>/<sweep>/configs/<array>.json` holds the RESOLVED run config of every cell of one array (issue 25:
one file and one fsync per array, not per cell); a job writes its `<run_key>/config.yaml` from it at its start
(record/rundir.py `ensure_config`) and reads nothing else, so editing the sweep file or a config group later never
changes a job already planned (the lazy composition of Hydra's launcher does exactly that).
`<output_root>/<sweep>/manifest.json` records the resolved sweep, its cells and plan, the git commit and diff of
the code, and the orchestrator's version. Every file is written whole or not at all (temp file + os.replace),
which is safe on NFS for a single writer.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

import tomllib
import yaml

from orchestrator.cluster.snapshot import REPO
from orchestrator.launch.baseline_jobs import sweep_baselines_dir
from orchestrator.launch.plan import Plan
from orchestrator.sweep.baselines import identity
from orchestrator.sweep.expand import Sweep
from record.config_table import config_tables_dir, pack, read_config_tables, unpack, write_config_table
from record.errors import ConfigError, UserError
from record.files import atomic_write, config_text
from record.identity.run_key import run_key
from record.rundir import RunDir
from record.tracking.run_names import sweep_params
from trainer.config.run import RunConfig


@dataclass(frozen=True)
class Materialised:
    sweep_dir: Path
    written: int  # new run dirs
    unchanged: int  # run dirs already there with this exact config
    kept: int  # run dirs already there whose config differs only in where it logs (tracking)
    updated: int = 0  # run dirs whose evaluation or machinery settings changed (record/identity/fields.py): rewritten


def materialise(sweep: Sweep, plan: Plan, root: str | Path | None = None) -> Materialised:
    """Write each array's run configs (one file per array, `<sweep dir>/configs/<array>.json`) and the manifest.
    A cell's config.yaml is its job's to write at its start (record/rundir.py `ensure_config`); where one is
    there already (a started run, a legacy sweep), it is rewritten only where what it evaluates or its machinery
    changed (never what it computes: that is another run_key, and never its tracking: a resumed run keeps logging
    where it started); a running job takes it at its next start."""
    sweep_dir = Path(root if root is not None else sweep.spec.output_root) / sweep.name
    problem = owner_problem(sweep, sweep_dir)
    if problem:
        raise UserError(problem)
    try:
        return _materialise(sweep, plan, sweep_dir)
    except OSError as err:
        raise UserError(f"cannot write the run dirs under {sweep_dir}: {err}; set sweep.output_root to a "
                        f"writable directory (on a cluster: one every node can read)") from None


def owner_problem(sweep: Sweep, sweep_dir: Path | None = None) -> str | None:
    """Another sweep file's directory: its manifest names the file that made it, and a different file of the same
    name would write into its ledger and run directories. The message, with the fix; None where the directory is
    new or this file's."""
    sweep_dir = sweep_dir if sweep_dir is not None else Path(sweep.spec.output_root) / sweep.name
    try:
        old = json.loads((sweep_dir / "manifest.json").read_text(encoding="utf-8"))
        made_by, text = old.get("source_path"), old.get("source_sha256")
    except (OSError, ValueError, AttributeError):
        return None  # a manifest from before source_path: its `source` may be relative to another directory
    here = Path(sweep.source).resolve()
    if not made_by or Path(made_by) == here or text == _sha256_of(here):  # this file, or it moved unchanged
        return None
    return (f"{sweep_dir} is the directory of the sweep {made_by} (its manifest.json says so); {sweep.source} is "
            f"named {sweep.name!r} too and would write into that sweep's ledger and run directories. Give it a name "
            f"of its own (sweep: {{name: ...}} in the file, or sweep.name=... on the command line), or another "
            f"sweep.output_root. If it is that sweep, moved and edited: launch it once as it was (a moved, unchanged "
            f"file is recognised by its content), then with the edits")


def _sha256_of(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _materialise(sweep: Sweep, plan: Plan, sweep_dir: Path) -> Materialised:
    counts = dict.fromkeys(("written", "unchanged", "kept", "updated"), 0)
    started = _with_config(sweep_dir, {c.run_key for c in sweep.cells})
    group_of = {i: g.name for g in plan.train for i in g.cells}
    arrays: dict[str, dict[str, dict]] = {}
    # once, and each section object one dict: the array files and the manifest only read them
    shared: dict = {}
    datas = [cell.config.to_dict(shared) for cell in sweep.cells]
    for cell, data in zip(sweep.cells, datas):
        arrays.setdefault(group_of.get(cell.index, "cells"), {})[cell.run_key] = data
        if cell.run_key in started:
            counts[_rewrite_started(RunDir(sweep_dir / cell.run_key).config, cell, data)] += 1
    tables, packed = read_config_tables(sweep_dir), {name: pack(cells) for name, cells in arrays.items()}
    where = {}  # run_key -> the array file a reader finds it in (the first, sorted)
    for name, table in reversed(tables.items()):
        where.update(dict.fromkeys(table.get("cells") or {}, name))
    for name, cells in arrays.items():
        for key, data in cells.items():
            if key not in started:
                counts[_against(tables.get(where.get(key)), packed[name], key, data)] += 1
    _write_tables(sweep_dir, tables, arrays, packed)
    materialise_baselines(sweep.baselines, sweep_dir)
    text = manifest_text(manifest(sweep, plan, git_state(), datas))
    if _text_of(sweep_dir / "manifest.json") != text:  # a relaunch of the same sweep writes (and fsyncs) nothing
        atomic_write(sweep_dir / "manifest.json", text)
    return Materialised(sweep_dir, counts["written"], counts["unchanged"], counts["kept"], counts["updated"])


def _distinct_sections(datas: list[dict]) -> list[dict]:
    """The cells' configs, each section dict only the first time it appears (`RunConfig.to_dict(shared)` gives the
    cells that hold one section object one dict): what `sweep_params` needs to see every distinct value in order,
    at 10,000 cells a few hundred sections instead of 100,000."""
    seen: set[int] = set()
    out = []
    for data in datas:
        part = {}
        for name, value in data.items():
            if type(value) is dict:
                if id(value) in seen:
                    continue
                seen.add(id(value))
            part[name] = value
        out.append(part)
    return out


def _against(old: dict | None, new: dict, key: str, data: dict) -> str:
    """A cell no job started, against the array file that holds it: "written" (none did), "unchanged" or
    "updated" (its queued job takes the new settings when it starts). Same base: the deltas alone are compared."""
    if old is None:
        return "written"
    if old.get("base") == new["base"]:
        return "unchanged" if old["cells"][key] == new["cells"][key] else "updated"
    return "unchanged" if unpack(old, key) == data else "updated"


def _with_config(sweep_dir: Path, keys: set[str]) -> set[str]:
    """The cells whose run dir holds a config.yaml: one listing of the sweep dir, then a stat only for the run
    dirs there (a run dir exists once its job started, or from a legacy sweep), not one per cell."""
    try:
        names = {entry.name for entry in os.scandir(sweep_dir) if entry.name in keys}
    except FileNotFoundError:
        return set()
    return {key for key in names if RunDir(sweep_dir / key).config.exists()}


def _rewrite_started(path: Path, cell, data: dict) -> str:
    """A started run's config.yaml against the cell: "unchanged", "kept" (only its tracking differs) or "updated"
    (rewritten); UserError when it trains something else."""
    text = config_text(data)
    existing = path.read_text(encoding="utf-8")
    if existing == text:
        return "unchanged"
    old = _same_training(existing, cell)
    if old is None:
        raise UserError(f"{path}: holds a run config that trains something else than run_key {cell.run_key} "
                        f"names; it was edited by hand or is corrupt. Move that run dir away and run this again.")
    ours = {**data, "tracking": old.get("tracking", {})}
    if config_text(ours) == existing or ours == old:
        return "kept"
    atomic_write(path, config_text(ours))
    return "updated"


def _write_tables(sweep_dir: Path, tables: dict[str, dict], arrays: dict[str, dict[str, dict]],
                  packed: dict[str, dict]) -> None:
    """Each array's file: this sweep's cells, plus the cells of earlier versions of the sweep an old file holds
    (their queued jobs and their readers still need them). A cell that moved to another array leaves its old
    file; the files that gain cells are written first, so a crash in between leaves a cell in two files (both
    train what its run_key names), never in none. A file already equal is not written again."""
    ours = {key for cells in arrays.values() for key in cells}
    new: dict[str, dict[str, dict]] = {}
    for name in sorted({*tables, *arrays}):
        kept = {k: unpack(tables[name], k) for k in (tables.get(name, {}).get("cells") or {}) if k not in ours}
        new[name] = {**kept, **arrays.get(name, {})}
        if kept or name not in packed:
            packed[name] = pack(new[name])

    def gains(name: str) -> bool:
        return not set(new[name]) <= set((tables.get(name) or {}).get("cells") or {})

    for name in sorted(new, key=lambda n: not gains(n)):
        if not new[name]:
            (config_tables_dir(sweep_dir) / f"{name}.json").unlink(missing_ok=True)
        elif packed[name] != tables.get(name):
            write_config_table(sweep_dir, name, new[name], packed[name])


def _same_training(existing: str, cell) -> dict | None:
    """The existing config.yaml as a mapping when it trains what the cell does (its training identity, legacy
    files read with today's defaults), else None."""
    try:
        old = yaml.safe_load(existing)
        config = RunConfig.from_dict(old)
    except (yaml.YAMLError, ConfigError, TypeError, ValueError, AttributeError):
        return None
    return old if run_key(config) == run_key(cell.config) else None


def manifest(sweep: Sweep, plan: Plan, git: dict, datas: list[dict] | None = None) -> dict:
    """Everything needed to know later what this sweep ran: pure, no timestamps (a rerun rewrites it equal).
    `datas`: the cells' configs as plain values, where the caller has them already."""
    datas = datas if datas is not None else [c.config.to_dict() for c in sweep.cells]
    group_of = {i: g.name for g in plan.train for i in g.cells}
    return {
        "sweep": sweep.name,
        "source": sweep.source,
        # Which file made this directory, resolved (`source` is as given, perhaps relative), and its text's hash (a
        # moved file is still that sweep): `owner_problem`.
        "source_path": str(Path(sweep.source).resolve()),
        "source_sha256": _sha256_of(Path(sweep.source)),
        "overrides": list(sweep.overrides),
        "resolved_sweep": sweep.spec.to_dict(),
        "profile": sweep.profile.to_dict(),
        "cells": [{"index": c.index, "name": c.name, "run_key": c.run_key,
                   "axes": {k: list(v) if isinstance(v, tuple) else v for k, v in c.axes},
                   "train_group": group_of[c.index]}
                  for c in sweep.cells if c.index in group_of],
        "duplicates_dropped": sweep.duplicates,
        "baselines": [b.description() for b in sweep.baselines],
        **({"claims": [c.to_dict() for c in sweep.claims], "claim_groups": {g: list(ts) for g, ts in
                                                                              sweep.claim_groups}}
           if sweep.claims else {}),
        "plan": plan.to_dict(),
        # What the sweep's parent MLflow run carries as params (record/tracking/run_names.py `sweep_params`).
        "parent_params": sweep_params(sweep.name, sweep.spec.seeds, _distinct_sections(datas), len(datas)),
        "git": git,
        "orchestrator_version": orchestrator_version(),
    }


def _text_of(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (FileNotFoundError, UnicodeDecodeError):
        return None


def manifest_text(data: dict) -> str:
    """The manifest as JSON, indented, but its cells one per line: at 10,000 cells an indented list is json's
    pure-Python encoder for 100,000 lines (issue 25); one line per cell is C's, and still greppable."""
    parts = []
    for key, value in data.items():
        if key == "cells" and value:
            text = "[\n" + ",\n".join(f"  {json.dumps(cell)}" for cell in value) + "\n ]"
        else:
            text = json.dumps(value, indent=1).replace("\n", "\n ")
        parts.append(f" {json.dumps(key)}: {text}")
    return "{\n" + ",\n".join(parts) + "\n}\n"


def git_state(repo: Path = REPO) -> dict:
    """The commit, whether the tree is dirty, the diff against HEAD and the untracked files' names."""
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain") or ""
    return {
        "commit": commit.strip() if commit else None,
        "dirty": bool(status.strip()),
        "diff": git("diff", "HEAD") or "",
        "untracked": [line[3:] for line in status.splitlines() if line.startswith("??")],
    }


def orchestrator_version() -> str:
    try:
        return version("comedy-sweeps")
    except Exception:  # noqa: BLE001 - not installed (a checkout on PYTHONPATH): read pyproject.toml
        try:
            return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
        except (OSError, KeyError, tomllib.TOMLDecodeError):
            return "unknown"


def materialise_baselines(baselines, sweep_dir: Path) -> tuple[int, int]:
    """Write each baseline's config.yaml and baseline.json (never rewriting a different one); (written, there)."""
    written = there = 0
    for b in baselines:
        run = RunDir(sweep_baselines_dir(sweep_dir) / b.key)
        text = yaml.safe_dump(b.config.to_dict(), sort_keys=False)
        if run.config.exists():
            try:
                same = identity(RunConfig.from_dict(yaml.safe_load(run.config.read_text(encoding="utf-8")))) \
                    == identity(b.config)
            except (yaml.YAMLError, ConfigError, TypeError, ValueError, AttributeError):
                same = False
            if not same:
                raise UserError(f"{run.config}: holds another evaluation than baseline {b.key} names; it was edited "
                                f"by hand or is corrupt. Move {run.path} away and run this again.")
            there += 1
        else:
            atomic_write(run.config, text)
            written += 1
        if not run.baseline.exists():
            atomic_write(run.baseline, json.dumps(b.description(), indent=1) + "\n")
    return written, there
