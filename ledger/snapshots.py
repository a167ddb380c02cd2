"""What a ledger event's `before` and `after` record of a job and its attempt: one definition, for
the Python transitions (ledger.services.transitions) and the database functions generated from
it (ledger.stepsql)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ledger.models import Attempt, Job


def snapshot(job: Job, attempt: Attempt | None) -> dict:
    """What an event's `before` and `after` record (the fast path's functions build the same)."""
    state = {"job": job.status}
    if attempt is not None:
        state |= {"attempt": attempt.number, **attempt.states}
    return state
