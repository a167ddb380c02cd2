"""Workers within their provider's budget: a 429 or an open circuit before the side effect is a
retryable failure (nothing was sent), never an unknown. Against the real sandbox process."""

import pytest

from ledger import runtime
from ledger.budget import BUDGET
from ledger.models import Attempt
from reconciliation.models import ProviderState
from sandbox.testing import free_port
from tests.conftest import latest_attempt, make_job

pytestmark = pytest.mark.django_db

MAIL = {"to": "ann@example.com", "subject": "Hi", "body": "Hello"}


def test_a_429_is_a_retryable_failure_and_nothing_was_sent(provider):
    provider.set_rate_limits({"/messages": 0.5})  # a bucket of two: the third send in a row is refused
    results = {}
    for n in range(3):
        make_job(f"w-{n}", action="mail.send", payload=MAIL)
        results[f"w-{n}"] = runtime.run_job(f"w-{n}")
    assert results == {"w-0": "succeeded", "w-1": "succeeded", "w-2": "failed"}
    refused = Attempt.objects.get(job__job_id="w-2", number=1)
    assert refused.execution_state == "failed" and refused.side_effect_state != "ambiguous"
    assert "429" in refused.error
    assert latest_attempt("w-2").number == 2 and refused.job.status == "pending"  # retried, not unknown
    assert provider.effects(marker="mail.send:w-2")["count"] == 0
    assert next(row for row in BUDGET.snapshot() if row["provider"] == "mail")["state"] == "throttled"
    # The worker published it for the console (ledger.hooks.provider_called, reconciliation.providers).
    assert ProviderState.objects.get(provider="mail").state == "throttled"


def test_an_open_circuit_holds_the_attempt_before_its_side_effect_and_spends_none(provider, settings):
    settings.RECKON_PROVIDER_CIRCUIT_FAILURES = 2
    settings.RECKON_MAIL_URL = f"http://127.0.0.1:{free_port()}"  # nobody answers there
    results = []
    for n in range(3):
        make_job(f"c-{n}", action="mail.send", payload=MAIL)
        results.append(runtime.run_job(f"c-{n}"))
    assert results == ["failed", "failed", "held:circuit"]
    assert "could not connect" in Attempt.objects.get(job__job_id="c-0", number=1).error
    held = latest_attempt("c-2")
    assert held.number == 1 and held.execution_state == "not_started" and held.side_effect_state == "not_attempted"
    job = held.job
    assert job.status == "pending" and job.retry_at is not None  # back when the circuit lets a call through
    event = job.events.order_by("-id").first()
    assert event.kind == "side_effect_held" and "provider mail is not taking calls" in event.note
    assert "not spent" in event.note
