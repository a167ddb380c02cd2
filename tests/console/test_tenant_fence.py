"""Tenant scopes: who sees which tenants' jobs (the URL × persona matrix is in test_access.py)."""

import re

import pytest
from django.contrib.auth.models import User

from console.access import EVERY_TENANT, NO_TENANT, TenantFence, fence_of
from console.models import TenantScope
from ledger import services
from tests.conftest import make_job
from tests.console.conftest import make_unknown_job, with_tenants

pytestmark = pytest.mark.django_db


@pytest.fixture
def two_tenants(db):
    make_unknown_job("inv-acme", tenant="acme")
    make_unknown_job("inv-globex", tenant="globex")
    make_job("queued-acme", tenant="acme")
    make_job("queued-globex-1", tenant="globex")
    make_job("queued-globex-2", tenant="globex")
    lease = services.claim_job(job_id="queued-globex-2", worker="w1")
    services.renew_lease(lease=lease)


def _figure(html: str, name: str) -> str:
    return re.search(rf'data-figure="{name}">([^<]*)<', html).group(1)


def test_the_overview_counts_only_the_users_tenants(client, operator, two_tenants):
    client.force_login(with_tenants(operator, "acme"))
    html = client.get("/").content.decode()
    assert _figure(html, "unknown_total") == "1"
    assert _figure(html, "busy_workers") == "0"  # globex's running attempt is not theirs
    assert "Jobs waiting for a worker" in html and _figure(html, "queue_depth") == "1"
    assert 'data-status="pending">1<' in html and "2 in all" in html


def test_a_user_with_every_tenant_sees_the_broker_queue(client, operator, two_tenants):
    client.force_login(operator)  # every tenant
    html = client.get("/").content.decode()
    assert _figure(html, "unknown_total") == "2" and _figure(html, "busy_workers") == "1"
    assert "Queued deliveries" in html and "5 in all" in html


def test_a_superuser_sees_every_tenant_without_a_scope(client, admin_user, two_tenants):
    assert not TenantScope.objects.filter(user=admin_user).exists()
    client.force_login(admin_user)
    assert _figure(client.get("/").content.decode(), "unknown_total") == "2"


def test_the_queue_tenant_filter_cannot_reach_past_the_fence(client, auditor, two_tenants):
    client.force_login(with_tenants(auditor, "acme"))
    assert 'data-job="inv-globex"' not in client.get("/queue/?tab=reconciling&tenant=globex").content.decode()
    assert 'data-job="inv-acme"' in client.get("/queue/?tab=reconciling&tenant=acme").content.decode()


def test_the_header_says_which_tenants_the_user_sees(client, auditor):
    client.force_login(with_tenants(auditor, "globex", "acme"))
    assert "<span class=\"muted\" data-tenants>(acme, globex)</span>" in client.get("/").content.decode()
    with_tenants(auditor)
    assert "data-tenants>(all tenants)<" in client.get("/").content.decode()


def test_a_scope_taken_away_holds_from_the_next_request(client, auditor, two_tenants):
    client.force_login(auditor)
    assert client.get("/jobs/inv-globex/").status_code == 200
    TenantScope.objects.filter(user=auditor).delete()
    assert client.get("/jobs/inv-globex/").status_code == 404
    assert "You have no tenants assigned" in client.get("/queue/").content.decode()


def test_roles_and_tenants_cost_one_query_per_request(operator, django_assert_num_queries):
    from console.access import roles_of

    with_tenants(operator, "acme")
    user = User.objects.get(pk=operator.pk)  # as the request loads it
    with django_assert_num_queries(1):
        assert roles_of(user) == {"operators"}
        assert fence_of(user) == TenantFence(frozenset({"acme"}))
        assert fence_of(user) == TenantFence(frozenset({"acme"}))


@pytest.mark.parametrize(
    "fence, tenants_seen",
    [(EVERY_TENANT, {"acme", "globex"}), (TenantFence(frozenset({"globex"})), {"globex"}), (NO_TENANT, set())],
)
def test_the_fence_limits_jobs_and_their_events(two_tenants, fence, tenants_seen):
    from ledger.models import Job, LedgerEvent

    assert set(fence.jobs().values_list("tenant", flat=True)) == tenants_seen
    assert set(fence.apply(LedgerEvent.objects.all()).values_list("job__tenant", flat=True)) == tenants_seen
    assert fence.jobs(Job.objects.filter(job_id="inv-acme")).exists() == ("acme" in tenants_seen)


def test_a_scope_is_stored_trimmed_sorted_and_without_repeats(operator):
    scope = TenantScope.objects.create(user=User.objects.create_user("x"), tenants=[" globex", "acme", "acme", " "])
    scope.refresh_from_db()
    assert scope.tenants == ["acme", "globex"] and scope.describe() == "acme, globex"


def test_the_demo_users_see_every_tenant(db):
    from sandbox.demo_users import DEMO_USERS, ensure_demo_users

    ensure_demo_users()
    ensure_demo_users()  # again: the existing accounts are left as they are, no second scope
    for username, *_ in DEMO_USERS:
        assert fence_of(User.objects.get(username=username)).everything
    assert TenantScope.objects.filter(all_tenants=True).count() == len(DEMO_USERS)
