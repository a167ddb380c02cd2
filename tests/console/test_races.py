"""Two operators on one job: the second is told, as a colleague would say it, who did what and
when; their note stays in the box, and they can decide again on the job as it is now."""

import re

import pytest
from django.test import Client

from ledger.models import Job
from tests.console.conftest import htmx, latest_version, make_unknown_job

pytestmark = pytest.mark.django_db

NOTE = "customer says the invoice never arrived"


def _decide(client, job_id, decision, version, note=NOTE, **headers):
    # "confirmed": the second step of a destructive decision (the first only asks).
    return client.post(f"/jobs/{job_id}/decide/",
                       {"decision": decision, "version": version, "note": note, "confirmed": "on"}, **headers)


@pytest.fixture
def race(operator, operator2):
    make_unknown_job("inv-1")
    seen = latest_version("inv-1")
    first, second = Client(), Client()
    first.force_login(operator2)
    second.force_login(operator)
    assert _decide(first, "inv-1", "escalate", seen, note="needs finance", **htmx()).status_code == 200
    return second, seen


def test_the_second_operator_reads_who_did_what_and_when(race, operator2):
    second, seen = race
    html = _decide(second, "inv-1", "cancel_job", seen, **htmx()).content.decode()
    message = re.search(r'<p class="notice notice-warning" role="status">([^<]+)</p>', html).group(1)
    assert re.fullmatch(
        rf"{operator2.username} escalated this job at \d\d:\d\d:\d\d \(just now\) — your decision was not applied\. "
        r"Their note: needs finance\. Your note is kept in the job&#x27;s history as a comment\.",
        message,
    ), message
    job = Job.objects.get(job_id="inv-1")
    assert job.status == "escalated" and not job.events.filter(kind="operator_cancelled").exists()


def test_the_note_is_kept_and_they_can_decide_again_on_the_new_state(race, operator):
    second, seen = race
    html = _decide(second, "inv-1", "cancel_job", seen, **htmx()).content.decode()
    assert f">{NOTE}</textarea>" in html
    fresh = latest_version("inv-1")
    assert fresh != seen and f'name="version" value="{fresh}"' in html
    assert "status-escalated" in html
    assert 'value="escalate"' not in html  # an escalated job cannot be escalated again: the buttons follow
    # Deciding again, now on what they see, goes through with the same note.
    assert "notice-success" in _decide(second, "inv-1", "cancel_job", fresh, **htmx()).content.decode()
    event = Job.objects.get(job_id="inv-1").events.get(kind="operator_cancelled")
    assert (event.actor, event.note) == (operator.username, NOTE)


def test_without_javascript_the_page_answers_with_the_note_kept(race, operator2):
    second, seen = race
    response = _decide(second, "inv-1", "cancel_job", seen)
    assert response.status_code == 409
    html = response.content.decode()
    assert f"{operator2.username} escalated this job at " in html and f">{NOTE}</textarea>" in html


def test_a_change_by_the_reconciler_names_it(operator, provider):
    from reconciliation.passes import reconcile_job

    make_unknown_job("inv-2")
    seen = latest_version("inv-2")
    reconcile_job(job_id="inv-2")  # the provider has no invoice: replayed with the same key
    client = Client()
    client.force_login(operator)
    html = _decide(client, "inv-2", "confirm_effect", seen, **htmx()).content.decode()
    assert re.search(r"the reconciler \S+ (found no effect at the provider|opened a new attempt of this job) at "
                     r"\d\d:\d\d:\d\d \(just now\) — your decision was not applied", html), html
