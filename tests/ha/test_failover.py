"""Reckon on a real Patroni cluster: the multi-host URL finds the primary, and the processes of a
deployment (web, qcluster, sweeper, reconciler, watchdog) go on through a primary switch without a
restart (the MCP gateway too), the API answering 503 with Retry-After, never 500, while there is no
primary."""

import json
import sys
import threading
import urllib.error
import urllib.request

import psycopg
import pytest

from tests.ha.conftest import reckon_env
from tests.processes import ROOT, ManagedProcess, free_port, manage, wait_for

pytestmark = pytest.mark.slow

MANAGE = [sys.executable, str(ROOT / "manage.py")]
WHERE = ("from django.db import connection\n"
         "with connection.cursor() as c:\n"
         "    c.execute('SELECT pg_is_in_recovery(), inet_server_port()')\n"
         "    print(*c.fetchone())\n")


def _where(cluster, url: str) -> tuple[str, int]:
    done = manage("shell", "-c", WHERE, env={**reckon_env(cluster), "DATABASE_URL": url})
    assert done.returncode == 0, done.stdout + done.stderr
    in_recovery, port = done.stdout.split()[-2:]
    return in_recovery, int(port)


def test_the_multi_host_url_reaches_the_primary_whichever_host_is_listed_first(patroni):
    primary = patroni.primary()
    replica = next(node for node in patroni.nodes if node is not primary)
    hosts = f"127.0.0.1:{replica.port},127.0.0.1:{primary.port}"  # the replica first
    assert _where(patroni, f"postgresql://postgres@{hosts}/reckon?target_session_attrs=read-write") == \
        ("False", primary.port)
    # Without target_session_attrs libpq takes the first host that answers: a read-only replica.
    assert _where(patroni, f"postgresql://postgres@{hosts}/reckon") == ("True", replica.port)


def test_a_misspelt_libpq_parameter_stops_start_up_with_its_name(patroni):
    done = manage("check", env={**reckon_env(patroni),
                                "DATABASE_URL": patroni.url().replace("target_session_attrs", "target_session_atrs")})
    assert done.returncode != 0
    assert 'invalid connection option "target_session_atrs"' in done.stdout + done.stderr


def _sql(cluster, statement: str, *args):
    with psycopg.connect(cluster.url().replace("&connect_timeout=2", "&connect_timeout=5"), autocommit=True) as conn:
        return conn.execute(statement, args).fetchall()


def _probe(url: str, token: str, answers: list, stop: threading.Event) -> None:
    while not stop.is_set():
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
        try:
            with urllib.request.urlopen(request, timeout=5) as answer:
                answers.append((answer.status, answer.headers.get("Retry-After")))
        except urllib.error.HTTPError as refused:
            answers.append((refused.code, refused.headers.get("Retry-After")))
        except OSError:
            pass
        stop.wait(0.2)


def test_every_process_goes_on_through_a_primary_switch_without_a_restart(patroni):
    env = reckon_env(patroni, RECKON_Q_WORKERS="1", RECKON_REDISPATCH_AFTER_S="3")
    token = manage("worker_token", "create", "--name", "ha-probe", "--tenant", "ha", "--action", "reckon.echo",
                   env=env).stdout.strip().splitlines()[-1]
    port, gateway_port = free_port(), free_port()
    processes = {
        "web": ManagedProcess([sys.executable, "-m", "gunicorn", "config.wsgi:application", "--bind",
                               f"127.0.0.1:{port}", "--workers", "1", "--threads", "4", "--no-control-socket"],
                              env=env, log_name="ha-web"),
        "qcluster": ManagedProcess([*MANAGE, "qcluster"], env=env, log_name="ha-qcluster"),
        "sweeper": ManagedProcess([*MANAGE, "sweep_leases", "--loop", "--interval", "0.5"], env=env,
                                  log_name="ha-sweeper"),
        "reconciler": ManagedProcess([*MANAGE, "reconcile", "--loop", "--interval", "0.5"], env=env,
                                     log_name="ha-reconciler"),
        "watchdog": ManagedProcess([*MANAGE, "watchdog", "--loop", "--interval", "1"], env=env,
                                   log_name="ha-watchdog"),
        "gateway": ManagedProcess([*MANAGE, "mcp_gateway", "--port", str(gateway_port)], env=env,
                                  log_name="ha-gateway"),
    }
    stop, answers = threading.Event(), []
    try:
        for process in processes.values():
            process.start()
        base = f"http://127.0.0.1:{port}"
        wait_for(lambda: _status(f"{base}/healthz") == 200, timeout=60, message="the web server")

        def enqueue(job_id: str) -> None:
            done = manage("enqueue", "--job-id", job_id, "--tenant", "ha", "--action", "reckon.echo",
                          "--payload", "{}", env=env)
            assert done.returncode == 0, done.stdout + done.stderr

        def succeeded(job_id: str) -> bool:
            try:
                return _sql(patroni, "SELECT status FROM ledger_job WHERE job_id = %s", job_id) == [("succeeded",)]
            except psycopg.Error:
                return False

        mcp = f"http://127.0.0.1:{gateway_port}/mcp"
        # The gateway checks the token in the ledger from a worker thread: that thread's connection
        # is opened now, and breaks in the switch.
        wait_for(lambda: _mcp_initialize(mcp, token) == 200, timeout=60, message="the MCP gateway")
        enqueue("before-switch")
        wait_for(lambda: succeeded("before-switch"), timeout=60, message="a job to run before the switch")

        probe = threading.Thread(target=_probe, args=(f"{base}/api/v1/jobs/before-switch", token, answers, stop))
        probe.start()
        gateway_answers: list = []
        gateway_probe = threading.Thread(target=_probe_gateway, args=(mcp, token, gateway_answers, stop))
        gateway_probe.start()
        wait_for(lambda: answers, timeout=30, message="the probe's first answer")
        old = patroni.kill_primary()
        new = patroni.wait_for_primary(timeout=90, other_than=old)
        wait_for(lambda: answers and answers[-1][0] == 200, timeout=60, message="the API to answer 200 again")
        stop.set()
        probe.join(10)
        gateway_probe.join(10)

        # Nothing was restarted: each process found the new primary by itself.
        for name, process in processes.items():
            assert process.running(), f"{name} exited in the failover:\n{process.output_tail(30)}"
        wait_for(lambda: _mcp_initialize(mcp, token) == 200, timeout=30,
                 message="the gateway to check a token on the new primary")
        enqueue("after-switch")
        wait_for(lambda: succeeded("after-switch"), timeout=90, message="a job to run after the switch")
        assert _sql(patroni, "SELECT inet_server_port()") == [(new.port,)]

        statuses = [status for status, _ in answers]
        assert 500 not in statuses, statuses
        unavailable = [retry_after for status, retry_after in answers if status == 503]
        assert unavailable, f"no answer while there was no primary was a 503: {statuses}"
        assert all(retry_after and int(retry_after) > 0 for retry_after in unavailable), answers
        assert set(statuses) <= {200, 503}, statuses
        # The gateway checks each token in the ledger: 503 while there is no primary, never 500.
        assert 500 not in gateway_answers and 503 in gateway_answers, gateway_answers
        assert set(gateway_answers) <= {200, 503, None}, gateway_answers
        for loop in ("sweeper", "reconciler"):
            assert "the database answers again" in processes[loop].output(), processes[loop].output_tail(20)
        patroni.restart(old)
    finally:
        stop.set()
        for process in processes.values():
            process.stop()


def _status(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return answer.status
    except urllib.error.HTTPError as refused:
        return refused.code
    except OSError:
        return None


def _probe_gateway(url: str, token: str, answers: list, stop: threading.Event) -> None:
    while not stop.is_set():
        answers.append(_mcp_initialize(url, token))
        stop.wait(0.2)


def _mcp_initialize(url: str, token: str) -> int | None:
    """The status of an MCP `initialize` (the gateway authenticates the token against the ledger)."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "ha-test", "version": "1"}}})
    request = urllib.request.Request(url, data=body.encode(), method="POST", headers={
        "Authorization": f"Bearer {token}", "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream"})
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.status
    except urllib.error.HTTPError as refused:
        return refused.code
    except OSError:
        return None
