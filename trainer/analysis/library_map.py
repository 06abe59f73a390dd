"""What each RL library's KL settings compute, as this project's configuration: library_map.yaml beside this file,
loaded and checked (every row names a library of the file, has a source, and its `equals` builds a real KLConfig and
AlgorithmConfig), then looked up two ways: by the library's own options (`orchestrate bias --library
verl:kl_loss_type=low_var_kl`) and by a bias-table objective (the table's "library settings" column).

The file lives here rather than in sweeps/ because the bias table (bias_table.py, this folder) reads it and the
login node's commands reach it through the trainer layer; sweeps/ holds sweep files and their Hydra config groups.
No torch here: `orchestrate bias` loads the map before it builds the table.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from record.errors import ConfigError, UserError, raise_if
from trainer.objective.settings import AlgorithmConfig, KLConfig

PATH = Path(__file__).with_name("library_map.yaml")
MATCHES = {
    "exact": "the same per-sample gradient wherever the library's clamps do not bite",
    "expected": "the same expected gradient on-policy, another per-sample estimate",
    "nearest": "the closest configuration here; its gap says what differs",
}
REQUIRED = ("library", "options", "coefficient", "equals", "match", "source")
OPTIONAL = ("default", "gap", "until", "verified")
# What a configuration is compared on, beta left out (the library's coefficient is kl.beta) and the clamp too: a
# row whose clamp differs still names the setting, with its clamp shown (`Setting.label`).
_COMPARED = ("estimator", "placement", "loss_form", "credit")


def _norm(text: str) -> str:
    return re.sub(r"[^a-z0-9+]", "", str(text).lower())


def short(option: str) -> str:
    """An option's short name: without leading dashes and without a lower-case dotted path before it
    (`actor_rollout_ref.actor.kl_loss_type` -> kl_loss_type), a class kept (`GRPOConfig.beta` stays)."""
    parts = option.lstrip("-").split(".")
    classes = [i for i, part in enumerate(parts) if part[:1].isupper()]
    return ".".join(parts[classes[-1] if classes else len(parts) - 1:])


def _names(option: str) -> set[str]:
    """What a query may call an option: its full name, its short one, its last dotted part."""
    return {_norm(option), _norm(short(option)), _norm(option.rsplit(".", 1)[-1])}


def _value(value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


@dataclass(frozen=True)
class Setting:
    """One row of the map: a library's option values and the project configuration they equal (None: none)."""

    library: str
    options: tuple[tuple[str, str], ...]
    coefficient: str
    equals: tuple[tuple[str, object], ...] | None
    match: str
    source: str
    default: str = ""
    gap: str = ""
    until: str = ""
    verified: str = ""  # where the row was checked against the library's code (repository@commit file:lines)

    @property
    def kl(self) -> KLConfig | None:
        """The KL configuration, beta 1 (0 for placement none): the library's coefficient plays beta."""
        if self.equals is None:
            return None
        fields = {k[3:]: v for k, v in self.equals if k.startswith("kl.")}
        beta = 0.0 if fields.get("placement", "none") == "none" else 1.0
        return KLConfig(beta=beta, **fields)

    @property
    def algorithm(self) -> dict:
        """The algorithm keys the row pins (advantage, ...), the rest left at the sweep's values."""
        return {k[len("algorithm."):]: v for k, v in self.equals or () if k.startswith("algorithm.")}

    def overrides(self) -> list[str]:
        """The row as sweep overrides (`kl.estimator=k3 kl.placement=loss`); beta is the user's coefficient."""
        return [f"{k}={v}" for k, v in self.equals or ()]

    def label(self, clamp: float | None = "any") -> str:
        """`verl use_kl_loss=true kl_loss_type=low_var_kl`, with "~" before a non-exact match, the row's clamp
        where it differs from `clamp`, and the change it predates."""
        opts = " ".join(f"{short(k)}{v if v.startswith(('>', '<')) else '=' + v}" for k, v in self.options)
        text = f"{'' if self.match == 'exact' else '~'}{self.library} {opts}"
        kl = self.kl
        if kl is not None and clamp != "any" and kl.clamp != clamp:
            text += f" (clamp {kl.clamp:g})" if kl.clamp is not None else " (no clamp)"
        return text + (f" (before {self.until})" if self.until else "")

    def same_objective(self, kl: KLConfig, algo: AlgorithmConfig | None = None) -> bool:
        """Whether this row computes `kl` (beta aside, clamp aside) with `algo` where the row pins algorithm keys."""
        mine = self.kl
        if mine is None:
            return False
        if mine.placement == "none" or kl.placement == "none":
            return mine.placement == kl.placement
        if any(getattr(mine, f) != getattr(kl, f) for f in _COMPARED):
            return False
        return algo is None or all(getattr(algo, k) == v for k, v in self.algorithm.items())


@dataclass(frozen=True)
class LibraryMap:
    libraries: dict[str, dict]
    settings: tuple[Setting, ...]

    def for_objective(self, kl: KLConfig, algo: AlgorithmConfig | None = None) -> list[Setting]:
        """The rows (exact and expected matches) that compute this objective's gradient."""
        return [s for s in self.settings if s.match != "nearest" and s.same_objective(kl, algo)]

    def labels(self, kl: KLConfig, algo: AlgorithmConfig | None = None) -> str:
        """The bias table's "library settings" cell: every matching row's label, "; "-separated, or "-"."""
        return "; ".join(s.label(kl.clamp) for s in self.for_objective(kl, algo)) or "-"

    def find(self, query: str) -> list[Setting]:
        """The rows a `library[:option=value[,option=value]]` query selects; a UserError listing the valid
        libraries, options or values otherwise. An option is its full name or its short one (`short`)."""
        name, _, rest = query.partition(":")
        by_name = {_norm(lib): lib for lib in self.libraries}
        lib = by_name.get(_norm(name))
        if lib is None:
            raise UserError(f"unknown library {name!r} in --library {query!r}; valid: {', '.join(self.libraries)}")
        rows = [s for s in self.settings if s.library == lib]
        for pair in filter(None, (p.strip() for p in rest.split(","))):
            option, eq, value = pair.partition("=")
            if not eq:
                raise UserError(f"--library {query!r}: {pair!r} is not option=value (e.g. {_example(rows)})")
            known = sorted({k for s in rows for k, _ in s.options}, key=short)
            keys = [k for k in known if _norm(option) in _names(k)]
            if not keys:
                raise UserError(f"{lib} has no option {option!r} in the map; its options: "
                                f"{', '.join(dict.fromkeys(short(k) for k in known))}")
            kept = [s for s in rows if any(k in dict(s.options) and _same(dict(s.options)[k], value) for k in keys)]
            if not kept:
                values = sorted({dict(s.options)[k] for s in rows for k in keys if k in dict(s.options)})
                raise UserError(f"no {lib} setting in the map has {short(keys[0])}={value}; its values there: "
                                f"{', '.join(values)}")
            rows = kept
        return rows


def _same(mapped: str, given: str) -> bool:
    if mapped.startswith(">"):
        try:
            return float(given) > float(mapped[1:])
        except ValueError:
            return False
    return _norm(mapped) == _norm(given)


def _example(rows: list[Setting]) -> str:
    k, v = rows[0].options[0]
    return f"{short(k)}={v}"


def problems(raw) -> list[str]:
    """Every problem of the map's text at once: each row's fields, its library, and its configuration."""
    p: list[str] = []
    if not isinstance(raw, dict) or not isinstance(raw.get("libraries"), dict) or not isinstance(
            raw.get("settings"), list):
        return ["the map needs `libraries:` (a mapping) and `settings:` (a list)"]
    for lib, info in raw["libraries"].items():
        if not isinstance(info, dict) or not info.get("repo") or not info.get("version"):
            p.append(f"libraries.{lib}: give its repo and the version read")
    for i, row in enumerate(raw["settings"]):
        where = f"settings[{i}] ({row.get('library', '?') if isinstance(row, dict) else '?'})"
        if not isinstance(row, dict):
            p.append(f"{where}: a mapping")
            continue
        p += [f"{where}: {k} missing" for k in REQUIRED if k not in row]
        p += [f"{where}: unknown field {k!r}; valid: {', '.join(REQUIRED + OPTIONAL)}" for k in row
              if k not in REQUIRED + OPTIONAL]
        if row.get("library") not in raw["libraries"]:
            p.append(f"{where}: library {row.get('library')!r} is not under libraries: ({', '.join(raw['libraries'])})")
        if not str(row.get("source") or "").strip():
            p.append(f"{where}: source is empty; name the file and function or the pull request")
        if not isinstance(row.get("options"), dict) or not row.get("options"):
            p.append(f"{where}: options: the library's option names and values, at least one")
        if row.get("match") not in MATCHES:
            p.append(f"{where}: match {row.get('match')!r}; valid: {', '.join(MATCHES)}")
        equals = row.get("equals")
        if equals is None:
            if row.get("match") != "nearest" or not row.get("gap"):
                p.append(f"{where}: equals null (no equal here) needs match nearest and a gap saying what is missing")
            continue
        if not isinstance(equals, dict) or not all(str(k).startswith(("kl.", "algorithm.")) for k in equals):
            p.append(f"{where}: equals: kl.* and algorithm.* keys of the project's run config")
            continue
        if any(k in equals for k in ("kl.beta", "kl.beta_reward", "kl.beta_loss")):
            p.append(f"{where}: equals: leave beta out (the library's coefficient is kl.beta)")
            continue
        if row.get("match") == "nearest" and not row.get("gap"):
            p.append(f"{where}: match nearest needs a gap saying what differs")
        try:
            setting = _setting(row)
            setting.kl  # noqa: B018 (built for its checks)
            AlgorithmConfig(**setting.algorithm)
        except ConfigError as err:
            p += [f"{where}: {q}" for q in err.problems]
        except TypeError as err:
            p.append(f"{where}: {err}")
    return p


def _setting(row: dict) -> Setting:
    equals = row.get("equals")
    return Setting(
        library=row["library"], options=tuple((str(k), _value(v)) for k, v in row["options"].items()),
        coefficient=str(row["coefficient"]),
        equals=None if equals is None else tuple((str(k), v) for k, v in equals.items()),
        match=row["match"], source=str(row["source"]).strip(),
        **{k: str(row[k]).strip() for k in OPTIONAL if row.get(k) is not None})


def parse(text: str, where: str = "library map") -> LibraryMap:
    raw = yaml.safe_load(text)
    raise_if(problems(raw), where)
    return LibraryMap(dict(raw["libraries"]), tuple(_setting(r) for r in raw["settings"]))


@functools.lru_cache(maxsize=1)
def load() -> LibraryMap:
    """The shipped map (library_map.yaml), checked: a ConfigError listing every problem otherwise."""
    return parse(PATH.read_text(), str(PATH.name))
