"""Tenant × action × endpoint: a token reaches exactly the jobs its scope names, and a job
outside its scope is, to that token, indistinguishable from a job that does not exist."""

import pytest

from ledger import services
from tests.api.conftest import ApiClient, event_count, issue, ledger_state

pytestmark = pytest.mark.django_db

SCOPES = {
    "exact": (["acme"], ["reckon.echo"]),
    "all_tenants": (["*"], ["reckon.echo"]),
    "all_actions": (["acme"], ["*"]),
    "other_tenant": (["beta"], ["*"]),
    "other_action": (["*"], ["mail.send"]),
}
ALLOWED = {"exact", "all_tenants", "all_actions"}

# endpoint -> (method, path, body builder from the live lease, expected success status)
ENDPOINTS = {
    "enqueue": (
        "POST",
        "/api/v1/jobs",
        lambda lease: {"job_id": "new", "tenant": "acme", "action": "reckon.echo", "payload": {}},
        201,
    ),
    "read": ("GET", "/api/v1/jobs/j", lambda lease: None, 200),
    "claim": ("POST", "/api/v1/jobs/fresh/claim", lambda lease: {"worker": "w-2"}, 201),
    "renew": ("POST", "/api/v1/jobs/j/lease/renew", lambda lease: lease, 200),
    "identity": ("POST", "/api/v1/jobs/j/lease/identity", lambda lease: {**lease, "observed": {}}, 200),
    "begin": ("POST", "/api/v1/jobs/j/lease/begin", lambda lease: lease, 200),
    "success": ("POST", "/api/v1/jobs/begun/lease/success", lambda lease: None, 200),
    "failure": ("POST", "/api/v1/jobs/j/lease/failure", lambda lease: {**lease, "error": "x"}, 200),
    "unknown": ("POST", "/api/v1/jobs/begun/lease/unknown", lambda lease: None, 200),
}


def _leased(job_id: str, worker: str = "w-1") -> services.Lease:
    services.enqueue_job(job_id=job_id, tenant="acme", action="reckon.echo", payload={})
    return services.claim_job(job_id=job_id, worker=worker)


@pytest.mark.parametrize("endpoint", ENDPOINTS)
@pytest.mark.parametrize("scope", [*SCOPES, "no_token", "revoked"])
def test_scope_matrix(scope, endpoint):
    from api.models import WorkerToken
    from api.tokens import holder_name, worker_token_revoke

    if scope == "no_token":
        token = None
    elif scope == "revoked":
        token = issue(name="revoked")
        worker_token_revoke(worker_token=WorkerToken.objects.get(name="revoked"))
    else:
        tenants, actions = SCOPES[scope]
        token = issue(tenants, actions, name=scope)
    # The leases are this token's (a lease belongs to the token that claimed it).
    worker = holder_name(WorkerToken.objects.get(name=scope), "w-1") if token else "w-1"
    lease = _leased("j", worker)
    begun = _leased("begun", worker)
    services.begin_side_effect(lease=begun)
    services.enqueue_job(job_id="fresh", tenant="acme", action="reckon.echo", payload={})
    lease_of = {"owner": lease.owner, "fencing_token": lease.token}
    bodies = {
        "success": {"owner": begun.owner, "fencing_token": begun.token},
        "unknown": {"owner": begun.owner, "fencing_token": begun.token, "reason": "lost"},
    }

    method, path, body_of, ok = ENDPOINTS[endpoint]
    body = bodies.get(endpoint) or body_of(lease_of)
    answer = ApiClient(token).call(method, path, body)
    refused = 403 if endpoint == "enqueue" else 404  # enqueue: the body's tenant; others: the job's
    expected = 401 if scope in ("no_token", "revoked") else ok if scope in ALLOWED else refused
    assert answer.status == expected, answer.json


@pytest.mark.parametrize("endpoint", [name for name in ENDPOINTS if name != "enqueue"])
@pytest.mark.parametrize("scope", ["other_tenant", "other_action"])
def test_a_job_outside_the_scope_answers_exactly_like_a_missing_one(scope, endpoint):
    lease = _leased("j")
    begun = _leased("begun")
    services.begin_side_effect(lease=begun)
    services.enqueue_job(job_id="fresh", tenant="acme", action="reckon.echo", payload={})
    method, path, body_of, _ = ENDPOINTS[endpoint]
    body = body_of({"owner": lease.owner, "fencing_token": lease.token}) or {
        "owner": begun.owner,
        "fencing_token": begun.token,
        **({"reason": "lost"} if endpoint == "unknown" else {}),
    }
    client = ApiClient(issue(*SCOPES[scope], name=scope))
    before, events = ledger_state(), event_count()

    hidden = client.call(method, path, body)
    missing = client.call(
        method,
        path.replace("/jobs/j", "/jobs/nope")
        .replace("/jobs/begun", "/jobs/nope")
        .replace("/jobs/fresh", "/jobs/nope"),
        body,
    )

    assert hidden.status == missing.status == 404
    assert hidden.json == missing.json == {"error": {"code": "not_found", "message": "no such job"}}
    assert hidden.headers.keys() == missing.headers.keys()
    assert ledger_state() == before and event_count() == events  # not even a refusal is recorded


def test_enqueueing_over_another_tenants_job_id_says_only_that_it_is_taken():
    services.enqueue_job(job_id="j", tenant="acme", action="reckon.echo", payload={"secret": "s3"})
    services.enqueue_job(job_id="k", tenant="acme", action="mail.send", payload={"to": "x@acme"})
    beta = ApiClient(issue(["beta"], ["*"]))
    before, events = ledger_state(), event_count()

    answers = [
        beta.post("/api/v1/jobs", {"job_id": job_id, "tenant": "beta", "action": action, "payload": {}})
        for job_id, action in (("j", "reckon.echo"), ("k", "reckon.echo"), ("j", "mail.send"))
    ]

    expected = {"error": {"code": "job_id_unavailable", "message": "this job id is taken; choose another"}}
    assert [(a.status, a.json) for a in answers] == [(409, expected)] * 3  # the same, whoever holds it
    assert ledger_state() == before and event_count() == events


def test_a_same_scope_conflict_names_the_differing_fields():
    services.enqueue_job(job_id="j", tenant="acme", action="reckon.echo", payload={"n": 1})
    answer = ApiClient(issue(["acme"], ["*"])).post(
        "/api/v1/jobs", {"job_id": "j", "tenant": "acme", "action": "reckon.echo", "payload": {"n": 2}}
    )
    assert answer.status == 409 and answer.json["error"]["code"] == "job_conflict"
    assert "payload" in answer.json["error"]["message"]
