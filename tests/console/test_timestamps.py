from datetime import UTC, datetime, timedelta

import pytest

from console.templatetags.console import ago, stamp, state_change

NOW = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    "delta, text",
    [
        (timedelta(seconds=5), "just now"),
        (timedelta(minutes=12), "12 min ago"),
        (timedelta(minutes=90), "1 h ago"),
        (timedelta(hours=5, minutes=59), "5 h ago"),
        (timedelta(days=3), "3 d ago"),
        (timedelta(minutes=-10), "in 10 min"),
    ],
)
def test_ages_read_like_speech(delta, text):
    assert ago(NOW - delta, NOW) == text


def test_a_stamp_carries_the_exact_time_for_machines_and_hover():
    html = stamp(NOW)
    assert 'datetime="2025-01-01T12:00:00+00:00"' in html and "2025-01-01 12:00" in html and "ago" in html
    assert stamp(None) == "—"


def test_only_the_states_that_changed_are_shown():
    before = {"job": "running", "attempt": 1, "execution": "running", "side_effect": "submitted"}
    after = {**before, "job": "needs_reconciliation", "execution": "unknown", "side_effect": "ambiguous"}
    assert state_change(before, after) == [
        ("job", "running", "needs_reconciliation"),
        ("execution", "running", "unknown"),
        ("side_effect", "submitted", "ambiguous"),
    ]
