"""Ownership: "I'm on it", who holds what in the queue, a warning before deciding on a job
someone else holds, and every take and release in the job's history."""

import pytest
from django.test import Client

from ledger.models import Job
from tests.console.conftest import htmx, latest_version, make_operator_job, make_unknown_job, with_tenants

pytestmark = pytest.mark.django_db


def _hold(client, job_id, hold, **headers):
    return client.post(f"/jobs/{job_id}/hold/", {"hold": hold}, **headers)


def _decide(client, job_id, decision, note="checked the provider", **extra):
    return client.post(f"/jobs/{job_id}/decide/",
                       {"decision": decision, "version": latest_version(job_id), "note": note, **extra}, **htmx())


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_taking_a_job_is_in_its_history_and_the_queue_shows_who_and_since_when(operator, auditor):
    make_operator_job("vault-1")
    version = latest_version("vault-1")
    html = _hold(_client(operator), "vault-1", "take", **htmx()).content.decode()
    assert "You are on this job" in html and 'value="release"' in html
    job = Job.objects.get(job_id="vault-1")
    assert job.holder == operator.username and job.held_since is not None
    event = job.events.get(kind="job_taken")
    assert (event.actor, event.actor_type, event.evidence) == (operator.username, "operator", {"holder": "olga"})
    assert latest_version("vault-1") == version  # a hold changes no state: nobody's decision goes stale
    queue = _client(auditor).get("/queue/").content.decode()
    assert f'<td data-holder data-label="On it"><b>{operator.username}</b> <span class="muted">since <time' in queue


def test_a_colleague_is_warned_keeps_the_note_and_can_go_ahead(operator, operator2):
    make_operator_job("vault-1")
    _hold(_client(operator), "vault-1", "take")
    colleague = _client(operator2)
    page = colleague.get("/jobs/vault-1/").content.decode()
    assert f"{operator.username} is on this job" in page and "Take over from olga" in page
    html = _decide(colleague, "vault-1", "escalate", note="finance must look").content.decode()
    assert f"{operator.username} has been on this job since " in html and "decide anyway" in html
    assert ">finance must look</textarea>" in html
    assert '<button type="submit" name="decision" value="escalate" data-anyway>Escalate anyway</button>' in html
    assert 'name="despite_holder" value="on"' in html
    assert Job.objects.get(job_id="vault-1").status == "needs_operator"  # nothing changed yet
    html = _decide(colleague, "vault-1", "escalate", note="finance must look", despite_holder="on").content.decode()
    assert "Escalate: recorded." in html
    event = Job.objects.get(job_id="vault-1").events.get(kind="operator_escalated")
    assert (event.actor, event.note) == (operator2.username, "finance must look")


def test_the_holder_decides_without_a_warning(operator):
    make_operator_job("vault-1")
    client = _client(operator)
    _hold(client, "vault-1", "take")
    assert "Escalate: recorded." in _decide(client, "vault-1", "escalate").content.decode()


def test_taking_over_and_releasing_are_recorded(operator, operator2):
    make_operator_job("vault-1")
    _hold(_client(operator), "vault-1", "take")
    colleague = _client(operator2)
    html = _hold(colleague, "vault-1", "take", **htmx()).content.decode()
    assert f"{operator.username} has been on this job since" in html  # taking needs "take over"
    assert Job.objects.get(job_id="vault-1").holder == operator.username
    _hold(colleague, "vault-1", "take_over")
    assert Job.objects.get(job_id="vault-1").holder == operator2.username
    _hold(colleague, "vault-1", "release")
    job = Job.objects.get(job_id="vault-1")
    assert (job.holder, job.held_since) == ("", None)
    events = list(job.events.filter(kind__in=("job_taken", "job_released")).order_by("id"))
    assert [(e.kind, e.actor, e.evidence) for e in events] == [
        ("job_taken", "olga", {"holder": "olga"}),
        ("job_taken", "otto", {"holder": "otto", "taken_from": "olga"}),
        ("job_released", "otto", {"released_from": "otto"}),
    ]
    page = colleague.get(f"/jobs/{job.job_id}/").content.decode()
    assert "Nobody has said they are on this job." in page and 'data-kind="job_taken"' in page


def test_a_finished_job_cannot_be_taken(operator):
    make_unknown_job("inv-1")
    client = _client(operator)
    _decide(client, "inv-1", "confirm_effect")
    html = _hold(client, "inv-1", "take", **htmx()).content.decode()
    assert "already succeeded: there is nothing left to be on" in html
    assert Job.objects.get(job_id="inv-1").holder == ""


def test_only_operators_take_jobs_and_only_in_their_tenants(operator, auditor):
    make_operator_job("vault-1", tenant="globex")
    assert _hold(_client(auditor), "vault-1", "take").status_code == 403
    assert _hold(_client(with_tenants(operator, "acme")), "vault-1", "take").status_code == 404
    assert _hold(_client(with_tenants(operator, "globex")), "vault-1", "nonsense", **htmx()).status_code == 200
    assert Job.objects.get(job_id="vault-1").holder == ""
    assert not Job.objects.get(job_id="vault-1").events.filter(kind="job_taken").exists()


def test_bulk_decisions_leave_jobs_someone_else_holds(operator, operator2):
    make_operator_job("vault-1")
    make_operator_job("vault-2")
    _hold(_client(operator), "vault-1", "take")
    html = _client(operator2).post(
        "/queue/bulk/",
        {"decision": "cancel_job", "note": "customer withdrew", "confirmed": "on",
         "selected": [f"{latest_version(j)}:{j}" for j in ("vault-1", "vault-2")]},
        **htmx(),
    ).content.decode()
    assert f"vault-1: {operator.username} has been on this job since" in html
    assert "vault-2: Cancel job recorded" in html
    assert Job.objects.get(job_id="vault-1").status == "needs_operator"


def test_a_decision_on_a_job_that_changed_is_told_the_change_not_the_hold(operator, operator2):
    make_operator_job("vault-1")
    seen = latest_version("vault-1")
    holder = _client(operator)
    _hold(holder, "vault-1", "take")
    holder.post("/jobs/vault-1/decide/", {"decision": "escalate", "version": seen, "note": "finance"})
    html = _client(operator2).post("/jobs/vault-1/decide/", {"decision": "cancel_job", "version": seen,
                                                             "note": "duplicate", "confirmed": "on"}, **htmx()).content.decode()
    assert f"{operator.username} escalated this job at " in html and "has been on this job" not in html


@pytest.mark.parametrize("with_htmx", [True, False])
def test_releasing_a_colleagues_hold_asks_first(operator, operator2, with_htmx):
    make_operator_job("vault-1")
    _hold(_client(operator), "vault-1", "take")
    colleague = _client(operator2)
    page = colleague.get("/jobs/vault-1/").content.decode()
    assert '''value="release" class="quiet">Release olga's hold…</button>''' in page
    headers = htmx() if with_htmx else {}
    asked = _hold(colleague, "vault-1", "release", **headers)
    assert asked.status_code == 200  # the question, in the panel (or the page, without JavaScript)
    html = asked.content.decode()
    assert "olga has been on this job since " in html and "release their hold only if they agree" in html
    assert "data-confirm-release" in html and 'value="release_other"' in html and "Yes, release olga's hold" in html
    assert Job.objects.get(job_id="vault-1").holder == "olga"  # one click changed nothing
    assert not Job.objects.get(job_id="vault-1").events.filter(kind="job_released").exists()
    _hold(colleague, "vault-1", "release_other", **headers)
    job = Job.objects.get(job_id="vault-1")
    assert job.holder == ""
    event = job.events.get(kind="job_released")
    assert (event.actor, event.note, event.evidence) == ("otto", "released olga's hold", {"released_from": "olga"})


def test_the_holder_releases_in_one_click(operator):
    make_operator_job("vault-1")
    client = _client(operator)
    _hold(client, "vault-1", "take")
    assert _hold(client, "vault-1", "release").status_code == 302
    assert Job.objects.get(job_id="vault-1").holder == ""
