"""PostgreSQL for the tracking server: Debian's binaries, one cluster in `<data dir>/postgres`, listening on
127.0.0.1 only, behind a password (libpq reads it from `<data dir>/pgpass`, never from a command line).

PostgreSQL refuses to run as root: as root the cluster belongs to Debian's `postgres` user and every pg_ctl
runs through `runuser`; as anyone else it belongs to that user. No mlflow here (it is imported only under
record/).
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import socket
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

import psycopg2

from record.errors import UserError

PG_ROOT = Path("/usr/lib/postgresql")  # Debian's layout: <root>/<major>/bin; /usr/local/bin copies are not ours
PG_ROOT_ENV = "COMEDY_PG_ROOT"  # another place for Debian's layout; a tree without it makes Debian's unfindable
DB = "mlflow"  # the database, and the cluster's superuser (initdb -U): the cluster serves nothing else
# A server worker runs up to 40 requests at once (anyio's thread limit, through which MLflow's Flask app runs);
# SQLAlchemy's default pool (5 + 10 overflow) made the rest wait 30 s and fail with "QueuePool limit ... reached",
# which MLflow returns as BAD_REQUEST: 32 concurrent writers lost 640 of 51,200 points that way.
MAX_CONNECTIONS_PER_WORKER = 40
INSTALL_HINT = "install Debian's package as root: apt-get install postgresql"


NEEDED = ("initdb", "pg_ctl", "postgres")
NO_ROOT_HINT = ("without root: `conda install -c conda-forge postgresql` (or mamba/micromamba) puts initdb, pg_ctl "
                "and postgres on PATH; or give their directory with --pg-bin DIR")


def pg_root() -> Path:
    """Where Debian's layout is looked for: $COMEDY_PG_ROOT when set, else /usr/lib/postgresql."""
    return Path(os.environ.get(PG_ROOT_ENV) or PG_ROOT)


def find_bin(root: Path | None = None, path: str | None = None) -> Path | None:
    """The newest `<root>/<major>/bin` holding initdb, pg_ctl and postgres (Debian's), else the directory on PATH
    that holds all three (conda-forge's, installed without root), or None."""
    root = root if root is not None else pg_root()
    found = [d / "bin" for d in root.glob("*") if all((d / "bin" / b).is_file() for b in NEEDED)]
    best = max(found, key=lambda b: float(b.parent.name) if b.parent.name.replace(".", "").isdigit() else 0.0,
               default=None)
    if best is not None:
        return best
    for directory in (path if path is not None else os.environ.get("PATH", "")).split(os.pathsep):
        if directory and given_bin_problem(Path(directory)) is None:
            return Path(directory)
    return None


def given_bin_problem(directory: Path) -> str | None:
    """What a PostgreSQL bin directory lacks, in words; None when it holds initdb, pg_ctl and postgres."""
    missing = [b for b in NEEDED if not os.access(directory / b, os.X_OK)]
    return f"{directory} has no executable {', '.join(missing)}" if missing else None


def can_have_postgres(install: bool, pg_bin: Path | None, root: Path | None = None) -> bool:
    """Whether ensure_installed can give PostgreSQL: given, found, or installable (apt-get allowed, as root)."""
    return pg_bin is not None or find_bin(root) is not None or (install and os.geteuid() == 0)


def ensure_installed(install: bool, log: Path, say, root: Path | None = None, pg_bin: Path | None = None) -> Path:
    """The PostgreSQL binaries: `pg_bin` when given, else Debian's or those on PATH (find_bin), else Debian's
    installed with apt-get when allowed and root (like slurm/local-cluster does); otherwise one message that says
    how to install them, with root or without."""
    if pg_bin is not None:
        problem = given_bin_problem(Path(pg_bin))
        if problem:
            raise UserError(f"--pg-bin: {problem}; give the directory holding PostgreSQL's initdb, pg_ctl and "
                            f"postgres (`dirname $(which initdb)`)")
        return Path(pg_bin).absolute()
    root = root if root is not None else pg_root()
    found = find_bin(root)
    if found is not None:
        return found
    if not install or os.geteuid() != 0:
        why = "--no-install was given" if not install else "installing it needs root"
        raise UserError(f"PostgreSQL's server is not installed (no {root}/<version>/bin/postgres, no initdb on "
                        f"PATH) and {why}; {NO_ROOT_HINT}; or {INSTALL_HINT}; then run this again")
    say(f"installing Debian's postgresql with apt-get (about a minute); log: {log}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    apt = ["apt-get", "-q", "-y", "-o", "DPkg::Lock::Timeout=600"]
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as out:
        for args in (["update"], ["install", "--no-install-recommends", "postgresql"]):
            if subprocess.run(apt + args, stdout=out, stderr=subprocess.STDOUT, env=env).returncode:
                raise UserError(f"apt-get {args[0]} failed (log: {log}); {INSTALL_HINT}")
    found = find_bin(root)
    if found is None:
        raise UserError(f"apt-get installed postgresql but {root}/<version>/bin/postgres is still missing; "
                        f"see {log}")
    return found


def run_as_user() -> str:
    """Who runs PostgreSQL: the caller, or Debian's `postgres` user when the caller is root."""
    if os.geteuid() != 0:
        return pwd.getpwuid(os.geteuid()).pw_name
    try:
        return pwd.getpwnam("postgres").pw_name
    except KeyError:
        raise UserError(f"PostgreSQL will not run as root and there is no `postgres` user; {INSTALL_HINT} "
                        f"(it creates that user), or run this as a non-root user") from None


@dataclass
class Postgres:
    """The cluster in `data_dir/postgres` on 127.0.0.1:`port`, run by `user` with Debian's `bin`."""

    data_dir: Path
    port: int
    bin: Path
    user: str

    @property
    def pgdata(self) -> Path:
        return self.data_dir / "postgres"

    @property
    def passfile(self) -> Path:
        return self.data_dir / "pgpass"

    @property
    def log(self) -> Path:
        return self.data_dir / "logs" / "postgres.log"

    def uri(self) -> str:
        """The backend store URI for `mlflow server` (the password comes from PGPASSFILE). The driver is named:
        SQLAlchemy 2.1 takes a bare postgresql:// for psycopg 3, and the project ships psycopg2-binary."""
        return self.db_uri(DB)

    def db_uri(self, name: str) -> str:
        return f"postgresql+psycopg2://{DB}@127.0.0.1:{self.port}/{name}"

    def env(self) -> dict[str, str]:
        return {**os.environ, "PGPASSFILE": str(self.passfile)}

    def _cmd(self, *args: str) -> list[str]:
        as_user = ["runuser", "-u", self.user, "--"] if os.geteuid() == 0 else []
        return [*as_user, *args]

    def check_reachable(self) -> None:
        """As root, `postgres` must be able to enter every directory above the cluster: say which one it cannot."""
        if os.geteuid() == 0 and subprocess.run(self._cmd("test", "-x", str(self.data_dir))).returncode:
            closed = next((p for p in [*reversed(self.data_dir.parents), self.data_dir]
                           if not p.stat().st_mode & stat.S_IXOTH), self.data_dir)
            raise UserError(f"the `{self.user}` user, which runs PostgreSQL (it will not run as root), cannot enter "
                            f"{closed} (mode {stat.S_IMODE(closed.stat().st_mode):o}); give a --data-dir under "
                            f"directories others may enter (e.g. /srv/mlflow), or `chmod o+x {closed}`")

    def initialised(self) -> bool:
        return (self.pgdata / "PG_VERSION").is_file()

    def init(self) -> None:
        """initdb with a random password for the superuser `mlflow`; write the pgpass file that holds it."""
        password = secrets.token_hex(16)
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self.pgdata.mkdir(mode=0o700)
        pwfile = self.data_dir / ".initdb-password"
        pwfile.write_text(password + "\n")
        try:
            for path in (self.pgdata, pwfile):
                shutil.chown(path, self.user)
            os.chmod(pwfile, 0o600)
            done = subprocess.run(self._cmd(str(self.bin / "initdb"), "-D", str(self.pgdata), "-U", DB,
                                            f"--pwfile={pwfile}", "--auth=scram-sha-256", "-E", "UTF8",
                                            "--no-locale"), capture_output=True, text=True)
        finally:
            pwfile.unlink(missing_ok=True)
        if done.returncode:
            shutil.rmtree(self.pgdata, ignore_errors=True)  # a half-made cluster would block the next try
            raise UserError(f"initdb failed in {self.pgdata}:\n{(done.stdout + done.stderr)[-2000:]}")
        self.passfile.write_text(f"127.0.0.1:*:*:{DB}:{password}\n")
        os.chmod(self.passfile, 0o600)  # libpq ignores a pgpass file that others can read
        with open(self.pgdata / "postgresql.conf", "a") as conf:
            conf.write("\ninclude_if_exists = 'comedy.conf'\n")

    def running(self) -> bool:
        if not self.initialised():
            return False
        return subprocess.run(self._cmd(str(self.bin / "pg_ctl"), "-D", str(self.pgdata), "status"),
                              capture_output=True).returncode == 0

    def pid(self) -> int | None:
        try:
            return int((self.pgdata / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def start(self, timeout_s: int = 60) -> None:
        """Start the cluster and create the database when it is missing; a no-op when it runs."""
        if self.running():
            return
        port_free_or_fail(self.port, "127.0.0.1", "PostgreSQL", "--pg-port")
        # Only TCP on loopback: a socket in /var/run/postgresql is not writable by a plain user. Connections:
        # each server worker may hold MAX_CONNECTIONS_PER_WORKER (orchestrator/tracking/server.py), 8 workers at most.
        (self.pgdata / "comedy.conf").write_text("listen_addresses = '127.0.0.1'\nunix_socket_directories = ''\n"
                                                 f"max_connections = {8 * MAX_CONNECTIONS_PER_WORKER + 20}\n")
        shutil.chown(self.pgdata / "comedy.conf", self.user)
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self.log.touch()
        shutil.chown(self.log, self.user)
        done = subprocess.run(self._cmd(str(self.bin / "pg_ctl"), "-D", str(self.pgdata), "-l", str(self.log),
                                        "-o", f"-p {self.port}", "-w", "-t", str(timeout_s), "start"),
                              capture_output=True, text=True, start_new_session=True, stdin=subprocess.DEVNULL)
        if done.returncode:
            raise UserError(f"PostgreSQL did not start ({(done.stdout + done.stderr).strip()[-500:]}); "
                            f"its log {self.log} ends:\n{tail(self.log)}")
        self.create_database()

    def create_database(self, name: str = DB) -> None:
        conn = psycopg2.connect(host="127.0.0.1", port=self.port, user=DB, dbname="postgres",
                                passfile=str(self.passfile), connect_timeout=10)
        try:
            conn.autocommit = True  # CREATE DATABASE cannot run inside a transaction
            with conn.cursor() as cur:
                cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
                if cur.fetchone() is None:
                    cur.execute(f"CREATE DATABASE {name}")  # our own constant names: no quoting needed
        finally:
            conn.close()

    def stop(self) -> None:
        if self.running():
            subprocess.run(self._cmd(str(self.bin / "pg_ctl"), "-D", str(self.pgdata), "-m", "fast", "-w", "stop"),
                           capture_output=True, text=True)


def port_free_or_fail(port: int, host: str, what: str, option: str) -> None:
    """One message when something else listens on `host:port`."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as err:
            raise UserError(f"port {port} on {host} is taken ({err.strerror}), so {what} cannot listen there; "
                            f"choose another port with {option} N, or stop what uses it "
                            f"(`ss -ltnp 'sport = :{port}'` shows which program)") from None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join("    " + line for line in path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "    (no log)"
