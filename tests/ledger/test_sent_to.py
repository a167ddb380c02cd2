"""Where a side effect was sent: recorded on the attempt when it begins, compared by provider."""

import pytest

from ledger import endpoints, services
from ledger.models import LedgerEvent
from tests.conftest import event_kinds, latest_attempt, make_job

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(("given", "kept"), [
    ("https://billing.example/acct_123", "https://billing.example/acct_123"),
    ("  smtp://mail.example:587 ", "smtp://mail.example:587"),
    ("https://key:secret@billing.example/v1?api_key=s3cret#x", "https://billing.example/v1"),
    ("smtp://[::1]:25", "smtp://[::1]:25"),
    ("acct_123@stripe", "acct_123@stripe"),
    ("smtp://u@mail:port/x", "smtp://mail:port/x"),  # not a port: kept as written, still without credentials
    (None, ""),
])
def test_what_is_kept_of_an_endpoint_never_holds_credentials(given, kept):
    assert endpoints.recorded(given) == kept


@pytest.mark.parametrize(("one", "other"), [
    ("http://127.0.0.1:8001", "http://127.0.0.1:8001/"),
    ("HTTPS://Billing.Example/acct", "https://billing.example:443/acct"),
    ("smtp://mail.example", "smtp://mail.example:25"),
    ("acct_123@Stripe", "acct_123@stripe"),
])
def test_the_same_provider_written_two_ways_is_the_same(one, other):
    assert endpoints.same(one, other) and not endpoints.mismatch(asked=one, sent_to=other)


@pytest.mark.parametrize(("one", "other"), [
    ("http://127.0.0.1:8001", "http://127.0.0.1:8002"),
    ("https://billing.example/acct_1", "https://billing.example/acct_2"),
    ("smtp://127.0.0.1:8025", "http://127.0.0.1:8025"),
    ("https://billing.staging.example", "https://billing.example"),
])
def test_different_providers_differ_and_say_so(one, other):
    assert not endpoints.same(one, other)
    assert endpoints.mismatch(asked=one, sent_to=other) == f"asked {one} but the effect was sent to {other}"


def test_an_unknown_side_is_no_mismatch():
    assert endpoints.mismatch(asked="", sent_to="smtp://a:25") == ""
    assert endpoints.mismatch(asked="smtp://a:25", sent_to="") == ""


def test_begin_records_where_the_effect_goes_on_the_attempt_and_in_its_event():
    make_job("st-1")
    lease = services.claim_job(job_id="st-1", worker="w1")
    attempt = services.begin_side_effect(lease=lease, sent_to="https://u:p@billing.example/acct_9?k=v")
    assert attempt.sent_to == latest_attempt("st-1").sent_to == "https://billing.example/acct_9"
    started = LedgerEvent.objects.get(job__job_id="st-1", kind="side_effect_started")
    assert started.evidence == {"idempotency_key": "reckon.echo:st-1", "sent_to": "https://billing.example/acct_9"}


@pytest.mark.parametrize("bad", ["https://a.example/\nX: y", "tab\there", "x" * 501, 42])
def test_a_bad_endpoint_is_refused_and_the_ledger_is_untouched(bad):
    make_job("st-2")
    lease = services.claim_job(job_id="st-2", worker="w1")
    with pytest.raises(services.InvalidJob, match="sent_to"):
        services.begin_side_effect(lease=lease, sent_to=bad)
    attempt = latest_attempt("st-2")
    assert (attempt.side_effect_state, attempt.sent_to) == ("not_attempted", "")
    assert event_kinds("st-2") == ["enqueued", "claimed"]
    assert services.begin_side_effect(lease=lease, sent_to="smtp://mail:25").sent_to == "smtp://mail:25"
