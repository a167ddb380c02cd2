"""The provider as a process: durability across restarts and kills, the management command."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sandbox.testing import CHECKOUT, SandboxProcess, call, free_port

INVOICE = {"customer": "cus_1", "amount_cents": 700, "currency": "gbp"}


def test_effects_survive_a_clean_stop_and_a_new_process_on_the_same_file(tmp_path):
    db = tmp_path / "provider.sqlite3"
    with SandboxProcess(db) as first:
        invoice = first.request("POST", "/invoices", INVOICE, {
            "Idempotency-Key": "k-durable", "X-Reckon-Marker": "k-durable"}).json
        first.request("POST", "/messages", {"to": "a@b.c", "subject": "s", "body": "b"},
                      {"X-Reckon-Marker": "m-durable"})
        first.request("PUT", "/_admin/profiles/brand", {"account": "acme"})
        first.request("POST", "/credentials/db/rotate", {})
        first_pid = first.pid
    assert db.exists()

    with SandboxProcess(db) as second:
        assert second.pid != first_pid
        summary = second.effects()
        assert summary["total"] == 3
        assert summary["by_marker"] == {"k-durable": 1, "m-durable": 1}
        replay = second.request("POST", "/invoices", INVOICE, {"Idempotency-Key": "k-durable"})
        assert replay.status == 200 and replay.json == invoice
        assert second.request("GET", "/profiles/brand").json["account"] == "acme"
        assert second.request("POST", "/credentials/db/rotate", {}).json["version"] == 2
        assert second.effects(key="k-durable")["count"] == 1


def test_a_committed_effect_survives_sigkill(tmp_path):
    with SandboxProcess(tmp_path / "provider.sqlite3") as provider:
        created = provider.request("POST", "/invoices", INVOICE, {"Idempotency-Key": "k-kill"})
        assert created.status == 201
        os.kill(provider.pid, signal.SIGKILL)
        provider.process.wait(timeout=5)
        provider.restart()
        found = provider.request("GET", "/invoices?idempotency_key=k-kill").json["invoices"]
        assert [i["id"] for i in found] == [created.json["id"]]


def test_sigterm_stops_the_server_cleanly(tmp_path):
    provider = SandboxProcess(tmp_path / "provider.sqlite3").start()
    assert provider.stop() == 0
    assert "Sandbox provider stopped" in provider.log_path.read_text()


def test_fault_rate_option_splits_the_rate_over_the_three_kinds(tmp_path):
    with SandboxProcess(tmp_path / "provider.sqlite3", fault_rate=0.3, seed=7) as provider:
        config = provider.request("GET", "/_admin/faults").json
        assert config["seed"] == 7
        assert config["rates"] == pytest.approx({"error_5xx": 0.1, "fail_before_commit": 0.1,
                                                 "drop_after_commit": 0.1})


def wait_for_health(url, process, bound=30.0):
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        try:
            response = call(url, "GET", "/_health", timeout=1.0)
            if response.json.get("pid") == process.pid:
                return response
        except OSError:
            pass
        try:
            process.wait(timeout=0.05)  # returns early (and fails below) if the command died
            break
        except subprocess.TimeoutExpired:
            continue
    raise AssertionError(f"manage.py sandbox did not answer /_health (exit {process.poll()})")


def test_manage_py_sandbox_serves_prints_the_url_and_stops_on_sigterm(tmp_path):
    port = free_port()
    log = tmp_path / "command.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "manage.py", "sandbox", "--port", str(port),
             "--db", str(tmp_path / "cmd.sqlite3"), "--fault-rate", "0.6", "--seed", "3"],
            cwd=CHECKOUT, stdout=out, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_for_health(url, process)
        rates = call(url, "GET", "/_admin/faults").json["rates"]
        assert rates == pytest.approx(dict.fromkeys(rates, 0.2)) and len(rates) == 3
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=5)
    output = log.read_text()
    assert f"listening on {url}" in output
    assert Path(tmp_path / "cmd.sqlite3").exists()


def test_manage_py_sandbox_refuses_an_invalid_fault_rate(tmp_path):
    result = subprocess.run(
        [sys.executable, "manage.py", "sandbox", "--port", str(free_port()),
         "--db", str(tmp_path / "x.sqlite3"), "--fault-rate", "2"],
        cwd=CHECKOUT, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "fault rate must be between 0 and 1" in result.stderr
