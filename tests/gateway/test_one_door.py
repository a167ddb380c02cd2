"""The gateway takes each step of a call through the ledger's one function per step
(enqueue_claim_and_begin for a new key, which is enqueue_job, claim_job and begin_side_effect in one
round trip; claim_and_begin for a key seen before; record_success, as the worker service and the
API do), and so through ledger.fastpath.run_step, the one way to the steps' database functions. Both
doors refuse an archived key alike (issue 40)."""

import uuid

import pytest

from api.tokens import authenticate, worker_token_create
from gateway import calls
from gateway.config import get_upstream
from ledger import fastpath
from ledger.models import Job
from ledger.states import JobStatus
from tests.conftest import event_kinds, token_issuer
from tests.ledger.test_fast_path import _ledger_rows
from tests.ledger.test_history_retention import cut_here, fresh_layout, retention_pass

pytestmark = pytest.mark.django_db


def test_a_call_goes_through_the_ledgers_step_functions(actions_file, monkeypatch):
    steps, run_step = [], fastpath.run_step
    monkeypatch.setattr(fastpath, "run_step", lambda step, params: steps.append(step) or run_step(step, params))
    issued = worker_token_create(name="door", tenants=["acme"], actions=["*"], created_by=token_issuer())
    token = authenticate(f"Bearer {issued.token}")
    arguments = {"title": f"door-{uuid.uuid4().hex[:8]}", "body": "b"}

    go = calls.open_call(token=token, policy=get_upstream("notes").tools["create_note"], arguments=arguments,
                         meta={}, agent="mcp:door:test")
    assert isinstance(go, calls.Go) and steps == ["enqueue_claim_begin"]  # all three in one statement
    answer = calls.close_call(go, {"content": [{"type": "text", "text": "created"}]})

    assert steps == ["enqueue_claim_begin", "succeed"] and not answer.is_error
    assert Job.objects.get(job_id=go.job_id).status == JobStatus.SUCCEEDED
    assert event_kinds(go.job_id) == ["enqueued", "claimed", "side_effect_started", "succeeded"]


def test_a_key_seen_before_takes_the_general_path_and_runs_its_next_attempt(actions_file, monkeypatch):
    steps, run_step = [], fastpath.run_step
    monkeypatch.setattr(fastpath, "run_step", lambda step, params: steps.append(step) or run_step(step, params))
    issued = worker_token_create(name="door2", tenants=["acme"], actions=["*"], created_by=token_issuer())
    token = authenticate(f"Bearer {issued.token}")
    arguments = {"title": f"door-{uuid.uuid4().hex[:8]}", "body": "b"}
    policy = get_upstream("notes").tools["create_note"]

    first = calls.open_call(token=token, policy=policy, arguments=arguments, meta={}, agent="mcp:door:test")
    calls.close_call(first, {"content": [{"type": "text", "text": "busy"}], "isError": True})  # retried next call
    again = calls.open_call(token=token, policy=policy, arguments=arguments, meta={}, agent="mcp:door:test")

    assert isinstance(again, calls.Go) and again.job_id == first.job_id and again.lease.attempt_number == 2
    # The one statement declined the known key, having changed nothing; the general path claimed it.
    assert steps == ["enqueue_claim_begin", "enqueue_claim_begin", "claim_begin"]
    assert event_kinds(first.job_id)[-3:] == ["enqueue_repeated", "claimed", "side_effect_started"]


@pytest.mark.parametrize("tool, door", [("notes", ["enqueue_claim_begin"]), ("ledgerbook", [])],
                         ids=["reversible: the one statement", "irreversible: enqueue_job"])
def test_an_archived_key_is_refused_as_archived_by_either_door_and_nothing_is_written(
        actions_file, monkeypatch, settings, tmp_path, tool, door):
    settings.RECKON_HISTORY_ARCHIVE_DIR = str(tmp_path)
    settings.RECKON_HISTORY_RETENTION_DAYS = 1.0
    settings.RECKON_HISTORY_RETENTION_BY_TENANT = {}
    fresh_layout()
    token = authenticate(f"Bearer {worker_token_create(name='door3', tenants=['acme'], actions=['*'], created_by=token_issuer()).token}")
    policy, arguments = get_upstream(tool).tools["create_note"], {"title": f"door-{uuid.uuid4().hex[:8]}", "body": "b"}
    first = calls.open_call(token=token, policy=policy, arguments=arguments, meta={}, agent="mcp:door:test")
    calls.close_call(first, {"content": [{"type": "text", "text": "created"}]})
    assert retention_pass(cut_here()).archived and not Job.objects.filter(job_id=first.job_id).exists()
    before = _ledger_rows()
    steps, run_step = [], fastpath.run_step
    monkeypatch.setattr(fastpath, "run_step", lambda step, params: steps.append(step) or run_step(step, params))

    with pytest.raises(calls.Refused) as refused:
        calls.open_call(token=token, policy=policy, arguments=arguments, meta={}, agent="mcp:door:test")

    assert str(refused.value).startswith(f"archived: this call of {tool}_create_note was made before: "
                                         f"job '{first.job_id}' succeeded on ")
    assert str(refused.value).endswith("a job id is never run again; not repeated, nothing called")
    assert steps == door and _ledger_rows() == before
