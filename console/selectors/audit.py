"""Searching the history: the ledger's events and the changes made in /admin/.

The audit page and its CSV exports share one filter."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from console.access import TenantFence
from console.models import AdminAuditEntry, SignInEvent
from console.pagination import Page, decode_id_cursor, take_page
from console.selectors import without_parallel_workers
from console.selectors.search import matching_ids
from ledger.models import LedgerEvent

# A search's events are those of the newest matching jobs, at most this many (the page says so):
# each job's events come from its own index entries, so a search costs the same at any size.
AUDIT_JOBS = 500


@dataclass(frozen=True)
class AuditFilter:
    q: str = ""  # the console search's query: any part of an id, key, marker, payload or answer
    job: str = ""
    key: str = ""
    actor: str = ""
    kind: str = ""
    since: datetime | None = None
    until: datetime | None = None
    before: str = ""
    size: int = 100


def found_jobs(spec: AuditFilter, fence: TenantFence) -> list[int] | None:
    """The jobs the search finds (newest first, one past AUDIT_JOBS to tell whether more match),
    or None without a search."""
    return matching_ids(spec.q, fence, AUDIT_JOBS + 1) if spec.q else None


def audit_events(spec: AuditFilter, fence: TenantFence, found: list[int] | None = None):
    """Matching events of the fenced tenants' jobs, newest first, with the job and attempt."""
    events = fence.apply(LedgerEvent.objects.select_related("job", "attempt").order_by("-id"))
    if spec.q:
        events = events.filter(job_id__in=(found_jobs(spec, fence) if found is None else found)[:AUDIT_JOBS])
    if spec.job:
        events = events.filter(job__job_id=spec.job)
    if spec.key:
        events = events.filter(job__idempotency_key=spec.key)
    if spec.actor:
        events = events.filter(actor=spec.actor)
    if spec.kind:
        events = events.filter(kind=spec.kind)
    if spec.since:
        events = events.filter(at__gte=spec.since)
    if spec.until:
        events = events.filter(at__lt=spec.until)
    return events


def audit_page(spec: AuditFilter, fence: TenantFence, found: list[int] | None = None) -> Page:
    events = audit_events(spec, fence, found)
    before = decode_id_cursor(spec.before)
    if before is not None:
        events = events.filter(id__lt=before)
    with without_parallel_workers():
        return take_page(events, spec.size, lambda event: str(event.pk))


def admin_changes(spec: AuditFilter):
    """Changes to users, groups and tenant scopes, newest first. Only the actor and the time
    filters apply: a search, a job, key or event kind names ledger events, so it matches no change here."""
    return _people_trail(AdminAuditEntry.objects.order_by("-id"), spec, actor_field="actor")


def sign_ins(spec: AuditFilter):
    """The sign-in trail, newest first; only the actor and the time filters apply, as above."""
    return _people_trail(SignInEvent.objects.order_by("-id"), spec, actor_field="username")


def _people_trail(entries, spec: AuditFilter, *, actor_field: str):
    if spec.q or spec.job or spec.key or spec.kind:
        return entries.none()
    if spec.actor:
        entries = entries.filter(**{actor_field: spec.actor})
    if spec.since:
        entries = entries.filter(at__gte=spec.since)
    if spec.until:
        entries = entries.filter(at__lt=spec.until)
    return entries
