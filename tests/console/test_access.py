"""The role matrix: every console URL, GET and POST, for every persona."""

import pytest
from django.contrib.auth.models import User

from reconciliation import decisions
from tests.console.conftest import htmx, latest_version, make_operator_job, make_unknown_job

pytestmark = pytest.mark.django_db

OK, LOGIN, FORBIDDEN, NOT_ALLOWED = "ok", "login", 403, 405

PERSONAS = ("anonymous", "nobody", "auditor", "operator", "approver", "admin_user")


@pytest.fixture
def world(db):
    make_unknown_job("inv-1")
    make_operator_job("vault-1")
    return {"job": "inv-1"}


@pytest.fixture
def user_of(request):
    def user_of(persona):
        if persona == "anonymous":
            return None
        if persona == "nobody":
            return User.objects.create_user("nobody", password="pw")
        return request.getfixturevalue(persona)

    return user_of


READ_URLS = ["/", "/queue/", "/queue/counts/", "/jobs/inv-1/", "/approvals/", "/audit/", "/audit/export.csv"]


def _expect_read(persona):
    return {"anonymous": LOGIN, "nobody": FORBIDDEN}.get(persona, OK)


@pytest.mark.parametrize("persona", PERSONAS)
@pytest.mark.parametrize("url", READ_URLS)
def test_reading_pages(client, world, user_of, persona, url):
    user = user_of(persona)
    if user:
        client.force_login(user)
    response = client.get(url)
    expected = _expect_read(persona)
    if expected == LOGIN:
        assert response.status_code == 302 and response["Location"].startswith("/accounts/login/?next=")
    elif expected == OK:
        assert response.status_code == 200
    else:
        assert response.status_code == expected


@pytest.mark.parametrize("url", READ_URLS)
def test_an_anonymous_htmx_request_is_sent_to_login_as_a_client_redirect(client, world, url):
    response = client.get(url, **htmx())
    assert response.status_code == 200
    assert response["HX-Redirect"].startswith("/accounts/login/?next=")


def _posts(world):
    from approvals.models import ApprovalRequest

    request = ApprovalRequest.objects.first()
    return {
        "job_decide": (
            "/jobs/inv-1/decide/",
            {"decision": "escalate", "version": latest_version("inv-1"), "note": "looking"},
            "operator",
        ),
        "queue_bulk": (
            "/queue/bulk/",
            {
                "decision": "retry_reconciliation",
                "note": "again",
                "selected": f"{latest_version('inv-1')}:inv-1",
            },
            "operator",
        ),
        "approval_decide": (
            f"/approvals/{request.pk}/decide/" if request else "/approvals/1/decide/",
            {"decision": "reject", "note": "no"},
            "approver",
        ),
    }


@pytest.fixture
def pending_approval(world, operator2_for_requests):

    decisions.mark_not_found(
        job_id="vault-1",
        version=latest_version("vault-1"),
        user=operator2_for_requests,
        note="nothing rotated",
    )


@pytest.fixture
def operator2_for_requests(db):
    from tests.conftest import _persona

    return _persona("requester", "operators")


@pytest.mark.parametrize("persona", PERSONAS)
@pytest.mark.parametrize("name", ["job_decide", "queue_bulk", "approval_decide"])
def test_changing_things(client, world, pending_approval, user_of, persona, name):
    url, data, role = _posts(world)[name]
    user = user_of(persona)
    if user:
        client.force_login(user)
    response = client.post(url, data)
    if persona == "anonymous":
        assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
    elif persona in ("operator", "approver") and persona != role or persona in ("nobody", "auditor"):
        assert response.status_code == 403
    else:  # the right role, or a superuser: the decision goes through and redirects back (PRG)
        assert response.status_code == 302, response.content[:500]


@pytest.mark.parametrize("url", READ_URLS)
def test_read_pages_refuse_post(client, world, admin_user, url):
    client.force_login(admin_user)
    assert client.post(url).status_code == 405


@pytest.mark.parametrize("name", ["job_decide", "queue_bulk", "approval_decide"])
def test_decisions_refuse_get(client, world, pending_approval, admin_user, name):
    url, _, _ = _posts(world)[name]
    client.force_login(admin_user)
    assert client.get(url).status_code == 405


def test_every_post_needs_the_csrf_token(world, operator):
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.force_login(operator)
    url, data, _ = _posts(world)["job_decide"]
    assert client.post(url, data).status_code == 403
    page = client.get("/jobs/inv-1/")
    token = page.cookies["csrftoken"].value
    assert client.post(url, data, HTTP_X_CSRFTOKEN=token).status_code == 302


def test_every_console_url_is_in_the_matrix():
    from console.urls import urlpatterns

    covered = {
        "overview",
        "queue",
        "queue_counts",
        "job_detail",
        "approvals",
        "audit",
        "audit_export",
        "job_decide",
        "queue_bulk",
        "approval_decide",
        "healthz",
    }
    assert {p.name for p in urlpatterns} == covered
