"""Persistent connections end to end: reckon_client against gunicorn started exactly as runstack
starts it. The server's own access log names the client port of every request, so it counts the
TCP connections it was really given, not the ones the client believes it kept."""

from __future__ import annotations

import threading

import pytest
from reckon_client import Client

from ledger.models import Job
from sandbox.stack import stack_children
from tests.api.conftest import issue
from tests.conftest import make_job
from tests.processes import ManagedProcess, WebServer, database_url_of_tests, free_port, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

WORKERS, CYCLES = 4, 12


class RunstackWeb(WebServer):
    """runstack's web child, with an access log of each request's client port."""

    def __init__(self, *, env: dict, access_log):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        web = next(child for child in stack_children(host="127.0.0.1", port=self.port, workers=2, demo=False)
                   if child.name == "web")
        ManagedProcess.__init__(self, web.argv + ["--access-logfile", str(access_log),
                                                  "--access-logformat", "%({remote_port}e)s %(U)s"],
                                env=env, log_name="keep-alive-gunicorn")


def test_each_worker_thread_keeps_one_connection_across_many_cycles(external_actions, tmp_path):
    access_log = tmp_path / "access.log"
    env = {"DATABASE_URL": database_url_of_tests(), "RECKON_ACTIONS_FILE": str(external_actions)}
    for n in range(WORKERS * CYCLES):  # half claimed by id (acme), half as the next job (beta)
        make_job(f"ka-{n}", action="ext.alpha", tenant="acme" if n % 2 == 0 else "beta")
    with RunstackWeb(env=env, access_log=access_log) as server:
        client = Client(server.url, issue(["acme", "beta"], ["ext.alpha"], name="keep-alive"))
        failures = []

        def work(worker: int) -> None:
            try:
                for n in range(CYCLES):  # by id, then the next job in scope, alternately
                    if n % 2 == 0:
                        lease = client.claim_lease(f"ka-{worker * CYCLES + n}", worker=f"w{worker}")
                    else:
                        lease = client.next_lease(f"w{worker}", tenants=["beta"], wait_seconds=0)
                    lease.begin()
                    lease.succeeded(f"ref-{worker}-{n}")
                client.close()
            except Exception as exc:  # reported by the main thread
                failures.append(exc)

        threads = [threading.Thread(target=work, args=(w,)) for w in range(WORKERS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert not failures, failures
        requests = WORKERS * CYCLES * 3
        wait_for(lambda: len(access_log.read_text().splitlines()) >= requests, timeout=10,
                 message="gunicorn to log every request")
    lines = [line.split() for line in access_log.read_text().splitlines()]
    api_calls = [(port, path) for port, path in lines if path.startswith("/api/v1/")]
    assert len(api_calls) == requests
    assert len({port for port, _ in api_calls}) == WORKERS  # one connection per worker, reused throughout
    assert Job.objects.filter(job_id__startswith="ka-", status="succeeded").count() == WORKERS * CYCLES
