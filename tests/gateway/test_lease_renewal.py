"""A journaled call's lease is short and renewed while the upstream runs the call (gateway/renewal.py):
a gateway SIGKILLed mid-call leaves a lease that runs out within seconds, and the next identical call
is told "outcome unknown, not repeated" then, not "in progress" for the tool's timeout and a sweep.
A call that meets a running job whose lease has run out sweeps it itself (the sweeper's one step)."""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid

import pytest
from django.conf import settings

from api.tokens import authenticate, worker_token_create
from gateway import calls
from gateway.config import META_KEY, get_upstream
from ledger.models import Job
from ledger.services import sweep_expired_leases
from ledger.states import Execution, JobStatus
from tests.conftest import event_kinds, expire_lease, latest_attempt, token_issuer
from tests.gateway.conftest import Gateway, call, text
from tests.processes import wait_for


def agent_token(name: str = "renewing-agent") -> str:
    return worker_token_create(name=name, tenants=["acme"], actions=["*"], created_by=token_issuer()).token


def opened(arguments: dict) -> calls.Answer | calls.Go:
    token = authenticate(f"Bearer {agent_token()}")
    return calls.open_call(token=token, policy=get_upstream("notes").tools["create_note"], arguments=arguments,
                           meta={}, agent="mcp:renewing-agent:test")


@pytest.mark.django_db
def test_a_renewal_extends_a_live_lease_and_is_refused_once_it_ran_out_and_was_swept(actions_file):
    go = opened({"title": f"renew-{uuid.uuid4().hex[:8]}", "body": "b"})
    first_expiry = latest_attempt(go.job_id).lease_expires_at

    assert calls.renew_call(go)
    assert latest_attempt(go.job_id).lease_expires_at > first_expiry
    expire_lease(go.job_id)  # the gateway stalled past its lease
    assert go.job_id in sweep_expired_leases().unknown

    assert not calls.renew_call(go)
    assert event_kinds(go.job_id)[-3:] == ["lease_renewed", "lease_expired_unknown", "late_write_rejected"]


@pytest.mark.django_db
def test_a_call_meeting_a_running_job_with_an_expired_lease_makes_it_unknown_at_once(actions_file):
    arguments = {"title": f"met-{uuid.uuid4().hex[:8]}", "body": "b"}
    go = opened(arguments)

    live = opened(arguments)
    assert "in progress in another call, not repeated" in live.content[0]["text"]  # its lease is live

    expire_lease(go.job_id)  # its gateway died: nobody renews the lease
    met = opened(arguments)

    assert "outcome unknown, not repeated" in met.content[0]["text"]
    job = Job.objects.get(job_id=go.job_id)
    assert job.status == JobStatus.NEEDS_RECONCILIATION
    swept = job.events.get(kind="lease_expired_unknown")
    assert swept.actor == "lease-sweeper"  # through the sweeper's own step
    assert job.events.filter(kind="claimed").count() == 1  # nothing ran again


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_a_sigkilled_gateways_call_is_unknown_within_its_lease_through_another_gateway(actions_file, gateway,
                                                                                      upstream):
    token, name = agent_token(), f"killed-{uuid.uuid4().hex[:8]}"
    arguments = {"title": name, "body": "in flight", "hold": name}
    with Gateway(actions_file, log_name="mcp-gateway-killed") as doomed:
        agent = threading.Thread(target=lambda: _ignore_broken(lambda: call(doomed.url, token, "notes_create_note",
                                                                            arguments)))
        agent.start()
        wait_for(lambda: upstream.started(name), timeout=60, message="the upstream to receive the call")
        os.killpg(doomed.process.pid, signal.SIGKILL)
        killed = time.monotonic()
        doomed.process.wait()
    agent.join(timeout=60)

    answers = []
    lease = settings.RECKON_MCP_GATEWAY_LEASE_S

    def told_unknown() -> bool:
        answers.append(text(call(gateway.url, token, "notes_create_note", arguments)))
        return "outcome unknown, not repeated" in answers[-1]

    wait_for(told_unknown, timeout=lease + 10, interval=0.2, message="the retry to be told the call is unknown")
    seconds = time.monotonic() - killed
    print(f"\ngateway SIGKILLed mid-call: told unknown {seconds:.1f} s after the kill (lease {lease:g} s), "
          f"after {len(answers) - 1} answers 'in progress'")

    assert seconds < lease + 3
    assert all("in progress in another call, not repeated" in answer for answer in answers[:-1])
    assert upstream.receipts(name) == 1  # not repeated
    upstream.release(name)  # the call the dead gateway sent finishes at the upstream


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_a_call_longer_than_its_lease_is_kept_alive_and_its_result_recorded(actions_file, upstream):
    token, name = agent_token(), f"long-{uuid.uuid4().hex[:8]}"
    arguments = {"title": name, "body": "slow", "hold": name}
    outcome = {}
    with Gateway(actions_file, log_name="mcp-gateway-renewing", env={"RECKON_MCP_GATEWAY_LEASE_S": "1.5"}) as short:
        # keyed.create_note: the upstream's timeout (10 s), well past the lease's 1.5
        agent = threading.Thread(target=lambda: outcome.setdefault("result", call(
            short.url, token, "keyed.create_note", arguments, meta={META_KEY: name})))
        agent.start()
        wait_for(lambda: upstream.started(name), timeout=60, message="the upstream to receive the call")
        job = Job.objects.get(action="mcp:keyed.create_note", payload__arguments__title=name)
        # Three leases' time: the sweeper, run meanwhile, finds nothing expired.
        wait_for(lambda: event_kinds(job.job_id).count("lease_renewed") >= 6, timeout=30, interval=0.1,
                 message="the lease to be renewed six times")
        assert job.job_id not in sweep_expired_leases().unknown
        assert latest_attempt(job.job_id).execution_state == Execution.RUNNING
        upstream.release(name)
        agent.join(timeout=60)

    result = outcome["result"]
    assert not result.is_error and name in text(result) and "reckon/late" not in result.meta
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
    assert "lease_expired_unknown" not in event_kinds(job.job_id)


def _ignore_broken(work) -> None:
    try:
        work()
    except BaseException:  # noqa: BLE001  # the gateway died under the call: the agent sees a broken call
        pass
