"""Searching the history: the ledger's events and the changes made in /admin/.

The audit page and its CSV exports share one filter."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from console.access import TenantFence
from console.models import AdminAuditEntry
from console.pagination import Page, decode_id_cursor, take_page
from ledger.models import LedgerEvent
from sso.models import SignInEvent


@dataclass(frozen=True)
class AuditFilter:
    job: str = ""
    key: str = ""
    actor: str = ""
    kind: str = ""
    since: datetime | None = None
    until: datetime | None = None
    before: str = ""
    size: int = 100


def audit_events(spec: AuditFilter, fence: TenantFence):
    """Matching events of the fenced tenants' jobs, newest first, with the job and attempt."""
    events = fence.apply(LedgerEvent.objects.select_related("job", "attempt").order_by("-id"))
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


def audit_page(spec: AuditFilter, fence: TenantFence) -> Page:
    events = audit_events(spec, fence)
    before = decode_id_cursor(spec.before)
    if before is not None:
        events = events.filter(id__lt=before)
    return take_page(events, spec.size, lambda event: str(event.pk))


def admin_changes(spec: AuditFilter):
    """Changes to users, groups and tenant scopes, newest first. Only the actor and the time
    filters apply: a job, key or event kind names ledger events, so it matches no change here."""
    entries = AdminAuditEntry.objects.order_by("-id")
    if spec.job or spec.key or spec.kind:
        return entries.none()
    if spec.actor:
        entries = entries.filter(actor=spec.actor)
    if spec.since:
        entries = entries.filter(at__gte=spec.since)
    if spec.until:
        entries = entries.filter(at__lt=spec.until)
    return entries


def sign_ins(spec: AuditFilter):
    """The sign-in trail, newest first; only the actor and the time filters apply."""
    events = SignInEvent.objects.order_by("-id")
    if spec.job or spec.key or spec.kind:
        return events.none()
    if spec.actor:
        events = events.filter(username=spec.actor)
    if spec.since:
        events = events.filter(at__gte=spec.since)
    if spec.until:
        events = events.filter(at__lt=spec.until)
    return events
