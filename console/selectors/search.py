"""Finding jobs by what people paste: any part of an id, a key or marker, a payload value (an
email address, a customer), or a provider's answer (an invoice id, a Message-ID, an error).

Three characters or more are looked for anywhere, in any case (`ILIKE '%…%'`), in each job's
id, key and payload (ledger.JobSearchText, kept by a trigger; its GIN trigram index
job_search_text) and in the answers its attempts recorded (attempt_search_answer), newest job
first, a page at a time (keyset on the job's primary key, never an OFFSET). Each side takes one page past the cursor in its own index's plan and the
two are merged, so a page costs what its matches cost, not the table. Fewer than three characters
hold no trigram: they are matched at the start of ids and keys only (job_search_job_id,
job_search_key). Why trigrams and not full-text search: full-text matches words from their start,
and the end of an id, a domain, or the digits inside an invoice number are not words.

A fragment with a separator inside (`inv_0000000003`, `le-year-a-0000605`) also holds words: one
between two separators is a whole word of the text, the one after the last separator starts a word.
Their trigrams can be shared by most texts (every invoice id has `000`), so such a fragment is
looked for in the word indexes instead (job_search_words, attempt_search_answer_words: ledger
migration 0025), then rechecked whole with ILIKE, when one of its words is rare: not among the
words PostgreSQL's statistics list as common for that index (`common_words`). A fragment whose
words are all common (`@hooli.example`) keeps the trigram plan, where its partial first word helps.

ANSWER_TEXT, JOB_WORDS and ANSWER_WORDS are the indexes' own expressions (ledger migrations 0019
and 0025): PostgreSQL uses an index only for a query that spells its expression.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from django.db import connection
from django.db.models import Q
from django.db.models.functions import Upper

from console.access import TenantFence
from console.selectors import without_parallel_workers
from ledger.models import Job

SHOWN = 50
INSIDE_FROM = 3  # characters; a shorter fragment has no trigram
RECENT_WINDOW = 2000  # newest jobs read first, in key order (matching_ids)
ANSWER_TEXT = "(a.result_ref || ' ' || a.error)"
ANSWERED = "(a.result_ref <> '' OR a.error <> '')"  # the partial index's condition
WORD_CHARS = 200  # a text's words are cut to this many characters in the word indexes
WORDS_FROM = 65536  # characters of a text split into words; a longer text also carries LONG_TEXT
LONG_TEXT = "_long"


def _words(text: str) -> str:
    """The word indexes' expression over `text` (ledger migration 0025)."""
    return (f"(to_tsvector('simple'::regconfig, regexp_replace(regexp_replace(left({text}, {WORDS_FROM}), "
            f"'[^[:alnum:]]+', ' ', 'g'), '([[:alnum:]]{{{WORD_CHARS}}})[[:alnum:]]+', '\\1', 'g')) || "
            f"CASE WHEN length({text}) > {WORDS_FROM} THEN '{LONG_TEXT}'::tsvector ELSE ''::tsvector END)")


JOB_WORDS = _words("s.text")
ANSWER_WORDS = _words(ANSWER_TEXT)
WORD_INDEXES = {"texts": "job_search_words", "answers": "attempt_search_answer_words"}
COMMON_WORDS_FOR = 300.0  # seconds a process keeps an index's common words (they change with ANALYZE)
_common: dict[tuple[str, str, str], tuple[float, frozenset[str]]] = {}
COLUMNS = ("id", "job_id", "tenant", "action", "status", "idempotency_key", "holder", "held_since",
           "created_at", "updated_at")


@dataclass
class SearchResult:
    query: str
    jobs: list[Job]
    next_cursor: str | None = None  # the next page starts after this job (its primary key)
    cursor: str = ""  # this page's: "" for the first
    exact: Job | None = None  # the job whose whole id or key is the query (any case)

    @property
    def inside(self) -> bool:
        """Whether the query was looked for anywhere, not only at the start of ids and keys."""
        return len(self.query) >= INSIDE_FROM


def like_prefix(text: str) -> str:
    """A LIKE pattern (ESCAPE '\\') matching strings that start with `text`, taken literally."""
    return _literal(text) + "%"


def like_inside(text: str) -> str:
    """A LIKE pattern (ESCAPE '\\') matching strings that contain `text`, taken literally."""
    return "%" + _literal(text) + "%"


def _literal(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


@dataclass(frozen=True)
class Word:
    text: str  # lower case
    whole: bool  # between two separators; otherwise the start of a word (after the last one)

    @property
    def term(self) -> str:
        """Its tsquery term: a whole word, or (the start of a word, or a word longer than the
        indexes keep) a prefix."""
        if self.whole and len(self.text) <= WORD_CHARS:
            return f"'{self.text}'"
        return f"'{self.text[:WORD_CHARS]}':*"


def fragment_words(query: str) -> list[Word] | None:
    """The words of the text that any match of `query` must hold: each run of letters and digits
    with a separator before it (a word before the first separator may be the end of a longer one).
    None for a fragment that is not plain ASCII: what PostgreSQL counts as a letter or digit is then
    not certain here, and a word query must never miss a match."""
    if not query.isascii():
        return None
    words = []
    for run in re.finditer(r"[A-Za-z0-9]+", query):
        if run.start() == 0:
            continue
        words.append(Word(run.group().lower(), whole=run.end() < len(query)))
    return words


def common_words(side: str) -> frozenset[str]:
    """The words PostgreSQL's statistics list as common in `side`'s word index (most_common_elems,
    refreshed by ANALYZE; none before the first); kept COMMON_WORDS_FOR seconds per database."""
    key = (connection.alias, connection.settings_dict["NAME"], side)
    kept = _common.get(key)
    if kept and time.monotonic() - kept[0] < COMMON_WORDS_FOR:
        return kept[1]
    with connection.cursor() as cursor:
        cursor.execute("SELECT most_common_elems::text::text[] FROM pg_stats WHERE schemaname = current_schema() "
                       "AND tablename = %s", [WORD_INDEXES[side]])
        row = cursor.fetchone()
    words = frozenset(row[0] or ()) if row else frozenset()
    _common[key] = (time.monotonic(), words)
    return words


def words_query(query: str, common: frozenset[str]) -> str | None:
    """The tsquery a word index answers `query` with (`common`: that index's common words): the fragment's whole words and
    rare word starts, any text too long to be split whole (LONG_TEXT) being a candidate too. None
    when the trigram index is the better plan: the fragment holds no rare word."""
    words = fragment_words(query) or []
    if not any(_rare(word, common) for word in words):
        return None
    # A whole word costs little even when common (GIN steps through its entries to the rare
    # word's), and narrows the match (`a` in `le-year-a-0000605`); the start of a common word
    # would cost all its entries (GIN reads a prefix's matches in full, before the AND).
    kept = [word.term for word in words if word.whole or _rare(word, common)]
    return " & ".join(kept) + f" | '{LONG_TEXT}'"


def _rare(word: Word, common: frozenset[str]) -> bool:
    """A word the index finds in a few pages: not among its statistics' common words, nor (the
    start of a word) the start of one, nor shorter than three characters."""
    if word.whole:
        return word.text not in common
    return len(word.text) >= INSIDE_FROM and not any(known.startswith(word.text) for known in common)


def matching_sql(query: str, fence: TenantFence, limit: int, before: int | None = None) -> tuple[str, list]:
    """The statement selecting the primary keys of up to `limit` jobs matching `query`, newest
    first, older than `before` when given; and its parameters."""

    def scope(tenant: str, job: str) -> tuple[str, list]:
        sql, params = "", []
        if not fence.everything:
            sql, params = f" AND {tenant} = ANY(%s)", [sorted(fence.tenants)]
        if before is not None:
            sql, params = f"{sql} AND {job} < %s", [*params, before]
        return sql, params

    if len(query) < INSIDE_FROM:
        pattern, (where, params) = like_prefix(query), scope("j.tenant", "j.id")
        sql = ("SELECT j.id FROM ledger_job j WHERE (UPPER(j.job_id::text) LIKE UPPER(%s) ESCAPE '\\' "  # nosec B608  # fixed fragments of this module; values bound
               f"OR UPPER(j.idempotency_key::text) LIKE UPPER(%s) ESCAPE '\\'){where} ORDER BY j.id DESC LIMIT %s")
        return sql, [pattern, pattern, *params, limit]
    pattern = like_inside(query)
    texts_where, texts_params = scope("s.tenant", "s.job_id")
    texts_match, texts_match_params = _inside("s.text", JOB_WORDS, words_query(query, common_words("texts")), pattern)
    texts = (f"(SELECT s.job_id AS id FROM ledger_jobsearchtext s WHERE {texts_match}{texts_where} "  # nosec B608  # fixed fragments of this module; values bound
             "ORDER BY s.job_id DESC LIMIT %s)")
    answers_where, answers_params = scope("j.tenant", "a.job_id")
    answers_match, answers_match_params = _inside(ANSWER_TEXT, ANSWER_WORDS, words_query(query, common_words("answers")), pattern)
    answers = (f"(SELECT DISTINCT a.job_id AS id FROM ledger_attempt a JOIN ledger_job j ON j.id = a.job_id "  # nosec B608  # fixed fragments of this module; values bound
               f"WHERE {answers_match} AND {ANSWERED}{answers_where} ORDER BY a.job_id DESC LIMIT %s)")
    params = [*texts_match_params, *texts_params, limit, *answers_match_params, *answers_params, limit, limit]
    return f"SELECT id FROM ({texts} UNION {answers}) AS found ORDER BY id DESC LIMIT %s", params  # nosec B608  # fixed fragments of this module; values bound


def _inside(text: str, words: str, terms: str | None, pattern: str) -> tuple[str, list]:
    """The condition that `text` holds the fragment `pattern`: through the trigram index, or with
    `terms`, through the word index, rechecked by an ILIKE no index serves (`|| ''`: else the
    planner also reads the trigram index and ANDs the two, the cost this avoids)."""
    if terms is None:
        return f"{text} ILIKE %s ESCAPE '\\'", [pattern]
    return f"{words} @@ %s::tsquery AND ({text} || '') ILIKE %s ESCAPE '\\'", [terms, pattern]


def recent_sql(query: str, fence: TenantFence, limit: int, before: int | None = None) -> tuple[str, list]:
    """The statement selecting up to `limit` matches among the RECENT_WINDOW newest jobs (older than
    `before`): read in primary-key order, so its cost is the window's, however common the fragment."""
    where, params = "", []
    if not fence.everything:
        where, params = " AND s.tenant = ANY(%s)", [sorted(fence.tenants)]
    if before is not None:
        where, params = f"{where} AND s.job_id < %s", [*params, before]
    pattern = like_inside(query)
    # The answers are asked per job of the window (a LATERAL subquery with a LIMIT runs per row, on
    # the attempts' job index), never through the answers' trigram index across the table.
    sql = (f"WITH recent AS MATERIALIZED (SELECT s.job_id, s.text FROM ledger_jobsearchtext s WHERE TRUE{where} "  # nosec B608  # fixed fragments of this module; values bound
           "ORDER BY s.job_id DESC LIMIT %s) "
           "SELECT r.job_id FROM recent r LEFT JOIN LATERAL (SELECT 1 AS hit FROM ledger_attempt a "
           f"WHERE a.job_id = r.job_id AND {ANSWERED} AND {ANSWER_TEXT} ILIKE %s ESCAPE '\\' LIMIT 1) answer ON TRUE "
           "WHERE r.text ILIKE %s ESCAPE '\\' OR answer.hit IS NOT NULL ORDER BY r.job_id DESC LIMIT %s")
    return sql, [*params, RECENT_WINDOW, pattern, pattern, limit]


def matching_ids(query: str, fence: TenantFence, limit: int, before: int | None = None) -> list[int]:
    """Up to `limit` matches, newest first, in one statement. A fragment many jobs share (a domain,
    a prefix) is found among the newest jobs at once: when the window holds a whole page, every
    match outside it is older than the page, so the page is exact, and the indexes' part is never
    run (a one-time filter); a rarer fragment is answered by the trigram indexes, whose plan
    scales with its matches, not the table."""
    if fence.empty:
        return []
    full_sql, full_params = matching_sql(query, fence, limit, before)
    if len(query) < INSIDE_FROM:
        sql, params = full_sql, full_params
    else:
        recent, recent_params = recent_sql(query, fence, limit, before)
        sql = (f"WITH hits AS MATERIALIZED ({recent}) SELECT id FROM ("  # nosec B608  # fixed fragments of this module; values bound
               "SELECT job_id AS id FROM hits WHERE (SELECT count(*) FROM hits) = %s "
               f"UNION ALL SELECT id FROM ({full_sql}) AS indexed WHERE (SELECT count(*) FROM hits) < %s"
               ") AS found ORDER BY id DESC LIMIT %s")
        params = [*recent_params, limit, *full_params, limit, limit]
    with without_parallel_workers(), connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [row[0] for row in cursor.fetchall()]


def exact_job(query: str, fence: TenantFence) -> Job | None:
    """The job whose whole id or idempotency key is `query`, in any case (the prefix indexes serve it)."""
    if fence.empty:
        return None
    wanted = query.upper()
    jobs = Job.objects.annotate(upper_id=Upper("job_id"), upper_key=Upper("idempotency_key"))
    return fence.jobs(jobs.filter(Q(upper_id=wanted) | Q(upper_key=wanted))).only(*COLUMNS).order_by("pk").first()


def parse_cursor(cursor: str) -> int | None:
    try:
        return int(cursor) if cursor else None
    except ValueError:
        return None


def find_jobs(query: str, fence: TenantFence, *, cursor: str = "", shown: int = SHOWN) -> SearchResult:
    """A page of the fenced tenants' jobs matching `query`, newest first. An empty query finds nothing."""
    query = query.strip()
    if not query:
        return SearchResult(query, [])
    before = parse_cursor(cursor)
    ids = matching_ids(query, fence, shown + 1, before)  # one row past the page says whether more match
    jobs = sorted(Job.objects.filter(pk__in=ids[:shown]).only(*COLUMNS), key=lambda job: -job.pk)
    return SearchResult(
        query,
        jobs,
        next_cursor=str(jobs[-1].pk) if len(ids) > shown else None,
        cursor=str(before) if before is not None else "",
        exact=exact_job(query, fence) if before is None else None,
    )
