"""The search's word indexes (ledger migration 0025): a fragment with a separator inside is found
through its rare words, then rechecked whole, and finds exactly what ILIKE finds."""

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from console.access import EVERY_TENANT
from console.selectors import search, without_parallel_workers
from console.selectors.audit import AuditFilter, audit_page
from console.selectors.search import like_inside, matching_ids, matching_sql, words_query
from ledger import services
from ledger.models import Job
from tests.conftest import make_job

pytestmark = pytest.mark.django_db

NONE_COMMON = frozenset()


@pytest.fixture(autouse=True)
def statistics_read_afresh():
    search._common.clear()
    yield
    search._common.clear()


@pytest.mark.parametrize(
    "query, terms",
    [
        ("inv_0000000003", "'0000000003':* | '_long'"),  # `inv` may end a longer word: left out
        ("le-year-a-0000605", "'year' & 'a' & '0000605':* | '_long'"),
        ("-Year-", "'year' | '_long'"),  # between two separators: a whole word, in lower case
        ("customer4@", None),  # no word starts inside the fragment
        ("0000605", None),  # no separator: the trigrams
        ("x-ab", None),  # a word's start of under three characters would match too many words
        ("kä-süd", None),  # not ASCII
        ("x-" + "a" * 250, "'" + "a" * 200 + "':* | '_long'"),  # the index keeps a word's first 200
        ("x-" + "b" * 250 + "-y", "'" + "b" * 200 + "':* | '_long'"),
    ],
)
def test_the_words_a_fragment_holds(query, terms):
    assert words_query(query, NONE_COMMON) == terms


def test_the_start_of_a_common_word_is_left_out_and_a_fragment_with_no_rare_word_keeps_the_trigrams():
    common = frozenset({"hooli", "example", "year", "a"})
    # Whole words stay, common or not (`a` tells scale-year-a-… from scale-year-b-…).
    assert words_query("le-year-a-0000605", common) == "'year' & 'a' & '0000605':* | '_long'"
    assert words_query("x-0000605-hooli.exa", common) == "'0000605' & 'hooli' | '_long'"
    assert words_query("customer4@hooli.example", common) is None
    assert words_query("customer4@hooli.exa", common) is None  # the start of a common word


def _succeed(job_id: str, result_ref: str) -> None:
    lease = services.claim_job(job_id=job_id, worker="worker-a")
    services.begin_side_effect(lease=lease)
    services.record_success(lease=lease, result_ref=result_ref)


def _ilike(query: str) -> list[str]:
    """What a plain ILIKE over every text and answer finds, no index involved, newest first."""
    pattern = like_inside(query)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT j.job_id FROM ledger_job j WHERE j.id IN (SELECT job_id FROM ledger_jobsearchtext "
            "WHERE (text || '') ILIKE %s ESCAPE '\\' UNION SELECT job_id FROM ledger_attempt "
            "WHERE (result_ref || ' ' || error || '') ILIKE %s ESCAPE '\\') ORDER BY j.id DESC", [pattern, pattern])
        return [row[0] for row in cursor.fetchall()]


def _found(query: str) -> list[str]:
    ids = matching_ids(query, EVERY_TENANT, 51)
    by_pk = dict(Job.objects.filter(pk__in=ids).values_list("pk", "job_id"))
    return [by_pk[pk] for pk in ids]


@pytest.fixture
def texts():
    make_job("w-exact", payload={"ref": "inv_0000000003"})
    make_job("w-inside", payload={"ref": "xinv_00000000031"})  # the fragment inside longer words
    make_job("w-other", payload={"ref": "inv_1000000003"})
    make_job("w-long", payload={"blob": "z " * 40_000 + "inv_0000000003"})  # past the words' 65,536 characters
    make_job("w-longword", payload={"ref": "inv_0000000003" + "9" * 300})  # a word past the index's 200
    make_job("w-answered", payload={"n": 7})
    _succeed("w-answered", "INV_0000000003")  # the provider's answer, in another case
    make_job("w-bees", payload={"ref": "q-" + "b" * 250 + "-z"})
    make_job("w-year", payload={"ref": "scale-year-a-0000605"})


@pytest.mark.parametrize(
    "query, expected",
    [
        ("inv_0000000003", ["w-answered", "w-longword", "w-long", "w-inside", "w-exact"]),
        ("INV_0000000003", ["w-answered", "w-longword", "w-long", "w-inside", "w-exact"]),
        ("v_00000000031", ["w-inside"]),
        ("q-" + "b" * 250 + "-", ["w-bees"]),
        ("le-year-a-0000605", ["w-year"]),
        ("-year-a-0000606", []),
    ],
)
def test_the_word_path_finds_what_ilike_finds(texts, query, expected):
    assert words_query(query, NONE_COMMON) is not None
    assert _ilike(query) == expected
    assert _found(query) == expected


def test_a_fragment_with_a_rare_word_reads_the_word_indexes_and_not_the_trigrams(texts):
    sql, params = matching_sql("inv_0000000003", EVERY_TENANT, 51)
    with transaction.atomic(), connection.cursor() as cursor:
        for plan in ("seqscan", "indexscan", "nestloop"):  # a few rows: any plan costs the same
            cursor.execute(f"SET LOCAL enable_{plan} = off")
        cursor.execute("EXPLAIN " + sql, params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "Bitmap Index Scan on job_search_words" in plan, plan
    assert "Bitmap Index Scan on attempt_search_answer_words" in plan, plan
    assert "job_search_text" not in plan and "attempt_search_answer " not in plan, plan


def test_the_common_words_come_from_postgresqls_statistics():
    for n in range(60):
        make_job(f"stat-{n}", payload={"to": f"customer{n}@hooli.example"})
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE ledger_jobsearchtext")
    common = search.common_words("texts")
    assert {"hooli", "example"} <= common
    # All its words common: the trigram index answers, and finds the one job.
    assert words_query("customer7@hooli.example", common) is None
    assert "@@" not in matching_sql("customer7@hooli.example", EVERY_TENANT, 51)[0].split("UNION")[0]
    assert _found("customer7@hooli.example") == ["stat-7"]


def _setting() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW max_parallel_workers_per_gather")
        return cursor.fetchone()[0]


def test_the_search_and_the_audit_pages_events_are_read_without_parallel_workers(texts):
    """At 1M attempts the planner started two workers for a few index probes, 10-17 ms each."""
    default = _setting()
    assert default != "0"
    with without_parallel_workers():
        assert _setting() == "0"
    assert _setting() == default  # the rest of a longer transaction plans as before
    with CaptureQueriesContext(connection) as captured:
        audit_page(AuditFilter(q="inv_0000000003"), EVERY_TENANT)
    statements = [query["sql"] for query in captured.captured_queries]
    serial = [n for n, sql in enumerate(statements) if "set_config('max_parallel_workers_per_gather', '0'" in sql]
    assert len(serial) == 2, statements  # the search, then the page of events
    assert "ledger_jobsearchtext" in statements[serial[0] + 1] and "ledger_ledgerevent" in statements[serial[1] + 1]
