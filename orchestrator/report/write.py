"""`orchestrate report`'s work, from a sweep to the report's files: the sweep's claims and cells read (the ledger,
each run directory, MLflow's curves), the figures drawn, the claims computed (orchestrator/claims/), the document
assembled in its order and written as report.md and report.html (orchestrator/report/page.py), with missing.tsv,
claims.csv / claims.json and bias-table.md beside them. orchestrator/commands/report.py prints what `write_report`
returns and then logs the files to the sweep's parent MLflow run (`log_to_parent`).

The document's order: the title and what it covers, the Claims table, the cells missing, the evaluations' and
gradients' splits, Table 1's behaviour, the end of training, the curves, the final mean@k (orchestrator/report/
paper.py `document`), then the base models, Figure 7, the bias table and whether each KL term acts
(orchestrator/report/kl_response.py) and reaches the gradient (kl_fingerprint.py).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.claims import intervals, verdicts
from orchestrator.claims import table as claims_table
from orchestrator.claims.verdicts import Result
from orchestrator.launch.baseline_jobs import baseline_ledger
from orchestrator.launch.ledger import Ledger
from orchestrator.report import (
    asynchronous,
    base_models,
    bias,
    claim_inputs,
    kl_fingerprint,
    kl_response,
    late,
    missing,
    paper,
)
from orchestrator.report.histories import read_histories
from orchestrator.report.page import render_html, render_markdown
from orchestrator.status import kl_flags
from orchestrator.status.baseline_rows import baseline_rows, current_baselines
from orchestrator.status.cells import cell_rows, current_records, run_config
from orchestrator.sweep.locate import sweep_dir_of
from record.display import cell_name
from record.errors import UserError
from record.tracking.run_names import read_manifest
from record.tracking.sweep import log_report_to_parent

TAG_LENGTH = 4900  # the `report/claims` tag's text, under MLflow's 5000-character limit on a tag's value


@dataclass(frozen=True)
class Written:
    """What `write_report` wrote: where, and what the command prints (`lines` to stdout, `warnings` to stderr)."""

    out: Path
    files: tuple[Path, ...]  # logged to the sweep's parent run
    run_dirs: tuple[Path, ...]
    results: tuple[Result, ...]
    lines: tuple[str, ...]
    warnings: tuple[str, ...]


def write_report(sweep: str, overrides: Sequence[str] = (), out: str | None = None, claims_files: Sequence[str] = (),
                 level: float = 0.95, method: str = intervals.DEFAULT_METHOD, everything: bool = False) -> Written:
    """The report of `sweep` (a sweep directory, or a sweep file with its overrides) written into `out` (default
    <sweep_dir>/report). UserError for a bad level, a sweep that cannot be found or bad claims."""
    if not 0 < level < 1:
        raise UserError(f"--level {level}: give the interval's level between 0 and 1 (0.95 for 95%)")
    sweep_dir = sweep_dir_of(sweep, list(overrides))
    where = Path(out) if out else sweep_dir / "report"
    claim_list, groups = claim_inputs.sweep_claims(sweep, list(overrides), sweep_dir, claims_files)
    records = current_records(sweep_dir) if Ledger(sweep_dir).exists() else {}
    data = cell_rows(records)
    configs = {key: run_config(Path(r["run_dir"])) for key, r in records.items()}
    kls = {key: paper.kl_settings(records[key]["axes"], flat) for key, flat in configs.items()}
    histories, notes = read_histories(records)
    cells = [{"row": r, "kl": kls[r["run_key"]], "history": histories[r["run_key"]],
              "async_level": asynchronous.async_level(r["axes"], configs[r["run_key"]])} for r in data]
    where.mkdir(parents=True, exist_ok=True)
    bases = baseline_rows(current_baselines(sweep_dir))
    images: dict[str, bytes] = {}
    figures = _figures(cells, data, kls, bases, where, images)
    gaps = paper.coverage(data, read_manifest(sweep_dir).get("cells", []))
    measured = claim_inputs.measure_histories(claim_list, records, histories)  # the claims' keys the curves lack
    base_records = baseline_ledger(sweep_dir).records()  # the base models, for a claim side that names one
    base_cells, base_rows = claim_inputs.baseline_cells(base_records, sorted({r["axes"].get("seed", 0) for r in data}))
    results = verdicts.evaluate(claim_list, claim_inputs.cells(data, measured) + base_cells, groups,
                                claim_inputs.scores_reader({**records, **base_records}, data + base_rows), level,
                                method,
                                claim_inputs.other_sweeps(claim_list, sweep_dir))
    made = bias.table(configs)  # each distinct objective on the toy model: a second or two, torch included
    acting = kl_response.check([{**c, "config": configs[c["row"]["run_key"]]} for c in cells],
                               kl_response.directions(configs), level)  # a KL term that does nothing, flagged
    reaching = kl_fingerprint.check(data, configs)  # and one whose fingerprint is beta = 0's
    kl_flags.save(sweep_dir, [*acting, *reaching])  # what status shows of both
    blocks = paper.document(sweep_dir.name, data, kls, gaps, figures, notes, everything, missing.FILE,
                            claims=claims_table.blocks(results, level, method),
                            late=late.blocks(late.late_values([c for c in cells if paper.finished(c["row"])])))
    blocks += base_models.blocks(bases) + asynchronous.blocks(figures["async"]) + bias.blocks(made)
    blocks += kl_response.blocks(acting, level) + kl_fingerprint.blocks(reaching)
    texts = {missing.FILE: missing.tsv(gaps),  # every row, whatever the document shows
             "claims.csv": claims_table.to_csv(results), "claims.json": claims_table.to_json(results, level, method),
             "report.md": render_markdown(blocks),
             "report.html": render_html(blocks, images, f"Sweep {sweep_dir.name}")}
    table_md = render_markdown(bias.blocks(made)) if made["T"] else ""
    if table_md:
        texts["bias-table.md"] = table_md
    for name, text in texts.items():
        (where / name).write_text(text, encoding="utf-8")
    lines = _lines(sweep_dir.name, data, images, where, gaps, everything, made, results) + kl_response.lines(acting)
    lines += kl_fingerprint.lines(reaching)
    return Written(where, tuple(where / n for n in ("report.html", "report.md", *claims_table.FILES, *images)),
                   tuple(Path(r["run_dir"]) for r in records.values()), tuple(results), tuple(lines),
                   tuple(f"warning: {note}" for note in notes if "unreachable" in note))


def log_to_parent(written: Written) -> str:
    """The report's files as artifacts of the sweep's parent MLflow run, every row's verdict as its `report/claims`
    tag; what happened, in one line."""
    tags = {"report/claims": ", ".join(f"{r.claim.id}{' ' + r.row if r.row else ''}: {r.verdict}"
                                       for r in written.results)[:TAG_LENGTH]} if written.results else {}
    return log_report_to_parent(list(written.run_dirs), list(written.files), tags=tags)


def _figures(cells, data, kls, bases, out: Path, images: dict[str, bytes]) -> dict[str, list[tuple[str, str]]]:
    """The curves (Figures 2-4), the final mean@k per context (Figures 5-6) and Figure 7, drawn into `out`;
    {"curves" | "scores" | "async": [(file name, caption)]}, each PNG's bytes into `images`."""
    drawn = [c for c in cells if any(c["history"].values())]
    figures = {"curves": [_save(_plots().curves_figure(p), out, f"curves-{p['title']}", images, p["title"])
                          for p in paper.panels(drawn)]}
    scores = paper.final_scores(data, kls)
    titles = {ctx: cell_name(ctx) or "every cell" for ctx in dict.fromkeys(s["context"] for s in scores)}
    figures["scores"] = [_save(_plots().scores_figure([s for s in scores if s["context"] == ctx], title,
                                                      base_models.references(bases, ctx)), out, f"scores-{title}",
                               images, f"final mean@k: {title}") for ctx, title in titles.items()]
    fig7 = asynchronous.async_panels(cells)
    figures["async"] = [_save(_plots().async_figure(fig7), out, "async-figure7", images,
                              "Figure 7: held-out pass@1 by KL configuration and async level")] if fig7 else []
    return figures


def _lines(name, data, images, out: Path, gaps, everything, made, results) -> list[str]:
    """What the command prints: the counts, where the files are, the bias table and the claims' verdicts."""
    done = sum(1 for r in data if paper.finished(r))
    lines = [f"{name}: {len(data)} cells, {done} finished; {len(images)} figures; {out / 'report.html'} and report.md"]
    if missing.summarised(gaps, missing.sweep_cells(data, gaps), everything):
        lines.append(f"{len(gaps)} cells missing from the report, counted by state in it (--all lists them there): "
                     f"every one in {out / missing.FILE}")
    if made["T"]:
        lines += [f"{bias.TITLE} ({out / 'bias-table.md'}):",
                  render_markdown([b for b in bias.blocks(made) if b[0] == "table"]).removesuffix("\n")]
    if results:
        counts = Counter(r.verdict for r in results)
        lines.append(f"claims: {len(results)} tests of {len({r.claim.id for r in results})} claims: "
                     + ", ".join(f"{n} {v}" for v, n in counts.items()) + f" ({out / 'claims.csv'})")
    return lines


def _plots():
    from orchestrator.report import plots  # noqa: PLC0415 (matplotlib only when there is something to draw)

    return plots


def _save(fig, out: Path, stem: str, images: dict[str, bytes], caption: str) -> tuple[str, str]:
    name = re.sub(r"[^\w.-]+", "-", stem).strip("-") + ".png"
    fig.savefig(out / name, dpi=110)
    images[name] = (out / name).read_bytes()
    return name, caption
