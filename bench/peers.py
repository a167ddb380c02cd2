"""Reckon beside its peers, per recorded side effect: the same run, the bench's own PostgreSQL.

Each system records one side effect (`side_effect`, which touches nothing outside) its own way,
in 1 and 4 processes, every system in every round, the order reversed every other round so that
load from elsewhere on the machine falls on all of them alike:

- Reckon, each of RECKON_VARIANTS: the ledger cycle as the `cycles` section runs it (claim →
  begin side effect → record success, on jobs enqueued beforehand), and the same cycle with each
  job's enqueue_job inside the loop, as a queue's figure includes its enqueue;
- agent-once on PostgreSQL: `Once.execute` with a key per effect (its once-guard: insert the
  pending record, call, mark it done; two autocommits, no fencing of the call, no history);
- effect-ledger on PostgreSQL: `EffectExecutor.execute` (claim, call, finish; its store opens a
  connection and takes an advisory lock on the scope per transaction), a scope per process;
- Procrastinate, a queue with no ledger: a producer defers one job at a time while a worker
  (concurrency 1, woken by LISTEN/NOTIFY) runs them, in the same process;
- PgQueuer, batching as its model: a producer enqueues ten at a time while a QueueManager
  dequeues ten at a time and acknowledges through its status-log buffer (ten at a time);
- `pgbench -N` at 4 clients, beside the unbatched cycle (its transactions are its "effects").

The queues' figures include their enqueue (timed until every job put in the queue has run and
been acknowledged); Reckon's ledger cycle starts from jobs enqueued beforehand, as the `cycles`
section measures it, and its second variant puts the enqueue back in.

A round's figures: effects per second, counted in the system's own tables after the round (a
system whose effects did not all land there gives no figure: the run fails); transactions
committed per effect (pg_stat_database.xact_commit of the system's database, read when its
backends have gone, so their counts are flushed) and WAL bytes per effect (pg_current_wal_lsn;
nothing else writes to the bench's cluster meanwhile; each round starts from a CHECKPOINT, so
full-page images fall alike). The work a round makes ready beforehand (the jobs of Reckon's cycle)
is neither timed nor counted. Medians over the rounds; each ratio is the median of the rounds'
own ratios, its two sides measured in the same round.

The peers are pinned benchmark-only dependencies (the `bench` extra in pyproject.toml), imported
here only inside the processes that run them.
"""

from __future__ import annotations

import asyncio
import importlib.util
import multiprocessing
import queue as queues
import statistics
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import quote

import psycopg
from django.conf import settings
from django.db import connection, connections

from bench.generate import payload, pending_jobs
from bench.sections import _cycle_worker, pgbench_command, pgbench_run
from config.processes import wait_until
from gateway.reconcile import run_apart
from ledger import services
from ledger.models import Job

ACTION = "reckon.echo"
QUEUE_BATCH = 10  # PgQueuer's batch (its default batch_size), on both sides of its queue


PEER_MODULES = {"agent-once": "once", "effect-ledger": "effect_ledger", "procrastinate": "procrastinate",
                "pgqueuer": "pgqueuer"}


def missing_peers() -> list[str]:
    """The peers not installed here (they come with the `bench` extra, which `make test` installs)."""
    return [name for name, module in PEER_MODULES.items() if importlib.util.find_spec(module) is None]


def side_effect(n: int) -> str:
    """The side effect every system records: nothing outside is touched, the result is its ref."""
    return f"bench-{n}"


class EffectsNotRecorded(RuntimeError):
    """A system reported effects its database does not hold: no figure is taken from it."""


@dataclass(frozen=True)
class Site:
    """Where a run happens: Reckon's database (Django's default connection), the peers' database on
    the same cluster, the cluster's `postgres` database for readings, and the world for pgbench."""

    peers_database: str
    world: object | None = None  # chaos.world.World: pgbench runs on its cluster

    def dsn(self, database: str) -> str:
        current = connection.settings_dict
        return (f"postgresql://{quote(current['USER'], safe='')}:{quote(current['PASSWORD'], safe='')}"
                f"@{current['HOST']}:{current['PORT']}/{database}")

    @property
    def reckon_database(self) -> str:
        return connection.settings_dict["NAME"]


@dataclass(frozen=True)
class System:
    """One way of recording side effects. `plan(site, tag, processes, seconds)` makes the round
    ready (untimed) and gives each process its arguments; `worker(*arguments, queue)` runs in a
    forked process and puts (effects done, seconds taken) on the queue; `recorded(site, tag)`
    counts the round's effects in the system's own tables."""

    name: str
    database: Callable[[Site], str]
    plan: Callable[[Site, str, int, float], list[tuple]]
    worker: Callable[..., None]
    recorded: Callable[[Site, str], int]
    processes: tuple[int, ...] = (1, 4)


def _reckon_database(site: Site) -> str:
    return site.reckon_database


def _peers_database(site: Site) -> str:
    return site.peers_database


def _count(site: Site, database: str, sql: str, params: list) -> int:
    with psycopg.connect(site.dsn(database), autocommit=True) as conn:
        return conn.execute(sql, params).fetchone()[0]


# --- Reckon ------------------------------------------------------------------------------------

def _pending_ledger_jobs(site: Site, tag: str, processes: int, seconds: float) -> list[tuple]:
    """Jobs enqueued beforehand, as the `cycles` section makes them; more than a worker can finish."""
    job_ids = pending_jobs(count=(int(seconds * 1000) + 50) * processes, prefix=tag)
    return [(job_ids[i::processes], seconds) for i in range(processes)]


def _new_job_ids(site: Site, tag: str, processes: int, seconds: float) -> list[tuple]:
    return [([f"{tag}-{i}-{n:07d}" for n in range(int(seconds * 1000) + 50)], seconds) for i in range(processes)]


def _enqueue_and_cycle_worker(job_ids: list[str], seconds: float, queue) -> None:
    """enqueue_job (not dispatched: this worker claims it), then the ledger cycle."""
    connections.close_all()  # a forked child must open its own connection
    settings.DEBUG = False
    worker = f"bench-{multiprocessing.current_process().pid}"
    done, started = 0, time.monotonic()
    for n, job_id in enumerate(job_ids):
        if time.monotonic() - started > seconds:
            break
        services.enqueue_job(job_id=job_id, tenant="bench", action=ACTION, payload=payload("mail.send", n, "bench"),
                             dispatch=False)
        lease = services.claim_job(job_id=job_id, worker=worker)
        services.begin_side_effect(lease=lease)
        services.record_success(lease=lease, result_ref=side_effect(n))
        done += 1
    queue.put((done, time.monotonic() - started))
    connections.close_all()


def _succeeded_jobs(site: Site, tag: str) -> int:
    return Job.objects.filter(job_id__startswith=f"{tag}-", status="succeeded").count()


BATCH = 50  # the batched cycle's claim size (bench --only batch measures 10 and 50 beside 1)


def _pending_batched_jobs(site: Site, tag: str, processes: int, seconds: float) -> list[tuple]:
    """Jobs enqueued beforehand under a tenant of the round's own: the batched workers claim the
    oldest claimable jobs (claim_next_jobs), and only this round's, not those earlier rounds left."""
    pending_jobs(count=(int(seconds * 4000) + 2 * BATCH) * processes, prefix=tag, tenant=tag)
    return [(tag, seconds)] * processes


def _batched_cycle_worker(tenant: str, seconds: float, queue) -> None:
    """The ledger cycle in batches: claim up to BATCH jobs in one statement, begin their side effects
    in one transaction, record their results in one transaction (ledger.services.batches)."""
    connections.close_all()
    settings.DEBUG = False
    worker = f"bench-{multiprocessing.current_process().pid}"
    done, started = 0, time.monotonic()
    while time.monotonic() - started < seconds:
        leases = services.claim_next_jobs(worker=worker, limit=BATCH, tenants=[tenant])
        if not leases:
            break
        begun = services.begin_side_effects(leases=leases)
        outcomes = [services.Outcome.succeeded(lease, side_effect(done + n))
                    for n, (lease, attempt) in enumerate(zip(leases, begun, strict=True))
                    if not isinstance(attempt, services.LedgerError)]
        services.record_results(outcomes=outcomes)
        done += len(outcomes)
    queue.put((done, time.monotonic() - started))
    connections.close_all()


# Reckon's ways of recording an effect, each measured beside the peers. The agent-once target is
# judged on the fastest of them at 4 processes, the pgbench one on the first (the unbatched cycle).
RECKON_VARIANTS = (
    System("reckon ledger cycle", _reckon_database, _pending_ledger_jobs, _cycle_worker, _succeeded_jobs),
    System("reckon enqueue + ledger cycle", _reckon_database, _new_job_ids, _enqueue_and_cycle_worker,
           _succeeded_jobs),
    System(f"reckon batched cycle ({BATCH})", _reckon_database, _pending_batched_jobs, _batched_cycle_worker,
           _succeeded_jobs),
)


# --- agent-once --------------------------------------------------------------------------------

def _keys_per_process(site: Site, tag: str, processes: int, seconds: float) -> list[tuple]:
    return [(site.dsn(site.peers_database), f"{tag}-{i}", seconds) for i in range(processes)]


def _agent_once_worker(dsn: str, prefix: str, seconds: float, queue) -> None:
    from once import Once
    from once.postgres import PostgresStore

    once = Once(store=PostgresStore(dsn, create=False))
    done, started = 0, time.monotonic()
    while time.monotonic() - started < seconds:
        once.execute(side_effect, key=f"{prefix}-{done}", n=done)
        done += 1
    queue.put((done, time.monotonic() - started))
    once.close()


def _agent_once_done(site: Site, tag: str) -> int:
    return _count(site, site.peers_database, "SELECT count(*) FROM once_effects WHERE starts_with(key, %s) "
                  "AND status = 'done'", [f"{tag}-"])


# --- effect-ledger -----------------------------------------------------------------------------

def _effect_ledger_worker(dsn: str, scope: str, seconds: float, queue) -> None:
    from effect_ledger import EffectExecutor
    from effect_ledger.postgres import PostgresOperationStore

    executor = EffectExecutor(scope=scope, store=PostgresOperationStore(dsn))
    done, started = 0, time.monotonic()
    while time.monotonic() - started < seconds:
        executor.execute(f"op-{done}", "bench.side_effect", {"n": done},
                         lambda operation: side_effect(operation.request["n"]))
        done += 1
    queue.put((done, time.monotonic() - started))


def _effect_ledger_done(site: Site, tag: str) -> int:
    return _count(site, site.peers_database, "SELECT count(*) FROM operations WHERE starts_with(scope, %s) "
                  "AND state = 'completed'", [f"{tag}-"])


# --- the queues: Procrastinate and PgQueuer ------------------------------------------------------

def _queue_per_process(site: Site, tag: str, processes: int, seconds: float) -> list[tuple]:
    """A queue of its own per process (its producer and its worker in that process)."""
    return [(site.dsn(site.peers_database), f"{tag}-{i}", seconds) for i in range(processes)]


class _Finished:
    """Counts the jobs a worker ran, and says when it has run all that were put in its queue."""

    def __init__(self):
        self.done, self.produced, self.all_done = 0, None, asyncio.Event()

    def one(self) -> None:
        self.done += 1
        self._check()

    def produced_all(self, produced: int) -> None:
        self.produced = produced
        self._check()

    def _check(self) -> None:
        if self.produced is not None and self.done >= self.produced:
            self.all_done.set()

    async def wait(self, seconds: float) -> None:
        await asyncio.wait_for(self.all_done.wait(), timeout=seconds * 20 + 60)


def _procrastinate_worker(dsn: str, queue_name: str, seconds: float, queue) -> None:
    """The producer defers one job at a time for `seconds` while the worker (concurrency 1, woken by
    LISTEN/NOTIFY) runs them; timed until the worker has run every one and stopped."""
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn))
    finished = _Finished()

    @app.task(name="bench_side_effect", queue=queue_name)
    async def record(n: int) -> str:
        finished.one()
        return side_effect(n)

    async def run() -> tuple[int, float]:
        async with app.open_async():
            started = time.monotonic()
            worker = asyncio.create_task(app.run_worker_async(queues=[queue_name], concurrency=1,
                                                              install_signal_handlers=False))
            produced = 0
            while time.monotonic() - started < seconds:
                await record.defer_async(n=produced)
                produced += 1
            finished.produced_all(produced)
            await finished.wait(seconds)
            worker.cancel()  # a graceful stop: the running job finishes and its status is written
            try:
                await worker
            except asyncio.CancelledError:
                pass
            return produced, time.monotonic() - started

    queue.put(run_apart(run))


def _procrastinate_done(site: Site, tag: str) -> int:
    return _count(site, site.peers_database, "SELECT count(*) FROM procrastinate_jobs WHERE "
                  "starts_with(queue_name, %s) AND status = 'succeeded'", [f"{tag}-"])


def _pgqueuer_worker(dsn: str, entrypoint: str, seconds: float, queue) -> None:
    """The producer enqueues ten jobs at a time for `seconds` while a QueueManager dequeues ten at a
    time and acknowledges through its status-log buffer; timed until it has run every one, stopped
    and flushed its acknowledgements."""
    from pgqueuer import Queries, QueueManager

    finished = _Finished()

    async def run() -> tuple[int, float]:
        async with (await psycopg.AsyncConnection.connect(dsn, autocommit=True) as producer_connection,
                    await psycopg.AsyncConnection.connect(dsn, autocommit=True) as worker_connection):
            producer = Queries.from_psycopg_connection(producer_connection)
            manager = QueueManager(Queries.from_psycopg_connection(worker_connection))

            @manager.entrypoint(entrypoint)
            async def record(job) -> None:
                side_effect(int(job.payload))
                finished.one()

            started = time.monotonic()
            worker = asyncio.create_task(manager.run(batch_size=QUEUE_BATCH))
            produced = 0
            while time.monotonic() - started < seconds:
                batch = range(produced, produced + QUEUE_BATCH)
                await producer.enqueue([entrypoint] * len(batch), [str(n).encode() for n in batch], [0] * len(batch))
                produced += len(batch)
            finished.produced_all(produced)
            await finished.wait(seconds)
            manager.shutdown.set()  # its buffers flush as it stops
            await worker
            return produced, time.monotonic() - started

    queue.put(run_apart(run))


def _pgqueuer_done(site: Site, tag: str) -> int:
    """Acknowledged jobs are moved to PgQueuer's log; none of the round's may be left queued."""
    left = _count(site, site.peers_database, "SELECT count(*) FROM pgqueuer WHERE starts_with(entrypoint, %s)",
                  [f"{tag}-"])
    done = _count(site, site.peers_database, "SELECT count(*) FROM pgqueuer_log WHERE starts_with(entrypoint, %s) "
                  "AND status = 'successful'", [f"{tag}-"])
    return done if left == 0 else 0


PEERS = (
    System("agent-once", _peers_database, _keys_per_process, _agent_once_worker, _agent_once_done),
    System("effect-ledger", _peers_database, _keys_per_process, _effect_ledger_worker, _effect_ledger_done),
    System("procrastinate", _peers_database, _queue_per_process, _procrastinate_worker, _procrastinate_done),
    System("pgqueuer (batches of 10)", _peers_database, _queue_per_process, _pgqueuer_worker, _pgqueuer_done),
)


def install_peers(site: Site) -> None:
    """Each peer's schema in the peers' database, as each one's own code creates it."""
    dsn = site.dsn(site.peers_database)
    from effect_ledger.postgres import PostgresOperationStore
    from once.postgres import PostgresStore

    PostgresStore(dsn).close()
    PostgresOperationStore(dsn)

    async def queues_schema() -> None:
        import procrastinate
        from pgqueuer import Queries

        app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn))
        async with app.open_async():
            await app.schema_manager.apply_schema_async()
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await Queries.from_psycopg_connection(conn).install()

    run_apart(queues_schema)


# --- pgbench -N --------------------------------------------------------------------------------

def _pgbench_plan(site: Site, tag: str, processes: int, seconds: float) -> list[tuple]:
    pgbench_command(site.world)  # its database, initialised once
    with psycopg.connect(site.dsn("pgbench"), autocommit=True) as conn:
        conn.execute("TRUNCATE pgbench_history")  # -N inserts one row per transaction
    return [(processes, seconds)]


def _pgbench_worker(clients: int, seconds: float, queue, *, world) -> None:
    tps, processed = pgbench_run(world, clients=clients, seconds=seconds)
    queue.put((processed, processed / tps))


def _pgbench_done(site: Site, tag: str) -> int:
    return _count(site, "pgbench", "SELECT count(*) FROM pgbench_history", [])


def pgbench_system(world) -> System:
    return System("pgbench -N", lambda site: "pgbench", _pgbench_plan,
                  lambda clients, seconds, queue: _pgbench_worker(clients, seconds, queue, world=world),
                  _pgbench_done, processes=(4,))


# --- measuring -------------------------------------------------------------------------------

def _child(worker, arguments: tuple, queue) -> None:
    try:
        worker(*arguments, queue)
    except BaseException:
        queue.put(traceback.format_exc())
        raise


def run_processes(worker, arguments: list[tuple], *, timeout: float) -> list[tuple[int, float]]:
    """`worker(*args, queue)` in a forked process per item of `arguments`; what each put on the queue.
    A process that failed fails the run with its traceback."""
    connections.close_all()  # the children open their own
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    procs = [context.Process(target=_child, args=(worker, args, queue)) for args in arguments]
    for proc in procs:
        proc.start()
    results, deadline = [], time.monotonic() + timeout
    try:
        while len(results) < len(procs):
            try:
                result = queue.get(timeout=min(1.0, max(deadline - time.monotonic(), 0.01)))
            except queues.Empty:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{len(procs) - len(results)} of {len(procs)} processes did not finish "
                                       f"in {timeout:g} s") from None
                if any(proc.exitcode not in (None, 0) for proc in procs):
                    raise RuntimeError("a measuring process died without a result") from None
                continue
            if isinstance(result, str):
                raise RuntimeError(f"a measuring process failed:\n{result}")
            results.append(result)
    finally:
        for proc in procs:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.kill()
                proc.join()
    return results


def _backends(admin, database: str) -> set[int]:
    return {pid for (pid,) in admin.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s "
                                            "AND backend_type = 'client backend'", [database])}


def _readings(admin, database: str, lingering: set[int]) -> tuple[int, int]:
    """Transactions committed in `database` and the cluster's WAL position, once the round's backends
    have gone (a backend's counts reach pg_stat_database when it ends, at the latest). `lingering`:
    the backends connected before the round, of processes the bench's earlier sections keep (idle)."""
    wait_until(lambda: not _backends(admin, database) - lingering,
               timeout=60, what=f"the connections to {database} to close")
    admin.execute("SELECT pg_stat_clear_snapshot()")
    commits = admin.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = %s", [database]).fetchone()[0]
    wal = admin.execute("SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint").fetchone()[0]
    return commits, wal


def measure(site: Site, system: System, *, processes: int, seconds: float, tag: str) -> dict:
    """One round of `system` in `processes` processes; its figures from what its database holds."""
    arguments = system.plan(site, tag, processes, seconds)
    database = system.database(site)
    connections.close_all()
    with psycopg.connect(site.dsn("postgres"), autocommit=True) as admin:
        admin.execute("CHECKPOINT")
        lingering = _backends(admin, database)
        commits, wal = _readings(admin, database, lingering)
        results = run_processes(system.worker, arguments, timeout=seconds * 20 + 120)
        commits_after, wal_after = _readings(admin, database, lingering)
    done, elapsed = sum(d for d, _ in results), max(e for _, e in results)
    recorded = system.recorded(site, tag)
    if recorded == 0 or recorded != done:
        raise EffectsNotRecorded(f"{system.name} in {processes} process{'es' if processes > 1 else ''}: {done} "
                                 f"effects reported, {recorded} recorded in its database")
    return {"effects": recorded, "effects_per_s": recorded / elapsed,
            "commits_per_effect": (commits_after - commits) / recorded, "wal_bytes_per_effect": (wal_after - wal) / recorded}


def _slug(name: str) -> str:
    return "".join(c for c in name if c.isalnum())[:12]


def peers(site: Site, *, seconds: float, rounds: int, variants=RECKON_VARIANTS, others=PEERS,
          processes: tuple[int, ...] = (1, 4)) -> dict:
    """Every system at each of its process counts among `processes`, `rounds` times, the order
    reversed every other round; rows of medians, and the ratios the targets judge (at 4)."""
    install_peers(site)
    systems = [*variants, *others, *([pgbench_system(site.world)] if site.world is not None else [])]
    cells = [(system, n) for system in systems for n in system.processes if n in processes]
    rounds_of = {(system.name, n): [] for system, n in cells}
    for round_ in range(rounds):
        for system, n in cells if round_ % 2 == 0 else reversed(cells):
            rounds_of[(system.name, n)].append(
                measure(site, system, processes=n, seconds=seconds, tag=f"p{round_}{_slug(system.name)}{n}"))
    rows = []
    for system, n in cells:
        measured = rounds_of[(system.name, n)]
        rows.append({"system": system.name, "processes": n,
                     "effects_per_s": round(statistics.median(m["effects_per_s"] for m in measured), 1),
                     "commits_per_effect": round(statistics.median(m["commits_per_effect"] for m in measured), 2),
                     "wal_bytes_per_effect": round(statistics.median(m["wal_bytes_per_effect"] for m in measured)),
                     "effects": sum(m["effects"] for m in measured)})
    return {"seconds": seconds, "rounds": rounds, "rows": rows, "ratios": _ratios(rounds_of, variants, systems)}


def _paired(rounds_of: dict, numerator: str, denominator: str, n: int) -> float:
    return round(statistics.median(a["effects_per_s"] / b["effects_per_s"] for a, b in
                                   zip(rounds_of[(numerator, n)], rounds_of[(denominator, n)], strict=True)), 3)


def _ratios(rounds_of: dict, variants, systems) -> dict:
    names = {system.name for system in systems}
    ratios = {}
    if "agent-once" in names:
        best = max(variants, key=lambda v: statistics.median(m["effects_per_s"] for m in rounds_of[(v.name, 4)]))
        ratios["agent_once_at_4"] = {"reckon": best.name, "ratio": _paired(rounds_of, best.name, "agent-once", 4)}
    if "pgbench -N" in names:
        ratios["pgbench_at_4"] = {"reckon": variants[0].name,
                                  "ratio": _paired(rounds_of, variants[0].name, "pgbench -N", 4)}
    return ratios
