"""Issue 24: a token reads its jobs' history (`GET /api/v1/jobs/{job_id}/events`)."""

import pytest

from api.models import WorkerToken
from ledger import services
from tests.api.conftest import ApiClient, issue, lease_body

pytestmark = pytest.mark.django_db


def test_a_token_reads_the_history_of_a_job_in_its_scope(api):
    api.post("/api/v1/jobs", {"job_id": "h1", "tenant": "acme", "action": "reckon.echo", "payload": {}})
    lease = api.post("/api/v1/jobs/h1/claim", {"worker": "w1"}).json
    api.post("/api/v1/jobs/h1/lease/begin", lease_body(lease))
    api.post("/api/v1/jobs/h1/lease/success", lease_body(lease, result_ref="r-1"))
    history = api.get("/api/v1/jobs/h1/events")
    assert history.status == 200
    assert [e["kind"] for e in history.json] == ["enqueued", "claimed", "side_effect_started", "succeeded"]
    prefix = WorkerToken.objects.get(name="all").prefix
    claimed = history.json[1]
    assert claimed["actor"] == f"w1 [token all {prefix}]" and claimed["evidence"]["fencing_token"] == 1
    assert history.json[0]["actor"] == f"api [token all {prefix}]" and history.json[0]["attempt"] == 1
    assert claimed["after"] == {"job": "running", "attempt": 1, "execution": "running", "delivery": "leased",
                                "side_effect": "not_attempted"}
    assert all(len(e["hash"]) == 64 for e in history.json)


def test_a_job_outside_the_scope_has_no_history_to_that_token(api):
    services.enqueue_job(job_id="h2", tenant="beta", action="reckon.echo", payload={})
    other = ApiClient(issue(["acme"], ["*"], name="acme-only")).get("/api/v1/jobs/h2/events")
    missing = api.get("/api/v1/jobs/nope/events")
    assert other.status == missing.status == 404 and other.json == {
        "error": {**missing.json["error"], "message": other.json["error"]["message"]}}


def test_the_history_is_in_the_openapi_document(api):
    document = api.get("/api/v1/openapi.json", token=None).json
    operation = document["paths"]["/jobs/{job_id}/events"]["get"]
    assert operation["operationId"] == "getJobEvents" and {"200", "401", "404"} <= set(operation["responses"])
    assert document["paths"]["/jobs"]["post"]["responses"]["201"]["links"]["history"]["operationId"] == "getJobEvents"
