import pytest

from reconciliation import decisions
from tests.alerts.test_evaluate import database_created_ago
from tests.conftest import make_job

pytestmark = pytest.mark.django_db


def test_it_requires_login(client):
    response = client.get("/")
    assert response.status_code == 302
    assert response["Location"] == "/accounts/login/?next=/"


def test_it_shows_counts_of_jobs_by_status(client, auditor):
    make_job("a")
    make_job("b")
    from ledger import services

    services.claim_job(job_id="b", worker="w")
    client.force_login(auditor)
    response = client.get("/")
    assert response.status_code == 200
    html = response.content.decode()
    assert 'data-status="pending">1<' in html
    assert 'data-status="running">1<' in html
    assert 'data-status="succeeded">0<' in html
    assert "2 in all" in html


def test_healthz_answers_without_login(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"ok": True, "database": "ok"}


def test_the_login_page_logs_a_demo_user_in(client):
    from sandbox.demo_users import ensure_demo_users

    ensure_demo_users()
    page = client.get("/accounts/login/")
    assert page.status_code == 200 and b'name="username"' in page.content
    response = client.post("/accounts/login/", {"username": "operator", "password": "operator-demo-pw"})
    assert response.status_code == 302 and response["Location"] == "/"
    assert client.get("/").status_code == 200


def test_a_wrong_password_is_refused_with_a_message(client):
    from sandbox.demo_users import ensure_demo_users

    ensure_demo_users()
    response = client.post("/accounts/login/", {"username": "operator", "password": "nope"})
    assert response.status_code == 200
    assert b"didn't match" in response.content


def test_it_puts_delivery_capacity_beside_workflow_correctness(client, operator):
    from ledger import services
    from tests.console.conftest import latest_version, make_operator_job, make_unknown_job

    make_unknown_job("inv-1")
    make_operator_job("vault-1")
    make_operator_job("vault-2")
    decisions.mark_not_found(job_id="vault-2", version=latest_version("vault-2"), user=operator, note="none")
    make_job("running")
    lease = services.claim_job(job_id="running", worker="w1")
    services.renew_lease(lease=lease)
    client.force_login(operator)
    html = client.get("/").content.decode()
    assert 'data-figure="busy_workers">1<' in html
    assert 'data-figure="unknown_total">3<' in html
    assert 'data-figure="waiting_for_operator">2<' in html  # the "Needs a human" tab: vault-1, vault-2
    assert 'data-figure="blocked">0<' in html
    assert 'data-figure="pending_approvals">1<' in html
    assert 'data-outcome="unavailable">' in html  # vault cannot be queried: recorded as a check
    assert 'data-figure="late_writes_total">0<' in html
    assert 'data-figure="queue_depth">0<' in html
    assert "min ago" in html or "just now" in html


def test_it_refreshes_itself_as_a_partial(client, auditor):
    client.force_login(auditor)
    html = client.get("/", HTTP_HX_REQUEST="true").content.decode()
    assert html.lstrip().startswith('<div id="overview-live"') and 'hx-trigger="every 5s"' in html
    assert "<html" not in html


# -- the dead-man gate and the duplicate-delivery rate ----------------------------------------


@pytest.fixture
def gate_on(settings):
    settings.RECKON_GATE_BOUND_S = 30


def test_a_closed_gate_shows_a_red_banner_with_the_reason_and_the_last_passes(client, auditor, gate_on):
    from ledger.gate import record_pass
    from ledger.models import PassRecord

    record_pass("sweeper")  # the reconciler has stalled: it never completed a pass
    swept_at = PassRecord.objects.get(name="sweeper").completed_at
    client.force_login(auditor)
    html = client.get("/").content.decode()
    assert '<section class="gate-banner" role="alert"' in html
    assert "Dead-man gate closed" in html
    assert (
        "the reconciler has not completed a pass yet (bound 30 s): irreversible side effects are held" in html
    )
    assert f'data-last-pass="sweeper"><time datetime="{swept_at.isoformat()}"' in html
    assert 'data-last-pass="reconciler">never</dd>' in html


def test_the_banner_is_in_the_refreshing_region(client, auditor, gate_on):
    database_created_ago(3600)  # no loop has passed in an hour: not a first start
    client.force_login(auditor)
    html = client.get("/", HTTP_HX_REQUEST="true").content.decode()
    assert html.lstrip().startswith('<div id="overview-live"') and 'role="alert"' in html


def test_a_fresh_database_says_it_is_starting_instead_of_a_red_banner(client, auditor, gate_on):
    database_created_ago(5)  # the first start: the loops have not had time for a pass
    client.force_login(auditor)
    html = client.get("/").content.decode()
    assert 'data-gate="starting">Reckon is starting' in html and "gate-banner" not in html
    database_created_ago(31)  # past the bound with still no pass: a real stop
    assert '<section class="gate-banner" role="alert"' in client.get("/").content.decode()


@pytest.mark.parametrize("bound", [30, 0])
def test_an_open_or_disabled_gate_shows_nothing(client, auditor, settings, bound):
    from ledger.gate import record_pass

    settings.RECKON_GATE_BOUND_S = bound
    record_pass("sweeper")
    record_pass("reconciler")
    client.force_login(auditor)
    html = client.get("/").content.decode()
    assert "gate-banner" not in html and 'role="alert"' not in html


def test_it_shows_the_rate_of_duplicate_deliveries(client, auditor):
    from ledger import services

    make_job("a")
    make_job("b")
    services.claim_job(job_id="a", worker="w1")
    services.claim_job(job_id="b", worker="w1")
    for worker in ("w2", "w3", "w2"):  # redeliveries while the lease is live: refused and counted
        with pytest.raises(services.ClaimRefused):
            services.claim_job(job_id="a", worker=worker)
    client.force_login(auditor)
    html = client.get("/").content.decode()
    # The history keeps one refusal per worker and attempt (w2's second is counted on the job only).
    assert 'data-figure="duplicates_recent">2<' in html
    assert 'data-figure="duplicates_per_claim">1.00 <span class="muted figure-detail">(2 of 2)</span>' in html


def test_without_claims_there_is_no_rate(client, auditor):
    client.force_login(auditor)
    html = client.get("/").content.decode()
    assert 'data-figure="duplicates_recent">0<' in html
    assert 'data-figure="duplicates_per_claim"><span class="muted">no claims</span>' in html
