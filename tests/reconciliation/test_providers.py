"""Respecting providers: the reconciler keeps under a provider's rate limit and comes back up when
it lifts, a 429 proves nothing and costs no look, and a downed provider opens its own circuit
without slowing the others. Against real sandbox processes."""

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from chaos.world import wait_until
from ledger.budget import BUDGET
from ledger.models import Job, LedgerEvent
from ledger.providers import call
from reconciliation.models import ProviderState
from reconciliation.passes import reconcile_until_idle
from sandbox.testing import SandboxProcess
from tests.reconciliation.helpers import INVOICE, MAIL, assert_ledger_clean, unknown_job

pytestmark = pytest.mark.django_db

LIMIT = 20


def state_of(name: str) -> dict:
    return next(row for row in BUDGET.snapshot() if row["provider"] == name)


def unresolved(prefix: str) -> int:
    return Job.objects.filter(job_id__startswith=prefix, status="needs_reconciliation").count()


def drain(prefix: str, *, timeout: float) -> None:
    """Run passes until every job of `prefix` is resolved (deferred jobs come due on their own)."""
    wait_until(lambda: (reconcile_until_idle(concurrency=8), unresolved(prefix) == 0)[1], timeout=timeout,
               what=f"the {prefix} jobs to be reconciled")


def limit_counts(sandbox) -> tuple[int, int]:
    counts = sandbox.request("GET", "/_admin/rate_limits").json
    return counts["allowed"].get("/messages", 0), counts["refused"].get("/messages", 0)


def test_the_reconciler_keeps_under_the_limit_and_a_429_costs_no_look(provider, settings):
    provider.set_rate_limits({"/messages": LIMIT})
    for n in range(60):
        unknown_job(f"a-{n}", "mail.send", MAIL)
    drain("a-", timeout=60)
    allowed, refused = limit_counts(provider)
    assert allowed == 60  # one look per job got through, and each settled its job
    assert 0 < refused <= 15, refused  # learning the limit costs a few 429s, once
    assert state_of("mail")["state"] == "throttled" and state_of("mail")["rate"] <= LIMIT * 1.1
    # A refused look proved nothing and did not count towards RECKON_RECONCILE_MAX_CHECKS.
    not_counted = LedgerEvent.objects.filter(job__job_id__startswith="a-", kind="reconciliation_unavailable")
    assert all(e.evidence["not_counted"] for e in not_counted)
    # Each 429 is one such event; the others are looks the budget held back (never sent), more of
    # them the slower the machine runs the pass.
    assert sum("429" in e.note for e in not_counted) == refused
    assert all("not sent" in e.note for e in not_counted if "429" not in e.note)
    assert set(Job.objects.filter(job_id__startswith="a-").values_list("check_count", flat=True)) == {0}
    # Having learned the limit, the next backlog stays under it.
    for n in range(60):
        unknown_job(f"b-{n}", "mail.send", MAIL)
    drain("b-", timeout=60)
    assert limit_counts(provider)[1] - refused <= 2, limit_counts(provider)
    assert_ledger_clean()


def test_the_pace_comes_back_up_when_the_limit_lifts(provider, settings):
    settings.RECKON_PROVIDER_RECOVER_S = 3.0  # how fast the pace climbs once no 429 comes
    provider.set_rate_limits({"/messages": LIMIT})
    url, stop = f"{provider.url}/messages?marker=x", threading.Event()

    def caller():
        while not stop.is_set():
            call("GET", url, provider="mail")

    callers = [threading.Thread(target=caller) for _ in range(4)]
    for thread in callers:
        thread.start()
    try:
        wait_until(lambda: state_of("mail")["state"] == "throttled", timeout=10, what="a 429")
        allowed_before = limit_counts(provider)[0]
        provider.set_rate_limits({})
        wait_until(lambda: state_of("mail")["state"] == "ok", timeout=30, what="the pace to come back up")
    finally:
        stop.set()
        for thread in callers:
            thread.join(timeout=10)
    assert allowed_before > 0 and state_of("mail")["rate"] is None


@pytest.fixture
def mail_provider(settings):
    """A second provider process, for mail alone (the `provider` fixture's sandbox keeps billing)."""
    with SandboxProcess() as process:
        settings.RECKON_MAIL_URL = process.url
        yield process


def test_a_downed_provider_opens_its_circuit_and_the_others_go_on(provider, mail_provider, settings, client,
                                                                   operator):
    settings.RECKON_PROVIDER_CIRCUIT_FAILURES = 3
    settings.RECKON_PROVIDER_CIRCUIT_COOLDOWN_S = 1.0
    for n in range(12):
        unknown_job(f"m-{n}", "mail.send", MAIL)
    for n in range(4):
        unknown_job(f"i-{n}", "billing.create_invoice", {**INVOICE, "customer": f"cus_{n}"})
    mail_provider.stop(cleanup=False)

    decisions = {d.job_id: d for d in reconcile_until_idle(limit=50, concurrency=2)}
    # Billing is not held up: every invoice job was settled in the same pass.
    assert {decisions[f"i-{n}"].applied for n in range(4)} == {"replayed"}
    assert unresolved("i-") == 0
    # Mail: a few looks failed and counted, then the circuit opened and the rest were not asked.
    counted = Job.objects.filter(job_id__startswith="m-", check_count=1).count()
    assert 3 <= counted <= 3 + 2  # the threshold, plus lookups already under way when it opened
    not_asked = [d for d in decisions.values() if d.applied.startswith("not asked")]
    assert len(not_asked) == 12 - counted and all("circuit open" in d.note for d in not_asked)
    assert state_of("mail")["state"] == "open" and state_of("billing")["state"] == "ok"
    published = ProviderState.objects.get(provider="mail")
    assert published.state == "open" and published.open_until is not None
    client.force_login(operator)
    page = client.get("/").content.decode()
    assert 'data-provider="mail" data-provider-state="open"' in page and "circuit open" in page

    mail_provider.start()  # back on the same port
    drain("m-", timeout=30)  # a probe after the cool-down closes the circuit; the deferred jobs follow
    assert state_of("mail")["state"] == "ok"
    assert ProviderState.objects.get(provider="mail").state == "ok"
    assert 'data-provider="mail" data-provider-state="ok"' in client.get("/").content.decode()
    assert set(Job.objects.filter(job_id__startswith="m-").values_list("check_count", flat=True)) <= {0, 1}
    assert_ledger_clean()


def test_a_known_limit_caps_each_process_and_no_429_comes(provider, settings):
    settings.RECKON_PROVIDER_LIMITS = {"mail": float(LIMIT)}  # this process's share of the provider's limit
    provider.set_rate_limits({"/messages": LIMIT})
    url = f"{provider.url}/messages?marker=x"
    started = time.monotonic()
    with ThreadPoolExecutor(4) as pool:
        statuses = list(pool.map(lambda _: call("GET", url, provider="mail").status, range(40)))
    elapsed = time.monotonic() - started
    assert statuses == [200] * 40 and limit_counts(provider)[1] == 0
    assert elapsed >= 39 / LIMIT * 0.95  # paced at the cap from the first call
    assert state_of("mail")["state"] == "ok" and state_of("mail")["rate"] == LIMIT
