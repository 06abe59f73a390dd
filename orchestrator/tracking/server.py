"""`orchestrate tracking up|down|status`: one `mlflow server` on PostgreSQL that a whole sweep logs into.

Everything lives in a data directory the user names: `postgres/` (the cluster, orchestrator/tracking/postgres.py),
`artifacts/` (unless `--artifacts` puts them elsewhere, e.g. on the shared filesystem), `logs/`, `pgpass`, and
`tracking.json`, the state: ports, host, pids and the URI jobs should use. `up` does only what is missing, so it is
safe to run twice, and after a crash of either process it starts just that one again.

The server binds 127.0.0.1 unless told otherwise. MLflow's server has no authentication of its own: on any
other address anyone who reaches the port can read and delete runs, unless its basic-auth app is on (`--auth`).
PostgreSQL always listens on 127.0.0.1 only; only the MLflow server talks to it.

Without PostgreSQL (none found, no --pg-bin, and no apt-get: not root, or --no-install) `up` falls back to a SQLite
file, `<data dir>/mlflow.db`, that only the server (one worker: one writer) opens; jobs still log over HTTP. It says
so, and how to get PostgreSQL without root. A data directory keeps the store it began with.
"""

from __future__ import annotations

import json
import os
import pwd
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

from orchestrator.tracking.postgres import (
    MAX_CONNECTIONS_PER_WORKER,
    NO_ROOT_HINT,
    Postgres,
    can_have_postgres,
    ensure_installed,
    free_port,
    port_free_or_fail,
    run_as_user,
    tail,
)
from record.errors import UserError
from record.files import atomic_write

STATE_FILE = "tracking.json"
SQLITE_FILE = "mlflow.db"
NETWORK_FILESYSTEMS = ("nfs", "nfs4", "lustre", "gpfs", "beegfs", "cifs", "smb3", "fuse.sshfs", "ceph", "panfs")
LOOPBACK = ("127.0.0.1", "localhost", "::1")
AUTH_WARNING = ("MLflow's server has no authentication unless its auth app is enabled: anyone who can reach "
                "{host}:{port} can read, change and delete every run. Add --auth to enable MLflow's basic-auth "
                "app, or keep the default --host 127.0.0.1.")


@dataclass
class State:
    """What `tracking.json` holds (mode 0600: with --auth it holds the admin password)."""

    host: str = "127.0.0.1"
    port: int = 5000
    pg_port: int = 0
    artifacts: str = ""
    workers: int = 4
    auth: bool = False
    admin_password: str = ""
    secret_key: str = ""  # the auth app's CSRF key: the same across restarts, so open pages stay valid
    mlflow_pid: int | None = None
    pg_bin: str = ""
    backend: str = "postgresql"  # or "sqlite": the fallback without PostgreSQL (<data dir>/mlflow.db)

    def uri(self) -> str:
        """What jobs set as MLFLOW_TRACKING_URI: a wildcard bind is reached by this machine's name."""
        host = machine_name() if self.host in ("0.0.0.0", "::", "") else self.host
        return f"http://{f'[{host}]' if ':' in host else host}:{self.port}"


def machine_name() -> str:
    """This machine's name as other nodes know it: the FQDN, or the hostname where the FQDN is only localhost."""
    fqdn = socket.getfqdn()
    return socket.gethostname() if fqdn.startswith("localhost") or fqdn in LOOPBACK else fqdn


def read_state(data_dir: Path) -> State | None:
    try:
        raw = json.loads((data_dir / STATE_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    known = {k: v for k, v in raw.items() if k in State.__dataclass_fields__}
    return State(**known)


def write_state(data_dir: Path, state: State) -> None:
    atomic_write(data_dir / STATE_FILE, json.dumps(asdict(state), indent=2) + "\n")  # mkstemp: 0600


def check_data_dir(data_dir: Path) -> None:
    """The data directory must be the caller's own, and either new, empty or one `up` made before."""
    if not data_dir.exists():
        return
    if not data_dir.is_dir():
        raise UserError(f"--data-dir {data_dir} is a file; give a directory (it is created when missing)")
    st, me = data_dir.stat(), os.geteuid()
    if st.st_uid != me:
        owner, mine = _user(st.st_uid), _user(me)
        raise UserError(f"--data-dir {data_dir} belongs to {owner}, not to you ({mine}): the tracking server's "
                        f"database and artifacts must live in a directory of your own. Give another --data-dir, "
                        f"or have {owner} run `orchestrate tracking up --data-dir {data_dir}`")
    if any(data_dir.iterdir()) and not (data_dir / STATE_FILE).exists() and not (data_dir / "postgres").exists():
        raise UserError(f"--data-dir {data_dir} holds other files and no tracking server; give a new or empty "
                        f"directory (e.g. {data_dir / 'mlflow-server'})")


def _user(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def filesystem_of(path: Path) -> str:
    """The type of the filesystem `path` lies on (the longest mount point above it in /proc/mounts), or ""."""
    best, kind = "", ""
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return ""
    for line in mounts:
        fields = line.split()
        if len(fields) > 2 and (str(path) + "/").startswith(fields[1].rstrip("/") + "/") and len(fields[1]) > len(best):
            best, kind = fields[1], fields[2]
    return kind


def sqlite_note(data_dir: Path) -> str:
    """What `up` says when it serves the SQLite fallback: that it is one, where the file is, how to do better."""
    db = data_dir / SQLITE_FILE
    note = (f"note: no PostgreSQL here, so the MLflow server keeps its runs in a SQLite file, {db}, that only the "
            f"server opens (one worker, one writer; jobs log over HTTP as usual). It is the fallback: it serializes "
            f"writes, so a large sweep logs more slowly. For PostgreSQL {NO_ROOT_HINT}; then use a new --data-dir "
            f"(this one keeps its SQLite store; `orchestrate tracking import {db} --data-dir NEW` copies its runs)")
    kind = filesystem_of(data_dir)
    if kind in NETWORK_FILESYSTEMS:
        note += (f". warning: {data_dir} is on {kind}, a network filesystem, where SQLite's locks are unreliable: "
                 f"give a --data-dir on the login node's local disk (e.g. under /tmp or /var/tmp)")
    return note


def postgres_of(data_dir: Path, state: State) -> Postgres:
    return Postgres(data_dir, state.pg_port, Path(state.pg_bin), run_as_user())


def up(data_dir: Path, *, host: str | None = None, port: int | None = None, pg_port: int | None = None,
       artifacts: Path | None = None, auth: bool | None = None, workers: int | None = None, install: bool = True,
       say=print, timeout_s: float = 180, pg_bin: Path | None = None) -> State:
    """Start what is not running (PostgreSQL, then the MLflow server) and return the state. Options left None
    keep what the data directory's state says (or the defaults); changing them on a running server is refused."""
    data_dir = data_dir.absolute()
    check_data_dir(data_dir)
    before = read_state(data_dir)
    state = before or State()
    asked = {"host": host, "port": port, "pg_port": pg_port, "auth": auth, "workers": workers,
             "artifacts": str(artifacts.absolute()) if artifacts else None}
    if before and (mlflow_alive(before) or postgres_of(data_dir, before).running()):
        changed = [f"--{k.replace('_', '-')} {v} (it runs with {getattr(before, k)})" for k, v in asked.items()
                   if v is not None and v != getattr(before, k)]
        if changed:
            raise UserError(f"the tracking server in {data_dir} is running (URI {before.uri()}); to change "
                            f"{', '.join(changed)}, run `orchestrate tracking down --data-dir {data_dir}` first")
    for key, value in asked.items():
        if value is not None:
            setattr(state, key, value)
    state.pg_port = state.pg_port or free_port()
    state.artifacts = state.artifacts or str(data_dir / "artifacts")

    if not mlflow_alive(state):  # before anything is made: a taken port costs the user nothing
        port_free_or_fail(state.port, state.host, "the MLflow server", "--port")
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o711)  # 711: as root, `postgres` must enter it
    fresh = before is None and not (data_dir / "postgres").exists()
    if state.backend == "sqlite" or (fresh and not can_have_postgres(install, pg_bin)):
        return up_sqlite(data_dir, state, say, timeout_s)
    state.pg_bin = str(ensure_installed(install, data_dir / "logs" / "apt.log", say, pg_bin=pg_bin))
    pg = postgres_of(data_dir, state)
    pg.check_reachable()
    if not pg.initialised():
        say(f"creating the PostgreSQL cluster in {pg.pgdata} (run by {pg.user})")
        pg.init()
    if pg.running():
        say(f"postgresql: already running (pid {pg.pid()}, 127.0.0.1:{pg.port})")
    else:
        pg.start()
        say(f"postgresql: started (pid {pg.pid()}, 127.0.0.1:{pg.port})")
    return _serve(data_dir, state, pg, say, timeout_s, on="")


def up_sqlite(data_dir: Path, state: State, say, timeout_s: float) -> State:
    """The fallback: `mlflow server` on `<data dir>/mlflow.db`, one worker so that one process writes the file."""
    state.backend, state.workers, state.pg_bin, state.pg_port = "sqlite", 1, "", 0
    say(sqlite_note(data_dir))
    return _serve(data_dir, state, None, say, timeout_s, on=f" on SQLite {data_dir / SQLITE_FILE}")


def _serve(data_dir: Path, state: State, pg: Postgres | None, say, timeout_s: float, on: str) -> State:
    """`mlflow server` over the store `pg` names (None: the SQLite file), started once."""
    if state.auth and not state.admin_password:
        state.admin_password, state.secret_key = secrets.token_urlsafe(16), secrets.token_hex(32)
    write_state(data_dir, state)
    if mlflow_alive(state):
        say(f"mlflow server: already running (pid {state.mlflow_pid}) at {state.uri()}")
        return state
    note = exposure_note(state.host, state.port, state.auth)
    if note:
        say(note)
    state.mlflow_pid = start_mlflow(data_dir, state, pg, timeout_s)
    write_state(data_dir, state)
    say(f"mlflow server: started (pid {state.mlflow_pid}) at {state.uri()}{on}; artifacts in {state.artifacts}")
    return state


def backend_uri(data_dir: Path, pg: Postgres | None) -> str:
    return pg.uri() if pg is not None else f"sqlite:///{data_dir / SQLITE_FILE}"


def exposure_note(host: str, port: int, auth: bool) -> str | None:
    """What to tell the user about who can reach the server: nothing on loopback."""
    if host in LOOPBACK:
        return None
    if not auth:
        return "warning: " + AUTH_WARNING.format(host=host, port=port)
    return (f"note: the server listens on {host}:{port} with MLflow's basic-auth app; jobs need "
            f"MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD")


def start_mlflow(data_dir: Path, state: State, pg: Postgres | None, timeout_s: float) -> int:
    port_free_or_fail(state.port, state.host, "the MLflow server", "--port")
    Path(state.artifacts).mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", backend_uri(data_dir, pg),
           "--artifacts-destination", state.artifacts, "--host", state.host, "--port", str(state.port),
           "--workers", str(state.workers)]
    if state.host not in LOOPBACK:
        # MLflow answers only Host headers of loopback and private addresses by default: add this machine's names.
        names = {socket.gethostname(), machine_name(), state.host, "localhost", "127.0.0.1"}
        cmd += ["--allowed-hosts", ",".join(sorted(n for name in names for n in (name, f"{name}:*")))]
    # The job runner spawns extra worker processes that nothing here uses: it would only take CPU on a login node.
    env = {**(pg.env() if pg is not None else os.environ), "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
           "MLFLOW_SQLALCHEMYSTORE_POOL_SIZE": "10",
           "MLFLOW_SQLALCHEMYSTORE_MAX_OVERFLOW": str(MAX_CONNECTIONS_PER_WORKER - 10)}
    if state.auth:
        cmd += ["--app-name", "basic-auth"]
        env["MLFLOW_AUTH_CONFIG_PATH"] = str(write_auth_config(data_dir, pg))
        env["MLFLOW_AUTH_ADMIN_PASSWORD"] = state.admin_password
        env["MLFLOW_FLASK_SERVER_SECRET_KEY"] = state.secret_key
    log = data_dir / "logs" / "mlflow.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as out:
        # Its own session: `down` ends the server and every worker it forked with one killpg.
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                start_new_session=True, cwd=data_dir)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        if healthy(f"http://127.0.0.1:{state.port}" if state.host in ("0.0.0.0", "::") else State(
                host=state.host, port=state.port).uri()):
            return proc.pid
        time.sleep(0.5)
    why = f"exited (status {proc.returncode})" if proc.poll() is not None else f"did not answer within {timeout_s:.0f}s"
    _stop_group(proc.pid)
    raise UserError(f"the MLflow server {why}; its log {log} ends:\n{tail(log)}")


def write_auth_config(data_dir: Path, pg: Postgres | None) -> Path:
    """MLflow's basic-auth settings: users in their own database beside the runs (its default is a SQLite file
    in the working directory), everyone else READ by default, the admin made on first start."""
    if pg is not None:
        pg.create_database("mlflow_auth")
    database = pg.db_uri("mlflow_auth") if pg is not None else f"sqlite:///{data_dir / 'basic_auth.db'}"
    path = data_dir / "basic_auth.ini"
    path.write_text("[mlflow]\ndefault_permission = READ\n"
                    f"database_uri = {database}\n"
                    "admin_username = admin\n"
                    "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n")
    return path


def healthy(uri: str, timeout_s: float = 3) -> bool:
    try:
        with urllib.request.urlopen(f"{uri}/health", timeout=timeout_s) as reply:
            return reply.status == 200
    except (OSError, urllib.error.URLError):
        return False


def mlflow_alive(state: State) -> bool:
    """The recorded pid is a live `mlflow server` (not a pid reused by something else)."""
    if not state.mlflow_pid:
        return False
    try:
        cmdline = Path(f"/proc/{state.mlflow_pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"mlflow" in cmdline and b"server" in cmdline


def down(data_dir: Path, say=print) -> None:
    """Stop the MLflow server, then PostgreSQL (a fast shutdown: open transactions roll back, nothing committed
    is lost). A no-op for what is already stopped."""
    data_dir = data_dir.absolute()
    state = read_state(data_dir)
    if state is None:
        say(f"no tracking server in {data_dir} (no {STATE_FILE}): nothing to stop")
        return
    if mlflow_alive(state):
        _stop_group(state.mlflow_pid)
        say(f"mlflow server: stopped (pid {state.mlflow_pid})")
    else:
        say("mlflow server: not running")
    state.mlflow_pid = None
    write_state(data_dir, state)
    if state.backend == "sqlite":
        return
    pg = postgres_of(data_dir, state)
    if pg.running():
        pg.stop()
        say("postgresql: stopped")
    else:
        say("postgresql: not running")


def _stop_group(pid: int, grace_s: float = 20) -> None:
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return
        _reap(pid)
        time.sleep(0.2)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    _reap(pid)


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)  # our own child (the same process ran up and down): no zombie left
    except ChildProcessError:
        pass


def status(data_dir: Path) -> dict:
    """What runs, and the URI jobs should use: {'up': bool, 'uri', 'postgres', 'mlflow', 'artifacts', ...}."""
    data_dir = data_dir.absolute()
    state = read_state(data_dir)
    if state is None:
        return {"up": False, "data_dir": str(data_dir), "uri": None, "postgres": "absent", "mlflow": "absent",
                "hint": f"no tracking server in {data_dir}; start one: orchestrate tracking up --data-dir {data_dir}"}
    pg = postgres_of(data_dir, state) if state.backend != "sqlite" else None
    pg_up, ml_up = pg.running() if pg is not None else True, mlflow_alive(state)
    answers = ml_up and healthy(State(host="127.0.0.1" if state.host in ("0.0.0.0", "::") else state.host,
                                      port=state.port).uri())
    return {"up": pg_up and answers, "data_dir": str(data_dir), "uri": state.uri(), "auth": state.auth,
            "postgres": (f"running (pid {pg.pid()}, 127.0.0.1:{pg.port})" if pg_up else "stopped") if pg is not None
            else f"none: the fallback SQLite store {data_dir / SQLITE_FILE}",
            "mlflow": (f"running (pid {state.mlflow_pid}), " + ("answering" if answers else "NOT answering"))
            if ml_up else "stopped",
            "artifacts": state.artifacts, "logs": str(data_dir / "logs"),
            "backend": backend_uri(data_dir, pg)}
