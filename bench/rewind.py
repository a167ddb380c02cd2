"""The cost of the ledger watch (issue 41), side by side in one run: the ledger cycle (claim ->
begin -> success, 4 processes) and enqueue_job with the watch on (each process's look at every new
connection and its heartbeat thread's look every RECKON_LEDGER_WATCH_INTERVAL_S, writing the state
file; the job table's recovery-window trigger) and with both off, in alternating rounds."""

from __future__ import annotations

import statistics
import tempfile

from django.conf import settings
from django.db import connection

from bench.generate import pending_jobs
from bench.sections import _cycle_worker, _enqueues, in_processes
from ledger import recovery_window

SIDES = ("watch on", "watch off")


def _side(on: bool, folder: str) -> None:
    settings.RECKON_LEDGER_WATCH, settings.RECKON_LEDGER_WATCH_DIR = on, folder
    with connection.cursor() as cursor:
        for name in (recovery_window.HOLD, recovery_window.RECORD):
            cursor.execute(f"ALTER TABLE {recovery_window.JOBS} {'ENABLE' if on else 'DISABLE'} TRIGGER {name}")


def watch_cost(*, seconds: float, rounds: int, enqueues: int, workers: int = 4) -> dict:
    measured = {side: {"cycles_per_s": [], "enqueues_per_s": []} for side in SIDES}
    folder = tempfile.mkdtemp(prefix="reckon-bench-watch-")
    was = settings.RECKON_LEDGER_WATCH, settings.RECKON_LEDGER_WATCH_DIR
    try:
        for round_ in range(rounds):
            for side in SIDES[::1 if round_ % 2 == 0 else -1]:
                _side(side == "watch on", folder)
                prefix = f"watch{round_}s{SIDES.index(side)}"
                per_worker = int(seconds * 1500) + 50
                job_ids = pending_jobs(count=per_worker * workers, prefix=prefix)
                rate = in_processes(_cycle_worker, [(job_ids[i::workers], seconds) for i in range(workers)], seconds)
                measured[side]["cycles_per_s"].append(rate)
                measured[side]["enqueues_per_s"].append(_enqueues(enqueues, f"{prefix}e"))
    finally:
        _side(True, was[1])
        settings.RECKON_LEDGER_WATCH, settings.RECKON_LEDGER_WATCH_DIR = was
    rows = [{"side": side, "cycles_per_s": round(statistics.median(f["cycles_per_s"]), 1),
             "enqueues_per_s": round(statistics.median(f["enqueues_per_s"]), 1)} for side, f in measured.items()]
    on, off = rows
    return {"rows": rows, "rounds": rounds, "workers": workers,
            "cycle_cost": round(1 - on["cycles_per_s"] / off["cycles_per_s"], 4),
            "enqueue_cost": round(1 - on["enqueues_per_s"] / off["enqueues_per_s"], 4)}
