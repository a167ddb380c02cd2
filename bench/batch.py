"""Batched steps beside unbatched ones, in-process and over HTTP, 1 and 4 processes, in one run.

Each worker loops: claim the next jobs (N at once, or one), begin their side effects, record their
successes. Unbatched (N = 1) is today's worker: claim_next_job -> begin_side_effect ->
record_success, three transactions per effect. Batched: claim_next_jobs -> begin_side_effects ->
record_results, three transactions per N effects, every guarantee kept (fencing, the three ledgers,
an event per step and job, the hash chain). Over HTTP the same, through reckon_client against
gunicorn as runstack runs it (`Client.run_batch`: three requests per batch).

Beside each rate: commits (pg_stat_database.xact_commit), WAL flushes (pg_stat_wal.wal_sync) and
WAL bytes (pg_current_wal_lsn) per effect, read before and after on the bench's own cluster, which
has no other writer.

`batched_effects_per_s(processes=, batch=, seconds=)` is the in-process batched cycle alone, for
a section that puts Reckon beside its peers.
"""

from __future__ import annotations

import multiprocessing
import time

from django.conf import settings
from django.db import connection, connections

from bench.generate import pending_jobs
from bench.http_cycle import ACTION, serve_api
from bench.sections import in_processes
from chaos.world import World
from ledger import services
from ledger.models import Job
from ledger.states import JobStatus

SIZES = (1, 10, 50)  # 1: unbatched (today's one-job steps)
PROCESSES = (1, 4)
RATE_PER_PROCESS = 2500  # more effects per second than one process can do, to size the backlog


def _in_process(batch: int, seconds: float, queue) -> None:
    connections.close_all()  # a forked child opens its own connection
    settings.DEBUG = False
    worker = f"bench-batch-{multiprocessing.current_process().pid}"
    done, started = 0, time.monotonic()
    while time.monotonic() - started < seconds:
        if batch == 1:
            lease = services.claim_next_job(worker=worker, actions=[ACTION])
            if lease is None:
                break
            services.begin_side_effect(lease=lease)
            services.record_success(lease=lease, result_ref="bench")
            done += 1
            continue
        leases = services.claim_next_jobs(worker=worker, limit=batch, actions=[ACTION])
        if not leases:
            break
        begun = services.begin_side_effects(leases=leases)
        outcomes = [services.Outcome.succeeded(lease, "bench") for lease, attempt in zip(leases, begun, strict=True)
                    if not isinstance(attempt, services.LedgerError)]
        services.record_results(outcomes=outcomes)
        done += len(outcomes)
    queue.put((done, time.monotonic() - started))
    connections.close_all()


def _over_http(url: str, token: str, batch: int, seconds: float, queue) -> None:
    from reckon_client import Client

    connections.close_all()
    client = Client(url, token)
    worker = f"bench-batch-{multiprocessing.current_process().pid}"
    done, started = 0, time.monotonic()
    while time.monotonic() - started < seconds:
        if batch == 1:
            lease = client.next_lease(worker, actions=[ACTION], wait_seconds=0)
            if lease is None:
                break
            lease.begin()
            lease.succeeded("bench")
            done += 1
            continue
        report = client.run_batch(worker, lambda lease: "bench", max=batch, actions=[ACTION], wait_seconds=0)
        if not report.claimed:
            break
        done += report.recorded.get("succeeded", 0)
    client.close()
    queue.put((done, time.monotonic() - started))


def _counters() -> tuple[int, int, int]:
    """(commits in this database, WAL flushes, WAL position in bytes), as the cluster counts them now."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute("SELECT (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()), "
                       "(SELECT wal_sync FROM pg_stat_wal), (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint")
        return cursor.fetchone()


def _backlog(count: int, prefix: str) -> None:
    """At least `count` pending jobs of the bench's action (what an earlier run left is used first)."""
    waiting = Job.objects.filter(action=ACTION, status=JobStatus.PENDING).count()
    if count > waiting:
        pending_jobs(count=count - waiting, prefix=prefix)


def measure(target, arguments: list[tuple], *, seconds: float, prefix: str) -> dict:
    """`target` in a process per item of `arguments`: effects per second, and commits, WAL flushes and
    WAL bytes per effect."""
    _backlog(int(seconds * RATE_PER_PROCESS) * len(arguments) + 100, prefix)
    before = _counters()
    succeeded = Job.objects.filter(action=ACTION, status=JobStatus.SUCCEEDED).count()
    rate = in_processes(target, arguments, seconds)
    done = max(Job.objects.filter(action=ACTION, status=JobStatus.SUCCEEDED).count() - succeeded, 1)
    after = _counters()
    commits, syncs, wal = (b - a for a, b in zip(before, after, strict=True))
    return {"effects_per_s": round(rate, 1), "commits_per_effect": round(commits / done, 3),
            "wal_syncs_per_effect": round(syncs / done, 3), "wal_bytes_per_effect": round(wal / done)}


def batched_effects_per_s(*, processes: int, batch: int, seconds: float, prefix: str = "peer") -> float:
    """Reckon's in-process worker cycle with batches of `batch` jobs (1: unbatched), in `processes`
    processes for `seconds`: recorded side effects per second. Needs the bench's database (a World)."""
    return measure(_in_process, [(batch, seconds)] * processes, seconds=seconds,
                   prefix=f"{prefix}{processes}x{batch}")["effects_per_s"]


def batched_cycles(world: World, *, seconds: float, sizes=SIZES, processes=PROCESSES) -> list[dict]:
    """Every batch size, in-process and over HTTP, with 1 and 4 processes; the rates side by side
    (batched vs unbatched in the same way and processes, HTTP vs in-process at the same size)."""
    from api.tokens import worker_token_create

    server, url = serve_api(world)
    rows = []
    try:
        token = worker_token_create(name="bench-batch", tenants="*", actions=[ACTION]).token  # reversible: nobody behind it
        for count in processes:
            for size in sizes:
                for way in ("in_process", "http"):
                    arguments = ([(size, seconds)] if way == "in_process" else [(url, token, size, seconds)]) * count
                    figures = measure(_in_process if way == "in_process" else _over_http, arguments,
                                      seconds=seconds, prefix=f"batch{count}x{size}{way[0]}")
                    rows.append({"way": way, "processes": count, "batch": size, **figures})
    finally:
        server.stop()
        world.workers.remove(server)
    rate = {(r["way"], r["processes"], r["batch"]): r["effects_per_s"] for r in rows}
    for row in rows:
        row["vs_unbatched"] = round(row["effects_per_s"] / max(rate[(row["way"], row["processes"], 1)], 0.1), 3)
        row["http_vs_in_process"] = round(rate[("http", row["processes"], row["batch"])]
                                          / max(rate[("in_process", row["processes"], row["batch"])], 0.1), 3)
    return rows
