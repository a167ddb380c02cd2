import pytest

from tests.conftest import make_job
from tests.console.conftest import htmx, make_operator_job, make_unknown_job

pytestmark = pytest.mark.django_db


def test_it_shows_the_job_its_attempts_and_timeline(client, auditor):
    make_unknown_job("inv-1")
    client.force_login(auditor)
    response = client.get("/jobs/inv-1/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "billing.create_invoice:inv-1" in html  # the idempotency key
    assert 'data-attempt="1"' in html
    assert "execution-unknown" in html and "effect-ambiguous" in html
    assert "worker-a" in html  # lease owner
    for kind in ("enqueued", "claimed", "side_effect_started", "observation_lost"):
        assert f'data-kind="{kind}"' in html
    assert "connection dropped after the request was sent" in html


def test_an_auditor_sees_no_decision_buttons(client, auditor):
    make_unknown_job("inv-1")
    client.force_login(auditor)
    html = client.get("/jobs/inv-1/").content.decode()
    assert "You can read this job but not change it" in html
    assert 'name="decision"' not in html


def test_the_panel_offers_only_what_the_state_allows(client, operator):
    make_unknown_job("inv-1")
    make_job("fresh")
    client.force_login(operator)
    unknown = client.get("/jobs/inv-1/").content.decode()
    for value in ("confirm_effect", "mark_not_found", "escalate", "retry_reconciliation", "cancel_job"):
        assert f'value="{value}"' in unknown
    pending = client.get("/jobs/fresh/").content.decode()
    assert 'value="confirm_effect"' not in pending and 'value="mark_not_found"' not in pending
    assert 'value="cancel_job"' in pending


def test_an_irreversible_action_says_not_found_needs_approval(client, operator):
    make_operator_job("vault-1")
    client.force_login(operator)
    html = client.get("/jobs/vault-1/").content.decode()
    assert "an approver must approve the replay" in html
    assert 'value="retry_reconciliation"' not in html  # the vault cannot be queried


def test_it_counts_duplicate_deliveries(client, auditor):
    from ledger import services

    make_job("dup")
    services.claim_job(job_id="dup", worker="w1")
    for _ in range(2):
        with pytest.raises(services.ClaimRefused):
            services.claim_job(job_id="dup", worker="w2")
    client.force_login(auditor)
    html = client.get("/jobs/dup/").content.decode()
    assert "<dd data-duplicates>2</dd>" in html


def test_it_shows_reconciliation_checks_and_what_the_provider_said(client, auditor):
    make_operator_job("vault-1")
    client.force_login(auditor)
    html = client.get("/jobs/vault-1/").content.decode()
    assert "Reconciliation checks" in html


def test_an_unknown_job_is_404(client, auditor):
    client.force_login(auditor)
    assert client.get("/jobs/nope/").status_code == 404


def test_a_job_id_with_a_slash_has_a_page(client, auditor):
    make_job("tenant/42")
    client.force_login(auditor)
    assert client.get("/jobs/tenant/42/").status_code == 200


def test_a_page_request_from_htmx_is_still_the_whole_page(client, auditor):
    make_job("a")
    client.force_login(auditor)
    assert b"<html" in client.get("/jobs/a/", **htmx()).content
