"""Comments on a job: what a person saw or thinks, kept in the job's history for the colleagues
who decide after them (an approver reads them before approving a replay).

A comment is an event (`job_commented`) that changes no state, so it never makes anyone's
decision stale; it is written under the job lock, so the job's hash chain stays in order.
"""

from __future__ import annotations

from django.db import transaction

from ledger.models import LedgerEvent
from ledger.services.errors import LedgerError
from ledger.services.transitions import Batch, latest_attempt, lock_job
from ledger.states import ActorType, EventKind

COMMENT_MAX_LENGTH = 2000
COMMENTERS = (ActorType.OPERATOR, ActorType.APPROVER)


class CommentRefused(LedgerError):
    """The comment was not written (empty, too long, or by someone who may not comment)."""


def comment_on_job(*, job_id: str, author: str, actor_type: str, text: str,
                   evidence: dict | None = None) -> LedgerEvent:
    """`author`'s comment on the job, as an event of its history (`evidence`: what it refers to)."""
    text = text.strip() if isinstance(text, str) else ""
    if not text:
        raise CommentRefused("a comment needs some text: say what you saw or think")
    if len(text) > COMMENT_MAX_LENGTH:
        raise CommentRefused(f"a comment holds at most {COMMENT_MAX_LENGTH} characters; this one has {len(text)}")
    if actor_type not in COMMENTERS:
        raise CommentRefused(f"only operators and approvers comment on jobs, not a {actor_type}")
    with transaction.atomic(), Batch() as batch:
        job = lock_job(job_id=job_id)
        event = batch.record_unchanged(job, latest_attempt(job), actor_type=actor_type, actor=author,
                                       kind=EventKind.JOB_COMMENTED, note=text, evidence=evidence)
    return event
