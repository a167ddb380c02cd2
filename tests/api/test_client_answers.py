"""The client never succeeds by accident: a redirect or an answer that is not Reckon's API raises
UnexpectedAnswer naming the URL and status, and waiting for work waits, with a handful of requests
and the server's reason when nothing came."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from reckon_client import Client, UnexpectedAnswer

from ledger.models import Job
from tests.api.conftest import issue
from tests.conftest import make_job
from tests.processes import ROOT, WebServer, database_url_of_tests, production_env

pytestmark = pytest.mark.django_db(transaction=True)


def counting(client: Client) -> list[str]:
    """The requests `client` sends from now on, as "METHOD path" (each still goes to the server)."""
    sent: list[str] = []
    send = client._transport.send

    def counted(method, path, *args, **kwargs):
        sent.append(f"{method} {path}")
        return send(method, path, *args, **kwargs)

    client._transport.send = counted
    return sent


def test_a_redirect_to_https_raises_and_creates_nothing(external_actions, tmp_path):
    """Debug off with RECKON_SSL_REDIRECT on, over plain HTTP: every API call answers 301."""
    env = production_env(DATABASE_URL=database_url_of_tests(), RECKON_ACTIONS_FILE=str(external_actions),
                         RECKON_SSL_REDIRECT="true")
    with WebServer(env=env, log_name="redirecting-gunicorn", inherit_env=False) as server:
        client = Client(server.url, issue(["acme"], ["ext.alpha"], name="redirected"))
        sent = counting(client)
        with pytest.raises(UnexpectedAnswer) as redirected:
            client.enqueue("never", tenant="acme", action="ext.alpha", payload={})
        assert redirected.value.status == 301
        assert redirected.value.location == f"https://127.0.0.1:{server.port}/api/v1/jobs"
        assert str(redirected.value).startswith(f"POST {server.url}/api/v1/jobs answered 301 to https://")
        assert not Job.objects.filter(job_id="never").exists()

        started = time.monotonic()
        with pytest.raises(UnexpectedAnswer, match="answered 301"):
            client.next_lease("w", wait_seconds=3)
        assert time.monotonic() - started < 2 and len(sent) == 2  # one enqueue, one claim: no loop

        # A worker started with that URL stops at once and says why, instead of waiting forever.
        worker = subprocess.run(
            [sys.executable, "examples/pull_worker.py", "--url", server.url, "--outbox", str(tmp_path)],
            cwd=ROOT, env={"PATH": "/usr/bin:/bin", "RECKON_API_TOKEN": client.token}, capture_output=True,
            text=True, timeout=30,
        )
        assert worker.returncode == 2, worker.stdout + worker.stderr
        assert f"not Reckon's API: POST {server.url}/api/v1/claims answered 301 to https://" in worker.stderr


def test_an_html_answer_is_not_taken_for_reckons(api_server):
    """A base URL that points at the wrong path gets Django's HTML 404, not the API's JSON."""
    client = Client(api_server.url + "/console", issue(["acme"], ["ext.alpha"], name="lost"))
    with pytest.raises(UnexpectedAnswer) as lost:
        client.job("anything")
    assert lost.value.status == 404 and lost.value.content_type.startswith("text/html")
    assert f"GET {api_server.url}/console/api/v1/jobs/anything answered 404" in str(lost.value)


def test_next_lease_waits_as_asked_with_one_request(api_server):
    client = Client(api_server.url, issue(["acme"], ["ext.alpha"], name="patient"))
    sent = counting(client)
    started = time.monotonic()
    assert client.next_lease("w", actions=["ext.alpha"], wait_seconds=3) is None
    waited = time.monotonic() - started
    assert 2.9 <= waited < 4.5, waited
    assert sent == ["POST /claims"]  # the server held the wait
    nothing = client.nothing_claimed
    assert (nothing.reason, nothing.requests, nothing.retry_after) == ("no_work", 1, None)

    make_job("patient-1", action="ext.alpha", tenant="acme")
    assert client.next_lease("w", actions=["ext.alpha"], wait_seconds=3).job_id == "patient-1"
    assert client.nothing_claimed is None


class AnswersAtOnce(BaseHTTPRequestHandler):
    """Something between the worker and Reckon that answers every claim at once with an empty 204
    and no Retry-After (an old server, a proxy that cuts long requests)."""

    claims: list[float] = []

    def do_POST(self):  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        AnswersAtOnce.claims.append(time.monotonic())
        self.send_response(204)
        self.end_headers()

    def do_GET(self):  # noqa: N802
        page = b"<html><body>Welcome to nginx!</body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(page)))
        self.end_headers()
        self.wfile.write(page)

    def log_message(self, *args):
        pass


@pytest.fixture
def stub_server():
    AnswersAtOnce.claims = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), AnswersAtOnce)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


def test_next_lease_backs_off_when_the_server_answers_at_once(stub_server):
    client = Client(stub_server, "rk_unused")
    started = time.monotonic()
    assert client.next_lease("w", wait_seconds=3) is None
    waited = time.monotonic() - started
    assert 2.9 <= waited < 3.5, waited
    assert 2 <= len(AnswersAtOnce.claims) <= 6, len(AnswersAtOnce.claims)  # 0.25, 0.5, 1, 2 s apart
    assert client.nothing_claimed.requests == len(AnswersAtOnce.claims)


def test_a_200_that_is_not_json_is_no_answer(stub_server):
    client = Client(stub_server, "rk_unused")
    with pytest.raises(UnexpectedAnswer) as page:
        client.job("job-1")
    assert page.value.status == 200 and page.value.content_type == "text/html"
    assert f"GET {stub_server}/api/v1/jobs/job-1 answered 200: text/html, not Reckon's JSON" in str(page.value)
