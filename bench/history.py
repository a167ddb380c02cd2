"""`bench --only history` (issue 28): a generated history of 30 days in weekly partitions, then a
retention pass (7 days) run while the ledger cycle runs beside it; at two sizes, so that what a
larger history costs can be extrapolated (the pass, the archive and its verification are linear
in the events they move)."""

from __future__ import annotations

import statistics
import threading
import time
from pathlib import Path

from django.conf import settings
from django.db import connection, connections, transaction

from bench.generate import empty_ledger, generate
from bench.sections import ledger_cycles
from ledger import archive
from ledger.partitions import EVENTS, partitions
from ledger.services.retention import run_retention_pass

TABLES = ("ledger_job", "ledger_attempt", "ledger_jobsearchtext")
YEAR = 365  # the pages are measured over a year of history (issue 28: "over a simulated year")


def _disk_bytes() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT coalesce(sum(pg_total_relation_size(inhrelid)), 0) FROM pg_inherits "
                       "WHERE inhparent = %s::regclass", [EVENTS])
        (events,) = cursor.fetchone()
        cursor.execute("SELECT sum(pg_total_relation_size(t::regclass)) FROM unnest(%s::text[]) t", [list(TABLES)])
        (rest,) = cursor.fetchone()
    return int(events) + int(rest)


# The chain trigger's lookup (migration 0006, ledger.models.CHAIN_HASH): the job's latest event.
PREVIOUS_HASH = (f"SELECT e.hash FROM {EVENTS} e WHERE e.job_id = %s ORDER BY e.id DESC LIMIT 1")  # nosec B608  # fixed table name
COMMENT = (f"INSERT INTO {EVENTS} (job_id, actor_type, actor, kind, \"before\", \"after\", note, evidence, "  # nosec B608  # fixed table name
           "prev_hash, hash) VALUES (%s, 'operator', 'bench', 'job_commented', '{}', '{}', 'bench', '{}', '', '')")


def chain_lookup(*, counts: tuple[int, ...], attempts: int, inserts: int) -> list[dict]:
    """Events written through the hash-chain trigger with `count` weekly partitions online (a
    history of `attempts` spread over them): the trigger looks up the job's previous event by
    (job_id, id) in every partition. Its plan (index scans only?), the lookup's median and the
    inserts per second (in one transaction, rolled back: the trigger's cost, not the commit's), for
    each count in turn (not side by side: each count is its own layout)."""
    import json
    import random
    import statistics

    rows = []
    for count in counts:
        settings.RECKON_HISTORY_PARTITION_DAYS = 7
        empty_ledger(days=7 * count - 1)
        generate(attempts=attempts, queued=0, prefix=f"chain-{count}", days=7 * count - 1)
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE ledger_ledgerevent")
            cursor.execute("SELECT id FROM ledger_job")
            jobs = [pk for (pk,) in cursor.fetchall()]
            picked = random.Random(count).sample(jobs, min(inserts, len(jobs)))  # nosec B311  # a sample, not security
            cursor.execute("EXPLAIN " + PREVIOUS_HASH, [picked[0]])
            plan = "\n".join(line for (line,) in cursor.fetchall())
            executed, planned = [], []
            for pk in picked[:100]:  # the lookup inside the database: its execution, and its planning apart
                cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + PREVIOUS_HASH, [pk])
                (explained,) = cursor.fetchone()
                explained = json.loads(explained) if isinstance(explained, str) else explained
                executed.append(explained[0]["Execution Time"])
                planned.append(explained[0]["Planning Time"])
            with transaction.atomic():
                started = time.perf_counter()
                for pk in picked:
                    cursor.execute(COMMENT, [pk])
                elapsed = time.perf_counter() - started
                transaction.set_rollback(True)
        nodes = [line.strip().removeprefix("->").strip() for line in plan.splitlines() if "(cost=" in line]
        scans = [node for node in nodes if f" on {EVENTS}" in node]
        rows.append({
            "partitions": len(partitions()), "events": _events(),
            "index_scans": sum(node.startswith("Index") for node in scans),
            "other_scans": sum(not node.startswith("Index") for node in scans),
            "lookup_median_ms": round(statistics.median(executed), 3),
            "planning_median_ms": round(statistics.median(planned), 3),
            "inserts_per_s": round(len(picked) / elapsed),
        })
    return rows


def _events() -> int:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {EVENTS}")  # nosec B608  # fixed table name
        return cursor.fetchone()[0]


def _one_size(attempts: int, *, workers: int, seconds: float, folder: Path) -> dict:
    settings.RECKON_HISTORY_PARTITION_DAYS = 7  # weekly: a 7-day retention moves about half the 30 days out
    empty_ledger()
    generate(attempts=attempts, queued=0, prefix=f"hist-{attempts}")
    events_before, disk_before = _events(), _disk_bytes()
    without = ledger_cycles(workers=workers, seconds=seconds, prefix=f"hist-a-{attempts}")

    outcome = {}

    def retention():
        started = time.monotonic()
        try:
            outcome["result"] = run_retention_pass()
        finally:
            outcome["seconds"] = time.monotonic() - started
            connections.close_all()

    settings.RECKON_HISTORY_ARCHIVE_DIR = str(folder / f"size-{attempts}")
    settings.RECKON_HISTORY_RETENTION_DAYS = 7.0
    with connection.cursor() as cursor:  # what the pass will free: the partitions past retention
        cursor.execute("SELECT now() - interval '7 days'")
        (horizon,) = cursor.fetchone()
        expired = [p.name for p in partitions() if p.end <= horizon]
        cursor.execute("SELECT coalesce(sum(pg_total_relation_size(t::regclass)), 0) FROM unnest(%s::text[]) t",
                       [expired])
        (expired_bytes,) = cursor.fetchone()
    settings.RECKON_HISTORY_RETENTION_BY_TENANT = {}
    thread = threading.Thread(target=retention)
    thread.start()
    # The cycle's rate in windows of `seconds` for as long as the pass runs (the last window, which
    # outlasts the pass, counts only when it is the one window): the whole pass, not its start.
    windows = []
    while not windows or thread.is_alive():
        windows.append(ledger_cycles(workers=workers, seconds=seconds, prefix=f"hist-b-{attempts}-{len(windows)}"))
    thread.join()
    during = statistics.mean(windows[:-1] or windows)
    # Without the pass: the windows before it and after it (one alone moved by half between runs).
    without = statistics.mean([without, ledger_cycles(workers=workers, seconds=seconds, prefix=f"hist-c-{attempts}")])
    result = outcome["result"]
    archived = sum(c.events for c in result.archived)
    files = [Path(c.archive_file) for c in result.archived]
    started = time.monotonic()
    for path in files:
        archive.verify(path)
    verify_s = time.monotonic() - started
    size = sum(path.stat().st_size for path in files)
    per_million = 1_000_000 / max(archived, 1)
    return {
        "attempts": attempts, "events": events_before, "partitions_archived": len(result.archived),
        "events_archived": archived, "pass_s": round(outcome["seconds"], 2),
        "cycles_s_without": round(without), "cycles_s_during": round(during), "windows_during": len(windows),
        "ratio": round(during / max(without, 1), 2),
        "archive_mb_per_M_events": round(size / 2**20 * per_million, 1),
        "verify_events_per_s": round(archived / max(verify_s, 1e-6)),
        "pass_s_per_M_events": round(outcome["seconds"] * per_million, 1),
        "disk_mb_before": round(disk_before / 2**20, 1),
        "event_mb_dropped": round(int(expired_bytes) / 2**20, 1),
        # after: the jobs the cycles made during and after the pass are in it too
        "disk_mb_after": round(_disk_bytes() / 2**20, 1),
    }


def history(*, sizes: tuple[int, int], workers: int, seconds: float, folder: Path) -> dict:
    rows = [_one_size(attempts, workers=workers, seconds=seconds, folder=folder) for attempts in sizes]
    small, large = rows
    # Linear in the events moved: seconds and bytes per event from the larger run, the fixed cost
    # from the difference between the two.
    slope = (large["pass_s"] - small["pass_s"]) / max(large["events_archived"] - small["events_archived"], 1)
    target_events = 30_000_000
    return {"rows": rows, "extrapolated_30M_events": {
        "pass_s": round(small["pass_s"] + slope * (target_events - small["events_archived"]), 1),
        "archive_gb": round(large["archive_mb_per_M_events"] * 30 / 1024, 2),
        "verify_s": round(target_events / max(large["verify_events_per_s"], 1), 1),
    }}
