"""The API's claim, begin and success in one statement (the step functions every caller uses,
ledger/services/worker.py, given the token's scope): what they answer is what the ledger holds,
and whatever the statement leaves alone goes the general way."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from ledger import fastpath, services
from ledger.models import Job
from tests.api.conftest import ApiClient, event_count, issue, lease_body, ledger_state
from tests.conftest import event_kinds, make_job

pytestmark = pytest.mark.django_db


def test_the_answers_show_the_job_and_attempt_exactly_as_stored(api):
    make_job("s-1", payload={"to": "ann"}, identity=None)
    claimed = api.post("/api/v1/jobs/s-1/claim", {"worker": "w"})
    assert claimed.status == 201
    stored = api.get("/api/v1/jobs/s-1").json
    # The job as stored; the attempts and the open decisions are the job page's, not the claim's.
    assert claimed.json["job"] == {k: v for k, v in stored.items() if k not in ("attempts", "decisions")}
    assert claimed.json["job"]["status"] == "running"

    begun = api.post("/api/v1/jobs/s-1/lease/begin", lease_body(claimed.json))
    assert begun.status == 200
    assert begun.json["status"] == Job.objects.get(job_id="s-1").status == "running"
    assert begun.json["attempt"] == api.get("/api/v1/jobs/s-1").json["attempts"][-1]

    done = api.post("/api/v1/jobs/s-1/lease/success", lease_body(claimed.json, result_ref="r-1"))
    assert done.status == 200
    assert done.json["status"] == Job.objects.get(job_id="s-1").status == "succeeded"
    assert done.json["attempt"] == api.get("/api/v1/jobs/s-1").json["attempts"][-1]
    assert event_kinds("s-1") == ["enqueued", "claimed", "side_effect_started", "succeeded"]


def test_each_ordinary_step_is_one_statement_after_the_token(api):
    make_job("s-2")
    api.get("/api/v1/jobs/s-2")  # the token's first use records last_used_at (then once a minute)
    with CaptureQueriesContext(connection) as claim:
        claimed = api.post("/api/v1/jobs/s-2/claim", {"worker": "w"}).json
    with CaptureQueriesContext(connection) as begin:
        api.post("/api/v1/jobs/s-2/lease/begin", lease_body(claimed))
    with CaptureQueriesContext(connection) as success:
        api.post("/api/v1/jobs/s-2/lease/success", lease_body(claimed))
    for step, function in ((claim, "reckon_claim"), (begin, "reckon_begin"), (success, "reckon_succeed")):
        statements = [query["sql"] for query in step.captured_queries]
        assert len(statements) == 2 and "api_workertoken" in statements[0] and function in statements[1], statements


def test_a_stale_token_goes_the_general_way_and_is_recorded(api):
    make_job("s-3")
    first = api.post("/api/v1/jobs/s-3/claim", {"worker": "w"}).json
    stale = api.post("/api/v1/jobs/s-3/lease/begin", {**lease_body(first), "fencing_token": first["fencing_token"] + 5})
    assert (stale.status, stale.json["error"]["code"]) == (409, "stale_lease")
    assert event_kinds("s-3")[-1] == "late_write_rejected"
    assert api.post("/api/v1/jobs/s-3/lease/begin", lease_body(first)).status == 200


def test_an_identity_bound_job_is_left_to_the_general_path(api):
    make_job("s-4", identity={"account": "a"})
    claimed = api.post("/api/v1/jobs/s-4/claim", {"worker": "w"}).json
    refused = api.post("/api/v1/jobs/s-4/lease/begin", lease_body(claimed))
    assert (refused.status, refused.json["error"]["code"]) == (409, "invalid_transition")
    assert "verify it before any side effect" in refused.json["error"]["message"]


@pytest.mark.parametrize("scope", [(["beta"], ["*"]), (["*"], ["mail.send"])])
def test_no_step_function_runs_on_a_job_outside_the_scope(scope):
    make_job("s-5")  # pending: claimable by anyone who may see it
    make_job("s-6")
    lease = services.claim_job(job_id="s-6", worker="w")
    held = {"owner": lease.owner, "fencing_token": lease.token}  # a real lease, sent by the wrong token
    outsider = ApiClient(issue(*scope, name="outsider"))
    before, events = ledger_state(), event_count()
    for path, body in (("s-5/claim", {"worker": "x"}), ("s-6/lease/begin", held), ("s-6/lease/success", held)):
        answer = outsider.post(f"/api/v1/jobs/{path}", body)
        assert (answer.status, answer.json["error"]["code"]) == (404, "not_found")
    assert ledger_state() == before and event_count() == events


def _through_the_one_door(monkeypatch) -> list[str]:
    """Each step that reaches a database function, as ledger.fastpath.run_step saw it."""
    steps, run_step = [], fastpath.run_step

    def watched(step, params):
        steps.append(step)
        return run_step(step, params)

    monkeypatch.setattr(fastpath, "run_step", watched)
    return steps


def _functions_called(captured) -> list[str]:
    return [name for query in captured.captured_queries for name in ("reckon_claim", "reckon_begin", "reckon_succeed")
            if f"{name}(" in (query["sql"] or "")]


def test_the_worker_service_and_the_api_take_each_step_through_the_same_function(api, monkeypatch):
    steps = _through_the_one_door(monkeypatch)
    make_job("door-worker")
    make_job("door-api")

    with CaptureQueriesContext(connection) as in_process:
        lease = services.claim_job(job_id="door-worker", worker="w")
        services.begin_side_effect(lease=lease)
        services.record_success(lease=lease, result_ref="r")
    assert steps == ["claim", "begin", "succeed"] == [f.removeprefix("reckon_") for f in _functions_called(in_process)]

    steps.clear()
    with CaptureQueriesContext(connection) as over_http:
        claimed = api.post("/api/v1/jobs/door-api/claim", {"worker": "w"}).json
        api.post("/api/v1/jobs/door-api/lease/begin", lease_body(claimed))
        api.post("/api/v1/jobs/door-api/lease/success", lease_body(claimed))
    assert steps == ["claim", "begin", "succeed"] == [f.removeprefix("reckon_") for f in _functions_called(over_http)]
    assert event_kinds("door-worker") == event_kinds("door-api") == [
        "enqueued", "claimed", "side_effect_started", "succeeded"]


def test_a_job_outside_the_tokens_scope_is_no_job_on_either_path_and_stays_untouched(monkeypatch):
    make_job("door-other", tenant="globex")
    other = ApiClient(issue(tenants=["acme"], name="acme-only"))
    before = ledger_state()

    assert other.post("/api/v1/jobs/door-other/claim", {"worker": "w"}).status == 404
    monkeypatch.setattr(fastpath, "run_step", lambda step, params: None)  # the Python path decides
    assert other.post("/api/v1/jobs/door-other/claim", {"worker": "w"}).status == 404
    assert other.post("/api/v1/jobs/door-other/lease/begin", {"owner": "w", "fencing_token": 1}).status == 404
    assert ledger_state() == before
