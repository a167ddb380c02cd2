"""The embedded PostgreSQL: a private cluster in an ignored folder of the checkout.

Used when DATABASE_URL is not set, with RECKON_DEBUG=true (or RECKON_EMBEDDED_DB=true). The
settings only read where it is (`connection_settings()`, no process started on import); the first
connection a process opens starts it (config/embedded_db) and makes the process one of its users (a
shared lock on `<cluster>/.users`), so `make run` stops a cluster it started only when nobody else
uses it (`stop_unless_used()`).
`ensure_cluster()` is idempotent and cheap when the cluster is already up (a pid-file read, a look
at pg_hba.conf and the password file, one TCP connect), and safe to call from several processes
at once (a file lock serialises initdb, start and upgrade).

Who may connect. The server listens on 127.0.0.1 only, with no unix socket, and takes SCRAM
(scram-sha-256) password logins only: with `trust`, as the first clusters were made, every local
user was its superuser. The password is generated on first use and kept in `<cluster>/password`,
mode 0600, owned by the user running Reckon, whose processes read it to connect; the server never
reads it (it keeps only the SCRAM verifier). Run as root, PostgreSQL runs as `postgres` and the
cluster folder belongs to `postgres`, so the file is opened refusing symlinks, hard links and any
owner but us: that account cannot make root read another file in its place. Passwords over TCP
rather than peer authentication on a private socket because everything already speaks TCP (the
DATABASE_URL handed to child processes, pg_dump, pgbench), and peer authentication would need an
ident map from root, or each developer, to `postgres`.

A cluster made by the old code (`-A trust`) is upgraded in place on first use: the password set
(as a SCRAM verifier computed here, so it appears in no statement), pg_hba.conf rewritten, the
configuration reloaded; its data stays.
"""

from __future__ import annotations

import fcntl
import glob
import grp
import hashlib
import os
import pwd
import secrets
import shutil
import socket
import stat
import subprocess
import time
from pathlib import Path
from urllib.parse import quote

from config.paths import PROJECT_DIR

DB_NAME = "reckon"
DB_USER = "postgres"
DEBIAN_BINDIRS = "/usr/lib/postgresql/*/bin"
USERS_FILE = ".users"  # locked (shared) by every process using the cluster
PASSWORD_FILE = "password"  # nosec B105  # the name of the file that holds the password, not a password
HBA = """# Written by Reckon (config/localdb.py): SCRAM password logins over 127.0.0.1, nothing else.
# TYPE  DATABASE  USER  ADDRESS       METHOD
host    all       all   127.0.0.1/32  scram-sha-256
"""


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


def _postgres_ids() -> tuple[int, int] | None:
    """(uid, gid) of the `postgres` user the cluster runs as when we are root; None otherwise."""
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam("postgres")
    except KeyError as exc:
        raise LocalDatabaseError(
            "Running as root, and there is no `postgres` user to run the local PostgreSQL as. "
            "Create one (useradd -r postgres) or set DATABASE_URL."
        ) from exc
    return entry.pw_uid, entry.pw_gid


def _as_postgres() -> list[str]:
    """PostgreSQL refuses to run as root: drop to the `postgres` user when we are root."""
    return ["runuser", "-u", "postgres", "--"] if _postgres_ids() else []


def _cluster_dir() -> Path:
    """`.pgdata/` in the checkout, unless the `postgres` user cannot reach it (a 0700 parent)."""
    preferred = Path(os.environ.get("RECKON_PGDATA_DIR", PROJECT_DIR / ".pgdata"))
    if os.geteuid() != 0 or _postgres_can_enter(preferred.parent):
        return preferred
    digest = hashlib.sha1(str(PROJECT_DIR).encode()).hexdigest()[:10]  # nosec B324  # names a folder, not a security use
    return Path("/var/tmp") / f"reckon-pgdata-{digest}"  # nosec B108  # dev-only embedded cluster; private_folder() refuses a symlink or another user's folder there, and logins need the cluster's password (scram-sha-256); production sets DATABASE_URL


def private_folder(folder: Path) -> None:
    """Make `folder` the cluster's own: create it (0700), or take an existing one only if it is a
    real folder, not a symlink, owned by us (or by `postgres` when we are root); then hand it to
    `postgres` when root. The fallback in /var/tmp has a predictable name: whatever someone else
    put there must not make root chown, or write into, a place of their choosing."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as exc:  # ELOOP: a symlink; ENOTDIR: a file
        raise LocalDatabaseError(
            f"refusing to use {folder} for the local PostgreSQL: it is not a plain folder ({exc.strerror}). "
            "Remove it, or set RECKON_PGDATA_DIR to another folder."
        ) from exc
    try:
        owner, postgres = os.fstat(fd).st_uid, _postgres_ids()
        if owner != os.geteuid() and not (postgres and owner == postgres[0]):
            raise LocalDatabaseError(
                f"refusing to use {folder} for the local PostgreSQL: it belongs to uid {owner}, not to us. "
                "Remove it, or set RECKON_PGDATA_DIR to another folder."
            )
        if postgres:
            os.fchown(fd, *postgres)
        os.fchmod(fd, 0o700)
    finally:
        os.close(fd)


def _write_file(path: Path, text: str, *, owner: tuple[int, int] | None = None) -> None:
    """Replace `path` atomically with a new 0600 file: created afresh (never through a symlink
    or into someone else's file), then renamed over the old one."""
    temporary = path.with_name(f".{path.name}.new")
    temporary.unlink(missing_ok=True)  # a leftover of a crash (a symlink is removed, not followed)
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "w") as out:
            if owner:
                os.fchown(out.fileno(), *owner)
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def _postgres_can_enter(folder: Path) -> bool:
    """Can `postgres` pass through every folder down to `folder`? Read from the permission bits (no
    process: the settings call this on import), as the kernel checks them, ACLs aside."""
    entry = pwd.getpwnam("postgres")
    groups = {entry.pw_gid} | {g.gr_gid for g in grp.getgrall() if entry.pw_name in g.gr_mem}
    for step in [folder, *folder.parents]:
        try:
            info = os.stat(step)
        except OSError:
            return False
        if info.st_uid == entry.pw_uid:
            allowed = info.st_mode & stat.S_IXUSR
        elif info.st_gid in groups:
            allowed = info.st_mode & stat.S_IXGRP
        else:
            allowed = info.st_mode & stat.S_IXOTH
        if not allowed:
            return False
    return True


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
        self.started = False  # by this object's ensure(): its owner may stop it when done

    def settings(self, name: str = DB_NAME) -> dict:
        return {"HOST": "127.0.0.1", "PORT": str(self.port), "NAME": name, "USER": DB_USER,
                "PASSWORD": self.password()}

    def url(self, name: str = DB_NAME) -> str:
        return f"postgresql://{DB_USER}:{quote(self.password(), safe='')}@127.0.0.1:{self.port}/{name}"

    def client_env(self) -> dict:
        """Environment for PostgreSQL's own tools (pg_dump, pgbench) connecting to this cluster."""
        return {"PGPASSWORD": self.password()}

    def password(self) -> str:
        path = self.folder / PASSWORD_FILE
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            raise LocalDatabaseError(
                f"the local PostgreSQL's password file {path} is missing, and the cluster accepts no login "
                f"without it. Restore it, or remove {self.folder} to start over with an empty database."
            ) from None
        except OSError as exc:  # ELOOP: a symlink
            raise LocalDatabaseError(f"refusing to read {path}: {exc.strerror}") from exc
        with os.fdopen(fd) as source:
            info = os.fstat(source.fileno())
            if (not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid() or info.st_nlink != 1
                    or info.st_mode & 0o077):
                raise LocalDatabaseError(
                    f"refusing to read {path}: it must be a plain file of ours, readable by us alone (0600)")
            return source.read().strip()

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists() and _accepting(self.port)

    def trusting(self) -> bool:
        """Does pg_hba.conf still let a login in without a password (a cluster of the old code)?"""
        try:
            rules = (self.data / "pg_hba.conf").read_text()
        except FileNotFoundError:
            return False
        return any("trust" in line.split("#", 1)[0].split() for line in rules.splitlines())

    def ensure(self, database: str = DB_NAME) -> dict:
        """Create on first use, upgrade a trusting one, start if stopped, create `database`;
        cheap when already up."""
        if self.running() and not self.trusting():
            return self.settings(database)
        bindir = find_bindir()
        private_folder(self.folder)
        lock = os.open(self.folder / ".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not (self.data / "PG_VERSION").exists():
                self._initdb(bindir)
            if _accepting(self.port) and not (self.data / "postmaster.pid").exists():
                raise LocalDatabaseError(
                    f"port {self.port} is taken by a PostgreSQL that is not this checkout's cluster "
                    f"({self.data}); stop it, or set RECKON_PG_PORT to a free port"
                )
            if not _accepting(self.port):
                self.start()
                self.started = True
            if self.trusting():
                self._require_password()
            self.create_database(database)
        finally:
            os.close(lock)
        return self.settings(database)

    def _initdb(self, bindir: Path) -> None:
        """A new cluster whose superuser has a fresh password, and pg_hba.conf that requires it."""
        password = secrets.token_urlsafe(32)
        _write_file(self.folder / PASSWORD_FILE, password)
        # initdb runs as `postgres` when we are root and cannot read our 0600 file: it gets a copy
        # of its own for the moment it runs.
        pwfile = self.folder / ".initdb-password"
        _write_file(pwfile, password, owner=_postgres_ids())
        try:
            initdb = [str(bindir / "initdb"), "-D", str(self.data), "-U", DB_USER, "-A", "scram-sha-256",
                      f"--pwfile={pwfile}", "-E", "UTF8", "--locale=C.UTF-8", "--no-sync"]
            _run(_as_postgres() + initdb, "initdb")
        finally:
            pwfile.unlink(missing_ok=True)
        _write_file(self.data / "pg_hba.conf", HBA, owner=_postgres_ids())

    def _require_password(self) -> None:
        """Upgrade a running cluster made with `-A trust`: set the password, rewrite pg_hba.conf,
        reload, and wait until a login without the password is refused."""
        import psycopg
        from psycopg import sql

        path = self.folder / PASSWORD_FILE
        if not os.path.lexists(path):  # an upgrade interrupted after this step reuses its password
            _write_file(path, secrets.token_urlsafe(32))
        password = self.password()
        try:
            with psycopg.connect(host="127.0.0.1", port=self.port, user=DB_USER, dbname="postgres",
                                 password=password, autocommit=True, connect_timeout=10) as conn:
                verifier = conn.pgconn.encrypt_password(password.encode(), DB_USER.encode(), b"scram-sha-256")
                conn.execute(sql.SQL("ALTER ROLE {} PASSWORD {}").format(
                    sql.Identifier(DB_USER), sql.Literal(verifier.decode())))
                _write_file(self.data / "pg_hba.conf", HBA, owner=_postgres_ids())
                conn.execute("SELECT pg_reload_conf()")
        except psycopg.Error as exc:
            raise LocalDatabaseError(f"cannot upgrade the local PostgreSQL on port {self.port} to password "
                                     f"logins: {exc}") from exc
        deadline = time.monotonic() + 10
        while self.accepts_without_password():
            if time.monotonic() > deadline:
                raise LocalDatabaseError(f"the local PostgreSQL still lets logins in without a password after "
                                         f"pg_hba.conf was rewritten; see {self.folder / 'server.log'}")
            time.sleep(0.05)  # the postmaster applies the reload on its own, moments later

    def accepts_without_password(self) -> bool:
        """Try to log in with no password at all (none from PGPASSWORD or ~/.pgpass either)."""
        import psycopg

        try:
            psycopg.connect(host="127.0.0.1", port=self.port, user=DB_USER, dbname="postgres", password="",  # nosec B106  # a probe: a login with no password must be refused
                            passfile=str(self.folder / "no-passfile"), connect_timeout=5).close()
        except psycopg.OperationalError:
            return False
        return True

    def create_database(self, name: str) -> None:
        import psycopg

        try:
            with psycopg.connect(host="127.0.0.1", port=self.port, user=DB_USER, dbname="postgres",
                                 password=self.password(), autocommit=True, connect_timeout=10) as conn:
                if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
                    conn.execute(f'CREATE DATABASE "{name}"')
        except psycopg.Error as exc:
            raise LocalDatabaseError(f"cannot prepare the local PostgreSQL on port {self.port}: {exc}") from exc

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

    # Every process that uses the cluster through ensure_cluster() holds a shared lock on this file
    # for its life (the kernel drops it when the process ends, however it ends): a reference count
    # that cannot be left stale by a crash.
    def hold(self) -> int:
        """A shared lock on the users file; the descriptor that holds it (closing it releases)."""
        private_folder(self.folder)
        fd = os.open(self.folder / USERS_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        fcntl.flock(fd, fcntl.LOCK_SH)  # waits while someone stops the cluster: then ensure() starts it again
        return fd

    def stop_unless_used(self) -> list[int]:
        """Stop the cluster unless a process holds it (see hold); [] when stopped, else their pids."""
        fd = os.open(self.folder / USERS_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return self.users(os.fstat(fd).st_ino) or [0]
            self.stop()
            return []
        finally:
            os.close(fd)

    @staticmethod
    def users(inode: int) -> list[int]:
        """The pids holding a lock on the file `inode` (Linux's /proc/locks; [] where there is none)."""
        try:
            lines = Path("/proc/locks").read_text().splitlines()
        except OSError:
            return []
        pids = set()
        for line in lines:
            fields = line.split()
            if "->" in fields:  # a waiter, not a holder
                continue
            if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5].rsplit(":", 1)[-1] == str(inode):
                pids.add(int(fields[4]))
        return sorted(pids)

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.data / "postmaster.pid").read_text().split()[0])
        except (FileNotFoundError, ValueError, IndexError):
            return None


def default_cluster() -> Cluster:
    folder = _cluster_dir()
    return Cluster(folder, _port_for(folder))


_ensured: Cluster | None = None  # the default cluster, as ensure_cluster() left it in this process
_hold: int | None = None  # this process's shared lock on the default cluster's users file


def connection_settings() -> dict:
    """Django's connection settings for the default cluster, without starting anything: what the
    settings module reads on import. The password is there once the cluster was made; the first
    connection (config/embedded_db) starts the cluster and fills it in."""
    cluster = default_cluster()
    try:
        password = cluster.password()
    except LocalDatabaseError:
        password = ""  # nosec B105  # not yet made: the first connection makes the cluster and fills it in
    return {"HOST": "127.0.0.1", "PORT": str(cluster.port), "NAME": DB_NAME, "USER": DB_USER, "PASSWORD": password}


def ensure_cluster() -> dict:
    """Start (and on first use create) the local cluster; return Django connection settings.

    The first call in a process also registers the process as one of the cluster's users (a
    shared lock held for the life of the process): `make run` stops a cluster it started only when
    no other process uses it (stop_unless_used), so a `make test` beside it keeps its database."""
    global _ensured, _hold
    if _ensured is not None:
        return _ensured.settings()
    cluster = default_cluster()
    _hold = cluster.hold()
    settings = cluster.ensure()
    _ensured = cluster
    return settings


def password_for(host: str, port: str | int) -> str | None:
    """The password for a connection to `host`:`port` when that is the default cluster (started, on
    the first call, if it is not running); None for any other server (a harness's own cluster)."""
    cluster = _ensured or default_cluster()
    if host != "127.0.0.1" or str(port) != str(cluster.port):
        return None
    return ensure_cluster()["PASSWORD"]


def stop_unless_used() -> list[int]:
    """Stop the default cluster if this process started it and no other process uses it; the pids
    of the processes that use it (nothing was stopped) otherwise."""
    global _hold
    if _ensured is None or not _ensured.started:
        return []
    if _hold is not None:
        os.close(_hold)
        _hold = None
    return _ensured.stop_unless_used()


def started_by_this_process() -> Cluster | None:
    """The default cluster if ensure_cluster() in this process had to start it (runstack stops
    it again on the way out); None if it was running already, or not used."""
    return _ensured if _ensured is not None and _ensured.started else None


def stop_cluster() -> None:
    default_cluster().stop()


def _run(command: list[str], what: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True)  # nosec B603  # argv built in this module (initdb, pg_ctl); no shell, no outside input
    if done.returncode != 0:
        raise LocalDatabaseError(f"{what} failed ({done.returncode}): {done.stderr or done.stdout}")
