"""Chaos: the gateway is SIGKILLed while the upstream call is in flight, and the agent retries
through a second gateway process. Counted over the rounds: duplicate effects at the upstream,
lost calls, and calls that reached the upstream while their key was unknown — all must be 0."""

import os
import signal
import threading
import uuid

import pytest

from ledger.models import Job
from ledger.services import sweep_expired_leases
from ledger.states import Execution, JobStatus
from reconciliation.passes import reconcile_job
from tests.conftest import latest_attempt, token_issuer
from tests.gateway.conftest import Gateway, call, text
from tests.processes import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

ROUNDS = 3


def one_round(first: Gateway, second_url: str, token: str, upstream) -> dict:
    name = f"chaos-{uuid.uuid4().hex[:8]}"
    arguments = {"title": name, "body": "in flight", "hold": name}
    outcome: dict = {}

    def agent_call():
        try:
            outcome["first"] = call(first.url, token, "notes_create_note", arguments)
        except BaseException as exc:  # the gateway died under the call: the agent sees a broken call
            outcome["first"] = exc

    agent = threading.Thread(target=agent_call)
    agent.start()
    wait_for(lambda: upstream.started(name), timeout=60, message="the upstream to receive the call")
    os.killpg(first.process.pid, signal.SIGKILL)  # the gateway dies with the call in flight
    first.process.wait()
    upstream.release(name)  # ...and the upstream's effect lands after it died
    wait_for(lambda: upstream.notes(name) == 1, timeout=30, message="the effect at the upstream")
    agent.join(timeout=60)

    retries, ran_while_unknown = [], 0
    retries.append(call(second_url, token, "notes_create_note", arguments))  # lease still live: not repeated
    job = Job.objects.get(action="mcp:notes.create_note", payload__arguments__title=name)
    # The lease runs out (no clock is moved): the sweeper makes the attempt unknown.
    wait_for(lambda: sweep_expired_leases() and latest_attempt(job.job_id).execution_state == Execution.UNKNOWN,
             timeout=60, interval=0.2, message="the lease sweeper to make the attempt unknown")
    retries.append(call(second_url, token, "notes_create_note", arguments))
    ran_while_unknown += upstream.receipts(name) - 1
    decision = reconcile_job(job_id=job.job_id)
    settled = call(second_url, token, "notes_create_note", arguments)
    job.refresh_from_db()
    return {
        "duplicates": upstream.notes(name) - 1,
        "lost": 0 if job.status == JobStatus.SUCCEEDED and not settled.is_error else 1,
        "ran_while_unknown": ran_while_unknown,
        "retry_answers": [text(r) for r in retries],
        "reconciled": decision.outcome,
        "settled_reconciled": bool(settled.meta.get("reckon/reconciled")),
    }


def test_sigkill_of_the_gateway_mid_call_repeats_nothing_and_loses_nothing(actions_file, gateway, upstream):
    from api.tokens import worker_token_create

    token = worker_token_create(name="chaos-agent", tenants=["acme"], actions=["*"],
                                created_by=token_issuer()).token
    rounds = []
    for index in range(ROUNDS):
        with Gateway(actions_file, log_name=f"mcp-gateway-doomed-{index}") as doomed:
            rounds.append(one_round(doomed, gateway.url, token, upstream))
    totals = {key: sum(r[key] for r in rounds) for key in ("duplicates", "lost", "ran_while_unknown")}
    print(f"\ngateway SIGKILL mid-call, {ROUNDS} rounds: {totals}")

    assert totals == {"duplicates": 0, "lost": 0, "ran_while_unknown": 0}
    for result in rounds:
        assert "not repeated" in result["retry_answers"][0]
        assert "outcome unknown, not repeated" in result["retry_answers"][1]
        assert result["reconciled"] == "confirmed" and result["settled_reconciled"]


def test_an_upstream_restarted_mid_call_leaves_the_call_unknown_until_reconciled_then_it_runs_once(
        actions_file, gateway, upstream):
    from api.tokens import worker_token_create

    token = worker_token_create(name="chaos-agent", tenants=["acme"], actions=["*"],
                                created_by=token_issuer()).token
    totals = {"duplicates": 0, "lost": 0, "ran_while_unknown": 0}
    with Gateway(actions_file, log_name="mcp-gateway-second") as second:
        for _ in range(ROUNDS):
            name = f"restart-{uuid.uuid4().hex[:8]}"
            arguments = {"title": name, "body": "in flight", "hold": name}
            outcome = {}

            def agent_call(arguments=arguments, outcome=outcome):
                outcome["first"] = call(gateway.url, token, "notes_create_note", arguments)

            agent = threading.Thread(target=agent_call)
            agent.start()
            wait_for(lambda name=name: upstream.started(name), timeout=60, message="the upstream to receive the call")
            upstream.restart()  # SIGKILL mid-call (nothing written), then up again on the same port and file
            agent.join(timeout=60)
            assert "outcome unknown, not repeated" in text(outcome["first"])

            retry = call(second.url, token, "notes_create_note", arguments)  # through another gateway
            assert "outcome unknown, not repeated" in text(retry)
            totals["ran_while_unknown"] += upstream.receipts(name) - 1
            job = Job.objects.get(action="mcp:notes.create_note", payload__arguments__title=name)
            assert reconcile_job(job_id=job.job_id).outcome == "not_found"

            upstream.release(name)
            ran = call(second.url, token, "notes_create_note", arguments)
            job.refresh_from_db()
            totals["duplicates"] += max(upstream.notes(name) - 1, 0)
            totals["lost"] += 0 if not ran.is_error and job.status == JobStatus.SUCCEEDED \
                and upstream.notes(name) == 1 else 1
    print(f"\nupstream restarted mid-call, {ROUNDS} rounds: {totals}")

    assert totals == {"duplicates": 0, "lost": 0, "ran_while_unknown": 0}
