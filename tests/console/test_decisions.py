"""Operators' decisions from the job page: HTMX and plain POST, refusals, and the race."""

import json
import threading

import pytest
from django.db import connection
from django.test import Client

from approvals.models import ApprovalRequest
from ledger.models import Job
from tests.console.conftest import htmx, latest_version, make_operator_job, make_unknown_job

pytestmark = pytest.mark.django_db


def _decide(client, job_id, decision, note="checked the provider's dashboard", version=None, **headers):
    version = latest_version(job_id) if version is None else version
    # "confirmed": the second step of a destructive decision (the first only asks: test_triage_confirm.py).
    return client.post(
        f"/jobs/{job_id}/decide/",
        {"decision": decision, "version": version, "note": note, "confirmed": "on"},
        **headers,
    )


@pytest.mark.parametrize(
    "decision, status, kind",
    [
        ("confirm_effect", "succeeded", "operator_confirmed_effect"),
        ("mark_not_found", "pending", "operator_marked_not_found"),
        ("escalate", "escalated", "operator_escalated"),
        ("retry_reconciliation", "needs_reconciliation", "operator_retried_reconciliation"),
        ("cancel_job", "cancelled", "operator_cancelled"),
    ],
)
def test_each_decision_with_htmx_swaps_the_panel_and_timeline(client, operator, decision, status, kind):
    make_unknown_job("inv-1")
    client.force_login(operator)
    response = _decide(client, "inv-1", decision, **htmx())
    assert response.status_code == 200
    html = response.content.decode()
    assert html.lstrip().startswith('<section id="decision-panel"')
    assert '<section id="timeline" hx-swap-oob="true"' in html
    assert '<section id="attempts" hx-swap-oob="true"' in html
    assert '<header id="job-summary" class="job-summary" hx-swap-oob="true"' in html
    assert f'data-kind="{kind}"' in html and "notice-success" in html
    assert json.loads(response["HX-Trigger"]) == {"queue-changed": {}}
    job = Job.objects.get(job_id="inv-1")
    assert job.status == status
    event = job.events.get(kind=kind)
    assert (event.actor, event.actor_type, event.note) == (
        operator.username,
        "operator",
        "checked the provider's dashboard",
    )


def test_a_plain_post_redirects_back_with_a_message(client, operator):
    make_unknown_job("inv-1")
    client.force_login(operator)
    response = _decide(client, "inv-1", "confirm_effect")
    assert response.status_code == 302 and response["Location"] == "/jobs/inv-1/"
    page = client.get("/jobs/inv-1/").content.decode()
    assert "Confirm effect: recorded." in page and "data-job-status>succeeded<" in page


def test_a_note_is_required(client, operator):
    make_unknown_job("inv-1")
    client.force_login(operator)
    html = _decide(client, "inv-1", "confirm_effect", note="  ", **htmx()).content.decode()
    assert "This field is required." in html
    assert Job.objects.get(job_id="inv-1").status == "needs_reconciliation"
    plain = _decide(client, "inv-1", "confirm_effect", note="")
    assert plain.status_code == 400 and b"This field is required." in plain.content


def test_a_decision_the_state_does_not_allow_is_refused_with_the_reason(client, operator):
    make_unknown_job("inv-1")
    client.force_login(operator)
    _decide(client, "inv-1", "confirm_effect")
    html = _decide(client, "inv-1", "escalate", **htmx()).content.decode()
    assert "notice-error" in html and "already succeeded" in html
    assert "No decision is open for this job" in html


def test_marking_an_irreversible_job_not_found_asks_for_approval(client, operator):
    make_operator_job("vault-1")
    client.force_login(operator)
    html = _decide(client, "vault-1", "mark_not_found", **htmx()).content.decode()
    assert Job.objects.get(job_id="vault-1").status == "awaiting_approval"
    request = ApprovalRequest.objects.get(job__job_id="vault-1")
    assert request.status == "pending" and request.requested_by == operator
    assert '<section id="approvals" hx-swap-oob="true"' in html and "Go to approvals" in html


def test_two_operators_on_one_job_one_wins_the_other_sees_who(client, operator, operator2):
    make_unknown_job("inv-1")
    seen = latest_version("inv-1")  # both opened the page at this version
    first, second = Client(), Client()
    first.force_login(operator)
    second.force_login(operator2)
    assert _decide(first, "inv-1", "confirm_effect", version=seen, **htmx()).status_code == 200
    response = _decide(second, "inv-1", "mark_not_found", version=seen, **htmx())
    assert response.status_code == 200
    html = response.content.decode()
    assert "notice-warning" in html
    assert f"{operator.username} confirmed the effect of this job at " in html
    assert "your decision was not applied" in html
    assert "status-succeeded" in html  # the fresh state
    job = Job.objects.get(job_id="inv-1")
    assert job.status == "succeeded"
    assert not job.events.filter(kind="operator_marked_not_found").exists()


@pytest.mark.django_db(transaction=True)
def test_two_operators_racing_at_the_same_instant(operator, operator2):
    """Real concurrency: two requests on two connections; the job's row lock serialises them."""
    make_unknown_job("inv-1")
    seen = latest_version("inv-1")
    barrier = threading.Barrier(2)
    responses = {}

    def act(user, decision):
        client = Client()
        client.force_login(user)
        barrier.wait(timeout=10)
        responses[user.username] = _decide(client, "inv-1", decision, version=seen, **htmx()).content.decode()
        connection.close()

    threads = [
        threading.Thread(target=act, args=(operator, "confirm_effect")),
        threading.Thread(target=act, args=(operator2, "cancel_job")),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    winners = [name for name, html in responses.items() if "notice-success" in html]
    losers = [name for name, html in responses.items() if "your decision was not applied" in html]
    assert len(winners) == 1 and len(losers) == 1
    assert winners[0] in responses[losers[0]]
