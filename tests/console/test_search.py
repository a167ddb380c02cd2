"""The header's job search: any job, by the start of its id, key or marker, in any case."""

import re

import pytest
from django.db import connection, transaction

from console.access import EVERY_TENANT
from console.selectors.search import matching_sql
from ledger import services
from ledger.models import Job
from tests.conftest import make_job
from tests.console.conftest import latest_version, make_unknown_job, with_tenants

pytestmark = pytest.mark.django_db


def _found(html: str) -> list[str]:
    return re.findall(r'<tr data-job="([^"]+)">', html)


def _succeed(job_id: str, result_ref: str) -> None:
    lease = services.claim_job(job_id=job_id, worker="worker-a")
    services.begin_side_effect(lease=lease)
    services.record_success(lease=lease, result_ref=result_ref)


@pytest.fixture
def jobs(operator):
    make_unknown_job("inv-100")
    make_unknown_job("inv-101", tenant="globex")
    make_job("Mail-7", action="reckon.echo", payload={"to": "Olga.Berg@acme.example", "subject": "Your receipt"})
    finished = make_unknown_job("inv-200")
    from reconciliation import decisions

    decisions.decide("confirm_effect", job_id="inv-200", version=latest_version("inv-200"), user=operator,
                     note="seen at the provider")
    assert Job.objects.get(pk=finished.pk).status == "succeeded"
    make_job("paid-9", payload={"customer": "cus_globex_41"})
    _succeed("paid-9", "inv_7Q2ZK9XW")  # the provider's answer: its invoice id


@pytest.mark.parametrize(
    "query, expected",
    [
        ("inv-1", ["inv-101", "inv-100"]),  # newest first
        ("INV-1", ["inv-101", "inv-100"]),  # any case
        ("inv-", ["inv-200", "inv-101", "inv-100"]),  # resolved ones included
        ("  inv-2", ["inv-200"]),
        ("billing.create_invoice:INV-10", ["inv-101", "inv-100"]),  # the key, which is also the marker
        ("mail", ["Mail-7"]),
        ("reckon.echo:M", ["Mail-7"]),
    ],
)
def test_it_finds_jobs_by_the_start_of_their_id_or_key(client, auditor, jobs, query, expected):
    client.force_login(auditor)
    response = client.get("/search/", {"q": query})
    assert response.status_code == 200
    assert _found(response.content.decode()) == expected


@pytest.mark.parametrize(
    "kind, query, expected",
    [
        ("the end of an id", "-101", ["inv-101"]),
        ("the middle of an id", "NV-20", ["inv-200"]),
        ("the middle of a key", "invoice:inv-10", ["inv-101", "inv-100"]),
        ("the end of a marker", "echo:paid-9", ["paid-9"]),
        ("an email address in a payload, in another case", "olga.berg@ACME.example", ["Mail-7"]),
        ("part of an email address", "berg@acme", ["Mail-7"]),
        ("a customer in a payload", "cus_globex_41", ["paid-9"]),
        ("a provider's invoice id", "inv_7q2zk9xw", ["paid-9"]),
        ("part of a provider's invoice id", "7Q2ZK", ["paid-9"]),
    ],
)
def test_it_finds_what_people_paste_anywhere(client, auditor, jobs, kind, query, expected):
    client.force_login(auditor)
    html = client.get("/search/", {"q": query}, HTTP_HX_REQUEST="true").content.decode()
    assert _found(html) == expected, kind


def test_a_provider_error_is_found_too(client, auditor):
    make_job("bounce-1", payload={"to": "x"})
    lease = services.claim_job(job_id="bounce-1", worker="worker-a")
    services.begin_side_effect(lease=lease)
    services.record_failure(lease=lease, error="550 5.1.1 mailbox nobody@nowhere.example unknown")
    client.force_login(auditor)
    assert _found(client.get("/search/", {"q": "nobody@nowhere"}).content.decode()) == ["bounce-1"]


@pytest.mark.parametrize("query", ["INV-200", "billing.create_invoice:inv-200", "Billing.Create_Invoice:INV-200"])
def test_the_job_a_whole_id_or_key_names_opens_at_once(client, auditor, jobs, query):
    client.force_login(auditor)
    response = client.get("/search/", {"q": query})
    assert response.status_code == 302 and response["Location"] == "/jobs/inv-200/"


def test_a_whole_id_opens_its_job_even_when_longer_ids_contain_it(client, auditor, jobs):
    make_job("inv-1000")
    client.force_login(auditor)
    response = client.get("/search/", {"q": "inv-100"})
    assert response.status_code == 302 and response["Location"] == "/jobs/inv-100/"
    # Following the typing, the same query lists both.
    html = client.get("/search/", {"q": "inv-100"}, HTTP_HX_REQUEST="true").content.decode()
    assert _found(html) == ["inv-1000", "inv-100"]


@pytest.mark.parametrize("query", ["nv-1x", "inv_1", "inv%", "zzz", "n"])
def test_no_match_says_no_job_matches(client, auditor, jobs, query):
    """LIKE's wildcards are taken literally; under 3 characters only starts match."""
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


def test_values_and_answers_of_another_tenant_stay_behind_the_fence(client, operator):
    make_job("g-mail", tenant="globex", payload={"to": "shared@customer.example"})
    make_job("g-paid", tenant="globex", payload={"customer": "cus_x"})
    _succeed("g-paid", "inv_SHAREDREF")
    make_job("a-mail", tenant="acme", payload={"to": "shared@customer.example"})
    client.force_login(with_tenants(operator, "acme"))
    assert _found(client.get("/search/", {"q": "shared@customer"}).content.decode()) == ["a-mail"]
    assert _found(client.get("/search/", {"q": "SHAREDREF"}).content.decode()) == []
    assert _found(client.get("/search/", {"q": "g-paid"}).content.decode()) == []  # not even opened by name
    client.force_login(with_tenants(operator, "globex"))
    assert _found(client.get("/search/", {"q": "shared@customer"}).content.decode()) == ["g-mail"]
    assert client.get("/search/", {"q": "g-paid"})["Location"] == "/jobs/g-paid/"


def test_a_user_without_tenants_finds_nothing(client, auditor, jobs):
    from console.models import TenantScope

    client.force_login(auditor)
    TenantScope.objects.filter(user=auditor).delete()
    assert _found(client.get("/search/", {"q": "inv"}).content.decode()) == []


def test_it_needs_a_login_and_a_console_role(client, jobs, django_user_model):
    assert client.get("/search/", {"q": "inv"})["Location"].startswith("/accounts/login/")
    client.force_login(django_user_model.objects.create_user("nobody", password="pw-nobody"))
    assert client.get("/search/", {"q": "inv"}).status_code == 403


def test_it_pages_past_the_first_50_newest_first(client, auditor):
    for n in range(123):
        make_job(f"bulk-{n:03d}", payload={"to": f"c{n}@bulk.example"})
    client.force_login(auditor)
    newest_first = [f"bulk-{n:03d}" for n in reversed(range(123))]
    seen, url, pages = [], "/search/?q=%40BULK.example", 0
    while url:
        html = client.get(url).content.decode()
        seen += _found(html)
        pages += 1
        following = re.search(r'<a href="(/search/\?[^"]+)"[^>]*rel="next"', html)
        url = following.group(1).replace("&amp;", "&") if following else None
        if url:
            assert "more match on the next page" in html
    assert pages == 3 and seen == newest_first
    assert "Newest matches" in html  # the last page leads back to the first


@pytest.mark.parametrize("window", [200, 30])
def test_a_page_found_among_the_newest_jobs_is_the_page_the_indexes_find(client, auditor, monkeypatch, window):
    """The newest jobs are read first (a fragment many share costs the window, not the table);
    with a window that holds a whole page or one that does not, the pages are the same."""
    from console.selectors import search

    monkeypatch.setattr(search, "RECENT_WINDOW", window)
    for n in range(160):  # every third job matches, by its payload or by its provider's answer
        make_job(f"mix-{n:03d}", payload={"to": f"c{n}@{'wide' if n % 3 == 0 else 'other'}.example"})
    _succeed("mix-158", "inv_WIDE.EXAMPLE_1")
    expected = [f"mix-{n:03d}" for n in reversed(range(160)) if n % 3 == 0 or n == 158]
    client.force_login(auditor)
    seen, url = [], "/search/?q=wide.EXAMPLE"
    while url:
        html = client.get(url).content.decode()
        seen += _found(html)
        following = re.search(r'<a href="(/search/\?[^"]+)"[^>]*rel="next"', html)
        url = following.group(1).replace("&amp;", "&") if following else None
    assert seen == expected


def test_a_cursor_that_does_not_parse_shows_the_first_page(client, auditor, jobs):
    client.force_login(auditor)
    assert _found(client.get("/search/", {"q": "inv-", "before": "x'--"}).content.decode()) == [
        "inv-200", "inv-101", "inv-100"]


def test_it_shows_who_is_on_a_job(client, auditor, operator, jobs):
    from ledger.services import take_job

    take_job(job_id="inv-100", holder=operator.username)
    client.force_login(auditor)
    html = client.get("/search/", {"q": "inv-10"}).content.decode()
    assert f"{operator.username} <span class=\"muted\">since" in html


@pytest.mark.parametrize("query", ["mlexample", "0042"])
def test_both_sides_of_the_search_read_their_trigram_index(query):
    """The statement's expressions are the indexes' own: with other plans priced out, it reads
    job_search_text and attempt_search_answer (the 1M-attempt plans are in the bench)."""
    sql, params = matching_sql(query, EVERY_TENANT, 51)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_indexscan = off")
        cursor.execute("SET LOCAL enable_nestloop = off")
        cursor.execute("EXPLAIN " + sql, params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "Bitmap Index Scan on job_search_text" in plan and "Bitmap Index Scan on attempt_search_answer" in plan, plan


def test_under_three_characters_the_search_reads_the_prefix_indexes():
    sql, params = matching_sql("In", EVERY_TENANT, 51)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_indexscan = off")
        cursor.execute("EXPLAIN " + sql, params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "job_search_text" not in plan and "job_search_job_id" in plan and "job_search_key" in plan, plan


def test_results_follow_the_typing_without_navigating_away(client, auditor, jobs):
    client.force_login(auditor)
    response = client.get("/search/", {"q": "INV-200"}, HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert response.status_code == 200 and html.lstrip().startswith('<section id="search-results"')
    assert _found(html) == ["inv-200"]
    page = client.get("/search/", {"q": "inv"}).content.decode()
    assert 'hx-trigger="input changed delay:300ms from:#search-q, submit"' in page


def test_the_search_text_follows_a_change_of_payload(client, auditor):
    """A trigger keeps each job's search text (ledger.JobSearchText): written on insert, rewritten
    when the payload changes (a corrected payload), untouched by the job's other updates."""
    from ledger.models import JobSearchText

    job = make_job("fix-1", payload={"to": "typo@exampel.com"})
    before = JobSearchText.objects.get(job=job)
    assert "typo@exampel.com" in before.text and before.tenant == "acme"
    with connection.cursor() as cursor:
        cursor.execute("SELECT xmin::text FROM ledger_jobsearchtext WHERE job_id = %s", [job.pk])
        written = cursor.fetchone()[0]
        lease = services.claim_job(job_id="fix-1", worker="worker-a")  # a status change: no new search text
        cursor.execute("SELECT xmin::text FROM ledger_jobsearchtext WHERE job_id = %s", [job.pk])
        assert cursor.fetchone()[0] == written
        services.record_failure(lease=lease, error="nothing sent")
        cursor.execute("UPDATE ledger_job SET payload = %s WHERE id = %s", ['{"to": "fixed@example.com"}', job.pk])
    client.force_login(auditor)
    assert _found(client.get("/search/", {"q": "fixed@example"}).content.decode()) == ["fix-1"]
    assert _found(client.get("/search/", {"q": "typo@exampel"}).content.decode()) == []
