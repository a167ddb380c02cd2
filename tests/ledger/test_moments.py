from datetime import UTC, datetime, timedelta

import pytest

from ledger.moments import ago, when

NOW = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    "delta, text",
    [
        (timedelta(seconds=44), "just now"),
        (timedelta(seconds=50), "1 minute ago"),
        (timedelta(minutes=2), "2 minutes ago"),
        (timedelta(minutes=90), "1 hour ago"),
        (timedelta(days=2, hours=3), "2 days ago"),
        (timedelta(minutes=-10), "in 10 minutes"),
        (timedelta(seconds=-5), "in a few seconds"),
    ],
)
def test_a_sentence_says_how_long_ago_in_words(delta, text):
    assert ago(delta) == text


def test_a_table_says_it_in_the_same_units_abbreviated():
    assert [ago(timedelta(minutes=m), short=True) for m in (2, 90, 3 * 24 * 60, -10)] == [
        "2 min ago", "1 h ago", "3 d ago", "in 10 min"]


def test_when_gives_the_time_and_how_long_ago(settings):
    settings.TIME_ZONE = "UTC"
    assert when(NOW - timedelta(minutes=2), NOW) == "11:58:00 (2 minutes ago)"
    assert when(NOW - timedelta(days=1), NOW) == "2024-12-31 12:00:00 (1 day ago)"
