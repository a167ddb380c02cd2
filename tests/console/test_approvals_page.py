import json

import pytest

from approvals.models import ApprovalRequest
from ledger import services
from ledger.models import Job
from tests.console.conftest import htmx, latest_version, make_operator_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def requested(db, approver2):
    """approver2 (also allowed to decide on the queue here) marked an irreversible job not found."""
    from django.contrib.auth.models import Group

    approver2.groups.add(Group.objects.get_or_create(name="operators")[0])
    make_operator_job("vault-1")
    services.mark_not_found(
        job_id="vault-1", version=latest_version("vault-1"), user=approver2, note="vault shows no rotation"
    )
    return ApprovalRequest.objects.get(job__job_id="vault-1")


def test_it_lists_pending_requests_with_evidence_and_digest(client, auditor, requested):
    client.force_login(auditor)
    html = client.get("/approvals/").content.decode()
    assert f'data-approval="{requested.pk}"' in html
    assert requested.payload_digest in html
    assert "vault shows no rotation" in html
    assert "Only approvers can decide on replays." in html and "Approve replay" not in html


def test_an_approver_approves_the_replay(client, approver, requested):
    client.force_login(approver)
    response = client.post(
        f"/approvals/{requested.pk}/decide/", {"decision": "approve", "note": "safe"}, **htmx()
    )
    html = response.content.decode()
    assert html.lstrip().startswith('<div id="approval-list"')
    assert "replay approved" in html and "data-pending-count>0<" in html
    assert json.loads(response["HX-Trigger"]) == {"queue-changed": {}}
    requested.refresh_from_db()
    assert (requested.status, requested.decided_by, requested.decision_note) == ("approved", approver, "safe")
    job = Job.objects.get(job_id="vault-1")
    assert job.status == "pending" and job.attempts.count() == 2


def test_an_approver_rejects_without_js(client, approver, requested):
    client.force_login(approver)
    response = client.post(f"/approvals/{requested.pk}/decide/", {"decision": "reject", "note": "too risky"})
    assert response.status_code == 302 and response["Location"] == "/approvals/"
    assert "rejected" in client.get("/approvals/").content.decode()
    requested.refresh_from_db()
    assert requested.status == "rejected"


def test_the_requester_sees_their_request_but_cannot_decide_it(client, approver2, requested):
    client.force_login(approver2)
    html = client.get("/approvals/").content.decode()
    assert "You requested this approval, so you cannot approve or reject it" in html
    assert 'value="approve" disabled' in html
    # and the server refuses too, whatever the browser sends
    html = client.post(
        f"/approvals/{requested.pk}/decide/", {"decision": "approve", "note": "me"}, **htmx()
    ).content.decode()
    assert "notice-error" in html and "four eyes" in html
    requested.refresh_from_db()
    assert requested.status == "pending"


def test_a_decision_needs_a_note(client, approver, requested):
    client.force_login(approver)
    html = client.post(
        f"/approvals/{requested.pk}/decide/", {"decision": "approve", "note": ""}, **htmx()
    ).content.decode()
    assert "This field is required." in html
    requested.refresh_from_db()
    assert requested.status == "pending"


def test_deciding_twice_is_refused_clearly(client, approver, requested):
    client.force_login(approver)
    client.post(f"/approvals/{requested.pk}/decide/", {"decision": "reject", "note": "no"}, **htmx())
    html = client.post(
        f"/approvals/{requested.pk}/decide/", {"decision": "approve", "note": "yes"}, **htmx()
    ).content.decode()
    assert "notice-error" in html


def test_an_unknown_request_is_404(client, approver):
    client.force_login(approver)
    assert client.post("/approvals/999/decide/", {"decision": "approve", "note": "x"}).status_code == 404
