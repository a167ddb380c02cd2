"""Confirm effect, mark not found and escalate for many jobs: one note and one piece of evidence,
each job through the same service as one at a time, with what was refused and why."""

import pytest
from django.contrib.auth.models import Group

from approvals.models import ApprovalRequest
from console.models import BulkRun
from ledger.models import Job, LedgerEvent
from ledger.services import take_job
from reconciliation import decisions
from tests.console.conftest import htmx, latest_version, make_operator_job

pytestmark = pytest.mark.django_db
SEEN = "vault effect log, 14:02-14:10: rotations rot-1..rot-4 applied"


@pytest.fixture
def vaults(operator, operator2):
    """Four vault rotations that may have happened; vault-4 is awaiting approval already."""
    for n in range(1, 5):
        make_operator_job(f"vault-{n}")
    operator2.groups.add(Group.objects.get_or_create(name="operators")[0])
    decisions.mark_not_found(job_id="vault-4", version=latest_version("vault-4"), user=operator2, note="none")


def _selected(*job_ids):
    return [f"{latest_version(j)}:{j}" for j in job_ids]


def test_a_bulk_confirm_needs_evidence_and_changes_nothing_without_it(client, operator, vaults):
    client.force_login(operator)
    html = client.post("/queue/bulk/", {"decision": "confirm_effect", "note": "seen at the provider",
                                        "selected": _selected("vault-1", "vault-2")}, **htmx()).content.decode()
    assert "Confirm effect on many jobs needs evidence" in html
    assert set(Job.objects.filter(job_id__in=["vault-1", "vault-2"]).values_list("status", flat=True)) == {
        "needs_operator"}


def test_confirming_a_selection_asks_then_records_each_with_the_evidence(client, operator, vaults):
    client.force_login(operator)
    data = {"decision": "confirm_effect", "note": "seen at the provider", "evidence": SEEN,
            "selected": _selected("vault-1", "vault-2", "vault-4")}
    asked = client.post("/queue/bulk/", data, **htmx()).content.decode()
    assert "Confirm effect for 3 selected jobs: are you sure?" in asked and f"Your evidence: {SEEN}" in asked
    assert Job.objects.get(job_id="vault-1").status == "needs_operator"
    html = client.post("/queue/bulk/", {**data, "confirmed": "on"}, **htmx()).content.decode()
    assert "vault-1: Confirm effect recorded" in html and "vault-2: Confirm effect recorded" in html
    assert "vault-4: Confirm effect refused: only an unknown attempt can be confirmed" in html
    assert dict(Job.objects.values_list("job_id", "status")) == {
        "vault-1": "succeeded", "vault-2": "succeeded", "vault-3": "needs_operator", "vault-4": "awaiting_approval"}
    event = LedgerEvent.objects.get(job__job_id="vault-1", kind="operator_confirmed_effect")
    assert (event.actor, event.note, event.evidence) == ("olga", "seen at the provider", {"operator_evidence": SEEN})


def test_marking_every_match_not_found_asks_each_an_approval_with_the_evidence(client, operator, operator2, vaults):
    """On a filter: the question, then a run; a job a colleague holds is refused and left alone."""
    client.force_login(operator)
    take_job(job_id="vault-3", holder=operator2.username)
    data = {"scope": "filter", "tab": "human", "decision": "mark_not_found", "note": "rotation never applied",
            "evidence": "vault effect log: no rotation for these keys"}
    asked = client.post("/queue/bulk/", data, **htmx()).content.decode()
    assert "Mark not found for all 4 jobs matching this filter?" in asked
    assert "an irreversible one asks an approver first" in asked
    response = client.post("/queue/bulk/", {**data, "confirmed": "on"}, **htmx())
    run = BulkRun.objects.get()
    assert response["HX-Redirect"] == f"/queue/bulk-runs/{run.pk}/"
    client.post(f"/queue/bulk-runs/{run.pk}/step/", **htmx())
    run.refresh_from_db()
    assert (run.finished, run.succeeded, run.refused) == (True, 2, 2)
    reasons = dict(run.refusals)
    assert "has been on this job since" in reasons["vault-3"]
    assert "only an unknown attempt can be marked not found" in reasons["vault-4"]
    request = ApprovalRequest.objects.get(job__job_id="vault-1")
    assert request.evidence["operator_evidence"] == "vault effect log: no rotation for these keys"
    assert Job.objects.get(job_id="vault-3").status == "needs_operator"


def test_escalating_a_selection_takes_no_evidence(client, operator, vaults):
    client.force_login(operator)
    data = {"decision": "escalate", "note": "the vault team decides", "selected": _selected("vault-1", "vault-2"),
            "confirmed": "on"}
    html = client.post("/queue/bulk/", data, **htmx()).content.decode()
    assert html.count("Escalate recorded") == 2
    assert set(Job.objects.filter(job_id__in=["vault-1", "vault-2"]).values_list("status", flat=True)) == {"escalated"}
