"""Measure the worker cycle claim -> begin -> record success: over HTTP, and in-process.

    .venv/bin/python examples/measure_api_cycle.py [--cycles 200]

Creates a throwaway database (dropped at the end), serves the API with gunicorn (one threaded
worker, as runstack runs it: gunicorn's sync worker would close the connection after every
request), and runs N sequential cycles through the reckon_client package; then the same N cycles
straight through ledger.services. Jobs are enqueued beforehand, untimed. `manage.py bench --only
http` measures the same side by side with several workers.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ["RECKON_DISPATCH"] = "false"
os.environ.setdefault("RECKON_DEBUG", "true")  # a local measurement on the embedded database


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def serve(database_url: str, port: int) -> subprocess.Popen:
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "config.wsgi:application",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            "1",
            "--threads",
            "4",
            "--log-level",
            "warning",
            "--no-control-socket",
        ],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": database_url, "RECKON_DISPATCH": "false"},
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1):
                return server
        except OSError:
            if time.monotonic() > deadline or server.poll() is not None:
                server.kill()
                raise SystemExit("the API server did not start") from None
            time.sleep(0.1)  # start-up polling, bounded by the deadline


def report(label: str, cycles: int, seconds: float) -> None:
    print(
        f"{label:<28} {cycles} cycles in {seconds:6.2f} s  ->  {cycles / seconds:7.1f} cycles/s,"
        f" {1000 * seconds / cycles:6.2f} ms/cycle"
    )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cycles", type=int, default=200)
    cycles = parser.parse_args().cycles

    import django

    django.setup()
    from django.db import connection
    from reckon_client import Client

    from api.tokens import worker_token_create
    from ledger import services

    name = os.environ.get("RECKON_BENCH_DATABASE", "test_reckon_api_bench")
    connection.settings_dict["TEST"]["NAME"] = name
    original = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True, keepdb=False)
    server = None
    try:
        s = connection.settings_dict
        auth = s["USER"] + (f":{s['PASSWORD']}" if s["PASSWORD"] else "")
        port = free_port()
        server = serve(f"postgresql://{auth}@{s['HOST']}:{s['PORT']}/{s['NAME']}", port)
        for n in range(cycles):
            for where in ("http", "local"):
                services.enqueue_job(job_id=f"{where}-{n}", tenant="bench", action="reckon.echo", payload={})
        client = Client(
            f"http://127.0.0.1:{port}", worker_token_create(name="bench", tenants="*", actions="*").token
        )

        started = time.perf_counter()
        for n in range(cycles):
            lease = client.claim_lease(f"http-{n}", worker="bench-http")
            lease.begin()
            lease.succeeded(f"ref-{n}")
        report("HTTP (reckon_client)", cycles, time.perf_counter() - started)

        started = time.perf_counter()
        for n in range(cycles):
            lease = services.claim_job(job_id=f"local-{n}", worker="bench-local")
            services.begin_side_effect(lease=lease)
            services.record_success(lease=lease, result_ref=f"ref-{n}")
        report("in-process (ledger.services)", cycles, time.perf_counter() - started)
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=10)
        connection.creation.destroy_test_db(original, verbosity=0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
