"""What the claims are computed from, read here for orchestrator/claims/ (which reads no run directory itself):
the sweep's claims, each cell as the claims see it, and each cell's per-problem scores from its evaluation's
per-sample files (eval/outcome.py `problem_scores`, the reader beside their writer).

The claims come from the sweep file when the report is given one (validated with it), else from the manifest of
the launched sweep (orchestrator/launch/materialise.py keeps them there), and from any claims file given with
`--claims`. A claim whose side b names another sweep (Appendix D.2's off-policy against on-policy) reads that
sweep's cells from its own directory beside this one (<output_root>/<its name>, record/rundir.py's layout). A run
measure whose key the report's curves do not draw (`train/entropy`) is read from MLflow for the claims alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from eval.outcome import problem_scores
from orchestrator.claims import files as claim_files
from orchestrator.claims import parse as claim_spec
from orchestrator.claims import run_measures
from orchestrator.claims.parse import Claim
from orchestrator.claims.rows import baseline_axes
from orchestrator.claims.verdicts import Cell, ScoresOf
from orchestrator.launch.ledger import Ledger
from orchestrator.report import paper
from orchestrator.report.histories import read_histories
from orchestrator.status.cells import cell_rows, current_records, run_dir_facts
from record.errors import UserError
from record.rundir import RunDir
from record.tracking.run_names import read_manifest
from record.tracking.sweep import metric_histories
from record.tracking.tracker import read_run_file


def sweep_claims(sweep: str, overrides: Sequence[str], sweep_dir: Path,
                 files: Sequence[str] = ()) -> tuple[list[Claim], dict[str, list[str]]]:
    """The claims to report on and the task groups they name; UserError listing every bad claim."""
    if Path(sweep).suffix in (".yaml", ".yml") and Path(sweep).is_file():
        from orchestrator.sweep.expand import load_sweep  # noqa: PLC0415 (Hydra: only for a sweep file)

        loaded = load_sweep(sweep, list(overrides))
        claims, groups = list(loaded.claims), {g: list(ts) for g, ts in loaded.claim_groups}
    else:
        manifest = read_manifest(sweep_dir)
        groups = {str(g): list(ts) for g, ts in (manifest.get("claim_groups") or {}).items()}
        problems: list[str] = []
        # A manifest written before claims carried their evidence reads as it was written.
        claims = [c for i, raw in enumerate(manifest.get("claims") or ())
                  if (c := claim_spec.parse(raw, f"manifest.json claims[{i}]", groups, problems,
                                            require_evidence=False))]
        if problems:
            raise UserError("the sweep's manifest holds bad claims:\n  - " + "\n  - ".join(problems))
    if files:
        more, more_groups = claim_files.load_for_report([Path(f) for f in files])
        claims += [c for c in more if c.id not in {k.id for k in claims}]
        groups = {**more_groups, **groups}
    return claims, groups


def cells(rows: Sequence[Mapping], histories: Mapping[str, Mapping]) -> list[Cell]:
    """Each status row (orchestrator/status/cells.py `cell_rows`) as the claims read it."""
    out = []
    for row in rows:
        evals = row.get("evals") or []
        tasks = tuple(dict.fromkeys(t for e in evals for t in e.get("tasks") or ()))
        out.append(Cell(row["run_key"], row["name"], row["axes"], paper.finished(row), bool(tasks), tasks,
                        row.get("verdict"), histories.get(row["run_key"], {})))
    return out


def baseline_cells(records: Mapping[str, Mapping], seeds: Sequence[int]) -> tuple[list[Cell], list[dict]]:
    """The base models as the claims read them: one cell per baseline and seed of the sweep (axes:
    orchestrator/claims/rows.py `baseline_axes`), and their rows for `scores_reader` (each with its evaluations, read
    from its run dir as a cell's are)."""
    out, rows = [], []
    for key, record in records.items():
        facts = run_dir_facts(Path(record["run_dir"]))
        tasks = tuple(dict.fromkeys(t for e in facts["evals"] for t in e.get("tasks") or ()))
        axes = baseline_axes((record.get("baseline") or {}).get("settings") or {})
        out += [Cell(key, record["name"], {**axes, "seed": s}, True, bool(tasks), tasks) for s in seeds]
        rows.append({"run_key": key, "evals": facts["evals"]})
    return out, rows


def measure_histories(claims: Sequence[Claim], records: Mapping[str, Mapping],
                      histories: Mapping[str, Mapping]) -> dict[str, dict]:
    """`histories` with the keys the claims' run measures read that the curves do not (paper.CURVES), from each
    cell's MLflow run; a cell without one, or a store that cannot be reached, keeps what it had (its claims then
    read `not computed`, saying why)."""
    keys = {run_measures.MEASURE_KEYS[c.measure] for c in claims if c.statistic in ("instability", "run_equivalence")}
    extra = sorted(keys - set(paper.CURVES))
    out = {key: dict(h) for key, h in histories.items()}
    if not extra:
        return out
    by_uri: dict[str, dict[str, str]] = {}
    for key, record in records.items():
        info = read_run_file(Path(record["run_dir"]))
        if info.get("run_id") and info.get("tracking_uri"):
            by_uri.setdefault(info["tracking_uri"], {})[key] = info["run_id"]
    for uri, run_ids in by_uri.items():
        try:
            found = metric_histories(uri, run_ids, extra)
        except ConnectionError:
            continue
        for key, more in found.items():
            out.setdefault(key, {}).update(more)
    return out


def other_sweeps(claims: Sequence[Claim], sweep_dir: Path) -> dict[str, list[Cell]]:
    """The cells of every other sweep a claim's side b names, by name, from <output_root>/<name> (the sweep
    directory's sibling); a sweep with no ledger there has not run and is left out (its claims read `missing`)."""
    out = {}
    for name in dict.fromkeys(c.other for c in claims if c.other):
        there = sweep_dir.parent / name
        if not Ledger(there).exists():
            continue
        records = current_records(there)
        out[name] = cells(cell_rows(records), measure_histories(claims, records, read_histories(records)[0]))
    return out


def scores_reader(records: Mapping[str, Mapping], rows: Sequence[Mapping]) -> ScoresOf:
    """run_key, task -> the per-problem scores of the cell's newest evaluation of that task, its data's sha256 and
    its settings; read once each."""
    evals = {row["run_key"]: row.get("evals") or [] for row in rows}
    cache: dict[tuple[str, str], tuple] = {}

    def scores_of(run_key: str, task: str):
        if (run_key, task) not in cache:
            chosen = [e for e in evals.get(run_key, ()) if task in (e.get("tasks") or ())]
            if not chosen:
                raise ValueError(f"{task}: cell {run_key} has no evaluation of it")
            latest = chosen[-1]  # oldest first (orchestrator/status/outcomes.py `evaluations`)
            root = RunDir(Path(records[run_key]["run_dir"])).eval_step(int(latest["step"]))
            scores, sha = problem_scores(root, task, latest["settings"])
            cache[run_key, task] = (scores, sha, latest["settings"])
        return cache[run_key, task]

    return scores_of
