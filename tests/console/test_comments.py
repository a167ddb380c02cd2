"""Comments on a job: any operator or approver adds one from the job's page; it is in the job's
history; the approval request shows the job's comments, so a colleague's dissent is read before
a replay is approved; a race loser's refused decision keeps its note as one."""

import pytest
from django.contrib.auth.models import Group
from django.test import Client

from approvals.models import ApprovalRequest
from ledger.models import Job, LedgerEvent
from reconciliation import decisions
from tests.console.conftest import htmx, latest_version, make_operator_job, make_unknown_job, with_tenants

pytestmark = pytest.mark.django_db


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _comment(client, job_id, text, **headers):
    return client.post(f"/jobs/{job_id}/comment/", {"comment": text}, **headers)


def test_an_operator_comments_and_it_is_in_the_timeline(operator):
    make_unknown_job("inv-1")
    html = _comment(_client(operator), "inv-1", "I saw this invoice in the provider's dashboard", **htmx()).content.decode()
    assert html.lstrip().startswith('<section id="comment-form"')
    assert "Comment added to the job&#x27;s history." in html
    assert '<section id="timeline" hx-swap-oob="true"' in html and 'data-kind="job_commented"' in html
    assert "I saw this invoice in the provider&#x27;s dashboard" in html
    event = Job.objects.get(job_id="inv-1").events.get(kind="job_commented")
    assert (event.actor, event.actor_type) == (operator.username, "operator")


def test_without_javascript_it_goes_back_to_the_comment(approver):
    make_unknown_job("inv-1")
    response = _comment(_client(approver), "inv-1", "Looks like a duplicate of inv-0")
    event = LedgerEvent.objects.get(kind="job_commented")
    assert response.status_code == 302 and response["Location"] == f"/jobs/inv-1/#event-{event.pk}"
    assert event.actor_type == "approver"


def test_an_empty_comment_is_explained_and_nothing_is_written(operator):
    make_unknown_job("inv-1")
    events = LedgerEvent.objects.count()
    response = _comment(_client(operator), "inv-1", "   ")
    assert response.status_code == 400
    html = response.content.decode()
    assert "Not added: a comment needs some text: say what you saw or think. Nothing was written." in html
    long = "z" * 2001
    html = _comment(_client(operator), "inv-1", long, **htmx()).content.decode()
    assert "at most 2000 characters; this one has 2001" in html and f">{long}</textarea>" in html  # text kept
    assert LedgerEvent.objects.count() == events


def test_an_auditor_cannot_comment_and_another_tenants_job_does_not_exist(auditor, operator):
    make_unknown_job("inv-1")
    make_unknown_job("other-1", tenant="globex")
    assert _comment(_client(auditor), "inv-1", "hello").status_code == 403
    assert 'id="comment-form"' not in _client(auditor).get("/jobs/inv-1/").content.decode()
    with_tenants(operator, "acme")
    assert _comment(_client(operator), "other-1", "hello").status_code == 404
    assert not LedgerEvent.objects.filter(kind="job_commented").exists()


@pytest.fixture
def requested(approver2):
    approver2.groups.add(Group.objects.get_or_create(name="operators")[0])
    make_operator_job("vault-1")
    decisions.mark_not_found(job_id="vault-1", version=latest_version("vault-1"), user=approver2,
                             note="vault shows no rotation")
    return ApprovalRequest.objects.get(job__job_id="vault-1")


def test_the_approver_reads_a_colleagues_dissent_on_the_request(requested, operator, approver):
    _comment(_client(operator), "vault-1", "The vault audit log shows a rotation at 03:12: do NOT replay")
    html = _client(approver).get("/approvals/").content.decode()
    card = html[html.index(f'data-approval="{requested.pk}"'):]
    assert "data-comment-count>1<" in card
    assert "The vault audit log shows a rotation at 03:12: do NOT replay" in card.split("<form")[0]
    assert "Nobody has commented on this job." not in card.split("<form")[0]


def test_a_race_losers_note_is_kept_and_shown_to_the_approver(requested, operator, operator2, approver):
    make_operator_job("vault-2")
    seen = latest_version("vault-2")
    decisions.decide("mark_not_found", job_id="vault-2", version=seen, user=operator, note="nothing rotated")
    html = _client(operator2).post("/jobs/vault-2/decide/", {"decision": "confirm_effect", "version": seen,
                                                              "note": "I saw the new key in the vault"},
                                    **htmx()).content.decode()
    assert "Your note is kept in the job&#x27;s history as a comment." in html
    comment = Job.objects.get(job_id="vault-2").events.get(kind="job_commented")
    assert (comment.actor, comment.note, comment.evidence["refused_decision"]) == (
        operator2.username, "I saw the new key in the vault", "confirm_effect")
    request = ApprovalRequest.objects.get(job__job_id="vault-2")
    page = _client(approver).get("/approvals/").content.decode()
    card = page[page.index(f'data-approval="{request.pk}"'):]
    assert "I saw the new key in the vault" in card.split("<form")[0] and "data-refused-decision" in card
