"""/metrics: Prometheus text that parses, counts that match the database, and who may read it."""

import re
from collections import Counter

import pytest
from django.test import Client

from ledger import services
from ledger.models import Attempt, Job, LedgerEvent
from tests.conftest import expire_lease, make_job

pytestmark = pytest.mark.django_db

LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*"'
SAMPLE = re.compile(
    rf"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{{(?P<labels>{LABEL}(?:,{LABEL})*)\}})? "
    r"(?P<value>-?[0-9]+(?:\.[0-9]+)?(?:e[+-]?[0-9]+)?)$"
)
UNKNOWN_WORK = {"needs_reconciliation", "needs_operator", "escalated", "awaiting_approval", "blocked"}
TOKEN = "s3cret-metrics-token"
BEARER = {"HTTP_AUTHORIZATION": f"Bearer {TOKEN}"}


@pytest.fixture(autouse=True)
def production(settings):
    """Production rules (DEBUG off, as in every test) with a token configured."""
    settings.DEBUG = False
    settings.RECKON_METRICS_TOKEN = TOKEN


def scrape(client: Client | None = None, *, token: bool = True, **headers) -> dict[tuple, float]:
    response = (client or Client()).get("/metrics", **(BEARER if token else {}), **headers)
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    samples, typed = {}, set()
    for line in response.content.decode().splitlines():
        if line.startswith("# TYPE "):
            typed.add(line.split()[2])
            continue
        if line.startswith("# HELP "):
            continue
        match = SAMPLE.match(line)
        assert match, f"not a Prometheus sample: {line!r}"
        labels = tuple(
            sorted(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', match["labels"] or ""))
        )
        assert match["name"] in typed, f"{match['name']} has no # TYPE line"
        samples[(match["name"], labels)] = float(match["value"])
    return samples


def _workload():
    """A ledger with a job in most states and each counted kind of event."""
    make_job("pending")
    services.claim_job(job_id=make_job("running").job_id, worker="w")
    done = services.claim_job(job_id=make_job("done").job_id, worker="w")
    services.begin_side_effect(lease=done)
    services.record_success(lease=done, result_ref="r")
    lost = services.claim_job(job_id=make_job("lost").job_id, worker="w")
    services.begin_side_effect(lease=lost)
    services.record_unknown(lease=lost, reason="reset")
    with pytest.raises(services.ClaimRefused):
        services.claim_job(job_id="running", worker="w-2")  # duplicate delivery
    slow = services.claim_job(job_id=make_job("slow").job_id, worker="slow")
    expire_lease("slow")
    services.sweep_expired_leases()  # reclaimed
    with pytest.raises(services.StaleLease):
        services.begin_side_effect(lease=slow)  # late write
    stuck = services.claim_job(job_id=make_job("stuck").job_id, worker="w")
    services.begin_side_effect(lease=stuck)
    expire_lease("stuck")
    services.sweep_expired_leases()  # lease expired after submit -> unknown


def test_it_parses_and_every_count_matches_the_database():
    _workload()
    samples = scrape()
    for status in ("pending", "running", "succeeded", "needs_reconciliation", "failed", "cancelled"):
        assert samples[("reckon_jobs", (("status", status),))] == Job.objects.filter(status=status).count()
    for ledger, field in (
        ("delivery", "delivery_state"),
        ("execution", "execution_state"),
        ("side_effect", "side_effect_state"),
    ):
        expected = Counter(getattr(a, field) for a in Attempt.objects.all())
        got = {
            dict(labels)["state"]: v
            for (name, labels), v in samples.items()
            if name == f"reckon_attempts_by_{ledger}"
        }
        assert got == {state: float(expected.get(state, 0)) for state in got}
        assert sum(got.values()) == Attempt.objects.count()
    unknown = [j for j in Job.objects.all() if j.status in UNKNOWN_WORK]
    assert samples[("reckon_unknown_work_jobs", ())] == len(unknown) == 2
    assert samples[("reckon_unknown_work_oldest_age_seconds", ())] >= 0
    kinds = Counter(LedgerEvent.objects.values_list("kind", flat=True))
    assert samples[("reckon_late_writes_rejected_total", ())] == kinds["late_write_rejected"] == 1
    assert samples[("reckon_duplicate_deliveries_total", ())] == kinds["duplicate_delivery"] == 1
    assert samples[("reckon_claims_refused_total", ())] == sum(Job.objects.values_list("claims_refused", flat=True))
    assert (
        samples[("reckon_lease_expiries_total", (("outcome", "reclaimed"),))]
        == kinds["lease_expired_reclaimed"]
        == 1
    )
    assert (
        samples[("reckon_lease_expiries_total", (("outcome", "unknown"),))]
        == kinds["lease_expired_unknown"]
        == 1
    )


def test_it_reports_reconciliation_and_approvals_when_their_tables_exist():
    from approvals.models import ApprovalRequest
    from reconciliation.models import ReconciliationCheck

    samples = scrape()
    for outcome in ("confirmed", "not_found", "conflict", "unavailable"):
        assert samples[("reckon_reconciliation_checks_total", (("outcome", outcome),))] == (
            ReconciliationCheck.objects.filter(outcome=outcome).count()
        )
    assert (
        samples[("reckon_approvals_pending", ())] == ApprovalRequest.objects.filter(status="pending").count()
    )


def test_it_works_without_the_reconciliation_and_approvals_apps(settings):
    settings.INSTALLED_APPS = [a for a in settings.INSTALLED_APPS if a not in ("reconciliation", "approvals")]
    names = {name for name, _ in scrape()}
    assert "reckon_jobs" in names
    assert not names & {"reckon_reconciliation_checks_total", "reckon_approvals_pending"}


def test_it_is_one_query_per_family(django_assert_max_num_queries):
    _workload()
    with django_assert_max_num_queries(
        18
    ):  # jobs, 3 attempt ledgers, unknown work, events, job counters, tokens' refused answers,
    # 2 optional (+savepoints), oldest approval, the loops' last passes, the recovery window and its held jobs
    # (the dead-man gate adds two more when it is enabled; these tests disable it)
        scrape()


def _refused(response, reason: str) -> None:
    assert response.status_code == 403
    assert reason in response.content.decode()


def test_the_token_is_required_in_production():
    _refused(Client().get("/metrics"), "metrics need the bearer token")  # from the host itself
    _refused(Client().get("/metrics", HTTP_AUTHORIZATION="Bearer wrong"), "metrics need the bearer token")
    _refused(Client().get("/metrics", HTTP_AUTHORIZATION=f"Basic {TOKEN}"), "metrics need the bearer token")
    assert scrape()


def test_without_a_configured_token_production_keeps_it_closed(settings):
    settings.RECKON_METRICS_TOKEN = ""
    _refused(Client().get("/metrics"), "RECKON_METRICS_TOKEN is not set")
    _refused(Client().get("/metrics", HTTP_AUTHORIZATION="Bearer "), "RECKON_METRICS_TOKEN is not set")


def test_an_address_outside_the_allow_list_is_refused_even_with_the_token():
    _refused(Client(REMOTE_ADDR="10.1.2.3").get("/metrics", **BEARER), "not served to this address")


def test_the_allow_list_takes_networks(settings):
    settings.RECKON_METRICS_ALLOW = ["10.0.0.0/8"]
    assert scrape(Client(REMOTE_ADDR="10.1.2.3"))
    _refused(Client().get("/metrics", **BEARER), "not served to this address")


def test_in_debug_the_token_or_an_allowed_address_is_enough(settings):
    settings.DEBUG = True
    assert scrape(Client(), token=False)  # an allowed address, no token
    remote = Client(REMOTE_ADDR="10.1.2.3")
    _refused(remote.get("/metrics"), "RECKON_METRICS_ALLOW")
    _refused(remote.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong"), "RECKON_METRICS_ALLOW")
    assert scrape(remote)  # the token opens it from anywhere


def test_the_allow_list_sees_the_client_behind_a_trusted_proxy(settings):
    settings.RECKON_TRUSTED_PROXIES = ["10.0.0.2"]
    settings.RECKON_METRICS_ALLOW = ["192.0.2.0/24"]
    proxy = Client(REMOTE_ADDR="10.0.0.2")
    assert scrape(proxy, HTTP_X_FORWARDED_FOR="198.51.100.1, 192.0.2.9")
    _refused(proxy.get("/metrics", HTTP_X_FORWARDED_FOR="192.0.2.9, 198.51.100.1", **BEARER), "this address")
    _refused(proxy.get("/metrics", **BEARER), "this address")  # the proxy itself is not allowed
    # From a peer that is not a trusted proxy the header is ignored.
    forged = Client(REMOTE_ADDR="198.51.100.1").get("/metrics", HTTP_X_FORWARDED_FOR="192.0.2.9", **BEARER)
    _refused(forged, "this address")


@pytest.mark.parametrize("method", ["post", "put", "delete"])
def test_writes_get_405_not_a_csrf_page(method):
    response = getattr(Client(enforce_csrf_checks=True), method)("/metrics", **BEARER)
    assert response.status_code == 405
    assert response["Allow"] == "GET"
