"""The tracking buffer: events not yet delivered to MLflow, on disk in the run directory, replayed in order (by the
job's tracker; what a finished job left, by the login node's half, orchestrator/tracking/buffer.py).

No mlflow import here: this is plain files and the rules for telling "the store is unreachable, retry" from "the
request was wrong".
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterable
from pathlib import Path

from record.files import atomic_write
from record.rundir import RunDir

log = logging.getLogger("record.tracking.tracker")

BATCH_LIMITS = {"metrics": 1000, "params": 100, "tags": 100}  # MLflow's per-request limits (utils/validation.py)


_TRANSIENT = {"ConnectionError", "Timeout", "ConnectTimeout", "ReadTimeout", "RetryError", "MaxRetryError",
              "NewConnectionError", "ProtocolError", "OperationalError"}


def is_transient(exc: BaseException) -> bool:
    """True when `exc` says the store could not be reached (retry later), False when the request was wrong.

    MLflow wraps a failed HTTP call in a plain MlflowException, raised inside the `except`, so the cause is
    in the exception chain; matching class names there covers requests, urllib3 and sqlalchemy alike.
    """
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, (ConnectionError, TimeoutError)) or type(exc).__name__ in _TRANSIENT:
            return True
        if getattr(exc, "error_code", None) in ("TEMPORARILY_UNAVAILABLE", "REQUEST_LIMIT_EXCEEDED"):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


class OfflineBuffer:
    """Events not yet delivered, on disk, so that an outage, a crash or a requeue loses none of them.

    `tracking_buffer.jsonl`: one json object per event, appended with a single write and fsynced, in order.
    `tracking_ledger.jsonl`: the metric points (key, step) a replay has delivered, so a replay cut short
    never sends a point twice. Both files are removed once a replay has delivered everything.
    One writer per run directory (the job); not safe for two processes at once.
    """

    def __init__(self, run: RunDir | str | os.PathLike):
        run = run if isinstance(run, RunDir) else RunDir(run)
        self.dir, self.path, self.ledger_path = run.path, run.tracking_buffer, run.tracking_ledger
        for path in (self.path, self.ledger_path):
            # A crash mid-write leaves a torn last line; end it so the next event starts on a line of its own.
            if path.exists() and path.stat().st_size and not path.read_bytes().endswith(b"\n"):
                _append_line(path, "")

    def append(self, event: dict) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        _append_line(self.path, json.dumps(event, sort_keys=True))

    def events(self) -> list[dict]:
        return _read_lines(self.path)

    def __len__(self) -> int:
        return len(self.events())

    def replay(self, send: Callable[[dict], None],
               already_logged: Callable[[set[str]], set[tuple[str, int]]] | None = None) -> int:
        """Send every buffered event in order, then clear; return how many requests it took.

        Consecutive metric events are merged (up to MLflow's 1000 per request). A point whose (key, step) is
        in the ledger, in `already_logged(keys)` (what the store has) or earlier in the buffer is not sent.
        If `send` raises, the error propagates and what was not delivered stays buffered.
        """
        events = self.events()
        done = {(k, s) for line in _read_lines(self.ledger_path) for k, s in line["points"]}
        if already_logged is not None:
            done |= already_logged({p[0] for e in events if e["kind"] == "metrics" for p in e["points"]})
        requests = 0
        for event in _merge_metrics(events):
            if event["kind"] == "metrics":
                points = []
                for point in event["points"]:
                    if (point[0], point[2]) not in done:
                        done.add((point[0], point[2]))
                        points.append(point)
                if not points:
                    continue
                send({"kind": "metrics", "points": points})
                _append_line(self.ledger_path, json.dumps({"points": [[p[0], p[2]] for p in points]}))
            else:
                send(event)
            requests += 1
        self.clear()
        return requests

    def take(self, kind: str) -> list[dict]:
        """Remove the events of `kind` from the buffer (rewritten whole, atomically) and return them."""
        events = self.events()
        taken = [e for e in events if e["kind"] == kind]
        if taken:
            atomic_write(self.path, "".join(json.dumps(e, sort_keys=True) + "\n" for e in events if e["kind"] != kind))
        return taken

    def clear(self) -> None:
        # Buffer first: a crash between the two leaves a ledger without a buffer, which is harmless.
        self.path.unlink(missing_ok=True)
        self.ledger_path.unlink(missing_ok=True)


def _append_line(path: Path, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def _read_lines(path: Path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            log.warning("skipping a torn line in %s (a crash mid-write): %.80r", path, line)
    return out


def _merge_metrics(events: list[dict]) -> Iterable[dict]:
    batch: list = []
    for event in events:
        if event["kind"] == "metrics" and len(batch) + len(event["points"]) <= BATCH_LIMITS["metrics"]:
            batch.extend(event["points"])
            continue
        if batch:
            yield {"kind": "metrics", "points": batch}
        batch = list(event["points"]) if event["kind"] == "metrics" else []
        if event["kind"] != "metrics":
            yield event
    if batch:
        yield {"kind": "metrics", "points": batch}
