"""The benchmark's sections. Each returns rows of figures measured side by side in one run."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

from django.conf import settings
from django.db import connection, connections
from django.db.models import Max
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django_q.models import OrmQ

from bench.generate import HISTORY_DAYS, answer, empty_ledger, generate, pending_jobs
from chaos.world import World, wait_until
from config.localdb import find_bindir
from config.processes import ChildProcess, accepting, free_port
from console.selectors.search import WORD_INDEXES
from ledger import services
from ledger.models import Job
from ledger.providers import call

# --- ledger cycle throughput vs pgbench -N ------------------------------------------------

def _cycle_worker(job_ids: list[str], seconds: float, queue) -> None:
    connections.close_all()  # a forked child must open its own connection
    settings.DEBUG = False  # as in production: no query log kept per statement
    worker = f"bench-{multiprocessing.current_process().pid}"
    done, started = 0, time.monotonic()
    for job_id in job_ids:
        if time.monotonic() - started > seconds:
            break
        lease = services.claim_job(job_id=job_id, worker=worker)
        services.begin_side_effect(lease=lease)
        services.record_success(lease=lease, result_ref="bench")
        done += 1
    queue.put((done, time.monotonic() - started))
    connections.close_all()


def ledger_cycles(*, workers: int, seconds: float, prefix: str) -> float:
    """claim -> begin side effect -> record success, in `workers` processes; cycles per second."""
    per_worker = int(seconds * 1500) + 50  # more jobs than a worker can finish in time
    job_ids = pending_jobs(count=per_worker * workers, prefix=prefix)
    return in_processes(_cycle_worker, [(job_ids[i::workers], seconds) for i in range(workers)], seconds)


def in_processes(target, arguments: list[tuple], seconds: float) -> float:
    """Run `target(*args, queue)` in a forked process per item of `arguments`, each putting
    (done, elapsed) on the queue; the work done per second by them all."""
    connections.close_all()
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    procs = [context.Process(target=target, args=(*args, queue)) for args in arguments]
    for proc in procs:
        proc.start()
    results = [queue.get(timeout=seconds + 120) for _ in procs]
    for proc in procs:
        proc.join()
    return sum(done for done, _ in results) / max(elapsed for _, elapsed in results)


def pgbench_tps(world: World, *, clients: int, seconds: float) -> float:
    return pgbench_run(world, clients=clients, seconds=seconds)[0]


def pgbench_run(world: World, *, clients: int, seconds: float) -> tuple[float, int]:
    """`pgbench -N` on the world's cluster (its database made once): TPS and transactions processed."""
    base, env = pgbench_command(world)
    done = subprocess.run(base + ["-N", "-n", "-c", str(clients), "-j", str(clients), "-T", str(max(1, int(seconds))),
                                  "pgbench"], check=True, capture_output=True, text=True, timeout=seconds + 120,  # nosec B603  # argv built here from the PostgreSQL bindir; no shell, no outside input
                          env=env)
    return (float(re.search(r"tps = ([\d.]+)", done.stdout).group(1)),
            int(re.search(r"number of transactions actually processed: (\d+)", done.stdout).group(1)))


def pgbench_command(world: World) -> tuple[list[str], dict]:
    """pgbench's argv up to its options, and its environment; its database initialised on first use."""
    base = [str(find_bindir() / "pgbench"), "-h", "127.0.0.1", "-p", str(world.cluster.port), "-U", "postgres"]
    env = {**os.environ, **world.cluster.client_env()}
    if not getattr(world, "_pgbench_ready", False):
        world.cluster.create_database("pgbench")
        init = subprocess.run(base + ["-i", "-s", "10", "-q", "pgbench"], capture_output=True, text=True, timeout=300,  # nosec B603  # argv built here from the PostgreSQL bindir; no shell, no outside input
                              env=env)
        if init.returncode != 0:
            raise RuntimeError(f"pgbench -i failed: {init.stderr.strip()[-500:]}")
        world._pgbench_ready = True
    return base, env


def cycle_throughput(world: World, *, seconds: float, clients=(1, 4, 8)) -> list[dict]:
    rows = []
    for n in clients:
        tps = pgbench_tps(world, clients=n, seconds=seconds)
        cycles = ledger_cycles(workers=n, seconds=seconds, prefix=f"cycle{n}")
        rows.append({"workers": n, "ledger_cycles_per_s": round(cycles, 1), "pgbench_tps": round(tps, 1),
                     "ratio": round(cycles / tps, 3)})
    return rows


# --- what the search's indexes (trigrams and words) cost writes ------------------------------

TRIGRAM_INDEXES = ("job_search_text", "attempt_search_answer")
SEARCH_INDEXES = (*TRIGRAM_INDEXES, *WORD_INDEXES.values())
# Each side of the measurement: which of the search's indexes are there (the trigger with any).
SEARCH_SIDES = {"with": SEARCH_INDEXES, "trigrams only": TRIGRAM_INDEXES, "without": ()}


def _wal_bytes() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint")
        return cursor.fetchone()[0]


SEARCH_TRIGGERS = ("reckon_job_search_text_insert", "reckon_job_search_text_update")


def _search_indexes(definitions: dict[str, str], *, present: tuple[str, ...]) -> None:
    """The search's indexes named `present` there and the others not; the trigger that writes each
    job's search text on with any of them."""
    with connection.cursor() as cursor:
        for name, definition in definitions.items():
            cursor.execute(definition.replace("CREATE INDEX", "CREATE INDEX IF NOT EXISTS", 1) if name in present
                           else f"DROP INDEX IF EXISTS {name}")
        for trigger in SEARCH_TRIGGERS:
            cursor.execute(f"ALTER TABLE ledger_job {'ENABLE' if present else 'DISABLE'} TRIGGER {trigger}")
        cursor.execute("CHECKPOINT")  # each side starts from a checkpoint: full-page images alike


def _enqueues(count: int, prefix: str) -> float:
    """`count` jobs through enqueue_job, one transaction each, as a producer makes them; per second."""
    started = time.monotonic()
    for n in range(count):
        services.enqueue_job(job_id=f"{prefix}-{n:06d}", tenant="bench", action="reckon.echo",
                             payload={"to": f"customer{n}@{prefix}.example", "subject": "Your receipt",
                                      "body": f"Thank you for your order #{n}."})
    return count / (time.monotonic() - started)


def search_index_cost(*, seconds: float, rounds: int, enqueues: int, workers: int = 4) -> list[dict]:
    """The ledger cycle (claim -> begin -> success, `workers` processes) and enqueue_job, with the
    search's indexes (and the trigger writing each job's search text) and without them, in
    alternating rounds: the rate of each and the WAL it wrote per job (pg_current_wal_lsn before
    and after; the bench's cluster has no other writer)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexrelid::regclass::text, pg_get_indexdef(indexrelid) FROM pg_index "
                       "WHERE indexrelid::regclass::text = ANY(%s)", [list(SEARCH_INDEXES)])
        definitions = dict(cursor.fetchall())
    if set(definitions) != set(SEARCH_INDEXES):
        raise RuntimeError(f"the search's indexes are not all there: {sorted(definitions)}")
    measured = {side: {"cycles_per_s": [], "cycle_wal": [], "enqueues_per_s": [], "enqueue_wal": []}
                for side in SEARCH_SIDES}
    queued_before = OrmQ.objects.aggregate(last=Max("id"))["last"] or 0
    try:
        for round_ in range(rounds):
            for side in list(SEARCH_SIDES)[::1 if round_ % 2 == 0 else -1]:
                _search_indexes(definitions, present=SEARCH_SIDES[side])
                prefix = f"trgm{round_}s{list(SEARCH_SIDES).index(side)}"
                per_worker = int(seconds * 1500) + 50
                job_ids = pending_jobs(count=per_worker * workers, prefix=prefix)
                wal = _wal_bytes()
                rate = in_processes(_cycle_worker, [(job_ids[i::workers], seconds) for i in range(workers)], seconds)
                done = Job.objects.filter(job_id__startswith=f"{prefix}-", status="succeeded").count()
                measured[side]["cycle_wal"].append((_wal_bytes() - wal) / max(done, 1))
                measured[side]["cycles_per_s"].append(rate)
                wal = _wal_bytes()
                measured[side]["enqueues_per_s"].append(_enqueues(enqueues, f"{prefix}e"))
                measured[side]["enqueue_wal"].append((_wal_bytes() - wal) / enqueues)
    finally:
        _search_indexes(definitions, present=SEARCH_INDEXES)
        # The enqueues dispatched their jobs as a producer's do: those tasks are the measurement's,
        # not work for the sections after it (they would queue ahead of end_to_end's warm-up).
        OrmQ.objects.filter(id__gt=queued_before).delete()
    rows = []
    for side, figures in measured.items():
        rows.append({"search_indexes": side,
                     "cycles_per_s": round(statistics.median(figures["cycles_per_s"]), 1),
                     "wal_bytes_per_cycle": round(statistics.median(figures["cycle_wal"])),
                     "enqueues_per_s": round(statistics.median(figures["enqueues_per_s"]), 1),
                     "wal_bytes_per_enqueue": round(statistics.median(figures["enqueue_wal"]))})
    return rows


# --- end-to-end overhead -------------------------------------------------------------------

def end_to_end(world: World, *, jobs: int) -> dict:
    """Jobs/s through real django-q2 workers calling the sandbox: ledger-tracked vs bare tasks."""
    from django_q.models import Success
    from django_q.tasks import async_task

    worker = world.worker("bench-e2e", workers=2)
    try:
        async_task("bench.tasks.warm_up")
        wait_until(lambda: Success.objects.filter(func="bench.tasks.warm_up").exists(), timeout=60,
                   what="the cluster to warm up")
        rss_start = _worker_rss(worker.process.pid)  # after warm-up: Django and the task code are loaded
        started = time.monotonic()
        for n in range(jobs):
            async_task("bench.tasks.bare_send", f"bare-{n}")
        wait_until(lambda: Success.objects.filter(func="bench.tasks.bare_send").count() >= jobs, timeout=300,
                   interval=0.1, what="the bare tasks")
        bare = jobs / (time.monotonic() - started)
        first = (Job.objects.order_by("-pk").values_list("pk", flat=True).first() or 0) + 1
        started = time.monotonic()
        for n in range(jobs):
            services.enqueue_job(job_id=f"e2e-{n}", tenant="bench", action="mail.send",
                                 payload={"to": "a@bench.example", "subject": "s", "body": str(n)})
        wait_until(lambda: Job.objects.filter(pk__gte=first, status="succeeded").count() >= jobs,
                   timeout=300, interval=0.1, what="the ledger-tracked jobs")
        tracked = jobs / (time.monotonic() - started)
        rss_end = _worker_rss(worker.process.pid)
    finally:
        worker.stop()
    return {"jobs": jobs, "bare_jobs_per_s": round(bare, 1), "ledger_jobs_per_s": round(tracked, 1),
            "ratio": round(tracked / bare, 3), "worker_rss_mb_start": rss_start, "worker_rss_mb_end": rss_end}


def _worker_rss(root_pid: int) -> float:
    """Resident memory (MB) of the cluster's largest process (its busiest worker)."""
    parents, rss = {}, {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                found = re.search(r"VmRSS:\s+(\d+)", (entry / "status").read_text())
                rss[int(entry.name)] = int(found.group(1)) if found else 0
            except (OSError, IndexError, ValueError):
                continue
    tree, frontier = {root_pid}, {root_pid}
    while frontier:
        frontier = {pid for pid, ppid in parents.items() if ppid in frontier} - tree
        tree |= frontier
    return round(max(rss.get(pid, 0) for pid in tree) / 1024, 1)


# --- reconciliation throughput -------------------------------------------------------------

def reconciliation(world: World, *, jobs: int) -> dict:
    """Unknown mail jobs resolved per second by the real reconciler, beside raw lookups made with
    the same client code at the same concurrency (the reconciler's lookup threads), measured just
    before and just after it; the ratio is taken against the faster of the two."""
    from reconciliation.lookups import Lookups, default_concurrency
    from reconciliation.passes import reconcile_until_idle

    concurrency = default_concurrency()

    keys = _unknown_mail_jobs(world, "rec", "mail.send", jobs)

    def raw_lookups() -> float:
        started = time.monotonic()
        with Lookups(concurrency, background=False) as pool:  # one at a time: plain sequential calls
            pool.map(lambda key: call("GET", f"{world.sandbox.url}/messages?marker={key}"), keys)
        return jobs / (time.monotonic() - started)

    raw_before = raw_lookups()
    started = time.monotonic()
    decisions = reconcile_until_idle(limit=100, concurrency=concurrency)
    resolved = jobs / (time.monotonic() - started)
    raw = max(raw_before, raw_lookups())
    webhook = _webhook_reconciliation(world, jobs=jobs, concurrency=concurrency)
    return {"jobs": jobs, "concurrency": concurrency, "decisions": len(decisions),
            "reconciled_per_s": round(resolved, 1), "raw_lookups_per_s": round(raw, 1),
            "ratio": round(resolved / raw, 3), **webhook,
            "webhook_vs_in_process": round(webhook["webhook_reconciled_per_s"] / resolved, 3)}


def _unknown_mail_jobs(world: World, prefix: str, action: str, jobs: int) -> list[str]:
    """Unknown mail jobs; half of them did reach the provider before the worker lost sight."""
    keys = []
    for n in range(jobs):
        job = services.enqueue_job(job_id=f"{prefix}-{n}", tenant="bench", action=action,
                                   payload={"to": "a@bench.example", "subject": "s", "body": str(n)})
        lease = services.claim_job(job_id=job.job_id, worker="bench")
        services.begin_side_effect(lease=lease)
        if n % 2 == 0:
            call("POST", f"{world.sandbox.url}/messages", body=job.payload | {},
                 headers={"X-Reckon-Marker": job.idempotency_key})
        services.record_unknown(lease=lease, reason="bench: observation lost")
        keys.append(job.idempotency_key)
    return keys


def _webhook_reconciliation(world: World, *, jobs: int, concurrency: int) -> dict:
    """The same work, reconciled by a webhook of the team's own: examples/webhook_receiver.py in
    its own process, asking the same sandbox; signed requests, parsed answers."""
    import secrets

    from ledger.actions import _registry
    from ledger.declarations import load_actions_file
    from reconciliation.passes import reconcile_until_idle

    port, secret = free_port(), secrets.token_urlsafe(32)
    os.environ["RECKON_BENCH_WEBHOOK_SECRET"] = secret
    declared = world.workdir / "bench-actions.toml"
    declared.write_text(
        '[actions."bench.webhook_mail"]\nexecutor = "python:sandbox.demo_actions.send_mail"\nreversible = true\n'
        f'queryable = true\nreconciler = "webhook"\nwebhook_url = "http://127.0.0.1:{port}/reckon"\n'
        'webhook_secrets = ["RECKON_BENCH_WEBHOOK_SECRET"]\n'
    )
    _registry.pop("bench.webhook_mail", None)
    load_actions_file(declared, required=True)
    _unknown_mail_jobs(world, "hook", "bench.webhook_mail", jobs)
    with ChildProcess([sys.executable, Path(settings.BASE_DIR) / "examples" / "webhook_receiver.py", str(port)],
                      env={"RECKON_WEBHOOK_SECRET": secret, "PROVIDER_URL": world.sandbox.url}):
        wait_until(lambda: accepting(port), timeout=15, what="the webhook receiver to listen")
        started = time.monotonic()
        decisions = reconcile_until_idle(limit=100, concurrency=concurrency)
        rate = jobs / (time.monotonic() - started)
    settled = sum(1 for d in decisions if d.applied in ("succeeded", "replayed"))
    return {"webhook_decisions": len(decisions), "webhook_settled": settled,
            "webhook_reconciled_per_s": round(rate, 1)}


# --- console at scale and selection cost ---------------------------------------------------

# The overview with its charts, and the header's job search, typed in another case: by most of the
# measured job's id (a page of neighbours), by a start every generated job shares, by the middle of
# an id, by what people paste (a customer's email address from a payload, an invoice id the provider
# answered); and the audit page's search by that email address.
PAGES = ("/", "/?range=1h", "/?range=7d", "/queue/", "/jobs/{job_id}/", "/audit/", "/search/?q={near}",
         "/search/?q={shared}", "/search/?q={middle}", "/search/?q={email}", "/search/?q={answer}",
         "/audit/?q={email}")


def _page_url(page: str, measured: dict) -> str:
    job_id = measured["job_id"]
    return page.format(job_id=job_id, near=job_id[:-3].upper(), shared=job_id[:3].upper(),
                       middle=job_id[3:-1], email=quote(measured["email"].upper()), answer=measured["answer"].lower())


def _console_client() -> tuple[Client, dict]:
    """A logged-in console client; the job whose page is measured (the oldest needing an operator)
    and the values searched for: one mail job's address (its payload), one invoice's id (its answer)."""
    from django.contrib.auth.models import User

    user, _ = User.objects.get_or_create(username="bench-admin", defaults={"is_superuser": True, "is_staff": True})
    client = Client()
    client.force_login(user)
    job_id = Job.objects.filter(status="needs_operator").order_by("created_at").values_list("job_id", flat=True).first()
    mail = Job.objects.filter(action="mail.send").order_by("pk").values_list("payload", flat=True)[1]
    # An invoice of the small history's finished jobs: its answer is its own in both histories.
    invoice = Job.objects.filter(action="billing.create_invoice", status="succeeded").order_by("pk").first()
    return client, {"job_id": job_id, "email": mail["to"], "answer": answer("billing.create_invoice", invoice.pk)}


def _sample_history(*, week: bool) -> None:
    """What the sampling schedule leaves for the overview's charts: with `week`, a week of level
    samples, one a minute; then this minute's sample and event counts, from the ledger as it is."""
    from alerts.tasks import sample_history

    if week:
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO alerts_levelsample (sampled_at, unknown_work, waiting_for_human, oldest_unknown_age_s,"
                " finished_jobs) SELECT at, 100 + (random() * 50)::int, 40, 3600, '{}' FROM generate_series("
                "now() - interval '7 days', now() - interval '1 minute', interval '1 minute') AS at"
            )
    sample_history()


def _page_probe(client: Client, url: str):
    def probe() -> tuple[float, dict]:
        with CaptureQueriesContext(connection) as captured:
            started = time.perf_counter()
            response = client.get(url)
            elapsed = (time.perf_counter() - started) * 1000
        return elapsed, {"status": response.status_code, "queries": len(captured.captured_queries)}
    return probe


def _selection_queries() -> dict:
    from console.access import EVERY_TENANT
    from console.selectors.search import SHOWN, matching_sql
    from ledger.models import Attempt
    from ledger.services import ClockTimestamp

    return {
        # The job search for a start every job `at_scale` generates shares (scale-a-…, scale-b-…),
        # in another case: an index walk that stops after a page.
        "search": matching_sql("Scale-", EVERY_TENANT, SHOWN + 1),
        # By a value inside one job's payload, in another case: the trigram indexes' bitmap.
        "search by a payload value": matching_sql("CUSTOMER1@GLOBEX.EXAMPLE", EVERY_TENANT, SHOWN + 1),
        "sweeper": Attempt.objects.filter(execution_state="running", lease_expires_at__lt=ClockTimestamp())
        .order_by("lease_expires_at").values_list("job__job_id", flat=True)[:500],
        "reconciler": Job.objects.due_for_reconciliation(ClockTimestamp()).values_list("pk", "job_id")[:100],
    }


def _selection_probe(query):
    """`query`: a QuerySet, or a statement and its parameters (the search's: planned without
    parallel workers, as console.selectors.search.matching_ids runs it)."""
    from console.selectors import without_parallel_workers

    def probe() -> tuple[float, dict]:
        sql, params = query if isinstance(query, tuple) else query.query.sql_with_params()
        serial = without_parallel_workers() if isinstance(query, tuple) else contextlib.nullcontext()
        with serial, connection.cursor() as cursor:
            started = time.perf_counter()
            cursor.execute(sql, params)
            cursor.fetchall()
            elapsed = (time.perf_counter() - started) * 1000
            cursor.execute("EXPLAIN " + sql, params)
            plan = "\n".join(row[0] for row in cursor.fetchall())
        return elapsed, {"seq_scan": "Seq Scan on ledger" in plan, "plan": plan}
    return probe


def _summary(timings: list[float], digits: int) -> dict:
    timings = sorted(timings)
    return {"median_ms": round(statistics.median(timings), digits),
            "p95_ms": round(timings[max(int(len(timings) * 0.95) - 1, 0)], digits)}


def _side_by_side(probe_factory, databases: list, repeats: int) -> list[tuple[list[float], dict]]:
    """The same probe on each database in turn, interleaved round by round (the order alternating),
    so that load from elsewhere on the machine falls on both sides of the ratio alike."""
    probes = []
    for database in databases:
        with _using(database):
            probes.append(probe_factory())
            probes[-1]()  # warm-up: plans, caches
    timings = [[] for _ in databases]
    facts = [{} for _ in databases]
    for round_ in range(repeats):
        order = range(len(databases)) if round_ % 2 == 0 else reversed(range(len(databases)))
        for n in order:
            with _using(databases[n]):
                elapsed, facts[n] = probes[n]()
            timings[n].append(elapsed)
    return list(zip(timings, facts, strict=True))


class _using:
    """Point the default connection at another database wrapper for a while."""

    def __init__(self, database):
        self.database = database

    def __enter__(self):
        self.previous = connections["default"]
        connections["default"] = self.database

    def __exit__(self, *exc):
        connections["default"] = self.previous


def _wrapper(name: str):
    """A connection to database `name` of the same cluster, with the default connection's settings."""
    current = connections["default"]
    return type(current)({**current.settings_dict, "NAME": name}, "default")


def _clone_database(name: str):
    """A copy of the default database as database `name` (CREATE DATABASE ... TEMPLATE); its wrapper."""
    source = connection.settings_dict["NAME"]
    connections.close_all()
    admin = _wrapper("postgres")
    try:
        with admin.cursor() as cursor:
            # Our own scratch cluster: nothing else may hold the template open (a copy needs that).
            cursor.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                           "WHERE datname = %s AND pid <> pg_backend_pid()", [source])
            cursor.execute(f'DROP DATABASE IF EXISTS "{name}"')
            cursor.execute(f'CREATE DATABASE "{name}" TEMPLATE "{source}"')
    finally:
        admin.close()
    return _wrapper(name)


def _drop_database(database) -> None:
    name = database.settings_dict["NAME"]
    database.close()
    admin = _wrapper("postgres")
    try:
        with admin.cursor() as cursor:
            cursor.execute(f'DROP DATABASE IF EXISTS "{name}"')
    finally:
        admin.close()


SMALL_FINISHED = 100  # finished jobs beside the small history's queue (at_scale)


def at_scale(*, small: int, large: int, queued: int, repeats: int, days: int = HISTORY_DAYS,
             prefix: str = "scale") -> dict:
    """The console and the selection queries with `small`, then `large` attempts in the ledger.

    The small history (its queue and SMALL_FINISHED finished jobs) is generated in a copy of the
    bench's database emptied of its ledger (the sections before this one leave hundreds of thousands
    of jobs of the last hour in it, which the overview's charts and the searches read), then copied
    to a second one where it grows to `large` attempts (the same
    queue, the same job page); every page and query is then measured on both databases
    alternately, so the ratio is measured side by side even on a loaded machine. The finished jobs
    spread over the last `days` days (so over that many days' partitions of events); job ids start
    with `prefix`. Both copies are dropped at the end, so the sections after this one find the
    bench's database as it was (the small history's unknown jobs, once left in it, were reconciled
    by the drain and rate-limit sections and halved their rates).
    """
    small_db = _clone_database(f"{connections['default'].settings_dict['NAME']}_small")
    large_db = None
    try:
        with _using(small_db):
            empty_ledger(days=days + 1)  # what the sections before this one wrote is not the history measured
            started = time.monotonic()
            generate(attempts=small, queued=queued, prefix=f"{prefix}-a", days=days)
            # And a few finished jobs, so that what the searches look for (a provider's answer) is found in
            # both histories, and each page shows the same rows at both sizes.
            generate(attempts=SMALL_FINISHED, queued=0, prefix=f"{prefix}-f", days=days)
            _sample_history(week=True)  # copied with the database: both sizes chart the same week
            small_seconds = time.monotonic() - started
            client, searched = _console_client()  # the login session is copied along with the database
            large_db = _clone_database(f"{small_db.settings_dict['NAME']}_large")
        with _using(large_db):
            started = time.monotonic()
            grown = generate(attempts=large - small, queued=0, prefix=f"{prefix}-b", days=days)
            _sample_history(week=False)
            large_seconds = time.monotonic() - started
        runs = ({"pages": [], "selection": []}, {"pages": [], "selection": []})
        for page in PAGES:
            url = _page_url(page, searched)
            measured = _side_by_side(lambda url=url: _page_probe(client, url), [small_db, large_db], repeats)
            for run, (timings, facts) in zip(runs, measured, strict=True):
                run["pages"].append({"page": page, **facts, **_summary(timings, 1)})
        for name in _selection_queries():
            measured = _side_by_side(lambda name=name: _selection_probe(_selection_queries()[name]),
                                     [small_db, large_db], repeats)
            for run, (timings, facts) in zip(runs, measured, strict=True):
                run["selection"].append({"query": name, "median_ms": _summary(timings, 3)["median_ms"], **facts})
    finally:
        for database in (small_db, large_db):
            if database is not None:
                _drop_database(database)
    return {"small": small, "large": large, "queued": queued, "small_run": runs[0], "large_run": runs[1],
            "generation": {"small_s": round(small_seconds, 1), "large_s": round(large_seconds, 1),
                           "large_phases": grown.phases}}
