"""The heartbeat of a `--loop` process (`reconcile --loop`, `sweep_leases --loop`): each completed
pass is stamped on the loop's row for this host (ledger.models.LoopBeat), and a clean stop
(SIGTERM, Ctrl-C, the end of the command) removes it. A row that stops beating is a process that
was stopped (SIGSTOP), is stuck, or was killed: `alerts.conditions.loop_stalled` says so, even
while another process's passes (the qcluster's schedule) keep the dead-man gate open."""

from __future__ import annotations

import logging
import os
import signal
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from django.db import close_old_connections, connection

from ledger.availability import Outage, through_outage
from ledger.models import LoopBeat

HOST = socket.gethostname()
log = logging.getLogger("reckon.loops")


def _stopped(signum, frame):
    raise SystemExit(f"stopped by signal {signum}")


@contextmanager
def beating(loop: str, *, interval: float) -> Iterator[Callable[[], None]]:
    """Within it, call the yielded function after each completed pass. SIGTERM ends the loop as
    Ctrl-C does, and the row goes with it: only a process that is gone uncleanly leaves it."""
    name, process = f"{loop}@{HOST}"[:300], f"{HOST}:{os.getpid()}"[:200]
    previous = signal.signal(signal.SIGTERM, _stopped)

    def beat() -> None:
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO ledger_loopbeat (name, loop, process, interval_s, started_at, beat_at) "
                "VALUES (%s, %s, %s, %s, clock_timestamp(), clock_timestamp()) "
                "ON CONFLICT (name) DO UPDATE SET beat_at = EXCLUDED.beat_at, process = EXCLUDED.process, "
                "interval_s = EXCLUDED.interval_s, "
                "started_at = CASE WHEN ledger_loopbeat.process = EXCLUDED.process "
                "THEN ledger_loopbeat.started_at ELSE EXCLUDED.started_at END",
                [name, loop, process, interval],
            )

    try:
        yield beat
    finally:
        signal.signal(signal.SIGTERM, previous)
        try:
            LoopBeat.objects.filter(name=name, process=process).delete()
        except Exception:  # a stop while the database is down: the row stays, and the alert says so
            log.warning("%s: could not remove its heartbeat row; the stalled-loop alert will name it", name)


def run_passes(loop: str, *, interval: float, step: Callable[[], object],
               on_pass: Callable[[object, float, object], None]) -> None:
    """A `--loop` command's body, forever: `step()` every `interval` seconds, `on_pass(result,
    started, outage)` after each completed pass, then the heartbeat. A failover waits it out (a
    pass or a beat cut by an outage is tried on the next turn; ledger.availability), it does not
    exit."""
    outage = Outage(loop)
    with beating(loop, interval=interval) as beat:
        while True:
            started = time.monotonic()
            result = through_outage(step, outage)
            if result is not None:
                on_pass(result, started, outage)
                through_outage(beat, outage)  # this process's own pass: the stalled-loop alert watches it
            close_old_connections()
            time.sleep(interval)  # the loop's pacing, not synchronisation
