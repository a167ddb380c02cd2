"""The search's word indexes (issue 28): whole words and word starts, for fragments that hold them.

A trigram index answers `ILIKE '%fragment%'` from the fragment's trigrams, which lose their order:
`inv_0000000003` has no trigram that most invoice ids lack, so at 1M attempts its trigram scan
rechecked 23,434 answers for one match, and the middle of a job id read 2,219 index pages. A
fragment with a separator inside says more than its trigrams: a word between two separators is a
whole word of the text, and the word after the last separator starts one. These GIN indexes hold
each text's words (runs of letters and digits, lower case, at most 200 characters each: the rest of
a longer run is cut, as a tsvector refuses words over 2 KB), so console.selectors.search finds
`'0000000003':*` or `'year' & 'a' & '0000605':*` in a few index pages, and rechecks the whole
fragment with ILIKE.

A tsvector holds at most 1 MB of words, so only a text's first 65,536 characters are split into
words; a longer text carries the word `_long` (no text's word: `_` is not a letter or digit), which
every word query also asks for, so a long text is always rechecked and no match is lost.

The indexes are built CONCURRENTLY: on a deployment with millions of jobs the build takes minutes,
and enqueueing a job writes its search text. The expressions are repeated in
console.selectors.search (a query uses an index only when it spells the index's expression).
"""

from django.db import migrations

ANSWER_TEXT = "(result_ref || ' ' || error)"


def words(text: str) -> str:
    return (
        "(to_tsvector('simple'::regconfig, regexp_replace(regexp_replace(left(" + text + ", 65536), "
        "'[^[:alnum:]]+', ' ', 'g'), '([[:alnum:]]{200})[[:alnum:]]+', '\\1', 'g')) || "
        "CASE WHEN length(" + text + ") > 65536 THEN '_long'::tsvector ELSE ''::tsvector END)"
    )


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("ledger", "0024_batchfast_set_based_batch_steps")]

    operations = [
        migrations.RunSQL(
            f"CREATE INDEX CONCURRENTLY IF NOT EXISTS job_search_words ON ledger_jobsearchtext USING gin ({words('text')})",
            "DROP INDEX CONCURRENTLY IF EXISTS job_search_words",
        ),
        migrations.RunSQL(
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS attempt_search_answer_words ON ledger_attempt USING gin "
            f"({words(ANSWER_TEXT)}) WHERE result_ref <> '' OR error <> ''",
            "DROP INDEX CONCURRENTLY IF EXISTS attempt_search_answer_words",
        ),
    ]
