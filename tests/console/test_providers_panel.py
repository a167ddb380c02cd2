"""The overview's providers panel: every provider called recently, with its calls in the last
minute, whatever its state; the figures come from real worker calls to the sandbox."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from ledger import runtime
from ledger.budget import BUDGET
from reconciliation import providers
from reconciliation.models import ProviderState
from tests.conftest import make_job
from tests.console.conftest import htmx

pytestmark = pytest.mark.django_db

MAIL = {"to": "ann@example.com", "subject": "Hi", "body": "Hello"}
INVOICE = {"customer": "cus_1", "amount_cents": 1200, "currency": "EUR"}


def _calls(html: str) -> dict[str, tuple[str, int]]:
    """provider -> (state, calls in the last minute), as the panel shows them."""
    return {name: (state, int(calls)) for name, state, calls in re.findall(
        r'<tr data-provider="([^"]+)" data-provider-state="([^"]+)">.*?data-provider-calls="(\d+)"', html, re.S)}


@pytest.fixture
def publish_every_call(monkeypatch):
    """Each call's figures are published at once (REPUBLISH_S spaces them in production)."""
    monkeypatch.setattr(providers, "REPUBLISH_S", 0.0)


def test_every_provider_called_recently_is_shown_with_its_calls(client, operator, provider, publish_every_call):
    client.force_login(operator)
    assert "No provider has been called in the last 5 minutes." in client.get("/").content.decode()
    for n in range(30):
        make_job(f"m-{n}", action="mail.send", payload=MAIL)
        assert runtime.run_job(f"m-{n}") == "succeeded"
    for n in range(4):
        make_job(f"i-{n}", action="billing.create_invoice", payload={**INVOICE, "customer": f"cus_{n}"})
        assert runtime.run_job(f"i-{n}") == "succeeded"
    # Nothing changed state (no 429, no circuit): both are there, with their calls.
    assert set(ProviderState.objects.values_list("state", flat=True)) == {"ok"}
    html = client.get("/", **htmx()).content.decode()  # the overview's live refresh
    assert _calls(html) == {"billing": ("ok", 4), "mail": ("ok", 30)}
    assert "30 in the last minute" in html and "(0.5/s)" in html
    assert "No provider has been called" not in html


def test_a_process_silent_for_over_a_minute_adds_no_calls_but_is_still_listed(client, operator):
    now = timezone.now()
    ProviderState.objects.create(provider="mail", process="host:1", state="ok", calls_last_minute=40,
                                 updated_at=now - timedelta(seconds=2))
    ProviderState.objects.create(provider="mail", process="host:2", state="ok", calls_last_minute=99,
                                 updated_at=now - timedelta(minutes=2))  # its last minute is long gone
    ProviderState.objects.create(provider="publish", process="host:2", state="ok", calls_last_minute=7,
                                 updated_at=now - timedelta(minutes=3))
    ProviderState.objects.create(provider="vault", process="host:3", state="ok", calls_last_minute=5,
                                 updated_at=now - timedelta(minutes=6))  # not heard from in 5 minutes
    client.force_login(operator)
    html = client.get("/").content.decode()
    assert _calls(html) == {"mail": ("ok", 40), "publish": ("ok", 0)}
    assert "none in the last minute" in html


def test_a_provider_whose_calls_mostly_fail_is_shown_failing_though_its_circuit_stays_closed(
        client, operator, provider, settings, publish_every_call):
    settings.RECKON_PROVIDER_CIRCUIT_FAILURES = 100  # never four in a row here: the circuit stays closed
    BUDGET.forget()
    outcomes = []
    for n in range(10):
        # Nine answers of ten fail (a 503 that says nothing was done), one in ten succeeds.
        provider.request("PUT", "/_admin/faults", {"rates": {"error_5xx": 0.0 if n % 10 == 9 else 1.0}})
        make_job(f"i-{n}", action="billing.create_invoice", payload={**INVOICE, "customer": f"cus_{n}"})
        outcomes.append(runtime.run_job(f"i-{n}"))
    assert outcomes.count("succeeded") == 1
    [line] = [row for row in BUDGET.snapshot() if row["provider"] == "billing"]
    assert line["state"] == "failing" and line["open_for_s"] is None
    client.force_login(operator)
    html = client.get("/").content.decode()
    assert _calls(html)["billing"][0] == "failing"
    assert "9 of the last minute&#x27;s 10 calls failed; last: answered 503" in html \
        or "9 of the last minute's 10 calls failed; last: answered 503" in html
