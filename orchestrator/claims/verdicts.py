"""Each claim's rows as the report states them: the statistic, its interval, the seeds and problems behind it, and
a verdict beside the paper's number. Pure: the cells, their per-problem scores and histories come in as arguments
(orchestrator/report/claim_inputs.py reads them from the run directories and hands them over).

Verdicts: `holds` (the interval lies on the claim's side of its boundary; for an equivalence, inside the margin),
`contradicted` (wholly on the other side; for an equivalence, wholly outside the margin), `inconclusive` (it spans
the boundary), `missing` (a compared cell has not finished, or the other sweep a claim compares against has not run:
nothing is computed from part of the cells), and `not computed` (the claim does not fit the cells: the reason is
given).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from orchestrator.claims import intervals, run_measures
from orchestrator.claims import rows as claim_rows
from orchestrator.claims import stats as claim_stats
from orchestrator.claims.parse import EQUIVALENCES, SCORE_STATISTICS, Claim
from record.display import format_value

# run_key, task -> ({doc_id: [sample scores]}, the data's sha256, the evaluation's settings)
ScoresOf = Callable[[str, str], tuple[dict[str, list[float]], str, dict]]


@dataclass(frozen=True)
class Cell:
    """What the claims read of a cell: its axes (seed included), whether it trained to its end and was evaluated,
    the tasks it was evaluated on, its collapse verdict and its curves."""

    run_key: str
    name: str
    axes: Mapping
    trained: bool
    evaluated: bool
    tasks: tuple[str, ...] = ()
    verdict: str | None = None
    history: Mapping[str, Sequence[tuple[int, float]]] = field(default_factory=dict)


@dataclass(frozen=True)
class Result:
    claim: Claim
    row: str  # what the row reports on: its axis values and its task or group
    labels: dict
    statistic: str  # in words, with its unit
    verdict: str
    estimate: float | None = None
    low: float | None = None
    high: float | None = None
    unit: str = ""  # "", "%" (a relative statistic, shown x 100) or "rate"
    n_seeds: int = 0
    n_problems: dict = field(default_factory=dict)
    method: str = ""
    note: str = ""

    @property
    def paper(self) -> str:
        """The paper's number for this row; "" for the project's extension, which never shows one."""
        return "" if self.extension else self.claim.paper_value(self.labels)

    @property
    def extension(self) -> bool:
        """A row the paper does not report (orchestrator/claims/parse.py, "Evidence")."""
        return self.claim.is_extension(self.labels)

    @property
    def evidence(self) -> str:
        """The row's evidence: its paper entry's, else its claim's; "" for an extension without any."""
        row = None if self.claim.extension else self.claim.paper_row(self.labels)
        found = row.evidence if row else self.claim.evidence
        return str(found) if found else ""


def evaluate(claims: Sequence[Claim], cells: Sequence[Cell], groups: Mapping[str, Sequence[str]],
             scores_of: ScoresOf, level: float = 0.95, method: str = intervals.DEFAULT_METHOD,
             others: Mapping[str, Sequence[Cell]] | None = None) -> list[Result]:
    """Every claim's rows, in order. `others`: the cells of each other sweep a claim names (`claim.other`), by
    sweep name; a sweep absent from it has not run."""
    others = others or {}
    by_key = {c.run_key: c for c in (*cells, *(c for more in others.values() for c in more))}
    out: list[Result] = []
    for claim in claims:
        problems: list[str] = []
        if claim.other is not None and claim.other not in others:
            out.append(Result(claim, "", {}, claim.statistic, "missing",
                              note=f"sweep {claim.other}, which side b reads, has not run: no ledger at "
                                   f"<output_root>/{claim.other}"))
            continue
        other = None if claim.other is None else [(c.run_key, c.axes) for c in others[claim.other]]
        found = claim_rows.rows(claim, [(c.run_key, c.axes) for c in cells], problems, other)
        if problems or not found:
            out.append(Result(claim, "", {}, claim.statistic, "not computed",
                              note="; ".join(problems) or "no cell of the sweep matches side a"))
            continue
        for row in found:
            out += _row(claim, row, by_key, groups, scores_of, level, method)
    return out


def _row(claim, row, by_key, groups, scores_of, level, method) -> list[Result]:
    labels = dict(row.labels)
    score = claim.statistic in SCORE_STATISTICS
    lacking = [by_key[k] for k in row.keys() if not (by_key[k].evaluated if score else by_key[k].trained)]
    if lacking:  # a collapsed run that was never evaluated will not be: say so rather than "yet"
        waiting = sorted(c.name for c in lacking if c.verdict != "collapsed")
        collapsed = sorted(c.name for c in lacking if c.verdict == "collapsed")
        what = "evaluated" if score else "trained"
        note = "; ".join(([f"not {what} yet: {', '.join(waiting)}"] if waiting else [])
                         + ([f"collapsed, never {what}: {', '.join(collapsed)}"] if collapsed else []))
        return [Result(claim, row.label, labels, claim.statistic, "missing", note=note)]
    if claim.statistic == "collapse_rate":
        return [_collapse_rate(claim, row, labels, by_key, level)]
    if claim.statistic in ("instability", "run_equivalence"):
        return [_instability(claim, row, labels, by_key, level)]
    problems: list[str] = []
    tasks = claim_rows.row_tasks(claim, row, {k: by_key[k].tasks for k in row.keys()}, groups, problems)
    if problems:
        return [Result(claim, row.label, labels, claim.statistic, "not computed", note="; ".join(problems))]
    results = []
    for name, members in tasks.items():
        kind = "group" if claim.statistic in ("group_relative", "group_contrast") else "task"
        where = {**labels, kind: name}
        shown = ", ".join(x for x in (row.label, f"{kind} {name}") if x)
        try:
            outcomes, k = _outcomes(claim, row, members, scores_of)
        except ValueError as error:
            results.append(Result(claim, shown, where, claim.statistic, "not computed", note=str(error)))
            continue
        stat, words, unit = _statistic(claim, row, members, k, groups)
        iv = intervals.interval(outcomes, stat, level=level, method=method)
        results.append(Result(claim, shown, where, words, verdict(claim, iv.low, iv.high), iv.estimate, iv.low,
                              iv.high, unit, iv.n_seeds, iv.n_problems, intervals.METHODS[method],
                              "ONE seed: over problems only" if iv.problems_only else ""))
    return results


def _outcomes(claim: Claim, row: claim_rows.Row, tasks: Sequence[str], scores_of: ScoresOf):
    """task -> [config, seed, problem] per-problem scores (a's configurations, then b's), problems paired by id;
    and the k behind mean@k. ValueError where the cells were evaluated differently or on other problems."""
    out, settings_seen = {}, {}
    for task in tasks:
        per_config = []
        ids = None
        for config in (*row.a, *row.b):
            seeds = []
            for seed in sorted(config.seeds):
                scores, sha, settings = scores_of(config.seeds[seed], task)
                settings_seen[(task, config.name, seed)] = (sha, _comparable(settings))
                ids = ids or sorted(scores, key=_doc_order)
                if sorted(scores, key=_doc_order) != ids:
                    raise ValueError(f"{task}: {config.name} seed {seed} was evaluated on other problems "
                                     f"({len(scores)} against {len(ids)})")
                seeds.append([_per_problem(claim.metric, scores[i]) for i in ids])
            per_config.append(seeds)
        out[task] = np.asarray(per_config, dtype=float)
    distinct = {v for v in settings_seen.values()}
    if len(distinct) > 1:
        raise ValueError("the compared cells were evaluated under different settings or data: "
                         + "; ".join(sorted({f"{t} {c}: k={s[1][0]} {s[0][:8]}" for (t, c, _), s in
                                             settings_seen.items()})))
    return out, next(iter(distinct))[1][0]


def _comparable(settings: Mapping) -> tuple:
    return (settings.get("k"), settings.get("temperature"), settings.get("top_p"), settings.get("max_tokens"),
            settings.get("chat_template"), tuple(settings.get("seeds") or ()), settings.get("limit"))


def _doc_order(doc: str):
    return (0, int(doc)) if doc.isdigit() else (1, doc)


def _per_problem(metric: str, scores: Sequence[float]) -> float:
    """mean@k: the problem's mean sample score; pass@k: 1 if any sample is right."""
    return float(np.mean(scores)) if metric == "mean@k" else float(max(scores) >= 1.0)


def _statistic(claim: Claim, row: claim_rows.Row, tasks: Sequence[str], k: int, groups: Mapping):
    metric = claim.metric.replace("k", str(k))
    a, b = row.a[0].name, row.b[0].name if row.b else ""
    if claim.statistic in ("difference", "equivalence"):
        return claim_stats.difference(tasks[0], 0, 1), f"{metric}: {a} - {b}", ""
    if claim.statistic == "relative":
        return claim_stats.relative_improvement(tasks[0], 0, 1), f"{metric}: ({a} - {b}) / {b}", "%"
    if claim.statistic == "group_relative":
        return (claim_stats.group_relative_improvement(tasks, 0, 1),
                f"{metric}: mean over {', '.join(tasks)} of ({a} - {b}) / {b}", "%")
    if claim.statistic == "group_contrast":
        first, second = ([t for t in groups.get(g, ()) if t in tasks] for g in claim.groups)
        return (claim_stats.group_contrast(first, second, 0, 1),
                f"{metric}: mean over {', '.join(first)} of ({a} - {b}) / {b}, minus the same over "
                f"{', '.join(second)}", "%")
    xs = [float(dict(c.axes)[claim.x]) for c in row.a]
    shown = [math.log(x) for x in xs] if claim.log else xs
    along = f"log {claim.x}" if claim.log else claim.x
    return (claim_stats.slope(tasks, range(len(row.a)), shown),
            f"{metric}: slope against {along} ({claim.x} {', '.join(map(format_value, xs))})", "")


def verdict(claim: Claim, low: float, high: float) -> str:
    """The row's verdict from its interval [low, high]: holds, contradicted or inconclusive (module docstring); an
    end that is not finite (nan, or a ratio over a mean of 0) is inconclusive."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return "inconclusive"
    if claim.statistic in EQUIVALENCES:
        m = claim.margin
        if -m <= low and high <= m:
            return "holds"
        return "contradicted" if low > m or high < -m else "inconclusive"
    above, below = low > claim.boundary, high < claim.boundary
    if above or below:
        return "holds" if above == (claim.expect == ">") else "contradicted"
    return "inconclusive"


def _collapse_rate(claim, row, labels, by_key, level) -> Result:
    (config,) = row.a
    verdicts = [by_key[k].verdict for k in config.seeds.values()]
    counted = run_measures.counted(claim.counts)
    hits = sum(v in counted for v in verdicts)
    estimate, low, high = run_measures.rate(hits, len(verdicts), level)
    terms = " or ".join(claim.counts)
    detector = ", ".join(sorted(counted))
    return Result(claim, row.label, labels, f"rate of {terms} ({detector}) of {config.name}",
                  verdict(claim, low, high), estimate, low, high, "rate", len(verdicts), {},
                  "Clopper-Pearson (exact binomial) over seeds",
                  f"{hits} of {len(verdicts)} seeds {' or '.join(sorted(counted))}")


def _instability(claim, row, labels, by_key, level) -> Result:
    key = run_measures.MEASURE_KEYS[claim.measure]
    if not row.paired:
        return _across(claim, row, labels, by_key, level, key)
    (a,), (b,) = row.a, row.b
    seeds = sorted(a.seeds)
    pairs = [(run_measures.measure(claim.measure, by_key[a.seeds[s]].history.get(key, ())),
              run_measures.measure(claim.measure, by_key[b.seeds[s]].history.get(key, ()))) for s in seeds]
    words = f"{claim.measure} ({key}): {a.name} - {b.name}"
    if any(x is None for pair in pairs for x in pair):
        return Result(claim, row.label, labels, words, "not computed",
                      note=f"no {key} history for some of the compared cells ({run_measures.MEASURE_SOURCES[key]})")
    estimate, low, high = run_measures.paired_t([p[0] for p in pairs], [p[1] for p in pairs], level)
    note = "ONE seed: no interval" if len(seeds) < 2 else ""
    return Result(claim, row.label, labels, words, verdict(claim, low, high), estimate, low, high, "",
                  len(seeds), {}, "t interval over seeds (paired)", note)


def _across(claim, row, labels, by_key, level, key) -> Result:
    """An instability claim whose side b is another sweep's: a's seeds against b's, unpaired (Welch)."""
    (a,), (b,) = row.a, row.b
    values = [[run_measures.measure(claim.measure, by_key[k].history.get(key, ())) for k in c.seeds.values()]
              for c in (a, b)]
    words = f"{claim.measure} ({key}): {a.name} - {b.name} of sweep {claim.other}"
    if any(x is None for side in values for x in side):
        return Result(claim, row.label, labels, words, "not computed",
                      note=f"no {key} history for some of the compared cells ({run_measures.MEASURE_SOURCES[key]})")
    estimate, low, high = run_measures.welch(values[0], values[1], level)
    note = f"{len(a.seeds)} seeds against {len(b.seeds)} of sweep {claim.other}" + (
        "; ONE seed on a side: no interval" if min(len(a.seeds), len(b.seeds)) < 2 else "")
    return Result(claim, row.label, labels, words, verdict(claim, low, high), estimate, low, high, "",
                  min(len(a.seeds), len(b.seeds)), {}, "Welch t interval over seeds (unpaired: two sweeps)", note)
