"""The dead-man gate: irreversible work waits while the safety loops are not running.

The lease sweeper and the reconciler record each completed pass. When either has not completed
one within RECKON_GATE_BOUND_S seconds, nobody is watching for lost effects, so workers stop
starting *irreversible* side effects (reversible work goes on). The gate reopens by itself
when passes resume, and the jobs it held back are dispatched again (ledger.services.gate).

This module only reads the gate and stamps passes; it changes no job.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection

from ledger.models import PassRecord

LOOPS = ("sweeper", "reconciler")


@dataclass(frozen=True)
class Gate:
    open: bool
    reason: str = ""
    last_passes: dict[str, datetime | None] = field(default_factory=dict)


def gate_status() -> Gate:
    bound = settings.RECKON_GATE_BOUND_S
    if not bound:
        return Gate(open=True, reason="the dead-man gate is disabled (RECKON_GATE_BOUND_S=0)")
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        now = cursor.fetchone()[0]
    last = dict(PassRecord.objects.filter(name__in=LOOPS).values_list("name", "completed_at"))
    passes = {name: last.get(name) for name in LOOPS}
    stale = [name for name, at in passes.items() if at is None or now - at > timedelta(seconds=bound)]
    if not stale:
        return Gate(open=True, last_passes=passes)
    reason = "; ".join(
        f"the {name} has not completed a pass "
        + (f"since {passes[name]:%Y-%m-%d %H:%M:%S} UTC" if passes[name] else "yet")
        for name in stale
    )
    return Gate(open=False, reason=f"{reason} (bound {bound:g} s): irreversible side effects are held",
                last_passes=passes)


def record_pass(name: str) -> None:
    """A loop completed a pass (see ledger.services.gate.complete_pass, which loops call)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO ledger_passrecord (name, completed_at) VALUES (%s, clock_timestamp()) "
            "ON CONFLICT (name) DO UPDATE SET completed_at = EXCLUDED.completed_at",
            [name],
        )
