"""One orchestrator writes a sweep's ledger at a time (a submission or the watcher's poll): the lock file
`<sweep dir>/ledger/.lock`, made by O_EXCL create (atomic on NFSv3+, where flock is not honoured), holding who
has it; orchestrator/launch/ledger.py `Ledger.lock` hands it out.
"""

from __future__ import annotations

import json
import os
import socket
import time
from contextlib import contextmanager
from pathlib import Path

from record.errors import UserError
from record.files import atomic_write


class SweepBusy(UserError):
    """Another orchestrator holds the sweep's writer lock."""


@contextmanager
def writer_lock(directory: Path, sweep_dir: Path, what: str, stale_s: float = 600.0, wait_s: float = 0.0):
    """Hold the lock `directory/.lock` of the sweep at `sweep_dir`. A lock whose process is gone (same host) or
    that was not refreshed for `stale_s` seconds (another host) is taken over. A live holder is waited for up to
    `wait_s` seconds (the watcher job holds it only for one poll), then `SweepBusy`. Yields a refresh: still alive."""
    directory.mkdir(parents=True, exist_ok=True)
    path, me = directory / ".lock", {"host": socket.gethostname(), "pid": os.getpid(), "what": what}
    deadline, takeovers = time.monotonic() + wait_s, 0
    while takeovers < 3:
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            if not _stale(path, stale_s):
                if time.monotonic() < deadline:
                    time.sleep(0.5)
                    continue
                holder = _read_json(path) or {}
                raise SweepBusy(f"sweep {sweep_dir} is being handled by {holder.get('what', '?')} "
                                f"(pid {holder.get('pid')} on {holder.get('host')}); stop it, or wait for it "
                                f"(remove {path} only if that process is gone)") from None
            path.unlink(missing_ok=True)
            takeovers += 1
            continue
        with os.fdopen(fd, "w") as f:
            json.dump({**me, "at": time.time()}, f)
        break
    else:
        raise UserError(f"could not take {path}; another orchestrator keeps taking it")
    try:
        yield lambda: atomic_write(path, json.dumps({**me, "at": time.time()}))  # refresh: still alive
    finally:
        if (_read_json(path) or {}).get("pid") == me["pid"]:
            path.unlink(missing_ok=True)


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def _stale(path: Path, stale_s: float) -> bool:
    holder = _read_json(path)
    if holder is None:
        return True
    if holder.get("host") == socket.gethostname():
        try:
            os.kill(int(holder.get("pid", -1)), 0)
        except ProcessLookupError:
            return True
        except (PermissionError, ValueError, TypeError):
            pass
    return time.time() - float(holder.get("at", 0)) > stale_s
