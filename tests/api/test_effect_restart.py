"""effect() called again by a restarted agent: the recorded result, or "unknown, held", never a
second side effect. The agent is a real process, SIGKILLed in the middle of its effect."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from django.db.models.functions import Now

from ledger.models import Attempt, Job
from tests.api.conftest import issue
from tests.conftest import latest_attempt
from tests.processes import ROOT, ManagedProcess, wait_for
from tests.reconciliation.helpers import assert_ledger_clean

pytestmark = pytest.mark.django_db(transaction=True)

# An agent that sends one "charge" (a line appended to a file) under effect(); --hang stops it
# inside the block, after the charge, until it is killed. What it learns it prints as JSON.
AGENT = r"""
import json, sys, threading
from reckon_client import AlreadySucceeded, Client, HeldUnknown

url, token, job_id, charges, hang = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5] == "hang"
client = Client(url, token)
try:
    with client.effect("ext.slow", job_id, {"cents": 100}, tenant="acme", worker=f"agent:{job_id}") as lease:
        with open(charges, "a") as ledger:
            ledger.write(lease.idempotency_key + "\n")
        if hang:
            threading.Event().wait()  # killed here: the charge is made, its outcome never recorded
        lease.result_ref = f"ch_{job_id}"
    print(json.dumps({"ran": lease.result_ref}))
except AlreadySucceeded as done:
    print(json.dumps({"already": done.result_ref}))
except HeldUnknown as held:
    print(json.dumps({"held": held.reason, "status": held.job["status"], "message": str(held)}))
"""


def _agent(server, token: str, job_id: str, charges, *, hang: bool = False) -> list[str]:
    return [sys.executable, "-c", AGENT, server.url, token, job_id, str(charges), "hang" if hang else "go"]


def _run(argv: list[str]) -> dict:
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def test_a_restarted_agent_gets_the_recorded_result_without_a_second_charge(api_server, tmp_path):
    token, charges = issue(["acme"], ["ext.slow"], name="agent"), tmp_path / "charges"
    assert _run(_agent(api_server, token, "pay-1", charges)) == {"ran": "ch_pay-1"}
    assert _run(_agent(api_server, token, "pay-1", charges)) == {"already": "ch_pay-1"}  # restarted
    assert charges.read_text().splitlines() == ["ext.slow:pay-1"]
    assert Job.objects.get(job_id="pay-1").attempts.count() == 1
    assert_ledger_clean()


def test_a_restarted_agent_is_told_unknown_held_when_it_died_mid_effect(api_server, tmp_path):
    token, charges = issue(["acme"], ["ext.slow"], name="agent"), tmp_path / "charges"
    with ManagedProcess(_agent(api_server, token, "pay-2", charges, hang=True), log_name="dying-agent") as agent:
        wait_for(lambda: charges.exists() and charges.read_text(), timeout=30, message="the charge")
        agent.process.kill()  # SIGKILL after the charge, before the outcome is recorded
        agent.process.wait(timeout=10)
    # ext.slow's lease lasts 1 s: once it has run out, nobody holds the attempt.
    wait_for(lambda: Attempt.objects.filter(job__job_id="pay-2", lease_expires_at__lt=Now()).exists(),
             timeout=10, message="the dead agent's lease to run out")

    answer = _run(_agent(api_server, token, "pay-2", charges))  # the agent, restarted
    assert answer["held"] == "previous_attempt_unknown" and answer["status"] == "needs_reconciliation"
    assert "held until it is reconciled" in answer["message"]
    assert charges.read_text().splitlines() == ["ext.slow:pay-2"]  # never charged twice
    attempt = latest_attempt("pay-2")
    assert (attempt.number, attempt.execution_state, attempt.side_effect_state) == (1, "unknown", "ambiguous")
    assert_ledger_clean()
