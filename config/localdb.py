"""The embedded PostgreSQL: a private cluster in an ignored folder of the checkout.

Used when DATABASE_URL is not set. `ensure_cluster()` is idempotent and cheap when the
cluster is already up (a pid-file read and one TCP connect), and safe to call from several
processes at once (a file lock serialises initdb/start).
"""

from __future__ import annotations

import fcntl
import glob
import hashlib
import os
import pwd
import shutil
import socket
import subprocess
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
DB_NAME = "reckon"
DB_USER = "postgres"
DEBIAN_BINDIRS = "/usr/lib/postgresql/*/bin"


class LocalDatabaseError(RuntimeError):
    pass


def find_bindir() -> Path:
    """The folder holding initdb and pg_ctl: PATH first, then Debian's versioned folders."""
    explicit = os.environ.get("RECKON_PG_BINDIR")
    candidates = [Path(explicit)] if explicit else []
    on_path = shutil.which("pg_ctl")
    if on_path:
        candidates.append(Path(on_path).resolve().parent)
    candidates += [Path(p) for p in sorted(glob.glob(DEBIAN_BINDIRS), reverse=True)]
    for folder in candidates:
        if (folder / "initdb").exists() and (folder / "pg_ctl").exists() and (folder / "postgres").exists():
            return folder
    raise LocalDatabaseError(
        "Reckon needs PostgreSQL. Either set DATABASE_URL=postgresql://user:pass@host:5432/reckon, "
        "or install the PostgreSQL server binaries (Debian: apt-get install postgresql) so that "
        "initdb and pg_ctl are on PATH or under /usr/lib/postgresql/<version>/bin."
    )


def _as_postgres() -> list[str]:
    """PostgreSQL refuses to run as root: drop to the `postgres` user when we are root."""
    if os.geteuid() != 0:
        return []
    try:
        pwd.getpwnam("postgres")
    except KeyError as exc:
        raise LocalDatabaseError(
            "Running as root, and there is no `postgres` user to run the local PostgreSQL as. "
            "Create one (useradd -r postgres) or set DATABASE_URL."
        ) from exc
    return ["runuser", "-u", "postgres", "--"]


def _cluster_dir() -> Path:
    """`.pgdata/` in the checkout, unless the `postgres` user cannot reach it (a 0700 parent)."""
    preferred = Path(os.environ.get("RECKON_PGDATA_DIR", BASE_DIR / ".pgdata"))
    if os.geteuid() != 0 or _postgres_can_enter(preferred.parent):
        return preferred
    digest = hashlib.sha1(str(BASE_DIR).encode()).hexdigest()[:10]  # nosec B324  # names a folder, not a security use
    return Path("/var/tmp") / f"reckon-pgdata-{digest}"  # nosec B108  # dev-only embedded cluster, which trusts every local user anyway (trust auth on 127.0.0.1); production sets DATABASE_URL


def _postgres_can_enter(folder: Path) -> bool:
    probe = subprocess.run(["runuser", "-u", "postgres", "--", "test", "-x", str(folder)])  # nosec B603, B607  # runuser from root's PATH, fixed argv; no shell, no outside input
    return probe.returncode == 0


def _port_for(folder: Path) -> int:
    """A port derived from the folder, so two checkouts on one machine do not collide."""
    configured = os.environ.get("RECKON_PG_PORT")
    if configured:
        return int(configured)
    digest = int(hashlib.sha1(str(folder).encode()).hexdigest(), 16)  # nosec B324  # derives a port number, not a security use
    return 20000 + digest % 10000


def _accepting(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


class Cluster:
    """A private PostgreSQL cluster in `folder`, listening on 127.0.0.1:`port` only."""

    def __init__(self, folder: Path, port: int):
        self.folder, self.port = Path(folder), port
        self.data = self.folder / "data"

    def settings(self, name: str = DB_NAME) -> dict:
        return {"HOST": "127.0.0.1", "PORT": str(self.port), "NAME": name, "USER": DB_USER, "PASSWORD": ""}  # nosec B105  # the embedded cluster uses trust auth on 127.0.0.1: there is no password

    def url(self, name: str = DB_NAME) -> str:
        return f"postgresql://{DB_USER}@127.0.0.1:{self.port}/{name}"

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists() and _accepting(self.port)

    def ensure(self, database: str = DB_NAME) -> dict:
        """Create on first use, start if stopped, create `database`; cheap when already up."""
        if self.running():
            return self.settings(database)
        bindir, prefix = find_bindir(), _as_postgres()
        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.folder / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if os.geteuid() == 0:
                shutil.chown(self.folder, "postgres", "postgres")
            if not (self.data / "PG_VERSION").exists():
                initdb = [str(bindir / "initdb"), "-D", str(self.data), "-U", DB_USER, "-A", "trust"]
                _run(prefix + initdb + ["-E", "UTF8", "--locale=C.UTF-8", "--no-sync"], "initdb")
            if _accepting(self.port) and not (self.data / "postmaster.pid").exists():
                raise LocalDatabaseError(
                    f"port {self.port} is taken by a PostgreSQL that is not this checkout's cluster "
                    f"({self.data}); stop it, or set RECKON_PG_PORT to a free port"
                )
            if not _accepting(self.port):
                self.start()
            _ensure_database(self.port, database)
        return self.settings(database)

    def create_database(self, name: str) -> None:
        _ensure_database(self.port, name)

    def start(self) -> None:
        options = (f"-c listen_addresses=127.0.0.1 -p {self.port} -c unix_socket_directories='' "
                   "-c max_connections=200")
        command = [str(find_bindir() / "pg_ctl"), "-D", str(self.data), "-l", str(self.folder / "server.log"),
                   "-w", "-t", "30", "-o", options, "start"]
        _run(_as_postgres() + command, "pg_ctl start")

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            command = [str(find_bindir() / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop"]
            _run(_as_postgres() + command, "pg_ctl stop")

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.data / "postmaster.pid").read_text().split()[0])
        except (FileNotFoundError, ValueError, IndexError):
            return None


def default_cluster() -> Cluster:
    folder = _cluster_dir()
    return Cluster(folder, _port_for(folder))


def ensure_cluster() -> dict:
    """Start (and on first use create) the local cluster; return Django connection settings."""
    return default_cluster().ensure()


def stop_cluster() -> None:
    default_cluster().stop()


def _ensure_database(port: int, name: str = DB_NAME) -> None:
    import psycopg

    try:
        with psycopg.connect(
            host="127.0.0.1", port=port, user=DB_USER, dbname="postgres", autocommit=True, connect_timeout=10
        ) as conn:
            if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
                conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.Error as exc:
        raise LocalDatabaseError(f"cannot prepare the local PostgreSQL on port {port}: {exc}") from exc


def _run(command: list[str], what: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True)  # nosec B603  # argv built in this module (initdb, pg_ctl); no shell, no outside input
    if done.returncode != 0:
        raise LocalDatabaseError(f"{what} failed ({done.returncode}): {done.stderr or done.stdout}")
