"""examples/pull_worker.py: a worker that loops forever on next_lease, and survives a restart of
Reckon (its requests fail, it backs off, and it carries on when Reckon is back)."""

from __future__ import annotations

import signal
import sys

import pytest

from ledger.models import Job
from tests.api.conftest import issue
from tests.conftest import make_job
from tests.processes import ROOT, ManagedProcess, WebServer, database_url_of_tests, free_port, wait_for
from tests.reconciliation.helpers import assert_ledger_clean

pytestmark = pytest.mark.django_db(transaction=True)


def _succeeded(job_id: str) -> bool:
    return Job.objects.get(job_id=job_id).status == "succeeded"


def test_the_pull_worker_carries_on_across_a_restart_of_reckon(external_actions, tmp_path):
    env = {"DATABASE_URL": database_url_of_tests(), "RECKON_ACTIONS_FILE": str(external_actions)}
    port = free_port()
    server = WebServer(env=env, port=port, log_name="restarted-gunicorn").start()
    outbox = tmp_path / "outbox"
    worker = ManagedProcess(
        [sys.executable, str(ROOT / "examples/pull_worker.py"), "--url", server.url, "--token",
         issue(["acme"], ["notes.write"], name="notes"), "--outbox", str(outbox), "--worker", "notes-1"],
        log_name="pull-worker",
    ).start()
    try:
        make_job("note-1", action="notes.write", tenant="acme", payload={"text": "before the restart"})
        wait_for(lambda: _succeeded("note-1"), timeout=30, message="note-1 to be written")

        server.stop()  # the worker's waiting request is cut off; its next ones are refused
        make_job("note-2", action="notes.write", tenant="acme", payload={"text": "while Reckon was down"})
        wait_for(lambda: "Reckon unavailable" in worker.output(), timeout=30, message="the worker to notice")
        server = WebServer(env=env, port=port, log_name="restarted-gunicorn").start()
        wait_for(lambda: _succeeded("note-2"), timeout=60, message="note-2 to be written after the restart")

        worker.process.send_signal(signal.SIGTERM)  # waiting for work: it stops at once
        assert worker.process.wait(timeout=15) == 0
    finally:
        worker.stop()
        server.stop()
    output = worker.output()
    assert "note-1: succeeded" in output and "note-2: succeeded" in output, output
    assert (outbox / "notes.write:note-1.txt").read_text() == "before the restart\n"
    assert (outbox / "notes.write:note-2.txt").read_text() == "while Reckon was down\n"
    assert sorted(p.name for p in outbox.iterdir()) == ["notes.write:note-1.txt", "notes.write:note-2.txt"]
    assert_ledger_clean()
