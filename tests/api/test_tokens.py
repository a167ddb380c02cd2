"""Worker tokens: who may call the API at all, and the session/token boundary."""

import hashlib
import io

import pytest
from django.contrib.messages import get_messages
from django.core.management import call_command
from django.test import Client

from api import tokens
from api.models import WorkerToken
from tests.api.conftest import ApiClient, issue

pytestmark = pytest.mark.django_db


def test_it_stores_only_the_hash_and_a_display_prefix():
    issued = tokens.worker_token_create(name="mailer", tenants=["acme"], actions=["mail.send"])
    row = WorkerToken.objects.get()
    assert row.token_hash == hashlib.sha256(issued.token.encode()).hexdigest()
    assert issued.token.startswith(row.prefix) and len(row.prefix) < len(issued.token) // 3
    assert issued.token not in str(list(WorkerToken.objects.values()))


@pytest.mark.parametrize(
    "authorization", [None, "", "Bearer", "Bearer rk_nope", "Basic dXNlcjpwdw==", "Token x"]
)
def test_it_refuses_a_missing_or_invalid_token_with_401(authorization):
    headers = {"Authorization": authorization} if authorization is not None else {}
    answer = ApiClient().call("GET", "/api/v1/jobs/any", token=None, headers=headers)
    assert answer.status == 401 and answer.json["error"]["code"] == "unauthorized"
    assert answer.headers["WWW-Authenticate"].startswith("Bearer")


def test_a_revoked_token_is_401_at_once(api, token):
    assert api.get("/api/v1/jobs/any").status == 404
    tokens.worker_token_revoke(worker_token=WorkerToken.objects.get())
    assert api.get("/api/v1/jobs/any").status == 401


def test_it_records_when_a_token_was_last_used(api):
    assert WorkerToken.objects.get().last_used_at is None
    api.get("/api/v1/jobs/any")
    assert WorkerToken.objects.get().last_used_at is not None


def test_a_console_session_cannot_call_the_api(operator):
    browser = Client()
    browser.force_login(operator)
    response = browser.post("/api/v1/jobs", {"job_id": "x"}, content_type="application/json")
    assert response.status_code == 401


def test_an_api_token_cannot_open_the_console(token):
    response = Client().get("/", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


def test_the_command_creates_lists_and_revokes():
    out, err = io.StringIO(), io.StringIO()
    call_command(
        "worker_token",
        "create",
        "--name",
        "mailer",
        "--tenant",
        "acme",
        "--tenant",
        "beta",
        "--action",
        "mail.send",
        stdout=out,
        stderr=err,
    )
    token = out.getvalue().strip()
    assert "shown once" in err.getvalue()
    row = WorkerToken.objects.get()
    assert (row.tenants, row.actions) == (["acme", "beta"], ["mail.send"])
    assert tokens.authenticate(f"Bearer {token}") == row

    listing = io.StringIO()
    call_command("worker_token", "list", stdout=listing)
    assert (
        "mailer" in listing.getvalue() and token not in listing.getvalue() and "active" in listing.getvalue()
    )

    call_command("worker_token", "revoke", "mailer", stdout=io.StringIO())
    assert tokens.authenticate(f"Bearer {token}") is None


def test_the_admin_shows_a_new_token_once_and_revokes(admin_user):
    browser = Client()
    browser.force_login(admin_user)
    response = browser.post(
        "/admin/api/workertoken/add/",
        {"name": "ci", "tenants_text": "acme, beta", "actions_text": "*"},
        follow=True,
    )
    assert response.status_code == 200
    shown = [str(m) for m in get_messages(response.wsgi_request)] or [
        m.message for m in response.context["messages"]
    ]
    token = next(word for text in shown for word in text.split() if word.startswith("rk_"))
    row = WorkerToken.objects.get()
    assert (row.name, row.tenants, row.actions, row.created_by) == ("ci", ["acme", "beta"], ["*"], admin_user)
    assert tokens.authenticate(f"Bearer {token}") == row
    assert token not in browser.get(f"/admin/api/workertoken/{row.pk}/change/").content.decode()

    browser.post("/admin/api/workertoken/", {"action": "revoke", "_selected_action": [row.pk]})
    assert tokens.authenticate(f"Bearer {token}") is None


def test_scopes_must_not_be_empty():
    with pytest.raises(ValueError, match="at least one tenant"):
        issue(tenants=[" "])
