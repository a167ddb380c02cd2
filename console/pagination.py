"""Keyset pagination: a page starts after the last row of the previous one, never at an OFFSET.

A cursor is the ordering key of a row, written into a URL: "<microseconds since epoch>.<id>"
for (created_at, id), or just "<id>". A cursor that does not parse means "the first page".
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICROSECOND = timedelta(microseconds=1)


def encode_time_cursor(at: datetime, pk: int) -> str:
    return f"{(at - EPOCH) // MICROSECOND}.{pk}"


def decode_time_cursor(cursor: str) -> tuple[datetime, int] | None:
    micros, _, pk = (cursor or "").partition(".")
    try:
        return EPOCH + int(micros) * MICROSECOND, int(pk)
    except (ValueError, OverflowError):
        return None


def decode_id_cursor(cursor: str) -> int | None:
    try:
        return int(cursor)
    except (TypeError, ValueError):
        return None


@dataclass
class Page:
    rows: list
    next_cursor: str | None  # None: this is the last page

    def __iter__(self):
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)


def take_page(query, size: int, cursor_of) -> Page:
    """Fetch one row more than the page to learn whether another page follows."""
    rows = list(query[: size + 1])
    if len(rows) > size:
        return Page(rows[:size], cursor_of(rows[size - 1]))
    return Page(rows, None)
