"""Each ACTION of `orchestrate tracking` decided here, so that orchestrator/commands/tracking.py only parses,
calls and prints: `up`'s numbers checked, what `up` and `status` say, where `import` reads and writes, and what
`flush` delivered, as lines."""

from __future__ import annotations

from pathlib import Path

from orchestrator.tracking.buffer import Flushed
from orchestrator.tracking.server import State, status
from record.errors import UserError
from record.tracking.store import ImportReport, source_uri

RANGES = {"port": (65535, "a port in 1..65535"), "pg_port": (65535, "a port in 1..65535"),
          "workers": (8, "1..8 workers")}


def check_up_options(**given: int | None) -> None:
    """`--port`, `--pg-port` and `--workers` in their ranges, or one message naming the first that is not."""
    for name, value in given.items():
        high, what = RANGES[name]
        if value is not None and not 1 <= value <= high:
            raise UserError(f"--{name.replace('_', '-')} {value}: give {what}")


def up_lines(state: State, data_dir: Path) -> list[str]:
    lines = [f"URI for jobs: {state.uri()}"]
    if state.auth:
        lines.append(f"basic auth: user admin, password in {data_dir / 'tracking.json'}; jobs need "
                     f"MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD")
    return lines


def up_uri(info: dict) -> str:
    """`status --uri`: the URI, or how to start the server when it is not up."""
    if not info["up"]:
        raise UserError(f"the tracking server in {info['data_dir']} is not up; "
                        f"start it: orchestrate tracking up --data-dir {info['data_dir']}")
    return info["uri"]


def status_lines(info: dict) -> list[str]:
    lines = [f"tracking server in {info['data_dir']}: {'up' if info['up'] else 'NOT up'}"]
    lines += [f"  {key:<10} {info[key]}" for key in ("postgres", "mlflow", "artifacts", "logs") if key in info]
    if info.get("hint"):
        lines.append(info["hint"])
    if info["uri"]:
        lines += [f"URI for jobs: {info['uri']}",
                  f"  use it: tracking.tracking_uri={info['uri']} (sweep), tracking_uri: {info['uri']} (Slurm "
                  f"profile), or export MLFLOW_TRACKING_URI={info['uri']}"]
    return lines


def import_ends(source: str, to: str | None, data_dir: Path | None) -> tuple[str, str]:
    """The store `import` copies from, and the one it copies into: --to, else the --data-dir server's."""
    uri = source_uri(source)
    if uri.startswith("sqlite:///") and not Path(uri[len("sqlite:///"):]).is_file():
        raise UserError(f"{source}: no such SQLite file; give the store to copy, e.g. runs/mlflow.db")
    if to is not None:
        return uri, to
    if data_dir is None:
        raise UserError("give the target: --data-dir of a server `orchestrate tracking up` started, or --to URI")
    info = status(data_dir)
    if not info["up"]:
        raise UserError(f"the tracking server in {info['data_dir']} is not up; start it first: "
                        f"orchestrate tracking up --data-dir {info['data_dir']}")
    return uri, f"http://127.0.0.1:{info['uri'].rsplit(':', 1)[1]}"  # from here, loopback reaches any bind


def import_lines(report: ImportReport, target: str) -> list[str]:
    return [f"imported {report.runs} run(s) of {report.experiments} experiment(s) into {target}: "
            f"{report.points} metric points, {report.artifacts} artifact file(s); {report.skipped} skipped "
            f"(imported before, or the run_key is there already)", *(f"  note: {note}" for note in report.notes)]


def flush_lines(sweep: str, done: list[Flushed]) -> tuple[list[str], int]:
    """One line per cell and the total; with the events left undelivered (exit 1 when any)."""
    left = sum(cell.after for cell in done)
    total = (f"{sweep}: {sum(c.before - c.after for c in done)} event(s) delivered from {len(done)} cell(s); "
             f"{left} left undelivered" if done else f"{sweep}: nothing undelivered")
    return [*(cell.line() for cell in done), total], left
