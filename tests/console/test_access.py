"""The access matrix: every console URL, GET and POST, for every persona, on a job inside and a
job outside the persona's tenants.

Two tenants: the personas with a role are fenced to `acme`; `globex` is outside their fence.
Only the superuser sees both; an operator without a tenant scope sees neither.
"""

import csv
import io
import re

import pytest
from django.contrib.auth.models import User
from django.db import transaction
from django.test import override_settings

from alerts.models import AlertCondition, AlertEvent, AlertState
from approvals.models import ApprovalRequest
from ledger.models import Job, LedgerEvent
from reconciliation import decisions
from tests.conftest import TEST_SETTINGS, _persona
from tests.console.conftest import htmx, latest_version, make_operator_job, make_unknown_job, with_tenants

pytestmark = pytest.mark.django_db

OK, LOGIN, FORBIDDEN, NOT_FOUND, NOT_ALLOWED = 200, "login", 403, 404, 405

PERSONAS = ("anonymous", "nobody", "auditor", "operator", "approver", "unscoped_operator", "admin_user")
FENCED = ("nobody", "auditor", "operator", "approver")  # scoped to acme
INSIDE, OUTSIDE = "acme", "globex"
# Each tenant's jobs waiting for reconciliation: one for acme, two for globex, so a count on a
# page says whose jobs it counted (1: acme's, 2: globex's, 3: both).
WEIGHT = {INSIDE: 1, OUTSIDE: 2}


def job_of(tenant: str) -> str:
    return f"inv-{tenant}"


@pytest.fixture(scope="module")
def shared_world(django_db_setup, django_db_blocker):
    """The jobs, made once for the module's 300 tests inside a transaction that is rolled back after
    the last of them: each test's own transaction is a savepoint within it, so whatever a test
    changes is gone before the next one starts (making them for each test took 0.4 s of its setup)."""
    with django_db_blocker.unblock(), override_settings(**TEST_SETTINGS), transaction.atomic():
        requester = with_tenants(_persona("requester", "operators"))
        for tenant, weight in WEIGHT.items():
            for n in range(weight):
                make_unknown_job(job_of(tenant) + (f"-{n}" if n else ""), tenant=tenant)
            vault = f"vault-{tenant}"
            make_operator_job(vault, tenant=tenant)
            decisions.mark_not_found(job_id=vault, version=latest_version(vault), user=requester,
                                     note="none rotated")
        yield
        transaction.set_rollback(True)


@pytest.fixture
def world(shared_world, db):
    """Each tenant's unknown jobs and a job an operator marked not found, as the module made them."""


@pytest.fixture
def user_of(request):
    def user_of(persona):
        if persona == "anonymous":
            return None
        if persona == "nobody":
            return with_tenants(User.objects.create_user("nobody", password="pw"), INSIDE)
        if persona == "unscoped_operator":
            return _persona("unscoped", "operators")
        user = request.getfixturevalue(persona)
        return user if persona == "admin_user" else with_tenants(user, INSIDE)

    return user_of


def sees(persona: str, tenant: str) -> bool:
    return persona == "admin_user" or (persona in FENCED and tenant == INSIDE)


def _count(pattern: str):
    def tenants_counted(body: str, tenant: str) -> set[str]:
        total = int(re.search(pattern, body).group(1))
        return {t for t, weight in WEIGHT.items() if total & weight}

    return tenants_counted


def _text(template: str):
    def tenants_shown(body: str, tenant: str) -> set[str]:
        return {t for t in WEIGHT if template.format(job=job_of(t), tenant=t) in body}

    return tenants_shown


def _csv_jobs(body: str, tenant: str) -> set[str]:
    job_ids = {row["job_id"] for row in csv.DictReader(io.StringIO(body))}
    return {t for t in WEIGHT if job_of(t) in job_ids}


def _this_job(body: str, tenant: str) -> set[str]:
    return {tenant}


# url, and how to tell from a 200 response which tenants' jobs it shows.
READS = {
    "overview": ("/", _count(r'data-unknown="needs_reconciliation">(\d+)<')),
    "queue": ("/queue/?tab=reconciling", _text('<tr data-job="{job}">')),
    "queue_counts": ("/queue/counts/", _count(r'data-count="needs_reconciliation">(\d+)<')),
    "job_detail": ("/jobs/{job}/", _this_job),
    "approvals": ("/approvals/", _text(">vault-{tenant}</a>")),
    "audit": ("/audit/", _text(">{job}</a>")),
    "audit_export": ("/audit/export.csv", _csv_jobs),
    "admin_audit_export": ("/audit/admin-export.csv", None),
    "search": ("/search/?q=INV-", _text('<tr data-job="{job}">')),
    # Counts the sampling schedule records: their fence is tested in test_overview_charts.py.
    "overview_charts": ("/overview/charts/", None),
    # Per tenant counts: their fence is tested in tests/alerts/test_page.py.
    "alerts": ("/alerts/", None),
    # A person's own events: tests/console/test_shift_page.py.
    "shift": ("/shift/", None),
}


def _body(response) -> str:
    return (b"".join(response.streaming_content) if response.streaming else response.content).decode()


def _expected_status(persona: str, name: str, tenant: str):
    if persona == "anonymous":
        return LOGIN
    if persona == "nobody":
        return FORBIDDEN
    if name == "job_detail" and not sees(persona, tenant):
        return NOT_FOUND  # exactly as a missing job
    if name == "admin_audit_export" and persona != "admin_user":
        return FORBIDDEN  # changes to people span every tenant
    return OK


@pytest.mark.parametrize("tenant", [INSIDE, OUTSIDE])
@pytest.mark.parametrize("persona", PERSONAS)
@pytest.mark.parametrize("name", READS)
def test_reading(client, world, user_of, persona, name, tenant):
    url, shown = READS[name]
    user = user_of(persona)
    if user:
        client.force_login(user)
    response = client.get(url.format(job=job_of(tenant)))
    expected = _expected_status(persona, name, tenant)
    if expected == LOGIN:
        assert response.status_code == 302 and response["Location"].startswith("/accounts/login/?next=")
        return
    assert response.status_code == expected
    if expected == OK and shown is not None:
        assert (tenant in shown(_body(response), tenant)) == sees(persona, tenant)


def test_a_missing_job_and_a_job_outside_the_fence_answer_alike(client, world, user_of):
    client.force_login(user_of("auditor"))
    outside, missing = client.get(f"/jobs/{job_of(OUTSIDE)}/"), client.get("/jobs/no-such-job/")
    assert outside.status_code == missing.status_code == 404
    assert _without_csrf_tokens(outside.content.replace(job_of(OUTSIDE).encode(), b"X")) == _without_csrf_tokens(
        missing.content.replace(b"no-such-job", b"X")
    )


def _without_csrf_tokens(html: bytes) -> bytes:
    """The 404 page has the console's layout, whose CSRF token is masked anew for every response."""
    return re.sub(rb'(name="csrfmiddlewaretoken" value="|"X-CSRFToken": ")[^"]+', rb"\1", html)


@pytest.mark.parametrize("url", ["/", "/queue/", "/approvals/", "/audit/"])
def test_a_user_without_tenants_is_told_so(client, world, user_of, url):
    client.force_login(user_of("unscoped_operator"))
    assert "You have no tenants assigned" in client.get(url).content.decode()
    client.force_login(user_of("operator"))
    assert "You have no tenants assigned" not in client.get(url).content.decode()


@pytest.mark.parametrize("name", [n for n, (url, _) in READS.items() if not url.endswith(".csv")])
def test_an_anonymous_htmx_request_is_sent_to_login_as_a_client_redirect(client, world, name):
    response = client.get(READS[name][0].format(job=job_of(INSIDE)), **htmx())
    assert response.status_code == 200
    assert response["HX-Redirect"].startswith("/accounts/login/?next=")


# -- changing things -------------------------------------------------------------------------


def _request_of(tenant: str) -> ApprovalRequest:
    return ApprovalRequest.objects.get(job__job_id=f"vault-{tenant}")


def _post(name: str, tenant: str):
    """url, data, the role that may post it, and a probe of the state the post would change."""
    job = job_of(tenant)
    if name == "job_decide":
        data = {"decision": "escalate", "version": latest_version(job), "note": "looking"}
        return f"/jobs/{job}/decide/", data, "operator", lambda: LedgerEvent.objects.filter(job__job_id=job).count()
    if name == "queue_bulk":
        # The second, confirmed step: the first only asks (tests/console/test_triage_confirm.py).
        data = {"decision": "retry_reconciliation", "note": "again", "selected": f"{latest_version(job)}:{job}",
                "confirmed": "on"}
        return "/queue/bulk/", data, "operator", lambda: LedgerEvent.objects.filter(job__job_id=job).count()
    if name == "job_hold":
        return f"/jobs/{job}/hold/", {"hold": "take"}, "operator", lambda: Job.objects.get(job_id=job).holder
    if name == "alert_act":  # an alert speaks for every tenant: only an operator of all of them
        # Only a firing alert has an incident to silence (issue 44): this one fires.
        AlertState.objects.update_or_create(condition=AlertCondition.UNKNOWN_TOO_OLD, defaults={"firing": True})
        return ("/alerts/unknown_too_old/act/", {"action": "silence", "hours": "1", "note": "maintenance"}, (),
                lambda: AlertEvent.objects.count())
    if name == "job_comment":  # operators and approvers alike
        return (f"/jobs/{job}/comment/", {"comment": "seen"}, ("operator", "approver"),
                lambda: LedgerEvent.objects.filter(job__job_id=job).count())
    request = _request_of(tenant)
    if name == "approvals_bulk":  # the second, confirmed step, as for the queue's
        return ("/approvals/bulk/", {"decision": "reject", "note": "no", "selected": request.pk, "confirmed": "on"},
                "approver", lambda: ApprovalRequest.objects.get(pk=request.pk).status)
    data = {"decision": "reject", "note": "no"}
    return (
        f"/approvals/{request.pk}/decide/",
        data,
        "approver",
        lambda: ApprovalRequest.objects.get(pk=request.pk).status,
    )


POSTS = ("job_decide", "job_hold", "job_comment", "queue_bulk", "approval_decide", "approvals_bulk", "alert_act")


@pytest.mark.parametrize("tenant", [INSIDE, OUTSIDE])
@pytest.mark.parametrize("persona", PERSONAS)
@pytest.mark.parametrize("name", POSTS)
def test_changing_things(client, world, user_of, persona, name, tenant):
    url, data, role, state = _post(name, tenant)
    before = state()
    user = user_of(persona)
    if user:
        client.force_login(user)
    response = client.post(url, data)
    roles = role if isinstance(role, tuple) else (role,)
    allowed = persona in (*roles, "admin_user") or (persona == "unscoped_operator" and "operator" in roles)
    if persona == "anonymous":
        assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
    elif not allowed:
        assert response.status_code == 403
    elif not sees(persona, tenant):
        # Outside the fence the job (or its request) does not exist: nothing changes. The bulk
        # action answers for the whole selection and reports the job as missing.
        assert response.status_code == (302 if name in ("queue_bulk", "approvals_bulk") else 404)
        if name == "queue_bulk":
            page = client.get(response["Location"]).content.decode()
            assert f"no job with id &#x27;{job_of(tenant)}&#x27;" in page
    else:  # the right role on a job it sees, or a superuser: it goes through and redirects back (PRG)
        assert response.status_code == 302, response.content[:500]
    assert (state() != before) == (allowed and sees(persona, tenant))


def test_a_bulk_selection_across_the_fence_changes_only_the_jobs_inside(client, world, user_of):
    client.force_login(user_of("operator"))
    inside, outside = job_of(INSIDE), job_of(OUTSIDE)
    response = client.post(
        "/queue/bulk/",
        {
            "decision": "cancel_job",
            "note": "customer withdrew",
            "selected": [f"{latest_version(j)}:{j}" for j in (inside, outside)],
            "tab": "reconciling",
            "confirmed": "on",
        },
        **htmx(),
    )
    html = response.content.decode()
    assert f"{inside}: Cancel job recorded" in html
    assert f"no job with id &#x27;{outside}&#x27;" in html
    assert Job.objects.get(job_id=inside).status == "cancelled"
    assert Job.objects.get(job_id=outside).status == "needs_reconciliation"
    assert not LedgerEvent.objects.filter(job__job_id=outside, kind="operator_cancelled").exists()


@pytest.mark.parametrize("name", list(READS))
def test_read_pages_refuse_post(client, world, admin_user, name):
    client.force_login(admin_user)
    assert client.post(READS[name][0].format(job=job_of(INSIDE))).status_code == NOT_ALLOWED


@pytest.mark.parametrize("name", POSTS)
def test_decisions_refuse_get(client, world, admin_user, name):
    url, _, _, _ = _post(name, INSIDE)
    client.force_login(admin_user)
    assert client.get(url).status_code == NOT_ALLOWED


def test_every_post_needs_the_csrf_token(world, operator):
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.force_login(operator)
    url, data, _, _ = _post("job_decide", INSIDE)
    assert client.post(url, data).status_code == 403
    page = client.get(f"/jobs/{job_of(INSIDE)}/")
    token = page.cookies["csrftoken"].value
    assert client.post(url, data, HTTP_X_CSRFTOKEN=token).status_code == 302


# A bulk run is its author's: other operators get a 404, other roles a 403.
RUN_PAGES = {"bulk_run": "get", "bulk_run_step": "post"}


@pytest.mark.parametrize("persona", PERSONAS)
@pytest.mark.parametrize("name", RUN_PAGES)
def test_a_bulk_run_is_its_authors(client, world, user_of, persona, name):
    from console.models import BulkRun

    author = User.objects.get(username="requester")
    run = BulkRun.objects.create(user=author, decision="retry_reconciliation", note="again",
                                 filters={"tab": "reconciling"}, total=1)
    user = user_of(persona)
    if user:
        client.force_login(user)
    response = getattr(client, RUN_PAGES[name])(f"/queue/bulk-runs/{run.pk}/" + ("step/" if name == "bulk_run_step" else ""))
    if persona == "anonymous":
        assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
    elif persona in ("operator", "unscoped_operator", "admin_user"):
        assert response.status_code == 404
    else:
        assert response.status_code == 403
    client.force_login(author)
    assert client.get(f"/queue/bulk-runs/{run.pk}/").status_code == 200
    run.refresh_from_db()
    assert run.done == 0


def test_every_console_url_is_in_the_matrix():
    from console.urls import urlpatterns

    assert {p.name for p in urlpatterns} == {*READS, *POSTS, *RUN_PAGES, "healthz"}


# -- /admin/: every registered model's list and change page, per persona and tenant -------------
# /admin/ is for superusers only (console.admin_site): Django's model permissions know no tenants,
# so a staff user fenced to acme with every "Can view" (or every permission at all) gets its login
# page, exactly as an anonymous visitor does, and can neither read nor write anything there.

ADMIN_PERSONAS = (*PERSONAS, "staff_viewer", "staff_everything")

# How a row of each ledger model leads to its job's tenant; the other models are no tenant's.
ADMIN_TENANT_FIELD = {
    "ledger.job": "tenant",
    "ledger.attempt": "job__tenant",
    "ledger.ledgerevent": "job__tenant",
    "reconciliation.reconciliationcheck": "job__tenant",
    "approvals.approvalrequest": "job__tenant",
}


def _staff(name: str, permissions) -> User:
    user = with_tenants(User.objects.create_user(name, password="pw", is_staff=True), INSIDE)
    user.user_permissions.set(permissions)
    return user


def _admin_pages(tenant: str) -> list[tuple[str, object]]:
    """(url, model) for the list of every registered model, and the change page of one of its
    rows: of `tenant` for a ledger model."""
    from django.contrib import admin

    pages = []
    for model, _ in sorted(admin.site._registry.items(), key=lambda item: item[0]._meta.label_lower):
        base = f"/admin/{model._meta.app_label}/{model._meta.model_name}/"
        pages.append((base, model))
        rows = model._default_manager.order_by("pk")
        field = ADMIN_TENANT_FIELD.get(model._meta.label_lower)
        row = (rows.filter(**{field: tenant}) if field else rows).first()
        if row is not None:
            pages.append((f"{base}{row.pk}/change/", model))
    return pages


@pytest.mark.parametrize("tenant", [INSIDE, OUTSIDE])
@pytest.mark.parametrize("persona", ADMIN_PERSONAS)
def test_admin_pages(client, world, user_of, admin_user, persona, tenant):
    from django.contrib.auth.models import Permission

    from reconciliation.models import CheckOutcome, ReconciliationCheck
    from tests.console.test_admin import _attempt

    _attempt()  # a login attempt, so axes' page has a row too
    for t in WEIGHT:  # a look at the provider for each tenant (the world's jobs had none)
        job = Job.objects.get(job_id=job_of(t))
        ReconciliationCheck.objects.create(job=job, attempt=job.attempts.first(), reconciler="billing",
                                           outcome=CheckOutcome.UNAVAILABLE, error="timeout")
    if persona == "staff_viewer":
        user = _staff("staff", Permission.objects.filter(codename__startswith="view_"))
    elif persona == "staff_everything":
        user = _staff("staff", Permission.objects.all())
    else:
        user = user_of(persona)
    if user:
        client.force_login(user)
    pages = _admin_pages(tenant)
    ledger_pages = [url for url, model in pages if model._meta.label_lower in ADMIN_TENANT_FIELD and "change" in url]
    assert len(ledger_pages) == len(ADMIN_TENANT_FIELD)  # the world has a row of each, for each tenant
    for url, model in pages:
        response = client.get(url)
        if persona == "admin_user":
            assert response.status_code == 200, url
            continue
        assert response.status_code == 302 and response["Location"].startswith("/admin/login/?next="), url
        # …and nothing is written through it either.
        counts = model._default_manager.count()
        response = client.post(url.replace("/change/", "/delete/") if "change" in url else f"{url}add/", {"post": "yes"})
        assert response.status_code == 302 and response["Location"].startswith("/admin/login/"), url
        assert model._default_manager.count() == counts, url


def test_the_admin_matrix_covers_every_registered_model():
    from django.contrib import admin

    from console.admin_site import ReckonAdminSite

    assert isinstance(admin.site, ReckonAdminSite)
    assert {m._meta.label_lower for m in admin.site._registry} >= {*ADMIN_TENANT_FIELD, "auth.user", "django_q.schedule"}
