"""`orchestrate report`'s content: pure functions from status's rows (orchestrator/status/cells.py `cell_rows`), each
cell's KL settings and its metric histories, to the report's tables and its document as blocks (rendered as
Markdown and HTML by orchestrator/report/page.py). The figures are drawn by orchestrator/report/plots.py;
orchestrator/report/write.py reads the sweep and writes the report's files.

The paper's pieces, and what stands in for them here:
- Figures 2-4 (training curves): one panel per configuration without its beta (K1 in reward, ...), one line per
  beta (the mean over seeds) with a band from the lowest to the highest seed; the beta = 0 cell of the same
  model (and other non-KL axes) drawn in every panel as the reference.
- Figures 5-6 (final mean@k): each configuration's mean over seeds, its sample sd and min-max, and the relative
  improvement over the beta = 0 cell of the same model: (mean - mean_0) / mean_0.
- Table 1 (behaviour): the collapse verdicts of each configuration's seeds, with the step where each first held,
  beside what the paper reports for that estimator and placement.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

from orchestrator.report import missing
from orchestrator.status import outcomes
from record.display import cell_name, format_value

# The curves of Figures 2-4 (the paper plots held-out pass@1; KL, reward and length say why it moved).
CURVES = {"train/kl_k1": "KL (k1, nats/sequence)", "train/reward_mean": "training reward",
          "val/pass_at_1": "held-out pass@1", "train/response_length": "response length (tokens)"}
BAND = "line: mean over seeds; band: min to max over seeds"
# Table 1 of the paper: each estimator and placement's gradient (on-policy) and what training did with it.
PAPER = {("k1", "reward"): ("unbiased", "stable"), ("k1", "loss"): ("biased (zero-mean extra term)", "unstable"),
         ("k3", "reward"): ("biased", "collapses"), ("k3", "loss"): ("biased (forward-KL gradient)", "stable"),
         ("k1", "reward+loss"): ("unbiased", "-"), ("k3", "reward+loss"): ("unbiased", "-")}
SEVERITY = ("collapsed", "unstable", "stable", outcomes.NO_VERDICT)  # worst first
RUNNING = ("submitting", "submitted", "pending", "requeued", "training", "evaluating", "eval pending")


# --- the cells ---------------------------------------------------------------------------------------------------

def kl_settings(axes: Mapping, flat: Mapping) -> dict:
    """A cell's estimator, placement and beta: its axes, else its resolved config (dotted keys), and whether it
    is a beta = 0 reference (placement none, or beta 0)."""
    get = {**flat, **axes}.get
    beta = get("kl.beta")
    placement = get("kl.placement")
    return {"estimator": get("kl.estimator"), "placement": placement, "beta": beta,
            "reference": placement == "none" or beta == 0}


def context(axes: Mapping) -> tuple:
    """What a cell shares with its beta = 0 reference: the axes that are neither KL settings nor the seed."""
    return tuple((k, v) for k, v in axes.items() if not k.startswith("kl.") and k != "seed")


def family(kl: Mapping) -> str:
    """A panel's configuration without its beta: `K1 in reward`, or `no KL` for the references."""
    if kl["reference"]:
        return "no KL (beta = 0)"
    return f"{str(kl['estimator']).upper()} in {kl['placement']}"


def finished(row: Mapping) -> bool:
    """Training ran to its end (evaluated or not, collapsed included)."""
    state = row["state"]
    return state in ("done", "trained", "collapsed") or (state.startswith("eval") and state != "eval pending")


def coverage(rows: Sequence[Mapping], planned: Sequence[Mapping] = ()) -> list[dict]:
    """The cells the report lacks in part or whole, and why: `running`, `failed` (given up, cancelled, out of
    memory, a failed job), `not evaluated` (trained, no mean@k yet), `not submitted` (in the sweep's manifest,
    `planned`: [{name, run_key}], but never in its ledger)."""
    out = []
    for row in rows:
        state = row["state"]
        if state == "done" and row["eval"]:
            continue
        if state in RUNNING:
            kind = "running"
        elif state == "planned":
            kind = "not submitted"
        elif state in ("trained", "done") or (state == "collapsed" and not row["eval"]):
            kind = "not evaluated"
        else:
            kind = "failed"
        why = row.get("reason") or (f"job {row['job_id']} {row['job_state']}" if row.get("job_id") else "")
        out.append({"cell": row["name"], "state": state, "kind": kind, "why": why or "-"})
    known = {row["run_key"] for row in rows}
    out += [{"cell": c["name"], "state": "-", "kind": "not submitted", "why": "in the manifest, not in the ledger"}
            for c in planned if c["run_key"] not in known]
    return out


# --- Figures 2-4: curves ---------------------------------------------------------------------------------------

def band(histories: Sequence[Sequence[tuple[int, float]]]) -> dict:
    """Seeds' histories as one line: at every step any seed logged, the mean, min and max over the seeds that
    logged it (n: how many). Steps in order."""
    at: dict[int, list[float]] = {}
    for history in histories:
        for step, value in history:
            at.setdefault(int(step), []).append(float(value))
    steps = sorted(at)
    return {"steps": steps, "mean": [statistics.fmean(at[s]) for s in steps], "min": [min(at[s]) for s in steps],
            "max": [max(at[s]) for s in steps], "n": [len(at[s]) for s in steps]}


def panels(cells: Sequence[Mapping]) -> list[dict]:
    """One panel per (context, family): {"title", "lines": {beta label: {metric: band}}, "seeds": {label: n}},
    the references (beta = 0) of the same context in every panel of it. `cells`: {"row", "kl", "history"}."""
    groups: dict[tuple, dict[str, list[Mapping]]] = {}
    for cell in cells:
        key = (context(cell["row"]["axes"]), family(cell["kl"]))
        groups.setdefault(key, {}).setdefault(beta_label(cell["kl"]), []).append(cell)
    out = []
    for (ctx, fam), by_beta in groups.items():
        if fam == family({"reference": True}) and any(c == ctx and f != fam for c, f in groups):
            continue  # drawn inside its context's other panels
        lines = dict(sorted(by_beta.items(), key=lambda kv: _beta_order(kv[1][0]["kl"])))
        refs = groups.get((ctx, family({"reference": True})), {}) if fam != family({"reference": True}) else {}
        lines = {**refs, **lines}
        title = " · ".join(x for x in (cell_name(ctx), fam) if x)
        out.append({"title": title, "context": ctx, "family": fam,
                    "lines": {label: {m: band([c["history"].get(m, []) for c in members]) for m in CURVES}
                              for label, members in lines.items()},
                    "seeds": {label: len(members) for label, members in lines.items()}})
    return out


def beta_label(kl: Mapping) -> str:
    return "beta = 0" if kl["reference"] else f"beta = {format_value(kl['beta'])}"


def _beta_order(kl: Mapping) -> float:
    return -1.0 if kl["reference"] or not isinstance(kl["beta"], (int, float)) else float(kl["beta"])


# --- Figures 5-6: final mean@k ---------------------------------------------------------------------------------

def final_scores(rows: Sequence[Mapping], kls: Mapping[str, Mapping]) -> list[dict]:
    """One entry per configuration and mean@k key: mean, sd, min, max, n over its seeds (outcomes.summary), the
    mean of the beta = 0 configuration of the same context, and the relative improvement over it. `kls`: run_key
    -> kl_settings."""
    entries = outcomes.summary(list(rows))
    first = {row["config"]: row for row in rows}
    info = {e["config"]: (context(e["axes"]), kls[first[e["config"]]["run_key"]]) for e in entries}
    references: dict[tuple, list[dict]] = {}  # by context: a look per configuration, not a scan (10,000 of them)
    for entry in entries:
        if info[entry["config"]][1]["reference"]:
            references.setdefault(info[entry["config"]][0], []).append(entry)
    out = []
    for entry in entries:
        ctx, kl = info[entry["config"]]
        refs = references.get(ctx, [])
        for key in outcomes.mean_at_k_keys(entry["metrics"]):
            stats = entry["metrics"][key]
            if not stats["n"]:
                continue
            base = next((r["metrics"][key]["mean"] for r in refs if r["metrics"].get(key, {}).get("n")), None)
            rel = None if base in (None, 0) or kl["reference"] else (stats["mean"] - base) / base
            out.append({"config": entry["config"], "context": ctx, "family": family(kl), "beta": beta_label(kl),
                        "key": key, **stats, "seeds": len(entry["seeds"]), "reference": base, "relative": rel})
    return out


# --- Table 1: behaviour ------------------------------------------------------------------------------------------

def behaviour(rows: Sequence[Mapping], kls: Mapping[str, Mapping]) -> list[dict]:
    """One row per configuration: its seeds' verdicts, worst first, each with its count and the steps where it
    held ("collapsed 1/3 (step 40); stable 2/3"), the first reason that is not stable, and the paper's Table 1."""
    groups: dict[str, list[Mapping]] = {}
    for row in rows:
        groups.setdefault(row["config"], []).append(row)
    out = []
    for config, members in groups.items():
        kl = kls[members[0]["run_key"]]
        parts = []
        for verdict in SEVERITY:
            have = [r for r in members if (r.get("verdict") or outcomes.NO_VERDICT) == verdict]
            if have:
                steps = sorted(r["verdict_step"] for r in have if r.get("verdict_step") is not None)
                where = f" (step{'s' if len(steps) > 1 else ''} {', '.join(map(str, steps))})" if steps else ""
                parts.append(f"{verdict} {len(have)}/{len(members)}{where}")
        running = sum(1 for r in members if not finished(r))
        if running:  # a verdict so far, not the run's
            parts.append(f"{running} still training or failed before its end")
        reason = next((r["verdict_reason"] for r in members if r.get("verdict") not in (None, "stable")
                       and r.get("verdict_reason")), "")
        gradient, paper = ("-", "stable") if kl["reference"] else PAPER.get((kl["estimator"], kl["placement"]),
                                                                               ("-", "-"))
        out.append({"config": config, "family": family(kl), "beta": beta_label(kl), "behaviour": "; ".join(parts),
                    "reason": reason or "-", "paper_gradient": gradient, "paper_behaviour": paper})
    return out


# --- the report as blocks --------------------------------------------------------------------------------------

def document(sweep: str, rows: Sequence[Mapping], kls: Mapping[str, Mapping], gaps: Sequence[Mapping],
             figures: Mapping[str, Sequence[tuple[str, str]]], notes: Sequence[str], everything: bool = False,
             listed_in: str | None = None, claims: Sequence[tuple] = (), late: Sequence[tuple] = ()) -> list[tuple]:
    """The report's blocks (orchestrator/report/page.py renders them): what it covers, the Claims table (`claims`,
    first), the cells it lacks (a summary above SUMMARY_ABOVE cells unless `everything`; `listed_in` the file
    listing them all, orchestrator/report/missing.py), Table 1's behaviour, the end of training (`late`), the curves
    and the final mean@k. `figures`: {"curves" | "scores": [(file name, caption)]}."""
    done = [r for r in rows if finished(r)]
    states = ", ".join(f"{n} {s}" for s, n in outcomes.counts(rows, "state", "-").items())
    blocks: list[tuple] = [("h", 1, f"Sweep {sweep}"),
                           ("p", f"{len(rows)} cells in the ledger ({states or 'none'}); {len(done)} finished "
                                 f"training, {sum(1 for r in rows if r['eval'])} evaluated."), *claims]
    if not done:
        blocks.append(("p", "No cell has finished training yet: there is nothing to compare. The cells and why "
                            "each is missing are listed below; run the report again when some have finished."))
    blocks += [("p", note) for note in notes]
    blocks.append(("h", 2, "Cells missing from this report"))
    blocks += missing.blocks(gaps, missing.sweep_cells(rows, gaps), everything, listed_in)
    if not rows:
        return [*blocks, *late]
    settings = outcomes.evaluation_settings(list(rows))
    if settings:
        blocks += [("h", 2, "Evaluated more than one way"),
                   ("p", "The cells were evaluated under these settings (each result kept, docs/orchestration.md "
                         "\"Identity\"); mean@k columns are per task and k, the newest where two settings share them."),
                   ("table", ("evaluation", "cells"), [(line, str(n)) for line, n in settings])]
    splits = outcomes.split_objectives(list(rows))
    if splits:
        blocks += [("h", 2, "Configurations trained under different gradients"),
                   ("p", "These cells share their settings but were trained by code whose loss gives another gradient "
                         "on the fingerprint's probe (trainer/objective/fingerprint.py): their seeds are not one "
                         "experiment. `orchestrate sweep ... --rerun-changed` trains the old ones again under this "
                         "code."),
                   ("table", ("configuration", "gradient", "cells", "code"),
                    [(s["config"], h, ", ".join(e["cells"]), ", ".join(e["code"]))
                     for s in splits for h, e in s["fingerprints"].items()])]
    blocks += [("h", 2, "Behaviour (Table 1)"),
               ("p", "The collapse verdicts (trainer/run/collapse.py) of each configuration's seeds, worst first, with "
                     "the step where each first held; beside them what the paper's Table 1 and section 4.1 "
                     "report for that estimator and placement."),
               ("table", ("configuration", "KL", "beta", "behaviour here", "why", "paper: gradient",
                          "paper: behaviour"),
                [(b["config"], b["family"], b["beta"], b["behaviour"], b["reason"], b["paper_gradient"],
                  b["paper_behaviour"]) for b in behaviour(rows, kls)])]
    blocks += late
    blocks += [("h", 2, "Training curves (Figures 2-4)"), ("p", f"{BAND}; beta = 0 dashed.")]
    blocks += [("img", f, c) for f, c in figures.get("curves", ())] or [
        ("p", "No curves: no cell has a metric history in MLflow or in its run directory.")]
    scores = final_scores(rows, kls)
    blocks += [("h", 2, "Final mean@k (Figures 5-6)"),
               ("p", "mean ± sd (sample, n - 1) over the seeds evaluated, their min and max, and the relative "
                     "change against the beta = 0 cell of the same model: (mean - mean_0) / mean_0.")]
    if scores:
        blocks.append(("table", ("configuration", "task@k", "mean ± sd", "min - max", "seeds", "beta = 0",
                                 "vs beta = 0"),
                       [(s["config"], outcomes.short(s["key"]), f"{number(s['mean'])} ± {number(s['sd'])}",
                         f"{number(s['min'])} - {number(s['max'])}", f"{s['n']}/{s['seeds']}",
                         number(s["reference"]), percent(s["relative"])) for s in scores]))
    else:
        blocks.append(("p", "No cell has been evaluated yet."))
    blocks += [("img", f, c) for f, c in figures.get("scores", ())]
    return blocks


def percent(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1%}"


def number(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"
