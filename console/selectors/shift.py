""""My shift": what one person decided, held and commented since they signed in, or in a range.

Read from the ledger's events by the person's name over the (kind, at) index, each section bounded:
a shift is hours, not the history."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.utils import timezone

from console.access import TenantFence
from console.models import SignInEvent
from ledger.models import Job, LedgerEvent
from ledger.states import EventKind

MOST = 500  # rows per section; the page says when there are more
DECIDED = tuple(k for k in EventKind if k.startswith("operator_")) + (
    EventKind.APPROVAL_GRANTED, EventKind.APPROVAL_REJECTED)
HELD = (EventKind.JOB_TAKEN, EventKind.JOB_RELEASED)
COMMENTED = (EventKind.JOB_COMMENTED,)
# Without a sign-in on record (a session older than the trail), a shift is taken as this long.
DEFAULT_SHIFT = timedelta(hours=12)


@dataclass
class Shift:
    since: datetime
    until: datetime | None
    signed_in_at: datetime | None  # None: the range was asked for, or no sign-in is on record
    decided: list[LedgerEvent] = field(default_factory=list)
    held: list[LedgerEvent] = field(default_factory=list)
    commented: list[LedgerEvent] = field(default_factory=list)
    holding: list[Job] = field(default_factory=list)

    @property
    def full(self) -> bool:
        return any(len(section) >= MOST for section in (self.decided, self.held, self.commented))


def signed_in_at(user) -> datetime | None:
    """When this person's current shift began: their latest sign-in on the trail, else Django's last login."""
    at = (SignInEvent.objects.filter(user_pk=user.pk, kind__in=(SignInEvent.SIGNED_IN, SignInEvent.BREAK_GLASS))
          .order_by("-id").values_list("at", flat=True).first())
    return at or user.last_login


def my_shift(user, fence: TenantFence, *, since: datetime | None = None, until: datetime | None = None) -> Shift:
    began = None
    if since is None:
        began = signed_in_at(user)
        since = began or timezone.now() - DEFAULT_SHIFT
    name = user.get_username()
    events = fence.apply(LedgerEvent.objects.select_related("job", "attempt").filter(actor=name, at__gte=since))
    if until is not None:
        events = events.filter(at__lt=until)

    def section(kinds):
        return list(events.filter(kind__in=list(kinds)).order_by("-id")[:MOST])

    return Shift(since=since, until=until, signed_in_at=began, decided=section(DECIDED), held=section(HELD),
                 commented=section(COMMENTED),
                 holding=list(fence.jobs(Job.objects.filter(holder=name)).order_by("held_since")[:MOST]))
