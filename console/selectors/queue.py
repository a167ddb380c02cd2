"""The unknown-work queue: jobs that a human or the reconciler must resolve, oldest first; and
failed jobs, which wait for a retry or to be closed.

Every query here is bounded by the queue (the five unknown statuses, and failed) or by the page size,
never by the job history: one COUNT grouped by status, one page of jobs, one query for the
page's latest attempts, one for their latest telling events (the reason in each row).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Min, Q
from django.utils import timezone

from alerts.conditions import bound_text
from console.access import TenantFence
from console.pagination import Page, decode_time_cursor, encode_time_cursor, take_page
from console.selectors.job import hold_reason_of
from console.selectors.triage import attach_triage
from ledger.models import Attempt, Job, LedgerEvent
from ledger.states import QUEUE_TABS, UNKNOWN_WORK, EventKind, JobStatus

TABS = QUEUE_TABS  # the alerts link into these tabs too
MAY_HAVE_SENT, FAILED = TABS["human"][1], TABS["failed"][1]
QUEUED_STATUSES = tuple(status for _, statuses in TABS.values() for status in statuses)


@dataclass(frozen=True)
class QueueFilter:
    tab: str = "human"
    status: str = ""
    action: str = ""
    tenant: str = ""
    older_than: int | None = None  # minutes
    older_than_s: float | None = None  # seconds: an alert's bound, exactly
    search: str = ""
    newest_first: bool = False
    after: str = ""
    size: int = 50

    @property
    def narrowed(self) -> bool:
        """Whether anything beyond the tab narrows the list (an empty list then says no job matches)."""
        return bool(self.status or self.action or self.tenant or self.older_than or self.older_than_s
                    or self.search)

    @property
    def older_than_s_text(self) -> str:
        return bound_text(self.older_than_s) if self.older_than_s else ""

    @property
    def statuses(self) -> tuple[str, ...]:
        """The statuses listed: the tab's, or the one asked for; none for a status not in the tab."""
        allowed = TABS[self.tab][1]
        if not self.status:
            return tuple(s.value for s in allowed)
        return (self.status,) if self.status in allowed else ()

    @property
    def unknown_status(self) -> bool:
        """A status was asked for (a link, a typed URL) that the tab does not list."""
        return bool(self.status) and self.status not in TABS[self.tab][1]

    @property
    def tab_statuses(self) -> list[str]:
        return [s.value for s in TABS[self.tab][1]]


def unknown_work_counts(fence: TenantFence) -> dict[str, int]:
    """Jobs per unknown status (zeros included): a COUNT over the queue, not the history."""
    counts = fence.jobs(Job.objects.filter(status__in=UNKNOWN_WORK)).counts_by_status()
    return {status.value: counts.get(status.value, 0) for status in UNKNOWN_WORK}


def queue_status_counts(fence: TenantFence) -> dict[str, int]:
    """Jobs per status of every tab (the unknown work, then failed jobs not yet closed)."""
    counts = fence.jobs(Job.objects.filter(status__in=QUEUED_STATUSES)).counts_by_status()
    return {status.value: counts.get(status.value, 0) for status in (*UNKNOWN_WORK, *FAILED)}


def tab_counts(counts: dict[str, int]) -> dict[str, int]:
    """Jobs per tab, from per-status `counts` (a tab whose statuses are not counted there: 0)."""
    return {tab: sum(counts.get(s.value, 0) for s in statuses) for tab, (_, statuses) in TABS.items()}


# Work that may have reached its provider: the unknown work without the blocked jobs, which sent
# nothing (their identity check failed first). What the overview's "Unknown work" counts.
MAY_HAVE_REACHED = tuple(s for s in UNKNOWN_WORK if s != JobStatus.BLOCKED)


def oldest_unknown_at(fence: TenantFence) -> datetime | None:
    """The oldest job whose effect may have happened (blocked jobs sent nothing: not counted)."""
    jobs = fence.jobs(Job.objects.filter(status__in=MAY_HAVE_REACHED))
    return jobs.aggregate(oldest=Min("created_at"))["oldest"]


def filtered_jobs(spec: QueueFilter, fence: TenantFence):
    """Every job of the queue that the filter matches (no order, no page): what bulk runs take."""
    jobs = fence.jobs(Job.objects.filter(status__in=spec.statuses))
    if spec.action:
        jobs = jobs.filter(action=spec.action)
    if spec.tenant:
        jobs = jobs.filter(tenant__iexact=spec.tenant)
    if spec.older_than:
        jobs = jobs.filter(created_at__lt=timezone.now() - timedelta(minutes=spec.older_than))
    if spec.older_than_s:
        jobs = jobs.filter(created_at__lt=timezone.now() - timedelta(seconds=spec.older_than_s))
    if spec.search:
        # The start of an id or key, in any case, as people type it (the marker our providers
        # carry is the idempotency key itself). Bounded by the queue's statuses, like the rest.
        jobs = jobs.filter(Q(job_id__istartswith=spec.search) | Q(idempotency_key__istartswith=spec.search))
    return jobs


def in_queue_order(jobs, cursor: str, *, newest_first: bool = False):
    """`jobs` in the queue's order (created_at, id), after the keyset `cursor` (see pagination)."""
    cursor = decode_time_cursor(cursor)
    if newest_first:
        jobs = jobs.order_by("-created_at", "-id")
        if cursor:
            at, pk = cursor
            jobs = jobs.filter(Q(created_at__lt=at) | Q(created_at=at, id__lt=pk))
    else:
        jobs = jobs.order_by("created_at", "id")
        if cursor:
            at, pk = cursor
            jobs = jobs.filter(Q(created_at__gt=at) | Q(created_at=at, id__gt=pk))
    return jobs


def queue_jobs(spec: QueueFilter, fence: TenantFence) -> Page:
    """One page of the queue, each job with `latest` (its latest attempt) attached."""
    jobs = in_queue_order(filtered_jobs(spec, fence), spec.after, newest_first=spec.newest_first)
    jobs = jobs.only(
        "id",
        "job_id",
        "tenant",
        "action",
        "status",
        "created_at",
        "updated_at",
        "check_count",
        "next_check_at",
        "duplicate_deliveries",
        "identity",
        "holder",
        "held_since",
    )
    page = take_page(jobs, spec.size, lambda job: encode_time_cursor(job.created_at, job.pk))
    attach_latest_attempts(page.rows)
    attach_triage(page.rows)
    attach_handover(page.rows)
    return page


def attach_handover(jobs: list[Job]) -> None:
    """Give each job `hold_reason` (what its holder said they are doing) and `last_comment` (the
    latest comment event, or None): what the next shift reads in the row, in one query."""
    latest = (
        LedgerEvent.objects.filter(job_id__in=[job.pk for job in jobs],
                                   kind__in=(EventKind.JOB_TAKEN, EventKind.JOB_COMMENTED))
        .order_by("job_id", "kind", "-id").distinct("job_id", "kind")
        .only("job_id", "kind", "actor", "note", "evidence", "at")
    )
    by_job: dict[tuple[int, str], LedgerEvent] = {(e.job_id, e.kind): e for e in latest}
    for job in jobs:
        taken = by_job.get((job.pk, EventKind.JOB_TAKEN))
        job.hold_reason = hold_reason_of(taken) if job.holder and taken and taken.actor == job.holder else ""
        job.last_comment = by_job.get((job.pk, EventKind.JOB_COMMENTED))


def queue_tab_of(job: Job) -> str:
    """The queue tab the job is listed in (the first tab, once it left the queue)."""
    return next((key for key, (_, statuses) in TABS.items() if job.status in statuses), next(iter(TABS)))


def nothing_to_do_for(*, operates: bool, approves: bool) -> tuple[str, ...]:
    """The queue statuses where a viewer with these roles can decide nothing (skipped by "Next
    job"): an approval request is an approver's, everything else an operator's."""
    waiting = (JobStatus.AWAITING_APPROVAL.value,)
    if operates == approves:  # both roles, or neither (a reader reads every row)
        return ()
    return waiting if operates else tuple(s for s in QUEUED_STATUSES if s not in waiting)


def next_in_list(job: Job, spec: QueueFilter, fence: TenantFence, *, nothing_to_do: tuple[str, ...] = ()) -> Job | None:
    """The row after `job` in the list `spec` describes (its tab, filters and order), skipping
    jobs in `nothing_to_do` (statuses where the viewer can decide nothing): where "Next job" and
    `]` go. The job itself may have left the list (it was just decided): its place stays."""
    after = encode_time_cursor(job.created_at, job.pk)
    jobs = in_queue_order(filtered_jobs(spec, fence), after, newest_first=spec.newest_first).exclude(pk=job.pk)
    if nothing_to_do:
        jobs = jobs.exclude(status__in=nothing_to_do)
    return jobs.only("job_id").first()


def attach_latest_attempts(jobs: list[Job]) -> None:
    """Give each job its latest attempt as `job.latest`, in one query for the whole list."""
    latest = {
        attempt.job_id: attempt
        for attempt in Attempt.objects.filter(job_id__in=[job.pk for job in jobs]).latest_per_job()
    }
    for job in jobs:
        job.latest = latest.get(job.pk)
