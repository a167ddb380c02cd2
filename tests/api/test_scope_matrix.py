"""Tenant × action × endpoint: a token reaches exactly the jobs its scope names."""

import pytest

from ledger import services
from tests.api.conftest import ApiClient, issue

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


def _leased(job_id: str) -> services.Lease:
    services.enqueue_job(job_id=job_id, tenant="acme", action="reckon.echo", payload={})
    return services.claim_job(job_id=job_id, worker="w-1")


@pytest.mark.parametrize("endpoint", ENDPOINTS)
@pytest.mark.parametrize("scope", [*SCOPES, "no_token", "revoked"])
def test_scope_matrix(scope, endpoint):
    lease = _leased("j")
    begun = _leased("begun")
    services.begin_side_effect(lease=begun)
    services.enqueue_job(job_id="fresh", tenant="acme", action="reckon.echo", payload={})
    lease_of = {"owner": lease.owner, "fencing_token": lease.token}
    bodies = {
        "success": {"owner": begun.owner, "fencing_token": begun.token},
        "unknown": {"owner": begun.owner, "fencing_token": begun.token, "reason": "lost"},
    }

    if scope == "no_token":
        token = None
    elif scope == "revoked":
        from api.models import WorkerToken
        from api.tokens import worker_token_revoke

        token = issue(name="revoked")
        worker_token_revoke(worker_token=WorkerToken.objects.get(name="revoked"))
    else:
        tenants, actions = SCOPES[scope]
        token = issue(tenants, actions, name=scope)

    method, path, body_of, ok = ENDPOINTS[endpoint]
    body = bodies.get(endpoint) or body_of(lease_of)
    answer = ApiClient(token).call(method, path, body)
    expected = 401 if scope in ("no_token", "revoked") else ok if scope in ALLOWED else 403
    assert answer.status == expected, answer.json


def test_a_read_never_shows_another_tenants_job():
    _leased("j")
    answer = ApiClient(issue(["beta"], ["*"])).get("/api/v1/jobs/j")
    assert answer.status == 403 and "payload" not in str(answer.json)


def test_enqueueing_over_another_tenants_job_id_reveals_nothing():
    _leased("j")
    answer = ApiClient(issue(["beta"], ["*"])).post(
        "/api/v1/jobs", {"job_id": "j", "tenant": "beta", "action": "reckon.echo", "payload": {}}
    )
    assert answer.status == 409 and "acme" not in str(answer.json)
