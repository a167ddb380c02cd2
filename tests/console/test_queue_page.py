import json
import re

import pytest
from django.db import connection

from ledger.models import Job
from tests.conftest import make_job
from tests.console.conftest import htmx, latest_version, make_operator_job, make_unknown_job

pytestmark = pytest.mark.django_db


def _jobs_on_page(html: str) -> list[str]:
    return re.findall(r'<tr data-job="([^"]+)">', html)


def _age(job_id: str, minutes: int) -> None:
    """Backdate a job's creation (test setup only: no state changes, just time)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE ledger_job SET created_at = now() - make_interval(mins => %s) WHERE job_id = %s",
            [minutes, job_id],
        )


@pytest.fixture
def queue(db):
    make_unknown_job("inv-old")
    make_operator_job("vault-1", tenant="globex")
    make_unknown_job("inv-new")
    make_job("pending-1")  # not unknown work
    _age("inv-old", 120)
    _age("vault-1", 90)
    _age("inv-new", 2)


def test_it_lists_jobs_a_human_must_resolve_oldest_first(client, auditor, queue):
    client.force_login(auditor)
    html = client.get("/queue/").content.decode()
    assert _jobs_on_page(html) == ["vault-1"]
    assert 'data-tab-count="human">1<' in html and 'data-tab-count="reconciling">2<' in html
    html = client.get("/queue/?tab=reconciling").content.decode()
    assert _jobs_on_page(html) == ["inv-old", "inv-new"]
    assert "pending-1" not in html


def test_it_can_show_the_newest_first(client, auditor, queue):
    client.force_login(auditor)
    html = client.get("/queue/?tab=reconciling&sort=newest").content.decode()
    assert _jobs_on_page(html) == ["inv-new", "inv-old"]


@pytest.mark.parametrize(
    "query, expected",
    [
        ("tab=reconciling&action=billing.create_invoice", ["inv-old", "inv-new"]),
        ("tab=human&action=billing.create_invoice", []),
        ("tab=human&tenant=globex", ["vault-1"]),
        ("tab=human&tenant=acme", []),
        ("tab=reconciling&older_than=60", ["inv-old"]),
        ("tab=reconciling&older_than=5", ["inv-old"]),
        ("tab=human&status=needs_operator", ["vault-1"]),
        ("tab=human&status=escalated", []),
        ("tab=reconciling&q=inv-new", ["inv-new"]),
        ("tab=reconciling&q=billing.create_invoice:inv-old", ["inv-old"]),  # key = marker
        ("tab=reconciling&q=inv", ["inv-old", "inv-new"]),  # the start of an id
        ("tab=reconciling&q=INV-N", ["inv-new"]),  # in any case
        ("tab=reconciling&q=Billing.Create_Invoice:INV-O", ["inv-old"]),
        ("tab=reconciling&q=nv-", []),  # the start, not anywhere inside
        ("tab=human&tenant=GLOBEX", ["vault-1"]),
        ("tab=human&older_than=abc", ["vault-1"]),  # a bad age is ignored
        ("tab=human&status=nonsense", []),  # an unknown status lists nothing and says so (see below)
        ("tab=human&older_than=99999999999999", ["vault-1"]),  # an age before year 1 too (it answered 500)
    ],
)
def test_it_filters(client, auditor, queue, query, expected):
    client.force_login(auditor)
    html = client.get(f"/queue/?{query}").content.decode()
    assert _jobs_on_page(html) == expected
    if not expected:  # a filter that matches nothing says so, not that every job is resolved
        assert "No job matches these filters." in html and "Every job in this tab is resolved" not in html


def test_htmx_gets_only_the_table(client, auditor, queue):
    client.force_login(auditor)
    response = client.get("/queue/?tab=reconciling", **htmx(HTTP_HX_TARGET="queue-table"))
    html = response.content.decode()
    assert html.lstrip().startswith('<section id="queue-table"')
    assert "<html" not in html and _jobs_on_page(html) == ["inv-old", "inv-new"]
    assert 'hx-get="/queue/?tab=reconciling"' in html  # refreshes itself with the same filters


def test_the_counts_partial_refreshes_on_its_own_and_on_the_queue_changed_event(client, auditor, queue):
    client.force_login(auditor)
    html = client.get("/queue/counts/?tab=human", **htmx()).content.decode()
    assert html.lstrip().startswith('<nav id="queue-counts"')
    assert "queue-changed from:body" in html and 'data-count="needs_operator">1<' in html


def test_keyset_pagination_walks_the_whole_queue_once(client, auditor):
    for n in range(7):
        make_unknown_job(f"inv-{n}")
    client.force_login(auditor)
    seen, url = [], "/queue/?tab=reconciling&size=3"
    html = client.get(url).content.decode()
    assert "&lt;" not in html
    pages = 0
    while True:
        pages += 1
        seen += _jobs_on_page(html)
        found = re.search(r'<a href="(/queue/\?[^"]+)" hx-get="[^"]+" [^>]*rel="next">', html)
        if not found:
            break
        html = client.get(found.group(1).replace("&amp;", "&")).content.decode()
    assert pages == 3
    assert seen == [f"inv-{n}" for n in range(7)]


def test_the_page_size_is_bounded_to_the_choices(client, auditor):
    for n in range(3):
        make_unknown_job(f"inv-{n}")
    client.force_login(auditor)
    assert len(_jobs_on_page(client.get("/queue/?tab=reconciling&size=1").content.decode())) == 1
    assert len(_jobs_on_page(client.get("/queue/?tab=reconciling&size=100000").content.decode())) == 3


def test_it_uses_no_offset_and_no_count_over_the_history(
    client, auditor, queue, django_assert_max_num_queries
):
    from django.test.utils import CaptureQueriesContext

    client.force_login(auditor)
    with CaptureQueriesContext(connection) as queries:
        client.get("/queue/?tab=reconciling")
    sql = " ".join(q["sql"] for q in queries.captured_queries).upper()
    assert " OFFSET " not in sql
    job_counts = [q["sql"] for q in queries.captured_queries
                  if "COUNT(" in q["sql"].upper() and '"ledger_job"' in q["sql"]]  # (not the navigation's alerts)
    assert all('"ledger_job"."status" IN' in q for q in job_counts)


@pytest.mark.parametrize("rows", [5, 60])
def test_the_page_renders_in_a_bounded_number_of_queries(
    client, operator, rows, django_assert_max_num_queries
):
    for n in range(rows):
        make_unknown_job(f"inv-{n}")
    client.force_login(operator)
    # session + user, roles, counts, one page of jobs, their latest attempts, their latest telling
    # events, their holds' reasons and last comments, and (for an operator) how many jobs the filter
    # matches, for "Select all"; the navigation's count of firing alerts
    with django_assert_max_num_queries(10):
        response = client.get("/queue/?tab=reconciling&size=100")
    assert len(_jobs_on_page(response.content.decode())) == rows


def test_bulk_retry_reconciliation_with_one_note(client, operator, queue):
    make_operator_job("vault-2")
    client.force_login(operator)
    selected = [f"{latest_version(j)}:{j}" for j in ("inv-old", "inv-new")]
    response = client.post(
        "/queue/bulk/",
        {
            "decision": "retry_reconciliation",
            "note": "provider is back",
            "selected": selected,
            "tab": "reconciling",
            "confirmed": "on",  # the second step; the first only asks
        },
        **htmx(),
    )
    assert response.status_code == 200
    assert json.loads(response["HX-Trigger"]) == {"queue-changed": {}}
    html = response.content.decode()
    assert html.lstrip().startswith('<section id="queue-table"')
    assert (
        "inv-old: Retry reconciliation recorded" in html and "inv-new: Retry reconciliation recorded" in html
    )
    events = Job.objects.get(job_id="inv-old").events.filter(kind="operator_retried_reconciliation")
    assert events.get().note == "provider is back" and events.get().actor == operator.username


def test_bulk_cancel_reports_each_job_on_its_own(client, operator, queue):
    client.force_login(operator)
    stale = f"{latest_version('inv-old') - 1}:inv-old"
    response = client.post(
        "/queue/bulk/",
        {
            "decision": "cancel_job",
            "note": "customer withdrew",
            "selected": [stale, f"{latest_version('vault-1')}:vault-1"],
            "confirmed": "on",
        },
        **htmx(),
    )
    html = response.content.decode()
    assert "vault-1: Cancel job recorded" in html
    assert "inv-old: the worker worker-a lost sight of this job&#x27;s effect at " in html
    assert "your decision was not applied" in html
    assert Job.objects.get(job_id="vault-1").status == "cancelled"
    assert Job.objects.get(job_id="inv-old").status == "needs_reconciliation"


def test_bulk_without_js_redirects_back_with_messages(client, operator, queue):
    client.force_login(operator)
    response = client.post(
        "/queue/bulk/",
        {
            "decision": "cancel_job",
            "note": "done",
            "selected": f"{latest_version('vault-1')}:vault-1",
            "tab": "human",
            "confirmed": "on",
        },
    )
    assert response.status_code == 302 and response["Location"] == "/queue/?tab=human"
    html = client.get(response["Location"]).content.decode()
    assert "vault-1: Cancel job recorded" in html
    assert _jobs_on_page(html) == []


def test_bulk_needs_a_selection_and_a_note(client, operator, queue):
    client.force_login(operator)
    html = client.post("/queue/bulk/", {"decision": "cancel_job", "note": " "}, **htmx()).content.decode()
    assert "Select at least one job." in html and "This field is required." in html
    assert Job.objects.get(job_id="vault-1").status == "needs_operator"


def test_the_bulk_form_and_checkboxes_are_for_operators_only(client, auditor, operator, queue):
    client.force_login(auditor)
    html = client.get("/queue/").content.decode()
    assert 'id="bulk-form"' not in html and 'type="checkbox"' not in html
    client.force_login(operator)
    html = client.get("/queue/").content.decode()
    assert 'id="bulk-form"' in html and f'value="{latest_version("vault-1")}:vault-1"' in html


def test_it_shows_each_jobs_duplicate_deliveries(client, auditor, django_assert_max_num_queries):
    from ledger import services
    from tests.console.conftest import INVOICE

    make_job("inv-dup", action="billing.create_invoice", payload=INVOICE)
    lease = services.claim_job(job_id="inv-dup", worker="worker-a")
    for _ in range(2):  # redelivered while the lease is live
        with pytest.raises(services.ClaimRefused, match="duplicate delivery"):
            services.claim_job(job_id="inv-dup", worker="worker-b")
    services.begin_side_effect(lease=lease)
    services.record_unknown(lease=lease, reason="connection dropped")
    make_unknown_job("inv-plain")
    client.force_login(auditor)
    with django_assert_max_num_queries(9):  # as for any page: the counter is a column, no query per row
        html = client.get("/queue/?tab=reconciling").content.decode()
    assert '<th scope="col" class="num">Duplicate deliveries</th>' in html
    rows = dict(
        re.findall(r'<tr data-job="([^"]+)">.*?<td class="num"[^>]* data-duplicates>(\d+)</td>', html, re.S)
    )
    assert rows == {"inv-dup": "2", "inv-plain": "0"}


@pytest.mark.parametrize("after", ["1700000000000000.5&tab=human", "a b#c?d=é", "x\"><script>"])
def test_the_auto_refresh_url_encodes_the_page_cursor(client, auditor, queue, after):
    from html import unescape
    from urllib.parse import parse_qs, urlencode, urlsplit

    client.force_login(auditor)
    html = client.get(f"/queue/?{urlencode({'tab': 'reconciling', 'after': after})}", **htmx()).content.decode()
    refresh = unescape(re.search(r'<section id="queue-table" data-autorefresh hx-get="([^"]*)"', html).group(1))
    parts = urlsplit(refresh)
    assert parts.path == "/queue/" and parse_qs(parts.query) == {"tab": ["reconciling"], "after": [after]}


def test_without_filters_the_auto_refresh_url_is_the_plain_queue(client, auditor, queue):
    client.force_login(auditor)
    html = client.get("/queue/", **htmx()).content.decode()
    assert '<section id="queue-table" data-autorefresh hx-get="/queue/"' in html
