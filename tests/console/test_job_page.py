import pytest

from ledger import runtime
from ledger.models import Job
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


# -- tamper-evident history, duplicate deliveries, not_found reasons, the dead-man gate -------


def _tamper(statement: str, params) -> None:
    """An out-of-band change, made with the append-only trigger disabled in this test's transaction."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute("ALTER TABLE ledger_ledgerevent DISABLE TRIGGER USER")
        cursor.execute(statement, params)
        cursor.execute("ALTER TABLE ledger_ledgerevent ENABLE TRIGGER USER")


def test_it_says_the_history_is_verified(client, auditor):
    make_unknown_job("inv-1")
    client.force_login(auditor)
    html = client.get("/jobs/inv-1/").content.decode()
    assert 'data-chain="verified"' in html and "History verified" in html
    assert "History broken" not in html


@pytest.mark.parametrize(
    ("statement", "broken_at"),
    [
        ("UPDATE ledger_ledgerevent SET note = 'nothing to see' WHERE id = %s", 2),  # the rewritten event
        ("DELETE FROM ledger_ledgerevent WHERE id = %s", 3),  # the event after the removed one
    ],
)
def test_an_out_of_band_change_shows_where_the_history_breaks(client, auditor, statement, broken_at):
    job = make_unknown_job("inv-1")
    make_unknown_job("inv-2")  # another job's chain is its own and stays verified
    events = list(job.events.order_by("id").values_list("id", flat=True))
    _tamper(statement, [events[2]])
    expected = events[broken_at]
    client.force_login(auditor)
    html = client.get("/jobs/inv-1/").content.decode()
    assert f'History broken at event <a href="#event-{expected}">#{expected}</a>' in html
    assert 'class="chain chain-broken" role="alert"' in html
    assert f'<li id="event-{expected}" class="event actor-worker event-broken"' in html
    assert html.count("event-broken") == 1
    assert "History verified" not in html
    other = client.get("/jobs/inv-2/").content.decode()
    assert "History verified" in other and "History broken" not in other


def test_each_event_shows_its_hash_short_with_the_full_hash_in_its_title(client, auditor):
    job = make_unknown_job("inv-1")
    client.force_login(auditor)
    html = client.get("/jobs/inv-1/").content.decode()
    for event in job.events.all():
        assert len(event.hash) == 64
        assert f'title="{event.hash}" data-hash="{event.hash}"' in html
        assert f"</span>{event.hash[:12]}</code>" in html


def test_not_found_shows_why_a_replay_is_safe_beside_the_decision(client, operator, provider):
    from reconciliation.models import ReconciliationCheck
    from reconciliation.passes import reconcile_job

    make_unknown_job("inv-1")
    decision = reconcile_job(job_id="inv-1")
    assert decision.outcome == "not_found"
    reason = ReconciliationCheck.objects.get(job__job_id="inv-1").evidence["reason"]
    assert "no invoice for this key or marker" in reason
    client.force_login(operator)
    html = client.get("/jobs/inv-1/").content.decode()
    panel = html[html.index('id="decision-panel"') :]
    assert "Why a replay is safe" in panel
    assert f"The latest reconciliation found nothing at the provider: {reason}" in panel


def test_no_replay_reason_is_shown_when_reconciliation_did_not_say_not_found(client, operator):
    make_operator_job("vault-1")  # not queryable: no not_found, no reason
    client.force_login(operator)
    assert "Why a replay is safe" not in client.get("/jobs/vault-1/").content.decode()


def test_a_job_held_by_the_dead_man_gate_says_so(client, auditor, settings):
    from ledger import services
    from ledger.gate import record_pass

    settings.RECKON_GATE_BOUND_S = 30
    record_pass("sweeper")  # the reconciler never completed a pass
    make_job("rot", action="vault.rotate_credential", payload={"name": "db"})
    with pytest.raises(services.ClaimRefused, match="dead-man gate"):
        services.claim_job(job_id="rot", worker="w")
    client.force_login(auditor)
    html = client.get("/jobs/rot/").content.decode()
    assert "data-gated" in html and "Held by the dead-man gate since" in html
    assert "the reconciler has not completed a pass yet" in html
    make_job("plain")
    assert "data-gated" not in client.get("/jobs/plain/").content.decode()


def test_a_job_whose_action_this_deployment_does_not_declare_is_shown_and_decided_safely(client, operator):
    from ledger.actions import _registry

    make_unknown_job("inv-gone")
    removed = _registry.pop("billing.create_invoice")  # a deployment whose action modules changed since
    try:
        client.force_login(operator)
        response = client.get("/jobs/inv-gone/")
        assert response.status_code == 200
        html = response.content.decode()
        assert "not declared in this deployment" in html
        # The job's own policy snapshot says whether a replay needs approval; nothing here can
        # look the effect up without the action's reconciler.
        for value in ("confirm_effect", "mark_not_found", "escalate", "cancel_job"):
            assert f'value="{value}"' in html
        assert 'value="retry_reconciliation"' not in html
    finally:
        _registry[removed.name] = removed


def test_the_page_shows_the_enqueued_policy_and_the_declaration_now_when_they_differ(client, operator):
    from dataclasses import replace

    from ledger.actions import _registry, register

    make_unknown_job("inv-policy")
    was = _registry["billing.create_invoice"]
    register(replace(was, reversible=False, max_attempts=1, runbook_url="https://wiki.example.com/invoices"))
    try:
        client.force_login(operator)
        html = client.get("/jobs/inv-policy/").content.decode()
        assert "(reversible, queryable, 3 attempts)" in html  # what the job was enqueued with decides
        assert "declared differently since this job was enqueued: now irreversible, queryable, 1 attempt;" in html
        assert 'href="https://wiki.example.com/invoices"' in html
        assert "This action is irreversible" not in html  # "mark not found" still replays this job
    finally:
        register(was)


def test_it_shows_where_the_effect_was_sent_and_where_reconciliation_asked(client, auditor, provider):
    from ledger import services
    from reconciliation.passes import reconcile_job

    make_job("inv-sent", action="billing.create_invoice", payload={"customer": "c", "amount_cents": 1})
    lease = services.claim_job(job_id="inv-sent", worker="worker-a")
    services.begin_side_effect(lease=lease, sent_to="https://billing.staging.example/acct_123")
    services.record_unknown(lease=lease, reason="connection dropped after the request was sent")
    reconcile_job(job_id="inv-sent")
    client.force_login(auditor)
    html = client.get("/jobs/inv-sent/").content.decode()
    assert 'data-sent-to>sent to <code>https://billing.staging.example/acct_123</code>' in html
    assert f"data-asked>asked <code>{provider.url}</code>" in html
    assert (f"asked {provider.url} but the effect was sent to https://billing.staging.example/acct_123"
            in html)
    queue = client.get("/queue/?tab=reconciling").content.decode()
    assert (f"the reconciler asked {provider.url} but the effect was sent to "
            "https://billing.staging.example/acct_123, so it cannot tell" in queue)
    assert "point the reconciler at that provider" in queue


def test_a_job_waiting_for_its_next_attempt_says_when_it_comes(client, operator, provider):
    provider.request("PUT", "/_admin/faults", {"rates": {"error_5xx": 1.0}})  # the vault's "nothing was done"
    make_job("rot-1", action="vault.rotate_credential", payload={"name": "db-primary"})
    assert runtime.run_job("rot-1") == "failed"
    job = Job.objects.get(job_id="rot-1")
    client.force_login(operator)
    page = client.get("/jobs/rot-1/").content.decode()
    assert "data-retry-at>The next attempt comes at <time" in page and job.retry_at.isoformat()[:19] in page
    assert "attempt 2 queued with the same key; it starts in" in page  # the timeline says why
