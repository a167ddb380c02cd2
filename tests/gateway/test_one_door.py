"""The gateway takes each step of a call through the ledger's one function per step (claim_and_begin,
which is claim_job and begin_side_effect in one round trip, and record_success, as the worker
service and the API do), and so through ledger.fastpath.run_step, the one way to the steps'
database functions."""

import uuid

import pytest

from api.tokens import authenticate, worker_token_create
from gateway import calls
from gateway.config import get_upstream
from ledger import fastpath
from ledger.models import Job
from ledger.states import JobStatus
from tests.conftest import event_kinds

pytestmark = pytest.mark.django_db


def test_a_call_goes_through_the_ledgers_step_functions(actions_file, monkeypatch):
    steps, run_step = [], fastpath.run_step
    monkeypatch.setattr(fastpath, "run_step", lambda step, params: steps.append(step) or run_step(step, params))
    token = authenticate(f"Bearer {worker_token_create(name='door', tenants=['acme'], actions=['*']).token}")
    arguments = {"title": f"door-{uuid.uuid4().hex[:8]}", "body": "b"}

    go = calls.open_call(token=token, policy=get_upstream("notes").tools["create_note"], arguments=arguments,
                         meta={}, agent="mcp:door:test")
    assert isinstance(go, calls.Go) and steps == ["claim_begin"]  # claim_and_begin: both in one statement
    answer = calls.close_call(go, {"content": [{"type": "text", "text": "created"}]})

    assert steps == ["claim_begin", "succeed"] and not answer.is_error
    assert Job.objects.get(job_id=go.job_id).status == JobStatus.SUCCEEDED
    assert event_kinds(go.job_id) == ["enqueued", "claimed", "side_effect_started", "succeeded"]
