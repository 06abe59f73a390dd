"""The sweep file's header: a frozen dataclass, validated once at load (CONTRIBUTING.md rule 4).

A sweep header (`sweep:` in a sweep file) says which cells to run: a union of grid blocks, each the product of
its axes (and of the shared `axes`), times `seeds`. Axis values use Hydra's sweep syntax (`k1,k3`, `range(0,3)`,
`choice(a,b)`), parsed by Hydra's own override parser. The Slurm profile it names is orchestrator/cluster/profile.py.
Every problem is collected with its key path, the bad value and what to write instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ValueType
from hydra.errors import HydraException

from orchestrator.cluster import sbatch_values as sv
from orchestrator.sweep import library_axis
from orchestrator.sweep.baselines import BaselineEntry, parse_baselines
from record.errors import raise_if

_PARSER: list[OverridesParser] = []


def _parser() -> OverridesParser:
    if not _PARSER:
        _PARSER.append(OverridesParser.create())
    return _PARSER[0]


@dataclass(frozen=True)
class Axis:
    """One sweep axis: a config key (`kl.beta`) or a config group (`model`) and the values it takes."""

    key: str
    values: tuple
    text: str  # as written, for messages


def parse_axis(key: Any, raw: Any, path: str, problems: list[str]) -> Axis | None:
    """Parse `key: raw` with Hydra's override parser; None (and a problem) when it cannot be a grid axis."""
    if not isinstance(key, str) or not key:
        problems.append(f"{path}: axis key {key!r}; give a config key such as kl.beta or a group such as model")
        return None
    where = f"{path}.{key}"
    if key.startswith(("+", "~")):
        problems.append(f"{where}: axes set existing keys; drop the {key[0]!r} (unknown keys are refused)")
        return None
    if key == "seed" or key.split(".")[0] in ("sweep", "hydra"):
        problems.append(f"{where}: cannot be an axis; set seeds with sweep.seeds and the header with sweep.*")
        return None
    if key == library_axis.KEY:  # library settings, as `orchestrate bias --library` takes them (not Hydra syntax)
        queries = library_axis.values(raw, where, problems)
        return None if queries is None else Axis(key, queries, str(raw))
    if isinstance(raw, (list, dict)):
        problems.append(f"{where}: {raw!r} is a YAML {type(raw).__name__}; write the values in Hydra's sweep "
                        f"syntax as a string (\"a,b\", \"range(0,3)\", \"choice(a,b)\"), or one list value "
                        f"quoted (\"[a,b]\")")
        return None
    text = raw if isinstance(raw, str) else "null" if raw is None else str(raw).lower() if isinstance(
        raw, bool) else repr(raw)
    return parse_override_values(f"{key}={text}", where, problems)


def parse_override_values(override: str, where: str, problems: list[str]) -> Axis | None:
    try:
        parsed = _parser().parse_override(override)
    except HydraException as err:
        problems.append(f"{where}: {override!r} is not Hydra override syntax ({_first_line(err)}); "
                        f"e.g. kl.beta=0.05,0.1 or kl.beta=range(1,4)")
        return None
    if parsed.is_delete() or parsed.is_add() or parsed.is_force_add():
        problems.append(f"{where}: {override!r}; an axis sets an existing key: drop the +, ++ or ~")
        return None
    kind = parsed.value_type
    if kind in (ValueType.INTERVAL_SWEEP, ValueType.GLOB_CHOICE_SWEEP):
        problems.append(f"{where}: {override!r}; a grid needs listed values, not {kind.name.lower()}: "
                        f"write them as a,b,c, choice(a,b) or range(start,stop,step)")
        return None
    try:
        values = tuple(parsed.sweep_iterator()) if parsed.is_sweep_override() else (parsed.value(),)
    except (HydraException, ValueError, TypeError) as err:
        problems.append(f"{where}: {override!r}: {_first_line(err)}")
        return None
    if not values:
        problems.append(f"{where}: {override!r} gives no values; give at least one")
        return None
    return Axis(parsed.key_or_group, values, override.split("=", 1)[1])


def _first_line(err: Exception) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0]


@dataclass(frozen=True)
class SweepSpec:
    """The `sweep:` header: cells = union over `grid` blocks of (product of `axes` x the block's axes) x `seeds`."""

    name: str
    seeds: tuple[int, ...] = (0,)
    axes: tuple[Axis, ...] = ()
    grid: tuple[tuple[Axis, ...], ...] = ((),)
    profile: str = "local"
    slurm_overrides: dict = field(default_factory=dict)
    output_root: str = "runs"
    # Evaluations of base models, run once per sweep (orchestrator/sweep/baselines.py).
    baselines: tuple[BaselineEntry, ...] = ()
    # What the sweep is run to test (orchestrator/claims/files.py): ids, claims files, claims; resolved at load.
    claims: tuple = ()

    @classmethod
    def from_dict(cls, data: Any, default_name: str, deferred: list[str] | None = None) -> SweepSpec:
        """The header, checked; ConfigError with every problem. With `deferred`, the baselines' problems go there
        instead (their bad entries left out), so the caller reports them with the cells'
        (orchestrator/sweep/expand.py)."""
        problems: list[str] = []
        if data is None:
            data = {}
        if not isinstance(data, Mapping):
            raise_if([f"sweep: {data!r} is not a mapping; see sweeps/README.md"], "sweep")
        valid = ("name", "seeds", "axes", "grid", "slurm", "output_root", "baselines", "claims")
        problems += [f"sweep.{k}: unknown key; valid: {', '.join(valid)}" for k in data if k not in valid]
        name = data.get("name", default_name)
        sv.job_name(problems, "sweep.name", name, "it names a directory and the Slurm jobs")
        seeds = _seeds(data.get("seeds", [0]), problems)
        axes = _block(data.get("axes", {}), "sweep.axes", problems)
        grid = _grid(data.get("grid", [{}]), problems)
        for i, block in enumerate(grid):
            for key in {a.key for a in block} & {a.key for a in axes}:
                problems.append(f"sweep.grid[{i}].{key}: also a shared axis in sweep.axes; keep one of the two")
        profile, overrides = _slurm(data.get("slurm", {}), problems)
        root = data.get("output_root", "runs")
        sv.file_path(problems, "sweep.output_root", root, "the directory of the run dirs and the Slurm logs")
        baselines = parse_baselines(data.get("baselines", []), problems if deferred is None else deferred)
        claims = data.get("claims") or []
        if not isinstance(claims, list):
            problems.append(f"sweep.claims: {claims!r}; give a list of claim ids, claims files and claims "
                            f"(sweeps/claims/paper.yaml)")
        raise_if(problems, "sweep")
        return cls(name, seeds, axes, grid, profile, overrides, root, baselines,
                   tuple(claims) if isinstance(claims, list) else ())

    def with_axis(self, axis: Axis) -> SweepSpec:
        """The command line's last word on an axis (Hydra's precedence): replace it wherever it appears,
        else add it to the shared axes."""
        if axis.key not in self.axis_keys():
            return replace(self, axes=(*self.axes, axis))

        def swap(axes: tuple[Axis, ...]) -> tuple[Axis, ...]:
            return tuple(axis if a.key == axis.key else a for a in axes)
        return replace(self, axes=swap(self.axes), grid=tuple(swap(block) for block in self.grid))

    def axis_keys(self) -> list[str]:
        keys = [a.key for a in self.axes]
        keys += [a.key for block in self.grid for a in block if a.key not in keys]
        return list(dict.fromkeys(keys))

    def to_dict(self) -> dict:
        return {"name": self.name, "seeds": list(self.seeds),
                "axes": {a.key: a.text for a in self.axes},
                "grid": [{a.key: a.text for a in block} for block in self.grid],
                "slurm": {"profile": self.profile, "overrides": self.slurm_overrides},
                "output_root": self.output_root,
                "baselines": [{k: list(v) if isinstance(v, tuple) else v for k, v in entry.settings}
                              for entry in self.baselines],
                **({"claims": list(self.claims)} if self.claims else {})}


def _seeds(raw: Any, problems: list[str]) -> tuple[int, ...]:
    if isinstance(raw, str):
        axis = parse_override_values(f"seed={raw}", "sweep.seeds", problems)
        raw = list(axis.values) if axis else []
    elif isinstance(raw, int) and not isinstance(raw, bool):
        raw = [raw]
    if not isinstance(raw, list) or not raw or not all(isinstance(s, int) and not isinstance(s, bool)
                                                       and s >= 0 for s in raw):
        problems.append(f"sweep.seeds: {raw!r}; give a non-empty list of integers >= 0, e.g. [0, 1, 2]")
        return ()
    if len(set(raw)) != len(raw):
        problems.append(f"sweep.seeds: {raw!r} repeats a seed; give each seed once")
    return tuple(raw)


def _block(raw: Any, path: str, problems: list[str]) -> tuple[Axis, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, Mapping):
        problems.append(f"{path}: {raw!r}; give a mapping of axis key -> values, e.g. kl.beta: 0.05,0.1")
        return ()
    axes = [parse_axis(key, value, path, problems) for key, value in raw.items()]
    return tuple(a for a in axes if a is not None)


def _grid(raw: Any, problems: list[str]) -> tuple[tuple[Axis, ...], ...]:
    if not isinstance(raw, list) or not raw:
        problems.append(f"sweep.grid: {raw!r}; give a non-empty list of blocks (mappings of axis -> values); "
                        f"the cells are the union of the blocks' products")
        return ((),)
    return tuple(_block(block, f"sweep.grid[{i}]", problems) for i, block in enumerate(raw))


def _slurm(raw: Any, problems: list[str]) -> tuple[str, dict]:
    if not isinstance(raw, Mapping):
        problems.append(f"sweep.slurm: {raw!r}; give {{profile: NAME, overrides: {{...}}}}")
        return "local", {}
    problems += [f"sweep.slurm.{k}: unknown key; valid: profile, overrides" for k in raw
                 if k not in ("profile", "overrides")]
    profile, overrides = raw.get("profile", "local"), raw.get("overrides") or {}
    if isinstance(profile, str) and profile.endswith((".yaml", ".yml")):
        sv.file_path(problems, "sweep.slurm.profile", profile, "a profile file (.yaml)")
    else:
        sv.job_name(problems, "sweep.slurm.profile", profile, "a profile in slurm/profiles/, or a .yaml path")
    if not isinstance(overrides, Mapping):
        problems.append(f"sweep.slurm.overrides: {overrides!r}; give a mapping of profile keys, e.g. "
                        f"{{time_min: 600}}")
        overrides = {}
    return profile, dict(overrides)
