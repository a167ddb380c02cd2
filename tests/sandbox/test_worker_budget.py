"""Workers within their provider's budget: a 429 or an open circuit before the side effect is a
retryable failure (nothing was sent), never an unknown. Against the real sandbox process."""

import pytest

from config.processes import wait_until
from ledger import runtime
from ledger.budget import BUDGET
from ledger.models import Attempt, Job
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


def test_the_circuits_probe_is_not_counted_against_the_attempts_so_an_outage_exhausts_no_job(provider, settings):
    """A vault down for longer than three cool-downs: the job carries the circuit's probe each time
    (503 "nothing was done": a retryable failure), and stays pending; back up, it succeeds."""
    settings.RECKON_PROVIDER_CIRCUIT_FAILURES, settings.RECKON_PROVIDER_CIRCUIT_COOLDOWN_S = 1, 0.2
    BUDGET.forget()
    provider.request("PUT", "/_admin/faults", {"rates": {"error_5xx": 1.0}})
    make_job("rot-1", action="vault.rotate_credential", payload={"name": "db-primary"})
    assert runtime.run_job("rot-1") == "failed"  # attempt 1, counted: it opens the circuit
    for _ in range(5):  # each cool-down over, the job is the probe, and the vault is still down
        wait_until(lambda: BUDGET.would_probe("vault"), timeout=10, what="the cool-down to end")
        assert runtime.run_job("rot-1") == "failed"
    job = Job.objects.get(job_id="rot-1")
    assert job.status == "pending" and latest_attempt("rot-1").number == 7  # 3 allowed; the probes were free
    notes = list(job.events.filter(kind="attempt_opened").values_list("note", flat=True))
    assert sum("was the provider's circuit probe: not counted" in note for note in notes) == 5
    provider.request("PUT", "/_admin/faults", {"rates": {}})
    wait_until(lambda: BUDGET.would_probe("vault"), timeout=10, what="the cool-down to end")
    assert runtime.run_job("rot-1") == "succeeded"
    assert provider.effects(marker="vault.rotate_credential:rot-1")["count"] == 1
