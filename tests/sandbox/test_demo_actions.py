"""Each demo action against the real sandbox process, and the honesty of its classification."""

import pytest

from ledger import runtime
from ledger.actions import Failed, Succeeded, Unknown, get_action
from ledger.models import Attempt, Job
from ledger.providers import Reply
from sandbox.testing import free_port
from tests.conftest import latest_attempt, make_job

pytestmark = pytest.mark.django_db

INVOICE = {"customer": "cus_1", "amount_cents": 1250, "currency": "EUR", "description": "Plan"}


def _faults(sandbox, **rates):
    status, _, body = sandbox.request("PUT", "/_admin/faults", {"rates": rates})
    assert status == 200, body


def _run(job: Job):
    return get_action(job.action).executor(Job.objects.get(pk=job.pk))


def test_an_invoice_is_created_with_our_key_and_marker(provider):
    job = make_job("inv-1", action="billing.create_invoice", payload=INVOICE)
    outcome = _run(job)
    assert isinstance(outcome, Succeeded) and outcome.result_ref.startswith("inv_")
    invoice = provider.request("GET", "/invoices?idempotency_key=billing.create_invoice:inv-1").json["invoices"][0]
    assert invoice["amount_cents"] == 1250
    assert invoice["metadata"]["reckon_marker"] == "billing.create_invoice:inv-1"
    assert provider.effects(key="billing.create_invoice:inv-1")["count"] == 1


def test_replaying_an_invoice_with_the_same_key_creates_no_second_effect(provider):
    job = make_job("inv-1", action="billing.create_invoice", payload=INVOICE)
    first, second = _run(job), _run(job)
    assert first.result_ref == second.result_ref
    assert provider.effects(marker="billing.create_invoice:inv-1")["count"] == 1


def test_a_validation_refusal_is_a_definitive_failure(provider):
    job = make_job("inv-bad", action="billing.create_invoice", payload={**INVOICE, "amount_cents": -5})
    outcome = _run(job)
    assert isinstance(outcome, Failed) and not outcome.retryable
    assert outcome.error.startswith("400") or outcome.error.startswith("422")
    assert provider.effects(marker="billing.create_invoice:inv-bad")["count"] == 0


def test_a_dropped_response_after_the_commit_is_unknown_and_the_effect_exists(provider):
    _faults(provider, drop_after_commit=1.0)
    job = make_job("m-1", action="mail.send", payload={"to": "a@example.com", "subject": "Hi", "body": "x"})
    outcome = _run(job)
    assert isinstance(outcome, Unknown) and outcome.evidence == {"sent": True}
    assert provider.effects(marker="mail.send:m-1")["count"] == 1  # exactly the production duplicate trap


def test_a_5xx_is_unknown_not_failed(provider):
    _faults(provider, error_5xx=1.0)
    job = make_job("m-2", action="mail.send", payload={"to": "a@example.com", "subject": "Hi", "body": "x"})
    outcome = _run(job)
    assert isinstance(outcome, Unknown) and "503" in outcome.reason


def test_a_timeout_is_unknown(provider, settings):
    settings.RECKON_PROVIDER_TIMEOUT = 0.2
    provider.request("PUT", "/_admin/faults", {"latency": {"min": 1.0, "max": 1.0}})
    job = make_job("m-3", action="mail.send", payload={"to": "a@example.com", "subject": "Hi", "body": "x"})
    outcome = _run(job)
    assert isinstance(outcome, Unknown) and "timeout" in outcome.reason.lower()


def test_a_refused_connection_sent_nothing_and_is_retryable(provider, settings):
    settings.RECKON_MAIL_URL = f"http://127.0.0.1:{free_port()}"
    job = make_job("m-4", action="mail.send", payload={"to": "a@example.com", "subject": "Hi", "body": "x"})
    outcome = _run(job)
    assert isinstance(outcome, Failed) and outcome.retryable and outcome.evidence == {"sent": False}


@pytest.mark.parametrize("status, kind", [(200, Succeeded), (201, Succeeded), (400, Failed), (409, Failed),
                                          (422, Failed), (429, Failed), (500, Unknown), (502, Unknown),
                                          (503, Unknown)])
def test_status_classification(status, kind):
    from sandbox.demo_actions import classify

    assert isinstance(classify(Reply(status, {"id": "x", "error": "e"}), result_field="id"), kind)


@pytest.mark.parametrize("fault, status", [("error_5xx", 503), ("fail_before_commit", 500)])
def test_the_vaults_answer_that_nothing_was_done_is_a_retryable_failure_not_unknown(provider, fault, status):
    """The vault declares the sandbox's "503 ... nothing was done" and "500 ... rolled back; nothing
    was done" as proof: the rotation did not happen, so no person and no approver is needed."""
    _faults(provider, **{fault: 1.0})
    make_job("rot-1", action="vault.rotate_credential", payload={"name": "db-primary"})
    assert runtime.run_job("rot-1") == "failed"
    first = Attempt.objects.get(job__job_id="rot-1", number=1)
    assert (first.execution_state, first.side_effect_state) == ("failed", "not_found")
    assert first.error.startswith(f"{status}: injected fault") and "proves nothing was done" in first.error
    job = Job.objects.get(job_id="rot-1")
    assert job.status == "pending" and job.retry_at is not None  # the next attempt waits for its backoff
    assert latest_attempt("rot-1").number == 2
    assert provider.effects(marker="vault.rotate_credential:rot-1")["count"] == 0


def test_the_same_answer_from_a_provider_that_declares_nothing_is_unknown(provider):
    _faults(provider, error_5xx=1.0)
    make_job("inv-9", action="billing.create_invoice", payload=INVOICE)
    assert runtime.run_job("inv-9") == "unknown"  # billing declares no such answer: it may have happened


def _profile(sandbox, name, account, session="active"):
    status, _, body = sandbox.request("PUT", f"/_admin/profiles/{name}", {"account": account, "session": session})
    assert status == 200, body


def test_a_post_runs_as_the_bound_account_through_the_worker_loop(provider):
    _profile(provider, "p1", "acme-social")
    make_job("post-1", action="social.publish_post", payload={"body": "Launch!"},
             identity={"profile": "p1", "account": "acme-social"})
    assert runtime.run_job("post-1", worker="w") == "succeeded"
    posts = provider.request("GET", "/posts?marker=social.publish_post:post-1").json["posts"]
    assert [p["account"] for p in posts] == ["acme-social"]
    assert latest_attempt("post-1").observed_identity["account"] == "acme-social"


def test_a_post_from_a_profile_switched_to_another_account_is_blocked_before_the_call(provider):
    _profile(provider, "p1", "someone-else")
    make_job("post-2", action="social.publish_post", payload={"body": "Launch!"},
             identity={"profile": "p1", "account": "acme-social"})
    assert runtime.run_job("post-2", worker="w") == "blocked"
    assert provider.effects(marker="social.publish_post:post-2")["count"] == 0
    assert Job.objects.get(job_id="post-2").status == "blocked"


def test_a_post_with_an_expired_session_fails_definitively(provider):
    _profile(provider, "p1", "acme-social", session="expired")
    make_job("post-3", action="social.publish_post", payload={"body": "Launch!"},
             identity={"profile": "p1", "account": "acme-social"})
    assert runtime.run_job("post-3", worker="w") == "failed"
    assert "401" in latest_attempt("post-3").error
    assert provider.effects(marker="social.publish_post:post-3")["count"] == 0


def test_a_credential_rotation_succeeds_and_cannot_be_looked_up(provider):
    make_job("rot-1", action="vault.rotate_credential", payload={"name": "db-primary"})
    assert runtime.run_job("rot-1", worker="w") == "succeeded"
    assert provider.effects(marker="vault.rotate_credential:rot-1")["count"] == 1
    assert provider.request("GET", "/credentials/db-primary").status == 405
    assert get_action("vault.rotate_credential").reversible is False
