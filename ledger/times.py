"""How Reckon writes a time for people, one format everywhere: the console's pages, refusal
messages and the notes kept in the history. Seconds, never microseconds; the time alone when it
is today, with the date when it is not; text that is kept always carries the date and the zone."""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone


def shown_time(at: datetime, now: datetime | None = None) -> str:
    """"14:02:07" today, "2026-11-30 14:02:07" on another day (in the console's time zone)."""
    local, today = timezone.localtime(at), timezone.localtime(now or timezone.now()).date()
    return local.strftime("%H:%M:%S") if local.date() == today else local.strftime("%Y-%m-%d %H:%M:%S")


def kept_time(at: datetime) -> str:
    """For text that stays (a note, a message read later): "2026-12-01 14:02:07 UTC"."""
    return timezone.localtime(at).strftime("%Y-%m-%d %H:%M:%S %Z")
