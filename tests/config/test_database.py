"""The embedded PostgreSQL default and DATABASE_URL."""

import time

import pytest

from config import localdb
from config.settings import database_from_url


def test_the_tests_run_on_postgresql(django_db_setup, django_db_blocker):
    from django.db import connection

    with django_db_blocker.unblock():
        assert connection.vendor == "postgresql"
        with connection.cursor() as cursor:
            cursor.execute("SHOW server_version_num")
            assert int(cursor.fetchone()[0]) >= 150000


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
