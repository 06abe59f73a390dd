"""A sweep axis over RL libraries' settings (issue 57): `library: ["verl:kl_loss_type=low_var_kl", "TRL:beta>0"]` in
a grid block or in `sweep.axes`, each value a query of the library map (trainer/analysis/library_map.yaml) as
`orchestrate bias --library` takes it. A value expands to the project's kl.* keys (estimator, placement, loss_form,
credit, clamp: every one, so the sweep's own defaults do not leak into the library's configuration) and the
algorithm keys its row pins; the coefficient stays the sweep's kl.beta, as in the library. So a user's library
default runs beside the paper's configurations, under the same run_key as the configuration it equals.

A value must name one configuration: a query matching rows of different configurations is refused with their
labels (add an option to choose), a row with no equal here (`equals: null`) with its gap, an unknown library,
option or value with the valid ones (library_map.py `find`). Rows of code a library has since changed (`until`)
yield to the current one when both match.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from record.errors import UserError
from trainer.analysis import library_map

KEY = "library"
_KL = ("estimator", "placement", "loss_form", "credit", "clamp")


def setting(query: str) -> library_map.Setting:
    """The one setting of the map `query` names that has an equal here; UserError (with the choices) otherwise."""
    rows = library_map.load().find(query)
    usable = [s for s in rows if s.equals is not None]
    if not usable:
        gaps = "; ".join(f"{s.label()}: {s.gap}" for s in rows)
        raise UserError(f"library {query!r} has no equal configuration here ({gaps})")
    current = [s for s in usable if not s.until] or usable
    distinct = {tuple(edits_of(s)): s for s in current}
    if len(distinct) > 1:
        raise UserError(f"library {query!r} names {len(distinct)} configurations: "
                        + "; ".join(f"{s.label()} (= {' '.join(s.overrides())})" for s in distinct.values())
                        + "; add an option=value to choose one")
    return next(iter(distinct.values()))


def edits_of(s: library_map.Setting) -> list[tuple[str, Any]]:
    """The config edits a setting stands for: every kl.* key of its configuration and the algorithm keys it pins;
    beta 0 where it adds no KL (KLConfig spells no KL as placement none with beta 0)."""
    kl = s.kl
    edits: list[tuple[str, Any]] = [(f"kl.{name}", getattr(kl, name)) for name in _KL]
    if kl.placement == "none":
        edits.append(("kl.beta", 0.0))
    return edits + [(f"algorithm.{k}", v) for k, v in s.algorithm.items()]


def values(raw: Any, where: str, problems: list[str]) -> tuple[str, ...] | None:
    """The axis's values (a query, or a YAML list of queries), each checked against the map: None and a problem
    for each bad one."""
    queries = raw if isinstance(raw, list) else [raw]
    if not queries or not all(isinstance(q, str) and q.strip() for q in queries):
        problems.append(f"{where}: {raw!r}; give a library setting or a list of them, e.g. "
                        f"[\"verl:kl_loss_type=low_var_kl\", \"TRL:use_bias_correction_kl=true\"] "
                        f"(orchestrate bias --library shows what each is)")
        return None
    bad = []
    for q in queries:
        try:
            setting(q)
        except UserError as err:
            bad.append(f"{where}: " + str(err).replace(" in --library ", " in ").replace("--library ", ""))
    problems += bad
    return None if bad else tuple(q.strip() for q in queries)


def expand(edits: Iterable[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """A cell's edits with each `library` value replaced, in place, by the keys it stands for."""
    out: list[tuple[str, Any]] = []
    for key, value in edits:
        out += edits_of(setting(value)) if key == KEY else [(key, value)]
    return out


def clashes(keys: Iterable[str], where: str) -> list[str]:
    """A problem where one block's axes set a key a library value sets too: which of the two is meant is unclear."""
    keys = list(keys)
    both = [k for k in keys if k in {f"kl.{name}" for name in _KL}] if KEY in keys else []
    return [f"{where}: {', '.join(both)} and {KEY} in one block: the library value sets {', '.join(both)}; drop "
            f"one of the two (a library setting's coefficient is kl.beta)"] if both else []


def lines(queries: Iterable[str]) -> list[str]:
    """What validate and the dry run print: each library value of the sweep and the keys it expands to."""
    out = []
    for q in dict.fromkeys(queries):
        s = setting(q)
        keys = " ".join(f"{k}={'null' if v is None else v}" for k, v in edits_of(s))
        out.append(f"library {q} = {keys}, beta the sweep's kl.beta ({s.label()}: {s.match}; {s.source})")
    return out
