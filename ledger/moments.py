"""How a moment reads to people: "14:02:07 (2 minutes ago)" in a sentence, "12 min ago" in a table.

One wording for the console's timestamps and for the refusals that say who changed a job and when.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.utils import timezone

UNITS = (("day", "d", 86400), ("hour", "h", 3600), ("minute", "min", 60))


def ago(delta: timedelta, *, short: bool = False) -> str:
    """How long ago, as people say it: "just now", "1 minute ago", "3 hours ago" (`short`: "3 h ago").
    A negative delta is a moment still to come: "in 10 minutes"."""
    seconds = int(delta.total_seconds())
    future, seconds = seconds < 0, abs(seconds)
    if seconds < 45:
        return "in a few seconds" if future else "just now"
    for word, abbreviation, size in UNITS:
        if seconds >= size or size == 60:
            amount = max(1, round(seconds / size)) if size == 60 else seconds // size
            unit = abbreviation if short else f"{word}{'s' if amount != 1 else ''}"
            return f"in {amount} {unit}" if future else f"{amount} {unit} ago"
    return ""  # unreachable: the last unit takes every remaining case


def when(at: datetime, now: datetime) -> str:
    """"14:02:07 (2 minutes ago)", in the console's time zone (with the date when not today)."""
    return f"{shown_time(at, now)} ({ago(now - at)})"


def shown_time(at: datetime, now: datetime | None = None) -> str:
    """"14:02:07" today, "2026-11-30 14:02:07" on another day (in the console's time zone)."""
    local, today = timezone.localtime(at), timezone.localtime(now or timezone.now()).date()
    return local.strftime("%H:%M:%S") if local.date() == today else local.strftime("%Y-%m-%d %H:%M:%S")


def kept_time(at: datetime) -> str:
    """For text that stays (a note, a message read later): "2026-12-01 14:02:07 UTC"."""
    return timezone.localtime(at).strftime("%Y-%m-%d %H:%M:%S %Z")
