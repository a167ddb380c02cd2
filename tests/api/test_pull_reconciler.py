"""The client's pull-reconciliation helper against a real gunicorn, and examples/pull_worker.py
--reconcile as a process: it claims look-ups of unknown notes and answers what the outbox proves."""

from __future__ import annotations

import subprocess
import sys

import pytest
from reckon_client import Client, Finding, ReckonError

from ledger.actions import _registry
from ledger.declarations import load_actions_file
from ledger.models import Job
from reconciliation.models import ReconciliationCheck
from tests.api.conftest import issue
from tests.conftest import latest_attempt
from tests.processes import ROOT, WebServer, database_url_of_tests
from tests.reconciliation.helpers import assert_ledger_clean, unknown_job

pytestmark = pytest.mark.django_db(transaction=True)

# notes.write as the README declares it, looked up by agents in pull mode.
PULL_ACTIONS = """
[actions."notes.write"]
executor = "external"
reversible = true
queryable = true
reconciler = "external"
"""


@pytest.fixture(scope="module")
def pull_server(tmp_path_factory, django_db_setup):
    path = tmp_path_factory.mktemp("pull") / "actions.toml"
    path.write_text(PULL_ACTIONS)
    declared = load_actions_file(path, required=True)
    env = {"DATABASE_URL": database_url_of_tests(), "RECKON_ACTIONS_FILE": str(path)}
    try:
        with WebServer(env=env, log_name="pull-gunicorn") as server:
            yield server
    finally:
        for action in declared:
            _registry.pop(action.name, None)


def test_the_helper_claims_a_look_up_and_answers_it(pull_server):
    unknown_job("look-1", "notes.write", {"text": "hi"})
    client = Client(pull_server.url, issue(["acme"], ["notes.write"], name="agent"))
    look_up = client.next_reconciliation("agent-1", wait_seconds=5)
    assert (look_up.job_id, look_up.idempotency_key, look_up.attempt["execution"]) == (
        "look-1", "notes.write:look-1", "unknown")
    assert client.claim_reconciliation("agent-2") is None  # leased to agent-1
    applied = look_up.confirmed("note-77", evidence={"found": "note-77"})
    assert applied["applied"] == "succeeded"
    assert (latest_attempt("look-1").result_ref, Job.objects.get(job_id="look-1").status) == ("note-77", "succeeded")
    check = ReconciliationCheck.objects.get(job__job_id="look-1")
    assert (check.outcome, check.evidence["agent"]) == ("confirmed", "agent-1")
    with pytest.raises(ReckonError) as late:  # answered already: the lease moved on
        look_up.answer(Finding.NOT_FOUND, reason="changed my mind")
    assert late.value.code == "answer_refused"
    assert latest_attempt("look-1").number == 1
    assert_ledger_clean()


def test_an_exception_while_looking_answers_unavailable(pull_server):
    unknown_job("look-2", "notes.write", {"text": "hi"})
    client = Client(pull_server.url, issue(["acme"], ["notes.write"], name="agent"))
    with pytest.raises(TimeoutError):
        with client.next_reconciliation("agent-1", wait_seconds=5) as look_up:
            raise TimeoutError("the provider's search timed out")
    assert look_up.applied["outcome"] == "unavailable" and look_up.applied["applied"].startswith("retry in")
    assert Job.objects.get(job_id="look-2").status == "needs_reconciliation"  # asked again later
    check = ReconciliationCheck.objects.get(job__job_id="look-2")
    assert check.outcome == "unavailable"
    assert "TimeoutError: the provider's search timed out" in str(check.evidence) + check.error
    assert_ledger_clean()


def test_the_pull_worker_reconciles_what_its_outbox_proves(pull_server, tmp_path):
    outbox = tmp_path / "outbox"
    outbox.mkdir()
    unknown_job("written", "notes.write", {"text": "it was written"})
    (outbox / "notes.write:written.txt").write_text("it was written\n")  # the effect happened
    unknown_job("lost", "notes.write", {"text": "never written"})  # the worker died before writing
    token = issue(["acme"], ["notes.write"], name="notes-agent")

    agent = subprocess.run(
        [sys.executable, "examples/pull_worker.py", "--reconcile", "--url", pull_server.url, "--outbox",
         str(outbox), "--worker", "notes-agent", "--max-jobs", "2", "--wait", "10"],
        cwd=ROOT, env={"PATH": "/usr/bin:/bin", "RECKON_API_TOKEN": token}, capture_output=True, text=True,
        timeout=60,
    )
    assert agent.returncode == 0, agent.stdout + agent.stderr
    assert sorted(agent.stdout.splitlines()) == ["lost: not_found -> replayed", "written: confirmed -> succeeded"]
    assert latest_attempt("written").result_ref == str(outbox / "notes.write:written.txt")
    replay = latest_attempt("lost")
    assert (replay.number, replay.execution_state) == (2, "not_started")  # the same key, once more
    assert Job.objects.get(job_id="lost").status == "pending"
    assert_ledger_clean()
