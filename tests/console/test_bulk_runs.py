"""A decision for every job a queue filter matches: confirmed on the page when it cancels, then
run batch by batch, each job recorded or refused on its own."""

import json

import pytest
from django.test import Client

from console import bulk_runs
from console.models import BulkRun
from ledger.models import Job
from ledger.services import take_job
from tests.console.conftest import htmx, make_operator_job, make_unknown_job, with_tenants

pytestmark = pytest.mark.django_db


@pytest.fixture
def many(db):
    """Five jobs waiting for an operator in acme, one in globex, one reconciling in acme."""
    for n in range(5):
        make_operator_job(f"vault-{n}")
    make_operator_job("vault-g", tenant="globex")
    make_unknown_job("inv-1")


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _every_match(client, decision, note="provider outage, see INC-7", **fields):
    data = {"scope": "filter", "decision": decision, "note": note, "tab": "human", "tenant": "acme", **fields}
    return client.post("/queue/bulk/", data, **htmx())


def _run_to_the_end(client, run: BulkRun, limit: int = 20) -> BulkRun:
    for _ in range(limit):
        html = client.post(f"/queue/bulk-runs/{run.pk}/step/", **htmx()).content.decode()
        run.refresh_from_db()
        if run.finished:
            assert 'hx-trigger="load"' not in html and "Back to the queue" in html
            return run
        assert 'hx-trigger="load"' in html  # the page asks for the next batch by itself
    raise AssertionError("the run did not finish")


def test_the_queue_offers_every_matching_job_not_only_the_page(client, operator, auditor, many):
    client.force_login(operator)
    html = client.get("/queue/?tab=human&tenant=acme&size=2").content.decode()
    assert html.count('<tr data-job="') == 2
    assert "Select all 5 jobs matching this filter, not only this page" in html
    assert 'name="scope" value="filter" form="bulk-form"' in html
    assert "Select all" not in _client(auditor).get("/queue/").content.decode()


def test_a_retry_runs_in_batches_with_progress_each_job_on_its_own(operator, many, monkeypatch):
    monkeypatch.setattr(bulk_runs, "BATCH", 2)
    make_unknown_job("inv-2")
    make_unknown_job("inv-3")
    client = _client(operator)
    response = _every_match(client, "retry_reconciliation", tab="reconciling", tenant="")
    run = BulkRun.objects.get()
    assert response["HX-Redirect"] == f"/queue/bulk-runs/{run.pk}/"  # a retry takes nothing back: no question
    assert (run.total, run.done) == (3, 0)
    page = client.get(f"/queue/bulk-runs/{run.pk}/").content.decode()
    assert "Running: 0 of 3 jobs" in page and 'hx-post="/queue/bulk-runs/' in page
    first = client.post(f"/queue/bulk-runs/{run.pk}/step/", **htmx())
    assert "Running: 2 of 3 jobs" in first.content.decode()
    assert json.loads(first["HX-Trigger"]) == {"queue-changed": {}}
    run = _run_to_the_end(client, run)
    assert (run.done, run.succeeded, run.refused) == (3, 3, 0)
    for job_id in ("inv-1", "inv-2", "inv-3"):
        event = Job.objects.get(job_id=job_id).events.get(kind="operator_retried_reconciliation")
        assert (event.actor, event.note) == (operator.username, "provider outage, see INC-7")


def test_cancelling_every_match_asks_first_on_the_page(operator, many):
    client = _client(operator)
    html = _every_match(client, "cancel_job").content.decode()
    assert "Cancel job for all 5 jobs matching this filter?" in html
    assert "Yes, cancel job for 5 jobs" in html and 'name="confirmed" value="on"' in html
    assert not BulkRun.objects.exists()
    assert Job.objects.filter(status="cancelled").count() == 0
    # The confirmation is a plain form: it works with or without JavaScript.
    response = client.post("/queue/bulk/", {"scope": "filter", "decision": "cancel_job", "confirmed": "on",
                                            "note": "provider outage, see INC-7", "tab": "human", "tenant": "acme"})
    run = BulkRun.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/queue/bulk-runs/{run.pk}/"
    run = _run_to_the_end(client, run)
    assert (run.done, run.succeeded) == (5, 5)
    assert set(Job.objects.filter(status="cancelled").values_list("job_id", flat=True)) == {
        f"vault-{n}" for n in range(5)}
    assert Job.objects.get(job_id="vault-g").status == "needs_operator"  # another tenant: not in the filter


def test_refusals_are_per_job_and_listed(operator, operator2, many):
    take_job(job_id="vault-1", holder=operator2.username)
    client = _client(operator)
    client.post("/queue/bulk/", {"scope": "filter", "decision": "cancel_job", "confirmed": "on",
                                 "note": "provider outage", "tab": "human", "tenant": "acme"})
    run = BulkRun.objects.get()
    # vault-2 changes after the run was confirmed: it is left alone.
    other = _client(operator2)
    other.post("/jobs/vault-2/decide/", {"decision": "escalate", "note": "finance", "version":
                                         Job.objects.get(job_id="vault-2").attempts.get().version})
    run = _run_to_the_end(client, run)
    assert (run.done, run.succeeded, run.refused) == (5, 3, 2)
    reasons = dict(run.refusals)
    assert f"{operator2.username} has been on this job since" in reasons["vault-1"]
    assert "changed after you confirmed" in reasons["vault-2"]
    assert Job.objects.get(job_id="vault-1").status == "needs_operator"
    assert Job.objects.get(job_id="vault-2").status == "escalated"
    page = client.get(f"/queue/bulk-runs/{run.pk}/").content.decode()
    assert 'data-refused-job="vault-1"' in page and 'data-refused-job="vault-2"' in page


def test_the_run_respects_the_tenant_fence(operator, many):
    client = _client(with_tenants(operator, "globex"))
    client.post("/queue/bulk/", {"scope": "filter", "decision": "cancel_job", "confirmed": "on",
                                 "note": "outage", "tab": "human"})
    run = _run_to_the_end(client, BulkRun.objects.get())
    assert (run.total, run.succeeded) == (1, 1)
    assert list(Job.objects.filter(status="cancelled").values_list("job_id", flat=True)) == ["vault-g"]


def test_a_run_is_its_authors_and_needs_a_note(operator, operator2, auditor, many):
    client = _client(operator)
    html = _every_match(client, "retry_reconciliation", note="  ").content.decode()
    assert "This field is required." in html and not BulkRun.objects.exists()
    _every_match(client, "retry_reconciliation")
    run = BulkRun.objects.get()
    assert _client(operator2).get(f"/queue/bulk-runs/{run.pk}/").status_code == 404
    assert _client(operator2).post(f"/queue/bulk-runs/{run.pk}/step/").status_code == 404
    assert _client(auditor).get(f"/queue/bulk-runs/{run.pk}/").status_code == 403
    run.refresh_from_db()
    assert run.done == 0


def test_without_javascript_a_button_steps_the_run(operator, many):
    client = _client(operator)
    _every_match(client, "retry_reconciliation")
    run = BulkRun.objects.get()
    response = client.post(f"/queue/bulk-runs/{run.pk}/step/")
    assert response.status_code == 302 and response["Location"] == f"/queue/bulk-runs/{run.pk}/"
    page = client.get(response["Location"]).content.decode()
    assert 'action="/queue/bulk-runs/' in page or "Done" in page
