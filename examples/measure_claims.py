"""Measure claiming the next job: through POST /api/v1/claims, beside in-process, and the wake-up.

    .venv/bin/python examples/measure_claims.py [--jobs 1000] [--workers 4] [--wakeups 20]

In one run, on a throwaway database (dropped at the end), with gunicorn serving the API as
`make run` does (2 processes of 4 threads):

1. claims/s through POST /api/v1/claims: `--workers` threads, each with its own reckon_client
   Client (one keep-alive connection each), claim the queued jobs until none is left;
2. the same number of threads claim as many jobs in-process with `ledger.services.claim_next_job`,
   and then by id with `claim_job` (each thread on its own database connection);
3. the wake-up latency: a worker waits in `next_lease` (the server says so in its DEBUG log);
   one job is enqueued; the time from the enqueue's commit to the lease in the worker's hands.

Jobs are enqueued beforehand, untimed, for an external action declared in a scratch actions file.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
ACTIONS = Path(tempfile.mkdtemp(prefix="reckon-claims-")) / "actions.toml"
ACTIONS.write_text('[actions."bench.external"]\nexecutor = "external"\nreversible = true\n')
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ["RECKON_ACTIONS_FILE"] = str(ACTIONS)
os.environ["RECKON_DISPATCH"] = "false"
os.environ.setdefault("RECKON_DEBUG", "true")  # a local measurement on the embedded database


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def serve(database_url: str, port: int, log: Path) -> subprocess.Popen:
    env = {**os.environ, "DATABASE_URL": database_url, "RECKON_LOG_LEVEL": "DEBUG"}
    with open(log, "wb") as output:
        server = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "config.wsgi:application", "--bind", f"127.0.0.1:{port}",
             "--workers", "2", "--threads", "4", "--log-level", "warning", "--no-control-socket"],
            cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT,
        )
    import urllib.request

    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1):  # nosec B310  # our own server
                return server
        except OSError:
            if time.monotonic() > deadline or server.poll() is not None:
                server.kill()
                raise SystemExit("the API server did not start") from None
            time.sleep(0.1)  # start-up polling, bounded by the deadline


def in_threads(count: int, work) -> list:
    """Run `work(n)` in `count` threads released together; their results."""
    from django.db import connection

    barrier, results = threading.Barrier(count), [None] * count

    def runner(n: int) -> None:
        barrier.wait()
        try:
            results[n] = work(n)
        finally:
            connection.close()

    threads = [threading.Thread(target=runner, args=(n,)) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def report(label: str, claims: int, seconds: float) -> None:
    print(f"{label:<44} {claims:5d} claims in {seconds:6.2f} s -> {claims / seconds:7.1f} claims/s")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--wakeups", type=int, default=20)
    args = parser.parse_args()

    import django

    django.setup()
    from django.db import connection
    from reckon_client import Client

    from api.tokens import worker_token_create
    from ledger import services

    name = os.environ.get("RECKON_BENCH_DATABASE", "test_reckon_claims_bench")
    connection.settings_dict["TEST"]["NAME"] = name
    original = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True, keepdb=False)
    server, log = None, ACTIONS.with_name("gunicorn.log")
    try:
        s = connection.settings_dict
        auth = s["USER"] + (f":{s['PASSWORD']}" if s["PASSWORD"] else "")
        port = free_port()
        server = serve(f"postgresql://{auth}@{s['HOST']}:{s['PORT']}/{s['NAME']}", port, log)
        for tenant in ("http", "local", "by-id"):
            for n in range(args.jobs):
                services.enqueue_job(job_id=f"{tenant}-{n}", tenant=tenant, action="bench.external", payload={})
        token = worker_token_create(name="bench", tenants="*", actions=["bench.external"]).token
        url = f"http://127.0.0.1:{port}"
        print(f"{args.jobs} jobs per measurement, {args.workers} workers; gunicorn: 2 processes x 4 threads")

        def http_worker(n: int) -> int:
            client, claimed = Client(url, token), 0
            while client.next_lease(f"http-{n}", tenants=["http"], wait_seconds=0) is not None:
                claimed += 1
            return claimed

        def local_worker(n: int) -> int:
            claimed = 0
            while services.claim_next_job(worker=f"local-{n}", actions=["bench.external"], tenants=["local"]):
                claimed += 1
            return claimed

        def by_id_worker(n: int) -> int:
            for m in range(n, args.jobs, args.workers):
                services.claim_job(job_id=f"by-id-{m}", worker=f"by-id-{n}")
            return len(range(n, args.jobs, args.workers))

        for label, work in (("POST /api/v1/claims (reckon_client)", http_worker),
                            ("in-process claim_next_job", local_worker),
                            ("in-process claim_job (by id)", by_id_worker)):
            started = time.perf_counter()
            claimed = sum(in_threads(args.workers, work))
            report(label, claimed, time.perf_counter() - started)

        latencies = []
        client = Client(url, token)
        for n in range(args.wakeups):
            waits = log.read_text().count(" waits up to ")
            got: list[float] = []

            def wait_for_work(got: list[float] = got) -> None:
                if client.next_lease("waiter", tenants=["wake"], wait_seconds=30) is not None:
                    got.append(time.perf_counter())

            waiter = threading.Thread(target=wait_for_work)
            waiter.start()
            while log.read_text().count(" waits up to ") == waits:  # until the server holds the wait
                time.sleep(0.01)  # polling the server's log; the waiter gives up after 30 s anyway
            services.enqueue_job(job_id=f"wake-{n}", tenant="wake", action="bench.external", payload={})
            enqueued = time.perf_counter()
            waiter.join(35)
            latencies.append(got[0] - enqueued)
        latencies.sort()
        print(f"wake-up, enqueue committed -> lease in the worker's hands, {args.wakeups} times: "
              f"median {1000 * statistics.median(latencies):.1f} ms, "
              f"p95 {1000 * latencies[int(0.95 * (len(latencies) - 1))]:.1f} ms, max {1000 * latencies[-1]:.1f} ms "
              f"(fallback poll: every {os.environ.get('RECKON_CLAIM_POLL_S', '5')} s)")
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=10)
        connection.creation.destroy_test_db(original, verbosity=0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
