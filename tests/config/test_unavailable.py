"""While the database has no primary, the console and the API answer 503 with Retry-After, not 500
(the real outage, a Patroni failover, is in tests/ha/test_failover.py)."""

import psycopg
import pytest
from django.db import InterfaceError, OperationalError
from django.test import RequestFactory

from config.unavailable import DatabaseUnavailable, server_error
from ledger.availability import database_unavailable


def _django_error(cls, cause: Exception):
    try:
        raise cls(str(cause)) from cause
    except cls as exc:
        return exc


@pytest.mark.parametrize("exc", [
    _django_error(OperationalError, psycopg.OperationalError("connection failed: Connection refused")),
    _django_error(InterfaceError, psycopg.InterfaceError("the connection is closed")),
    _django_error(OperationalError, psycopg.errors.AdminShutdown("terminating connection")),
    _django_error(OperationalError, psycopg.errors.ReadOnlySqlTransaction("read-only transaction")),
])
def test_an_outage_is_told_from_a_mistake(exc):
    assert database_unavailable(exc)


@pytest.mark.parametrize("exc", [
    _django_error(OperationalError, psycopg.errors.SerializationFailure("could not serialize")),
    _django_error(OperationalError, psycopg.errors.UndefinedTable("no such table")),
    ValueError("not a database error"),
])
def test_a_mistake_is_not_an_outage(exc):
    assert not database_unavailable(exc)


@pytest.mark.parametrize("path, content_type", [("/queue/", "text/plain"), ("/api/v1/jobs/x", "application/json")])
def test_a_view_that_met_an_outage_answers_503_with_retry_after(db, path, content_type):
    outage = _django_error(OperationalError, psycopg.OperationalError("server closed the connection unexpectedly"))
    response = DatabaseUnavailable(lambda request: None).process_exception(RequestFactory().get(path), outage)
    assert response.status_code == 503 and int(response["Retry-After"]) > 0
    assert response["Content-Type"].startswith(content_type)


def test_any_other_error_is_left_to_django(db):
    assert DatabaseUnavailable(lambda request: None).process_exception(RequestFactory().get("/"), KeyError("x")) is None


def test_an_outage_before_any_view_reaches_handler500_and_answers_503(db):
    request = RequestFactory().get("/")
    try:
        raise _django_error(OperationalError, psycopg.OperationalError("connection failed"))
    except OperationalError:
        assert server_error(request).status_code == 503
    try:
        raise KeyError("a bug")
    except KeyError:
        assert server_error(request).status_code == 500
