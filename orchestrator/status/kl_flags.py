"""A KL term that does nothing, as status shows it (issue 57): the configurations flagged by either check, by name
and with why.

Two checks flag a configuration with a KL term:
- slope: its measured KL does not respond to beta as the bias table predicts (orchestrator/report/kl_response.py,
  after a sweep; it needs each cell's curve and torch, so `orchestrate report` runs it and saves what it flagged in
  FILE, which status reads back);
- fingerprint: the gradient fingerprint a cell recorded (trainer/objective/fingerprint.py, in objective.json) equals
  that of the same configuration at beta = 0: the coefficient never reaches the gradient. `fingerprint_check` is
  pure: the beta = 0 hash comes from the caller (the report computes it from the cell's settings with beta zeroed,
  orchestrator/sweep/knobs.py `zero_hash`) or, as status has no torch, from the beta = 0 cells of the same context
  of the sweep, which recorded theirs.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from record.files import atomic_write, read_json

FILE = "kl-flags.json"  # in the sweep directory: what the latest `orchestrate report` flagged
CHECKS = {"slope": "measured KL against beta", "fingerprint": "gradient fingerprint against beta = 0's"}


def is_reference(axes: Mapping) -> bool | None:
    """Whether a cell is a beta = 0 one by its axes (placement none, or beta 0); None where its axes do not say."""
    if axes.get("kl.placement") == "none" or axes.get("kl.beta") in (0, 0.0):
        return True
    if axes.get("kl.placement") not in (None, "none") or axes.get("kl.beta") not in (None, 0, 0.0):
        return False
    return None


def context(axes: Mapping) -> tuple:
    """What a cell shares with its beta = 0 reference: the axes that are neither KL settings nor the seed."""
    return tuple(sorted((k, str(v)) for k, v in axes.items() if not k.startswith("kl.") and k != "seed"))


def fingerprint_check(cells: Sequence[Mapping], zero: Callable[[Mapping], str | None] | None = None) -> list[dict]:
    """One entry per configuration with a KL term whose cells recorded a fingerprint: {"check": "fingerprint",
    "name", "hash", "zero", "flagged", "why"}. cells: {"name" (the configuration, seed aside), "context",
    "reference" (a beta = 0 cell), "hash" (recorded; None: not yet)}, plus what `zero` reads; zero(cell) -> the
    hash of its settings at beta = 0. Without `zero`, the recorded hash of the context's beta = 0 cells, where
    they agree on one."""
    refs: dict[tuple, set] = {}
    for c in cells:
        if c["reference"] and c.get("hash"):
            refs.setdefault(c["context"], set()).add(c["hash"])
    groups: dict[str, list] = {}
    for c in cells:
        if not c["reference"] and c.get("hash"):
            groups.setdefault(c["name"], []).append(c)
    out = []
    for name, members in sorted(groups.items()):
        equal, zeros = [], set()
        for c in members:
            z = zero(c) if zero else (next(iter(refs[c["context"]])) if len(refs.get(c["context"], ())) == 1
                                      else None)
            if z is not None:
                zeros.add(z)
                if c["hash"] == z:
                    equal.append(c["hash"])
        entry = {"check": "fingerprint", "name": name, "hash": ", ".join(sorted({c["hash"] for c in members})),
                 "zero": ", ".join(sorted(zeros)) or None}
        source = "its settings with beta zeroed" if zero else "the context's beta = 0 cells"
        if equal:
            why = (f"its gradient fingerprint {equal[0]} equals beta = 0's ({source}): the KL coefficient never "
                   f"reaches the gradient")
        elif zeros:
            why = f"its gradient fingerprint differs from beta = 0's ({source})"
        else:
            why = "no beta = 0 fingerprint to compare with"
        out.append({**entry, "flagged": bool(equal), "why": why})
    return sorted(out, key=lambda e: (not e["flagged"], e["name"]))


def status_cells(rows: Sequence[Mapping]) -> list[dict]:
    """Status's rows as `fingerprint_check`'s cells: those whose axes say whether they are beta = 0 ones."""
    return [{"name": r["config"], "context": context(r["axes"]), "reference": ref, "hash": r.get("fingerprint")}
            for r in rows if (ref := is_reference(r["axes"])) is not None]


def save(sweep_dir: Path, entries: Sequence[Mapping]) -> None:
    """What the report's checks flagged, for status to show: FILE in the sweep directory (replaced each report)."""
    flagged = [{"check": e["check"], "name": e["name"], "why": e["why"]} for e in entries if e["flagged"]]
    atomic_write(Path(sweep_dir) / FILE, json.dumps({"flagged": flagged}, indent=1) + "\n")


def flagged(sweep_dir: Path, rows: Sequence[Mapping]) -> list[dict]:
    """Every flagged configuration: the latest report's (FILE) and the fingerprint check on the cells' recorded
    hashes now, one entry per check and name: {"check", "name", "why"}."""
    saved = (read_json(Path(sweep_dir) / FILE) or {}).get("flagged") or []
    now = [e for e in fingerprint_check(status_cells(rows)) if e["flagged"]]
    seen, out = set(), []
    for e in [*saved, *now]:
        if isinstance(e, Mapping) and (e.get("check"), e.get("name")) not in seen:
            seen.add((e.get("check"), e.get("name")))
            out.append({"check": e.get("check"), "name": e.get("name"), "why": e.get("why")})
    return out


def lines(entries: Sequence[Mapping]) -> list[str]:
    """`NAME (CHECK): WHY`, one per flagged configuration."""
    return [f"{e['name']} ({CHECKS.get(e['check'], e['check'])}): {e['why']}" for e in entries]
