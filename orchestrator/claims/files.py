"""Where a sweep's claims come from: the paper's claims file (sweeps/claims/paper.yaml), the files a sweep or
`orchestrate report --claims` names, and the ids and inline claims of `sweep.claims`; each claim parsed by
parse.py, every problem appended at once."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from orchestrator.claims.parse import Claim, parse
from record.errors import UserError

PAPER_FILE = Path(__file__).resolve().parents[2] / "sweeps" / "claims" / "paper.yaml"


def read_claims_file(path: Path, problems: list[str]) -> tuple[dict[str, Claim], dict[str, list[str]]]:
    """A claims file's claims by id, and its task groups. A file that cannot be read is one problem."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        problems.append(f"claims file {path}: cannot be read ({str(error).splitlines()[0]})")
        return {}, {}
    if not isinstance(data, Mapping) or not isinstance(data.get("claims"), list):
        problems.append(f"claims file {path}: give `claims:` (a list of claims) and optionally `groups:`")
        return {}, {}
    groups = data.get("groups") or {}
    if not isinstance(groups, Mapping) or not all(isinstance(v, list) for v in groups.values()):
        problems.append(f"claims file {path}: groups: give name -> list of tasks")
        groups = {}
    found: dict[str, Claim] = {}
    for i, raw in enumerate(data["claims"]):
        claim = parse(raw, f"{path.name}: claims[{i}]", groups, problems)
        if claim and claim.id in found:
            problems.append(f"{path.name}: claim id {claim.id!r} appears twice; ids name claims in sweeps")
        elif claim:
            found[claim.id] = claim
    return found, {str(k): [str(t) for t in v] for k, v in groups.items()}


def resolve(entries: Any, base_dir: Path, problems: list[str], paper_file: Path = PAPER_FILE
            ) -> tuple[list[Claim], dict[str, list[str]]]:
    """`sweep.claims` as claims, in order, and the task groups they may name: ids (of sweeps/claims/paper.yaml or of a
    file listed), file names (relative to the sweep file), inline mappings. Every problem appended."""
    if entries in (None, []):
        return [], {}
    if not isinstance(entries, list):
        problems.append(f"sweep.claims: {entries!r}; give a list of claim ids, claims files and claims")
        return [], {}
    known, groups = read_claims_file(paper_file, problems)
    from_files: list[Claim] = []
    for entry in entries:
        if isinstance(entry, str) and entry.endswith((".yaml", ".yml")):
            claims, more = read_claims_file(base_dir / entry, problems)
            groups = {**groups, **more}
            from_files += claims.values()
            known.update(claims)
    out: list[Claim] = []
    for i, entry in enumerate(entries):
        if isinstance(entry, str) and entry.endswith((".yaml", ".yml")):
            continue
        if isinstance(entry, str):
            if entry in known:
                out.append(known[entry])
            else:
                problems.append(f"sweep.claims[{i}]: no claim {entry!r}; ids: {', '.join(known)}")
        else:
            claim = parse(entry, f"sweep.claims[{i}]", groups, problems)
            out += [claim] if claim else []
    out += [c for c in from_files if c not in out]
    ids = [c.id for c in out]
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        problems.append(f"sweep.claims: id(s) {', '.join(twice)} name more than one claim; give each its own id")
    return out, groups


def load_for_report(paths: Sequence[Path]) -> tuple[list[Claim], dict[str, list[str]]]:
    """Every claim of claims files named at report time (`orchestrate report --claims FILE`), or one UserError."""
    problems: list[str] = []
    claims: list[Claim] = []
    _, groups = read_claims_file(PAPER_FILE, problems)
    for path in paths:
        found, more = read_claims_file(Path(path), problems)
        claims += found.values()
        groups.update(more)
    if problems:
        raise UserError("bad claims:\n  - " + "\n  - ".join(problems))
    return claims, groups
