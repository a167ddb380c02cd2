"""Each reconciler against the real sandbox: every outcome, every conflict rule."""

import os
import signal

import pytest

from ledger.models import Attempt
from reconciliation.models import CheckOutcome
from sandbox import reconcilers
from sandbox.testing import free_port
from tests.conftest import latest_attempt
from tests.reconciliation.helpers import (
    IDENTITY,
    INVOICE,
    MAIL,
    POST,
    create_invoice,
    forget_keys,
    publish,
    send_message,
    set_profile,
    unknown_job,
)

pytestmark = pytest.mark.django_db

INV, MSG, PST = "billing.create_invoice", "mail.send", "social.publish_post"


def _look(job_id: str):
    attempt = latest_attempt(job_id)
    action = attempt.job.action
    reconciler = {INV: reconcilers.invoice, MSG: reconcilers.mail, PST: reconcilers.post}[action]
    return reconciler(attempt.job, attempt)


@pytest.fixture
def profile(provider):
    set_profile(provider, IDENTITY["profile"], IDENTITY["account"])


# -- confirmed -----------------------------------------------------------------------------


def test_it_confirms_an_invoice_found_by_key(provider):
    unknown_job("i1", INV, INVOICE)
    invoice = create_invoice(provider, f"{INV}:i1")
    finding = _look("i1")
    assert finding.outcome == CheckOutcome.CONFIRMED and finding.result_ref == invoice["id"]
    assert finding.evidence["lookups"][0]["found"][0]["id"] == invoice["id"]


def test_it_confirms_an_invoice_by_marker_when_the_provider_forgot_its_keys(provider):
    unknown_job("i1", INV, INVOICE)
    invoice = create_invoice(provider, f"{INV}:i1")
    forget_keys(provider)
    finding = _look("i1")
    assert finding.outcome == CheckOutcome.CONFIRMED and finding.result_ref == invoice["id"]
    by_key, by_marker = finding.evidence["lookups"]
    assert by_key["found"] == [] and by_marker["found"][0]["id"] == invoice["id"]


def test_it_confirms_a_message_by_its_marker_header(provider):
    unknown_job("m1", MSG, MAIL)
    message = send_message(provider, f"{MSG}:m1")
    finding = _look("m1")
    assert finding.outcome == CheckOutcome.CONFIRMED and finding.result_ref == message["message_id"]


def test_it_confirms_a_post_from_the_bound_account(provider, profile):
    unknown_job("p1", PST, POST, identity=IDENTITY)
    post = publish(provider, f"{PST}:p1")
    finding = _look("p1")
    assert finding.outcome == CheckOutcome.CONFIRMED and finding.result_ref == post["post_id"]


# -- not found -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("action", "payload", "identity", "says"),
    [
        (INV, INVOICE, None, "no invoice for this key or marker"),
        (MSG, MAIL, None, "no sent message"),
        (PST, POST, IDENTITY, "no post with this job's marker"),
    ],
)
def test_not_found_says_why_replay_is_safe(provider, action, payload, identity, says):
    unknown_job("j1", action, payload, identity=identity)
    send_message(provider, f"{MSG}:someone-else")  # other jobs' effects are not ours
    finding = _look("j1")
    assert finding.outcome == CheckOutcome.NOT_FOUND
    assert says in finding.reason


# -- unavailable ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("action", "payload", "url"), [(INV, INVOICE, "BILLING"), (MSG, MAIL, "MAIL"), (PST, POST, "PUBLISH")]
)
def test_an_unreachable_provider_is_unavailable_not_not_found(provider, settings, action, payload, url):
    unknown_job("j1", action, payload)
    setattr(settings, f"RECKON_{url}_URL", f"http://127.0.0.1:{free_port()}")
    finding = _look("j1")
    assert finding.outcome == CheckOutcome.UNAVAILABLE and "could not connect" in finding.reason


def test_a_lookup_that_times_out_is_unavailable(provider, settings):
    unknown_job("m1", MSG, MAIL)
    send_message(provider, f"{MSG}:m1")
    settings.RECKON_PROVIDER_TIMEOUT = 0.3
    os.kill(provider.pid, signal.SIGSTOP)  # the provider hangs: connected, no answer
    try:
        finding = _look("m1")
    finally:
        os.kill(provider.pid, signal.SIGCONT)
    assert finding.outcome == CheckOutcome.UNAVAILABLE and "timed out" in finding.reason.lower()


def test_a_provider_error_answer_is_unavailable(provider, settings):
    unknown_job("i1", INV, INVOICE)
    settings.RECKON_BILLING_URL = provider.url + "/no-such-prefix"  # the provider answers 404
    finding = _look("i1")
    assert finding.outcome == CheckOutcome.UNAVAILABLE and "404" in finding.reason


# -- conflicts -----------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["amount_cents", "currency", "customer"])
def test_an_invoice_for_our_key_with_other_terms_is_a_conflict(provider, field):
    unknown_job("i1", INV, INVOICE)
    other = {"amount_cents": 999, "currency": "USD", "customer": "cus_other"}[field]
    create_invoice(provider, f"{INV}:i1", {**INVOICE, field: other})
    finding = _look("i1")
    assert finding.outcome == CheckOutcome.CONFLICT and field in finding.reason
    assert finding.evidence["differences"][field] == {"expected": INVOICE[field], "provider": other}


@pytest.mark.parametrize("field", ["to", "subject", "body"])
def test_a_message_with_our_marker_but_other_content_is_a_conflict(provider, field):
    unknown_job("m1", MSG, MAIL)
    send_message(provider, f"{MSG}:m1", {**MAIL, field: "other@example.com" if field == "to" else "other"})
    finding = _look("m1")
    assert finding.outcome == CheckOutcome.CONFLICT and field in finding.evidence["differences"]


def test_a_post_with_another_body_is_a_conflict(provider, profile):
    unknown_job("p1", PST, POST, identity=IDENTITY)
    publish(provider, f"{PST}:p1", body="something else")
    finding = _look("p1")
    assert finding.outcome == CheckOutcome.CONFLICT and "body" in finding.evidence["differences"]


def test_a_post_made_from_another_account_is_a_conflict(provider, profile):
    unknown_job("p1", PST, POST, identity=IDENTITY)
    set_profile(provider, IDENTITY["profile"], "@intruder")  # the profile was logged into another account
    publish(provider, f"{PST}:p1")
    finding = _look("p1")
    assert finding.outcome == CheckOutcome.CONFLICT and "@intruder" in finding.reason
    assert finding.evidence["identity_differences"]["account"]["provider"] == "@intruder"


def test_two_invoices_for_one_marker_are_a_conflict(provider):
    unknown_job("i1", INV, INVOICE)
    forget_keys(provider)  # the key no longer protects: a replay made a second invoice
    create_invoice(provider, f"{INV}:i1")
    create_invoice(provider, f"{INV}:i1")
    finding = _look("i1")
    assert finding.outcome == CheckOutcome.CONFLICT and "2 invoices" in finding.reason


@pytest.mark.parametrize(("action", "payload", "make"), [(MSG, MAIL, "message"), (PST, POST, "post")])
def test_two_effects_for_one_marker_are_a_conflict(provider, profile, action, payload, make):
    identity = IDENTITY if action == PST else None
    unknown_job("j1", action, payload, identity=identity)
    for _ in range(2):
        send_message(provider, f"{MSG}:j1") if make == "message" else publish(provider, f"{PST}:j1")
    finding = _look("j1")
    assert finding.outcome == CheckOutcome.CONFLICT and f"2 {make}s" in finding.reason


def test_a_reported_object_missing_at_the_provider_is_a_conflict_not_not_found(provider):
    job = unknown_job("m1", MSG, MAIL)
    # The attempt's record says the provider answered with a message id, yet no message has the marker.
    Attempt.objects.filter(job=job).update(result_ref="<gone@sandbox.local>")
    finding = _look("m1")
    assert finding.outcome == CheckOutcome.CONFLICT and "<gone@sandbox.local>" in finding.reason
