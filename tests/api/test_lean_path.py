"""The worker API's lean path (api/lane.py, api.views.answered): past Django's SecurityMiddleware a
request under /api/v1/ goes straight to its view, and the step answers are rendered without being
validated a second time. What a production API needs stays: the security headers, the HTTPS
redirect, the token checked on every request (a revoked token is refused on the very next call)."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from api import tokens
from api.lane import API_CONTENT_SECURITY_POLICY
from api.models import WorkerToken
from api.schemas import Lease, Result
from api.views import api as ninja_api
from ledger.models import Attempt
from tests.api.conftest import lease_body, ledger_state
from tests.conftest import make_job

pytestmark = pytest.mark.django_db


def test_an_api_request_skips_the_consoles_middleware(api):
    make_job("lean-1")
    response = api.django.post("/api/v1/jobs/lean-1/claim", json.dumps({"worker": "w"}),
                               content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {api.token}")
    assert response.status_code == 201
    request = response.wsgi_request
    # Sessions, the signed-in user, messages and htmx never touched the request...
    for attribute in ("session", "user", "_messages", "htmx"):
        assert not hasattr(request, attribute), attribute
    assert not response.cookies  # ...and no session or CSRF cookie is set


def test_a_console_page_still_goes_through_every_middleware(client, operator):
    client.force_login(operator)
    response = client.get("/queue/")
    assert response.status_code == 200
    request = response.wsgi_request
    assert request.user == operator and hasattr(request, "session") and hasattr(request, "htmx")
    assert "'self'" in response["Content-Security-Policy"]  # the console's own policy, not the API's


@pytest.mark.parametrize("path", ["/api/v1/jobs/nope", "/api/v1/openapi.json", "/api/v1/no/such/endpoint"])
def test_api_answers_carry_the_security_headers(api, settings, path):
    settings.SECURE_HSTS_SECONDS = 31536000
    response = api.django.get(path, HTTP_AUTHORIZATION=f"Bearer {api.token}", secure=True)
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Referrer-Policy"] == "same-origin"
    assert response["Cross-Origin-Opener-Policy"] == "same-origin"
    assert response["Strict-Transport-Security"].startswith("max-age=31536000")
    assert response["X-Frame-Options"] == "DENY"
    assert response["Content-Security-Policy"] == API_CONTENT_SECURITY_POLICY
    assert response["Content-Length"] == str(len(response.content))


def test_the_api_is_still_redirected_to_https(api, settings):
    settings.SECURE_SSL_REDIRECT = True
    response = api.django.post("/api/v1/jobs/x/claim", "{}", content_type="application/json")
    assert response.status_code == 301 and response["Location"].startswith("https://")


def test_a_revoked_token_is_refused_on_the_very_next_call_and_changes_nothing(api, token):
    make_job("lean-revoked")
    lease = api.post("/api/v1/jobs/lean-revoked/claim", {"worker": "w"})
    assert lease.status == 201
    tokens.worker_token_revoke(worker_token=WorkerToken.objects.get())
    before = ledger_state()
    refused = api.post("/api/v1/jobs/lean-revoked/lease/begin", lease_body(lease.json))
    assert refused.status == 401 and refused.json["error"]["code"] == "unauthorized"
    assert ledger_state() == before
    assert Attempt.objects.get(job__job_id="lean-revoked").side_effect_state == "not_attempted"


def _as_ninja_renders(schema, status: int, body: dict) -> dict:
    """What ninja sends for `body` when it validates it against `schema` first (its default)."""
    validated = schema.model_validate(body).model_dump(by_alias=True)
    return json.loads(ninja_api.create_response(None, validated, status=status).content)


def test_the_step_answers_are_what_their_schemas_would_send(api):
    make_job("lean-schema")
    claimed = api.post("/api/v1/jobs/lean-schema/claim", {"worker": "w"})
    assert claimed.status == 201 and claimed.json == _as_ninja_renders(Lease, 201, claimed.json)
    begun = api.post("/api/v1/jobs/lean-schema/lease/begin", lease_body(claimed.json, sent_to="https://p.example/a"))
    assert begun.status == 200 and begun.json == _as_ninja_renders(Result, 200, begun.json)
    done = api.post("/api/v1/jobs/lean-schema/lease/success", lease_body(claimed.json, result_ref="r-1"))
    assert done.status == 200 and done.json == _as_ninja_renders(Result, 200, done.json)
    assert done.json["status"] == "succeeded" and done.json["attempt"]["result_ref"] == "r-1"
    make_job("lean-next")
    nxt = api.post("/api/v1/claims", {"worker": "w", "actions": ["reckon.echo"], "wait_seconds": 0})
    assert nxt.status == 201 and nxt.json == _as_ninja_renders(Lease, 201, nxt.json)


def test_only_paths_under_the_api_prefix_take_the_lane():
    """/api/v1 without its slash is no API path: the whole chain answers it (CommonMiddleware's
    redirect, with the session middleware's Vary), not the lane."""
    response = Client().get("/api/v1")
    assert response.status_code == 301 and response["Location"] == "/api/v1/"
    assert "Cookie" in response["Vary"]
    assert "Content-Security-Policy" not in response.headers or (
        response["Content-Security-Policy"] != API_CONTENT_SECURITY_POLICY)
