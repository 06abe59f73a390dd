"""The Claims table: the report's first section (orchestrator/claims/verdicts.py's results as blocks for the
report's page, orchestrator/report/page.py), and the same rows as CSV and JSON for MLflow and for a reader's own
analysis. Pure."""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Sequence

from orchestrator.claims import intervals
from orchestrator.claims.verdicts import Result

FILES = ("claims.csv", "claims.json")
TITLE = "Claims"
HEAD = ("claim", "paper's words", "row", "statistic", "paper", "this sweep [interval]", "verdict", "seeds",
        "problems", "evidence")
EVIDENCE = {"collapse_rate": "tested on the collapse detector's verdicts",
            "instability": "tested on held-out pass@1 over training",
            "run_equivalence": "tested on held-out pass@1 over training"}  # else: on the final mean@k
EXTENSION_TITLE = "The project's extension"
EXTENSION_NOTE = ("Rows the paper does not report (another model, beta or setting than its figures and text), or "
                  "claims the project makes itself: computed the same way, never with a paper number.")


def shown(r: Result) -> str:
    """The estimate and its interval in the statistic's unit: a relative one in percent, a rate as a share."""
    if r.estimate is None:
        return "-"
    scale, suffix = (100.0, "%") if r.unit == "%" else (1.0, "")

    def one(v: float | None) -> str:
        return "-" if v is None or not math.isfinite(v) else f"{v * scale:+.3g}{suffix}"

    if r.low is None or not (math.isfinite(r.low) and math.isfinite(r.high)):
        return f"{one(r.estimate)} [no interval]"
    if r.unit == "rate":
        return f"{r.estimate:.2f} [{r.low:.2f}, {r.high:.2f}]"
    return f"{one(r.estimate)} [{one(r.low)}, {one(r.high)}]"


def blocks(results: Sequence[Result], level: float, method: str) -> list[tuple]:
    """The paper's rows in one table, the project's extension (rows the paper does not report) in a second."""
    if not results:
        return []
    paper = [r for r in results if not r.extension]
    extension = [r for r in results if r.extension]
    counts = {v: sum(r.verdict == v for r in results) for v in
              ("holds", "contradicted", "inconclusive", "missing", "not computed")}
    out = [("h", 2, TITLE),
           ("p", f"{len(results)} tests of {len({r.claim.id for r in results})} claims: "
                 + ", ".join(f"{n} {v}" for v, n in counts.items() if n)
                 + (f" ({len(extension)} of them the project's extension, below)" if extension else "") + ".")]
    if paper:
        out.append(("table", HEAD, _rows(paper)))
    if extension:
        out += [("h", 3, EXTENSION_TITLE), ("p", EXTENSION_NOTE), ("table", HEAD, _rows(extension))]
    return [*out, ("p", method_note(level, method))]


def _rows(results: Sequence[Result]) -> list[tuple]:
    rows = []
    for i, r in enumerate(results):
        first = i == 0 or results[i - 1].claim.id != r.claim.id  # a claim's words once, over its rows
        words = r.claim.words + (f" ({r.claim.note})" if r.claim.note else "")
        rows.append((r.claim.id if first else "", words if first else "", r.row or "-", r.statistic,
                     r.paper or "-", shown(r), r.verdict + (f" ({r.note})" if r.note else ""), str(r.n_seeds or "-"),
                     ", ".join(f"{t} {n}" for t, n in r.n_problems.items()) or "-",
                     (r.evidence or "the project's own claim") + "; " + EVIDENCE.get(r.claim.statistic,
                                                                                    "tested on the final mean@k")))
    return rows


def method_note(level: float, method: str) -> str:
    """What stands behind the intervals, printed under the table: the method and its measured coverage."""
    measured = intervals.COVERAGE.get(method, {})
    cover = "; ".join(f"{s} seeds {a:.3f} / {b:.3f}" for s, (a, b) in measured.items())
    return (f"Intervals: {level * 100:g}%. Scores (mean@k, pass@k): {intervals.METHODS[method]}, seeds and "
            f"problems paired across the compared configurations (docs/evaluation.md, \"Intervals for claims\"). "
            f"Its measured coverage of a nominal 95% by simulation (bench/claims_coverage.py), where seeds dominate "
            f"/ where problems do: {cover or 'not measured'}: with three seeds a \"95%\" interval covers about "
            f"93%. Collapse rates: Clopper-Pearson over seeds (exact, conservative). Instability: a paired t "
            f"interval over seeds. A verdict: holds (the interval on the claim's side of its boundary, or inside "
            f"an equivalence margin), contradicted (wholly on the other side), inconclusive (spans it); missing: "
            f"cells not finished, nothing computed from part of them.")


def to_rows(results: Sequence[Result]) -> list[dict]:
    return [{"claim": r.claim.id, "words": r.claim.words, "where": r.claim.where, "row": r.row,
             **{f"label:{k}": v for k, v in r.labels.items()}, "statistic": r.statistic, "unit": r.unit,
             "estimate": r.estimate, "low": r.low, "high": r.high, "verdict": r.verdict, "paper": r.paper,
             "n_seeds": r.n_seeds, "n_problems": r.n_problems, "method": r.method, "note": r.note,
             "extension": r.extension, "evidence": r.evidence, "claim_note": r.claim.note}
            for r in results]


def to_json(results: Sequence[Result], level: float, method: str) -> str:
    return json.dumps({"level": level, "method": method, "coverage": intervals.COVERAGE.get(method, {}),
                       "rows": to_rows(results)}, indent=1, default=str, allow_nan=True)


def to_csv(results: Sequence[Result]) -> str:
    rows = to_rows(results)
    fields = list(dict.fromkeys(k for r in rows for k in r))
    out = io.StringIO()
    writer = csv.DictWriter(out, fields, lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: json.dumps(v) if isinstance(v, dict) else v for k, v in r.items()})
    return out.getvalue()
