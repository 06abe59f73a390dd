"""Claims as data: what a sweep is run to test, written once and checked against the sweep's axes at `validate`.

The paper's claims live in `sweeps/claims/paper.yaml` (each with the paper's words, its evidence and its number
for each row the paper reports); a sweep names the ones it tests, and a researcher adds their own, in `sweep.claims`:

    sweep:
      claims:
        - O3a                    # an id of sweeps/claims/paper.yaml (or of a claims file listed here)
        - my-claims.yaml         # every claim of a file beside the sweep file
        - {id: mine, extension: true, statistic: difference, a: {kl.estimator: k1}, b: {kl.estimator: k3}}

A claim compares cells: side `a` against side `b`, each a mapping axis -> value (or a list of values) that selects
cells; `per` lists axes that split it into rows, one test each (an axis the sweep does not vary is dropped: it takes
one value). Side b may be a base model of `sweep.baselines`, `b: {baseline: MODEL}`, with `a: {}` for every trained
cell (orchestrator/claims/rows.py). The statistics (orchestrator/claims/stats.py, orchestrator/claims/run_measures.py):

| statistic | compares | verdict: holds when the interval |
|---|---|---|
| difference | mean score of a - b, per task | lies on `expect`'s side of `boundary` (default 0) |
| relative | (a - b) / b, per task | as difference |
| group_relative | the mean over a task group of each task's (a - b) / b, per group | as difference |
| equivalence | a - b, per task | lies inside [-margin, margin]; contradicted when wholly outside |
| slope | mean score against `x` (log x with `log: true`) over a's cells, per task | as difference |
| group_contrast | group_relative over the first of `groups` minus over the second | as difference |
| collapse_rate | the share of a's seeds whose detector verdict is one of `counts` | as difference (a rate) |
| instability | a run `measure` of a minus b's, paired by seed | as difference |
| run_equivalence | a run `measure` of a minus b's, paired by seed | as equivalence |

Across sweeps: side b may name another sweep, `b: {sweep: onpolicy, model: qwen2.5-7b, kl.placement: loss}`, for an
instability claim (Appendix D.2's off-policy against on-policy): b's cells are that sweep's (its run directories,
<output_root>/onpolicy), the runs are not paired (a - b over seeds, Welch's interval), and the rows read `missing`
until that sweep has run.

A run `measure` (orchestrator/claims/run_measures.py): `drop`, the largest fall of held-out pass@1 from its running
best; `mean_pass`, the mean of held-out pass@1 over the run's evaluations (the level of its training curve);
`peak_kl`, the largest `train/kl_k1` the run logged; or `mean_entropy`, the mean of `train/entropy` over training.
A collapse rate's `counts` are the paper's words for the collapse detector's verdicts (`run_measures.PAPER_TERMS`,
the one place they are mapped): default `complete collapse`.

Evidence. Every claim carries `evidence: {section, figure, quote}`: where the paper says it and a short quote of the
sentence it tests, or is marked `extension: true`: the project's own claim (a researcher's, or the paper's read at
settings it does not report), which takes no paper numbers. `paper` gives the paper's number or words for the rows it
reports: a string (every row; its evidence the claim's), or entries `{when: {axis or task or group: value}, value,
quote}` (optionally `figure`), each with the quote it comes from. A row of a list-form `paper` that no entry matches is
the project's extension: computed, shown apart, never with a paper number. `note` says how the claim reads the paper
where the paper is ambiguous, or where it departs from it. A claim without evidence, or a paper number without its
quote, is a load error, listed with every other.

Pure: parsing and checking only; which cells a claim's rows take is orchestrator/claims/rows.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.claims.run_measures import PAPER_TERMS

SCORE_STATISTICS = ("difference", "relative", "group_relative", "group_contrast", "equivalence", "slope")
RUN_STATISTICS = ("collapse_rate", "instability", "run_equivalence")
EQUIVALENCES = ("equivalence", "run_equivalence")  # verdict: inside [-margin, margin]
GROUPED = ("group_relative", "group_contrast")
STATISTICS = SCORE_STATISTICS + RUN_STATISTICS
METRICS = ("mean@k", "pass@k")  # per problem: the mean of its k samples' scores; 1 if any sample is right
MEASURES = ("drop", "mean_pass", "peak_kl", "mean_entropy")
KEYS = ("id", "words", "where", "evidence", "extension", "note", "statistic", "a", "b", "per", "tasks", "groups",
        "metric", "expect", "boundary", "margin", "x", "log", "measure", "counts", "paper")
EVIDENCE_KEYS = ("section", "figure", "quote")
QUOTE_MAX = 300  # characters: a short quote of the sentence a claim tests, not a paragraph
EVIDENCE_HELP = {"section": "the section (4.1, Observation 1)", "figure": "the figure or table (Fig. 2, Table 1, text)",
                 "quote": "a short quote of the sentence it tests"}


@dataclass(frozen=True)
class Evidence:
    """Where the paper says it: its section, its figure or table (or "text"), and a short quote."""

    section: str
    figure: str
    quote: str

    def __str__(self) -> str:
        return f'{self.section}; {self.figure}: "{self.quote}"'


@dataclass(frozen=True)
class PaperRow:
    """The paper's number or words for the rows whose labels match `when` (empty: every row), and its evidence."""

    when: tuple[tuple[str, Any], ...]
    value: str
    evidence: Evidence


@dataclass(frozen=True)
class Claim:
    """One claim, checked on construction (`parse`): every field has the type and the companions its statistic
    needs. `a`, `b`: axis -> tuple of values; `groups`: name -> tasks; `paper`: the paper's rows (`PaperRow`);
    `evidence`: None only for an extension (or a claim read back from a manifest written before evidence was
    required)."""

    id: str
    statistic: str
    a: dict[str, tuple]
    b: dict[str, tuple] = field(default_factory=dict)
    per: tuple[str, ...] = ()
    tasks: tuple[str, ...] | None = None  # None: every task the compared cells were evaluated on
    groups: tuple[str, ...] = ()
    metric: str = "mean@k"
    expect: str = ">"
    boundary: float = 0.0
    margin: float | None = None
    x: str | None = None
    log: bool = False
    measure: str = "drop"
    words: str = ""
    where: str = ""
    paper: tuple[PaperRow, ...] = ()
    evidence: Evidence | None = None
    extension: bool = False
    note: str = ""
    counts: tuple[str, ...] = ("complete collapse",)
    other: str | None = None  # the sweep side b's cells come from; None: this sweep's

    def paper_row(self, labels: Mapping[str, Any]) -> PaperRow | None:
        """The paper's entry for a row, by its labels (axis values, and `task` or `group`); None if none."""
        for row in self.paper:
            if all(same(labels.get(k), v) for k, v in row.when):
                return row
        return None

    def paper_value(self, labels: Mapping[str, Any]) -> str:
        """The paper's number for a row; "" if none."""
        row = self.paper_row(labels)
        return row.value if row else ""

    def is_extension(self, labels: Mapping[str, Any]) -> bool:
        """Whether a row is the project's, not the paper's: an extension claim's, or one the paper reports nothing
        for (a claim read back from an old manifest, with no paper entries, counts as the paper's)."""
        return self.extension or (bool(self.paper) and self.paper_row(labels) is None)

    def to_dict(self) -> dict:
        """As a claims file would write it (the manifest keeps the sweep's claims this way)."""
        out = {"id": self.id, "statistic": self.statistic, "a": _plain(self.a), "words": self.words,
               "where": self.where, "metric": self.metric, "expect": self.expect, "boundary": self.boundary}
        if self.evidence:
            out["evidence"] = {k: getattr(self.evidence, k) for k in EVIDENCE_KEYS}
        if self.extension:
            out["extension"] = True
        if self.note:
            out["note"] = self.note
        if self.statistic == "collapse_rate":
            out["counts"] = list(self.counts)
        if self.b:
            out["b"] = {**({"sweep": self.other} if self.other else {}), **_plain(self.b)}
        for key in ("per", "groups"):
            if getattr(self, key):
                out[key] = list(getattr(self, key))
        if self.tasks is not None:
            out["tasks"] = list(self.tasks)
        out.update({k: getattr(self, k) for k in ("margin", "x") if getattr(self, k) is not None})
        if self.log:
            out["log"] = True
        if self.statistic in ("instability", "run_equivalence"):
            out["measure"] = self.measure
        if self.paper:
            out["paper"] = [{"when": dict(r.when), "value": r.value, "section": r.evidence.section,
                             "figure": r.evidence.figure, "quote": r.evidence.quote} for r in self.paper]
        return out


def same(a: Any, b: Any) -> bool:
    """Axis values compare as numbers where both are (YAML's 1 and a cell's 1.0), else as text."""
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (a, b))
    return float(a) == float(b) if numbers else str(a) == str(b)


def _plain(side: Mapping[str, tuple]) -> dict:
    return {k: v[0] if len(v) == 1 else list(v) for k, v in side.items()}


# --- parsing ------------------------------------------------------------------------------------------------------

def parse(raw: Any, where: str, groups: Mapping[str, Sequence[str]], problems: list[str],
          require_evidence: bool = True) -> Claim | None:
    """One claim from its YAML mapping; None (with every problem appended, each naming `where`) when it is bad.
    `groups`: the task groups a claim's `groups` may name (the claims file's `groups:`). `require_evidence=False`
    reads a manifest written before claims carried their evidence."""
    if not isinstance(raw, Mapping):
        problems.append(f"{where}: {raw!r} is not a claim; give a mapping with id, statistic, a (and b), as in "
                        f"sweeps/claims/paper.yaml")
        return None
    before = len(problems)
    cid = raw.get("id")
    if not isinstance(cid, str) or not cid.strip():
        problems.append(f"{where}: id {cid!r}; give each claim a short name (O3a, mine-1)")
        cid = "?"
    at = f"{where} ({cid})"
    problems += [f"{at}: unknown key {k!r}; valid: {', '.join(KEYS)}" for k in raw if k not in KEYS]
    stat = raw.get("statistic")
    if stat not in STATISTICS:
        problems.append(f"{at}: statistic {stat!r}; valid: {', '.join(STATISTICS)}")
    other = _other(raw, stat, at, problems)
    # Side a may be every trained cell ({}) when side b is a base model: a sweep of one configuration against it.
    against_base = isinstance(raw.get("b"), Mapping) and "baseline" in raw["b"]
    a = _side(raw.get("a"), f"{at}.a", problems, needed=True, empty=against_base)
    b = _side(raw.get("b"), f"{at}.b", problems, needed=stat not in ("slope", "collapse_rate"))
    if stat in ("slope", "collapse_rate") and raw.get("b") is not None:
        problems.append(f"{at}: a {stat} reads side a only; drop b")
    per = _names(raw.get("per", []), f"{at}.per", problems)
    tasks = None if raw.get("tasks", "each") == "each" else _names(raw.get("tasks"), f"{at}.tasks", problems)
    chosen = _names(raw.get("groups", []), f"{at}.groups", problems)
    _check_groups(stat, chosen, tasks, groups, at, problems)
    metric, expect, measure = raw.get("metric", "mean@k"), raw.get("expect", ">"), raw.get("measure", "drop")
    if metric not in METRICS:
        problems.append(f"{at}: metric {metric!r}; valid: {', '.join(METRICS)}")
    if expect not in (">", "<"):
        problems.append(f"{at}: expect {expect!r}; give \">\" (the statistic exceeds boundary) or \"<\"")
    if measure not in MEASURES:
        problems.append(f"{at}: measure {measure!r}; valid: {', '.join(MEASURES)}")
    boundary = _number(raw.get("boundary", 0.0), f"{at}.boundary", problems)
    margin = raw.get("margin")
    if stat in EQUIVALENCES and (_number(margin, f"{at}.margin", problems) or 0) <= 0:
        problems.append(f"{at}: an equivalence needs margin > 0 (in the metric's units: 0.02 is two points "
                        f"of mean@k); got {margin!r}")
    x = raw.get("x")
    if stat == "slope" and (not isinstance(x, str) or not x):
        problems.append(f"{at}: a slope needs x, the axis it runs along (kl.beta)")
    if stat == "slope" and x in per:
        problems.append(f"{at}: x {x!r} is also in per; a slope runs along it, so leave it out of per")
    counts = _counts(raw.get("counts"), stat, at, problems)
    extension = raw.get("extension", False)
    if not isinstance(extension, bool):
        problems.append(f"{at}: extension {extension!r}; give true (the project's own claim) or leave it out")
    evidence = _evidence(raw.get("evidence"), f"{at}.evidence", problems)
    if evidence is None and "evidence" not in raw and not extension and require_evidence:
        problems.append(f"{at}: no evidence; give evidence: {{section, figure, quote}} (where the paper says it and "
                        f"a short quote of the sentence it tests), or extension: true for the project's own claim")
    paper = () if extension is True else _paper(raw.get("paper"), evidence, f"{at}.paper", problems)
    if extension is True and raw.get("paper") is not None:
        problems.append(f"{at}: an extension takes no paper numbers; drop paper (or extension)")
    if not extension and require_evidence and raw.get("paper") is None:
        problems.append(f"{at}: no paper; give what the paper reports for its rows (a string, or entries "
                        f"{{when, value, quote}}), or extension: true")
    words, place, note = raw.get("words", ""), raw.get("where", ""), raw.get("note", "")
    if not isinstance(note, str):
        problems.append(f"{at}: note {note!r}; give a sentence")
    if len(problems) > before:
        return None
    if not place and evidence:
        place = f"{evidence.section}, {evidence.figure}"
    return Claim(cid, stat, a, b, tuple(per), None if tasks is None else tuple(tasks), tuple(chosen), metric,
                 expect, float(boundary), None if margin is None else float(margin), x, bool(raw.get("log", False)),
                 measure, str(words), str(place), paper, evidence, bool(extension), str(note), counts, other)


def _other(raw: Mapping, stat: Any, at: str, problems: list[str]) -> str | None:
    """The sweep side b names (`sweep:`), or None; only b may, and only for an instability claim."""
    if isinstance(raw.get("a"), Mapping) and "sweep" in raw["a"]:
        problems.append(f"{at}: a names a sweep; side a is the sweep's own cells: name the other sweep in b")
    other = raw["b"].get("sweep") if isinstance(raw.get("b"), Mapping) else None
    if other is None:
        return None
    if not isinstance(other, str) or not other.strip():
        problems.append(f"{at}.b.sweep: {other!r}; give the other sweep's name (its sweep.name: onpolicy)")
    if stat != "instability":
        problems.append(f"{at}: b names sweep {other!r}, but only an instability claim compares two sweeps' runs "
                        f"(unpaired); a {stat} pairs its cells within one sweep")
    return other if isinstance(other, str) else None


def _evidence(raw: Any, where: str, problems: list[str], inherit: Evidence | None = None) -> Evidence | None:
    """{section, figure, quote}, each a non-empty string; a paper entry may leave section and figure to its claim's
    evidence (`inherit`), never its quote."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        problems.append(f"{where}: {raw!r}; give {{section, figure, quote}}")
        return None
    found = {}
    for key in EVIDENCE_KEYS:
        value = raw.get(key)
        if value is None and key != "quote" and inherit is not None:
            value = getattr(inherit, key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            problems.append(f"{where}: {key} {value!r} is a number; quote it (\"{value}\")")
            continue
        if not isinstance(value, str) or not value.strip():
            problems.append(f"{where}: no {key}; give {EVIDENCE_HELP[key]}")
            continue
        found[key] = " ".join(value.split())
    if len(found.get("quote", "")) > QUOTE_MAX:
        problems.append(f"{where}: the quote has {len(found['quote'])} characters; quote the sentence it tests, "
                        f"at most {QUOTE_MAX}")
    return Evidence(**found) if len(found) == len(EVIDENCE_KEYS) else None


def _counts(raw: Any, stat: Any, at: str, problems: list[str]) -> tuple[str, ...]:
    if raw is None:
        return ("complete collapse",)
    if stat != "collapse_rate":
        problems.append(f"{at}: counts belongs to a collapse_rate; drop it")
        return ()
    names = _names(raw, f"{at}.counts", problems)
    unknown = [n for n in names if n not in PAPER_TERMS]
    if unknown or not names:
        problems.append(f"{at}: counts {', '.join(unknown) or '(none)'}; valid: {', '.join(PAPER_TERMS)}")
    return tuple(names)


def _side(raw: Any, where: str, problems: list[str], needed: bool, empty: bool = False) -> dict[str, tuple]:
    if raw is None:
        if needed:
            problems.append(f"{where}: missing; give the cells as axis: value (kl.estimator: k1)")
        return {}
    if not isinstance(raw, Mapping) or not (raw or empty):
        problems.append(f"{where}: {raw!r}; give a non-empty mapping of axis -> value or list of values")
        return {}
    side = {}
    for key, value in raw.items():
        if key == "sweep":  # not an axis: the sweep the side's cells come from (`_other`)
            continue
        values = tuple(value) if isinstance(value, list) else (value,)
        if not isinstance(key, str) or key == "seed" or not values or any(isinstance(v, (dict, list)) for v in values):
            problems.append(f"{where}.{key}: {value!r}; give an axis of the sweep (not seed: claims pair seeds) "
                            f"and a value or a list of values")
            continue
        side[key] = values
    return side


def _names(raw: Any, where: str, problems: list[str]) -> list[str]:
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list) or not all(isinstance(n, str) and n for n in raw):
        problems.append(f"{where}: {raw!r}; give a list of names")
        return []
    return list(dict.fromkeys(raw))


def _check_groups(stat, chosen, tasks, groups, at, problems) -> None:
    if stat == "group_contrast" and len(chosen) != 2:
        problems.append(f"{at}: a group_contrast needs two groups (the first minus the second); got "
                        f"{', '.join(chosen) or 'none'}")
    if stat in GROUPED:
        if not chosen:
            problems.append(f"{at}: a {stat} needs groups (names of the claims file's task groups: "
                            f"{', '.join(groups) or 'none defined'})")
        unknown = [g for g in chosen if g not in groups]
        if unknown:
            problems.append(f"{at}: unknown task group(s) {', '.join(unknown)}; defined: "
                            f"{', '.join(groups) or 'none (add groups: to the claims file)'}")
        if tasks is not None:
            problems.append(f"{at}: a {stat} takes its tasks from its groups; drop tasks")
    elif chosen:
        problems.append(f"{at}: groups belong to a group_relative or group_contrast claim; a {stat} takes tasks")
    if stat in RUN_STATISTICS and tasks is not None:
        problems.append(f"{at}: a {stat} reads the runs, not the evaluation tasks; drop tasks")


def _number(raw: Any, where: str, problems: list[str]) -> float | None:
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, (int, float)):
        problems.append(f"{where}: {raw!r}; give a number")
        return None
    return float(raw)


def _paper(raw: Any, evidence: Evidence | None, where: str, problems: list[str]) -> tuple[PaperRow, ...]:
    if raw is None:
        return ()
    if isinstance(raw, (str, int, float)):  # every row, on the claim's evidence
        if evidence is None:
            problems.append(f"{where}: {raw!r} has no evidence beside it; give the claim evidence")
            return ()
        return (PaperRow((), str(raw), evidence),)
    entries = raw if isinstance(raw, list) else [raw]
    out = []
    for i, entry in enumerate(entries):
        when = entry.get("when", {}) if isinstance(entry, Mapping) else None
        if not isinstance(when, Mapping) or "value" not in entry:
            problems.append(f"{where}[{i}]: {entry!r}; give {{when: {{axis or task or group: value}}, value: the "
                            f"paper's number, quote: the sentence it comes from}}")
            continue
        unknown = [k for k in entry if k not in ("when", "value", *EVIDENCE_KEYS)]
        if unknown:
            problems.append(f"{where}[{i}]: unknown key(s) {', '.join(map(str, unknown))}; valid: when, value, "
                            f"{', '.join(EVIDENCE_KEYS)}")
        if "quote" not in entry:
            problems.append(f"{where}[{i}]: the paper's {entry['value']!r} has no evidence beside it; give quote "
                            f"(and figure, where it is not the claim's)")
            continue
        found = _evidence(entry, f"{where}[{i}]", problems, inherit=evidence)
        if found:
            out.append(PaperRow(tuple(when.items()), str(entry["value"]), found))
    return tuple(out)
