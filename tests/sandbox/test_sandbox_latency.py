"""The provider's own round trip: --latency-ms and PUT /_admin/latency delay every lookup and effect,
never admin or health, and concurrent requests wait side by side (the server is threaded)."""

import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from sandbox.testing import CHECKOUT, SandboxProcess, free_port

MAIL = {"to": "ada@example.com", "subject": "s", "body": "b"}


def timed(sandbox, method, path, body=None):
    started = time.monotonic()
    response = sandbox.request(method, path, body)
    return response, time.monotonic() - started


def test_latency_option_delays_lookups_and_effects_but_not_health(tmp_path):
    with SandboxProcess(tmp_path / "slow.sqlite3", latency_ms=300) as sandbox:
        assert sandbox.request("GET", "/_admin/latency").json == {"ms": 300.0}
        lookup, lookup_s = timed(sandbox, "GET", "/messages?marker=m1")
        effect, effect_s = timed(sandbox, "POST", "/messages", MAIL)
        health, health_s = timed(sandbox, "GET", "/_health")
        assert (lookup.status, effect.status, health.status) == (200, 201, 200)
        assert lookup_s >= 0.3 and effect_s >= 0.3
        assert health_s < 0.3
        assert "X-Sandbox-Fault-Injected" not in lookup.headers  # a round trip, not a fault


def test_concurrent_lookups_wait_side_by_side_not_one_after_another(tmp_path):
    with SandboxProcess(tmp_path / "slow.sqlite3", latency_ms=400) as sandbox:
        started = time.monotonic()
        with ThreadPoolExecutor(16) as pool:
            statuses = list(pool.map(lambda n: sandbox.request("GET", f"/messages?marker=m{n}").status, range(16)))
        elapsed = time.monotonic() - started
        assert statuses == [200] * 16
        assert 0.4 <= elapsed < 16 * 0.4 / 4  # serialised sleeps would take 6.4 s


def test_admin_endpoint_sets_the_latency_and_reset_restores_it(sandbox):
    try:
        assert sandbox.request("PUT", "/_admin/latency", {"ms": 250}).json == {"ms": 250.0}
        _, slow_s = timed(sandbox, "GET", "/invoices?marker=x")
        assert slow_s >= 0.25
        sandbox.reset()
        assert sandbox.request("GET", "/_admin/latency").json == {"ms": 0.0}
        _, fast_s = timed(sandbox, "GET", "/invoices?marker=x")
        assert fast_s < 0.25
    finally:
        sandbox.set_latency(0)


@pytest.mark.parametrize("body", [{"ms": -1}, {"ms": "50"}, {"ms": True}, {"ms": 1e9}, {}, {"ms": 5, "x": 1}])
def test_an_invalid_latency_is_a_400_and_changes_nothing(sandbox, body):
    sandbox.set_latency(10)
    try:
        response = sandbox.request("PUT", "/_admin/latency", body)
        assert response.status == 400, response.json
        assert "latency" in response.json["error"]
        assert sandbox.request("GET", "/_admin/latency").json == {"ms": 10.0}
    finally:
        sandbox.set_latency(0)


def test_manage_py_sandbox_refuses_a_negative_latency(tmp_path):
    result = subprocess.run(
        [sys.executable, "manage.py", "sandbox", "--port", str(free_port()),
         "--db", str(tmp_path / "x.sqlite3"), "--latency-ms", "-5"],
        cwd=CHECKOUT, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "latency must be between 0 and" in result.stderr
