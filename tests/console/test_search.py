"""The header's job search: any job, by the start of its id, key or marker, in any case."""

import pytest
from django.db import connection, transaction

from console.access import EVERY_TENANT
from console.selectors.search import matching_sql
from ledger.models import Job
from tests.conftest import make_job
from tests.console.conftest import latest_version, make_unknown_job, with_tenants

pytestmark = pytest.mark.django_db


def _found(html: str) -> list[str]:
    import re

    return re.findall(r'<tr data-job="([^"]+)">', html)


@pytest.fixture
def jobs(operator):
    make_unknown_job("inv-100")
    make_unknown_job("inv-101", tenant="globex")
    make_job("Mail-7", action="reckon.echo")  # pending
    finished = make_unknown_job("inv-200")
    from reconciliation import decisions

    decisions.decide("confirm_effect", job_id="inv-200", version=latest_version("inv-200"), user=operator,
                     note="seen at the provider")
    assert Job.objects.get(pk=finished.pk).status == "succeeded"


def test_it_is_in_the_header_of_every_console_page(client, auditor):
    client.force_login(auditor)
    for url in ("/", "/queue/", "/approvals/", "/audit/"):
        html = client.get(url).content.decode()
        assert '<form class="search" role="search" method="get" action="/search/">' in html
        assert '<label for="find-job">Find a job</label>' in html


@pytest.mark.parametrize(
    "query, expected",
    [
        ("inv-1", ["inv-100", "inv-101"]),
        ("INV-1", ["inv-100", "inv-101"]),  # any case
        ("inv-", ["inv-100", "inv-101", "inv-200"]),  # resolved ones included
        ("  inv-2", ["inv-200"]),
        ("billing.create_invoice:INV-10", ["inv-100", "inv-101"]),  # the key, which is also the marker
        ("mail", ["Mail-7"]),
        ("reckon.echo:", ["Mail-7"]),
    ],
)
def test_it_finds_jobs_by_the_start_of_their_id_or_key(client, auditor, jobs, query, expected):
    client.force_login(auditor)
    response = client.get("/search/", {"q": query})
    assert response.status_code == 200
    assert _found(response.content.decode()) == expected


@pytest.mark.parametrize("query", ["INV-200", "billing.create_invoice:inv-200", "Billing.Create_Invoice:INV-200"])
def test_the_one_job_a_full_id_or_key_names_opens_at_once(client, auditor, jobs, query):
    client.force_login(auditor)
    response = client.get("/search/", {"q": query})
    assert response.status_code == 302 and response["Location"] == "/jobs/inv-200/"


@pytest.mark.parametrize("query", ["nv-1", "inv_1", "inv%", "zzz"])
def test_no_match_says_no_job_matches(client, auditor, jobs, query):
    """Only the start matches, and LIKE's wildcards are taken literally."""
    client.force_login(auditor)
    html = client.get("/search/", {"q": query}).content.decode()
    assert _found(html) == []
    assert "No job matches" in html and "resolved" not in html


def test_an_empty_query_asks_for_one(client, auditor, jobs):
    client.force_login(auditor)
    html = client.get("/search/", {"q": "  "}).content.decode()
    assert _found(html) == [] and "data-search-empty-query" in html and "No job matches" not in html


def test_control_characters_find_nothing_and_say_why(client, auditor, jobs):
    client.force_login(auditor)
    response = client.get("/search/", {"q": "inv\x00"})
    assert response.status_code == 200
    html = response.content.decode()
    assert _found(html) == [] and "Control characters are not allowed here." in html


def test_it_respects_the_tenant_fence(client, auditor, jobs):
    client.force_login(with_tenants(auditor, "acme"))
    assert _found(client.get("/search/", {"q": "inv-1"}).content.decode()) == ["inv-100"]
    # Another tenant's job is not there, even named in full: no redirect, no hint.
    html = client.get("/search/", {"q": "inv-101"}).content.decode()
    assert _found(html) == [] and "No job matches" in html and "in your tenants (acme)" in html


def test_a_user_without_tenants_finds_nothing(client, auditor, jobs):
    from console.models import TenantScope

    client.force_login(auditor)
    TenantScope.objects.filter(user=auditor).delete()
    assert _found(client.get("/search/", {"q": "inv"}).content.decode()) == []


def test_it_needs_a_login_and_a_console_role(client, jobs, django_user_model):
    assert client.get("/search/", {"q": "inv"})["Location"].startswith("/accounts/login/")
    client.force_login(django_user_model.objects.create_user("nobody", password="pw-nobody"))
    assert client.get("/search/", {"q": "inv"}).status_code == 403


def test_it_shows_a_page_and_says_when_more_match(client, auditor):
    for n in range(53):
        make_job(f"bulk-{n:03d}")
    client.force_login(auditor)
    html = client.get("/search/", {"q": "BULK"}).content.decode()
    assert _found(html) == [f"bulk-{n:03d}" for n in range(50)]
    assert "more match, type more of it" in html


def test_it_shows_who_is_on_a_job(client, auditor, operator, jobs):
    from ledger.services import take_job

    take_job(job_id="inv-100", holder=operator.username)
    client.force_login(auditor)
    html = client.get("/search/", {"q": "inv-10"}).content.decode()
    assert f"{operator.username} <span class=\"muted\">since" in html


def test_both_sides_of_the_search_can_walk_their_index():
    """The statement's expressions are the indexes' own: with heap scans priced out, the plan
    reads only job_search_job_id and job_search_key (the 1M-attempt plan is in the bench)."""
    sql, params = matching_sql("Inv-", EVERY_TENANT, 51)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_bitmapscan = off")
        cursor.execute("EXPLAIN " + sql, params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "Index Scan using job_search_job_id" in plan and "Index Scan using job_search_key" in plan, plan
    # Each side in its index's order, so the LIMIT stops the walk (only UNION's dedupe sorts, by id).
    assert not [line for line in plan.splitlines() if "Sort Key" in line and "upper" in line], plan


def test_results_follow_the_typing_without_navigating_away(client, auditor, jobs):
    client.force_login(auditor)
    response = client.get("/search/", {"q": "INV-200"}, HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert response.status_code == 200 and html.lstrip().startswith('<section id="search-results"')
    assert _found(html) == ["inv-200"]
    page = client.get("/search/", {"q": "inv"}).content.decode()
    assert 'hx-trigger="input changed delay:300ms from:#search-q, submit"' in page
