"""Reads for the console pages: QuerySets and small functions, never a write."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection, transaction


@contextmanager
def without_parallel_workers() -> Iterator[None]:
    """Plans that read a page through indexes, without parallel workers: on a large history the
    planner starts two for a few index probes (one per event partition), and their start cost the
    search and the audit page 10-17 ms each of a query taking 0.2 ms (measured at 1M attempts)."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('max_parallel_workers_per_gather'), "
                       "set_config('max_parallel_workers_per_gather', '0', true)")
        before = cursor.fetchone()[0]
        yield
        # Within a longer transaction (a test's, or ATOMIC_REQUESTS), the rest of it plans as before.
        cursor.execute("SELECT set_config('max_parallel_workers_per_gather', %s, true)", [before])
