"""Bulk decisions ask "are you sure?" in the page, rendered by the server: the first submit
changes nothing and shows what would happen to which jobs; only the second decides."""

import json

import pytest

from ledger.models import Job, LedgerEvent
from tests.console.conftest import htmx, latest_version, make_operator_job, make_unknown_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def two(db):
    make_unknown_job("inv-1")
    make_operator_job("vault-1")
    return [f"{latest_version(j)}:{j}" for j in ("inv-1", "vault-1")]


def test_the_first_bulk_submit_only_asks_and_changes_nothing(client, operator, two):
    client.force_login(operator)
    before = LedgerEvent.objects.count()
    response = client.post("/queue/bulk/", {"decision": "cancel_job", "note": "withdrawn", "selected": two,
                                            "tab": "human"}, **htmx())
    html = response.content.decode()
    assert html.lstrip().startswith('<section id="queue-table"') and "HX-Trigger" not in response
    assert "Cancel job for 2 selected jobs: are you sure?" in html
    for value in two:
        assert f'<input type="hidden" name="selected" value="{value}">' in html
    assert '<input type="hidden" name="confirmed" value="on">' in html
    assert '<input type="hidden" name="tab" value="human">' in html
    assert LedgerEvent.objects.count() == before
    assert set(Job.objects.values_list("status", flat=True)) == {"needs_reconciliation", "needs_operator"}


def test_the_second_step_decides_for_each_job(client, operator, two):
    client.force_login(operator)
    response = client.post("/queue/bulk/", {"decision": "cancel_job", "note": "withdrawn", "selected": two,
                                            "confirmed": "on"}, **htmx())
    assert json.loads(response["HX-Trigger"]) == {"queue-changed": {}}
    assert set(Job.objects.values_list("status", flat=True)) == {"cancelled"}


def test_without_javascript_the_question_is_a_page_of_its_own(client, operator, two):
    client.force_login(operator)
    response = client.post("/queue/bulk/", {"decision": "retry_reconciliation", "note": "back up", "selected": two})
    assert response.status_code == 200
    html = response.content.decode()
    assert "<html" in html and "Retry reconciliation for 2 selected jobs: are you sure?" in html
    assert Job.objects.get(job_id="vault-1").status == "needs_operator"
