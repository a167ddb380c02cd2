"""A decision for every job a queue filter matches, not only the rows on a page.

Why batches driven by the page, not a background task: each step is one bounded request (at
most BATCH jobs, one transaction), so no web request runs for minutes, no worker has to be up
for the run to move, and the person who confirmed it watches it move (htmx asks for the next
step as each one returns; without JavaScript, a button does). A run left half done (the tab
closed) is paused, not lost: its page continues it from its cursor.

Each job is decided on its own through `reconciliation.decisions` (the transition layer, its
event in the same transaction): it succeeds or is refused with the reason. A job that changed
after the run was confirmed, or that someone else holds, is refused and left alone.
"""

from __future__ import annotations

from django.db import transaction
from django.db.models.functions import Now

from console.access import fence_of
from console.forms import QueueFilterForm
from console.models import BulkRun
from console.pagination import encode_time_cursor
from console.selectors.queue import QueueFilter, filtered_jobs, in_queue_order
from ledger.services import LedgerError, latest_attempts
from reconciliation import decisions
from reconciliation.registry import REGISTRY, bulk_decisions

BATCH = 50
REFUSALS_KEPT = 500


def run_filter(run: BulkRun) -> QueueFilter:
    return QueueFilterForm(run.filters).spec()


def matching(spec: QueueFilter, user):
    """The jobs a bulk run over `spec` would take, for `user` (their tenant fence)."""
    return filtered_jobs(spec, fence_of(user))


def start_run(*, user, decision: str, note: str, filters: dict, evidence: str = "") -> BulkRun:
    """A run of `decision` over the jobs `filters` match now; nothing is decided yet."""
    if decision not in {d.name for d in bulk_decisions()}:
        raise LedgerError(f"{decision!r} is not a bulk decision")
    if not note.strip():
        raise LedgerError("a note is required: say why, for the audit trail")
    if REGISTRY[decision].takes_evidence and not evidence.strip():
        raise LedgerError(f"{REGISTRY[decision].label} on many jobs needs evidence: say what you saw")
    total = matching(QueueFilterForm(filters).spec(), user).count()
    return BulkRun.objects.create(user=user, decision=decision, note=note.strip(), filters=filters, total=total,
                                  evidence=evidence.strip() if REGISTRY[decision].takes_evidence else "")


def step_run(run_id: int) -> BulkRun:
    """Decide the next batch of the run, in one transaction that holds the run's row (a second
    tab stepping the same run waits, then sees the batch done). Jobs are decided in primary-key
    order, the order the reconciler locks them in, so the two never deadlock."""
    with transaction.atomic():
        run = BulkRun.objects.select_for_update().select_related("user").get(pk=run_id)
        if run.finished:
            return run
        jobs = list(
            in_queue_order(matching(run_filter(run), run.user).filter(created_at__lte=run.created_at), run.cursor)
            .only("id", "job_id", "created_at")[:BATCH]
        )
        latest = latest_attempts(jobs)
        for job in sorted(jobs, key=lambda job: job.pk):
            attempt = latest.get(job.pk)
            reason = _decide(run, job, attempt)
            run.done += 1
            if reason is None:
                run.succeeded += 1
            else:
                run.refused += 1
                if len(run.refusals) < REFUSALS_KEPT:
                    run.refusals.append([job.job_id, reason])
        if jobs:
            run.cursor = encode_time_cursor(jobs[-1].created_at, jobs[-1].pk)
        if len(jobs) < BATCH:
            run.finished_at = Now()
        run.save()
        run.refresh_from_db(fields=["finished_at"])
    return run


def _decide(run: BulkRun, job, attempt) -> str | None:
    """None when the decision was recorded; otherwise why the job was left alone."""
    if attempt is None:
        return "the job has no attempt"
    if attempt.updated_at > run.created_at:
        return "changed after you confirmed the run; left alone, look at it again"
    try:
        decisions.decide(run.decision, job_id=job.job_id, version=attempt.version, user=run.user, note=run.note,
                         evidence=run.evidence)
    except LedgerError as refused:
        return str(refused)
    return None


def label(run: BulkRun) -> str:
    return REGISTRY[run.decision].label
