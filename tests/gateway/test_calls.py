"""Each row of the gateway's call table, with a real upstream process, a real gateway process and
the SDK's client: new key, replay, same key with other arguments, timeout → unknown → reconciled,
not found → run again, undeclared tools, no token."""

import urllib.error
import urllib.request
import uuid
from datetime import timedelta

import pytest

from api.models import WorkerToken
from api.tokens import worker_token_create
from ledger import services
from ledger.models import Attempt, Job
from ledger.services import ClockTimestamp
from ledger.states import Execution, JobStatus, SideEffect
from reconciliation.models import ReconciliationCheck
from reconciliation.passes import reconcile_job, reconcile_until_idle
from tests.conftest import event_kinds, expire_lease, token_issuer
from tests.gateway.conftest import call, list_tools, text
from tests.processes import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def acme_token() -> str:
    return worker_token_create(name="coder", tenants=["acme"], actions=["*"], created_by=token_issuer()).token


def title() -> str:
    return f"note-{uuid.uuid4().hex[:8]}"


def only_job(action: str = "mcp:notes.create_note") -> Job:
    [job] = Job.objects.filter(action=action)
    return job


def test_it_runs_a_new_key_once_and_returns_the_upstream_result(gateway, upstream):
    name = title()

    result = call(gateway.url, acme_token(), "notes_create_note", {"title": name, "body": "hello"})

    assert not result.is_error and name in text(result)
    assert upstream.notes(name) == 1
    job = only_job()
    assert job.status == JobStatus.SUCCEEDED and job.tenant == "acme"
    assert result.meta["reckon/job"] == job.job_id and "reckon/replay" not in result.meta
    attempt = Attempt.objects.get(job=job)
    assert (attempt.execution_state, attempt.side_effect_state) == (Execution.SUCCEEDED, SideEffect.CONFIRMED)
    # the token's name and the client's clientInfo, then the token's prefix: every event names the token
    coder = WorkerToken.objects.get(name="coder")
    assert attempt.lease_owner == f"mcp:coder:test-agent/1.0 (token {coder.prefix})"
    assert set(job.events.values_list("actor", flat=True)) == {attempt.lease_owner}
    assert event_kinds(job.job_id) == ["enqueued", "claimed", "side_effect_started", "succeeded"]


def test_the_same_call_again_is_answered_from_the_ledger_without_calling_the_upstream(gateway, upstream):
    token, name = acme_token(), title()
    first = call(gateway.url, token, "notes_create_note", {"title": name, "body": "hello"})

    again = call(gateway.url, token, "notes_create_note", {"title": name, "body": "hello"})

    assert upstream.notes(name) == 1
    assert again.meta["reckon/replay"] is True
    assert text(again) == text(first) and not again.is_error
    assert event_kinds(only_job().job_id)[-1] == "enqueue_repeated"


def test_the_same_key_with_other_arguments_is_refused_and_nothing_is_called(gateway, upstream):
    token, name = acme_token(), title()
    key = {"reckon/idempotency_key": f"order-{name}"}
    call(gateway.url, token, "keyed_create_note", {"title": name, "body": "first"}, meta=key)

    refused = call(gateway.url, token, "keyed_create_note", {"title": name, "body": "second"}, meta=key)

    assert refused.is_error
    assert "used before with other arguments" in text(refused) and "nothing called" in text(refused)
    assert refused.meta["reckon/job"] == Job.objects.get(action="mcp:keyed.create_note").job_id
    assert upstream.notes(name) == 1
    assert Job.objects.get(action="mcp:keyed.create_note").status == JobStatus.SUCCEEDED


def test_a_key_from_meta_is_required_when_the_tool_says_so(gateway, upstream):
    name = title()

    refused = call(gateway.url, acme_token(), "keyed_create_note", {"title": name, "body": "x"})

    assert refused.is_error and "reckon/idempotency_key" in text(refused)
    assert upstream.notes(name) == 0 and not Job.objects.exists()


def test_a_timeout_is_unknown_never_repeated_and_once_reconciled_the_agent_is_told_what_was_found(gateway, upstream):
    token, name = acme_token(), title()
    # The upstream writes, then answers only after five times the tool's timeout (2 s): long after the
    # gateway gave up, and long before the package's end, whose upstream would otherwise wait for it.
    arguments = {"title": name, "body": "slow", "stall": 10}

    lost = call(gateway.url, token, "notes_create_note", arguments)

    assert lost.is_error and "outcome unknown, not repeated" in text(lost)
    job = only_job()
    assert job.job_id in text(lost) and f"/jobs/{job.job_id}/" in text(lost)
    assert job.status == JobStatus.NEEDS_RECONCILIATION
    attempt = Attempt.objects.get(job=job)
    assert (attempt.execution_state, attempt.side_effect_state) == (Execution.UNKNOWN, SideEffect.AMBIGUOUS)

    again = call(gateway.url, token, "notes_create_note", arguments)

    assert again.is_error and "outcome unknown, not repeated" in text(again)
    assert upstream.notes(name) == 1

    decision = reconcile_job(job_id=job.job_id)  # the reconciler asks the upstream's find_note

    assert decision.outcome == "confirmed"
    settled = call(gateway.url, token, "notes_create_note", arguments)
    # The look-up's answer is not the tool's: the agent is told the effect was found, and by what.
    assert not settled.is_error and "reckon/replay" not in settled.meta and settled.meta["reckon/reconciled"]
    assert settled.meta["reckon/found"] == {"id": settled.meta["reckon/found"]["id"], "title": name}
    assert settled.meta["reckon/lookup"] == {"tool": "notes.find_note", "arguments": {"title": name}}
    assert settled.structured_content is None and "found by the look-up notes.find_note" in text(settled)
    assert upstream.notes(name) == 1


def test_a_call_found_not_to_have_happened_runs_again_on_the_next_call(gateway, upstream):
    token, name = acme_token(), title()
    arguments = {"title": name, "body": "held", "hold": name}  # received, but nothing written before the timeout

    lost = call(gateway.url, token, "notes_create_note", arguments)

    assert "outcome unknown" in text(lost) and upstream.started(name)
    upstream.drop(name)  # the call still in flight at the upstream ends without writing anything
    wait_for(lambda: upstream.dropped(name), timeout=30, message="the held call to end")
    assert upstream.notes(name) == 0
    job = only_job()
    assert reconcile_job(job_id=job.job_id).outcome == "not_found"

    upstream.release(name)
    ran = call(gateway.url, token, "notes_create_note", arguments)

    assert not ran.is_error and "reckon/replay" not in ran.meta
    assert upstream.notes(name) == 1
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED and job.attempts.count() == 2


def due(job: Job) -> bool:
    return Job.objects.due_for_reconciliation(ClockTimestamp()).filter(pk=job.pk).exists()


def test_the_reconcilers_first_look_at_an_unknown_call_waits_past_the_tools_timeout(gateway, upstream):
    """An upstream that ignores the cancel still runs the call after the gateway gave up on it: a
    look at once would find nothing, say not_found, and let the next call repeat the effect."""
    token, name = acme_token(), title()
    arguments = {"title": name, "body": "late", "hold": name}  # received; written only when released

    lost = call(gateway.url, token, "notes_create_note", arguments)

    assert "outcome unknown" in text(lost) and upstream.started(name)
    job = only_job()
    became_unknown = job.events.get(kind="observation_lost").at
    # create_note's timeout (2 s), from the transaction that made it unknown (its clock read at the
    # job's lock, a moment before the event's own time)
    assert job.next_check_at - became_unknown > timedelta(seconds=1.5)
    assert not due(job) and reconcile_until_idle() == []
    assert not ReconciliationCheck.objects.filter(job=job).exists()

    upstream.release(name)  # meanwhile the upstream finishes the call the gateway gave up on
    wait_for(lambda: upstream.notes(name) == 1, timeout=30, message="the late call to be written")
    wait_for(lambda: due(job), timeout=30, message="the first look to fall due")
    [decision] = reconcile_until_idle()

    assert (decision.job_id, decision.outcome) == (job.job_id, "confirmed")
    again = call(gateway.url, token, "notes_create_note", arguments)
    assert not again.is_error and again.meta["reckon/reconciled"] is True
    assert upstream.notes(name) == 1


def test_a_call_whose_gateway_vanished_is_first_looked_at_a_timeout_after_the_sweeper_found_it(actions_file):
    job = services.enqueue_job(job_id=f"mcp-vanished-{uuid.uuid4().hex[:8]}", tenant="acme",
                               action="mcp:notes.create_note", payload={"arguments": {"title": "t"}})
    services.begin_side_effect(lease=services.claim_job(job_id=job.job_id, worker="mcp:gone"))
    expire_lease(job)  # the gateway died mid-call: its lease ran out with the side effect submitted

    assert job.job_id in services.sweep_expired_leases().unknown

    job.refresh_from_db()
    swept = job.events.get(kind="lease_expired_unknown").at
    assert job.status == JobStatus.NEEDS_RECONCILIATION
    assert job.next_check_at - swept > timedelta(seconds=1.5) and not due(job)


def test_a_tool_error_is_a_definitive_failure_returned_to_the_agent(gateway, upstream):
    name = title()

    result = call(gateway.url, acme_token(), "notes_create_note", {"title": name, "body": "refuse"})

    assert result.is_error and "refuses" in text(result)
    job = only_job()
    first = job.attempts.get(number=1)
    assert (first.execution_state, first.side_effect_state) == (Execution.FAILED, SideEffect.NOT_FOUND)
    assert job.status == JobStatus.PENDING  # the upstream said nothing happened: the next identical call may run


def test_read_only_tools_pass_through_unjournaled(gateway, upstream):
    token, name = acme_token(), title()
    call(gateway.url, token, "notes_create_note", {"title": name, "body": "x"})

    found = call(gateway.url, token, "notes_find_note", {"title": name})

    assert not found.is_error and found.structured_content["result"][0]["title"] == name
    assert not Job.objects.filter(action="mcp:notes.find_note").exists()


def test_an_undeclared_tool_is_refused_naming_the_file_to_change(gateway, upstream):
    token = acme_token()

    refused = call(gateway.url, token, "notes.secret_tool", {})

    assert refused.is_error and "not declared" in text(refused) and "RECKON_ACTIONS_FILE" in text(refused)
    assert "notes_secret_tool" not in list_tools(gateway.url, token)
    assert not Job.objects.exists()


def test_a_stdio_upstream_is_journaled_the_same_way(gateway, upstream):
    name = title()

    result = call(gateway.url, acme_token(), "local_create_note", {"title": name, "body": "over stdio"})

    assert not result.is_error and upstream.notes(name) == 1
    assert Job.objects.get(action="mcp:local.create_note").status == JobStatus.SUCCEEDED


def test_without_a_worker_token_the_gateway_answers_401(gateway):
    request = urllib.request.Request(gateway.url, data=b"{}", method="POST",
                                     headers={"Content-Type": "application/json", "Authorization": "Bearer rk_nope"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 401
