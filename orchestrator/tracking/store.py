"""A sweep's tracking stores, the login node's half (why two halves: record/tracking/__init__.py): before a sweep
submits anything, can its jobs' stores be reached (plain HTTP, or TCP for a database), and would its jobs write a
SQLite store directly from compute nodes? A fresh SQLite store gets its schema here too, through
record/tracking/store.py, MLflow's half.

A job whose server is down does not fail (it buffers, record/tracking/buffer.py), so a wrong URI would
only show hours later as runs missing from the UI. Checking at submission costs one request per store."""

from __future__ import annotations

import base64
import os
import socket
import urllib.error
import urllib.request
from collections.abc import Iterable
from urllib.parse import urlsplit

from record.errors import UserError
from record.tracking.store import ensure_store
from record.tracking.tracker import default_tracking_uri

FIX = ("start the server (`orchestrate tracking up --data-dir DIR`; `orchestrate tracking status` prints its URI) "
       "or fix the URI: tracking.tracking_uri in the sweep, tracking_uri in the Slurm profile, or MLFLOW_TRACKING_URI")


def job_uris(configured: Iterable[str]) -> dict[str, str]:
    """{uri: where it comes from} for the cells' configured URIs; an empty one means the job's environment
    (MLFLOW_TRACKING_URI, which sbatch passes on), else the local SQLite default, which needs no check."""
    out: dict[str, str] = {}
    for uri in configured:
        if uri:
            out.setdefault(uri, "tracking.tracking_uri")
        elif os.environ.get("MLFLOW_TRACKING_URI"):
            out.setdefault(os.environ["MLFLOW_TRACKING_URI"], "MLFLOW_TRACKING_URI")
    return out


def problems(uris: dict[str, str], timeout_s: float = 5) -> list[str]:
    """One line per store the jobs could not use, each with its fix; [] when every one answers."""
    out = []
    for uri, source in uris.items():
        scheme = urlsplit(uri).scheme
        if scheme in ("http", "https"):
            why = _http_problem(uri, timeout_s)
        elif scheme.split("+")[0] in ("postgresql", "mysql", "mssql"):
            why = _tcp_problem(uri, timeout_s)
        else:
            why = None  # a file or sqlite store lives where the job runs: nothing to reach from here
        if why:
            out.append(f"tracking store {uri} (from {source}) {why}")
    return out


def _http_problem(uri: str, timeout_s: float) -> str | None:
    base = uri.rstrip("/")
    try:
        urllib.request.urlopen(f"{base}/health", timeout=timeout_s).close()
    except urllib.error.HTTPError as err:
        return f"answers /health with HTTP {err.code}: is it an MLflow server? {FIX}"
    except (OSError, ValueError) as err:
        return f"is unreachable ({getattr(err, 'reason', err)}); {FIX}"
    # /health needs no login; the API may: a server with basic auth refuses jobs that bring no credentials.
    request = urllib.request.Request(f"{base}/api/2.0/mlflow/experiments/search?max_results=1",
                                     headers=_auth_header())
    try:
        urllib.request.urlopen(request, timeout=timeout_s).close()
    except urllib.error.HTTPError as err:
        if err.code in (401, 403):
            return (f"refuses the jobs' requests (HTTP {err.code}): export MLFLOW_TRACKING_USERNAME and "
                    f"MLFLOW_TRACKING_PASSWORD (they reach the jobs through sbatch's environment)")
        return f"answers its API with HTTP {err.code}; its log says why (<data dir>/logs/mlflow.log)"
    except (OSError, ValueError) as err:
        return f"is unreachable ({getattr(err, 'reason', err)}); {FIX}"
    return None


def _auth_header() -> dict[str, str]:
    user, password = os.environ.get("MLFLOW_TRACKING_USERNAME"), os.environ.get("MLFLOW_TRACKING_PASSWORD")
    if user and password:
        return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}
    if os.environ.get("MLFLOW_TRACKING_TOKEN"):
        return {"Authorization": f"Bearer {os.environ['MLFLOW_TRACKING_TOKEN']}"}
    return {}


def _tcp_problem(uri: str, timeout_s: float) -> str | None:
    parts = urlsplit(uri)
    try:
        port = parts.port or {"postgresql": 5432, "mysql": 3306, "mssql": 1433}[parts.scheme.split("+")[0]]
        socket.create_connection((parts.hostname or "127.0.0.1", port), timeout=timeout_s).close()
    except (OSError, ValueError) as err:
        return f"is unreachable ({getattr(err, 'strerror', None) or err}); {FIX}"
    return None


def check_stores(configured: Iterable[str]) -> None:
    """Every tracking store the jobs would log into answers, or one message and nothing written or submitted; a
    fresh SQLite store gets its schema here, once, instead of being raced for by the first jobs."""
    configured = list(configured)
    found = problems(job_uris(configured))
    if found:
        raise UserError("nothing written, nothing submitted: " + (found[0] if len(found) == 1 else "".join(
            f"\n  - {p}" for p in found)))
    for uri in {uri or default_tracking_uri() for uri in configured}:
        ensure_store(uri)


def sqlite_written_by_jobs(configured: Iterable[str | None]) -> list[str]:
    """One problem when the jobs of a Slurm sweep would write a SQLite store directly (the caller asks only where
    the profile does not allow it: slurm/profiles/*.yaml `site.sqlite_jobs`), naming the two ways out."""
    files = sorted({uri or default_tracking_uri() for uri in configured} - {None})
    files = [uri for uri in files if uri.startswith("sqlite:")]
    if not files:
        return []
    return [f"tracking: the jobs would write the SQLite store {files[0]}"
            f"{f' (and {len(files) - 1} more)' if len(files) > 1 else ''} directly from compute nodes, where "
            f"concurrent writers over a shared filesystem lose writes (docs/tracking.md). Either serve it: "
            f"`orchestrate tracking up` on the login node (PostgreSQL from PATH or --pg-bin, else MLflow over a "
            f"SQLite file on its local disk: one writer, the server), then set tracking_uri in the Slurm profile or "
            f"MLFLOW_TRACKING_URI to the URL it prints; or, where every job runs on this one machine's local disk "
            f"(the local cluster), set site.sqlite_jobs: true in the profile"]
