"""A hold says who and what they are doing, together, in the queue and the panel; the last comment
is in the row; holds end with their holder's sign-out or after RECKON_HOLD_MAX_HOURS."""

from datetime import timedelta

import pytest
from django.test import Client

from ledger.models import Job, LedgerEvent
from ledger.services import comment_on_job, end_stale_holds, take_job
from tests.console.conftest import htmx, make_operator_job

pytestmark = pytest.mark.django_db
WHY = "waiting for the vault team's answer (INC-88)"


def test_the_reason_and_the_holder_are_shown_together(client, operator, operator2):
    make_operator_job("vault-1")
    client.force_login(operator)
    html = client.post("/jobs/vault-1/hold/", {"hold": "take", "reason": WHY}, **htmx()).content.decode()
    assert "You are on this job</b>: <span data-hold-reason>waiting for the vault team&#x27;s answer (INC-88)</span>" in html
    event = LedgerEvent.objects.filter(job__job_id="vault-1", kind="job_taken").get()
    assert (event.note, event.evidence["reason"]) == (WHY, WHY)
    comment_on_job(job_id="vault-1", author="olga", actor_type="operator", text="asked on #vault at 14:05")
    colleague = Client()
    colleague.force_login(operator2)
    queue = colleague.get("/queue/").content.decode()
    assert "<b>olga</b>: <span data-hold-reason>waiting for the vault team&#x27;s answer (INC-88)</span>" in queue
    assert "Last comment, olga" in queue and "asked on #vault at 14:05" in queue
    page = colleague.get("/jobs/vault-1/").content.decode()
    assert "olga is on this job</b>: <span data-hold-reason>waiting for the vault team" in page


def test_a_hold_ends_when_its_holder_signs_out(client, operator, operator2):
    make_operator_job("vault-1")
    make_operator_job("vault-2")
    take_job(job_id="vault-1", holder=operator.username, note=WHY)
    take_job(job_id="vault-2", holder=operator2.username)
    client.force_login(operator)
    client.post("/accounts/logout/")
    assert Job.objects.get(job_id="vault-1").holder == ""
    assert Job.objects.get(job_id="vault-2").holder == operator2.username  # a colleague's hold stays
    event = LedgerEvent.objects.filter(job__job_id="vault-1", kind="job_released").get()
    assert event.note == "released: olga signed out (their shift ended)" and event.actor == "olga"


def test_a_hold_older_than_the_bound_ends_by_itself(operator, settings):
    settings.RECKON_HOLD_MAX_HOURS = 10.0
    make_operator_job("vault-old")
    make_operator_job("vault-new")
    take_job(job_id="vault-old", holder="olga", note=WHY)
    take_job(job_id="vault-new", holder="olga")
    Job.objects.filter(job_id="vault-old").update(held_since=Job.objects.get(job_id="vault-old").held_since
                                                  - timedelta(hours=11))
    assert end_stale_holds() == 1
    assert dict(Job.objects.values_list("job_id", "holder")) == {"vault-old": "", "vault-new": "olga"}
    event = LedgerEvent.objects.filter(job__job_id="vault-old", kind="job_released").get()
    assert (event.actor_type, event.actor) == ("system", "hold-expiry") and "longer than 10 h" in event.note
    settings.RECKON_HOLD_MAX_HOURS = 0
    Job.objects.filter(job_id="vault-new").update(held_since=Job.objects.get(job_id="vault-new").held_since
                                                  - timedelta(hours=99))
    assert end_stale_holds() == 0
