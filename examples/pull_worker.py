"""A worker that pulls its work from Reckon, forever: the next job of its actions, run, recorded.
With --reconcile, the same program is the action's pull-mode reconciler instead: it answers
Reckon's look-ups of unknown attempts by asking the "provider" whether the effect is there.

    export RECKON_URL=http://127.0.0.1:8000 RECKON_API_TOKEN=rk_...
    .venv/bin/python examples/pull_worker.py --action notes.write [--outbox outbox] [--max-jobs N]
    .venv/bin/python examples/pull_worker.py --reconcile --action notes.write   # reconciler = "external"

Each job: claim the oldest one in the token's scope (waiting up to 30 s for one to arrive),
begin the side effect, perform it with the job's idempotency key, record the result. The lease
is renewed in the background while the step runs; an exception after `begin` records `unknown`.

The side effect here is the tutorial's `notes.write`: write the job's text to
`<outbox>/<idempotency key>.txt`. The key is the file's name, so a second call with the same key
finds the file and writes nothing (this "provider" honours the idempotency key). Put your own
call to the outside world in a function like `write_note`, and send `lease.idempotency_key` with it.

A look-up (--reconcile, for actions declared `queryable = true` and `reconciler = "external"`)
claims the most overdue unknown attempt and answers what the outbox proves: the note is there
(confirmed, with its file as the reference) or not (not_found, with why: Reckon may then replay
it with the same key); an exception while looking answers `unavailable` (asked again later).
When nothing comes within a wait, it says why on stderr when Reckon gave a reason other than
"no work" (the dead-man gate holding irreversible jobs, say), once per reason, and waits as long as
Reckon asks (Retry-After). A URL that is not Reckon's API (a redirect to HTTPS, an HTML page)
stops it at once with exit status 2 and the URL and status it got.

Reckon may restart under it: a connection error backs off (0.5 s, doubling to 30 s, with
jitter) and tries again. SIGTERM or Ctrl-C stops it, after the job in hand.
Standard library only, besides the reckon_client package (`pip install ./clients/python`).
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import socket
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from reckon_client import Client, Lease, ReckonError, ReckonUnavailable, Reconciliation, UnexpectedAnswer


def write_note(lease: Lease, outbox: Path) -> str:
    """The side effect of `notes.write`; returns the reference recorded with the success."""
    note = outbox / f"{lease.idempotency_key}.txt"
    try:
        with open(note, "x", encoding="utf-8") as written:  # "x": never a second write for one key
            written.write(str(lease.payload.get("text", "")) + "\n")
    except FileExistsError:
        pass  # an earlier attempt with this key wrote it: the effect exists once, as it should
    return str(note)


def find_note(look_up: Reconciliation, outbox: Path) -> None:
    """The look-up of `notes.write`: is the note of this key in the outbox? Answers Reckon."""
    note = outbox / f"{look_up.idempotency_key}.txt"
    if note.exists():
        look_up.confirmed(str(note), evidence={"file": str(note), "bytes": note.stat().st_size})
    else:
        look_up.not_found(f"no note {note}: it was never written", evidence={"looked_for": str(note)})


HANDLERS: dict[str, Callable[[Lease, Path], str]] = {"notes.write": write_note}
LOOKUPS: dict[str, Callable[[Reconciliation, Path], None]] = {"notes.write": find_note}


class Backoff:
    """0.5 s, doubling up to 30 s, each with jitter so that many workers do not return at once."""

    def __init__(self, first: float = 0.5, cap: float = 30.0):
        self.first, self.cap, self.delay = first, cap, first

    def next(self) -> float:
        pause = self.delay * random.uniform(0.5, 1.0)  # nosec B311  # jitter, not security
        self.delay = min(self.delay * 2, self.cap)
        return pause

    def reset(self) -> None:
        self.delay = self.first


def run(lease: Lease, outbox: Path) -> str:
    """One job, under the lease; returns what to print."""
    handler = HANDLERS.get(lease.action)
    with lease:  # renewed in the background; an exception records unknown (after begin) or a retry
        if handler is None:
            lease.failed(f"this worker does not run {lease.action}")
            return "failed (no handler)"
        lease.begin()  # only now may we touch the outside world
        reference = handler(lease, outbox)
        lease.succeeded(reference)
    return f"succeeded ({reference})"


def reconcile(look_up: Reconciliation, outbox: Path) -> str:
    """One look-up; returns what to print. An exception while looking answers `unavailable`."""
    with look_up:
        finder = LOOKUPS.get(look_up.action)
        if finder is None:
            look_up.unavailable(f"this agent cannot look up {look_up.action}")
        else:
            finder(look_up, outbox)
    applied = look_up.applied or {}
    return f"{applied.get('outcome')} -> {applied.get('applied')}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=os.environ.get("RECKON_URL", "http://127.0.0.1:8000"),
                        help="Reckon's base URL (RECKON_URL)")
    parser.add_argument("--token", default=os.environ.get("RECKON_API_TOKEN", ""),
                        help="a worker token (RECKON_API_TOKEN; manage.py worker_token create ...)")
    parser.add_argument("--action", action="append", choices=sorted(HANDLERS),
                        help="an action to take jobs of (repeatable); default: every one this worker runs")
    parser.add_argument("--tenant", action="append", help="only jobs of this tenant (repeatable)")
    parser.add_argument("--worker", default=f"pull-worker:{socket.gethostname()}:{os.getpid()}",
                        help="its name in the ledger (the agent's name with --reconcile)")
    parser.add_argument("--outbox", type=Path, default=Path("outbox"), help="where notes are written")
    parser.add_argument("--reconcile", action="store_true",
                        help="answer look-ups of unknown attempts (pull-mode reconciler) instead of running jobs")
    parser.add_argument("--max-jobs", type=int, help="stop after this many jobs or look-ups (default: run forever)")
    parser.add_argument("--wait", type=float, default=30.0, help="seconds each request for work waits (30)")
    args = parser.parse_args(argv)
    if not args.token:
        parser.error("give --token or set RECKON_API_TOKEN (manage.py worker_token create ...)")
    args.outbox.mkdir(parents=True, exist_ok=True)

    stopping, busy = threading.Event(), threading.Event()

    def stop(*_) -> None:
        stopping.set()
        if not busy.is_set():  # waiting for work: stop now (a lease granted meanwhile simply expires)
            raise SystemExit(0)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, stop)

    client = Client(args.url, args.token)
    actions = args.action or sorted(HANDLERS)
    backoff, done, said = Backoff(), 0, ""
    while not stopping.is_set() and (args.max_jobs is None or done < args.max_jobs):
        try:
            if args.reconcile:
                look_up = client.next_reconciliation(args.worker, actions=actions, tenants=args.tenant,
                                                     wait_seconds=args.wait)
                backoff.reset()
                if look_up is None:
                    continue  # nothing due: ask again
                busy.set()
                try:
                    print(f"{look_up.job_id}: {reconcile(look_up, args.outbox)}", flush=True)
                finally:
                    busy.clear()
                done += 1
                continue
            lease = client.next_lease(args.worker, actions=actions, tenants=args.tenant, wait_seconds=args.wait)
            backoff.reset()
            if lease is None:
                nothing = client.nothing_claimed
                if nothing is not None and nothing.reason != "no_work" and nothing.message != said:
                    print(f"nothing claimed: {nothing}", file=sys.stderr, flush=True)  # once per reason
                    said = nothing.message
                if nothing is not None and nothing.retry_after:
                    stopping.wait(nothing.retry_after)  # the server said when to ask again
                continue
            said = ""
            busy.set()
            try:
                outcome = run(lease, args.outbox)
            except (ReckonError, ReckonUnavailable):
                raise
            except Exception as exc:  # the lease recorded what can be said: unknown once begun
                outcome = f"{type(exc).__name__}: {exc} (recorded as {lease.outcome})"
            finally:
                busy.clear()
            print(f"{lease.job_id}: {outcome}", flush=True)
            done += 1
        except ReckonUnavailable as unavailable:  # Reckon is restarting, or the network failed
            pause = backoff.next()
            print(f"Reckon unavailable ({unavailable}); trying again in {pause:.1f} s", file=sys.stderr, flush=True)
            stopping.wait(pause)
        except UnexpectedAnswer as lost:
            if lost.status < 500:  # a redirect, an HTML page: the URL is wrong, asking again will not help
                print(f"not Reckon's API: {lost}", file=sys.stderr, flush=True)
                return 2
            pause = backoff.next()  # a proxy's error page while Reckon restarts behind it
            print(f"{lost}; trying again in {pause:.1f} s", file=sys.stderr, flush=True)
            stopping.wait(pause)
        except ReckonError as refused:
            if refused.status in (401, 403):  # a revoked token or a scope that does not fit: say so and stop
                print(f"refused: {refused}", file=sys.stderr, flush=True)
                return 1
            pause = backoff.next()  # a refusal of this job (its lease went stale), or a server error
            print(f"refused: {refused}; going on in {pause:.1f} s", file=sys.stderr, flush=True)
            stopping.wait(pause)
    return 0


if __name__ == "__main__":
    sys.exit(main())
