"""The worker cycle over HTTP beside the same cycle in-process, measured side by side.

claim -> begin side effect -> record success, by `workers` processes at once: in-process through
ledger.services (what the `cycles` section measures), and over HTTP through the reckon_client
package against gunicorn started exactly as `manage.py runstack` starts it. Each is measured twice,
claiming by id and claiming the next job in scope (POST /api/v1/claims, ledger claim_next_job),
the two sides alternating so that load from elsewhere on the machine falls on both alike.
"""

from __future__ import annotations

import secrets
import time

from django.conf import settings
from django.db import connections

from bench.generate import pending_jobs
from bench.sections import in_processes
from chaos.world import Worker, World, answers, wait_until
from ledger import services
from sandbox.stack import stack_children
from sandbox.testing import free_port

ACTION = "reckon.echo"
WEB_WORKERS = 2  # runstack's default (--web-workers)
# The server runs as in production (no per-query log), on plain HTTP to this host.
PRODUCTION = {"RECKON_DEBUG": "false", "RECKON_SECRET_KEY": secrets.token_urlsafe(50), "RECKON_SSL_REDIRECT": "false",
              "RECKON_DISPATCH": "false"}


def serve_api(world: World, *, web_workers: int = WEB_WORKERS, extra: tuple[str, ...] = ()) -> tuple[Worker, str]:
    """gunicorn with the argv runstack gives it (sandbox.stack), on the world's database."""
    port = free_port()
    web = next(c for c in stack_children(host="127.0.0.1", port=port, workers=web_workers, demo=False)
               if c.name == "web")
    server = Worker(world, f"web-{port}", PRODUCTION, web.argv + list(extra))
    world.workers.append(server)
    url = f"http://127.0.0.1:{port}"
    wait_until(lambda: answers(f"{url}/healthz"), timeout=60, what="the API server to answer")
    return server, url


# --- one worker's loop, in a forked process ------------------------------------------------------

def _run(loop, seconds: float, queue) -> None:
    connections.close_all()  # a forked child opens its own connection
    settings.DEBUG = False
    done, started = 0, time.monotonic()
    try:
        while time.monotonic() - started < seconds and loop():
            done += 1
    finally:
        queue.put((done, time.monotonic() - started))
        connections.close_all()


def _by_id_in_process(job_ids: list[str], worker: str):
    jobs = iter(job_ids)

    def cycle() -> bool:
        job_id = next(jobs, None)
        if job_id is None:
            return False
        lease = services.claim_job(job_id=job_id, worker=worker)
        services.begin_side_effect(lease=lease)
        services.record_success(lease=lease, result_ref="bench")
        return True

    return cycle


def _next_in_process(worker: str):
    def cycle() -> bool:
        lease = services.claim_next_job(worker=worker, actions=[ACTION])
        if lease is None:
            return False
        services.begin_side_effect(lease=lease)
        services.record_success(lease=lease, result_ref="bench")
        return True

    return cycle


def _by_id_over_http(client, job_ids: list[str], worker: str):
    jobs = iter(job_ids)

    def cycle() -> bool:
        job_id = next(jobs, None)
        if job_id is None:
            return False
        lease = client.claim_lease(job_id, worker=worker)
        lease.begin()
        lease.succeeded("bench")
        return True

    return cycle


def _next_over_http(client, worker: str):
    def cycle() -> bool:
        lease = client.next_lease(worker, actions=[ACTION], wait_seconds=0)
        if lease is None:
            return False
        lease.begin()
        lease.succeeded("bench")
        return True

    return cycle


def http_cycles(world: World, *, seconds: float, clients=(1, 4)) -> list[dict]:
    """Per worker count: cycles/s in-process and over HTTP, claiming by id and claiming the next job."""
    from reckon_client import Client

    from api.tokens import worker_token_create

    server, url = serve_api(world)
    try:
        token = worker_token_create(name="bench-http", tenants="*", actions=[ACTION]).token  # reversible: nobody behind it
        per_worker = int(seconds * 1500) + 50  # more jobs than a worker can finish in time
        rows = []
        for n in clients:
            def by_id(where: str, loop_of, n=n) -> float:
                ids = pending_jobs(count=per_worker * n, prefix=f"http{n}-{where}")
                return in_processes(_run, [(loop_of(ids[i::n], f"bench-{where}-{i}"), seconds) for i in range(n)], seconds)

            def next_job(where: str, loop_of, n=n) -> float:
                # Every pending job is in scope: those the other runs left are taken first.
                pending_jobs(count=per_worker * n, prefix=f"http{n}-{where}")
                return in_processes(_run, [(loop_of(f"bench-{where}-{i}"), seconds) for i in range(n)], seconds)

            local = by_id("local", _by_id_in_process)
            http = by_id("http", lambda ids, w: _by_id_over_http(Client(url, token), ids, w))
            http_next = next_job("http-next", lambda w: _next_over_http(Client(url, token), w))
            local_next = next_job("local-next", _next_in_process)
            rows.append({
                "workers": n, "in_process_per_s": round(local, 1), "http_per_s": round(http, 1),
                "ratio": round(http / local, 3), "in_process_next_per_s": round(local_next, 1),
                "http_next_per_s": round(http_next, 1), "next_ratio": round(http_next / local_next, 3),
            })
    finally:
        server.stop()
        world.workers.remove(server)
    return rows

