"""A worker over HTTP says where it sends the effect when it begins (optional `sent_to`)."""

import pytest

from ledger.models import LedgerEvent
from tests.api.conftest import lease_body
from tests.conftest import event_kinds, latest_attempt, make_job

pytestmark = pytest.mark.django_db


def test_begin_records_where_the_worker_sends_the_effect(api):
    make_job("sx-1")
    claimed = api.post("/api/v1/jobs/sx-1/claim", {"worker": "w"}).json
    begun = api.post("/api/v1/jobs/sx-1/lease/begin",
                     lease_body(claimed, sent_to="https://key:secret@billing.example/acct_1?token=t"))
    assert begun.status == 200, begun.json
    assert begun.json["attempt"]["sent_to"] == latest_attempt("sx-1").sent_to == "https://billing.example/acct_1"
    assert api.get("/api/v1/jobs/sx-1").json["attempts"][-1]["sent_to"] == "https://billing.example/acct_1"
    event = LedgerEvent.objects.get(job__job_id="sx-1", kind="side_effect_started")
    assert event.evidence["sent_to"] == "https://billing.example/acct_1"


def test_begin_on_the_general_path_records_it_too(api):
    make_job("sx-2", action="vault.rotate_credential", payload={"name": "db"})  # irreversible: never the fast path
    claimed = api.post("/api/v1/jobs/sx-2/claim", {"worker": "w"}).json
    begun = api.post("/api/v1/jobs/sx-2/lease/begin", lease_body(claimed, sent_to="https://vault.example"))
    assert begun.status == 200, begun.json
    assert latest_attempt("sx-2").sent_to == "https://vault.example"


def test_begin_without_it_records_nothing_as_before(api):
    make_job("sx-3")
    claimed = api.post("/api/v1/jobs/sx-3/claim", {"worker": "w"}).json
    assert api.post("/api/v1/jobs/sx-3/lease/begin", lease_body(claimed)).json["attempt"]["sent_to"] == ""
    assert LedgerEvent.objects.get(job__job_id="sx-3", kind="side_effect_started").evidence == {
        "idempotency_key": "reckon.echo:sx-3"}


@pytest.mark.parametrize("bad", ["two\nlines", "x" * 501, 42])
def test_a_bad_sent_to_is_a_clear_400_and_nothing_begins(api, bad):
    make_job("sx-4")
    claimed = api.post("/api/v1/jobs/sx-4/claim", {"worker": "w"}).json
    refused = api.post("/api/v1/jobs/sx-4/lease/begin", lease_body(claimed, sent_to=bad))
    assert refused.status == 400, refused.json
    assert "sent_to" in str(refused.json)
    assert latest_attempt("sx-4").side_effect_state == "not_attempted"
    assert event_kinds("sx-4") == ["enqueued", "claimed"]


def test_a_pull_agent_sees_where_the_effect_went_and_its_absence_elsewhere_proves_nothing(api, tmp_path):
    from ledger.actions import _registry
    from ledger.declarations import load_actions_file
    from reconciliation.models import ReconciliationCheck
    from tests.reconciliation.helpers import unknown_job

    path = tmp_path / "actions.toml"
    path.write_text('[actions."pull.sent_to"]\nexecutor = "external"\nreversible = true\nqueryable = true\n'
                    'reconciler = "external"\n')
    load_actions_file(path, required=True)
    try:
        job = unknown_job("sx-5", "pull.sent_to", {"n": 1}, sent_to="https://billing.example/acct_staging")
        claimed = api.post("/api/v1/reconciliations/claim", {"agent": "agent-1"}).json
        assert claimed["attempt"]["sent_to"] == "https://billing.example/acct_staging"
        answered = api.post(f"/api/v1/reconciliations/{claimed['reconciliation_id']}/outcome", {
            "agent": "agent-1", "outcome": "not_found", "reason": "no charge with this key",
            "asked": "https://billing.example/acct_prod"})
        assert answered.status == 200 and answered.json["outcome"] == "unavailable", answered.json
        check = ReconciliationCheck.objects.get(job=job)
        assert check.asked == "https://billing.example/acct_prod"
        assert check.error.startswith("asked https://billing.example/acct_prod but the effect was sent to "
                                      "https://billing.example/acct_staging")
        assert job.attempts.count() == 1 and latest_attempt("sx-5").execution_state == "unknown"
    finally:
        _registry.pop("pull.sent_to")
