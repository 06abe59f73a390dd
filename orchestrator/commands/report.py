"""`orchestrate report SWEEP [--out DIR]`: the paper's figures and tables from a finished or partial sweep."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from orchestrator.arguments import add_sweep_dir_argument
from orchestrator.launch.ledger import Ledger
from orchestrator.report import (
    asynchronous,
    base_models,
    bias,
    claim_inputs,
    claims,
    claims_table,
    intervals,
    late,
    missing,
    paper,
)
from orchestrator.status.baseline_rows import baseline_rows, current_baselines
from orchestrator.status.cells import cell_rows, current_records, run_config
from orchestrator.sweep.locate import sweep_dir_of
from record.display import cell_name
from record.errors import UserError
from record.rundir import RunDir, read_json
from record.tracking.run_names import read_manifest
from record.tracking.sweep import log_report_to_parent, metric_histories
from record.tracking.tracker import read_run_file
from record.tracking.ui import shown_uri

EXAMPLES = """examples:
  orchestrate report runs/onpolicy
  orchestrate report sweeps/smoke.yaml --out /tmp/smoke-report

Writes into DIR (default <sweep_dir>/report): report.md, report.html (one page, the figures embedded), the PNGs,
missing.tsv (the cells missing from the report, one row per cell) and claims.csv / claims.json. First, the Claims
table: each claim the sweep names (sweep.claims; the paper's in sweeps/claims/paper.yaml) and any claims file given with
--claims, per row its statistic with a paired interval over seeds and problems (read from the evaluations' per-
sample files), the paper's number and a verdict (holds, contradicted, inconclusive; missing while its cells run).
The report, its figures and the claims are also logged to the sweep's parent MLflow run. Training curves (KL,
reward, held-out pass@1, response length; one panel per estimator and placement, one line per beta: the mean over
seeds, a band from the lowest seed to the highest, beta = 0 dashed) come from MLflow (each cell's mlflow_run.json);
a cell without one, or a store that cannot be reached, is drawn from its run directory instead (the checkpoint's
collapse history: KL, length, held-out pass@1; and the last logged step), and the report says so. Final mean@k per
task with its seed spread and its relative change against the beta = 0 cell of the same model (eval_result.json),
each base model's mean@k (sweep.baselines) a dotted line beside them and in a table of its own; Table 1's behaviour
column from the collapse verdicts (verdict.json); cells still running, failed, not evaluated or never submitted are
listed with why (above 200 cells: counted by state and why, with a few of each; --all lists them all). Each distinct
objective among the cells on the toy model of section 3.3 (as `orchestrate validate` prints it): in the report, in
bias-table.md and on the terminal."""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "report", help="the paper's figures and tables from a sweep (Markdown, HTML, PNGs)",
        description="Turn a finished or partial sweep into training curves (Figures 2-4), final mean@k against "
                    "beta = 0 (Figures 5-6) and Table 1's behaviour column, as report.md, report.html and PNGs.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_sweep_dir_argument(parser)
    parser.add_argument("--out", metavar="DIR", help="where to write the report (default <sweep_dir>/report)")
    parser.add_argument("--all", action="store_true", dest="everything",
                        help="above 200 cells, list every cell missing from the report in it too (by default: "
                             "counts by state and why, with examples; missing.tsv beside it lists them all)")
    parser.add_argument("--claims", metavar="FILE", action="append", default=[],
                        help="a claims file (the format of sweeps/claims/paper.yaml) to test as well; repeatable")
    parser.add_argument("--level", type=float, default=0.95,
                        help="the claims' interval level, between 0 and 1 (default 0.95)")
    parser.add_argument("--method", choices=list(intervals.METHODS), default=intervals.DEFAULT_METHOD,
                        help=f"the claims' interval method for scores (default {intervals.DEFAULT_METHOD}: the "
                             f"closest to nominal coverage, docs/evaluation.md)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if not 0 < args.level < 1:
        raise UserError(f"--level {args.level}: give the interval's level between 0 and 1 (0.95 for 95%)")
    sweep_dir = sweep_dir_of(args.sweep, args.overrides)
    out = Path(args.out) if args.out else sweep_dir / "report"
    claim_list, groups = claim_inputs.sweep_claims(args.sweep, args.overrides, sweep_dir, args.claims)
    records = current_records(sweep_dir) if Ledger(sweep_dir).exists() else {}
    data = cell_rows(records)
    configs = {key: run_config(Path(r["run_dir"])) for key, r in records.items()}
    kls = {key: paper.kl_settings(records[key]["axes"], flat) for key, flat in configs.items()}
    histories, notes = read_histories(records)
    cells = [{"row": r, "kl": kls[r["run_key"]], "history": histories[r["run_key"]],
              "async_level": asynchronous.async_level(r["axes"], configs[r["run_key"]])} for r in data]
    out.mkdir(parents=True, exist_ok=True)
    images: dict[str, bytes] = {}
    figures = {"curves": [_save(plots().curves_figure(p), out, f"curves-{p['title']}", images, p["title"])
                          for p in paper.panels([c for c in cells if any(c["history"].values())])]}
    scores = paper.final_scores(data, kls)
    contexts = list(dict.fromkeys(s["context"] for s in scores))
    titles = {ctx: cell_name(ctx) or "every cell" for ctx in contexts}
    bases = baseline_rows(current_baselines(sweep_dir))
    figures["scores"] = [_save(plots().scores_figure([s for s in scores if s["context"] == ctx], titles[ctx],
                                                     base_models.references(bases, ctx)), out,
                               f"scores-{titles[ctx]}", images, f"final mean@k: {titles[ctx]}") for ctx in contexts]
    fig7 = asynchronous.async_panels(cells)
    figures["async"] = [_save(plots().async_figure(fig7), out, "async-figure7", images,
                              "Figure 7: held-out pass@1 by KL configuration and async level")] if fig7 else []
    planned = read_manifest(sweep_dir).get("cells", [])
    gaps = paper.coverage(data, planned)
    (out / missing.FILE).write_text(missing.tsv(gaps), encoding="utf-8")  # every row, whatever the document shows
    blocks = paper.document(sweep_dir.name, data, kls, gaps, figures, notes, args.everything, missing.FILE)
    blocks += base_models.blocks(bases)
    blocks += asynchronous.blocks(figures["async"])
    made = bias.table(configs)  # each distinct objective on the toy model: a second or two, torch included
    blocks += bias.blocks(made)
    at = next((i for i, b in enumerate(blocks) if b[0] == "h" and b[2].startswith("Training curves")), len(blocks))
    blocks[at:at] = late.blocks(late.late_values([c for c in cells if paper.finished(c["row"])]))
    results = claims.evaluate(claim_list, claim_inputs.cells(data, histories), groups,
                                    claim_inputs.scores_reader(records, data), args.level, args.method)
    blocks[2:2] = claims_table.blocks(results, args.level, args.method)  # the top: after the title and the count
    (out / "claims.csv").write_text(claims_table.to_csv(results), encoding="utf-8")
    (out / "claims.json").write_text(claims_table.to_json(results, args.level, args.method), encoding="utf-8")
    (out / "report.md").write_text(paper.render_markdown(blocks), encoding="utf-8")
    (out / "report.html").write_text(paper.render_html(blocks, images, f"Sweep {sweep_dir.name}"), encoding="utf-8")
    table_md = paper.render_markdown(bias.blocks(made)) if made["T"] else ""
    if table_md:
        (out / "bias-table.md").write_text(table_md, encoding="utf-8")
    for note in notes:
        if "unreachable" in note:
            print(f"warning: {note}", file=sys.stderr)
    done = sum(1 for r in data if paper.finished(r))
    print(f"{sweep_dir.name}: {len(data)} cells, {done} finished; {len(images)} figures; "
          f"{out / 'report.html'} and report.md")
    if missing.summarised(gaps, missing.sweep_cells(data, gaps), args.everything):
        print(f"{len(gaps)} cells missing from the report, counted by state in it (--all lists them there): "
              f"every one in {out / missing.FILE}")
    if table_md:
        print(f"{bias.TITLE} ({out / 'bias-table.md'}):")
        print(paper.render_markdown([b for b in bias.blocks(made) if b[0] == "table"]), end="")
    if results:
        counts = {}
        for r in results:
            counts[r.verdict] = counts.get(r.verdict, 0) + 1
        print(f"claims: {len(results)} tests of {len({r.claim.id for r in results})} claims: "
              + ", ".join(f"{n} {v}" for v, n in counts.items()) + f" ({out / 'claims.csv'})")
    files = [out / n for n in ("report.html", "report.md", *claims_table.FILES)] + [out / n for n in images]
    tags = {"report/claims": ", ".join(f"{r.claim.id}{' ' + r.row if r.row else ''}: {r.verdict}"
                                       for r in results)[:4900]} if results else {}
    print(log_report_to_parent([Path(r["run_dir"]) for r in records.values()], files, tags=tags))
    return 0


def read_histories(records: dict[str, dict]) -> tuple[dict[str, dict], list[str]]:
    """Each cell's curves, {run_key: {metric: [(step, value)]}}, and notes on where they came from: MLflow for
    the cells that opened a run there, else (no run, or the store unreachable) the run directory."""
    by_uri: dict[str, dict[str, str]] = {}
    for key, record in records.items():
        info = read_run_file(Path(record["run_dir"]))
        if info.get("run_id") and info.get("tracking_uri"):
            by_uri.setdefault(info["tracking_uri"], {})[key] = info["run_id"]
    found, notes = {}, []
    for uri, run_ids in by_uri.items():
        try:
            found.update(metric_histories(uri, run_ids, paper.CURVES))
            notes.append(f"Curves of {len(run_ids)} cell(s) from MLflow ({shown_uri(uri)}).")
        except ConnectionError:
            notes.append(f"The MLflow store {shown_uri(uri)} is unreachable: the curves of {len(run_ids)} cell(s) "
                         f"come from their run directories instead (the checkpoint's collapse history and the "
                         f"last logged step), so the reward curve has only its last point.")
    never = [key for key in records if not any(key in ids for ids in by_uri.values())]
    if never:
        notes.append(f"{len(never)} cell(s) never opened an MLflow run (not started, or a job that does not log): "
                     f"their curves come from their run directories.")
    rest = [key for key in records if key not in found]
    for key in rest:
        found[key] = run_dir_history(Path(records[key]["run_dir"]))
    return found, notes


def run_dir_history(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """The curves a run directory keeps: the latest checkpoint's collapse history (the keys the collapse rules
    read) and the last logged step's metrics (last_metrics.json, every key at one step)."""
    run = RunDir(run_dir)
    _, state = run.latest_state()
    history = {k: {int(s): float(v) for s, v in points}
               for k, points in ((state.get("collapse") or {}).get("history") or {}).items() if k in paper.CURVES}
    last = read_json(run.last_metrics) or {}
    for key, value in (last.get("metrics") or {}).items():
        if key in paper.CURVES and isinstance(last.get("step"), int) and isinstance(value, (int, float)):
            history.setdefault(key, {})[last["step"]] = float(value)
    return {k: sorted(points.items()) for k, points in history.items()}


def plots():
    from orchestrator.report import plots  # noqa: PLC0415 (matplotlib only when there is something to draw)

    return plots


def _save(fig, out: Path, stem: str, images: dict[str, bytes], caption: str) -> tuple[str, str]:
    name = re.sub(r"[^\w.-]+", "-", stem).strip("-") + ".png"
    fig.savefig(out / name, dpi=110)
    images[name] = (out / name).read_bytes()
    return name, caption

