"""`orchestrate status SWEEP [--json] [--watch]`: every cell's state from the ledger and one sacct call."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from rich.live import Live
from rich.table import Table

from orchestrator.commands.validate import console
from orchestrator.errors import UserError
from orchestrator.identity import format_value
from orchestrator.ledger import Ledger, apply_rows, attempts, cell_status, latest, to_poll
from orchestrator.slurm_query import SlurmError, available, sacct

EXAMPLES = """examples:
  orchestrate status sweeps/smoke.yaml
  orchestrate status runs/onpolicy --json > status.json
  orchestrate status runs/onpolicy --watch --interval 30

SWEEP is the sweep file or its directory (<output_root>/<sweep>). One sacct call per refresh, for every job
of the sweep at once; the ledger is only read. Columns: the axes, the cell's state, training/evaluation
attempts, the latest job id, the training step (latest checkpoint), the latest metrics from the run directory,
the collapse verdict (verdict.json), and why a cell was given up."""

METRICS = ("train/reward_mean", "train/kl_k1", "val/pass_at_1", "train/response_length")  # shown when present


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "status", help="the state of every cell of a sweep (ledger + one sacct)",
        description="Show every cell of a submitted sweep: state, attempts, job, step, metrics, collapse verdict.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_sweep_dir_argument(parser)
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument("--watch", action="store_true", help="refresh the table live until Ctrl-C")
    parser.add_argument("--interval", type=float, default=30.0, metavar="S", help="seconds between refreshes")
    parser.set_defaults(func=run)


def add_sweep_dir_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("sweep", metavar="SWEEP", help="the sweep file (sweeps/x.yaml) or its directory (runs/x)")
    parser.add_argument("overrides", nargs="*", metavar="OVERRIDE",
                        help="the overrides it was launched with, when they change its name or output_root")


def sweep_dir_of(sweep: str, overrides: list[str] | None = None) -> Path:
    """The sweep directory of a sweep file (output_root/name) or the directory itself."""
    path = Path(sweep)
    if path.is_dir():
        if not (path / "ledger").is_dir() and not (path / "manifest.json").exists():
            raise UserError(f"{path}: not a sweep directory (no ledger/ or manifest.json); give the sweep file or "
                            f"<output_root>/<sweep name>")
        return path.absolute()
    from orchestrator.sweep import load_sweep

    loaded = load_sweep(path, overrides or [])
    return (Path(loaded.spec.output_root) / loaded.name).absolute()


def current_records(sweep_dir: Path) -> dict[str, dict]:
    """The ledger's records with Slurm's current states applied in memory (one sacct; nothing written)."""
    ledger = Ledger(sweep_dir)
    if not ledger.exists():
        raise UserError(f"{sweep_dir}: nothing submitted yet (no ledger); run `orchestrate sweep` first")
    records = ledger.records()
    ids = [j for r in records.values() for j in to_poll(r) if _is_slurm(r)]
    if ids and available():
        try:
            rows = sacct(ids)
        except SlurmError as err:
            raise UserError(f"cannot read job states: {err}") from None
        for record in records.values():
            apply_rows(record, rows)
    return records


def _is_slurm(record: dict) -> bool:
    return all(j.get("executor", "slurm") == "slurm" for j in record["jobs"])


def run_dir_facts(run_dir: Path) -> dict:
    """What the run directory says: step (latest checkpoint), latest metrics, verdict, evaluation result."""
    facts: dict = {"step": None, "metrics": {}, "verdict": None, "eval": {}}
    latest_ckpt = _read(run_dir / "checkpoints" / "latest.json")
    if latest_ckpt:
        facts["step"] = latest_ckpt.get("step")
        state = _read(run_dir / "checkpoints" / str(latest_ckpt.get("tag")) / "state.json") or {}
        history = (state.get("collapse") or {}).get("history", {})
        facts["metrics"] = {k: points[-1][1] for k, points in history.items() if points}
    verdict = _read(run_dir / "verdict.json")
    facts["verdict"] = verdict.get("verdict") if verdict else None
    result = (_read(run_dir / "eval_result.json") or {}).get("result")
    if isinstance(result, dict):
        facts["eval"] = {k: v for k, v in result.items() if isinstance(v, (int, float)) and k.startswith("eval/")}
    return facts


def _read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def rows(records: dict[str, dict]) -> list[dict]:
    out = []
    for record in sorted(records.values(), key=lambda r: r["name"]):
        train, ev = latest(record, "train"), latest(record, "eval")
        job = ev if train and train["state"] == "COMPLETED" and ev and ev["job_id"] else train
        final = record.get("final") or {}
        out.append({"run_key": record["run_key"], "name": record["name"], "axes": record["axes"],
                    "state": cell_status(record), "train_attempts": len(attempts(record, "train")),
                    "eval_attempts": len(attempts(record, "eval")), "job_id": job["job_id"] if job else None,
                    "job_state": job["state"] if job else None, **run_dir_facts(Path(record["run_dir"])),
                    "reason": final.get("reason") if final.get("status") != "completed" else None})
    return out


def table(sweep_dir: Path, data: list[dict]) -> Table:
    axes = list(dict.fromkeys(k for row in data for k in row["axes"]))
    metrics = [m for m in METRICS if any(m in row["metrics"] for row in data)]
    evals = sorted({k for row in data for k in row["eval"]})[:3]
    t = Table(title=f"{sweep_dir.name}: {len(data)} cells ({time.strftime('%H:%M:%S')})")
    for column in ("cell", *axes, "state", "attempts", "job", "step", *metrics, *evals, "verdict", "why"):
        t.add_column(column, overflow="fold")
    for row in data:
        t.add_row(row["name"], *(format_value(row["axes"].get(a, "")) for a in axes), row["state"],
                  f"{row['train_attempts']}/{row['eval_attempts']}", row["job_id"] or "-",
                  "-" if row["step"] is None else str(row["step"]),
                  *(_num(row["metrics"].get(m)) for m in metrics), *(_num(row["eval"].get(e)) for e in evals),
                  row["verdict"] or "-", row["reason"] or "")
    return t


def _num(value) -> str:
    return "-" if value is None else f"{value:.4g}"


def run(args: argparse.Namespace) -> int:
    sweep_dir, out = sweep_dir_of(args.sweep, args.overrides), console()
    if args.json:
        print(json.dumps(rows(current_records(sweep_dir)), indent=1, default=str))
        return 0
    if not args.watch:
        out.print(table(sweep_dir, rows(current_records(sweep_dir))))
        return 0
    with Live(table(sweep_dir, rows(current_records(sweep_dir))), console=out, auto_refresh=False) as live:
        while True:
            time.sleep(args.interval)
            live.update(table(sweep_dir, rows(current_records(sweep_dir))), refresh=True)
