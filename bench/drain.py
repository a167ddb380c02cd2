"""Backlog drain: a large backlog of unknown jobs reconciled at provider latencies of 0, 50 and 200
ms, beside raw lookups at the same latency and concurrency, measured in the same run.

The backlog is written by COPY (as `bench.generate` writes history: the events' hash chain
computed here, every job's and attempt's states those of its last event): jobs of the three
queryable sandbox actions (invoices, mail, posts) whose worker lost sight of the call. Half of
them did reach the provider: their effect is created beforehand through the action's own
executor, so reconciliation finds some confirmed and some absent (replayed), as in life.

- **Cells**: for each latency and concurrency, raw lookups (the provider requests the jobs'
  reconcilers make, with the same client code, `concurrency` at a time in as many threads, no
  ledger) for a few seconds, then `reconcile_until_idle` on the backlog for as long, twice: with
  the common outcomes applied in the database (`ratio`, the one the targets judge) and with every
  finding applied by the Python path (`python_ratio`, as before reconciliation/fastpath.py),
  alternating which runs first; then raw again. Each ratio is taken against the faster raw run.
  The backlog is topped up before each pass, so every pass works against the full backlog.
- **Drains**: at each latency, the whole backlog drained by one `reconcile_until_idle` at the
  highest concurrency; its wall time, and the most database connections the benchmark's
  database had open meanwhile (sampled from `pg_stat_activity`: the pass's own, not one per
  lookup thread).
- **Three hosts**: three `manage.py reconcile --loop` processes share one backlog, released at
  once; every job must be looked up exactly once (one check per job), the processes' shares
  add up to the backlog, and the total rate is reported.
"""

from __future__ import annotations

import itertools
import os
import re
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlencode

import psycopg
from django.conf import settings
from django.db import connection
from django.db.models import Count
from django.utils import timezone

from bench.generate import unknown_jobs
from chaos.world import World, wait_until
from config.processes import ChildProcess
from ledger.actions import Succeeded
from ledger.models import Job
from ledger.providers import call
from reconciliation.models import ReconciliationCheck

ACTIONS = ("billing.create_invoice", "mail.send", "social.publish_post")
PROFILE, ACCOUNT = "bench-profile", "bench-account"
HELD = timedelta(days=1)  # a held backlog is not due until released


# --- the backlog ---------------------------------------------------------------------------------

def _payload(action: str, n: int) -> tuple[dict, dict]:
    """A job's payload and identity for `action`."""
    if action == "billing.create_invoice":
        return {"customer": f"cus_{n % 97}", "amount_cents": 100 + n % 1000, "currency": "EUR"}, {}
    if action == "mail.send":
        return {"to": "a@bench.example", "subject": "drain", "body": str(n)}, {}
    return {"body": f"post {n}"}, {"profile": PROFILE, "account": ACCOUNT}


def backlog(world: World, *, count: int, prefix: str, held: bool = False) -> list[str]:
    """`count` unknown jobs across the queryable actions (due now, or held until `release`); half
    of them reached the provider. Returns their job ids."""
    from sandbox import demo_actions

    executors = {"billing.create_invoice": demo_actions.create_invoice, "mail.send": demo_actions.send_mail,
                 "social.publish_post": demo_actions.publish_post}
    jobs = []
    for n in range(count):
        action = ACTIONS[n % len(ACTIONS)]
        name = f"{prefix}-{n:07d}"
        payload, identity = _payload(action, n)
        jobs.append(Job(job_id=name, tenant="bench", action=action, payload=payload,
                        identity=identity, idempotency_key=f"{action}:{name}"))

    # The effects first, through the actions' own executors, with the provider answering at once.
    latency = world.sandbox.request("GET", "/_admin/latency").json["ms"]
    world.sandbox.set_latency(0)
    try:
        world.sandbox.request("PUT", f"/_admin/profiles/{PROFILE}", {"account": ACCOUNT})
        with ThreadPoolExecutor(4) as pool:
            outcomes = list(pool.map(lambda job: executors[job.action](job), jobs[::2]))
    finally:
        world.sandbox.set_latency(latency)
    refused = [outcome for outcome in outcomes if not isinstance(outcome, Succeeded)]
    if refused:
        raise RuntimeError(f"the sandbox refused {len(refused)} effects of the backlog: {refused[0]}")
    unknown_jobs([(job.job_id, job.tenant, job.action, job.payload, job.identity) for job in jobs],
                 next_check_at=timezone.now() + HELD if held else None, note="bench: observation lost")
    return [job.job_id for job in jobs]


def release(prefix: str) -> None:
    """Make a held backlog due now, all at once."""
    with connection.cursor() as cursor:
        cursor.execute("UPDATE ledger_job SET next_check_at = NULL WHERE job_id LIKE %s AND status = %s",
                       [f"{prefix}-%", "needs_reconciliation"])


def _waiting() -> int:
    return Job.objects.filter(status="needs_reconciliation").count()


def _top_up(world: World, *, size: int, prefixes: itertools.count) -> None:
    missing = size - _waiting()
    if missing > 0:
        backlog(world, count=missing, prefix=f"drain{next(prefixes)}")


# --- raw lookups ---------------------------------------------------------------------------------

def _lookup_urls(job: Job) -> list[str]:
    """The requests the job's reconciler makes (sandbox.reconcilers), in the same order."""
    key = job.idempotency_key
    if job.action == "billing.create_invoice":
        base = f"{settings.RECKON_BILLING_URL}/invoices"
        return [f"{base}?{urlencode({'idempotency_key': key})}", f"{base}?{urlencode({'marker': key})}"]
    if job.action == "mail.send":
        return [f"{settings.RECKON_MAIL_URL}/messages?{urlencode({'marker': key})}"]
    return [f"{settings.RECKON_PUBLISH_URL}/posts?{urlencode({'marker': key})}"]


def raw_lookups(jobs: list[Job], *, concurrency: int, seconds: float) -> tuple[float, int]:
    """Jobs' worth of provider lookups per second: `concurrency` threads, each looking the next job
    up (all of its reconciler's requests, in order) until `seconds` have passed. Returns the rate
    and how many jobs were looked up."""
    from reconciliation.lookups import SWITCH_INTERVAL_S

    sys.setswitchinterval(min(sys.getswitchinterval(), SWITCH_INTERVAL_S))  # as the reconciler's threads have it
    urls = [_lookup_urls(job) for job in jobs]
    feed = itertools.cycle(urls)
    lock, done = threading.Lock(), [0]
    deadline = time.monotonic() + seconds

    def looker() -> None:
        while time.monotonic() < deadline:
            with lock:
                job_urls = next(feed)
            for url in job_urls:
                reply = call("GET", url)
                if not reply.ok:
                    raise RuntimeError(f"raw lookup {url}: {reply.status} {reply.error}")
            with lock:
                done[0] += 1

    started = time.monotonic()
    with ThreadPoolExecutor(concurrency) as pool:
        for future in [pool.submit(looker) for _ in range(concurrency)]:
            future.result()
    return done[0] / (time.monotonic() - started), done[0]


# --- where the CPU goes ---------------------------------------------------------------------------

TICK = os.sysconf("SC_CLK_TCK")


def tree_cpu(root: int | None) -> float:
    """CPU seconds used so far by process `root` and its descendants (the exited ones included)."""
    if root is None:
        return 0.0
    parents, times = {}, {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            parents[int(entry.name)] = int(fields[1])
            times[int(entry.name)] = sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
    tree, frontier = {root}, {root}
    while frontier:
        frontier = {pid for pid, ppid in parents.items() if ppid in frontier} - tree
        tree |= frontier
    return sum(times.get(pid, 0) for pid in tree) / TICK


def cpu_snapshot(world: World) -> dict[str, float]:
    """CPU seconds so far of this process (the reconciler or the raw lookups), the sandbox and PostgreSQL."""
    own = os.times()
    return {"self": own.user + own.system, "sandbox": tree_cpu(world.sandbox.pid),
            "postgres": tree_cpu(world.cluster.postmaster_pid())}


def cpu_per_job(before: dict, after: dict, jobs: int) -> dict[str, float]:
    """CPU milliseconds per job, by process, between two snapshots."""
    return {name: round((after[name] - before[name]) * 1000 / max(jobs, 1), 2) for name in before}


# --- connections while draining ------------------------------------------------------------------

class ConnectionSampler:
    """The most client connections to this database seen in `pg_stat_activity` while running, from
    a connection of its own (not counted) polling every few milliseconds; `others`: not counting
    this process's own Django connection either."""

    def __init__(self, *, others: bool = False):
        params = connection.get_connection_params()
        self._conninfo = {k: v for k, v in params.items() if k in ("host", "port", "user", "password", "dbname")}
        connection.ensure_connection()
        self._own = connection.connection.info.backend_pid if others else 0
        self.most = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with psycopg.connect(**self._conninfo, autocommit=True) as conn:
            while not self._stop.is_set():
                count = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                                     "AND backend_type = 'client backend' AND pid <> pg_backend_pid() AND pid <> %s",
                                     [self._own]).fetchone()[0]
                self.most = max(self.most, count)
                self._stop.wait(0.005)  # the sampling period

    def __enter__(self) -> ConnectionSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


# --- the section -----------------------------------------------------------------------------------

def drain(world: World, *, size: int, latencies: tuple[int, ...], concurrencies: tuple[int, ...],
          seconds: float, hosts_size: int, hosts_latency: int, hosts_concurrency: int) -> dict:
    from reconciliation.passes import reconcile_until_idle

    prefixes = itertools.count()
    cells, drains = [], []
    for latency in latencies:
        world.sandbox.set_latency(latency)
        for concurrency in concurrencies:
            _top_up(world, size=size, prefixes=prefixes)
            sample = list(Job.objects.filter(status="needs_reconciliation").order_by("pk")[:2000])
            cpu = cpu_snapshot(world)
            raw_before, looked = raw_lookups(sample, concurrency=concurrency, seconds=seconds)
            cpu_raw = cpu_per_job(cpu, cpu_snapshot(world), looked)
            # Applied in the database and (before it) by the Python path, alternating which goes first.
            paths = {}
            for in_database in (True, False) if len(cells) % 2 == 0 else (False, True):
                _top_up(world, size=size, prefixes=prefixes)
                paths[in_database] = _reconcile(world, seconds=seconds, concurrency=concurrency,
                                                in_database=in_database)
            raw = max(raw_before, raw_lookups(sample, concurrency=concurrency, seconds=seconds)[0])
            (reconciled, jobs, cpu_reconcile), (python, _, cpu_python) = paths[True], paths[False]
            cells.append({"latency_ms": latency, "concurrency": concurrency, "jobs": jobs,
                          "reconciled_per_s": round(reconciled, 1), "raw_per_s": round(raw, 1),
                          "ratio": round(reconciled / raw, 3), "python_per_s": round(python, 1),
                          "python_ratio": round(python / raw, 3),
                          "cpu_ms_per_job_reconcile": cpu_reconcile, "cpu_ms_per_job_python": cpu_python,
                          "cpu_ms_per_job_raw": cpu_raw})
        _top_up(world, size=size, prefixes=prefixes)
        waiting = _waiting()
        with ConnectionSampler() as sampler:
            started = time.monotonic()
            decisions = reconcile_until_idle(concurrency=max(concurrencies))
            wall = time.monotonic() - started
        drains.append({"latency_ms": latency, "concurrency": max(concurrencies), "backlog": waiting,
                       "decisions": len(decisions), "left": _waiting(), "wall_s": round(wall, 2),
                       "reconciled_per_s": round(len(decisions) / wall, 1), "db_connections_max": sampler.most})
    world.sandbox.set_latency(hosts_latency)
    try:
        hosts = three_hosts(world, size=hosts_size, concurrency=hosts_concurrency,
                            prefix=f"hosts{next(prefixes)}")
    finally:
        world.sandbox.set_latency(0)
    return {"size": size, "seconds": seconds, "cells": cells, "drains": drains,
            "hosts": {"latency_ms": hosts_latency, **hosts}}


def _reconcile(world: World, *, seconds: float, concurrency: int, in_database: bool) -> tuple[float, int, dict]:
    """`reconcile_until_idle` on the backlog for `seconds`: jobs per second, jobs, CPU ms per job.
    `in_database` False: every finding applied by the Python path, as before the database function."""
    from reconciliation import fastpath
    from reconciliation.passes import reconcile_until_idle

    cpu, started = cpu_snapshot(world), time.monotonic()
    fastpath.ENABLED = in_database
    try:
        decisions = reconcile_until_idle(budget_s=seconds, concurrency=concurrency)
    finally:
        fastpath.ENABLED = True
    rate = len(decisions) / (time.monotonic() - started)
    return rate, len(decisions), cpu_per_job(cpu, cpu_snapshot(world), len(decisions))


def three_hosts(world: World, *, size: int, concurrency: int, prefix: str, processes: int = 3) -> dict:
    """`processes` `reconcile --loop` processes (as on as many hosts) drain one backlog released at
    once: every job looked up exactly once, their shares add up, the total rate."""
    ids = backlog(world, count=size, prefix=prefix, held=True)
    env = {**world.env(), "RECKON_RECONCILE_CONCURRENCY": str(concurrency), "PYTHONUNBUFFERED": "1"}
    argv = [sys.executable, str(Path(settings.BASE_DIR) / "manage.py"), "reconcile", "--loop", "--interval", "0.1"]
    logs = [world.workdir / f"{prefix}-{n}.log" for n in range(processes)]
    procs = [ChildProcess(argv, env=env, cwd=settings.BASE_DIR, log=log_path).start() for log_path in logs]
    try:
        with ConnectionSampler(others=True) as sampler:
            # Each process holds its one connection once its first (empty) pass has run.
            wait_until(lambda: sampler.most >= processes, timeout=120, what="the reconcilers to connect")
            jobs = Job.objects.filter(job_id__in=ids)
            started = time.monotonic()
            release(prefix)
            wait_until(lambda: not jobs.filter(status="needs_reconciliation").exists(), timeout=600,
                       interval=0.02, what="the three reconcilers to drain the backlog")
            wall = time.monotonic() - started

        def shares() -> list[int]:  # what each process says it reconciled, once its pass has ended
            return [sum(int(n) for n in re.findall(r"^reconciled (\d+) job", path.read_text(), re.M)) for path in logs]

        wait_until(lambda: sum(shares()) >= size, timeout=60, what="the reconcilers to end their passes")
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.stop(grace=30)
    checks = ReconciliationCheck.objects.filter(job__job_id__in=ids)
    per_job = checks.values("job").annotate(n=Count("id")).values_list("n", flat=True)
    return {"processes": processes, "concurrency": concurrency, "backlog": size, "checks": checks.count(),
            "jobs_checked": len(per_job), "most_checks_per_job": max(per_job, default=0), "shares": shares(),
            "wall_s": round(wall, 2), "reconciled_per_s": round(size / wall, 1),
            "db_connections_max": sampler.most}


# The full section and the quick one (`bench --quick`, inside `make test`): the same code paths.
FULL = {"size": 10_000, "latencies": (0, 50, 200), "concurrencies": (4, 16, 64), "seconds": 8.0,
        "hosts_size": 10_000, "hosts_latency": 50, "hosts_concurrency": 16}
# The quick run (make test): each path once, at the smallest size that exercises it: one concurrency
# (the highest, whose drain proves the lookup threads open no connection of their own), both latencies.
QUICK = {"size": 150, "latencies": (0, 50), "concurrencies": (16,), "seconds": 0.4,
         "hosts_size": 150, "hosts_latency": 50, "hosts_concurrency": 4}
