"""Issue 25, finding 5: with debug off, every 500 is written to the log with its traceback.

A real gunicorn in production mode; the console fails for real (its session table is renamed
away while the server runs), and the server's stderr must say so, traceback and all."""

import urllib.error
import urllib.request

import pytest
from django.conf import settings
from django.db import connection

from tests.processes import WebServer, database_url_of_tests, production_env, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def _get(url: str, cookie: str) -> int:
    request = urllib.request.Request(url, headers={"Cookie": cookie})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status
    except urllib.error.HTTPError as refused:
        return refused.code


def test_a_console_500_with_debug_off_is_logged_with_its_traceback():
    env = production_env(DATABASE_URL=database_url_of_tests(), RECKON_LOG_LEVEL="WARNING")
    with WebServer(env=env, log_name="error-log-gunicorn") as server:
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE django_session RENAME TO django_session_away")
        try:
            status = _get(f"{server.url}/queue/", f"{settings.SESSION_COOKIE_NAME}=a-session-that-cannot-be-read")
        finally:
            with connection.cursor() as cursor:
                cursor.execute("ALTER TABLE django_session_away RENAME TO django_session")
        assert status == 500
        logged = wait_for(lambda: "Internal Server Error: /queue/" in server.output() and server.output(),
                          timeout=10, message="the 500 in the server's log")
        after = logged[logged.index("Internal Server Error: /queue/"):]
        assert "Traceback (most recent call last)" in after and 'relation "django_session" does not exist' in after
