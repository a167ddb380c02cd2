"""Reckon behind PgBouncer in transaction mode (Debian's `pgbouncer`, in a process of its own in
front of the test database): with RECKON_DATABASE_POOLED a real qcluster runs the worker loop
through it, and `check --deploy` says which session must go around it (the claims listener's LISTEN)."""

import os
import shutil
import sys
import tempfile
from pathlib import Path
from urllib.parse import quote

import pytest
from django.db import connection

from config.localdb import _as_postgres, _postgres_ids
from config.processes import accepting
from ledger.invariants import find_violations
from ledger.models import Job
from tests.conftest import make_job
from tests.processes import ROOT, ManagedProcess, free_port, manage, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture
def pgbouncer():
    """PgBouncer in transaction mode on a free port, in front of the test database's cluster."""
    db = connection.settings_dict
    password = _password()
    folder = Path(tempfile.mkdtemp(prefix="reckon-pgbouncer-"))
    port = free_port()
    # Clients are trusted (loopback); PgBouncer logs in to PostgreSQL with the auth file's password.
    (folder / "users.txt").write_text(f'"{db["USER"]}" "{password}"\n')
    (folder / "pgbouncer.ini").write_text(
        "[databases]\n"
        f"* = host={db['HOST']} port={db['PORT']}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {folder / 'users.txt'}\n"
        "pool_mode = transaction\ndefault_pool_size = 4\nmax_client_conn = 200\n"
        "ignore_startup_parameters = extra_float_digits,options\n")
    if ids := _postgres_ids():  # PgBouncer refuses to run as root
        for path in (folder, *folder.iterdir()):
            os.chown(path, *ids)
    bouncer = ManagedProcess([*_as_postgres(), shutil.which("pgbouncer") or "/usr/sbin/pgbouncer",
                              str(folder / "pgbouncer.ini")], log_name="pgbouncer").start()
    try:
        wait_for(lambda: accepting(port), timeout=20, message="pgbouncer to listen")
        yield f"postgresql://{quote(db['USER'])}@127.0.0.1:{port}/{db['NAME']}"
    finally:
        bouncer.stop()
        shutil.rmtree(folder, ignore_errors=True)


def _password() -> str:
    """The test cluster's password (the embedded backend reads it from the cluster's folder)."""
    return connection.get_connection_params().get("password") or ""


def test_a_qcluster_runs_the_worker_loop_through_pgbouncer_in_transaction_mode(pgbouncer, settings):
    settings.RECKON_DISPATCH = True
    for n in range(12):
        make_job(f"pooled-{n}", payload={"n": n})  # more than the 5 runs after which a statement is prepared
    cluster = ManagedProcess([sys.executable, str(ROOT / "manage.py"), "qcluster"], log_name="pooled-qcluster",
                             env={"DATABASE_URL": pgbouncer, "RECKON_DATABASE_POOLED": "true",
                                  "RECKON_Q_WORKERS": "2"})
    with cluster:
        wait_for(lambda: Job.objects.filter(job_id__startswith="pooled-", status="succeeded").count() == 12
                 or not cluster.running(), timeout=90, message="every job to succeed through the pooler")
        assert cluster.running(), cluster.output_tail(30)
    assert "prepared statement" not in cluster.output(), cluster.output_tail(30)
    assert not [f for f in find_violations() if f.count]


def _deploy_warnings(env: dict) -> str:
    done = manage("check", "--deploy", env={**os.environ, **env})
    return done.stdout + done.stderr


def test_check_deploy_warns_when_a_pooled_url_has_no_direct_one_for_the_listener(pgbouncer):
    pooled = {"DATABASE_URL": pgbouncer, "RECKON_DATABASE_POOLED": "true"}
    assert "config.W002" in _deploy_warnings(pooled)
    direct = connection.settings_dict
    direct_url = (f"postgresql://{quote(direct['USER'])}:{quote(_password(), safe='')}@"
                  f"{direct['HOST']}:{direct['PORT']}/{direct['NAME']}")
    assert "config.W002" not in _deploy_warnings({**pooled, "RECKON_DIRECT_DATABASE_URL": direct_url})
    assert "config.W002" not in _deploy_warnings({"DATABASE_URL": pgbouncer})  # not marked pooled: not asked


def test_behind_a_pooler_the_listener_connects_directly(settings):
    from api.waiting import listener_conninfo
    from config.database_url import database_from_url

    settings.RECKON_DIRECT_DATABASE = database_from_url(
        "postgresql://reckon@db1:5432,db2:5432/reckon?target_session_attrs=read-write")
    conninfo = listener_conninfo()
    assert "host=db1,db2" in conninfo and "target_session_attrs=read-write" in conninfo
    assert "prepare_threshold" not in conninfo

