"""Load a sweep file and expand it into cells: pure, no I/O beyond reading files.

A sweep file is a Hydra primary config: its defaults list composes the base run config from the config groups
in `sweeps/conf/` (and `conf/` beside the file), its `sweep:` header says what to vary (orchestrator/sweep/spec.py).
Hydra composes once per combination of the config groups the sweep varies; everything else is a dict edit, so
10k cells expand in about a second. Each cell is resolved in full here, at load: nothing composes lazily on a
node, so editing a sweep never changes a queued job (Hydra's lazy-composition leak).

`load_sweep` reports every problem at once (header, command line, profile, every cell with its axis values)
as one ConfigError, and a missing or unreadable file as a UserError: never a traceback.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.override_parser.types import Override
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from orchestrator.claims import files as claim_files
from orchestrator.claims import rows as claim_rows
from orchestrator.claims.parse import Claim
from orchestrator.cluster.profile import SlurmProfile, SlurmResources, load_profile, resource_problems
from orchestrator.sweep import library_axis
from orchestrator.sweep.baselines import Baseline, expand_baselines
from orchestrator.sweep.compose import Composer, parse_overrides, read_yaml, search_dirs
from orchestrator.sweep.config_tree import (
    NotPlain,
    edit,
    has_interpolation,
    interpolated_paths,
    lookup,
    resolve_references,
)
from orchestrator.sweep.resource_plan import with_shard_plan
from orchestrator.sweep.rollout_share import with_profile_fraction
from orchestrator.sweep.spec import Axis, SweepSpec, parse_override_values
from record.display import cell_name, format_value
from record.errors import ConfigError
from record.identity.run_key import run_key
from trainer.config.run import RunConfig

SHOWN_CELLS = 3  # a problem shared by more cells names the first few and counts the rest


@dataclass(frozen=True)
class Cell:
    """One run: the axis values that made it, its resolved config, its identity and its Slurm resources."""

    index: int
    name: str
    run_key: str
    axes: tuple[tuple[str, Any], ...]  # (key, value) in axis order, ("seed", s) last
    config: RunConfig
    resources: SlurmResources


@dataclass(frozen=True)
class Sweep:
    """A loaded, expanded and validated sweep."""

    source: str
    overrides: tuple[str, ...]
    spec: SweepSpec
    profile: SlurmProfile
    cells: tuple[Cell, ...]
    duplicates: int  # cells dropped because an earlier cell had the same run_key
    baselines: tuple[Baseline, ...] = ()  # base models evaluated once (orchestrator/sweep/baselines.py)
    claims: tuple[Claim, ...] = ()  # what the sweep is run to test (orchestrator/claims/parse.py)
    claim_groups: tuple[tuple[str, tuple[str, ...]], ...] = ()  # the task groups the claims may name
    claim_warnings: tuple[str, ...] = ()  # claims the grid as overridden on the command line does not fit

    @property
    def name(self) -> str:
        return self.spec.name


def load_sweep(path: str | Path, overrides: Sequence[str] = ()) -> Sweep:
    """Read, compose, expand and validate a sweep file with command-line overrides in Hydra syntax."""
    path = Path(path)
    raw = read_yaml(path)
    problems: list[str] = []
    cli = parse_overrides(overrides, problems)
    if not isinstance(raw, Mapping):
        problems.append(f"{path}: the file holds a {type(raw).__name__}, not a mapping; see sweeps/README.md")
        raise ConfigError(problems, str(path))
    dirs = search_dirs(path)
    with Composer(path, dirs) as composer:
        head = composer.compose([])
        while isinstance(head, str) and composer.stand_in(head):  # a typo in the defaults: one problem among all
            problems.append(f"{head} (the file's other settings are checked with "
                            f"{composer.stand_ins[-1]} in its place)")
            head = composer.compose([])
        if isinstance(head, str):
            raise ConfigError([*problems, head], str(path))
        header = head.get("sweep")
        own = raw.get("sweep") if isinstance(raw.get("sweep"), Mapping) else {}
        if isinstance(header, Mapping) and "name" not in own:
            # The name is this file's unless the file sets it: a file whose defaults pull in onpolicy.yaml would
            # otherwise inherit `name: onpolicy` and write into that sweep's directory and ledger.
            header = {**header, "name": path.stem}
        for o in (o for o in cli if o.key_or_group.startswith("sweep.")):  # e.g. sweep.seeds=range(0,3)
            value = o.input_line.split("=", 1)[1] if o.is_sweep_override() else None if o.is_delete() else o.value()
            header = edit(header if isinstance(header, Mapping) else {}, o.key_or_group.removeprefix("sweep."),
                           value, o.is_delete())
        spec = _spec(header, path.stem, problems)
        if spec is None:
            raise ConfigError(problems, str(path))
        groups, fixed, axes = _classify(cli, spec, dirs, problems)
        for axis in axes:
            spec = spec.with_axis(axis)
        profile = load_profile(spec.profile, spec.slurm_overrides, problems)
        bases = _Bases(composer, groups, fixed, spec.name, profile.tracking_uri if profile else None)
        cells, duplicates = _expand(spec, bases, _group_keys(spec, dirs), profile, problems)
        if profile is not None and not problems:
            cells = with_shard_plan(cells, profile)  # eval.shard_samples from the eval job's time limit
        baselines = expand_baselines(spec.baselines, bases, problems)
    # Against cells only when they expanded whole: rows over a broken grid would only repeat its problems. A grid
    # narrowed on the command line (onpolicy.yaml with model=...) may leave a named claim without its cells: a
    # warning then (the report marks it not computed); the file as written must fit its own claims.
    unfit: list[str] = []
    narrowed = any(not o.startswith("sweep.") or o.split("=", 1)[0] in ("sweep.grid", "sweep.axes", "sweep.seeds")
                   for o in overrides)
    claims, groups = check_claims(spec.claims, path.parent, cells if not problems else [], problems,
                                  unfit if narrowed else problems)
    if problems:
        raise ConfigError(problems, str(path))
    return Sweep(str(path), tuple(overrides), spec, profile, tuple(cells), duplicates, baselines, tuple(claims),
                 tuple((g, tuple(ts)) for g, ts in groups.items()), tuple(unfit))


def check_claims(entries, base_dir: Path, cells: Sequence[Cell], problems: list[str], unfit: list[str]):
    """The sweep's claims, each checked against its cells: the axes and values it names, one configuration a side,
    paired seeds, and the tasks the compared cells are evaluated on (orchestrator/claims/rows.py). A claim
    that cannot be read goes to `problems`; one that does not fit the cells to `unfit`."""
    claims, groups = claim_files.resolve(list(entries), base_dir, problems)
    if not cells:
        return claims, groups
    pairs = [(c.run_key, dict(c.axes)) for c in cells]
    tasks_of = {c.run_key: list(c.config.eval.tasks) for c in cells}
    for claim in claims:
        for row in claim_rows.rows(claim, pairs, unfit):
            claim_rows.row_tasks(claim, row, tasks_of, groups, unfit)
    return claims, groups


def _spec(header: Any, default_name: str, problems: list[str]) -> SweepSpec | None:
    try:
        if isinstance(header, Mapping):
            header = OmegaConf.to_container(OmegaConf.create(dict(header)), resolve=True)
        return SweepSpec.from_dict(header, default_name, deferred=problems)
    except ConfigError as err:
        problems.extend(err.problems)
    except OmegaConfBaseException as err:
        problems.append(f"sweep: {str(err).splitlines()[0]}")
    return None


def _is_group(key: str, dirs: list[Path]) -> bool:
    return "." not in key and any((d / key).is_dir() for d in dirs)


def _group_keys(spec: SweepSpec, dirs: list[Path]) -> set[str]:
    return {k for k in spec.axis_keys() if _is_group(k, dirs)}


def _classify(cli: list[Override], spec: SweepSpec, dirs: list[Path], problems: list[str]):
    """Split the command line into group choices (composed by Hydra), fixed edits (set or `~`deleted on every
    cell) and axes (`a=1,2`, or any key the sweep already varies: the command line has the last word).
    `+key=v` sets like `key=v`: a key the run config does not know is refused either way."""
    groups: list[str] = []
    fixed: list[Override] = []
    axes: list[Axis] = []
    axis_keys = set(spec.axis_keys())
    for o in cli:
        key = o.key_or_group
        if key.startswith("sweep."):
            continue
        if key.lstrip("+~") == "seed":  # every cell's seed is its sweep.seeds value: a `seed=` would be dropped
            problems.append(f"override {o.input_line!r}: a cell's seed comes from sweep.seeds; write "
                            f"sweep.seeds=[0,1,2] instead")
            continue
        if key == library_axis.KEY:  # one library setting (its options are comma-separated: not Hydra's sweep syntax)
            queries = library_axis.values(o.value(), f"override {o.input_line!r}", problems)
            axes += [Axis(key, queries, o.input_line)] if queries else []
        elif o.is_sweep_override() or (key in axis_keys and not o.is_delete()):
            axis = parse_override_values(o.input_line.lstrip("+"), f"override {o.input_line!r}", problems)
            axes += [axis] if axis is not None else []
        elif _is_group(key, dirs) and not o.is_delete():
            groups.append(o.input_line)
        else:
            fixed.append(o)
    return groups, fixed, axes


# --- expanding ---------------------------------------------------------------------------------------------------

def _expand(spec: SweepSpec, bases: _Bases, group_keys: set[str], profile: SlurmProfile | None,
            problems: list[str]) -> tuple[list[Cell], int]:
    """Cells = union over grid blocks of (product of the axes) x seeds, deduplicated by run_key."""
    failures: dict[str, list[tuple[int, tuple]]] = {}  # problem -> the (raw index, axes) of the cells with it
    cells: dict[str, Cell] = {}
    built: dict = {}  # section dicts the cells share, built once (RunConfig.from_dict)
    raw_index = duplicates = 0
    for i, block in enumerate(spec.grid):
        problems += library_axis.clashes([a.key for a in (*spec.axes, *block)], f"sweep.grid[{i}]")
    for block in spec.grid:
        axes = (*spec.axes, *block)
        for values in itertools.product(*(a.values for a in axes)):
            chosen = tuple(zip((a.key for a in axes), values))
            choice = tuple(f"{k}={v}" for k, v in chosen if k in group_keys)
            base = bases.get(choice)
            for seed in spec.seeds:
                cell_axes = (*chosen, ("seed", seed))
                label = (raw_index, cell_axes)
                raw_index += 1
                edits = library_axis.expand((k, v) for k, v in cell_axes if k not in group_keys)
                if isinstance(base, str):
                    failures.setdefault(base, []).append(label)
                    _edit_problems(bases, edits, label, failures)
                    continue
                cell = _cell(base, edits, cell_axes, profile, label, failures, built)
                if cell is None:
                    continue
                if cell.run_key in cells:
                    duplicates += 1
                    if cells[cell.run_key].config != cell.config:  # 48-bit collision: never silently merged
                        failures.setdefault(f"run_key {cell.run_key} names two configs; report this", []).append(
                            label)
                    continue
                cells[cell.run_key] = cell
    problems.extend(_summarise(failures, raw_index))
    names = [cell_name(c.axes) for c in cells.values()]
    counts = Counter(names)
    return [Cell(i, name if counts[name] == 1 else f"{name}-{c.run_key[:6]}", c.run_key, c.axes, c.config,
                 c.resources) for i, (c, name) in enumerate(zip(cells.values(), names))], duplicates


@dataclass
class _Base:
    """A composed base run config. Its ${...} interpolations (at `paths`) are resolved per cell, after the
    cell's values are in, so `${rollout.max_response_tokens}` follows an axis on it."""

    data: dict
    paths: list[str]

    def resolve(self, data: dict, edits: list[tuple[str, Any]]) -> dict:
        try:  # plain `${a.b}` references by dict lookup: OmegaConf takes 3 ms a cell, 30 s for 10k cells
            for path in self.paths + [k for k, v in edits if has_interpolation(v)]:
                data = edit(data, path, resolve_references(data, lookup(data, path)))
            return data
        except NotPlain:
            return OmegaConf.to_container(OmegaConf.create(data), resolve=True)


class _Bases:
    """The base run config of each combination of group choices: composed by Hydra once, then the command
    line's fixed edits; a string is the problem that stopped it."""

    def __init__(self, composer: Composer, groups: list[str], fixed: list[Override], sweep_name: str,
                 tracking_uri: str | None = None):
        self.composer, self.groups, self.fixed, self.sweep_name = composer, groups, fixed, sweep_name
        self.tracking_uri = tracking_uri  # the Slurm profile's: where a cell that names none logs
        self.cache: dict[tuple[str, ...], _Base | str] = {}

    def get(self, choice: tuple[str, ...]) -> _Base | str:
        if choice not in self.cache:
            self.cache[choice] = self._make([*self.groups, *choice])
        return self.cache[choice]

    def for_model(self, model: str) -> _Base | str:
        """The base config with `model` chosen whatever the command line chose for it: a baseline's own model."""
        groups = [g for g in self.groups if g.split("=", 1)[0].lstrip("+") != "model"]
        return self._make([*groups, f"model={model}"])

    def fallback(self) -> _Base | str:
        """The sweep file's own group choices with the command line's fixed edits (no group overrides)."""
        if ("<fallback>",) not in self.cache:
            self.cache[("<fallback>",)] = self._make([])
        return self.cache[("<fallback>",)]

    def _make(self, overrides: list[str]) -> _Base | str:
        composed = self.composer.compose(overrides)
        if isinstance(composed, str):
            return composed
        if not isinstance(composed, dict):
            return f"the composed config is a {type(composed).__name__}, not a mapping"
        data = {k: v for k, v in composed.items() if k != "sweep"}
        for o in self.fixed:
            data = edit(data, o.key_or_group, None if o.is_delete() else o.value(), o.is_delete())
        tracking = data.get("tracking")
        if tracking is None or (isinstance(tracking, Mapping) and not tracking.get("experiment")):
            data = edit(data, "tracking.experiment", self.sweep_name)
        if self.tracking_uri and not (data.get("tracking") or {}).get("tracking_uri"):
            data = edit(data, "tracking.tracking_uri", self.tracking_uri)
        return _Base(data, interpolated_paths(data))


def _edit_problems(bases: _Bases, edits, label, failures) -> None:
    """A cell whose group choices do not compose (model=gpt9) still gets its other values checked, on the
    sweep's own defaults: every problem at once. Only problems at keys this cell sets are kept; the rest may
    belong to the defaults, not to what the user wrote."""
    fallback = bases.fallback()
    if isinstance(fallback, str):
        return
    found: dict[str, list] = {}
    _cell(fallback, edits, tuple(edits), None, label, found)
    keys = {k for k, _ in edits} | {o.key_or_group for o in bases.fixed}
    for problem, labels in found.items():
        if problem.split(":", 1)[0] in keys:
            failures.setdefault(problem, []).extend(labels)


def _cell(base: _Base, edits, cell_axes, profile, label, failures, built: dict | None = None) -> Cell | None:
    data = base.data
    for key, value in edits:
        data = edit(data, key, value)
    problems: list[str] = []
    if base.paths or any(has_interpolation(v) for _, v in edits):
        try:
            data = base.resolve(data, edits)
        except (OmegaConfBaseException, ValueError, TypeError) as err:
            problems.append(f"interpolation: {str(err).splitlines()[0]}")
    try:
        config = RunConfig.from_dict(data, built=built) if not problems else None
    except ConfigError as err:
        problems, config = err.problems, None
    resources = None
    if config is not None and profile is not None:
        # The profile's vLLM share for this model where the sweep set none (orchestrator/sweep/rollout_share.py:
        # sweep > profile > default); machinery, so the run_key below is the same either way.
        config = with_profile_fraction(config, data, profile.rollout_shares)
        resources = profile.train_resources(config.model.params_b)
        problems = resource_problems(config, resources, profile.name)
    for p in problems:
        failures.setdefault(p, []).append(label)
    if problems or config is None or resources is None:
        return None
    return Cell(0, "", run_key(config), cell_axes, config, resources)


def _label(axes: tuple[tuple[str, Any], ...]) -> str:
    return ", ".join(f"{k}={format_value(v)}" for k, v in axes)


def _summarise(failures: dict[str, list[tuple[int, tuple]]], total: int) -> list[str]:
    """One line per distinct problem, naming its cells and the axis values they share, e.g.
    `cell 7 (kl.estimator=k4, kl.beta=0.1, seed=0): kl.estimator: unknown value 'k4'; valid: k1, k2, k3` or
    `24 cells with kl.estimator=k4 (cells 0, 1, 2 and 21 more): kl.estimator: unknown value 'k4'; ...`."""
    lines = []
    for problem, cells in failures.items():
        if len(cells) == 1:
            index, axes = cells[0]
            lines.append(f"cell {index} ({_label(axes)}): {problem}")
            continue
        if len(cells) == total:
            lines.append(f"all {total} cells: {problem}")
            continue
        shared = set.intersection(*({(k, format_value(v)) for k, v in axes} for _, axes in cells))
        common = ", ".join(f"{k}={v}" for k, v in ((k, format_value(v)) for k, v in cells[0][1]) if (k, v) in shared)
        indices = ", ".join(str(i) for i, _ in cells[:SHOWN_CELLS])
        more = f" and {len(cells) - SHOWN_CELLS} more" if len(cells) > SHOWN_CELLS else ""
        which = f" with {common}" if common else ""
        lines.append(f"{len(cells)} cells{which} (cells {indices}{more}): {problem}")
    return lines
