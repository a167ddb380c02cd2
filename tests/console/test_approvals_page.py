import json

import pytest

from approvals.models import ApprovalRequest
from ledger.models import Job
from reconciliation import decisions
from tests.console.conftest import htmx, latest_version, make_operator_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def requested(db, approver2):
    """approver2 (also allowed to decide on the queue here) marked an irreversible job not found."""
    from django.contrib.auth.models import Group

    approver2.groups.add(Group.objects.get_or_create(name="operators")[0])
    make_operator_job("vault-1")
    decisions.mark_not_found(
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
    assert f"Replay of {requested.job.job_id} approved." in html and "data-pending-count>0<" in html
    assert json.loads(response["HX-Trigger"]) == {"queue-changed": {}}
    requested.refresh_from_db()
    assert (requested.status, requested.decided_by, requested.decision_note) == ("approved", approver, "safe")
    job = Job.objects.get(job_id="vault-1")
    assert job.status == "pending" and job.attempts.count() == 2



def test_the_navigations_badge_follows_a_decision_made_in_place(client, approver, requested):
    """The badge is in the page's header, outside the swapped list: the answer sends it again out of
    band, now without the request just decided."""
    client.force_login(approver)
    badge = '<span class="badge" data-approvals-waiting>1<'
    assert badge in client.get("/approvals/").content.decode()
    html = client.post(f"/approvals/{requested.pk}/decide/", {"decision": "reject", "note": "no"},
                       **htmx()).content.decode()
    [link] = [line for line in html.splitlines() if 'id="nav-approvals"' in line]
    assert 'hx-swap-oob="true"' in link and 'aria-current="page"' in link
    assert "data-approvals-waiting" not in link

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


@pytest.fixture
def reconciler_requested(provider):
    """The reconciler found nothing for a queryable irreversible action and asked for approval."""
    from datetime import timedelta

    from ledger.actions import Action, _registry, register
    from reconciliation.passes import reconcile_job
    from sandbox.demo_actions import send_mail
    from tests.console.conftest import make_unknown_job

    register(
        Action(
            name="test.irreversible_mail",
            executor=send_mail,
            reversible=False,
            queryable=True,
            reconciler="sandbox.reconcilers.mail",
            lease_ttl=timedelta(seconds=30),
        )
    )
    make_unknown_job(
        "mail-1",
        action="test.irreversible_mail",
        payload={"to": "ann@example.com", "subject": "Hi", "body": "x"},
    )
    assert reconcile_job(job_id="mail-1").applied == "awaiting_approval"
    yield ApprovalRequest.objects.get(job__job_id="mail-1")
    _registry.pop("test.irreversible_mail")


def test_it_shows_the_evidence_the_approval_is_granted_on(client, auditor, reconciler_requested):
    evidence = reconciler_requested.evidence
    assert "no sent message with this marker" in evidence["reason"] and evidence["lookups"]
    client.force_login(auditor)
    html = client.get("/approvals/").content.decode()
    article = html[html.index(f'data-approval="{reconciler_requested.pk}"') :]
    assert f'<code class="digest" data-digest>{reconciler_requested.payload_digest}</code>' in article
    assert "<summary>Evidence</summary>" in article
    assert "no sent message with this marker header" in article  # the reason, inside the evidence
    assert "/messages?marker=test.irreversible_mail%3Amail-1" in article  # the lookup the provider answered
    assert "data-payload-changed" not in html


def test_a_payload_changed_since_the_request_is_flagged(client, approver, requested):
    Job.objects.filter(pk=requested.job_id).update(payload={"name": "root-password"})  # tampering
    client.force_login(approver)
    html = client.get("/approvals/").content.decode()
    assert "data-payload-changed" in html and "an approval would be refused" in html
    response = client.post(
        f"/approvals/{requested.pk}/decide/", {"decision": "approve", "note": "ok"}, **htmx()
    )
    assert "payload changed" in response.content.decode()
    requested.refresh_from_db()
    assert requested.status == "pending"


def test_recently_decided_requests_keep_their_digest(client, approver, requested):
    client.force_login(approver)
    client.post(f"/approvals/{requested.pk}/decide/", {"decision": "reject", "note": "too risky"})
    html = client.get("/approvals/").content.decode()
    assert (
        f'<code class="digest" title="{requested.payload_digest}">{requested.payload_digest[:12]}</code>'
        in html
    )
