"""A claim of the next job that the dead-man gate leaves empty says why and when to ask again, the
client surfaces it, and a worker loop says it instead of waiting in silence."""

from __future__ import annotations

import sys

import pytest
from reckon_client import Client

from ledger.actions import _registry
from ledger.declarations import load_actions_file
from ledger.models import Job
from tests.api.conftest import issue
from tests.conftest import event_kinds, make_job
from tests.processes import ROOT, ManagedProcess, WebServer, database_url_of_tests, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

# The tutorial's notes.write, declared irreversible: the gate holds it while no loop runs.
IRREVERSIBLE = """
[actions."notes.write"]
executor = "external"
reversible = false
"""


@pytest.fixture(scope="module")
def gated_server(tmp_path_factory, django_db_setup):
    """A server whose dead-man gate is closed: no sweeper or reconciler has completed a pass."""
    path = tmp_path_factory.mktemp("gated") / "actions.toml"
    path.write_text(IRREVERSIBLE)
    declared = load_actions_file(path, required=True)
    env = {"DATABASE_URL": database_url_of_tests(), "RECKON_ACTIONS_FILE": str(path), "RECKON_GATE_BOUND_S": "60",
           "RECKON_CLAIM_POLL_S": "2"}
    try:
        with WebServer(env=env, log_name="gated-gunicorn") as server:
            yield server
    finally:
        for action in declared:
            _registry.pop(action.name, None)


def test_a_claim_the_gate_leaves_empty_says_why_and_when_to_ask_again(gated_server):
    make_job("held-1", action="notes.write", tenant="acme", payload={"text": "later"})
    client = Client(gated_server.url, issue(["acme"], ["notes.write"], name="notes"))
    assert client.next_lease("w", actions=["notes.write"], wait_seconds=1) is None
    nothing = client.nothing_claimed
    assert nothing.reason == "dead_man_gate" and nothing.retry_after == 2
    assert "the sweeper has not completed a pass yet" in nothing.message
    assert Job.objects.get(job_id="held-1").status == "pending"  # held, not lost

    # Nothing held in another tenant's scope: an ordinary empty answer.
    other = Client(gated_server.url, issue(["beta"], ["notes.write"], name="beta"))
    assert other.next_lease("w", actions=["notes.write"], wait_seconds=0) is None
    assert other.nothing_claimed.reason == "no_work"


def test_a_pull_worker_says_why_it_gets_nothing(gated_server, tmp_path):
    make_job("held-2", action="notes.write", tenant="acme", payload={"text": "later"})
    worker = ManagedProcess(
        [sys.executable, str(ROOT / "examples/pull_worker.py"), "--url", gated_server.url, "--token",
         issue(["acme"], ["notes.write"], name="notes"), "--outbox", str(tmp_path), "--wait", "1"],
        log_name="gated-pull-worker",
    )
    with worker:
        wait_for(lambda: "nothing claimed" in worker.output(), timeout=30, message="the worker to say why")
    said = [line for line in worker.output().splitlines() if line.startswith("nothing claimed")]
    assert "(dead_man_gate: irreversible jobs in scope are held by the dead-man gate:" in said[0]
    assert "ask again in 2 s" in said[0]
    assert not list(tmp_path.iterdir())  # nothing was written
    assert event_kinds("held-2")[-1] == "claim_refused" and Job.objects.get(job_id="held-2").status == "pending"
