"""The console's smaller defences: pages nobody may cache, job ids without control characters,
and no account pages beyond logging in and out."""

import pytest

from ledger.models import Job, LedgerEvent
from reconciliation import decisions
from tests.console.conftest import htmx, latest_version, make_operator_job, make_unknown_job
from tests.console.test_access import POSTS, READS, RUN_PAGES, _post, job_of

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(db, operator):

    make_unknown_job(job_of("acme"))
    make_operator_job("vault-acme")
    decisions.mark_not_found(
        job_id="vault-acme", version=latest_version("vault-acme"), user=operator, note="none rotated"
    )


def _private(response) -> bool:
    directives = {d.strip() for d in response.get("Cache-Control", "").split(",")}
    return {"private", "no-store"} <= directives


# -- Cache-Control: private, no-store on every console URL ------------------------------------


@pytest.mark.parametrize("name", list(READS))
def test_every_read_url_is_private_and_not_stored(client, world, admin_user, name):
    url = READS[name][0].format(job=job_of("acme"))
    anonymous = client.get(url)
    assert anonymous.status_code == 302 and _private(anonymous)  # the redirect to log in too
    client.force_login(admin_user)
    for response in (client.get(url), client.get(url, **htmx())):
        assert response.status_code == 200 and _private(response)


@pytest.mark.parametrize("name", POSTS)
def test_every_decision_answer_is_private_and_not_stored(client, world, admin_user, name):
    url, data, _, _ = _post(name, "acme")
    client.force_login(admin_user)
    response = client.post(url, data, **htmx())
    # An alert's acknowledge or silence is a plain form: it redirects back to /alerts/ (PRG).
    assert response.status_code == (302 if name == "alert_act" else 200) and _private(response)


def test_healthz_is_not_stored_either(client):
    assert _private(client.get("/healthz"))


def test_a_bulk_runs_pages_are_private_and_not_stored(client, world, admin_user):
    from console.models import BulkRun

    run = BulkRun.objects.create(user=admin_user, decision="retry_reconciliation", note="again",
                                 filters={"tab": "reconciling"}, total=1)
    client.force_login(admin_user)
    page = client.get(f"/queue/bulk-runs/{run.pk}/")
    step = client.post(f"/queue/bulk-runs/{run.pk}/step/", **htmx())
    assert page.status_code == step.status_code == 200 and _private(page) and _private(step)


def test_every_console_url_is_covered_here():
    from console.urls import urlpatterns

    assert {p.name for p in urlpatterns} == {*READS, *POSTS, *RUN_PAGES, "healthz"}


# -- job ids: control characters answer 404 (a URL) or are ignored (a filter) -------------------

BAD_IDS = ["%00", "a%00b", "%01", "tab%09id", "%7F", "%C2%85", "x" * 201]


@pytest.mark.parametrize("bad", BAD_IDS)
def test_a_job_url_with_an_invalid_id_is_404(client, world, admin_user, bad):
    client.force_login(admin_user)
    assert client.get(f"/jobs/{bad}/").status_code == 404
    events = LedgerEvent.objects.count()
    decision = {"decision": "escalate", "version": 1, "note": "x"}
    assert client.post(f"/jobs/{bad}/decide/", decision).status_code == 404
    assert LedgerEvent.objects.count() == events


def test_a_job_id_of_200_characters_still_has_a_page(client, world, admin_user):
    from tests.conftest import make_job

    make_job("j" * 200)
    client.force_login(admin_user)
    assert client.get(f"/jobs/{'j' * 200}/").status_code == 200


@pytest.mark.parametrize(
    "url",
    [
        "/queue/?q=%00",
        "/queue/?tenant=a%00",
        "/queue/?after=%00",
        "/queue/counts/?tab=%00",
        "/audit/?job=%00",
        "/audit/?key=%01&actor=%00&kind=%00",
        "/audit/?before=%00",
        "/audit/export.csv?job=%00",
        "/audit/admin-export.csv?actor=%00",
    ],
)
def test_control_characters_in_a_filter_are_ignored_not_a_server_error(client, world, admin_user, url):
    client.force_login(admin_user)
    response = client.get(url)
    assert response.status_code == 200
    if response.streaming:
        b"".join(response.streaming_content)  # the export streams: errors would surface here


def test_a_bulk_selection_with_an_invalid_id_reports_it_and_changes_nothing_for_it(client, world, operator):
    client.force_login(operator)
    good = job_of("acme")
    response = client.post(
        "/queue/bulk/",
        {
            "decision": "cancel_job",
            "note": "withdrawn",
            "selected": [f"{latest_version(good)}:{good}", "1:bad\x00id"],
            "confirmed": "on",
        },
        **htmx(),
    )
    html = response.content.decode()
    assert response.status_code == 200
    assert f"{good}: Cancel job recorded" in html and "no job with id &#x27;bad\\x00id&#x27;" in html
    assert Job.objects.get(job_id=good).status == "cancelled"


# -- accounts: logging in and out, nothing else ---------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "/accounts/password_reset/",
        "/accounts/password_reset/done/",
        "/accounts/reset/MQ/set-password/",
        "/accounts/reset/done/",
        "/accounts/password_change/",
        "/accounts/password_change/done/",
    ],
)
def test_password_reset_and_change_pages_do_not_exist(client, admin_user, url):
    assert client.get(url).status_code == 404
    assert client.post(url, {"email": "root@example.com"}).status_code == 404
    client.force_login(admin_user)
    assert client.get(url).status_code == 404


def test_logging_in_and_out_still_works(client, operator):
    assert client.get("/accounts/login/").status_code == 200
    response = client.post("/accounts/login/", {"username": operator.username, "password": "pw-olga"})
    assert response.status_code == 302 and client.get("/").status_code == 200
    response = client.post("/accounts/logout/")
    assert response.status_code == 302 and response["Location"] == "/accounts/login/"
    assert client.get("/").status_code == 302
