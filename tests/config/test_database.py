"""The embedded PostgreSQL default and DATABASE_URL."""

import os
import pwd
import re
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

from config import localdb
from config.settings import database_from_url
from sandbox.testing import free_port
from tests.processes import ROOT


def test_the_tests_run_on_postgresql(django_db_setup, django_db_blocker):
    from django.db import connection

    with django_db_blocker.unblock():
        assert connection.vendor == "postgresql"
        try:
            with connection.cursor() as cursor:
                cursor.execute("SHOW server_version_num")
                assert int(cursor.fetchone()[0]) >= 150000
        finally:
            connection.close()  # outside a test's transaction: left open, it would keep the test database busy


def test_starting_the_running_cluster_again_is_idempotent_and_fast():
    first = localdb.ensure_cluster()
    started = time.perf_counter()
    again = localdb.ensure_cluster()
    elapsed = time.perf_counter() - started
    assert again == first
    assert elapsed < 1.0, f"ensure_cluster took {elapsed:.3f} s on an already running cluster"


def test_without_postgresql_binaries_the_error_says_what_to_install_or_set(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("RECKON_PG_BINDIR", raising=False)
    monkeypatch.setattr(localdb, "DEBIAN_BINDIRS", str(tmp_path / "none" / "*"))
    with pytest.raises(localdb.LocalDatabaseError) as error:
        localdb.find_bindir()
    assert "DATABASE_URL" in str(error.value) and "apt-get install postgresql" in str(error.value)


def test_database_url_is_parsed():
    assert database_from_url("postgresql://app:s%40cret@db.internal:6432/ledger") == {
        "NAME": "ledger", "USER": "app", "PASSWORD": "s@cret", "HOST": "db.internal", "PORT": "6432"}


def test_a_non_postgresql_database_url_is_refused():
    with pytest.raises(ValueError, match="Reckon needs PostgreSQL"):
        database_from_url("sqlite:///db.sqlite3")


# -- who may connect to the embedded cluster ----------------------------------------------------

@pytest.fixture
def no_client_password(monkeypatch, tmp_path):
    """libpq must not find a password anywhere but where a test passes one."""
    monkeypatch.delenv("PGPASSWORD", raising=False)
    monkeypatch.setenv("PGPASSFILE", str(tmp_path / "no-passfile"))


def _connect(cluster: localdb.Cluster, **password):
    return psycopg.connect(host="127.0.0.1", port=cluster.port, user="postgres", dbname="postgres",
                           connect_timeout=5, **password)


def test_the_embedded_cluster_refuses_a_login_without_its_password(no_client_password):
    localdb.ensure_cluster()
    cluster = localdb.default_cluster()
    with pytest.raises(psycopg.OperationalError, match="password"):
        _connect(cluster).close()
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        _connect(cluster, password="admin").close()
    with _connect(cluster, password=cluster.password()) as conn:
        assert conn.execute("SELECT current_user").fetchone() == ("postgres",)


def test_the_password_file_is_ours_alone():
    localdb.ensure_cluster()
    info = os.stat(localdb.default_cluster().folder / localdb.PASSWORD_FILE, follow_symlinks=False)
    assert stat.S_ISREG(info.st_mode)
    assert stat.S_IMODE(info.st_mode) == 0o600
    assert info.st_uid == os.geteuid()


def _legacy_cluster(folder: Path, port: int) -> localdb.Cluster:
    """A cluster exactly as the old code made it: `initdb -A trust`, every local login let in."""
    cluster = localdb.Cluster(folder, port)
    folder.mkdir()
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres", "postgres")
    initdb = [str(localdb.find_bindir() / "initdb"), "-D", str(cluster.data), "-U", "postgres", "-A", "trust",
              "-E", "UTF8", "--locale=C.UTF-8", "--no-sync"]
    subprocess.run(localdb._as_postgres() + initdb, check=True, capture_output=True)
    cluster.start()
    return cluster


@pytest.mark.slow
def test_a_cluster_made_with_trust_is_upgraded_in_place_on_first_use(scratch_folder, no_client_password):
    cluster = _legacy_cluster(scratch_folder / "pg", free_port())
    try:
        with _connect(cluster, autocommit=True) as conn:  # trust: no password asked
            conn.execute("CREATE DATABASE kept")
        with psycopg.connect(host="127.0.0.1", port=cluster.port, user="postgres", dbname="kept",
                             autocommit=True) as conn:
            conn.execute("CREATE TABLE ledger_before (note text)")
            conn.execute("INSERT INTO ledger_before VALUES ('written before the upgrade')")

        upgraded = localdb.Cluster(cluster.folder, cluster.port)
        settings = upgraded.ensure("kept")

        assert not upgraded.trusting()
        with pytest.raises(psycopg.OperationalError, match="password"):
            _connect(upgraded).close()
        assert settings["PASSWORD"] == upgraded.password()
        with psycopg.connect(host="127.0.0.1", port=cluster.port, user="postgres", dbname="kept",
                             password=settings["PASSWORD"]) as conn:
            assert conn.execute("SELECT note FROM ledger_before").fetchall() == [("written before the upgrade",)]
        assert upgraded.postmaster_pid() == cluster.postmaster_pid()  # reloaded, not restarted
    finally:
        cluster.stop()


def test_the_cluster_folder_is_refused_when_it_is_a_symlink(scratch_folder):
    target = scratch_folder / "elsewhere"
    target.mkdir(mode=0o755)
    before = os.stat(target)
    (scratch_folder / "pg").symlink_to(target)
    with pytest.raises(localdb.LocalDatabaseError, match="not a plain folder"):
        localdb.Cluster(scratch_folder / "pg", free_port()).ensure()
    after = os.stat(target)
    assert (after.st_uid, after.st_mode) == (before.st_uid, before.st_mode)  # not chowned, not chmodded
    assert list(target.iterdir()) == []  # nothing written through the link


def test_the_cluster_folder_is_refused_when_someone_else_owns_it(scratch_folder):
    if os.geteuid() == 0:
        folder = scratch_folder / "pg"
        folder.mkdir(mode=0o777)
        nobody = pwd.getpwnam("nobody")
        os.chown(folder, nobody.pw_uid, nobody.pw_gid)
    else:
        folder = Path("/")  # root's: refused before anything is changed
    before = os.stat(folder)
    with pytest.raises(localdb.LocalDatabaseError, match="belongs to uid"):
        localdb.private_folder(folder)
    after = os.stat(folder)
    assert (after.st_uid, after.st_mode) == (before.st_uid, before.st_mode)


def test_a_new_cluster_folder_is_private(scratch_folder):
    folder = scratch_folder / "fresh"
    localdb.private_folder(folder)
    info = os.stat(folder)
    assert stat.S_IMODE(info.st_mode) == 0o700
    expected = pwd.getpwnam("postgres").pw_uid if os.geteuid() == 0 else os.geteuid()
    assert info.st_uid == expected


def test_a_password_file_replaced_by_a_symlink_is_not_read(scratch_folder):
    folder = scratch_folder / "pg"
    localdb.private_folder(folder)
    secret = scratch_folder / "not-a-password"
    secret.write_text("something root can read")
    (folder / localdb.PASSWORD_FILE).symlink_to(secret)
    with pytest.raises(localdb.LocalDatabaseError, match="refusing to read"):
        localdb.Cluster(folder, free_port()).password()


def test_importing_the_settings_starts_no_database(scratch_folder):
    """`pytest --collect-only` (any import of the settings) leaves no cluster behind: the embedded
    backend starts it on the first connection, which collecting never opens."""
    cluster = localdb.Cluster(scratch_folder / "pg", free_port())
    env = {**os.environ, "RECKON_PGDATA_DIR": str(cluster.folder), "RECKON_PG_PORT": str(cluster.port)}
    env.pop("DATABASE_URL", None)
    collected = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                                "tests/config/test_settings.py"], cwd=ROOT, env=env, capture_output=True, text=True,
                               timeout=120)
    assert collected.returncode == 0, collected.stdout + collected.stderr
    assert "tests collected" in collected.stdout
    assert not cluster.running() and not (cluster.data / "PG_VERSION").exists()

    # The first connection starts it, and registers its process as a user of the cluster.
    connected = subprocess.run([sys.executable, "manage.py", "shell", "-c",
                                "from django.db import connection; connection.ensure_connection(); "
                                "from config import localdb; print('started', localdb._ensured.started)"],
                               cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    try:
        assert connected.returncode == 0, connected.stdout + connected.stderr
        assert "started True" in connected.stdout and cluster.running()
    finally:
        cluster.stop()


def test_a_cluster_in_use_by_another_process_is_not_stopped(scratch_folder):
    """The users file's shared locks are a reference count the kernel keeps: a process holding the
    cluster makes stop_unless_used() leave it running and name the holder; once it ends, it stops."""
    cluster = localdb.Cluster(scratch_folder / "pg", free_port())
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; sys.path.insert(0, '.'); from pathlib import Path; from config.localdb import Cluster; "
        f"c = Cluster(Path({str(cluster.folder)!r}), {cluster.port}); fd = c.hold(); c.ensure(); print('held', flush=True); "
        "sys.stdin.read()")], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert cluster.running()
        assert cluster.stop_unless_used() == [holder.pid]
        assert cluster.running()
    finally:
        holder.stdin.close()  # the holder reads to the end and exits: the kernel drops its lock
        holder.wait(timeout=30)
    assert cluster.stop_unless_used() == [] and not cluster.running()


def test_a_connection_pointed_at_another_cluster_keeps_its_own_password():
    """chaos/world.py points this process's connection at a cluster of its own: the embedded
    backend neither starts the default cluster for it nor replaces its password."""
    assert localdb.password_for("127.0.0.1", free_port()) is None
    assert localdb.password_for("db.internal", localdb.default_cluster().port) is None
    assert localdb.password_for("127.0.0.1", localdb.default_cluster().port) == localdb.default_cluster().password()


def test_a_multi_host_database_url_gives_libpq_every_host_and_its_parameters():
    assert database_from_url(
        "postgresql://app:pw@db1:5432,db2:5433,[::1]:5434/ledger?target_session_attrs=read-write&sslmode=prefer"
    ) == {"NAME": "ledger", "USER": "app", "PASSWORD": "pw", "HOST": "db1,db2,::1", "PORT": "5432,5433,5434",
          "OPTIONS": {"target_session_attrs": "read-write", "sslmode": "prefer"}}
    # One port for all, or the default for a host that names none (libpq wants one per host then).
    assert database_from_url("postgresql://app@db1:6432,db2:6432/x")["PORT"] == "6432"
    assert database_from_url("postgresql://app@db1,db2:6432/x")["PORT"] == "5432,6432"


@pytest.mark.parametrize("url, says", [
    ("postgresql://app@db1/x?target_session_atrs=read-write", 'invalid connection option "target_session_atrs"'),
    ("postgresql://app@db1:54x2/x", "cannot read: 'db1:54x2'"),
    ("postgresql://app@db1,:5432/x", "cannot read: ':5432'"),
])
def test_a_database_url_libpq_would_not_take_is_refused_with_the_reason(url, says):
    with pytest.raises(ValueError, match=re.escape(says)):
        database_from_url(url)


def test_check_deploy_warns_when_several_hosts_do_not_ask_for_the_primary():
    hosts = "postgresql://reckon@127.0.0.1:1,127.0.0.1:2/reckon"  # nothing listens: only the URL is read
    assert "config.W003" in _deploy_warnings(hosts)
    assert "config.W003" not in _deploy_warnings(hosts + "?target_session_attrs=read-write")


def _deploy_warnings(database_url: str) -> str:
    from tests.processes import manage

    done = manage("check", "--deploy", env={**os.environ, "DATABASE_URL": database_url + (
        "&" if "?" in database_url else "?") + "connect_timeout=1"})
    return done.stdout + done.stderr
